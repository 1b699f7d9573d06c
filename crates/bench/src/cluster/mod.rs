//! Two nodes on one machine, joined by mutual TLS over loopback and over a
//! veth pair: IPC, copies and live migration between them, against what
//! the same link gives two Linux programs.
//!
//! atoll: two nodes of one kernel each, in this process, each with its own
//! runtime and links (the links are real TCP connections with TLS 1.3,
//! through the kernel's loopback; for the veth pair, each node in its own
//! network namespace, as on two hosts). Linux: two threads exchanging 64-byte
//! messages over one TCP connection on loopback (TCP_NODELAY), plain and
//! with the same TLS (rustls, the cluster's certificates), and one thread
//! streaming bytes to another, plain and with TLS. Files: the same C
//! program (`fileio`) with its file on its own node, on the other node
//! (every call served over the link), and built natively.

mod links;
mod report;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use atoll_abi::KernelId;
use atoll_migration::{MigrationReport, Mode};
use atoll_noc::net::identity::Identity;
use atoll_node::Node;
use schemars::JsonSchema;
use serde::Serialize;

use crate::netns::Veth;
use crate::{artifact, atoll_job, command_line, median, progress, Context, Machine};
pub(crate) use links::pair;
use links::{job, json_line, link_rates, pair_over, streams};

#[derive(clap::Args)]
pub struct Args {
    /// Round trips per IPC run
    #[arg(long, default_value_t = 20_000)]
    iters: u32,
    /// Runs of each measurement; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Fewer sizes and runs (for a quick look)
    #[arg(long)]
    quick: bool,
}

/// Bytes of a COPY1 block, and of each write of the Linux stream.
const BLOCK: usize = 1 << 20;
/// Bytes each stream run sends.
const STREAM_BYTES: usize = 256 << 20;
/// The rate of the shaped veth pair, Mbit/s: a 10 Gigabit Ethernet link.
const SHAPED_MBIT: u32 = 10_000;
/// Longest wait for a process to fill its memory, or a job to end.
const PATIENCE: Duration = Duration::from_secs(300);

/// The result of `atoll bench cluster`.
#[derive(Serialize, JsonSchema)]
pub struct ClusterReport {
    name: String,
    command: String,
    machine: Machine,
    runs: usize,
    /// Over loopback.
    #[serde(flatten)]
    loopback: LinkRates,
    /// Over a veth pair between two network namespaces; absent where they
    /// cannot be made (the notes say why).
    veth: Option<LinkRates>,
    migrations: Vec<MigrationRow>,
    /// Over a veth pair shaped to a network's rate; absent where it cannot
    /// be made (the notes say why).
    shaped: Option<ShapedLink>,
    /// `fileio` with its file on the other node, on its own, and native.
    files_remote: FileIo,
    files_local: FileIo,
    files_native: FileIo,
    notes: Vec<String>,
}

/// IPC, copies and streams over one kind of link.
#[derive(Serialize, JsonSchema)]
struct LinkRates {
    /// Round trips of 64-byte messages, ns (median).
    ipc2_ns: Measured,
    tcp_pingpong_ns: Measured,
    tls_pingpong_ns: Measured,
    /// The same ping-pongs, each end polling its socket instead of
    /// sleeping in `read` (as Open MPI's TCP transport does).
    tcp_polled_pingpong_ns: Measured,
    tls_polled_pingpong_ns: Measured,
    /// 1 MiB blocks, MB/s (median).
    copy1_mbps: Measured,
    tcp_stream_mbps: Measured,
    tls_stream_mbps: Measured,
}

impl LinkRates {
    /// The summary's rows for this link, their names ending in `link`.
    fn rows(&self, link: &str) -> Vec<[String; 4]> {
        // `what` names the measure and its unit; `of`, the Linux one it is set against.
        let row = |what: [&str; 2], atoll: &Measured, tcp: &Measured, tls: &Measured, of: &str| {
            let base = if of == "TLS" { tls } else { tcp };
            [
                format!("{} between nodes{link} ({})", what[0], what[1]),
                format!("{:.0}", atoll.median),
                format!("TCP {:.0}, TLS {:.0}", tcp.median, tls.median),
                format!("{:.2}x of {of}", atoll.median / base.median),
            ]
        };
        let polled = [
            format!("IPC2 round trip between nodes{link} (ns), Linux polling"),
            format!("{:.0}", self.ipc2_ns.median),
            format!(
                "TCP {:.0}, TLS {:.0}",
                self.tcp_polled_pingpong_ns.median, self.tls_polled_pingpong_ns.median
            ),
            format!(
                "{:.2}x of TLS",
                self.ipc2_ns.median / self.tls_polled_pingpong_ns.median
            ),
        ];
        vec![
            row(
                ["IPC2 round trip", "ns"],
                &self.ipc2_ns,
                &self.tcp_pingpong_ns,
                &self.tls_pingpong_ns,
                "TLS",
            ),
            polled,
            row(
                ["COPY1 1 MiB", "MB/s"],
                &self.copy1_mbps,
                &self.tcp_stream_mbps,
                &self.tls_stream_mbps,
                "TCP",
            ),
        ]
    }

