//! Running the experiments: a `dirty` guest of a given size on the node,
//! migrated back and forth while its output gaps are watched.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atoll_abi::{KernelId, Pid};
use atoll_migration::{MigrationReport, Mode};
use atoll_node::{JobSink, Node};
use atoll_process::Stream;

use crate::{job_on_kernel0, median, progress};

use super::report::human_kib;
use super::{
    Measure, ParallelMeasure, Plan, Sample, GAP, MODES, PARALLEL_MIB, PATIENCE, SMALL_WWS_KIB,
};

/// What a `dirty` process allocates and rewrites.
pub(super) struct GuestSize {
    pub(super) mib: u64,
    pub(super) pages: u64,
    pub(super) wws_kib: u64,
}

impl GuestSize {
    pub(super) fn bytes(&self) -> u64 {
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

pub(super) struct Bench<'a> {
    pub(super) node: &'a Node,
    pub(super) wasm: PathBuf,
    pub(super) plan: &'a Plan,
}

impl Bench<'_> {
    /// One process of `size`, migrated in each mode.
    pub(super) fn modes(&self, size: &GuestSize) -> anyhow::Result<Vec<Measure>> {
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
    pub(super) fn parallel(&self, n: usize) -> anyhow::Result<Vec<ParallelMeasure>> {
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
pub(super) struct Done {
    pub(super) report: MigrationReport,
    /// Wall time of the call.
    pub(super) call: Duration,
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
pub(super) const PAUSE_RESOLUTION_US: f64 = 2000.0;

/// Longest wait for output after a migration, to time the guest's pause.
const PAUSE_WAIT: Duration = Duration::from_millis(500);

/// Median of the samples' pauses; NaN when none was timed.
pub(super) fn pauses(samples: &[Sample]) -> f64 {
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
