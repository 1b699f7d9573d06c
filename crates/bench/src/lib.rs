//! `atoll bench`: atoll beside what a user would use instead, in one run.
//!
//! Each benchmark runs the native alternatives (built by `make native`) and
//! atoll (on an embedded node, programs built by `make guests`) in the same
//! invocation, reports medians of repeated runs and atoll's ratio to each
//! alternative, and can record the result with the machine it ran on.
//!
//! One module per benchmark (its arguments, its runs, its report; the
//! larger ones a folder whose `report.rs` holds the tables and charts);
//! what they share is written once: here, the report every simple benchmark
//! prints, medians, the machine, running a job or a native program, text
//! and Markdown tables; [`plot`], the charts; [`progress`], the spinner
//! (also the CLI's, for its own long operations); [`netns`], two hosts on
//! one machine (also the cluster tests'); `three_ways`, native vs plain vs
//! prepared wasm.

mod balance;
mod cluster;
mod compress;
mod console;
mod ipc;
mod mergesort;
mod migrate;
mod mpi;
pub mod netns;
mod placement;
pub mod plot;
mod prepare;
pub mod progress;
mod scale;
mod spawn;
mod threads;
mod three_ways;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atoll_abi::Pid;
use atoll_node::{JobSink, JobSpec, Node};
use atoll_process::Stream;
use clap::{Args, Subcommand};
use schemars::JsonSchema;
use serde::Serialize;

use crate::progress::Progress;

#[derive(Args)]
pub struct BenchArgs {
    /// Directory with the built programs (`make all` writes build/)
    #[arg(long, default_value = "build", global = true)]
    build: PathBuf,
    /// Print the result as JSON on stdout
    #[arg(long, global = true)]
    json: bool,
    /// Also write NAME.json and NAME.md (with the machine) into this directory
    #[arg(long, global = true, value_name = "DIR")]
    record: Option<PathBuf>,
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Spawn-to-exit rate of a tiny program: atoll vs fork+exec, posix_spawn, pthreads
    Spawn(spawn::Args),
    /// A CPU-bound mergesort: native (gcc -O2) vs plain wasm vs prepared wasm
    Mergesort(mergesort::Args),
    /// bzip2 (Debian's source) compressing and decompressing: native vs plain wasm vs prepared wasm
    Compress(compress::Args),
    /// Time to a module's first run: prepare + compile, cold, vs wasmtime compiling it as it is
    Prepare(prepare::Args),
    /// Minix IPC (IPC1-3, COPY1-2) vs pipes, FIFOs, mqueues, sockets, eventfd, futex, shm
    Ipc(ipc::Args),
    /// Live migration downtime and total time, hand-over and copy mode, vs memory, WWS, parallelism
    Migrate(migrate::Args),
    /// Two nodes over loopback TLS (and a veth pair, as root): IPC, copies and live migration between them vs TCP and TLS
    Cluster(cluster::Args),
    /// 100,000 processes blocked in receive on one node vs Linux processes blocked in read
    Scale(scale::Args),
    /// MPI latency, bandwidth and Allreduce (OSU-style) vs Open MPI over shared memory and TCP
    Mpi(mpi::Args),
    /// spawn, fork, exec and kill, local and remote, 1 to 64 kernels, vs Linux fork, fork+exec, kill
    Placement(placement::Args),
    /// An unbalanced CPU-bound workload with the balancer off and on, vs Linux's scheduler
    Balance(balance::Args),
    /// A program's output to its terminal: the console, bounded and not, vs a pipe
    Console(console::Args),
    /// Threads: create+join, migration downtime vs threads, seed 004's MergeSort (k_sistema), vs Linux
    Threads(threads::Args),
}

impl Which {
    fn name(&self) -> &'static str {
        match self {
            Which::Spawn(_) => "spawn",
            Which::Mergesort(_) => "mergesort",
            Which::Compress(_) => "compress",
            Which::Prepare(_) => "prepare",
            Which::Ipc(_) => "ipc",
            Which::Migrate(_) => "migrate",
            Which::Cluster(_) => "cluster",
            Which::Scale(_) => "scale",
            Which::Mpi(_) => "mpi",
            Which::Placement(_) => "placement",
            Which::Balance(_) => "balance",
            Which::Console(_) => "console",
            Which::Threads(_) => "threads",
        }
    }
}

