//! The mergesort example native, as plain wasm, and prepared (migratable).
//!
//! All three must print the same checksums.

use std::path::Path;

use super::three_ways::{self, Way};
use super::{artifact, atoll_job, job_on_kernel0, native, Report};
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Elements to sort
    #[arg(long, default_value_t = 1_000_000)]
    n: u32,
    /// Sorting rounds per run
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Runs of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let exe = artifact(build, "native/mergesort")?;
    let wasm = std::path::absolute(artifact(build, "wasm/mergesort.wasm")?)?;
    let node = atoll_node::Node::start(super::bench_node(ctx, Some(1)))?;
    let args = vec![a.n.to_string(), "1".into(), a.rounds.to_string()];
    let job = |prepare: bool| atoll_node::JobSpec {
        prepare,
        ..job_on_kernel0(
            wasm.clone(),
            std::iter::once("mergesort".to_string())
                .chain(args.clone())
                .collect(),
        )
    };
    node.runtime().load_file(&wasm, false)?;
    node.runtime().load_file(&wasm, true)?;
    let report = three_ways::compare(
        "mergesort",
        a.runs,
        format!(
            "mergesort of {} int32, {} rounds, identical checksums in all three",
            a.n, a.rounds
        ),
        |way| {
            let (out, t) = match way {
                Way::Native => native(&exe, &args)?,
                Way::Plain => atoll_job(&node, &job(false))?,
                Way::Prepared => atoll_job(&node, &job(true))?,
            };
            Ok((t, out.into_bytes()))
        },
    );
    node.shutdown();
    report
}
