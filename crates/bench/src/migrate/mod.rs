//! Live migration: how long a running process is stopped (downtime) and how
//! long a migration takes (total), in hand-over and in copy mode.
//!
//! atoll runs `build/wasm/dirty.wasm` (`bench/guests/dirty.c`) on an
//! embedded node of two pinned kernels and migrates it back and forth
//! between kernel 0 and kernel 1 while it rewrites its writable working set
//! (WWS) in a loop: one warm-up migration, then `--runs` measured ones per
//! configuration (fewer from 128 MiB on), each mode in turn on the same
//! process. Medians are reported.
//!
//! 1. Downtime and total time vs allocated memory (seed 000's 0-32 extra
//!    64 KiB pages, then 1-256 MiB), with a 64 KiB WWS.
//! 2. vs the WWS, at 64 MiB.
//! 3. Parallel migrations: N processes migrated at once, one thread per
//!    migration calling `Node::migrate`, released together by a barrier.
//! 4. Dirty tracking: pre-copy rounds and time per copy-mode migration, and
//!    the cost of [`atoll_migration::DirtyTracker`] itself on an anonymous
//!    mapping (first write to a page while tracked vs untracked; `take`).
//! 5. CRIU, the alternative on Linux, if `criu check` passes here.
//!
//! Here the plan and what is measured; `runner.rs` runs a guest and moves
//! it (1-3), `tracking.rs` and `criu.rs` measure 4 and 5, `report.rs`
//! prints and records.

mod criu;
mod report;
mod runner;
mod tracking;

use std::path::Path;
use std::time::Duration;

use atoll_migration::{Mode, RoundReport};
use atoll_node::Node;
use schemars::JsonSchema;
use serde::Serialize;

use crate::{artifact, command_line, median, progress, Context, Machine};

use criu::criu;
use report::human_kib;
use runner::{pauses, Bench, Done, GuestSize, PAUSE_RESOLUTION_US};
use tracking::tracking;

#[derive(clap::Args)]
pub struct Args {
    /// Measured migrations of each configuration, after one warm-up; the
    /// median is reported (half as many, at least 3, from 128 MiB on)
    /// [default: 9, or 3 with --quick]
    #[arg(long)]
    runs: Option<usize>,
    /// A short run: a few sizes, 3 migrations each
    #[arg(long)]
    quick: bool,
}

/// Kernels of the node: migrations go between kernel 0 and kernel 1, and
/// parallel migrations all leave the same kernel for the same kernel.
const KERNELS: u16 = 2;
const QUANTUM_MS: u64 = 10;
/// The WWS of the memory and parallel series.
const SMALL_WWS_KIB: u64 = 64;
/// The memory of the WWS series.
const WWS_MEMORY_MIB: u64 = 64;
/// The memory of each process of the parallel series.
const PARALLEL_MIB: u64 = 16;
/// Time the process runs between two migrations.
const GAP: Duration = Duration::from_millis(5);
/// Longest wait for a process to fill its memory or end.
const PATIENCE: Duration = Duration::from_secs(120);
const MODES: [Mode; 2] = [Mode::Handover, Mode::Copy];
/// Downtime targets (issue): hand-over whatever the memory, copy mode with a
/// WWS of at most 1 MiB whatever the memory, up to 256 MiB.
const HANDOVER_TARGET_US: f64 = 100.0;
const COPY_TARGET_US: f64 = 1000.0;
const COPY_TARGET_WWS_KIB: u64 = 1024;

/// What one run measures.
struct Plan {
    runs: usize,
    /// (MiB, extra 64 KiB pages)
    memory: Vec<(u64, u64)>,
    wws_kib: Vec<u64>,
    parallel: Vec<usize>,
    tracking_mib: usize,
}

impl Plan {
    fn new(a: &Args) -> Plan {
        let runs = a.runs.unwrap_or(if a.quick { 3 } else { 9 }).max(1);
        if a.quick {
            Plan {
                runs,
                memory: vec![(0, 0), (1, 0), (16, 0), (64, 0)],
                wws_kib: vec![64, 1024, 4096],
                parallel: vec![1, 4],
                tracking_mib: 16,
            }
        } else {
            let pages = [0, 4, 8, 16, 32].map(|p| (0, p));
            let mib = [1, 4, 16, 64, 256].map(|m| (m, 0));
            Plan {
                runs,
                memory: pages.into_iter().chain(mib).collect(),
                wws_kib: vec![0, 64, 256, 1024, 4096, 16384],
                parallel: vec![1, 2, 4, 8],
                tracking_mib: 64,
            }
        }
    }

