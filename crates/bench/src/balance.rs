//! The balancer's experiment (issue 12; the future work of seeds 000 and
//! 001): an unbalanced CPU-bound workload, `bench/guests/balance.c` (N
//! processes of lengths 1 to 4 units, all started at once), on atoll with
//! the balancer off and on, started on one kernel or placed by the DQDT;
//! then the same mixed with pairs of processes in IPC ping-pong; beside the
//! same C source under Linux's scheduler (pipes for the pairs). Last,
//! processes that are dear to copy (each holding and rewriting `--hold-mib`
//! of memory), started on one of two nodes joined over loopback TLS, with
//! both balancers off and on: a move between nodes copies the process, and
//! the balancer must not make such a workload slower than leaving it.
//!
//! Each run reports its makespan; the ideal one, from the CPU time the
//! processes used in that very run (their sum over the CPUs, or the longest
//! process or pair if that is more); the mean time a CPU-bound process
//! waited, runnable, for a CPU (its wall time from its fork minus its CPU
//! time); how long the slowest pair took; and the balancer's moves.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use schemars::JsonSchema;
use serde::Serialize;

use super::plot::{grouped_bars, BarGroup};
use super::{artifact, atoll_job, command_line, field, job_on_kernel0, md_table, median, native};
use super::{page_head, text_table, Machine, Recorded};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Processes of the workload
    #[arg(long, default_value_t = 32)]
    n: u32,
    /// Rounds of xorshift in one unit of work (a process does 1 to 4 units)
    #[arg(long, default_value_t = 20_000_000)]
    unit: u64,
    /// Kernels of the node (and the CPUs the ideal is counted over)
    #[arg(long, default_value_t = 2)]
    kernels: u16,
    /// Pairs of processes in IPC ping-pong in the mixed workload
    #[arg(long, default_value_t = 4)]
    pairs: u32,
    /// Round trips each pair makes
    #[arg(long, default_value_t = 50_000)]
    rounds: u32,
    /// Runs of each configuration; medians are reported
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Processes of the workload between two nodes
    #[arg(long, default_value_t = 8)]
    far_n: u32,
    /// MiB each process of the workload between two nodes holds, and
    /// rewrites before each unit of its work (0: no workload between nodes)
    #[arg(long, default_value_t = 128)]
    hold_mib: u32,
}

/// The atoll configurations: label, balancer on, balance.c's KERNEL,
/// mixed with IPC pairs.
const ATOLL: [(&str, bool, &str, bool); 6] = [
    ("atoll, all on kernel 0, balancer off", false, "0", false),
    ("atoll, all on kernel 0, balancer on", true, "0", false),
    (
        "atoll, placed by the DQDT, balancer off",
        false,
        "any",
        false,
    ),
    ("atoll, placed by the DQDT, balancer on", true, "any", false),
    (
        "mixed: atoll, all on kernel 0, balancer off",
        false,
        "0",
        true,
    ),
    (
        "mixed: atoll, all on kernel 0, balancer on",
        true,
        "0",
        true,
    ),
];
/// The Linux configurations: label, mixed.
const LINUX: [(&str, bool); 2] = [
    ("Linux, fork (CFS places and balances)", false),
    ("mixed: Linux, fork, pipes", true),
];

const HEAD: [&str; 7] = [
    "configuration",
    "makespan (ms)",
    "ideal (ms)",
    "makespan / ideal",
    "mean wait runnable (ms)",
    "slowest pair (ms)",
    "balancer moves",
];

