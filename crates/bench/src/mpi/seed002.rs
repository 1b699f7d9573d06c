//! Seed 002's experiment: one run of an application with a rank moved
//! during it, to another kernel or another node, against the same run
//! unmoved.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use atoll_abi::KernelId;
use atoll_migration::{MigrationReport, Mode};
use atoll_node::{JobSpec, Node};

use super::{App, AppRun, MigratedRun};
use crate::{atoll_job_marked, median, progress, Context};

/// What became of one move.
#[derive(Clone)]
enum Move {
    Made(MigrationReport),
    /// The rank ended while it moved, or before: a race with the program's
    /// end, not a failure (the rank ends where it was, its output whole).
    Ended,
    /// It failed while the rank lived on (reported as it failed).
    Failed,
}

/// What an NPB kernel prints when its timed part starts (`npb.h`).
const TIMED_PART_STARTS: &str = "npb: timed part starts\n";

/// Where the timed part starts: `None` until the program says so, if it
/// does (a sender is waiting); `estimate` if it does not.
fn timed_part_start(
    said: &std::sync::mpsc::Receiver<Instant>,
    estimate: Instant,
) -> Option<Instant> {
    match said.try_recv() {
        Ok(at) => Some(at),
        Err(std::sync::mpsc::TryRecvError::Empty) => None,
        Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(estimate),
    }
}

/// How seed 002's experiment moves a rank while an application runs: first
/// at `first` into its timed part, then every `every` if given. `setup`:
/// where the timed part starts, for a program that does not say
/// ([`App::says_when_timed`]).
#[derive(Clone, Copy)]
struct Moves {
    mode: Mode,
    first: Duration,
    every: Option<Duration>,
    setup: Duration,
}

/// Where seed 002's experiment runs its 4 ranks, and where it moves one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Over {
    /// Two kernels of one node: a rank moves to the other kernel.
    Kernels,
    /// Two nodes of one kernel each, joined over loopback TLS: a rank
    /// moves to the other node, as seed 002's VM moved between machines.
    Nodes,
}