    /// The round trips, in µs, for the plot.
    fn round_trips(&self, link: &str) -> super::plot::BarGroup {
        super::plot::BarGroup {
            name: format!("64-byte round trip, {link} (us)"),
            bars: vec![
                ("atoll IPC2 between nodes".into(), self.ipc2_ns.median / 1e3),
                ("TCP ping-pong".into(), self.tcp_pingpong_ns.median / 1e3),
                ("TLS ping-pong".into(), self.tls_pingpong_ns.median / 1e3),
                (
                    "TCP, polled".into(),
                    self.tcp_polled_pingpong_ns.median / 1e3,
                ),
                (
                    "TLS, polled".into(),
                    self.tls_polled_pingpong_ns.median / 1e3,
                ),
            ],
        }
    }
}

/// Migrations over a link slower than the two cores can copy: whether
/// pre-copy fills a real network link, which loopback cannot tell (there
/// the link is the same two cores that encrypt and copy).
#[derive(Serialize, JsonSchema)]
struct ShapedLink {
    rate_mbit: u32,
    tcp_stream_mbps: Measured,
    tls_stream_mbps: Measured,
    migrations: Vec<MigrationRow>,
}

/// What `fileio` measured: MB/s of 1 MiB writes and reads, ns per 4 KiB
/// pread (medians).
#[derive(Serialize, JsonSchema)]
struct FileIo {
    write_mbps: Measured,
    read_mbps: Measured,
    pread_ns: Measured,
}

impl FileIo {
    fn of(lines: &[serde_json::Value]) -> FileIo {
        let m = |k: &str| Measured::of(lines.iter().filter_map(|l| l[k].as_f64()).collect());
        FileIo {
            write_mbps: m("write_mbps"),
            read_mbps: m("read_mbps"),
            pread_ns: m("op_ns"),
        }
    }
}

/// Samples of one measurement, and their median.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Measured {
    pub median: f64,
    pub samples: Vec<f64>,
}

impl MigrationRow {
    fn label(&self) -> String {
        match self.idle {
            true => format!("{} MiB, asleep", self.memory_mib),
            false => format!("{} MiB, WWS {} KiB", self.memory_mib, self.wws_kib),
        }
    }
}

impl Measured {
    pub(crate) fn of(samples: Vec<f64>) -> Measured {
        Measured {
            median: median(&samples),
            samples,
        }
    }
}

