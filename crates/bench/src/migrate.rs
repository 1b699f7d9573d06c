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
//!    the cost of [`DirtyTracker`] itself on an anonymous mapping (first
//!    write to a page while tracked vs untracked; `take`).
//! 5. CRIU, the alternative on Linux, if `criu check` passes here.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atoll_abi::{KernelId, Pid};
use atoll_migration::{DirtyTracker, MigrationReport, Mode, RoundReport, BLOCK};
use atoll_node::{JobSink, Node};
use atoll_process::Stream;
use schemars::JsonSchema;
use serde::Serialize;

use super::plot::{Level, LineChart, Series};
use super::{
    artifact, command_line, job_on_kernel0, md_table, median, page_head, text_table, Machine,
    Recorded,
};
use crate::progress;
use crate::Context;

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
        "a kernel busy running a guest hears requests and messages (a migration request, a commit at the home kernel) at the guest's next safepoint: the sender bumps the engine's epoch; the worst downtimes of a batch are slices of other processes that had already begun".into(),
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

/// What a `dirty` process allocates and rewrites.
struct GuestSize {
    mib: u64,
    pages: u64,
    wws_kib: u64,
}

impl GuestSize {
    fn bytes(&self) -> u64 {
        (self.mib << 20) + (self.pages << 16)
    }

    fn describe(&self) -> String {
        let memory = if self.mib == 0 {
            format!("{} x 64 KiB", self.pages)
        } else {
            human_kib(self.bytes() >> 10)
        };
        format!("{memory:>11}  WWS {:>9}", human_kib(self.wws_kib))
    }
}

struct Bench<'a> {
    node: &'a Node,
    wasm: PathBuf,
    plan: &'a Plan,
}

