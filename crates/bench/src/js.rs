//! QuickJS (Debian's source, unmodified; bench/qjs/qjs.c as its main)
//! running bench/qjs/workload.js native, as plain wasm and prepared: a
//! bytecode interpreter, the kind of large real program whose hot loop
//! (one iteration per bytecode, calls in almost every case) is where
//! preparation costs most. All three must print the same lines.

use std::path::Path;

use atoll_process::Preopen;

use super::three_ways::{self, Way};
use super::{artifact, atoll_job, job_on_kernel0, native, Report};
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Rounds of the workload (each: primes, a sort of records, strings and
    /// regular expressions, JSON, a small matrix product)
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// The script to run
    #[arg(long, default_value = "bench/qjs/workload.js")]
    script: std::path::PathBuf,
    /// Runs of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// Where the program sees the script's directory.
const GUEST_DIR: &str = "/js";

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let exe = artifact(build, "native/qjs")?;
    let wasm = std::path::absolute(artifact(build, "wasm/qjs.wasm")?)?;
    let script = std::path::absolute(&a.script)?;
    anyhow::ensure!(script.is_file(), "{}: no such script", script.display());
    // An absolute path to a file has both.
    let (dir, file) = (script.parent().unwrap(), script.file_name().unwrap());
    let in_guest = format!("{GUEST_DIR}/{}", file.to_string_lossy());
    let node = atoll_node::Node::start(super::bench_node(ctx, Some(1)))?;
    let rounds = a.rounds.to_string();
    let job = |prepare: bool| atoll_node::JobSpec {
        prepare,
        preopens: vec![Preopen {
            host: dir.to_path_buf(),
            guest: GUEST_DIR.into(),
        }],
        ..job_on_kernel0(
            wasm.clone(),
            ["qjs", &in_guest, &rounds].map(String::from).to_vec(),
        )
    };
    node.runtime().load_file(&wasm, false)?;
    node.runtime().load_file(&wasm, true)?;
    let report = three_ways::compare(
        "js",
        a.runs,
        format!(
            "QuickJS 2025-04-26 running {}, {} rounds; the same lines from all three",
            a.script.display(),
            a.rounds
        ),
        |way| {
            let (out, t) = match way {
                Way::Native => native(&exe, &[script.display().to_string(), rounds.clone()])?,
                Way::Plain => atoll_job(&node, &job(false))?,
                Way::Prepared => atoll_job(&node, &job(true))?,
            };
            Ok((t, out.into_bytes()))
        },
    );
    node.shutdown();
    report
}
