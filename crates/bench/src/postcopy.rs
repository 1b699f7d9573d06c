//! Pre-copy against post-copy between two nodes, by what a move costs the
//! process that is moved.
//!
//! `dirty` fills its memory, then rewrites a working set of it a number of
//! times and prints a checksum of the whole. Each workload runs unmoved,
//! and moved once from node 0 to node 1 as soon as its memory is filled,
//! by pre-copy (`--mode copy`: rounds while it runs, then a stop-and-copy
//! of what is still dirty) and by post-copy (`--mode postcopy`: it runs
//! there at once, its memory faulted in or streamed after it); the three
//! take turns. The job's wall time, against the unmoved run's, is what the
//! move cost it; every run must print the unmoved run's checksum. A
//! process that rewrites all of its memory is the case pre-copy cannot
//! converge on (Xen's writable working set); one that rewrites a
//! mebibyte is the case it was made for.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use atoll_abi::KernelId;
use atoll_migration::{MigrationReport, Mode};
use atoll_node::Node;
use schemars::JsonSchema;
use serde::Serialize;

use crate::cluster::Measured;
use crate::plot::{grouped_bars, BarGroup};
use crate::{
    artifact, atoll_job_marked, command_line, job_on_kernel0, md_table, page_head, progress,
    text_table, Context, Machine, Recorded,
};

#[derive(clap::Args)]
pub struct Args {
    /// Rounds (each runs every workload unmoved and moved both ways); the
    /// medians are reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// The 64 MiB workload only, three rounds (for a quick look)
    #[arg(long)]
    quick: bool,
}

/// Bytes each workload rewrites in all, MiB: about a second unmoved here.
const REWRITTEN_MIB: u64 = 10 << 10;
/// Longest wait for a job to fill its memory.
const PATIENCE: Duration = Duration::from_secs(300);

/// The result of `atoll bench postcopy`.
#[derive(Serialize, JsonSchema)]
pub struct PostcopyReport {
    name: String,
    command: String,
    machine: Machine,
    runs: usize,
    workloads: Vec<Workload>,
    notes: Vec<String>,
}

/// One `dirty` job, unmoved and moved by each mode.
#[derive(Serialize, JsonSchema)]
struct Workload {
    memory_mib: u64,
    /// The part of its memory it rewrites, KiB.
    wws_kib: u64,
    passes: u64,
    /// Submission to exit, ms.
    unmoved_ms: Measured,
    precopy: Moved,
    postcopy: Moved,
}

/// The runs of one workload moved by one mode.
#[derive(Serialize, JsonSchema)]
struct Moved {
    /// Submission to exit, ms.
    wall_ms: Measured,
    downtime_us: Measured,
    /// Bytes sent before the process ran at the destination (post-copy
    /// sends its memory after, once).
    bytes: Measured,
    reports: Vec<MigrationReport>,
}

impl Moved {
    fn of(walls: Vec<f64>, reports: Vec<MigrationReport>) -> Moved {
        let of = |f: fn(&MigrationReport) -> f64| Measured::of(reports.iter().map(f).collect());
        Moved {
            wall_ms: Measured::of(walls),
            downtime_us: of(|r| r.downtime_us as f64),
            bytes: of(|r| r.rounds.iter().map(|x| x.bytes).sum::<u64>() as f64),
            reports,
        }
    }
}

