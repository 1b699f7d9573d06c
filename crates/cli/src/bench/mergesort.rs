//! The mergesort example native, as plain wasm, and prepared (migratable).
//!
//! All three must print the same checksums; the benchmark refuses to report
//! times for outputs that differ.

use std::path::Path;

use super::{
    artifact, atoll_job, command_line, job_on_kernel0, median, native, Machine, Report, Row,
};
use crate::commands::Context;
use crate::progress;

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
    let (mut t_native, mut t_plain, mut t_prepared) = (vec![], vec![], vec![]);
    let mut expected: Option<String> = None;
    let mut check = |what: &str, out: String| -> anyhow::Result<()> {
        match &expected {
            None => expected = Some(out),
            Some(e) if *e != out => {
                anyhow::bail!("{what} printed something else than native:\n{out}\nvs\n{e}")
            }
            Some(_) => {}
        }
        Ok(())
    };
    for run in 0..a.runs {
        progress::say(format!("bench mergesort: run {}/{}", run + 1, a.runs));
        let (out, t) = native(&exe, &args)?;
        check("native", out)?;
        t_native.push(t.as_secs_f64());
        let (out, t) = atoll_job(&node, &job(false))?;
        check("plain wasm", out)?;
        t_plain.push(t.as_secs_f64());
        let (out, t) = atoll_job(&node, &job(true))?;
        check("prepared wasm", out)?;
        t_prepared.push(t.as_secs_f64());
    }
    node.shutdown();
    let (m_native, m_plain, m_prepared) =
        (median(&t_native), median(&t_plain), median(&t_prepared));
    let mut report = Report {
        name: "mergesort".into(),
        command: command_line(),
        machine: Machine::probe(),
        unit: "seconds".into(),
        higher_is_better: false,
        rows: vec![
            Row { name: "atoll prepared wasm (migratable)".into(), median: m_prepared, samples: t_prepared, atoll_ratio: None },
            Row { name: "atoll plain wasm (--no-prepare)".into(), median: m_plain, samples: t_plain, atoll_ratio: None },
            Row { name: "native gcc -O2".into(), median: m_native, samples: t_native, atoll_ratio: None },
        ],
        notes: vec![
            format!("mergesort of {} int32, {} rounds, identical checksums in all three", a.n, a.rounds),
            format!("prepared / native = {:.2}x, prepared / plain = {:.2}x, plain / native = {:.2}x", m_prepared / m_native, m_prepared / m_plain, m_plain / m_native),
            "native includes process start-up (fork+exec of a dynamic binary); atoll includes instantiation".into(),
            "target (issue 2): prepared wasm within 1.5x of native".into(),
        ],
    };
    report.ratios_against("atoll prepared wasm (migratable)");
    Ok(report)
}
