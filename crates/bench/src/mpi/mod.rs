//! MPI, OSU-style: point-to-point latency and bandwidth and Allreduce
//! latency of atoll's MPI (the guest library, `sdk/mpi`) beside Open MPI
//! running the same C source natively (`bench/mpi/osu.c`); the NPB kernels
//! EP, IS and CG (`bench/mpi/npb_*.c`) and HPL (`bench/hpl/`) the same way;
//! and seed 002's experiment, EP and HPL with ranks migrated while they run.
//!
//! atoll runs on one kernel (both ranks share it), on two kernels, and on
//! two nodes joined over loopback TLS; Open MPI with its shared-memory
//! transport (vader) and with TCP over loopback, both with the ob1
//! point-to-point layer.

mod report;
mod seed002;

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};
use atoll_node::{JobSpec, MapBy, Node, Ranks};
use atoll_process::Preopen;
use schemars::JsonSchema;
use serde::Serialize;

use crate::{artifact, atoll_job, command_line, median, progress, Context, Machine};
use seed002::{seed002, Over};

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
    /// Problem class of the NPB kernels (EP, IS, CG): S or W
    #[arg(long, default_value = "W", value_parser = ["S", "W"])]
    class: String,
    /// Order of the matrix HPL solves beside the NPB kernels
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(100..))]
    hpl_n: u32,
    /// Problem class of the NPB kernels in seed 002's experiment, unless
    /// `--migrate-npb` gives one (class A: EP about 8 s here, CG about 5 s);
    /// `none` leaves NPB out of it
    #[arg(long, default_value = "A", value_parser = ["S", "W", "A", "none"])]
    migrate_class: String,
    /// The NPB kernels of seed 002's experiment, comma-separated, each
    /// `KERNEL` or `KERNEL:CLASS`: EP computes and hardly talks, CG talks at
    /// every step, IS sends every key at every step (its timed part lasts
    /// 3 s at class B here, 0.7 s at A)
    #[arg(long, default_value = "ep,cg,is:B", value_delimiter = ',', value_parser = npb_choice)]
    migrate_npb: Vec<(&'static str, Option<String>)>,
    /// Order of HPL's matrix in seed 002's experiment (4800 runs about 10 s
    /// here); 0 leaves HPL out of it
    #[arg(long, default_value_t = 4800)]
    migrate_hpl_n: u32,
    /// Rounds of seed 002's experiment (each runs every scenario once)
    #[arg(long, default_value_t = 5)]
    migrate_runs: usize,
}

const MIGRATION_HEAD: [&str; 7] = [
    "application",
    "scenario",
    "seconds (timed part)",
    "job wall (s)",
    "migrations per run",
    "median downtime (us)",
    "vs unmigrated, same round (median, range)",
];

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

#[derive(Serialize, JsonSchema)]
pub struct MpiReport {
    name: String,
    command: String,
    machine: Machine,
    configs: Vec<String>,
    tests: Vec<Test>,
    /// The NPB kernels and HPL: seconds per configuration.
    apps: Vec<AppTimes>,
    /// Seed 002's experiment: a run with ranks migrated against the same
    /// run unmigrated and native.
    migration: Vec<MigratedRun>,
    notes: Vec<String>,
}

/// One scenario of seed 002's experiment: an application on 4 ranks over
/// two kernels, some ranks migrated while it runs.
#[derive(Serialize, JsonSchema)]
struct MigratedRun {
    /// The application, as `App::label` names it.
    app: String,
    scenario: String,
    /// Median and every run's seconds of the timed part, as the program
    /// times it (the moves fall inside it).
    median: f64,
    samples: Vec<f64>,
    /// Median and every run's wall time of the job, seconds: the timed
    /// part, and the setup before it (CG builds its matrix for seconds).
    /// Absent from recordings made before the timed part was measured,
    /// whose `median` and `samples` are the wall time.
    #[serde(default)]
    wall_median: f64,
    #[serde(default)]
    wall_samples: Vec<f64>,
    /// Moves per run that moved, on average (each there or back is one).
    migrations: f64,
    /// Moves that failed while the rank lived on, over all runs (each is
    /// reported as it fails).
    #[serde(default)]
    failed_moves: usize,
    /// Moves cut short by the rank's end, over all runs: the last move of a
    /// run can still be under way when the program finishes. Recordings
    /// made before they were told apart count them in `failed_moves`.
    #[serde(default)]
    ended_moves: usize,
    /// Runs that ended before their first move: left out of the slowdown.
    #[serde(default)]
    unmoved_runs: usize,
    /// Median downtime of its migrations, microseconds.
    downtime_us: Option<f64>,
    /// The timed part against the unmigrated atoll run's, percent: the
    /// median over the rounds of `paired_pct`.
    slowdown_pct: Option<f64>,
    /// Each round's run against that round's unmigrated run, percent.
    paired_pct: Vec<f64>,
}

/// One application run in every configuration (each answer checked).
#[derive(Serialize, JsonSchema)]
struct AppTimes {
    name: String,
    ranks: u32,
    /// Per configuration: the median and every run's seconds, as the
    /// program times its own computation.
    medians: Vec<f64>,
    samples: Vec<Vec<f64>>,
}