impl Workload {
    fn label(&self) -> String {
        match self.wws_kib == self.memory_mib << 10 {
            true => format!("{} MiB, rewriting all of it", self.memory_mib),
            false => format!("{} MiB, rewriting {} KiB", self.memory_mib, self.wws_kib),
        }
    }
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<PostcopyReport> {
    let dirty = std::path::absolute(artifact(build, "wasm/dirty.wasm")?)?;
    let runs = if a.quick { 3 } else { a.runs.max(1) };
    // (MiB, WWS KiB): all of it, where pre-copy cannot converge, and one
    // MiB of it, where it does.
    let plan: &[(u64, u64)] = if a.quick {
        &[(64, 64 << 10)]
    } else {
        &[(64, 64 << 10), (256, 256 << 10), (256, 1 << 10)]
    };
    let certs = tempfile::tempdir()?;
    let (node, other) = crate::cluster::pair(ctx, certs.path(), false)?;
    node.runtime().load_file(&dirty, true)?;
    let there = KernelId::new(other.id(), 0);
    let mut workloads = Vec::new();
    for &(mib, wws_kib) in plan {
        let w = workload(&node, &dirty, there, mib, wws_kib, runs)?;
        progress::note(&format!(
            "  {:<30} unmoved {:>5.0} ms; pre-copy {:>5.0} ms (downtime {:>6.0} us); post-copy {:>5.0} ms (downtime {:>6.0} us)",
            w.label(),
            w.unmoved_ms.median,
            w.precopy.wall_ms.median,
            w.precopy.downtime_us.median,
            w.postcopy.wall_ms.median,
            w.postcopy.downtime_us.median
        ));
        workloads.push(w);
    }
    other.shutdown();
    node.shutdown();
    Ok(PostcopyReport {
        name: "postcopy".into(),
        command: command_line(),
        machine: Machine::probe(),
        runs,
        workloads,
        notes: vec![
            "two atoll nodes of one kernel each in one process, not pinned (the machine has 2 cores), linked by their control and bulk TLS 1.3 connections over loopback".into(),
            format!("`dirty MIB WWS_KIB PASSES`: fills MIB MiB, then rewrites its first WWS KiB PASSES times ({REWRITTEN_MIB} MiB in all) and prints a checksum of all of its memory, which every run must print alike; run on node 0 and, once filled, moved to node 1 by pre-copy (`atoll migrate --mode copy`) or by post-copy (`--mode postcopy`); the three take turns, `runs` rounds"),
            "wall: submission to exit; added: over the unmoved runs' median; downtime: on the source, from the freeze until the destination's answer (an upper bound by its trip); sent before it runs: what went before the process ran at the destination (post-copy then sends each block of its memory that has a page once, faulted in or streamed)".into(),
            "CRIU, the alternative on Linux (its lazy pages are a post-copy), is not compared: it does not run on this VM (`atoll bench migrate` checks and says why)".into(),
        ],
    })
}

/// `dirty` of `mib` MiB rewriting `wws_kib` KiB, unmoved and moved to
/// `there` by each mode, `runs` rounds.
fn workload(
    node: &Node,
    dirty: &Path,
    there: KernelId,
    mib: u64,
    wws_kib: u64,
    runs: usize,
) -> anyhow::Result<Workload> {
    let passes = (REWRITTEN_MIB << 10) / wws_kib;
    let args = [mib, wws_kib, passes].map(|n| n.to_string());
    let job = job_on_kernel0(
        dirty.to_path_buf(),
        std::iter::once("dirty".to_string()).chain(args).collect(),
    );
    let mut unmoved = Vec::new();
    let (mut walls, mut reports) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut expected: Option<String> = None;
    for round in 0..runs {
        progress::say(format!(
            "bench postcopy: {mib} MiB, round {}/{runs}",
            round + 1
        ));
        for mode in [None, Some(Mode::Copy), Some(Mode::PostCopy)] {
            let ((stdout, wall), report) = moved_once(node, &job, there, mode)
                .with_context(|| format!("dirty {mib} MiB, moved by {mode:?}"))?;
            let sum = stdout.lines().last().unwrap_or_default().to_string();
            match &expected {
                Some(e) if *e != sum => bail!("dirty moved by {mode:?} printed {sum}, not {e}"),
                _ => expected = Some(sum),
            }
            let ms = wall.as_secs_f64() * 1e3;
            match (mode, report) {
                (None, _) => unmoved.push(ms),
                (Some(mode), Some(r)) => {
                    let i = usize::from(mode == Mode::PostCopy);
                    walls[i].push(ms);
                    reports[i].push(r);
                }
                (Some(mode), None) => bail!("dirty ended before it was moved by {mode}"),
            }
        }
    }
    let [pre_walls, post_walls] = walls;
    let [pre, post] = reports;
    Ok(Workload {
        memory_mib: mib,
        wws_kib,
        passes,
        unmoved_ms: Measured::of(unmoved),
        precopy: Moved::of(pre_walls, pre),
        postcopy: Moved::of(post_walls, post),
    })
}

/// Runs `job` to its end on `node`, moving it to `there` by `mode` once it
/// has filled its memory: its output and wall time, and the move's report.
fn moved_once(
    node: &Node,
    job: &atoll_node::JobSpec,
    there: KernelId,
    mode: Option<Mode>,
) -> anyhow::Result<((String, Duration), Option<MigrationReport>)> {
    let (ready_tx, ready) = mpsc::channel();
    std::thread::scope(|s| {
        let running = s.spawn(|| atoll_job_marked(node, job, Some(("dirty: ready", ready_tx))));
        let report = match (mode, ready.recv_timeout(PATIENCE)) {
            (Some(mode), Ok(_)) => {
                let pid = node
                    .ps()?
                    .into_iter()
                    .flat_map(|r| r.processes)
                    .find(|p| p.name == "dirty")
                    .context("dirty is not running")?
                    .pid;
                Some(node.migrate(pid, there, Some(mode))?)
            }
            _ => None,
        };
        let out = running.join().expect("the job's thread")?;
        Ok((out, report))
    })
}

impl PostcopyReport {
    fn rows(&self) -> Vec<[String; 8]> {
        self.workloads
            .iter()
            .map(|w| {
                let unmoved = w.unmoved_ms.median;
                let added = |m: &Moved| m.wall_ms.median - unmoved;
                [
                    w.label(),
                    format!("{unmoved:.0}"),
                    format!(
                        "{:.0} ({:+.0})",
                        w.precopy.wall_ms.median,
                        added(&w.precopy)
                    ),
                    format!(
                        "{:.0} ({:+.0})",
                        w.postcopy.wall_ms.median,
                        added(&w.postcopy)
                    ),
                    format!(
                        "{:.0} / {:.0}",
                        w.precopy.downtime_us.median, w.postcopy.downtime_us.median
                    ),
                    format!(
                        "{:.1} / {:.2}",
                        w.precopy.bytes.median / 1048576.0,
                        w.postcopy.bytes.median / 1048576.0
                    ),
                    format!("{:.2}x", added(&w.postcopy) / added(&w.precopy)),
                    format!("{}", w.passes),
                ]
            })
            .collect()
    }
}

const HEAD: [&str; 8] = [
    "workload, moved once from node 0 to node 1",
    "unmoved (ms)",
    "pre-copy (ms, added)",
    "post-copy (ms, added)",
    "downtime (us), pre / post",
    "sent before it runs (MiB), pre / post",
    "post-copy's added time / pre-copy's",
    "passes",
];

impl Recorded for PostcopyReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!("{} (medians of {} rounds)\n", self.name, self.runs);
        s += &text_table(HEAD, &self.rows());
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += &format!("Medians of {} rounds.\n\n", self.runs);
        s += &md_table(HEAD, &self.rows());
        s += "\n![](postcopy.png)\n\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        let groups: Vec<BarGroup> = self
            .workloads
            .iter()
            .map(|w| BarGroup {
                name: w.label(),
                bars: vec![
                    ("unmoved".into(), w.unmoved_ms.median),
                    ("pre-copy".into(), w.precopy.wall_ms.median),
                    ("post-copy".into(), w.postcopy.wall_ms.median),
                ],
            })
            .collect();
        grouped_bars(
            &dir.join("postcopy.png"),
            "A process moved once between two nodes: its wall time",
            "ms",
            &groups,
            false,
        )
    }
}