    /// Measured migrations of a process of `bytes`: big ones take long to copy.
    fn runs_for(&self, bytes: u64) -> usize {
        if bytes >= 128 << 20 {
            self.runs.div_ceil(2).max(3).min(self.runs)
        } else {
            self.runs
        }
    }
}

/// One migration, as measured by the node.
#[derive(Clone, Serialize, JsonSchema)]
pub struct Sample {
    pub downtime_us: u64,
    pub total_us: u64,
    /// Bytes through the portal, all rounds (0 for a hand-over).
    pub bytes: u64,
    pub precopy_rounds: usize,
    /// Time the source spent on the pre-copy rounds.
    pub precopy_us: u64,
    /// Time the source spent on the stop-and-copy (the last round).
    pub stop_copy_us: u64,
    /// Wall time of the caller's `Node::migrate` (which first asks the
    /// process's home kernel where it runs), from the call to the answer.
    pub call_us: u64,
    /// The longest gap between two output lines of the guest across the
    /// migration: how long it really stopped, as far as its output shows
    /// (`None`: no output after the migration within half a second).
    pub pause_us: Option<u64>,
    /// Pre-copy rounds, then the stop-and-copy.
    pub rounds: Vec<RoundReport>,
}

impl Sample {
    fn of(done: &Done, pause: Option<Duration>) -> Sample {
        let r = &done.report;
        let precopy = &r.rounds[..r.precopy_rounds()];
        Sample {
            downtime_us: r.downtime_us,
            total_us: r.total_us,
            bytes: r.bytes(),
            precopy_rounds: r.precopy_rounds(),
            precopy_us: precopy.iter().map(|r| r.us).sum(),
            stop_copy_us: r.rounds.last().map_or(0, |r| r.us),
            call_us: done.call.as_micros() as u64,
            pause_us: pause.map(|p| p.as_micros() as u64),
            rounds: r.rounds.clone(),
        }
    }
}

/// One process configuration in one mode: medians of its migrations.
#[derive(Serialize, JsonSchema)]
pub struct Measure {
    pub mode: Mode,
    pub memory_mib: u64,
    pub extra_pages_64k: u64,
    /// What the guest allocates (MiB plus pages); its linear memory is a
    /// little larger.
    pub memory_bytes: u64,
    pub wws_kib: u64,
    pub downtime_us: f64,
    /// The longest downtime of the samples.
    pub max_downtime_us: f64,
    pub total_us: f64,
    pub bytes: f64,
    pub precopy_rounds: f64,
    pub precopy_us: f64,
    pub stop_copy_us: f64,
    pub call_us: f64,
    /// Median of the samples' `pause_us` (NaN if none could be timed).
    pub pause_us: f64,
    /// Median gap between the guest's output lines: the resolution of
    /// `pause_us`.
    pub output_interval_us: f64,
    pub samples: Vec<Sample>,
}

impl Measure {
    fn new(mode: Mode, guest: &GuestSize, samples: Vec<Sample>, interval: f64) -> Measure {
        let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
        Measure {
            mode,
            memory_mib: guest.mib,
            extra_pages_64k: guest.pages,
            memory_bytes: guest.bytes(),
            wws_kib: guest.wws_kib,
            downtime_us: m(|s| s.downtime_us as f64),
            max_downtime_us: samples.iter().map(|s| s.downtime_us).max().unwrap_or(0) as f64,
            total_us: m(|s| s.total_us as f64),
            bytes: m(|s| s.bytes as f64),
            precopy_rounds: m(|s| s.precopy_rounds as f64),
            precopy_us: m(|s| s.precopy_us as f64),
            stop_copy_us: m(|s| s.stop_copy_us as f64),
            call_us: m(|s| s.call_us as f64),
            pause_us: pauses(&samples),
            output_interval_us: interval,
            samples,
        }
    }