/// One entry of `--migrate-npb`: `ep`, `is` or `cg`, and the class it
/// runs at if it names one (each program's own classes).
fn npb_choice(s: &str) -> Result<(&'static str, Option<String>), String> {
    let (kernel, class) = match s.split_once(':') {
        Some((k, c)) => (k, Some(c)),
        None => (s, None),
    };
    let (kernel, classes) = match kernel {
        "ep" => ("ep", "SWA"),
        "cg" => ("cg", "SWA"),
        "is" => ("is", "SWAB"),
        _ => {
            return Err(format!(
                "`{kernel}` is not an NPB kernel here: ep, cg or is"
            ))
        }
    };
    match class {
        Some(c) if c.len() != 1 || !classes.contains(c) => Err(format!(
            "NPB {} has classes {} here, not `{c}`",
            kernel.to_uppercase(),
            classes
                .chars()
                .map(String::from)
                .collect::<Vec<_>>()
                .join(", ")
        )),
        _ => Ok((kernel, class.map(str::to_string))),
    }
}

/// An application the benchmark runs: an NPB kernel of a class, or HPL on
/// a matrix of order `n` (block size 80, the squarest grid of the ranks).
enum App {
    Npb { kernel: &'static str, class: String },
    Hpl { n: u32 },
}

impl App {
    /// The module's name: build/wasm/NAME.wasm, build/native/NAME_mpi.
    fn program(&self) -> String {
        match self {
            App::Npb { kernel, .. } => format!("npb_{kernel}"),
            App::Hpl { .. } => "hpl".into(),
        }
    }

    fn label(&self) -> String {
        match self {
            App::Npb { kernel, class } => format!("{} {class}", kernel.to_uppercase()),
            App::Hpl { n } => format!("HPL N={n}"),
        }
    }

    /// argv, the program's name first.
    fn args(&self, ranks: u32) -> Vec<String> {
        let mut args = vec![self.program()];
        match self {
            App::Npb { class, .. } => args.push(class.clone()),
            App::Hpl { n } => {
                // P <= Q, as close to square as the ranks allow.
                let p = (1..=ranks)
                    .filter(|&p| ranks.is_multiple_of(p) && p * p <= ranks)
                    .max()
                    .unwrap_or(1);
                args.extend([
                    n.to_string(),
                    "80".into(),
                    p.to_string(),
                    (ranks / p).to_string(),
                ]);
            }
        }
        args
    }

    /// Whether the program says when its timed part starts (the NPB
    /// kernels do; HPL times itself deep inside HPCC's code).
    fn says_when_timed(&self) -> bool {
        matches!(self, App::Npb { .. })
    }

    /// The seconds the program reports for its computation, once its answer
    /// checked out (NPB's verification, HPL's residual check).
    fn seconds(&self, text: &str) -> anyhow::Result<f64> {
        let (ok, key) = match self {
            App::Npb { .. } => (super::field(text, "verified")? == 1.0, "seconds"),
            App::Hpl { .. } => (text.trim_end().ends_with("PASSED"), "time"),
        };
        if !ok {
            bail!("{} gave a wrong answer: {text}", self.label());
        }
        super::field(text, key)
    }
}

/// Where one run of an application runs: the atoll job (its working
/// directory preopened as `.`), the native program, and that directory
/// (HPL reads hpccinf.txt and writes hpccoutf.txt there).
struct AppRun {
    job: JobSpec,
    native: std::path::PathBuf,
    dir: tempfile::TempDir,
}

impl AppRun {
    fn new(build: &Path, app: &App, ranks: u32) -> anyhow::Result<AppRun> {
        let name = app.program();
        let program = std::path::absolute(artifact(build, &format!("wasm/{name}.wasm"))?)?;
        let native = std::path::absolute(artifact(build, &format!("native/{name}_mpi"))?)?;
        let args = app.args(ranks);
        let mut job = mpi_job(
            &program,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            ranks,
        );
        let dir = tempfile::tempdir()?;
        job.preopens = vec![Preopen {
            host: dir.path().to_path_buf(),
            guest: ".".into(),
        }];
        Ok(AppRun { job, native, dir })
    }