impl Bench<'_> {
    /// One process of `size`, migrated in each mode.
    fn modes(&self, size: &GuestSize) -> anyhow::Result<Vec<Measure>> {
        progress::say(format!("bench migrate: {}", size.describe()));
        let guest = self.start(size)?;
        let runs = self.plan.runs_for(size.bytes());
        let mut measures = Vec::new();
        for mode in MODES {
            let samples = (|| {
                let mut samples = Vec::new();
                for i in 0..1 + runs {
                    let done = self.migrate(&guest, mode)?;
                    std::thread::sleep(GAP);
                    if i > 0 {
                        samples.push(Sample::of(&done, guest.pause()));
                    }
                }
                anyhow::Ok(samples)
            })()
            .with_context(|| format!("{mode} migration of dirty {}", size.describe()))?;
            let m = Measure::new(mode, size, samples, guest.interval());
            progress::note(&format!(
                "  {}  {:<8} downtime {:>9.0} us  pause {:>9.0} us  total {:>9.0} us  sent {:>9}  {} rounds",
                size.describe(),
                mode.name(),
                m.downtime_us,
                m.pause_us,
                m.total_us,
                human_kib(m.bytes as u64 >> 10),
                m.precopy_rounds
            ));
            measures.push(m);
        }
        self.stop(guest)?;
        Ok(measures)
    }

    /// Migrates `guest` to the kernel it is not on.
    fn migrate(&self, guest: &Guest, mode: Mode) -> anyhow::Result<Done> {
        let at = guest.on.lock().expect("guest");
        let to = KernelId::new(at.node, 1 - at.index.min(1));
        drop(at);
        guest.outputs.lock().expect("outputs").arm();
        let called = Instant::now();
        let r = self.node.migrate(guest.pid, to, Some(mode));
        let answered = Instant::now();
        guest.outputs.lock().expect("outputs").until = Some(answered);
        guest.alive()?;
        let r = r?;
        if r.mode != mode || r.to != to {
            bail!("asked for a {mode} migration to {to}, got: {}", r.summary());
        }
        *guest.on.lock().expect("guest") = to;
        Ok(Done {
            report: r,
            call: answered - called,
        })
    }

    /// `n` processes migrated at once, in each mode.
    fn parallel(&self, n: usize) -> anyhow::Result<Vec<ParallelMeasure>> {
        let size = GuestSize {
            mib: PARALLEL_MIB,
            pages: 0,
            wws_kib: SMALL_WWS_KIB,
        };
        let mut guests = Vec::new();
        for _ in 0..n {
            guests.push(self.start(&size)?);
        }
        let mut measures = Vec::new();
        for mode in MODES {
            let mut samples = Vec::new();
            let (mut batches, mut worst) = (Vec::new(), Vec::new());
            for i in 0..1 + self.plan.runs {
                let (reports, wall) = self
                    .batch(&guests, mode)
                    .with_context(|| format!("{n} parallel {mode} migrations"))?;
                std::thread::sleep(GAP);
                if i > 0 {
                    batches.push(wall.as_secs_f64() * 1e6);
                    let downtimes = reports.iter().map(|d| d.report.downtime_us);
                    worst.push(downtimes.max().unwrap_or(0) as f64);
                    for (g, done) in guests.iter().zip(&reports) {
                        samples.push(Sample::of(done, g.pause()));
                    }
                }
            }
            let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
            let p = ParallelMeasure {
                mode,
                processes: n,
                memory_mib: size.mib,
                wws_kib: size.wws_kib,
                downtime_us: m(|s| s.downtime_us as f64),
                total_us: m(|s| s.total_us as f64),
                worst_downtime_us: median(&worst),
                pause_us: pauses(&samples),
                output_interval_us: median(&guests.iter().map(Guest::interval).collect::<Vec<_>>()),
                batch_us: median(&batches),
                batch_samples: batches,
                samples,
            };
            progress::note(&format!(
                "  {n} at once  {:<8} downtime {:>9.0} us  total {:>9.0} us  batch {:>9.0} us",
                mode.name(),
                p.downtime_us,
                p.total_us,
                p.batch_us
            ));
            measures.push(p);
        }
        for g in guests {
            self.stop(g)?;
        }
        Ok(measures)
    }

    /// Migrates every guest at once to the kernel it is not on; returns the
    /// reports and the wall time of the batch.
    fn batch(&self, guests: &[Guest], mode: Mode) -> anyhow::Result<(Vec<Done>, Duration)> {
        let barrier = Barrier::new(guests.len() + 1);
        std::thread::scope(|s| {
            let threads: Vec<_> = guests
                .iter()
                .map(|g| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        self.migrate(g, mode)
                    })
                })
                .collect();
            barrier.wait();
            let t = Instant::now();
            let reports = threads
                .into_iter()
                .map(|t| t.join().expect("migration thread panicked"))
                .collect::<anyhow::Result<Vec<_>>>();
            let wall = t.elapsed();
            Ok((reports?, wall))
        })
    }

    /// Starts `dirty` on kernel 0 and waits until its memory is filled.
    fn start(&self, size: &GuestSize) -> anyhow::Result<Guest> {
        let job = job_on_kernel0(
            self.wasm.clone(),
            vec![
                "dirty".into(),
                size.mib.to_string(),
                size.wws_kib.to_string(),
                "0".into(),
                size.pages.to_string(),
            ],
        );
        let (tx, events) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let outputs = Outputs::default();
        let pid = self.node.run_job(
            &job,
            Box::new(Watch {
                ready: false,
                stdout: Vec::new(),
                stderr: stderr.clone(),
                outputs: outputs.clone(),
                events: tx,
            }),
        )?;
        let guest = Guest {
            pid,
            on: Mutex::new(KernelId::new(pid.home.node, 0)),
            events: Mutex::new(events),
            stderr,
            outputs,
            ended: Mutex::new(None),
        };
        let first = guest.events.lock().expect("events").recv_timeout(PATIENCE);
        match first {
            Ok(Event::Ready) => Ok(guest),
            Ok(Event::Exited(status)) => bail!(
                "dirty {} exited with status {status} before it was ready: {}",
                size.describe().trim(),
                guest.stderr()
            ),
            Err(_) => bail!(
                "dirty {} was not ready after {PATIENCE:?}",
                size.describe().trim()
            ),
        }
    }

    /// Kills `guest` and waits for its end.
    fn stop(&self, guest: Guest) -> anyhow::Result<()> {
        guest.alive()?;
        self.node.kill(guest.pid, 9)?;
        let events = guest.events.lock().expect("events");
        loop {
            match events.recv_timeout(PATIENCE) {
                Ok(Event::Exited(_)) => return Ok(()),
                Ok(Event::Ready) => {}
                Err(_) => bail!("{} did not end after SIGKILL", guest.pid),
            }
        }
    }
}

