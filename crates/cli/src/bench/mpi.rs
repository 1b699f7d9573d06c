//! MPI, OSU-style: point-to-point latency and bandwidth and Allreduce
//! latency of atoll's MPI (the guest library, `sdk/mpi`) beside Open MPI
//! running the same C source natively (`bench/mpi/osu.c`).
//!
//! atoll runs on one kernel (both ranks share it), on two kernels, and on
//! two nodes joined over loopback TLS; Open MPI with its shared-memory
//! transport (vader) and with TCP over loopback, both with the ob1
//! point-to-point layer.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use atoll_node::{JobSpec, MapBy, Node, Ranks};
use serde::Serialize;

use super::plot::{LineChart, Series};
use super::{artifact, atoll_job, command_line, md_table, median, page_head, text_table};
use super::{Machine, Recorded};
use crate::commands::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Largest message of the point-to-point tests, in bytes (Allreduce
    /// goes to a quarter of it)
    #[arg(long, default_value_t = 4 << 20)]
    max: u64,
    /// Ranks of the Allreduce runs
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..))]
    ranks: u32,
    /// Runs of each configuration; medians are reported
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// The configurations, in the report's column order. The ratio column
/// compares the first two.
const ATOLL_2K: &str = "atoll, 2 kernels";
const OMPI_SHM: &str = "Open MPI, shared memory";
const CONFIGS: [&str; 5] = [
    ATOLL_2K,
    OMPI_SHM,
    "atoll, 1 kernel",
    "atoll, 2 nodes (TLS)",
    "Open MPI, TCP",
];

#[derive(Serialize)]
pub struct MpiReport {
    name: String,
    command: String,
    machine: Machine,
    configs: Vec<String>,
    tests: Vec<Test>,
    notes: Vec<String>,
}

/// One OSU test: a value per size and configuration.
#[derive(Serialize)]
struct Test {
    name: String,
    unit: String,
    higher_is_better: bool,
    sizes: Vec<u64>,
    /// Per configuration (the order of `configs`): per size, the median and
    /// every run's value.
    medians: Vec<Vec<f64>>,
    samples: Vec<Vec<Vec<f64>>>,
}

impl Test {
    /// atoll on two kernels against Open MPI's shared memory, per size
    /// (>1: atoll is better).
    fn advantage(&self, i: usize) -> f64 {
        let (a, o) = (self.medians[0][i], self.medians[1][i]);
        if self.higher_is_better {
            a / o
        } else {
            o / a
        }
    }
}

