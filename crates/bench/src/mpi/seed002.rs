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
use crate::{atoll_job, median, progress, Context};

/// How seed 002's experiment moves a rank while an application runs: first
/// at `first` into the run, then every `every` if given.
#[derive(Clone, Copy)]
struct Moves {
    mode: Mode,
    first: Duration,
    every: Option<Duration>,
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
/// with one rank moved to the other kernel or node and back halfway (copy;
/// and hand-over within a node), and with a rank moved there and back
/// every second (copy); beside the same run under Open MPI (shared memory
/// within a node, TCP between nodes). Times are the job's wall time, start
/// to end.
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
            let (first, second) = crate::cluster::pair(ctx, certs.path())?;
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
    let mut samples = vec![Vec::new(); scenarios.len()];
    let mut reports: Vec<Vec<MigrationReport>> = vec![Vec::new(); scenarios.len()];
    for _ in 0..runs {
        for (i, &(_, mode, every)) in scenarios.iter().enumerate() {
            let run = AppRun::new(build, app, 4)?;
            let moves = mode.map(|mode| Moves {
                mode,
                // Halfway through an unmigrated run, as far as the runs so
                // far tell (this round's comes first).
                first: every.unwrap_or_else(|| Duration::from_secs_f64(median(&samples[0]) / 2.0)),
                every,
            });
            let (seconds, moved) = migrated_run(&node, app, &run.job, moves, over)?;
            samples[i].push(seconds);
            reports[i].extend(moved);
        }
    }
    if let Some(other) = other {
        other.shutdown();
    }
    node.shutdown();
    let mut rows: Vec<MigratedRun> = scenarios
        .iter()
        .zip(samples.iter().zip(&reports))
        .map(|((scenario, ..), (s, r))| {
            let paired: Vec<f64> = s
                .iter()
                .zip(&samples[0])
                .map(|(moved, still)| (moved / still - 1.0) * 100.0)
                .collect();
            let downtimes: Vec<f64> = r.iter().map(|r| r.downtime_us as f64).collect();
            MigratedRun {
                app: app.label(),
                scenario: scenario.clone(),
                median: median(s),
                samples: s.clone(),
                migrations: r.len() / runs,
                downtime_us: (!downtimes.is_empty()).then(|| median(&downtimes)),
                slowdown_pct: Some(median(&paired)),
                paired_pct: paired,
            }
        })
        .collect();
    let (btl, native) = match over {
        Over::Kernels => ("self,vader", "Open MPI, shared memory (native)"),
        Over::Nodes => ("self,tcp", "Open MPI, TCP (native)"),
    };
    let mut samples = Vec::new();
    for _ in 0..runs {
        let run = AppRun::new(build, app, 4)?;
        let t = Instant::now();
        let out = run.open_mpi(btl)?;
        samples.push(t.elapsed().as_secs_f64());
        app.seconds(&out).context("under Open MPI")?;
    }
    rows.push(MigratedRun {
        app: app.label(),
        scenario: native.into(),
        median: median(&samples),
        samples,
        migrations: 0,
        downtime_us: None,
        slowdown_pct: None,
        paired_pct: Vec::new(),
    });
    Ok(rows)
}

/// Runs `job` (of `app`) on `node`, moving ranks as `moves` says; returns
/// the job's wall time (its answer checked) and the migrations' reports.
fn migrated_run(
    node: &Node,
    app: &App,
    job: &JobSpec,
    moves: Option<Moves>,
    over: Over,
) -> anyhow::Result<(f64, Vec<atoll_migration::MigrationReport>)> {
    let done = AtomicBool::new(false);
    let name = app.program();
    let t = Instant::now();
    std::thread::scope(|s| {
        let mover = s.spawn(|| {
            let mut reports = Vec::new();
            let Some(Moves { mode, first, every }) = moves else {
                return reports;
            };
            let mut next = first;
            let mut turn = 0usize;
            while !done.load(Ordering::Relaxed) {
                if t.elapsed() < next {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                // There and back: every kernel already runs two ranks, so
                // staying there would measure the imbalance, not the move.
                let ranks = ranks_of(node, &name);
                if let Some(&(pid, at)) = ranks.get(turn % ranks.len().max(1)) {
                    let away = match over {
                        Over::Kernels => {
                            KernelId::new(at.node, (at.index + 1) % node.kernel_count())
                        }
                        Over::Nodes => KernelId::new(other_node(node, at.node), 0),
                    };
                    for to in [away, at] {
                        if let Ok(r) = node.migrate(pid, to, Some(mode)) {
                            reports.push(r);
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
        let out = atoll_job(node, job);
        done.store(true, Ordering::Relaxed);
        let reports = mover.join().expect("the mover thread");
        let seconds = t.elapsed().as_secs_f64();
        app.seconds(&out?.0).context("while migrated")?;
        Ok((seconds, reports))
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