/// One migration as the benchmark saw it.
struct Done {
    report: MigrationReport,
    /// Wall time of the call.
    call: Duration,
}

/// The gaps between a guest's outputs, shared with its sink.
type Outputs = Arc<Mutex<Gaps>>;

/// Recent gaps kept per guest, for its output interval.
const GAPS_KEPT: usize = 1000;

/// Gaps between the arrivals of a guest's output.
#[derive(Default)]
struct Gaps {
    last: Option<Instant>,
    /// The longest gap since [`Gaps::arm`], up to and including the one
    /// that ends with the first output after `until`.
    longest: Duration,
    until: Option<Instant>,
    /// That output has arrived: `longest` is final.
    done: bool,
    recent: VecDeque<Duration>,
}

impl Gaps {
    fn output(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now - last;
            if self.recent.len() == GAPS_KEPT {
                self.recent.pop_front();
            }
            self.recent.push_back(gap);
            if !self.done {
                self.longest = self.longest.max(gap);
                self.done = self.until.is_some_and(|u| now > u);
            }
        }
        self.last = Some(now);
    }

    /// Starts timing a pause: the gap under way counts from the last output.
    fn arm(&mut self) {
        self.longest = Duration::ZERO;
        self.until = None;
        self.done = false;
    }
}

/// Pauses are shown only for guests whose output comes at least this often.
const PAUSE_RESOLUTION_US: f64 = 2000.0;

/// Longest wait for output after a migration, to time the guest's pause.
const PAUSE_WAIT: Duration = Duration::from_millis(500);

/// Median of the samples' pauses; NaN when none was timed.
fn pauses(samples: &[Sample]) -> f64 {
    let p: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.pause_us.map(|p| p as f64))
        .collect();
    median(&p)
}

/// A running `dirty` process.
struct Guest {
    pid: Pid,
    /// The kernel it runs on (it starts on kernel 0; only the benchmark
    /// migrates it).
    on: Mutex<KernelId>,
    /// In a mutex so the guests can be shared with migration threads.
    events: Mutex<Receiver<Event>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// When its output arrived, since it was ready (the latest ones).
    outputs: Outputs,
    /// Its exit status, once seen.
    ended: Mutex<Option<i32>>,
}

impl Guest {
    /// An error if the process has ended (it never does by itself).
    fn alive(&self) -> anyhow::Result<()> {
        let mut ended = self.ended.lock().expect("guest");
        if ended.is_none() {
            loop {
                match self.events.lock().expect("events").try_recv() {
                    Ok(Event::Exited(s)) => *ended = Some(s),
                    Ok(Event::Ready) => continue,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => {}
                }
                break;
            }
        }
        match *ended {
            Some(status) => bail!(
                "process {} ended with status {status}: {}",
                self.pid,
                self.stderr()
            ),
            None => Ok(()),
        }
    }

