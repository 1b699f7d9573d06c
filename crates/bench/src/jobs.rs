//! Running what is measured: built programs, native runs, atoll jobs on a
//! benchmark's node, and reading what they print.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atoll_abi::Pid;
use atoll_node::{JobSink, JobSpec, Node};
use atoll_process::Stream;

use crate::Context;

/// A built artifact, with a hint when it is missing.
pub fn artifact(build: &Path, rel: &str) -> anyhow::Result<PathBuf> {
    let p = build.join(rel);
    if !p.exists() {
        bail!(
            "{} is missing: run `make all` first (or pass --build DIR)",
            p.display()
        );
    }
    Ok(p)
}

/// Runs a native program; returns its stdout and the wall time.
pub fn native(program: &Path, args: &[String]) -> anyhow::Result<(String, Duration)> {
    let t = Instant::now();
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    let elapsed = t.elapsed();
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            program.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), elapsed))
}

/// The node a benchmark runs on: `kernels` kernels, a 10 ms quantum, and
/// no balancer, since every benchmark but `balance` places its processes
/// itself (a migration experiment moves a process away on purpose, and the
/// balancer would move one back).
pub fn bench_node(ctx: &Context, kernels: Option<u16>) -> atoll_node::NodeConfig {
    let mut config = ctx.node_config(kernels, 10);
    config.balance = false;
    config
}

/// A benchmark's job: `program` (prepared) with argv `args`, on kernel 0
/// of node 0, with no environment or files.
pub fn job_on_kernel0(program: PathBuf, args: Vec<String>) -> JobSpec {
    JobSpec {
        program,
        args,
        env: vec![],
        preopens: vec![],
        kernel: Some(atoll_abi::KernelId::new(0, 0)),
        prepare: true,
        domain: None,
        wander: false,
        limits: Default::default(),
        ranks: None,
        pin: false,
    }
}

/// Runs a job on `node` to its end; returns its stdout and the wall time
/// from submission to exit. Load the program first so compilation is not
/// timed.
pub fn atoll_job(node: &Node, job: &JobSpec) -> anyhow::Result<(String, Duration)> {
    atoll_job_marked(node, job, None)
}

/// As [`atoll_job`]; with `marked`, its sender is told when the job first
/// prints its marker on stdout.
pub fn atoll_job_marked(
    node: &Node,
    job: &JobSpec,
    marked: Option<(&'static str, mpsc::Sender<Instant>)>,
) -> anyhow::Result<(String, Duration)> {
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    node.run_job(
        job,
        Box::new(Collect {
            out: Vec::new(),
            done: tx,
            marked,
        }),
    )?;
    let (status, out) = rx.recv().context("node stopped")?;
    let elapsed = t.elapsed();
    if status != 0 {
        bail!(
            "{} exited with status {status}: {}",
            job.program.display(),
            String::from_utf8_lossy(&out)
        );
    }
    Ok((String::from_utf8_lossy(&out).into_owned(), elapsed))
}

struct Collect {
    out: Vec<u8>,
    done: mpsc::Sender<(i32, Vec<u8>)>,
    /// A marker not printed yet, and who waits for it.
    marked: Option<(&'static str, mpsc::Sender<Instant>)>,
}

impl JobSink for Collect {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => {
                self.out.extend_from_slice(bytes);
                if let Some((marker, _)) = &self.marked {
                    if String::from_utf8_lossy(&self.out).contains(marker) {
                        let _ = self.marked.take().map(|(_, to)| to.send(Instant::now()));
                    }
                }
            }
            Stream::Stderr => {
                let _ = std::io::stderr().write_all(bytes);
            }
        }
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        let _ = self.done.send((status, std::mem::take(&mut self.out)));
    }
}

/// A job's sink that says once when the job printed `marker` (`true`), or
/// ended before it did (`false`); the rest of the output is dropped.
pub struct ReadyWhen {
    pub marker: &'static str,
    pub seen: Vec<u8>,
    pub ready: Option<mpsc::Sender<bool>>,
}

impl ReadyWhen {
    pub fn new(marker: &'static str, ready: mpsc::Sender<bool>) -> Box<ReadyWhen> {
        Box::new(ReadyWhen {
            marker,
            seen: Vec::new(),
            ready: Some(ready),
        })
    }
}

impl JobSink for ReadyWhen {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        if stream == Stream::Stdout && self.ready.is_some() {
            self.seen.extend_from_slice(bytes);
            if String::from_utf8_lossy(&self.seen).contains(self.marker) {
                let _ = self.ready.take().map(|r| r.send(true));
            }
        }
    }

    fn exited(&mut self, _pid: Pid, _status: i32) {
        let _ = self.ready.take().map(|r| r.send(false));
    }
}

/// Reads `key=value` from a line like `spawnbench n=1000 seconds=0.1 rate=9000`.
pub fn field(line: &str, key: &str) -> anyhow::Result<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .with_context(|| format!("no `{key}=` in output `{}`", line.trim()))?
        .parse()
        .with_context(|| format!("bad `{key}=` in `{}`", line.trim()))
}