/// Seed 002's experiment (Xen VMs running MPI, one migrated: HPL +28 %,
/// NPB SP +10 %): `app` on 4 ranks over 2 kernels or 2 nodes, unmigrated,
/// with one rank moved to the other kernel or node and back halfway
/// through its timed part (copy; hand-over within a node, post-copy
/// between nodes), and with a rank moved there and back every second of it
/// (copy; and post-copy between nodes); beside the same
/// run under Open MPI (shared memory within a node, TCP between nodes).
/// The slowdown is that of the timed part, as the program times it (NPB's
/// and HPL's own timers), which is where the moves fall; the setup before
/// it (CG builds its matrix for longer than it solves) would dilute it.
/// An NPB kernel says when its timed part starts; HPL's start is taken as
/// the earliest the unmigrated runs imply (wall time less timed part). A
/// run that ends before its first move is left out of the slowdown.
///
/// The scenarios take turns, `runs` rounds of one run each, and each
/// migrated run is compared with the unmigrated run of its own round: a
/// slowdown of a percent is smaller than the drift of this machine between
/// minutes, which a comparison of separate batches would report instead.
pub(super) fn seed002(
    ctx: &Context,
    build: &Path,
    app: &App,
    runs: usize,
    over: Over,
) -> anyhow::Result<Vec<MigratedRun>> {
    let (place, there) = match over {
        Over::Kernels => ("2 kernels", "kernel"),
        Over::Nodes => ("2 nodes", "node"),
    };
    progress::note(&format!(
        "seed 002: {}, 4 ranks on {place}, migrated while it runs:",
        app.label()
    ));
    let certs = tempfile::tempdir()?;
    let (node, other) = match over {
        Over::Kernels => (Node::start(crate::bench_node(ctx, Some(2)))?, None),
        Over::Nodes => {
            let (first, second) = crate::cluster::pair(ctx, certs.path(), false)?;
            (first, Some(second))
        }
    };
    // Prepared before the first run, so that no run pays for it.
    node.runtime()
        .load_file(&AppRun::new(build, app, 4)?.job.program, true)?;
    let second = Duration::from_secs(1);
    let mut scenarios = vec![
        (format!("atoll, {place}, unmigrated"), None, None),
        (
            format!("atoll, {place}, one rank moved to the other {there} and back halfway (copy)"),
            Some(Mode::Copy),
            None,
        ),
    ];
    if over == Over::Kernels {
        scenarios.push((
            format!(
                "atoll, {place}, one rank moved to the other {there} and back halfway (hand-over)"
            ),
            Some(Mode::Handover),
            None,
        ));
    }
    scenarios.push((
        format!("atoll, {place}, a rank moved to the other {there} and back every second (copy)"),
        Some(Mode::Copy),
        Some(second),
    ));
    if over == Over::Nodes {
        scenarios.extend([
            (
                format!("atoll, {place}, one rank moved to the other {there} and back halfway (post-copy)"),
                Some(Mode::PostCopy),
                None,
            ),
            (
                format!("atoll, {place}, a rank moved to the other {there} and back every second (post-copy)"),
                Some(Mode::PostCopy),
                Some(second),
            ),
        ]);
    }
    let mut samples = vec![Vec::new(); scenarios.len()];
    let mut walls = vec![Vec::new(); scenarios.len()];
    let mut reports: Vec<Vec<Move>> = vec![Vec::new(); scenarios.len()];
    // Moves made in each run of each scenario.
    let mut made = vec![Vec::new(); scenarios.len()];
    for _ in 0..runs {
        for (i, &(_, mode, every)) in scenarios.iter().enumerate() {
            let run = AppRun::new(build, app, 4)?;
            // How long the timed part lasts, and where it starts (for a
            // program that does not say), as far as the unmigrated runs so
            // far tell (this round's comes first): the earliest start,
            // since a run that ends before its move measures nothing.
            let timed = median(&samples[0]);
            let setup = walls[0]
                .iter()
                .zip(&samples[0])
                .map(|(w, t)| w - t)
                .fold(f64::INFINITY, f64::min);
            let moves = mode.map(|mode| Moves {
                mode,
                first: every.unwrap_or_else(|| Duration::from_secs_f64(timed / 2.0)),
                every,
                setup: Duration::from_secs_f64(if setup.is_finite() {
                    setup.max(0.0)
                } else {
                    0.0
                }),
            });
            let (seconds, wall, moved) = migrated_run(&node, app, &run.job, moves, over)?;
            samples[i].push(seconds);
            walls[i].push(wall);
            made[i].push(moved.iter().filter(|m| matches!(m, Move::Made(_))).count());
            reports[i].extend(moved);
        }
    }
    if let Some(other) = other {
        other.shutdown();
    }
    node.shutdown();
    let mut rows: Vec<MigratedRun> = scenarios
        .iter()
        .zip(samples.iter().zip(&walls).zip(&reports).zip(&made))
        .map(|((scenario, mode, _), (((s, w), r), made))| {
            // A run that ended before its first move is no migrated run.
            let counts = |&(_, &m): &(_, &usize)| mode.is_none() || m > 0;
            let paired: Vec<f64> = s
                .iter()
                .zip(&samples[0])
                .zip(made)
                .filter(counts)
                .map(|((moved, still), _)| (moved / still - 1.0) * 100.0)
                .collect();
            let unmoved_runs = made.iter().filter(|&&m| mode.is_some() && m == 0).count();
            let moved: Vec<&MigrationReport> = r
                .iter()
                .filter_map(|m| match m {
                    Move::Made(report) => Some(report),
                    _ => None,
                })
                .collect();
            let count = |f: fn(&Move) -> bool| r.iter().filter(|m| f(m)).count();
            let downtimes: Vec<f64> = moved.iter().map(|r| r.downtime_us as f64).collect();
            MigratedRun {
                app: app.label(),
                scenario: scenario.clone(),
                median: median(s),
                samples: s.clone(),
                wall_median: median(w),
                wall_samples: w.clone(),
                migrations: moved.len() as f64 / (runs - unmoved_runs).max(1) as f64,
                failed_moves: count(|m| matches!(m, Move::Failed)),
                ended_moves: count(|m| matches!(m, Move::Ended)),
                unmoved_runs,
                downtime_us: (!downtimes.is_empty()).then(|| median(&downtimes)),
                slowdown_pct: (!paired.is_empty()).then(|| median(&paired)),
                paired_pct: paired,
            }
        })
        .collect();
    let (btl, native) = match over {
        Over::Kernels => ("self,vader", "Open MPI, shared memory (native)"),
        Over::Nodes => ("self,tcp", "Open MPI, TCP (native)"),
    };
    let (mut samples, mut walls) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let run = AppRun::new(build, app, 4)?;
        let t = Instant::now();
        let out = run.open_mpi(btl)?;
        walls.push(t.elapsed().as_secs_f64());
        samples.push(app.seconds(&out).context("under Open MPI")?);
    }
    rows.push(MigratedRun {
        app: app.label(),
        scenario: native.into(),
        median: median(&samples),
        samples,
        wall_median: median(&walls),
        wall_samples: walls,
        migrations: 0.0,
        failed_moves: 0,
        ended_moves: 0,
        unmoved_runs: 0,
        downtime_us: None,
        slowdown_pct: None,
        paired_pct: Vec::new(),
    });
    Ok(rows)
}

