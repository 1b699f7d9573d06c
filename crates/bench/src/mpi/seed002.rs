//! Seed 002's experiment: one run of an application with a rank moved
//! during it, against the same run unmoved.

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

/// Seed 002's experiment (Xen VMs running MPI, one migrated: HPL +28 %,
/// NPB SP +10 %): `app` on 4 ranks over 2 kernels, unmigrated, with one
/// rank moved to the other kernel and back halfway (copy, hand-over), and
/// with a rank moved there and back every second (copy); beside the same
/// run under Open MPI. Times are the job's wall time, start to end.
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
) -> anyhow::Result<Vec<MigratedRun>> {
    progress::note(&format!(
        "seed 002: {}, 4 ranks on 2 kernels, migrated while it runs:",
        app.label()
    ));
    let node = Node::start(crate::bench_node(ctx, Some(2)))?;
    // Prepared before the first run, so that no run pays for it.
    node.runtime()
        .load_file(&AppRun::new(build, app, 4)?.job.program, true)?;
    let second = Duration::from_secs(1);
    let scenarios = [
        ("atoll, unmigrated", None, None),
        (
            "atoll, one rank moved and back halfway (copy)",
            Some(Mode::Copy),
            None,
        ),
        (
            "atoll, one rank moved and back halfway (hand-over)",
            Some(Mode::Handover),
            None,
        ),
        (
            "atoll, a rank moved and back every second (copy)",
            Some(Mode::Copy),
            Some(second),
        ),
    ];
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
            let (seconds, moved) = migrated_run(&node, app, &run.job, moves)?;
            samples[i].push(seconds);
            reports[i].extend(moved);
        }
    }
    node.shutdown();
    let mut rows: Vec<MigratedRun> = scenarios
        .iter()
        .zip(samples.iter().zip(&reports))
        .map(|(&(scenario, ..), (s, r))| {
            let paired: Vec<f64> = s
                .iter()
                .zip(&samples[0])
                .map(|(moved, still)| (moved / still - 1.0) * 100.0)
                .collect();
            let downtimes: Vec<f64> = r.iter().map(|r| r.downtime_us as f64).collect();
            MigratedRun {
                app: app.label(),
                scenario: scenario.into(),
                median: median(s),
                samples: s.clone(),
                migrations: r.len() / runs,
                downtime_us: (!downtimes.is_empty()).then(|| median(&downtimes)),
                slowdown_pct: Some(median(&paired)),
                paired_pct: paired,
            }
        })
        .collect();
    let mut samples = Vec::new();
    for _ in 0..runs {
        let run = AppRun::new(build, app, 4)?;
        let t = Instant::now();
        let out = run.open_mpi("self,vader")?;
        samples.push(t.elapsed().as_secs_f64());
        app.seconds(&out).context("under Open MPI")?;
    }
    rows.push(MigratedRun {
        app: app.label(),
        scenario: "Open MPI, shared memory (native)".into(),
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
                    let away = KernelId::new(at.node, (at.index + 1) % node.kernel_count());
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