    /// The longest gap between two outputs from the last one before
    /// `done` was asked for to the first one after it returned (waiting up
    /// to [`PAUSE_WAIT`] for that one).
    fn pause(&self) -> Option<Duration> {
        let deadline = Instant::now() + PAUSE_WAIT;
        loop {
            {
                let g = self.outputs.lock().expect("outputs");
                if g.done {
                    return Some(g.longest);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The median gap between its latest outputs, in microseconds.
    fn interval(&self) -> f64 {
        let g = self.outputs.lock().expect("outputs");
        let gaps: Vec<f64> = g.recent.iter().map(|d| d.as_secs_f64() * 1e6).collect();
        median(&gaps)
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("stderr")).into_owned()
    }
}

enum Event {
    Ready,
    Exited(i32),
}

/// Watches a `dirty` process's output for "dirty: ready" and its end; the
/// rest of its output is dropped.
struct Watch {
    ready: bool,
    stdout: Vec<u8>,
    stderr: Arc<Mutex<Vec<u8>>>,
    outputs: Outputs,
    events: Sender<Event>,
}

impl JobSink for Watch {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout if !self.ready => {
                self.stdout.extend_from_slice(bytes);
                if String::from_utf8_lossy(&self.stdout).contains("dirty: ready") {
                    self.ready = true;
                    self.stdout = Vec::new();
                    let _ = self.events.send(Event::Ready);
                }
            }
            Stream::Stdout => {
                let now = Instant::now();
                self.outputs.lock().expect("outputs").output(now);
            }
            Stream::Stderr => {
                let mut e = self.stderr.lock().expect("stderr");
                if e.len() < 64 << 10 {
                    e.extend_from_slice(bytes);
                }
            }
        }
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        let _ = self.events.send(Event::Exited(status));
    }
}

/// An anonymous private mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> anyhow::Result<Mapping> {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!("mmap of {len} bytes: {}", std::io::Error::last_os_error());
        }
        // 4 KiB pages, as the tracker splits them anyway: the untracked
        // writes are then measured on the same pages as the tracked ones.
        // SAFETY: advice on our own mapping; failure only keeps huge pages.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable (or
        // write-protected by a tracker, whose handler makes writes succeed),
        // and only reachable through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Writes `value` to the first byte of every page; returns the time.
    fn touch(&mut self, value: u8) -> Duration {
        let t = Instant::now();
        for at in (0..self.len).step_by(BLOCK) {
            // SAFETY: `at` is inside the mapping (see `bytes`).
            unsafe { std::ptr::write_volatile(self.ptr.add(at), value) };
        }
        t.elapsed()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer referenced (borrows of `bytes` end
        // with `self`'s).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The cost of dirty tracking on `mib` MiB of anonymous memory.
fn tracking(mib: usize, runs: usize) -> anyhow::Result<Tracking> {
    let mut map = Mapping::new(mib << 20)?;
    map.bytes().fill(1); // every page present and written once
    let pages = (mib << 20) / BLOCK;
    let per_page = |d: Duration| d.as_nanos() as f64 / pages as f64;
    let per_mib = |d: Duration| d.as_secs_f64() * 1e6 / mib as f64;
    let (mut untracked, mut tracked, mut start, mut dirty, mut clean) =
        (vec![], vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        let value = 2 + (run % 100) as u8;
        untracked.push(per_page(map.touch(value)));
        let t = Instant::now();
        let mut tracker = DirtyTracker::start(map.bytes()).context("DirtyTracker::start")?;
        start.push(per_mib(t.elapsed()));
        tracked.push(per_page(map.touch(value + 1)));
        let t = Instant::now();
        let written = tracker.take(map.bytes())?;
        dirty.push(per_mib(t.elapsed()));
        if written.len() != pages {
            bail!("the tracker saw {} of {pages} pages written", written.len());
        }
        let t = Instant::now();
        let none = tracker.take(map.bytes())?;
        clean.push(per_mib(t.elapsed()));
        if !none.is_empty() {
            bail!("the tracker saw {} pages written, none were", none.len());
        }
        drop(tracker);
    }
    let t = Tracking {
        region_mib: mib,
        runs,
        untracked_ns_per_page: median(&untracked),
        tracked_ns_per_page: median(&tracked),
        start_us_per_mib: median(&start),
        take_dirty_us_per_mib: median(&dirty),
        take_clean_us_per_mib: median(&clean),
    };
    progress::note(&format!(
        "  first write per page: untracked {:.1} ns, tracked {:.1} ns; start {:.1} us/MiB, take {:.1} us/MiB all dirty, {:.2} us/MiB clean",
        t.untracked_ns_per_page,
        t.tracked_ns_per_page,
        t.start_us_per_mib,
        t.take_dirty_us_per_mib,
        t.take_clean_us_per_mib
    ));
    Ok(t)
}

/// Asks `criu check` whether CRIU can checkpoint processes here.
fn criu() -> Criu {
    let out = match Command::new("criu").arg("check").output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Criu {
                works: false,
                detail: "criu is not installed".into(),
            }
        }
        Err(e) => {
            return Criu {
                works: false,
                detail: format!("cannot run criu: {e}"),
            }
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        return Criu {
            works: true,
            detail: text.trim().to_string(),
        };
    }
    // "Error (criu/vdso.c:381): vdso: ..." -> "vdso: ...", without the
    // generic "exited, status=1" lines.
    let errors: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let msg = l
                .strip_prefix("Error (")
                .map_or(l, |r| r.split_once("): ").map_or(r, |(_, m)| m));
            (!msg.is_empty() && !msg.starts_with("exited, status=")).then_some(msg)
        })
        .collect();
    Criu {
        works: false,
        detail: format!(
            "`criu check` failed ({}): {}",
            out.status,
            if errors.is_empty() {
                "no message".to_string()
            } else {
                errors.join("; ")
            }
        ),
    }
}