/// Runs `job` (of `app`) on `node`, moving ranks as `moves` says; returns
/// the seconds of its timed part (its answer checked), the job's wall time
/// and what became of each move.
fn migrated_run(
    node: &Node,
    app: &App,
    job: &JobSpec,
    moves: Option<Moves>,
    over: Over,
) -> anyhow::Result<(f64, f64, Vec<Move>)> {
    let done = AtomicBool::new(false);
    let name = app.program();
    let (marked, timed_from) = std::sync::mpsc::channel();
    let marked = app.says_when_timed().then_some((TIMED_PART_STARTS, marked));
    let t = Instant::now();
    std::thread::scope(|s| {
        let (done, node, name) = (&done, node, &name);
        let mover = s.spawn(move || {
            let mut reports = Vec::new();
            let Some(Moves {
                mode,
                first,
                every,
                setup,
            }) = moves
            else {
                return reports;
            };
            // The timed part's start, once known.
            let mut origin = None;
            let mut next = first;
            let mut turn = 0usize;
            while !done.load(Ordering::Relaxed) {
                origin = origin.or_else(|| timed_part_start(&timed_from, t + setup));
                if origin.is_none_or(|o| o.elapsed() < next) {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                // There and back: every kernel already runs two ranks, so
                // staying there would measure the imbalance, not the move.
                let ranks = ranks_of(node, name);
                if let Some(&(pid, at)) = ranks.get(turn % ranks.len().max(1)) {
                    let away = match over {
                        Over::Kernels => {
                            KernelId::new(at.node, (at.index + 1) % node.kernel_count())
                        }
                        Over::Nodes => KernelId::new(other_node(node, at.node), 0),
                    };
                    for to in [away, at] {
                        match node.migrate(pid, to, Some(mode)) {
                            Ok(r) => reports.push(Move::Made(r)),
                            Err(_) if !ranks_of(node, name).iter().any(|&(p, _)| p == pid) => {
                                reports.push(Move::Ended);
                                break;
                            }
                            Err(e) => {
                                let why = atoll_node::report(&e);
                                progress::note(&format!("  move of {pid} to {to} failed: {why}"));
                                reports.push(Move::Failed);
                            }
                        }
                    }
                }
                turn += 1;
                match every {
                    Some(e) => next += e,
                    None => break,
                }
            }
            reports
        });
        let out = atoll_job_marked(node, job, marked);
        done.store(true, Ordering::Relaxed);
        let reports = mover.join().expect("the mover thread");
        let wall = t.elapsed().as_secs_f64();
        let seconds = app.seconds(&out?.0).context("while migrated")?;
        Ok((seconds, wall, reports))
    })
}

/// A node of `node`'s cluster other than `from` (`from` if there is none).
fn other_node(node: &Node, from: u16) -> u16 {
    node.members()
        .iter()
        .map(|m| m.node)
        .find(|&id| id != from)
        .unwrap_or(from)
}

/// The pids and kernels of the processes named `name`, on every kernel.
fn ranks_of(node: &Node, name: &str) -> Vec<(atoll_abi::Pid, KernelId)> {
    node.ps()
        .map(|ks| {
            ks.into_iter()
                .flat_map(|k| k.processes)
                .filter(|p| p.name == name)
                .map(|p| (p.pid, p.kernel))
                .collect()
        })
        .unwrap_or_default()
}
