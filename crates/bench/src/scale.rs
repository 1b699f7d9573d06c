//! Many processes alive at once: atoll processes blocked in IPC receive
//! (most of them dormant, out of any instance) against Linux processes
//! blocked in read(2), in one run.
//!
//! Both sides run the same scenario (`bench/guests/swarm.c`,
//! `bench/native/swarm_native.c`): start N processes that each signal the
//! parent and block; hold them all while memory is measured; then send each
//! a request, take its answer and reap it. Memory is the drop in the
//! machine's `MemAvailable` while all N wait, divided by N: the same
//! measure for both, covering everything each side allocates (page tables,
//! kernel stacks, task structures for Linux; images, tables and the pool
//! for atoll).

use std::io::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use atoll_abi::Pid;
use atoll_node::{JobSink, JobSpec, Node};
use atoll_process::{Preopen, Stream};
use schemars::JsonSchema;
use serde::Serialize;

use super::{
    artifact, command_line, field, job_on_kernel0, md_table, median, page_head, text_table,
    Machine, Recorded,
};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// atoll processes alive at once
    #[arg(long, default_value_t = 100_000)]
    n: u32,
    /// Linux processes alive at once [default: --n, or what pid_max leaves]
    #[arg(long)]
    native_n: Option<u32>,
    /// Runs of each; medians are reported
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Kernels of the node [default: one per core]
    #[arg(long)]
    kernels: Option<u16>,
}

/// One side's run.
#[derive(Clone, Copy, Serialize, JsonSchema)]
struct Sample {
    /// Processes started and blocked per second (first start to last ready).
    start_rate: f64,
    /// Drop of MemAvailable per waiting process, in bytes.
    bytes_per_process: f64,
    /// Requests answered and processes reaped per second.
    answer_rate: f64,
}

#[derive(Serialize, JsonSchema)]
pub struct ScaleReport {
    name: String,
    command: String,
    machine: Machine,
    runs: usize,
    atoll_n: u32,
    linux_n: u32,
    atoll: Vec<Sample>,
    linux: Vec<Sample>,
    notes: Vec<String>,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<ScaleReport> {
    let swarm = artifact(build, "wasm/swarm.wasm")?;
    let native = artifact(build, "native/swarm_native")?;
    let linux_n = a.native_n.unwrap_or_else(|| a.n.min(pids_left()));
    let config = super::bench_node(ctx, a.kernels);
    let instances = config.runtime.instances;
    let hold = tempfile::tempdir()?;
    let (mut atoll, mut linux) = (Vec::new(), Vec::new());
    for run in 0..a.runs {
        progress::note(&format!("atoll: scale run {}/{}", run + 1, a.runs));
        // A node per run, so that each run's memory is its own.
        let node = Node::start(config.clone())?;
        node.runtime().load_file(&swarm, true)?;
        let sample = atoll_run(&node, &swarm, a.n, hold.path());
        node.shutdown();
        give_back_heap();
        atoll.push(sample?);
        linux.push(linux_run(&native, linux_n, hold.path())?);
    }
    let kernels = a
        .kernels
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u16));
    Ok(ScaleReport {
        name: "scale".into(),
        command: command_line(),
        machine: Machine::probe(),
        runs: a.runs,
        atoll_n: a.n,
        linux_n,
        atoll,
        linux,
        notes: vec![
            format!(
                "atoll: {} processes on {kernels} kernels, the pool holding {instances} \
                 instances: the others wait dormant, as images",
                a.n
            ),
            format!(
                "Linux: {linux_n} forked processes (pid_max {} allows {} more here)",
                read_number("/proc/sys/kernel/pid_max").unwrap_or(0),
                pids_left()
            ),
            "memory: drop of MemAvailable while all wait, per process".into(),
            "target (issue 10): 100,000 processes blocked in receive on one node in 24 GiB".into(),
        ],
    })
}

/// Runs `swarm N HOLD` on the node and measures it.
fn atoll_run(node: &Node, swarm: &Path, n: u32, hold: &Path) -> anyhow::Result<Sample> {
    let go = hold.join("go");
    let _ = std::fs::remove_file(&go);
    let before = mem_available()?;
    let (tx, rx) = mpsc::channel();
    let job = JobSpec {
        preopens: vec![Preopen {
            host: hold.to_path_buf(),
            guest: "/hold".into(),
        }],
        ..job_on_kernel0(
            std::path::absolute(swarm)?,
            vec!["swarm".into(), n.to_string(), "/hold/go".into()],
        )
    };
    node.run_job(
        &job,
        Box::new(Lines {
            line: Vec::new(),
            tx,
        }),
    )?;
    measure(n, before, &go, || {
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(Event::Line(l)) => Ok(Some(l)),
            Ok(Event::Exited(0)) => Ok(None),
            Ok(Event::Exited(s)) => bail!("swarm exited with status {s}"),
            Err(_) => bail!("swarm did not finish"),
        }
    })
}