fn human_kib(kib: u64) -> String {
    match kib {
        k if k >= 1 << 10 && k % (1 << 10) == 0 => format!("{} MiB", k >> 10),
        k if k >= 1 << 10 => format!("{:.1} MiB", k as f64 / 1024.0),
        k => format!("{k} KiB"),
    }
}

fn mib(bytes: f64) -> f64 {
    bytes / f64::from(1u32 << 20)
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "no"
    }
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Handover => "hand-over",
        Mode::Copy => "copy",
    }
}

impl MigrateReport {
    /// The worst median downtime of `mode` among `measures`.
    fn worst<'a>(
        measures: impl IntoIterator<Item = &'a Measure>,
        mode: Mode,
    ) -> Option<&'a Measure> {
        measures
            .into_iter()
            .filter(|m| m.mode == mode)
            .max_by(|a, b| a.downtime_us.total_cmp(&b.downtime_us))
    }

    /// The downtime targets against this run: (target, worst
    /// median, met).
    fn targets(&self) -> Vec<(String, String, bool)> {
        let largest = |ms: &[&Measure]| {
            ms.iter()
                .map(|m| m.memory_bytes)
                .max()
                .map_or_else(String::new, |b| human_kib(b >> 10))
        };
        let at = |m: &Measure| {
            format!(
                "{:.0} us ({}, WWS {})",
                m.downtime_us,
                m.memory_label(),
                human_kib(m.wws_kib)
            )
        };
        let mut rows = Vec::new();
        let all: Vec<&Measure> = self.memory.iter().chain(&self.wws).collect();
        if let Some(w) = Self::worst(all.iter().copied(), Mode::Handover) {
            rows.push((
                format!(
                    "hand-over downtime at most {HANDOVER_TARGET_US} us, any memory (up to {}) and WWS",
                    largest(&all)
                ),
                at(w),
                w.downtime_us <= HANDOVER_TARGET_US,
            ));
        }
        let small: Vec<&Measure> = all
            .iter()
            .copied()
            .filter(|m| m.wws_kib <= COPY_TARGET_WWS_KIB)
            .collect();
        if let Some(w) = Self::worst(small.iter().copied(), Mode::Copy) {
            rows.push((
                format!(
                    "copy-mode downtime at most {} ms with a WWS of at most {}, any memory (up to {})",
                    COPY_TARGET_US / 1000.0,
                    human_kib(COPY_TARGET_WWS_KIB),
                    largest(&small)
                ),
                at(w),
                w.downtime_us <= COPY_TARGET_US,
            ));
        }
        rows
    }

    fn for_scale() -> &'static str {
        "For scale (quoted, not measured here): seed 000 (Nanvix) reports 19-113 ms of \
         migration downtime, CRIU is quoted at about 100-280 ms, and QEMU's default downtime \
         target for live migration is 300 ms.\n\n"
    }

    fn criu_line(&self) -> String {
        if self.criu.works {
            format!(
                "CRIU: `criu check` passed on this machine ({}), but this benchmark has no CRIU \
                 baseline yet (CRIU did not work where it was written).\n\n",
                self.criu.detail.lines().next().unwrap_or("")
            )
        } else {
            format!(
                "CRIU: not compared, it does not work here: {}.\n\n",
                self.criu.detail.trim_end_matches('.')
            )
        }
    }

    fn tracking_rows(&self) -> Vec<(String, String)> {
        let t = &self.tracking;
        let copy: Vec<&Measure> = self
            .memory
            .iter()
            .chain(&self.wws)
            .filter(|m| m.mode == Mode::Copy)
            .collect();
        let mut rows = vec![
            (
                "first write to a 4 KiB page, untracked".into(),
                format!("{:.1} ns", t.untracked_ns_per_page),
            ),
            (
                "first write to a 4 KiB page, tracked (a fault)".into(),
                format!(
                    "{:.0} ns (+{:.0} ns)",
                    t.tracked_ns_per_page,
                    t.tracked_ns_per_page - t.untracked_ns_per_page
                ),
            ),
            (
                "`DirtyTracker::start` (write-protect)".into(),
                format!("{:.1} us per MiB", t.start_us_per_mib),
            ),
            (
                "`take`, every page written".into(),
                format!("{:.1} us per MiB", t.take_dirty_us_per_mib),
            ),
            (
                "`take`, nothing written".into(),
                format!("{:.2} us per MiB", t.take_clean_us_per_mib),
            ),
        ];
        for m in copy {
            rows.push((
                format!(
                    "copy mode, {}, WWS {}: pre-copy",
                    m.memory_label(),
                    human_kib(m.wws_kib)
                ),
                format!(
                    "{:.0} us, {} round{}",
                    m.precopy_us,
                    m.precopy_rounds,
                    if m.precopy_rounds == 1.0 { "" } else { "s" }
                ),
            ));
        }
        rows
    }

    fn measure_rows(measures: &[Measure], first: fn(&Measure) -> String) -> Vec<[String; 11]> {
        measures
            .iter()
            .map(|m| {
                let copy = |v: String| {
                    if m.mode == Mode::Copy {
                        v
                    } else {
                        "—".into()
                    }
                };
                [
                    first(m),
                    mode_label(m.mode).into(),
                    format!("{:.0}", m.downtime_us),
                    format!("{:.0}", m.max_downtime_us),
                    pause(m.pause_us, m.output_interval_us),
                    format!("{:.0}", m.total_us),
                    format!("{:.0}", m.call_us),
                    format!("{:.2}", mib(m.bytes)),
                    copy(format!("{}", m.precopy_rounds)),
                    copy(format!("{:.0}", m.precopy_us)),
                    copy(format!("{:.0}", m.stop_copy_us)),
                ]
            })
            .collect()
    }

    fn parallel_rows(&self) -> Vec<[String; 6]> {
        self.parallel
            .iter()
            .map(|p| {
                [
                    p.processes.to_string(),
                    mode_label(p.mode).into(),
                    format!("{:.0}", p.downtime_us),
                    format!("{:.0}", p.worst_downtime_us),
                    format!("{:.0}", p.total_us),
                    format!("{:.0}", p.batch_us),
                ]
            })
            .collect()
    }

    fn mib_each(&self) -> String {
        self.parallel
            .first()
            .map_or(String::new(), |p| format!("{} MiB", p.memory_mib))
    }
}