/// Migrations of one size between the nodes (there and back, repeatedly).
#[derive(Serialize, JsonSchema)]
struct MigrationRow {
    memory_mib: u64,
    /// 0 for a process asleep (`idle`).
    wws_kib: u64,
    /// The process sleeps instead of writing: its migration measures the
    /// link and the copies alone, with no process competing for a core.
    idle: bool,
    downtime_us: f64,
    total_us: f64,
    /// Bytes sent per migration, and the rate of the whole migration.
    bytes: f64,
    throughput_mbps: f64,
    reports: Vec<MigrationReport>,
}

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<ClusterReport> {
    let ipcbench = std::path::absolute(artifact(build, "wasm/ipcbench.wasm")?)?;
    let dirty = std::path::absolute(artifact(build, "wasm/dirty.wasm")?)?;
    let fileio = std::path::absolute(artifact(build, "wasm/fileio.wasm")?)?;
    let fileio_native = artifact(build, "native/fileio")?;
    let runs = if a.quick { 3 } else { a.runs.max(1) };
    let certs = tempfile::tempdir()?;
    let (a_node, b_node) = pair(ctx, certs.path(), false)?;
    let first = Identity::load(certs.path(), "n0")?;
    let there = KernelId::new(b_node.id(), 0);
    for program in [&ipcbench, &dirty, &fileio] {
        a_node.runtime().load_file(program, true)?;
    }

    progress::note("IPC2 and COPY1 between nodes, against TCP and TLS on the same loopback:");
    let rates = |a_node: &Node, there: KernelId, veth: Option<&Veth>| {
        link_rates(a_node, &ipcbench, there, &first, veth, runs, a.iters)
    };
    let loopback = rates(&a_node, there, None)?;
    let mut notes = Vec::new();
    let veth = match Veth::make() {
        Ok(veth) => {
            progress::note("the same over a veth pair, each node in its own network namespace:");
            let (a_veth, b_veth) = pair_over(ctx, certs.path(), &veth)?;
            a_veth.runtime().load_file(&ipcbench, true)?;
            let r = rates(&a_veth, KernelId::new(b_veth.id(), 0), Some(&veth))?;
            b_veth.shutdown();
            a_veth.shutdown();
            Some(r)
        }
        Err(why) => {
            notes.push(format!("veth pair: not measured ({why:#})"));
            None
        }
    };

    progress::note("files: on the other node, on its own node, native:");
    let scratch = tempfile::tempdir()?;
    let file_args = [
        "/data/fileio".to_string(),
        FILE_MIB.to_string(),
        (a.iters / 10).to_string(),
    ];
    let (mut remote, mut local, mut native) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        for (on, out) in [
            (there, &mut remote),
            (KernelId::new(a_node.id(), 0), &mut local),
        ] {
            let mut job = job(&fileio, "fileio", &file_args.each_ref().map(String::as_str));
            job.kernel = Some(on);
            job.preopens = vec![format!("{}::/data", scratch.path().display())
                .parse()
                .map_err(anyhow::Error::msg)?];
            out.push(json_line(&atoll_job(&a_node, &job)?.0)?);
        }
        let path = scratch.path().join("fileio");
        let out = std::process::Command::new(&fileio_native)
            .arg(&path)
            .args(&file_args[1..])
            .output()?;
        native.push(json_line(&String::from_utf8_lossy(&out.stdout))?);
    }
    let (files_remote, files_local, files_native) =
        (FileIo::of(&remote), FileIo::of(&local), FileIo::of(&native));
    progress::note(&format!(
        "  pread 4 KiB: {:.0} ns remote, {:.0} ns local, {:.0} ns native",
        files_remote.pread_ns.median, files_local.pread_ns.median, files_native.pread_ns.median
    ));

    progress::note("live migration between nodes (copy mode):");
    let sizes: &[u64] = if a.quick {
        &[1, 16, 64]
    } else {
        &[1, 16, 64, 256]
    };
    let largest = *sizes.last().expect("sizes");
    let migrations = migrate_sizes(&a_node, &dirty, there, sizes, runs)?;
    b_node.shutdown();
    a_node.shutdown();

    let shaped = match Veth::make().and_then(|v| v.shape(SHAPED_MBIT).map(|()| v)) {
        Ok(veth) => {
            progress::note(&format!(
                "live migration over a veth pair shaped to {} Gbit/s:",
                SHAPED_MBIT / 1000
            ));
            let (a_veth, b_veth) = pair_over(ctx, certs.path(), &veth)?;
            a_veth.runtime().load_file(&dirty, true)?;
            let there = KernelId::new(b_veth.id(), 0);
            let (tcp_stream_mbps, tls_stream_mbps) = streams(&first, Some(&veth), runs)?;
            progress::note(&format!(
                "  TCP stream {:.0} MB/s, TLS stream {:.0} MB/s",
                tcp_stream_mbps.median, tls_stream_mbps.median
            ));
            let migrations = migrate_sizes(&a_veth, &dirty, there, &[largest], runs)?;
            b_veth.shutdown();
            a_veth.shutdown();
            Some(ShapedLink {
                rate_mbit: SHAPED_MBIT,
                tcp_stream_mbps,
                tls_stream_mbps,
                migrations,
            })
        }
        Err(why) => {
            notes.push(format!("shaped veth pair: not measured ({why:#})"));
            None
        }
    };
    notes.splice(0..0, [
        "two atoll nodes of one kernel each in one process, not pinned (the machine has 2 cores), linked by their control and bulk TLS 1.3 connections over loopback; the IPC server and the migration's destination run on node 1".into(),
        "veth: two more nodes, each on a thread of its own network namespace (as on two hosts), linked over a veth pair; IPC2, COPY1 and the Linux ping-pongs and streams run across the pair the same way".into(),
        format!("IPC2: ipcbench's sendrec round trip with a 64-byte message, {} round trips per run; TCP and TLS: two threads exchanging 64-byte messages over one connection on the same link (TCP_NODELAY), the same number of round trips, each sleeping in `read` until the other's bytes come or (polling) retrying a non-blocking read at once, as Open MPI's TCP transport does; an idle atoll kernel polls its links for up to 50 us before it sleeps", a.iters),
        format!("COPY1: ipcbench's vcopy of {} KiB blocks into a server on node 1 (granted), over the bulk connection; streams: one thread writes {} MiB in 1 MiB writes to another over the same link", BLOCK >> 10, STREAM_BYTES >> 20),
        "migration: `dirty` (MiB of memory, rewriting its first WWS KiB forever) migrated from node 0 to node 1 and back, in copy mode (pre-copy rounds over the bulk connection, then stop-and-copy); downtime measured on the source, from the freeze until the destination's answer arrived (an upper bound by one message's trip); throughput: bytes sent over the total time of the migration; asleep: the largest `dirty` sleeping instead of writing (`dirty MIB idle 0`), so that its pre-copy measures the link and the copies without the process taking one of the two cores".into(),
        format!("files: `fileio` (one C source) writes {FILE_MIB} MiB in 1 MiB writes, reads it back in 1 MiB reads, then makes {} preads of 4 KiB; run on node 1 with its directory on node 0 (every call goes to node 0 and back), on node 0, and built natively with gcc -O2", a.iters / 10),
        format!("shaped: the same migrations of the largest `dirty` over a veth pair whose both ends are limited to {} Gbit/s (`tc` token bucket), as a 10 Gigabit Ethernet link between two hosts is; throughput against the TCP and TLS streams over that pair", SHAPED_MBIT / 1000),
        "targets (issue 9): IPC2 between nodes within 1.3x of the TLS ping-pong; downtime at most 2 ms with a WWS of at most 1 MiB up to 256 MiB; pre-copy throughput at least 80 % of the raw TCP stream".into(),
    ]);
    Ok(ClusterReport {
        name: "cluster".into(),
        command: command_line(),
        machine: Machine::probe(),
        runs,
        loopback,
        veth,
        migrations,
        shaped,
        files_remote,
        files_local,
        files_native,
        notes,
    })
}