/// What every benchmark's node shares: where prepared modules and compiled
/// code are cached.
pub struct Context {
    cache: PathBuf,
}

impl Context {
    /// Node settings with `kernels` kernels and a quantum of `quantum_ms`.
    pub fn node_config(&self, kernels: Option<u16>, quantum_ms: u64) -> atoll_node::NodeConfig {
        atoll_node::NodeConfig::new(Some(self.cache.clone())).sized(kernels, quantum_ms, None)
    }
}

/// Runs the benchmark `a` names, caching modules in `cache`.
pub fn run(cache: &Path, a: BenchArgs) -> anyhow::Result<()> {
    let ctx = &Context {
        cache: cache.to_path_buf(),
    };
    let (json, record) = (a.json, a.record.as_deref());
    let _progress = Progress::start(format!("bench {}", a.which.name()), json);
    match a.which {
        Which::Spawn(s) => emit(&spawn::run(ctx, &a.build, s)?, json, record),
        Which::Mergesort(m) => emit(&mergesort::run(ctx, &a.build, m)?, json, record),
        Which::Compress(c) => emit(&compress::run(ctx, &a.build, c)?, json, record),
        Which::Prepare(p) => emit(&prepare::run(ctx, &a.build, p)?, json, record),
        Which::Ipc(i) => emit(&ipc::run(ctx, &a.build, i)?, json, record),
        Which::Migrate(m) => emit(&migrate::run(ctx, &a.build, m)?, json, record),
        Which::Cluster(c) => emit(&cluster::run(ctx, &a.build, c)?, json, record),
        Which::Scale(s) => emit(&scale::run(ctx, &a.build, s)?, json, record),
        Which::Mpi(m) => emit(&mpi::run(ctx, &a.build, m)?, json, record),
        Which::Placement(p) => emit(&placement::run(ctx, &a.build, p)?, json, record),
        Which::Balance(b) => emit(&balance::run(ctx, &a.build, b)?, json, record),
        Which::Console(c) => emit(&console::run(ctx, &a.build, c)?, json, record),
        Which::Threads(t) => emit(&threads::run(ctx, &a.build, t)?, json, record),
    }
}

/// The schema of what each benchmark's `--json` prints, by output name
/// (the CLI gives them their ids: docs/json.md).
pub fn schemas() -> Vec<(&'static str, schemars::Schema)> {
    fn schema<T: JsonSchema>(name: &'static str) -> (&'static str, schemars::Schema) {
        (name, schemars::schema_for!(T))
    }
    vec![
        schema::<Report>("bench-spawn"),
        schema::<Report>("bench-mergesort"),
        schema::<Report>("bench-compress"),
        schema::<Report>("bench-prepare"),
        schema::<ipc::IpcReport>("bench-ipc"),
        schema::<migrate::MigrateReport>("bench-migrate"),
        schema::<cluster::ClusterReport>("bench-cluster"),
        schema::<scale::ScaleReport>("bench-scale"),
        schema::<mpi::MpiReport>("bench-mpi"),
        schema::<placement::PlacementReport>("bench-placement"),
        schema::<balance::BalanceReport>("bench-balance"),
        schema::<Report>("bench-console"),
        schema::<threads::ThreadsReport>("bench-threads"),
    ]
}

/// Prints a report (as a table, or JSON) and records it into `record`.
fn emit<R: Recorded + Serialize>(
    report: &R,
    json: bool,
    record: Option<&Path>,
) -> anyhow::Result<()> {
    progress::clear();
    let as_json = serde_json::to_string_pretty(report)?;
    if json {
        println!("{as_json}");
    } else {
        print!("{}", report.table());
    }
    if let Some(dir) = record {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(format!("{}.json", report.name())), as_json)?;
        std::fs::write(dir.join(format!("{}.md", report.name())), report.markdown())?;
        report.write_extra(dir)?;
        progress::note(&format!(
            "atoll: recorded {}/{}.*",
            dir.display(),
            report.name()
        ));
    }
    Ok(())
}