const MEASURE_HEAD: [&str; 11] = [
    "",
    "mode",
    "downtime (us)",
    "worst downtime (us)",
    "guest pause (us)",
    "total (us)",
    "caller (us)",
    "sent (MiB)",
    "pre-copy rounds",
    "pre-copy (us)",
    "stop-and-copy (us)",
];
const PARALLEL_HEAD: [&str; 6] = [
    "processes",
    "mode",
    "downtime (us)",
    "worst in batch (us)",
    "total (us)",
    "batch (us)",
];

/// A guest pause, or "—" where the guest prints too rarely to time it.
fn pause(pause_us: f64, interval_us: f64) -> String {
    if pause_us.is_finite() && interval_us <= PAUSE_RESOLUTION_US {
        format!("{pause_us:.0}")
    } else {
        "—".into()
    }
}

impl Recorded for MigrateReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!(
            "migrate (medians of {} migrations after a warm-up, fewer from 128 MiB; kernel 0 <-> 1)\n",
            self.runs
        );
        s += &format!("memory, WWS {}\n", human_kib(SMALL_WWS_KIB));
        s += &text_table(
            MEASURE_HEAD,
            &Self::measure_rows(&self.memory, Measure::memory_label),
        );
        s += &format!("WWS, {WWS_MEMORY_MIB} MiB\n");
        s += &text_table(
            MEASURE_HEAD,
            &Self::measure_rows(&self.wws, |m| human_kib(m.wws_kib)),
        );
        s += &format!(
            "parallel, {} each, WWS {}\n",
            self.mib_each(),
            human_kib(SMALL_WWS_KIB)
        );
        s += &text_table(PARALLEL_HEAD, &self.parallel_rows());
        s += &format!("dirty tracking ({} MiB region)\n", self.tracking.region_mib);
        for (what, value) in self.tracking_rows() {
            s += &format!("  {what:<48} {value}\n");
        }
        for (target, worst, met) in self.targets() {
            s += &format!(
                "  target: {target}: {worst}, {}\n",
                if met { "met" } else { "NOT met" }
            );
        }
        s += &format!("  {}", Self::for_scale().trim_end());
        s += &format!("\n  {}\n", self.criu_line().trim_end());
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head("migrate", &self.command, &self.machine);
        s += &format!(
            "Medians of {} migrations per configuration after one warm-up (half as many, at \
             least 3, from 128 MiB on), on a node of {} kernels (the machine has {} cores).\n\n",
            self.runs, self.kernels, self.machine.cores
        );
        s += "![Downtime vs memory](migrate.png)\n\n![Total time vs memory](migrate-total.png)\n\n\
              ![Downtime vs WWS](migrate-wws.png)\n\n![Parallel migrations](migrate-parallel.png)\n\n";
        s += "## Targets\n\n| target | worst median | met |\n|---|---:|---|\n";
        for (target, worst, met) in self.targets() {
            s += &format!("| {target} | {worst} | {} |\n", yes(met));
        }
        s += "\n";
        s += Self::for_scale();
        s += &self.criu_line();
        s += &format!(
            "## Downtime and total time vs memory (WWS {})\n\n",
            human_kib(SMALL_WWS_KIB)
        );
        let mut head = MEASURE_HEAD;
        head[0] = "memory";
        s += &md_table(
            head,
            &Self::measure_rows(&self.memory, Measure::memory_label),
        );
        s += &format!("## vs writable working set ({WWS_MEMORY_MIB} MiB)\n\n");
        head[0] = "WWS";
        s += &md_table(
            head,
            &Self::measure_rows(&self.wws, |m| human_kib(m.wws_kib)),
        );
        s += &format!(
            "## Parallel migrations ({} each, WWS {})\n\n",
            self.mib_each(),
            human_kib(SMALL_WWS_KIB)
        );
        s += &md_table(PARALLEL_HEAD, &self.parallel_rows());
        s += &format!(
            "## Dirty tracking\n\n`DirtyTracker` on a {} MiB anonymous mapping of 4 KiB pages \
             (median of {} runs), and the pre-copy of the copy-mode migrations above (median \
             per migration).\n\n| | |\n|---|---:|\n",
            self.tracking.region_mib, self.tracking.runs
        );
        for (what, value) in self.tracking_rows() {
            s += &format!("| {what} | {value} |\n");
        }
        s += "\n## Notes\n\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        let by_mode = |ms: &[Measure], value: fn(&Measure) -> f64| -> Vec<Series> {
            MODES
                .iter()
                .map(|&mode| Series {
                    name: mode_label(mode).into(),
                    values: ms.iter().filter(|m| m.mode == mode).map(value).collect(),
                })
                .collect()
        };
        let categories = |ms: &[Measure], name: fn(&Measure) -> String| -> Vec<String> {
            ms.iter().filter(|m| m.mode == MODES[0]).map(name).collect()
        };
        let targets = [
            Level {
                name: format!("hand-over target {HANDOVER_TARGET_US} us"),
                value: HANDOVER_TARGET_US,
                colour_of: 0,
            },
            Level {
                name: format!(
                    "copy target {} ms (WWS <= {})",
                    COPY_TARGET_US / 1000.0,
                    human_kib(COPY_TARGET_WWS_KIB)
                ),
                value: COPY_TARGET_US,
                colour_of: 1,
            },
        ];
        let memory = categories(&self.memory, Measure::memory_label);
        LineChart {
            title: &format!(
                "Migration downtime vs memory (WWS {}; lower is better)",
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "memory allocated by the process",
            value_label: "downtime (us, median)",
            categories: &memory,
            series: &by_mode(&self.memory, |m| m.downtime_us),
            levels: &targets,
            log: true,
        }
        .draw(&dir.join("migrate.png"))?;
        LineChart {
            title: &format!(
                "Migration total time vs memory (WWS {})",
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "memory allocated by the process",
            value_label: "total time (us, median)",
            categories: &memory,
            series: &by_mode(&self.memory, |m| m.total_us),
            levels: &[],
            log: true,
        }
        .draw(&dir.join("migrate-total.png"))?;
        LineChart {
            title: &format!(
                "Migration downtime vs writable working set ({WWS_MEMORY_MIB} MiB; lower is better)"
            ),
            x_label: "writable working set (rewritten in a loop)",
            value_label: "downtime (us, median)",
            categories: &categories(&self.wws, |m| human_kib(m.wws_kib)),
            series: &by_mode(&self.wws, |m| m.downtime_us),
            levels: &targets,
            log: true,
        }
        .draw(&dir.join("migrate-wws.png"))?;
        let counts: Vec<String> = self
            .parallel
            .iter()
            .filter(|p| p.mode == MODES[0])
            .map(|p| p.processes.to_string())
            .collect();
        let parallel = |mode: Mode, what: &str, value: fn(&ParallelMeasure) -> f64| Series {
            name: format!("{} {what}", mode_label(mode)),
            values: self
                .parallel
                .iter()
                .filter(|p| p.mode == mode)
                .map(value)
                .collect(),
        };
        LineChart {
            title: &format!(
                "Parallel migrations ({} each, WWS {})",
                self.mib_each(),
                human_kib(SMALL_WWS_KIB)
            ),
            x_label: "processes migrated at once",
            value_label: "us (median)",
            categories: &counts,
            series: &[
                parallel(Mode::Handover, "downtime", |p| p.downtime_us),
                parallel(Mode::Copy, "downtime", |p| p.downtime_us),
                parallel(Mode::Handover, "batch wall time", |p| p.batch_us),
                parallel(Mode::Copy, "batch wall time", |p| p.batch_us),
            ],
            levels: &[],
            log: true,
        }
        .draw(&dir.join("migrate-parallel.png"))?;
        Ok(())
    }
}