/// Bytes `fileio` writes and reads back, MiB.
const FILE_MIB: u32 = 64;

/// The migration rows for `sizes` MiB of `dirty` from `node` to `there`:
/// each size with a WWS of 64 KiB and of 1 MiB, then the largest asleep.
fn migrate_sizes(
    node: &Node,
    dirty: &Path,
    there: KernelId,
    sizes: &[u64],
    runs: usize,
) -> anyhow::Result<Vec<MigrationRow>> {
    let largest = *sizes.last().expect("sizes");
    let plan = [Some(64), Some(1024)]
        .into_iter()
        .flat_map(|wws| sizes.iter().map(move |&mib| (mib, wws)))
        .chain([(largest, None)]);
    let mut rows = Vec::new();
    for (mib, wws_kib) in plan {
        let row = migrate_row(node, dirty, there, mib, wws_kib, runs)?;
        progress::note(&format!(
            "  {:<22} downtime {:>7.0} us  total {:>9.0} us  {:>6.0} MB/s",
            row.label(),
            row.downtime_us,
            row.total_us,
            row.throughput_mbps
        ));
        rows.push(row);
    }
    Ok(rows)
}

/// `dirty` of `mib` MiB rewriting `wws_kib` KiB (asleep if `None`),
/// migrated to `there` and back `runs` times after a warm-up round trip.
fn migrate_row(
    node: &Node,
    dirty: &Path,
    there: KernelId,
    mib: u64,
    wws_kib: Option<u64>,
    runs: usize,
) -> anyhow::Result<MigrationRow> {
    let (ready_tx, ready) = mpsc::channel();
    let wws = wws_kib.map_or("idle".into(), |k| k.to_string());
    let args = [mib.to_string(), wws, "0".into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let pid = node.run_job(
        &job(dirty, "dirty", &args),
        super::ReadyWhen::new("dirty: ready", ready_tx),
    )?;
    match ready.recv_timeout(PATIENCE) {
        Ok(true) => {}
        _ => bail!("dirty {mib} MiB did not start"),
    }
    let here = KernelId::new(node.id(), 0);
    let mut reports = Vec::new();
    for i in 0..=runs {
        for to in [there, here] {
            let r = node
                .migrate(pid, to, Some(Mode::Copy))
                .with_context(|| format!("migrating dirty {mib} MiB to {to}"))?;
            std::thread::sleep(Duration::from_millis(20));
            if i > 0 {
                reports.push(r);
            }
        }
    }
    node.kill(pid, 9)?;
    let m = |f: fn(&MigrationReport) -> f64| median(&reports.iter().map(f).collect::<Vec<_>>());
    let bytes = m(|r| r.rounds.iter().map(|x| x.bytes).sum::<u64>() as f64);
    let total_us = m(|r| r.total_us as f64);
    Ok(MigrationRow {
        memory_mib: mib,
        wws_kib: wws_kib.unwrap_or(0),
        idle: wws_kib.is_none(),
        downtime_us: m(|r| r.downtime_us as f64),
        total_us,
        bytes,
        throughput_mbps: m(|r| {
            r.rounds.iter().map(|x| x.bytes).sum::<u64>() as f64 / r.total_us.max(1) as f64
        }),
        reports,
    })
}