/// A benchmark's result as it is printed and recorded.
pub trait Recorded {
    fn name(&self) -> &str;
    fn table(&self) -> String;
    /// The recorded page, with the command and the machine.
    fn markdown(&self) -> String;
    /// Files recorded beside the JSON and Markdown (plots).
    fn write_extra(&self, _dir: &Path) -> anyhow::Result<()> {
        Ok(())
    }
}

/// One benchmark's result.
#[derive(Serialize, JsonSchema)]
pub struct Report {
    pub name: String,
    pub command: String,
    pub machine: Machine,
    /// What a row measures ("processes/s", "seconds").
    pub unit: String,
    /// Whether larger values are better.
    pub higher_is_better: bool,
    pub rows: Vec<Row>,
    /// Lines of explanation printed under the table.
    pub notes: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub struct Row {
    pub name: String,
    pub median: f64,
    pub samples: Vec<f64>,
    /// atoll's advantage over this row (>1 means atoll is better), for rows
    /// that are not atoll's.
    pub atoll_ratio: Option<f64>,
}

impl Recorded for Report {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!(
            "{} ({}; median of {} runs)\n",
            self.name,
            self.unit,
            self.rows.first().map_or(0, |r| r.samples.len())
        );
        for r in &self.rows {
            let ratio = r
                .atoll_ratio
                .map_or(String::new(), |x| format!("   atoll is {x:.2}x"));
            s += &format!("  {:<34} {:>14.4}{}\n", r.name, r.median, ratio);
        }
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += &format!(
            "| | median ({}) | atoll's advantage |\n|---|---:|---:|\n",
            self.unit
        );
        for r in &self.rows {
            let ratio = r
                .atoll_ratio
                .map_or("—".to_string(), |x| format!("{x:.2}x"));
            s += &format!("| {} | {:.4} | {} |\n", r.name, r.median, ratio);
        }
        s += "\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }
}

impl Report {
    /// Fills in atoll's ratio to every other row, from the row named `atoll`.
    fn ratios_against(&mut self, atoll: &str) {
        let Some(a) = self.rows.iter().find(|r| r.name == atoll).map(|r| r.median) else {
            return;
        };
        for r in &mut self.rows {
            if r.name != atoll && r.median > 0.0 && a > 0.0 {
                r.atoll_ratio = Some(if self.higher_is_better {
                    a / r.median
                } else {
                    r.median / a
                });
            }
        }
    }
}

/// The machine a benchmark ran on.
#[derive(Serialize, JsonSchema)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split(':').nth(1))
            })
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (mem_kib / 1048576.0 * 10.0).round() / 10.0,
            kernel: format!("Linux {kernel}"),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}, {} cores, {} GiB, {}",
            self.cpu, self.cores, self.memory_gib, self.kernel
        )
    }
}

/// The head of a recorded page: its title, the command that produced it
/// and the machine it ran on.
pub fn page_head(name: &str, command: &str, machine: &Machine) -> String {
    format!(
        "# {name}\n\nCommand: `{command}`\n\nMachine: {}\n\n",
        machine.describe()
    )
}

pub fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

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
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    node.run_job(
        job,
        Box::new(Collect {
            out: Vec::new(),
            done: tx,
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
}

impl JobSink for Collect {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => self.out.extend_from_slice(bytes),
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

/// The command line that produced a report.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("atoll {}", args.join(" "))
}

/// A text table: the first two columns left-aligned, the rest right.
pub fn text_table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (c, cell) in cells.iter().enumerate() {
            if c < 2 {
                s += &format!(" {cell:<w$}", w = widths[c]);
            } else {
                s += &format!("  {cell:>w$}", w = widths[c]);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = line(head.to_vec());
    for r in rows {
        s += &line(r.iter().map(String::as_str).collect());
    }
    s
}

/// The same table in Markdown.
pub fn md_table<const N: usize>(head: [&str; N], rows: &[[String; N]]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    for c in 0..N {
        s += if c < 2 { "---|" } else { "---:|" };
    }
    s += "\n";
    for r in rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s + "\n"
}