/// Runs `swarm_native N HOLD` and measures it.
fn linux_run(native: &Path, n: u32, hold: &Path) -> anyhow::Result<Sample> {
    use std::io::BufRead as _;
    let go = hold.join("go");
    let _ = std::fs::remove_file(&go);
    let before = mem_available()?;
    let mut child = std::process::Command::new(native)
        .args([n.to_string(), go.display().to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", native.display()))?;
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
    let sample = measure(n, before, &go, || match lines.next() {
        Some(l) => Ok(Some(l?)),
        None => Ok(None),
    });
    let status = child.wait()?;
    if !status.success() {
        bail!("{} failed: {status}", native.display());
    }
    sample
}

/// Reads a swarm's output: its ready line, then (memory measured, the hold
/// file made) its done line.
fn measure(
    n: u32,
    before: u64,
    go: &Path,
    mut next: impl FnMut() -> anyhow::Result<Option<String>>,
) -> anyhow::Result<Sample> {
    let ready = next()?.context("swarm ended before it was ready")?;
    // Let the last processes reach their receive.
    std::thread::sleep(Duration::from_millis(500));
    let during = mem_available()?;
    std::fs::write(go, b"")?;
    let done = next()?.context("swarm ended without its result")?;
    while next()?.is_some() {}
    if field(&done, "answered")? as u32 != n {
        bail!("not every process answered: {}", done.trim());
    }
    Ok(Sample {
        start_rate: f64::from(n) / field(&ready, "seconds")?,
        bytes_per_process: before.saturating_sub(during) as f64 / f64::from(n),
        answer_rate: f64::from(n) / field(&done, "seconds")?,
    })
}

enum Event {
    Line(String),
    Exited(i32),
}

/// Hands a job's stdout on line by line.
struct Lines {
    line: Vec<u8>,
    tx: mpsc::Sender<Event>,
}

impl JobSink for Lines {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        if stream == Stream::Stderr {
            let _ = std::io::stderr().write_all(bytes);
            return;
        }
        for &b in bytes {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&std::mem::take(&mut self.line)).into_owned();
                let _ = self.tx.send(Event::Line(line));
            } else {
                self.line.push(b);
            }
        }
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        let _ = self.tx.send(Event::Exited(status));
    }
}

/// Returns the memory freed by a run to the system, so that the next run's
/// drop of MemAvailable is its own.
fn give_back_heap() {
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn mem_available() -> anyhow::Result<u64> {
    let info = std::fs::read_to_string("/proc/meminfo")?;
    info.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib << 10)
        .context("no MemAvailable in /proc/meminfo")
}

fn read_number(path: impl AsRef<Path>) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Processes that can still be started before pid_max (less a margin for
/// the rest of the machine).
fn pids_left() -> u32 {
    let max = read_number("/proc/sys/kernel/pid_max").unwrap_or(32_768);
    let used = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
                .count() as u64
        })
        .unwrap_or(0);
    max.saturating_sub(used + 2_000) as u32
}

const HEAD: [&str; 4] = ["measure", "atoll", "Linux", "atoll vs Linux"];

impl ScaleReport {
    fn rows(&self) -> Vec<[String; 4]> {
        let m = |s: &[Sample], f: fn(&Sample) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
        let row = |name: &str, f: fn(&Sample) -> f64, scale: f64, higher_better: bool| {
            let (a, l) = (m(&self.atoll, f), m(&self.linux, f));
            let ratio = if higher_better { a / l } else { l / a };
            [
                name.to_string(),
                format!("{:.1}", a / scale),
                format!("{:.1}", l / scale),
                format!("{ratio:.2}x better"),
            ]
        };
        vec![
            [
                "processes alive at once".into(),
                self.atoll_n.to_string(),
                self.linux_n.to_string(),
                String::new(),
            ],
            row(
                "memory per waiting process (KiB)",
                |s| s.bytes_per_process,
                1024.0,
                false,
            ),
            row(
                "started and blocked (processes/s)",
                |s| s.start_rate,
                1.0,
                true,
            ),
            row(
                "answered and reaped (processes/s)",
                |s| s.answer_rate,
                1.0,
                true,
            ),
        ]
    }
}

impl Recorded for ScaleReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!("{} (medians of {} runs)\n", self.name, self.runs);
        s += &text_table(HEAD, &self.rows());
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += &format!("Medians of {} runs.\n\n", self.runs);
        s += &md_table(HEAD, &self.rows());
        s += "\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }
}
