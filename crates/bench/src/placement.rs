//! Seed 001's experiment (ALMOS-MK): what creating, replacing and ending a
//! process costs, with the target on the caller's kernel (local) or on
//! another (remote), as the number of kernels grows; beside Linux fork,
//! fork+exec and kill of native processes on the same machine.
//!
//! atoll: `bench/guests/placebench.c` (spawn+wait, fork+wait,
//! fork+exec+wait, spawn+kill+wait, one at a time) on a node of K kernels,
//! the target kernel 0 (its own) or K-1; then two nodes of one kernel each
//! joined over loopback TLS, the target the other node. Linux:
//! `bench/native/place_native.c` with the same heap, so fork copies (or
//! maps) as much.

use std::path::Path;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

use super::plot::{Level, LineChart, Series};
use super::{artifact, atoll_job, command_line, field, job_on_kernel0, md_table, median, native};
use super::{page_head, text_table, Machine, Recorded};
use crate::progress;
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Kernel counts of the nodes measured
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8, 16, 64])]
    kernels: Vec<u16>,
    /// Iterations per run
    #[arg(long, default_value_t = 300)]
    n: u32,
    /// KiB of heap the measuring process holds (what fork copies)
    #[arg(long, default_value_t = 1024)]
    heap_kib: u32,
    /// Runs of each; medians are reported
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// Each operation: placebench's name for it, its label, and the Linux
/// mechanism it is compared with (place_native's name for it).
const OPS: [(&str, &str, &str); 4] = [
    ("spawn", "spawn+wait", "fork_exec"),
    ("fork", "fork+wait", "fork"),
    ("exec", "fork+exec+wait", "fork_exec"),
    ("kill", "spawn+kill+wait", "kill"),
];

const HEAD: [&str; 6] = [
    "operation",
    "kernels",
    "target",
    "atoll (us)",
    "Linux (us)",
    "atoll's advantage",
];

const IDLE_HEAD: [&str; 2] = ["idle node, kernels", "atoll, CPU (ms per s)"];

#[derive(Serialize, JsonSchema)]
pub struct PlacementReport {
    name: String,
    command: String,
    machine: Machine,
    heap_kib: u32,
    /// Linux, per mechanism (place_native's name): median and samples, us.
    linux: Vec<Measured>,
    /// atoll, per operation, kernel count and target.
    atoll: Vec<Measured>,
    /// What each node measured uses with nothing to run.
    idle: Vec<Idle>,
    notes: Vec<String>,
}

/// A node of `kernels` kernels with no process: the CPU its threads use
/// (kernels, ticker, loaders), in milliseconds per second of wall time.
#[derive(Serialize, JsonSchema)]
struct Idle {
    kernels: u16,
    cpu_ms_per_s: f64,
}

