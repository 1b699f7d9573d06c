//! How long a module takes to its first run: `atoll prepare` (walrus and
//! binaryen's Asyncify) and wasmtime compiling the prepared module, each
//! time with an empty cache, against wasmtime compiling the module as it
//! is, the alternative a wasmtime user has. Later runs load both from the
//! cache and pay neither.

use std::path::Path;
use std::time::{Duration, Instant};

use atoll_process::{Runtime, RuntimeConfig};

use super::{artifact, command_line, median, Machine, Report, Row};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Modules under build/wasm to load, by name
    #[arg(long, value_delimiter = ',', default_value = "mergesort,bzip2,hpl,qjs")]
    modules: Vec<String>,
    /// Loads of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let config = ctx.node_config(Some(1), 10).runtime;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for name in &a.modules {
        let wasm = artifact(build, &format!("wasm/{name}.wasm"))?;
        let bytes = std::fs::read(&wasm)?;
        let kib = bytes.len() as f64 / 1024.0;
        let (mut atoll, mut plain) = (Vec::new(), Vec::new());
        for run in 0..a.runs {
            progress::say(format!(
                "bench prepare: {name}, load {}/{}",
                run + 1,
                a.runs
            ));
            atoll.push(cold_load(&config, &bytes, true)?.as_secs_f64());
            plain.push(cold_load(&config, &bytes, false)?.as_secs_f64());
        }
        let (m_atoll, m_plain) = (median(&atoll), median(&plain));
        notes.push(format!(
            "{name}.wasm, {kib:.0} KiB: first run ready in {m_atoll:.2} s, {:.2} s per 100 KiB; {:.1}x wasmtime's compile",
            m_atoll / kib * 100.0,
            m_atoll / m_plain
        ));
        rows.push(Row {
            name: format!("{name}: prepare + compile"),
            median: m_atoll,
            samples: atoll,
            atoll_ratio: None,
        });
        rows.push(Row {
            name: format!("{name}: wasmtime compile only"),
            median: m_plain,
            samples: plain,
            atoll_ratio: Some(m_plain / m_atoll),
        });
    }
    notes.push("each load with an empty cache, on a runtime of its own; a module loaded again comes from the cache".into());
    notes.push("target (issue 10): a 500 KiB module ready in under 2 s".into());
    Ok(Report {
        name: "prepare".into(),
        command: command_line(),
        machine: Machine::probe(),
        unit: "seconds".into(),
        higher_is_better: false,
        rows,
        notes,
    })
}

/// Loads `bytes` on a new runtime with an empty cache: preparation (if
/// `prepare`), compilation and linking, as a node's first run of it does.
fn cold_load(config: &RuntimeConfig, bytes: &[u8], prepare: bool) -> anyhow::Result<Duration> {
    let cache = tempfile::Builder::new()
        .prefix("atoll-bench-prepare")
        .tempdir()?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        instances: 8,
        ..config.clone()
    })?;
    let started = Instant::now();
    runtime.load(bytes, prepare)?;
    Ok(started.elapsed())
}