    /// The same run natively under Open MPI.
    fn open_mpi(&self, btl: &str) -> anyhow::Result<String> {
        let ranks = self.job.ranks.as_ref().map_or(1, |r| r.count);
        open_mpi(
            &self.native,
            btl,
            &self.job.args[1..],
            ranks,
            Some(self.dir.path()),
        )
    }
}

/// One OSU test: a value per size and configuration.
#[derive(Serialize, JsonSchema)]
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
        let dir = job.preopens.first().map(|p| p.host.as_path());
        match self {
            Runner::Atoll { kernels } => {
                let node = Node::start(super::bench_node(ctx, Some(*kernels)))?;
                node.runtime().load_file(wasm, true)?;
                let out = atoll_job(&node, job);
                node.shutdown();
                Ok(out?.0)
            }
            Runner::AtollTwoNodes => {
                let certs = tempfile::tempdir()?;
                let (first, second) = super::cluster::pair(ctx, certs.path(), false)?;
                first.runtime().load_file(wasm, true)?;
                let out = atoll_job(&first, job);
                second.shutdown();
                first.shutdown();
                Ok(out?.0)
            }
            Runner::OpenMpi { btl } => {
                let ranks = job.ranks.as_ref().map_or(1, |r| r.count);
                open_mpi(native, btl, &job.args[1..], ranks, dir)
            }
        }
    }
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<MpiReport> {
    let wasm = std::path::absolute(artifact(build, "wasm/osu.wasm")?)?;
    let native = std::path::absolute(build.join("native/osu_mpi"))?;
    if !native.exists() {
        bail!(
            "{} is missing: `bash scripts/setup.sh` installs Open MPI (openmpi-bin, \
             libopenmpi-dev), then `make all` builds it",
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
        progress::note(&format!(
            "{what} ({unit}), {ranks} ranks, up to {max} bytes:"
        ));
        let mut samples = vec![Vec::new(); CONFIGS.len()];
        let mut sizes = Vec::new();
        // Interleaved, so that drift in the machine touches every
        // configuration alike.
        for _ in 0..a.runs.max(1) {
            for (c, runner) in runners.iter().enumerate() {
                let job = mpi_job(&wasm, &["osu", what, &max.to_string()], ranks);
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
    let mut apps = Vec::new();
    for app in ["ep", "is", "cg"]
        .map(|kernel| App::Npb {
            kernel,
            class: a.class.clone(),
        })
        .into_iter()
        .chain([App::Hpl { n: a.hpl_n }])
    {
        progress::note(&format!("{}, {} ranks:", app.label(), a.ranks));
        let mut samples = vec![Vec::new(); CONFIGS.len()];
        for _ in 0..a.runs.max(1) {
            for (c, runner) in runners.iter().enumerate() {
                let run = AppRun::new(build, &app, a.ranks)?;
                let text = runner.run(ctx, &run.job.program, &run.native, &run.job)?;
                samples[c].push(
                    app.seconds(&text)
                        .with_context(|| format!("in {}", CONFIGS[c]))?,
                );
            }
        }
        apps.push(AppTimes {
            name: app.label(),
            ranks: a.ranks,
            medians: samples.iter().map(|s| median(s)).collect(),
            samples,
        });
    }
    let mut seed = Vec::new();
    if a.migrate_class != "none" {
        for (kernel, class) in &a.migrate_npb {
            seed.push(App::Npb {
                kernel,
                class: class.clone().unwrap_or_else(|| a.migrate_class.clone()),
            });
        }
    }
    if a.migrate_hpl_n > 0 {
        seed.push(App::Hpl { n: a.migrate_hpl_n });
    }
    let mut migration = Vec::new();
    for app in &seed {
        for over in [Over::Kernels, Over::Nodes] {
            migration.extend(seed002(ctx, build, app, a.migrate_runs.max(1), over)?);
        }
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
        apps,
        migration,
        notes: vec![
            format!(
                "small messages (0 to 64 B): atoll on two kernels takes {small_ratio:.1}x the \
                 latency of Open MPI's shared memory (target: at most 1.5x)"
            ),
            "atoll: each message is one asynchronous send (ipc_senda), handed at once to a \
             rank waiting in receive, else queued at it; up to 64 KiB go eagerly (40 bytes in \
             the message, more in its body: ipc_senda_body), more by rendezvous, one \
             grant-checked copy"
                .into(),
            "Open MPI 4.1: mpirun -n N --mca pml ob1 --mca btl self,vader | self,tcp; it \
             polls its shared memory; an atoll rank polls the NoC inside its receive while \
             its kernel has nothing else to run, then blocks"
                .into(),
        ],
    })
}

/// An MPI job of `ranks` ranks over the node's kernels: `program` with argv
/// `args`.
fn mpi_job(program: &Path, args: &[&str], ranks: u32) -> JobSpec {
    let mut job = super::job_on_kernel0(
        program.to_path_buf(),
        args.iter().map(|a| a.to_string()).collect(),
    );
    job.kernel = None;
    job.ranks = Some(Ranks {
        count: ranks,
        map_by: MapBy::Kernel,
        tag_output: false,
    });
    job
}

/// Runs `native` under mpirun with `ranks` ranks, in `dir` if given.
fn open_mpi(
    native: &Path,
    btl: &str,
    args: &[String],
    ranks: u32,
    dir: Option<&Path>,
) -> anyhow::Result<String> {
    let mut mpirun = Command::new("mpirun");
    if let Some(dir) = dir {
        mpirun.current_dir(dir);
    }
    let out = mpirun
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
        .context("running mpirun (Open MPI: `bash scripts/setup.sh` installs it)")?;
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

fn runs(t: &Test) -> usize {
    t.samples
        .first()
        .and_then(|c| c.first())
        .map_or(0, Vec::len)
}