#[derive(Serialize, JsonSchema)]
pub struct BalanceReport {
    name: String,
    command: String,
    machine: Machine,
    n: u32,
    unit: u64,
    kernels: u16,
    /// Of the workload between two nodes (absent from the results recorded
    /// before it was run).
    #[serde(default)]
    far_n: u32,
    #[serde(default)]
    hold_mib: u32,
    configurations: Vec<Configuration>,
    notes: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
struct Configuration {
    name: String,
    runs: Vec<Run>,
    makespan_ms: f64,
    ideal_ms: f64,
    /// Median over runs of makespan / ideal.
    over_ideal: f64,
    wait_ms: f64,
    /// The slowest IPC pair, for the mixed workloads.
    pairs_ms: Option<f64>,
    moves: f64,
}

#[derive(Serialize, JsonSchema)]
struct Run {
    makespan_ms: f64,
    ideal_ms: f64,
    wait_ms: f64,
    pairs_ms: Option<f64>,
    moves: u64,
}

impl Configuration {
    fn new(name: &str, runs: Vec<Run>) -> Configuration {
        let m = |f: fn(&Run) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
        Configuration {
            name: name.into(),
            makespan_ms: m(|r| r.makespan_ms),
            ideal_ms: m(|r| r.ideal_ms),
            over_ideal: m(|r| r.makespan_ms / r.ideal_ms),
            wait_ms: m(|r| r.wait_ms),
            pairs_ms: runs
                .iter()
                .map(|r| r.pairs_ms)
                .collect::<Option<Vec<f64>>>()
                .map(|p| median(&p)),
            moves: m(|r| r.moves as f64),
            runs,
        }
    }
}

/// Reads one run of balance.c: its makespan, each child's wall and CPU
/// time, and each pair end's; `cpus` is what the ideal is counted over.
fn parse(out: &str, n: u32, cpus: u16, moves: u64) -> anyhow::Result<Run> {
    let (mut cpu, mut longest, mut wait, mut children) = (0.0, 0.0f64, 0.0, 0);
    let mut makespan = None;
    // Per pair: both ends' CPU time (they take turns), the client's wall.
    let mut pairs: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
    for line in out.lines().filter(|l| l.starts_with("balance ")) {
        if line.contains(" pair=") {
            let c = field(line, "cpu_us")?;
            let pair = pairs.entry(field(line, "pair")? as u64).or_default();
            pair.0 += c;
            if !line.contains(" side=server") {
                pair.1 = field(line, "wall_us")?;
            }
            cpu += c;
        } else if line.contains(" child=") {
            let (w, c) = (field(line, "wall_us")?, field(line, "cpu_us")?);
            cpu += c;
            longest = longest.max(c);
            wait += (w - c).max(0.0);
            children += 1;
        } else {
            makespan = Some(field(line, "makespan_us")?);
        }
    }
    let Some(makespan) = makespan else {
        bail!("balance printed no makespan: {out}");
    };
    if children != n {
        bail!("{children} of {n} children reported");
    }
    let chain = pairs.values().map(|p| p.0).fold(0.0, f64::max);
    Ok(Run {
        makespan_ms: makespan / 1e3,
        ideal_ms: (cpu / f64::from(cpus)).max(longest).max(chain) / 1e3,
        wait_ms: wait / f64::from(n) / 1e3,
        pairs_ms: (!pairs.is_empty())
            .then(|| pairs.values().map(|p| p.1).fold(0.0, f64::max) / 1e3),
        moves,
    })
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<BalanceReport> {
    let program = std::path::absolute(artifact(build, "wasm/balance.wasm")?)?;
    let linux = artifact(build, "native/balance")?;
    let (n, unit) = (a.n.to_string(), a.unit.to_string());
    let mixed = [a.pairs.to_string(), a.rounds.to_string()];
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get()) as u16;
    let mut configurations = Vec::new();
    for (label, balance, kernel, with_pairs) in ATOLL {
        progress::note(label);
        let mut config = ctx.node_config(Some(a.kernels), 10);
        config.balance = balance;
        let node = atoll_node::Node::start(config)?;
        node.runtime().load_file(&program, true)?;
        let mut args = vec!["balance".into(), n.clone(), unit.clone(), kernel.into()];
        if with_pairs {
            args.extend(mixed.clone());
        }
        let runs = atoll_runs(&node, &program, &args, a.n, a.kernels, a.runs);
        node.shutdown();
        configurations.push(Configuration::new(label, runs?));
    }
    for (label, with_pairs) in LINUX {
        progress::note(label);
        let mut args = vec![n.clone(), unit.clone()];
        if with_pairs {
            args.push("-".into()); // KERNEL: Linux's scheduler places them
            args.extend(mixed.clone());
        }
        let runs = linux_runs(&linux, &args, a.n, cpus, a.runs)?;
        configurations.push(Configuration::new(label, runs));
    }
    if a.hold_mib > 0 {
        configurations.extend(far(ctx, &program, &linux, &a)?);
    }
    Ok(BalanceReport {
        name: "balance".into(),
        command: command_line(),
        machine: Machine::probe(),
        n: a.n,
        unit: a.unit,
        kernels: a.kernels,
        far_n: a.far_n,
        hold_mib: a.hold_mib,
        configurations,
        notes: vec![
            format!(
                "{} CPU-bound processes of 1 to 4 units of {} xorshift rounds (process i does \
                 1 + i % 4), forked at once by one process; mixed: {} pairs of processes \
                 making {} round trips of one message each (atoll IPC sendrec; Linux pipes) \
                 forked first; atoll on {} kernels, Linux on {} CPUs; medians of {} runs",
                a.n,
                a.unit,
                a.pairs,
                a.rounds,
                a.kernels,
                cpus,
                a.runs.max(1)
            ),
            "ideal: the processes' CPU time in that run over the CPUs, or the longest \
             process's if more; wait: a process's wall time from its fork to its end minus \
             its CPU time (waiting runnable, or moving), averaged over the processes"
                .into(),
            "the balancer moves runnable processes from the most to the least loaded child \
             of each DQDT subtree, every 10 ms at most 16 at a time, none that has been on its \
             kernel less than 20 ms (500 ms once the balancer has moved it); a kernel that \
             runs out of work asks at once for up to half of a busier kernel's waiting \
             processes, and within a node may take them sooner (at once, or after 20 ms for \
             one the balancer moved before); to another node it moves a process only once \
             the process has been on its kernel ten times what copying it is expected to \
             take (its memory at the rate the kernel's copies to other nodes went, 1 GB/s \
             before the first, or its own last such move's time if longer)"
                .into(),
            format!(
                "between 2 nodes: {} processes of the same lengths, forked by a parent holding \
                 {} MiB (each child a copy) and each rewriting its memory before each unit, on \
                 two nodes of one kernel each joined over loopback TLS (both on this machine's \
                 {} CPUs), all started on node 0; Linux: the same forks (copy-on-write, then \
                 rewritten) under its scheduler",
                a.far_n, a.hold_mib, cpus
            ),
        ],
    })
}

/// The workload of processes dear to copy, started on the first of two
/// nodes, with both balancers off and on; and under Linux.
fn far(
    ctx: &Context,
    program: &Path,
    linux: &Path,
    a: &Args,
) -> anyhow::Result<Vec<Configuration>> {
    let args = |kernel: &str| {
        let mut v = vec![
            "-m".to_string(),
            a.hold_mib.to_string(),
            a.far_n.to_string(),
        ];
        v.extend([a.unit.to_string(), kernel.to_string()]);
        v
    };
    let mut configurations = Vec::new();
    for balance in [false, true] {
        let label = format!(
            "between 2 nodes, {} MiB each: all on node 0, balancer {}",
            a.hold_mib,
            if balance { "on" } else { "off" }
        );
        progress::note(&label);
        let certs = tempfile::tempdir()?;
        let (first, second) = crate::cluster::pair(ctx, certs.path(), balance)?;
        let runs = both_in_tree(&first).and_then(|()| {
            first.runtime().load_file(program, true)?;
            let mut argv = vec!["balance".to_string()];
            argv.extend(args("0"));
            atoll_runs(&first, program, &argv, a.far_n, 2, a.runs)
        });
        second.shutdown();
        first.shutdown();
        configurations.push(Configuration::new(&label, runs?));
    }
    let label = format!("between 2 nodes: Linux, fork, {} MiB each", a.hold_mib);
    progress::note(&label);
    let runs = linux_runs(linux, &args("-"), a.far_n, 2, a.runs)?;
    configurations.push(Configuration::new(&label, runs));
    Ok(configurations)
}

/// `runs` runs of balance.c (`argv`, loaded on `node`) with `n` children,
/// whose ideal is counted over `cpus`, each with the moves the balancers
/// made during it.
fn atoll_runs(
    node: &atoll_node::Node,
    program: &Path,
    argv: &[String],
    n: u32,
    cpus: u16,
    runs: usize,
) -> anyhow::Result<Vec<Run>> {
    (0..runs.max(1))
        .map(|_| {
            let before = balancer_moves(node)?;
            let (out, _) = atoll_job(node, &job_on_kernel0(program.into(), argv.to_vec()))?;
            parse(&out, n, cpus, balancer_moves(node)?.saturating_sub(before))
        })
        .collect()
}

/// The same under Linux: the native build with `args`.
fn linux_runs(
    linux: &Path,
    args: &[String],
    n: u32,
    cpus: u16,
    runs: usize,
) -> anyhow::Result<Vec<Run>> {
    (0..runs.max(1))
        .map(|_| parse(&native(linux, args)?.0, n, cpus, 0))
        .collect()
}

/// Waits until the first kernel of `node` knows the loads of both nodes
/// (its tree has the other node's kernel): until then its balancer sees
/// nowhere to move a process.
fn both_in_tree(node: &atoll_node::Node) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        let kernel0 = node
            .ps()?
            .into_iter()
            .find(|r| r.kernel.index == 0 && r.kernel.node == node.id());
        if kernel0.is_some_and(|r| r.tree.iter().any(|e| e.load.kernels >= 2)) {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(10) {
            bail!(
                "node {}'s kernel 0 did not learn of the other node in 10 s",
                node.id()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The moves every kernel of `node` has made for its balancer so far
/// (those it called off were not made: a move started before a run and
/// called off during it lowers the count).
fn balancer_moves(node: &atoll_node::Node) -> anyhow::Result<u64> {
    Ok(node
        .ps()?
        .iter()
        .map(|r| r.balancer_moves - r.balancer_called_off)
        .sum())
}

impl BalanceReport {
    fn rows(&self) -> Vec<[String; 7]> {
        self.configurations
            .iter()
            .map(|c| {
                [
                    c.name.clone(),
                    format!("{:.0}", c.makespan_ms),
                    format!("{:.0}", c.ideal_ms),
                    format!("{:.3}", c.over_ideal),
                    format!("{:.0}", c.wait_ms),
                    c.pairs_ms.map_or("—".into(), |p| format!("{p:.0}")),
                    format!("{:.0}", c.moves),
                ]
            })
            .collect()
    }
}

impl Recorded for BalanceReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!("{}\n", self.name);
        s += &text_table(HEAD, &self.rows());
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += "![balance](balance.png)\n\n";
        s += &md_table(HEAD, &self.rows());
        s += "\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        let group = |name: &str, f: fn(&Configuration) -> f64| BarGroup {
            name: name.into(),
            bars: self
                .configurations
                .iter()
                .map(|c| (c.name.clone(), f(c)))
                .collect(),
        };
        grouped_bars(
            &dir.join("balance.png"),
            "an unbalanced workload: makespan over the ideal, balancer off and on, vs Linux",
            "makespan / ideal (1 is perfect balance)",
            &[group("makespan / ideal", |c| c.over_ideal)],
            false,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_read_from_what_balance_prints() {
        let out = "balance child=0 work=1 wall_us=300 cpu_us=100 value=0x1\n\
                   balance child=1 work=2 wall_us=500 cpu_us=200 value=0x2\n\
                   balance n=2 unit=5 makespan_us=600\n";
        let run = parse(out, 2, 2, 3).unwrap();
        assert_eq!(run.pairs_ms, None);
        assert_eq!(run.makespan_ms, 0.6);
        assert_eq!(run.ideal_ms, 0.2); // the longest process, more than 300/2
        assert_eq!(run.wait_ms, 0.25);
        assert_eq!(run.moves, 3);
        assert!(parse(out, 3, 2, 0).is_err());
        assert!(parse("balance child=0 work=1\n", 1, 1, 0).is_err());
        let mixed = format!(
            "{out}balance pair=0 rounds=9 side=server wall_us=900 cpu_us=400\n\
             balance pair=0 rounds=9 wall_us=1000 cpu_us=350\n"
        );
        let run = parse(&mixed, 2, 2, 0).unwrap();
        assert_eq!(run.pairs_ms, Some(1.0));
        assert_eq!(run.ideal_ms, 0.75); // the pair's two ends take turns
    }
}