#[derive(Serialize, JsonSchema)]
struct Measured {
    what: String,
    /// Nodes, and kernels per node.
    nodes: u16,
    kernels: u16,
    /// "local" (the caller's kernel), "remote" (another kernel of its
    /// node) or "other node".
    target: String,
    median_us: f64,
    samples_us: Vec<f64>,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<PlacementReport> {
    let program = std::path::absolute(artifact(build, "wasm/placebench.wasm")?)?;
    let place_native = artifact(build, "native/place_native")?;
    let target = artifact(build, "native/true")?;
    let mut linux = Vec::new();
    for mechanism in ["fork", "fork_exec", "kill"] {
        let mut samples = Vec::new();
        for _ in 0..a.runs.max(1) {
            let args = [mechanism, &a.n.to_string(), &a.heap_kib.to_string()]
                .map(String::from)
                .into_iter()
                .chain([target.display().to_string()])
                .collect::<Vec<_>>();
            let (out, _) = native(&place_native, &args)?;
            samples.push(field(&out, "us")?);
        }
        linux.push(Measured {
            what: mechanism.into(),
            nodes: 1,
            kernels: 0,
            target: "local".into(),
            median_us: median(&samples),
            samples_us: samples,
        });
    }
    let (mut atoll, mut idle) = (Vec::new(), Vec::new());
    for &kernels in &a.kernels {
        progress::note(&format!("{kernels} kernels:"));
        progress::say(format!("bench placement: {kernels} kernels"));
        let node = atoll_node::Node::start(super::bench_node(ctx, Some(kernels)))?;
        let mut targets = vec![("local", "0".to_string())];
        if kernels > 1 {
            targets.push(("remote", (kernels - 1).to_string()));
        }
        atoll.extend(measure(&node, &program, &a, 1, kernels, &targets)?);
        idle.push(Idle {
            kernels,
            cpu_ms_per_s: idle_cpu_ms_per_s(),
        });
        node.shutdown();
    }
    progress::note("two nodes:");
    let certs = tempfile::tempdir()?;
    let (first, second) = super::cluster::pair(ctx, certs.path(), false)?;
    let across = measure(&first, &program, &a, 2, 1, &[("other node", "1.0".into())]);
    second.shutdown();
    first.shutdown();
    atoll.extend(across?);
    Ok(PlacementReport {
        name: "placement".into(),
        command: command_line(),
        machine: Machine::probe(),
        heap_kib: a.heap_kib,
        linux,
        atoll,
        idle,
        notes: vec![
            format!(
                "{} iterations per run, one at a time; the measuring process holds {} KiB of \
                 heap; atoll's target is kernel 0 (the caller's, local), the last kernel \
                 (remote), or the other of two nodes joined over loopback TLS; medians of {} \
                 runs",
                a.n,
                a.heap_kib,
                a.runs.max(1)
            ),
            "atoll fork: the parent's memory copied into a new instance on the caller's \
             kernel, then (remote) a migration before the child's first instruction; exec: \
             a new instance of the module from the same UArea, then the same move"
                .into(),
            "Linux: fork+_exit+waitpid, fork+execv(build/native/true)+waitpid, fork of a \
             pause()d child+kill(SIGKILL)+waitpid; spawn is compared with fork+exec"
                .into(),
            format!(
                "idle: after its runs, each node is left without a process for {} ms, then \
                 the CPU time of this process (every thread of the node; getrusage) is read \
                 over {} ms; Linux spends nothing on processes that do not exist",
                IDLE_SETTLE.as_millis(),
                IDLE_WINDOW.as_millis()
            ),
        ],
    })
}

/// How long a node is left alone before its idle CPU is read, and over
/// how long it is read.
const IDLE_SETTLE: Duration = Duration::from_millis(500);
const IDLE_WINDOW: Duration = Duration::from_secs(1);

/// Milliseconds of CPU per second this process uses while it only sleeps:
/// what the node it runs spends with nothing to do.
fn idle_cpu_ms_per_s() -> f64 {
    std::thread::sleep(IDLE_SETTLE);
    let (cpu, t) = (process_cpu(), Instant::now());
    std::thread::sleep(IDLE_WINDOW);
    (process_cpu() - cpu).as_secs_f64() * 1e3 / t.elapsed().as_secs_f64()
}

/// The CPU time of this process so far, user and system, all threads.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` fills in the `rusage` it is given; RUSAGE_SELF
    // cannot fail.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Every operation on `node` (`nodes` of `kernels` kernels), once per
/// target: (its name, placebench's KERNEL argument).
fn measure(
    node: &atoll_node::Node,
    program: &Path,
    a: &Args,
    nodes: u16,
    kernels: u16,
    targets: &[(&str, String)],
) -> anyhow::Result<Vec<Measured>> {
    node.runtime().load_file(program, true)?;
    let mut out = Vec::new();
    for (op, _, _) in OPS {
        for (target, kernel) in targets {
            let mut samples = Vec::new();
            for _ in 0..a.runs.max(1) {
                let args = [
                    "placebench",
                    op,
                    &a.n.to_string(),
                    kernel,
                    &a.heap_kib.to_string(),
                ];
                let job = job_on_kernel0(program.to_path_buf(), args.map(String::from).to_vec());
                let (text, _) = atoll_job(node, &job)?;
                samples.push(field(&text, "us")?);
            }
            out.push(Measured {
                what: op.into(),
                nodes,
                kernels,
                target: target.to_string(),
                median_us: median(&samples),
                samples_us: samples,
            });
        }
    }
    Ok(out)
}

impl PlacementReport {
    fn linux_us(&self, mechanism: &str) -> f64 {
        self.linux
            .iter()
            .find(|m| m.what == mechanism)
            .map_or(f64::NAN, |m| m.median_us)
    }

    fn idle_rows(&self) -> Vec<[String; 2]> {
        self.idle
            .iter()
            .map(|i| [i.kernels.to_string(), format!("{:.1}", i.cpu_ms_per_s)])
            .collect()
    }

    fn rows(&self) -> Vec<[String; 6]> {
        self.atoll
            .iter()
            .map(|m| {
                let (_, label, mechanism) = OPS.iter().find(|o| o.0 == m.what).expect("an op");
                let linux = self.linux_us(mechanism);
                let kernels = match m.nodes {
                    1 => m.kernels.to_string(),
                    n => format!("{n} nodes x {}", m.kernels),
                };
                [
                    label.to_string(),
                    kernels,
                    m.target.clone(),
                    format!("{:.1}", m.median_us),
                    format!("{linux:.1} ({})", mechanism.replace('_', "+")),
                    format!("{:.2}x", linux / m.median_us),
                ]
            })
            .collect()
    }
}

impl Recorded for PlacementReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = format!("{} (us per operation)\n", self.name);
        s += &text_table(HEAD, &self.rows());
        s += &text_table(IDLE_HEAD, &self.idle_rows());
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        s += "![placement](placement.png)\n\n";
        s += &md_table(HEAD, &self.rows());
        s += "\n";
        s += &md_table(IDLE_HEAD, &self.idle_rows());
        s += "\n";
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        // One node's kernel counts along x; the two-node runs are in the table.
        let one_node = || self.atoll.iter().filter(|m| m.nodes == 1);
        let mut kernels: Vec<u16> = one_node().map(|m| m.kernels).collect();
        kernels.dedup();
        let categories: Vec<String> = kernels.iter().map(u16::to_string).collect();
        let mut series = Vec::new();
        for (op, label, _) in OPS {
            for target in ["local", "remote"] {
                let values = kernels
                    .iter()
                    .map(|&k| {
                        one_node()
                            .find(|m| m.what == op && m.kernels == k && m.target == target)
                            .map_or(f64::NAN, |m| m.median_us)
                    })
                    .collect();
                series.push(Series {
                    name: format!("atoll {label}, {target}"),
                    values,
                });
            }
        }
        let levels: Vec<Level> = ["fork", "fork_exec", "kill"]
            .iter()
            .enumerate()
            .map(|(i, m)| Level {
                name: format!("Linux {}", m.replace('_', "+")),
                value: self.linux_us(m),
                colour_of: 2 + 2 * i,
            })
            .collect();
        LineChart {
            title: "process creation and end: atoll vs Linux",
            x_label: "kernels on the node",
            value_label: "us per operation",
            categories: &categories,
            series: &series,
            levels: &levels,
            log: true,
        }
        .draw(&dir.join("placement.png"))
    }
}
