//! What a program's output costs on its way to the terminal: `flood`
//! writes numbered lines, one write(2) each, and the harness reads them.
//!
//! atoll's console holds a prepared process to 64 KiB of output on its way
//! (`CONSOLE_WINDOW`): past it, the process waits until the console has
//! passed its output on. An unprepared module cannot wait, so its row is
//! the console without that bound (and without Asyncify's instrumentation);
//! native flood, the same C, writes to a pipe the harness reads. All three
//! must print the same lines.

use std::path::Path;

use super::{
    artifact, atoll_job, command_line, job_on_kernel0, median, native, Machine, Report, Row,
};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Lines each run writes
    #[arg(long, default_value_t = 1_000_000)]
    lines: u32,
    /// Runs of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let exe = artifact(build, "native/flood")?;
    let wasm = std::path::absolute(artifact(build, "wasm/flood.wasm")?)?;
    let node = atoll_node::Node::start(super::bench_node(ctx, Some(1)))?;
    let args = vec![a.lines.to_string()];
    let job = |prepare: bool| atoll_node::JobSpec {
        prepare,
        ..job_on_kernel0(wasm.clone(), vec!["flood".into(), a.lines.to_string()])
    };
    node.runtime().load_file(&wasm, false)?;
    node.runtime().load_file(&wasm, true)?;
    let expected: String = (1..=a.lines).map(|i| format!("line {i}\n")).collect();
    let mb = expected.len() as f64 / 1e6;
    let check = |what: &str, out: &str| -> anyhow::Result<()> {
        if out != expected {
            anyhow::bail!("{what} printed other lines than 1..{}", a.lines);
        }
        Ok(())
    };
    let (mut bounded, mut unbounded, mut pipe) = (vec![], vec![], vec![]);
    for run in 0..a.runs {
        progress::say(format!("bench console: run {}/{}", run + 1, a.runs));
        let (out, t) = atoll_job(&node, &job(true))?;
        check("atoll (prepared)", &out)?;
        bounded.push(mb / t.as_secs_f64());
        let (out, t) = atoll_job(&node, &job(false))?;
        check("atoll (unprepared)", &out)?;
        unbounded.push(mb / t.as_secs_f64());
        let (out, t) = native(&exe, &args)?;
        check("native", &out)?;
        pipe.push(mb / t.as_secs_f64());
    }
    node.shutdown();
    let row = |name: &str, samples: Vec<f64>| Row {
        name: name.into(),
        median: median(&samples),
        samples,
        atoll_ratio: None,
    };
    let mut report = Report {
        name: "console".into(),
        command: command_line(),
        machine: Machine::probe(),
        unit: "MB/s of output, one write per line".into(),
        higher_is_better: true,
        rows: vec![
            row("atoll console, 64 KiB window (prepared)", bounded),
            row("atoll console, unbounded (unprepared)", unbounded),
            row("native write(2) to a pipe", pipe),
        ],
        notes: vec![
            format!(
                "{} lines ({mb:.1} MB) per run; each line is one write(2) of 7 to 15 bytes",
                a.lines
            ),
            "the unprepared row lacks two things: the window (no drain every 64 KiB) and \
             Asyncify's instrumentation of the guest (no unwind checks after each call)"
                .into(),
        ],
    };
    report.ratios_against("atoll console, 64 KiB window (prepared)");
    Ok(report)
}
