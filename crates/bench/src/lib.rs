//! `atoll bench`: atoll beside what a user would use instead, in one run.
//!
//! Each benchmark runs the native alternatives (built by `make native`) and
//! atoll (on an embedded node, programs built by `make guests`) in the same
//! invocation, reports medians of repeated runs and atoll's ratio to each
//! alternative, and can record the result with the machine it ran on.
//!
//! One module per benchmark (its arguments, its runs, its report; the
//! larger ones a folder whose `report.rs` holds the tables and charts);
//! what they share is written once: `report.rs`, the report every simple
//! benchmark prints, medians, the machine, text and Markdown tables;
//! `jobs.rs`, running a built program natively or as an atoll job on a
//! benchmark's node; [`plot`], the charts; [`progress`], the spinner
//! (also the CLI's, for its own long operations); [`netns`], two hosts on
//! one machine (also the cluster tests'); `three_ways`, native vs plain vs
//! prepared wasm.

mod balance;
mod cluster;
mod compress;
mod console;
mod ipc;
mod jobs;
mod js;
mod mergesort;
mod migrate;
mod mpi;
pub mod netns;
mod placement;
pub mod plot;
mod postcopy;
mod prepare;
pub mod progress;
mod report;
mod scale;
mod spawn;
mod threads;
mod three_ways;

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use schemars::JsonSchema;

use crate::progress::Progress;

pub(crate) use jobs::{
    artifact, atoll_job, atoll_job_marked, bench_node, field, job_on_kernel0, native, ReadyWhen,
};
pub(crate) use report::{
    command_line, emit, md_table, median, page_head, text_table, Machine, Recorded, Report, Row,
};

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
    /// QuickJS (Debian's source) running a JavaScript workload: native vs plain wasm vs prepared wasm
    Js(js::Args),
    /// Time to a module's first run: prepare + compile, cold, vs wasmtime compiling it as it is
    Prepare(prepare::Args),
    /// Minix IPC (IPC1-3, COPY1-2) vs pipes, FIFOs, mqueues, sockets, eventfd, futex, shm
    Ipc(ipc::Args),
    /// Live migration downtime and total time, hand-over and copy mode, vs memory, WWS, parallelism
    Migrate(migrate::Args),
    /// Two nodes over loopback TLS (and a veth pair, as root): IPC, copies and live migration between them vs TCP and TLS
    Cluster(cluster::Args),
    /// A process moved once between two nodes, by pre-copy and by post-copy, vs unmoved: what each move costs it
    Postcopy(postcopy::Args),
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
            Which::Js(_) => "js",
            Which::Prepare(_) => "prepare",
            Which::Ipc(_) => "ipc",
            Which::Migrate(_) => "migrate",
            Which::Cluster(_) => "cluster",
            Which::Postcopy(_) => "postcopy",
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
        Which::Js(j) => emit(&js::run(ctx, &a.build, j)?, json, record),
        Which::Prepare(p) => emit(&prepare::run(ctx, &a.build, p)?, json, record),
        Which::Ipc(i) => emit(&ipc::run(ctx, &a.build, i)?, json, record),
        Which::Migrate(m) => emit(&migrate::run(ctx, &a.build, m)?, json, record),
        Which::Cluster(c) => emit(&cluster::run(ctx, &a.build, c)?, json, record),
        Which::Postcopy(p) => emit(&postcopy::run(ctx, &a.build, p)?, json, record),
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
        schema::<Report>("bench-js"),
        schema::<Report>("bench-prepare"),
        schema::<ipc::IpcReport>("bench-ipc"),
        schema::<migrate::MigrateReport>("bench-migrate"),
        schema::<cluster::ClusterReport>("bench-cluster"),
        schema::<postcopy::PostcopyReport>("bench-postcopy"),
        schema::<scale::ScaleReport>("bench-scale"),
        schema::<mpi::MpiReport>("bench-mpi"),
        schema::<placement::PlacementReport>("bench-placement"),
        schema::<balance::BalanceReport>("bench-balance"),
        schema::<Report>("bench-console"),
        schema::<threads::ThreadsReport>("bench-threads"),
    ]
}