    fn memory_label(&self) -> String {
        if self.memory_mib == 0 {
            format!("{} x 64 KiB", self.extra_pages_64k)
        } else {
            human_kib(self.memory_bytes >> 10)
        }
    }
}

/// Migrations of several processes at once, in one mode.
#[derive(Serialize, JsonSchema)]
pub struct ParallelMeasure {
    pub mode: Mode,
    pub processes: usize,
    pub memory_mib: u64,
    pub wws_kib: u64,
    /// Median over every migration of every batch.
    pub downtime_us: f64,
    pub total_us: f64,
    /// The worst downtime of a batch, median over batches.
    pub worst_downtime_us: f64,
    /// As in [`Measure`], over every migration; with several processes on
    /// a kernel their time slices (one quantum each) dominate it.
    pub pause_us: f64,
    pub output_interval_us: f64,
    /// Wall time of a batch (all migrations started together until the
    /// last one ended), median over batches.
    pub batch_us: f64,
    pub batch_samples: Vec<f64>,
    pub samples: Vec<Sample>,
}

/// The cost of [`DirtyTracker`] on an anonymous mapping, medians of runs.
#[derive(Serialize, JsonSchema)]
pub struct Tracking {
    pub region_mib: usize,
    pub runs: usize,
    /// Writing one byte in each (present, writable) 4 KiB page.
    pub untracked_ns_per_page: f64,
    /// The same, the first write to each page after `start`: each faults.
    pub tracked_ns_per_page: f64,
    /// `DirtyTracker::start` (write-protecting the region).
    pub start_us_per_mib: f64,
    /// `take` with every page written (collect and write-protect again).
    pub take_dirty_us_per_mib: f64,
    /// `take` with nothing written (scan the bitmap).
    pub take_clean_us_per_mib: f64,
}

/// Whether CRIU can be compared with here, as `criu check` says.
#[derive(Serialize, JsonSchema)]
pub struct Criu {
    pub works: bool,
    /// `criu check`'s verdict, or why it could not run.
    pub detail: String,
}