/// How one configuration runs `osu WHAT MAX` with N ranks. Each atoll
/// configuration starts its node(s) for its run alone, so that no other
/// node's kernels share the cores meanwhile.
enum Runner {
    Atoll { kernels: u16 },
    AtollTwoNodes,
    OpenMpi { btl: &'static str },
}

impl Runner {
    fn run(
        &self,
        ctx: &Context,
        wasm: &Path,
        native: &Path,
        job: &JobSpec,
    ) -> anyhow::Result<String> {
        match self {
            Runner::Atoll { kernels } => {
                let node = Node::start(ctx.node_config(Some(*kernels), 10))?;
                node.runtime().load_file(wasm, true)?;
                let out = atoll_job(&node, job);
                node.shutdown();
                Ok(out?.0)
            }
            Runner::AtollTwoNodes => {
                let certs = tempfile::tempdir()?;
                let (first, second) = super::cluster::pair(ctx, certs.path())?;
                first.runtime().load_file(wasm, true)?;
                let out = atoll_job(&first, job);
                second.shutdown();
                first.shutdown();
                Ok(out?.0)
            }
            Runner::OpenMpi { btl } => {
                let ranks = job.ranks.as_ref().map_or(1, |r| r.count);
                open_mpi(native, btl, &job.args[1..], ranks)
            }
        }
    }
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<MpiReport> {
    let wasm = std::path::absolute(artifact(build, "wasm/osu.wasm")?)?;
    let native = std::path::absolute(build.join("native/osu_mpi"))?;
    if !native.exists() || which("mpirun").is_none() {
        bail!(
            "Open MPI is missing ({} and mpirun): `bash scripts/setup.sh` installs \
             openmpi-bin and libopenmpi-dev, then `make all` builds it",
            native.display()
        );
    }
    let runners = [
        Runner::Atoll { kernels: 2 },
        Runner::OpenMpi { btl: "self,vader" },
        Runner::Atoll { kernels: 1 },
        Runner::AtollTwoNodes,
        Runner::OpenMpi { btl: "self,tcp" },
    ];
    let max_reduce = (a.max / 4).max(8);
    let tests = [
        ("latency", "us", false, a.max, 2),
        ("bw", "MB/s", true, a.max, 2),
        ("allreduce", "us", false, max_reduce, a.ranks),
    ];
    let mut out = Vec::new();
    for (what, unit, higher, max, ranks) in tests {
        eprintln!("{what} ({unit}), {ranks} ranks, up to {max} bytes:");
        let mut samples = vec![Vec::new(); CONFIGS.len()];
        let mut sizes = Vec::new();
        // Interleaved, so that drift in the machine touches every
        // configuration alike.
        for _ in 0..a.runs.max(1) {
            for (c, runner) in runners.iter().enumerate() {
                let job = osu_job(&wasm, what, max, ranks);
                let text = runner.run(ctx, &wasm, &native, &job)?;
                let (s, values) = parse(&text, what)?;
                sizes = s;
                samples[c].push(values);
            }
        }
        // samples[config][run][size] -> [config][size][run]
        let samples: Vec<Vec<Vec<f64>>> = samples
            .into_iter()
            .map(|runs| {
                (0..sizes.len())
                    .map(|i| runs.iter().map(|r| r[i]).collect())
                    .collect()
            })
            .collect();
        let medians = samples
            .iter()
            .map(|per_size| per_size.iter().map(|s| median(s)).collect())
            .collect();
        out.push(Test {
            name: what.into(),
            unit: unit.into(),
            higher_is_better: higher,
            sizes,
            medians,
            samples,
        });
    }
    let small = &out[0];
    let small_ratio = median(
        &(0..small.sizes.len())
            .filter(|&i| small.sizes[i] <= 64)
            .map(|i| small.medians[0][i] / small.medians[1][i])
            .collect::<Vec<_>>(),
    );
    Ok(MpiReport {
        name: "mpi".into(),
        command: command_line(),
        machine: Machine::probe(),
        configs: CONFIGS.iter().map(|s| s.to_string()).collect(),
        tests: out,
        notes: vec![
            format!(
                "small messages (0 to 64 B): atoll on two kernels takes {small_ratio:.1}x the \
                 latency of Open MPI's shared memory (target: at most 1.5x)"
            ),
            "atoll: each message is one IPC (ipc_sendnb to a waiting rank) or an outbox entry \
             and a notification; more than 40 bytes go by rendezvous, one grant-checked copy"
                .into(),
            "Open MPI 4.1: mpirun -n N --mca pml ob1 --mca btl self,vader | self,tcp; its \
             shared memory polls, atoll's ranks block in the kernel"
                .into(),
        ],
    })
}

fn osu_job(wasm: &Path, what: &str, max: u64, ranks: u32) -> JobSpec {
    let mut job = super::job_on_kernel0(
        wasm.to_path_buf(),
        vec!["osu".into(), what.into(), max.to_string()],
    );
    job.kernel = None;
    job.ranks = Some(Ranks {
        count: ranks,
        map_by: MapBy::Kernel,
        tag_output: false,
    });
    job
}

fn open_mpi(native: &Path, btl: &str, args: &[String], ranks: u32) -> anyhow::Result<String> {
    let out = Command::new("mpirun")
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            &ranks.to_string(),
        ])
        .args(["--mca", "pml", "ob1", "--mca", "btl", btl])
        .arg(native)
        .args(args)
        .output()
        .context("running mpirun")?;
    if !out.status.success() {
        bail!(
            "mpirun ({btl}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The sizes and values of osu's lines for `what`.
fn parse(text: &str, what: &str) -> anyhow::Result<(Vec<u64>, Vec<f64>)> {
    let key = if what == "bw" { "mbs" } else { "us" };
    let mut sizes = Vec::new();
    let mut values = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(what)) {
        sizes.push(super::field(line, "size")? as u64);
        values.push(super::field(line, key)?);
    }
    if sizes.is_empty() {
        bail!("osu {what} printed nothing: `{}`", text.trim());
    }
    Ok((sizes, values))
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

impl MpiReport {
    fn rows(&self, t: &Test) -> Vec<[String; 7]> {
        (0..t.sizes.len())
            .map(|i| {
                let v = |c: usize| format!("{:.2}", t.medians[c][i]);
                [
                    size_label(t.sizes[i]),
                    v(0),
                    v(1),
                    v(2),
                    v(3),
                    v(4),
                    format!("{:.2}x", t.advantage(i)),
                ]
            })
            .collect()
    }

    const HEAD: [&'static str; 7] = [
        "size",
        CONFIGS[0],
        CONFIGS[1],
        CONFIGS[2],
        CONFIGS[3],
        CONFIGS[4],
        "atoll 2 kernels vs Open MPI shm",
    ];
}

impl Recorded for MpiReport {
    fn name(&self) -> &str {
        &self.name
    }

    fn table(&self) -> String {
        let mut s = String::new();
        for t in &self.tests {
            s += &format!("{} ({}; median of {} runs)\n", t.name, t.unit, runs(t));
            s += &text_table(Self::HEAD, &self.rows(t));
        }
        for n in &self.notes {
            s += &format!("  {n}\n");
        }
        s
    }

    fn markdown(&self) -> String {
        let mut s = page_head(&self.name, &self.command, &self.machine);
        for t in &self.tests {
            s += &format!(
                "## {} ({}, median of {} runs)\n\n![{}](mpi-{}.png)\n\n",
                t.name,
                t.unit,
                runs(t),
                t.name,
                t.name
            );
            s += &md_table(Self::HEAD, &self.rows(t));
        }
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s
    }

    fn write_extra(&self, dir: &Path) -> anyhow::Result<()> {
        for t in &self.tests {
            let categories: Vec<String> = t.sizes.iter().map(|&b| size_label(b)).collect();
            let series: Vec<Series> = self
                .configs
                .iter()
                .zip(&t.medians)
                .map(|(name, values)| Series {
                    name: name.clone(),
                    values: values.clone(),
                })
                .collect();
            let title = format!("MPI {} ({})", t.name, t.unit);
            LineChart {
                title: &title,
                x_label: "message size (bytes)",
                value_label: &t.unit,
                categories: &categories,
                series: &series,
                levels: &[],
                log: true,
            }
            .draw(&dir.join(format!("mpi-{}.png", t.name)))?;
        }
        Ok(())
    }
}

fn runs(t: &Test) -> usize {
    t.samples
        .first()
        .and_then(|c| c.first())
        .map_or(0, Vec::len)
}
