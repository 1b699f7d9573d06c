//! Spawn-to-exit rate of a tiny program.
//!
//! atoll: `spawnbench` spawns N children of its own module on any kernel,
//! keeping some in flight, and waits for them all (a process creation is an
//! instantiation of a compiled module; no OS process, no exec). Linux: the
//! same loop with fork+exec and posix_spawn of a tiny native binary, and
//! pthread create+join, one at a time and with as many in flight as atoll.

use std::path::Path;

use super::{
    artifact, atoll_job, command_line, field, job_on_kernel0, median, native, Machine, Report, Row,
};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Children atoll spawns per run
    #[arg(long, default_value_t = 20_000)]
    n: u32,
    /// Children kept in flight by the atoll spawner
    #[arg(long, default_value_t = 64)]
    inflight: u32,
    /// Processes (threads) per run for the Linux mechanisms
    #[arg(long, default_value_t = 2_000)]
    native_n: u32,
    /// Runs of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Kernels of the node [default: one per core]
    #[arg(long)]
    kernels: Option<u16>,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let spawn_native = artifact(build, "native/spawn_native")?;
    let target = artifact(build, "native/true")?;
    let spawnbench = artifact(build, "wasm/spawnbench.wasm")?;
    let node = atoll_node::Node::start(super::bench_node(ctx, a.kernels))?;
    node.runtime().load_file(&spawnbench, true)?;
    let job = job_on_kernel0(
        std::path::absolute(&spawnbench)?,
        vec!["spawnbench".into(), a.n.to_string(), a.inflight.to_string()],
    );
    let mut rows = Vec::new();
    let mut atoll = Vec::new();
    // Each Linux mechanism one at a time, and with atoll's window.
    let windows = [1, a.inflight];
    let mut natives: Vec<(&str, u32, Vec<f64>)> = ["fork_exec", "posix_spawn", "pthread"]
        .into_iter()
        .flat_map(|mode| windows.map(|w| (mode, w, vec![])))
        .collect();
    // Interleave the mechanisms so drift in the machine affects all alike.
    for run in 0..a.runs {
        progress::say(format!("bench spawn: run {}/{}", run + 1, a.runs));
        let (out, _) = atoll_job(&node, &job)?;
        atoll.push(field(&out, "rate")?);
        for (mode, window, samples) in &mut natives {
            let n = if *mode == "pthread" {
                a.native_n * 10
            } else {
                a.native_n
            };
            let args = [
                mode.to_string(),
                n.to_string(),
                window.to_string(),
                target.display().to_string(),
            ];
            let (out, _) = native(&spawn_native, &args)?;
            samples.push(field(&out, "rate")?);
        }
    }
    node.shutdown();
    rows.push(Row {
        name: "atoll spawn+wait (wasm process)".into(),
        median: median(&atoll),
        samples: atoll,
        atoll_ratio: None,
    });
    for (mode, window, samples) in natives {
        let name = match mode {
            "fork_exec" => "Linux fork+exec+wait",
            "posix_spawn" => "Linux posix_spawn+wait",
            _ => "Linux pthread create+join",
        };
        let how = match window {
            1 => "one at a time".to_string(),
            w => format!("{w} in flight"),
        };
        rows.push(Row {
            name: format!("{name}, {how}"),
            median: median(&samples),
            samples,
            atoll_ratio: None,
        });
    }
    let mut report = Report {
        name: "spawn".into(),
        command: command_line(),
        machine: Machine::probe(),
        unit: "processes/s".into(),
        higher_is_better: true,
        rows,
        notes: vec![
            format!(
                "atoll: {} children per run, {} in flight, spread over {} kernels",
                a.n,
                a.inflight,
                node_kernels(a.kernels)
            ),
            format!(
                "Linux: {} processes per run ({} threads), one at a time and {} in flight (processes reaped as they end, threads joined in order)",
                a.native_n,
                a.native_n * 10,
                a.inflight
            ),
            "target (issue 10): 200,000 processes/s on one node".into(),
        ],
    };
    report.ratios_against("atoll spawn+wait (wasm process)");
    Ok(report)
}

fn node_kernels(k: Option<u16>) -> u16 {
    k.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u16))
}