#[derive(Serialize, JsonSchema)]
pub struct MigrateReport {
    pub name: String,
    pub command: String,
    pub machine: Machine,
    pub kernels: u16,
    pub quantum_ms: u64,
    /// Pre-copy stops after this many rounds, or when the dirty set is at
    /// most `small_bytes` or no longer shrinks.
    pub max_rounds: u32,
    pub small_bytes: u64,
    pub warmup: usize,
    pub runs: usize,
    pub quick: bool,
    pub memory: Vec<Measure>,
    pub wws: Vec<Measure>,
    pub parallel: Vec<ParallelMeasure>,
    pub tracking: Tracking,
    pub criu: Criu,
    pub notes: Vec<String>,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<MigrateReport> {
    let wasm = std::path::absolute(artifact(build, "wasm/dirty.wasm")?)?;
    let plan = Plan::new(&a);
    let mut config = ctx.node_config(Some(KERNELS), QUANTUM_MS);
    // It places its processes itself; the balancer would move them.
    config.balance = false;
    let policy = config.migration.policy;
    let node = Node::start(config)?;
    node.runtime().load_file(&wasm, true)?;
    let bench = Bench {
        node: &node,
        wasm,
        plan: &plan,
    };

    progress::note(&format!("memory, WWS {SMALL_WWS_KIB} KiB:"));
    let mut memory = Vec::new();
    for &(mib, pages) in &plan.memory {
        let size = GuestSize {
            mib,
            pages,
            wws_kib: SMALL_WWS_KIB,
        };
        memory.extend(bench.modes(&size)?);
    }
    progress::note(&format!("WWS, {WWS_MEMORY_MIB} MiB:"));
    let mut wws = Vec::new();
    for &wws_kib in &plan.wws_kib {
        let size = GuestSize {
            mib: WWS_MEMORY_MIB,
            pages: 0,
            wws_kib,
        };
        wws.extend(bench.modes(&size)?);
    }
    progress::note(&format!(
        "parallel, {PARALLEL_MIB} MiB each, WWS {SMALL_WWS_KIB} KiB:"
    ));
    let mut parallel = Vec::new();
    for &n in &plan.parallel {
        parallel.extend(bench.parallel(n)?);
    }
    // After the node started: wasmtime's signal handlers must be installed
    // before the tracker's (see `DirtyTracker`).
    progress::note(&format!("dirty tracking, {} MiB:", plan.tracking_mib));
    let tracking = tracking(plan.tracking_mib, plan.runs.max(5))?;
    node.shutdown();
    let criu = criu();
    progress::note(&format!(
        "criu: {}",
        if criu.works {
            "`criu check` passed"
        } else {
            &criu.detail
        }
    ));

    let machine = Machine::probe();
    let mut notes = vec![
        format!(
            "a node of {KERNELS} kernels pinned to CPUs (round robin), quantum {QUANTUM_MS} ms; the process migrates between kernel 0 and kernel 1 while it runs; one warm-up migration, then the measured ones, {} ms apart",
            GAP.as_millis()
        ),
        "downtime: from the freeze at a safepoint on the source until the process is back in a run queue on the destination, which includes the commit at the process's home kernel (kernel 0 here); the median, and the worst of the configuration's migrations; total: from the request until the destination confirmed (both measured by the node, MigrationReport)".into(),
        "a kernel busy running a guest hears requests and messages (a migration request, a commit at the home kernel) at the guest's next safepoint: the sender raises that kernel's yield flag; the worst downtimes of a batch are slices of other processes that had already begun".into(),
        "hand-over: the container (store, memory and all) is handed to the other kernel thread, nothing is copied; copy: pre-copy rounds while the process runs (writes tracked by mprotect write protection), then a stop-and-copy of what is still dirty, through the portal".into(),
        format!(
            "pre-copy policy: freeze when the dirty set is at most {} KiB, no longer shrinks, or after {} rounds",
            policy.small_bytes >> 10,
            policy.max_rounds
        ),
        "each process is migrated in hand-over mode, then in copy mode; `dirty` rewrites its first WWS KiB forever, with a little computation per 4 KiB block".into(),
        "memory: what `dirty` allocates with malloc (its linear memory is a little larger); 16 x 64 KiB and 1 MiB are the same allocation, made by seed 000's and by the MiB series; with a WWS of 0, `dirty` only prints a line every 64 empty passes, so it mostly makes output calls and keeps the console thread busy".into(),
        format!(
            "guest pause: the longest gap between two output lines of `dirty` (it prints every 64 passes over its WWS), from the last line before the migration was requested to the first after it returned, as the console received them: how long the process really stopped, including pre-copy rounds captured on its kernel and the first write faults of each round; its resolution is the guest's output interval (under a millisecond with a 64 KiB WWS) plus the console thread's delivery delay; not shown (—) where the guest prints less often than every {} ms, nor for parallel migrations (there the time slices of the other processes on the kernel dominate it; it is in migrate.json)",
            PAUSE_RESOLUTION_US / 1000.0
        ),
        "caller: wall time of `Node::migrate` in the benchmark (it asks the home kernel where the process runs, then its kernel to migrate it; both kernels may be running a guest's slice when asked)".into(),
        "sent: bytes through the portal, all rounds (the encoded frames); pre-copy and stop-and-copy: time the source kernel spent capturing and sending those rounds".into(),
        "a kernel is one thread: while it captures a pre-copy frame it runs nothing else, the migrating process included; round 0 therefore goes out in 4 MiB pieces, one between two slices of the process, so the process stops for a piece at a time (a few ms), which the guest pause shows and the downtime does not count".into(),
        "parallel: N processes start on kernel 0; each batch migrates all of them at once to the other kernel (one thread per migration, released by a barrier); batch = wall time from the release until the last migration returned".into(),
    ];
    if usize::from(KERNELS) > machine.cores {
        notes.push(format!(
            "the node has more kernels ({KERNELS}) than the machine has cores ({}): kernels share cores, which adds to the times",
            machine.cores
        ));
    }
    Ok(MigrateReport {
        name: "migrate".into(),
        command: command_line(),
        machine,
        kernels: KERNELS,
        quantum_ms: QUANTUM_MS,
        max_rounds: policy.max_rounds,
        small_bytes: policy.small_bytes,
        warmup: 1,
        runs: plan.runs,
        quick: a.quick,
        memory,
        wws,
        parallel,
        tracking,
        criu,
        notes,
    })
}
