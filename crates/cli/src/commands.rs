//! The subcommands.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use atoll_abi::{status, KernelId, Pid};
use atoll_dashboard::Dashboard;
use atoll_ipc::DomainInfo;
use atoll_migration::Mode;
use atoll_noc::net::{identity, LinkConfig};
use atoll_node::daemon::{self, Client, Request, Response};
use atoll_node::{InputAnswer, JobSink, JobSpec, MapBy, Node, NodeConfig, Ranks};
use atoll_process::{Limits, Preopen, Stream};
use clap::Args;

use crate::json::{Checkpointed, KernelIpc};
use crate::stdin::StdinReader;
use atoll_bench::progress::{self, Progress};

/// What every subcommand shares: where the cache and the socket are.
pub struct Context {
    pub cache: PathBuf,
    pub socket: PathBuf,
}

impl Context {
    pub fn new(cache: Option<PathBuf>, socket: Option<PathBuf>) -> Self {
        let cache = cache
            .or_else(|| std::env::var_os("ATOLL_CACHE").map(PathBuf::from))
            .unwrap_or_else(|| {
                let base = std::env::var_os("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                    .unwrap_or_else(std::env::temp_dir);
                base.join("atoll")
            });
        Context {
            cache,
            socket: socket.unwrap_or_else(daemon::default_socket),
        }
    }

    /// Node settings for an embedded node or a daemon, with the node's
    /// instance pool size (`--instances`).
    pub fn node_config_with(
        &self,
        kernels: Option<u16>,
        quantum_ms: u64,
        instances: Option<u32>,
    ) -> NodeConfig {
        NodeConfig::new(Some(self.cache.clone())).sized(kernels, quantum_ms, instances)
    }

    fn client(&self) -> Option<Client> {
        Client::connect(&self.socket)
    }

    /// Asks the running node; its error answers become errors. `what` says
    /// what needed the node, for the message when none runs.
    fn ask(&self, request: &Request, what: &str) -> anyhow::Result<Response> {
        let Some(mut client) = self.client() else {
            bail!(
                "{what}: no node is running at {} (start one with `atoll node`)",
                self.socket.display()
            );
        };
        client.send(request)?;
        match client.recv()? {
            Response::Error(e) => bail!(e),
            r => Ok(r),
        }
    }
}

fn unexpected(r: Response) -> anyhow::Error {
    anyhow::anyhow!("unexpected answer from the node: {r:?}")
}

#[derive(Args)]
pub struct RunArgs {
    /// Kernels of the embedded node [default: one per core]
    #[arg(short = 'k', long)]
    kernels: Option<u16>,
    /// Kernel to start the program on, NODE.INDEX (INDEX alone: node 0)
    /// [default: the least loaded, by the DQDT]
    #[arg(long, value_name = "KERNEL")]
    on: Option<KernelId>,
    /// Make a host directory visible to the program (HOST::GUEST or DIR)
    #[arg(long = "dir", value_name = "HOST::GUEST")]
    dirs: Vec<Preopen>,
    /// Set an environment variable for the program
    #[arg(short, long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Run the module as it is: no safepoints, so it cannot be preempted,
    /// block, or be captured (for measuring what preparation costs)
    #[arg(long)]
    no_prepare: bool,
    /// Longest a process runs before yielding, in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    quantum_ms: u64,
    /// Processes that can be live at once (instances in the pool); the
    /// node holds more, dormant, each woken when it runs [default: 1024]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    instances: Option<u32>,
    /// Start an embedded node even when a node is running
    #[arg(long)]
    embedded: bool,
    /// Run in this domain (`atoll domain create`) [default: the default domain]
    #[arg(long, value_name = "NAME")]
    domain: Option<String>,
    /// Most linear memory each process may have (`64MiB`, `1GiB`, or bytes;
    /// `64M` is 64,000,000): growing past it fails, so malloc returns NULL
    #[arg(long, value_name = "SIZE")]
    memory: Option<bytesize::ByteSize>,
    /// Most CPU time each process may use (`500ms`, `2s`, `1m`): past it the
    /// process ends with 152 (128 + SIGXCPU)
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    cpu_time: Option<Duration>,
    /// Most processes the job may have alive at once, its first included:
    /// past it a spawn or fork fails with EAGAIN (a fork bomb stops there)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_processes: Option<u32>,
    /// For testing: move the process to the next kernel after every system
    /// call answered in place (files, clocks, args, random); its output and
    /// files must be exactly those of an unmoved run
    #[arg(long)]
    wander: bool,
    /// How the embedded node moves processes that ask to move (`kmigrate_to`,
    /// --wander): `handover` or `copy` [default: handover]
    #[arg(long, value_name = "MODE", value_parser = within_node_mode)]
    migrate_mode: Option<Mode>,
    /// Run an MPI program (built with atoll-mpicc) as N ranks, as mpirun
    /// does; the job fails, ending every rank, when one rank fails
    #[arg(short = 'n', long = "np", value_name = "N")]
    ranks: Option<u32>,
    /// How -n lays ranks over the kernels: `load` (each where the DQDT
    /// places it), `kernel` (each kernel in turn, node by node) or `node`
    /// (each node in turn)
    #[arg(long, value_name = "HOW", default_value = "load", requires = "ranks")]
    map_by: MapBy,
    /// Leave the job's processes (and their children) where they start:
    /// the balancer does not move them; explicit moves still work
    #[arg(long)]
    pin: bool,
    /// The embedded node's balancer stays off: nothing moves unless asked
    #[arg(long)]
    no_balance: bool,
    /// Prefix each line a rank writes with `[1,RANK]<stdout>:` (or
    /// `<stderr>:`), as mpirun --tag-output
    #[arg(long, requires = "ranks")]
    tag_output: bool,
    /// The program (.wasm or .wat), then its arguments: everything after
    /// PROGRAM is the program's, options included (as `wasmtime run`)
    #[arg(
        value_name = "PROGRAM [ARGS]",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

impl RunArgs {
    fn job(&self) -> anyhow::Result<JobSpec> {
        for e in &self.env {
            if !e.contains('=') {
                bail!("--env {e}: expected KEY=VALUE");
            }
        }
        let absolute =
            |p: &Path| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
        let program = Path::new(&self.command[0]);
        Ok(JobSpec {
            program: absolute(program)?,
            args: self.command.clone(),
            env: self.env.clone(),
            preopens: self
                .dirs
                .iter()
                .map(|p| {
                    Ok(Preopen {
                        host: absolute(&p.host)?,
                        guest: p.guest.clone(),
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            kernel: self.on,
            prepare: !self.no_prepare,
            domain: self.domain.clone(),
            wander: self.wander,
            ranks: self.ranks.map(|count| Ranks {
                count,
                map_by: self.map_by,
                tag_output: self.tag_output,
            }),
            limits: Limits {
                memory: self.memory.map(|m| m.as_u64()),
                cpu_ns: self
                    .cpu_time
                    .map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)),
                processes: self.max_processes,
            },
            pin: self.pin,
        })
    }
}

/// Runs a program; returns the exit code for `atoll` itself.
pub fn run(ctx: &Context, a: RunArgs) -> anyhow::Result<i32> {
    let job = a.job()?;
    if !a.embedded {
        if let Some(client) = ctx.client() {
            for (option, given) in [
                ("--kernels", a.kernels.is_some()),
                ("--instances", a.instances.is_some()),
                ("--migrate-mode", a.migrate_mode.is_some()),
                ("--no-balance", a.no_balance),
            ] {
                if given {
                    eprintln!(
                        "atoll: {option} is ignored: running on the node at {}",
                        ctx.socket.display()
                    );
                }
            }
            return follow_job(client, &Request::Run(job));
        }
    }
    let loading = Progress::start(loading(&job.program), false);
    let mut config = ctx.node_config_with(a.kernels, a.quantum_ms, a.instances);
    config.migration.mode = a.migrate_mode.unwrap_or_default();
    config.balance = !a.no_balance;
    let node = Node::start(config)?;
    let (tx, rx) = mpsc::channel();
    node.run_job(&job, Box::new(TerminalSink::new(tx)))?;
    loading.done();
    let status = rx
        .recv()
        .context("the node stopped before the program ended")?;
    node.shutdown();
    Ok(status & 0xff)
}

/// Starts a job on the node (`Run` or `Restore`) and shows its output
/// until it ends; returns its exit status.
fn follow_job(mut client: Client, request: &Request) -> anyhow::Result<i32> {
    let what = match request {
        Request::Run(job) => loading(&job.program),
        _ => "restoring the checkpoint on the node".to_string(),
    };
    let starting = Progress::start(what, false);
    client.send(request)?;
    let mut stdin = StdinReader::default();
    loop {
        match client.recv()? {
            Response::Started(_) => starting.done(),
            Response::Output { stream, bytes } => write_out(stream, &bytes),
            Response::ReadInput { max } => {
                let mut to_node = client.try_clone()?;
                stdin.read(max as usize, move |bytes| {
                    // A node that hung up has ended the job: nothing to tell.
                    let _ = to_node.send(&Request::Input(bytes));
                });
            }
            Response::Exited { status } => return Ok(status & 0xff),
            Response::Error(e) => bail!(e),
            other => bail!("unexpected answer from the node: {other:?}"),
        }
    }
}

/// What a job does before it starts, when that takes long: its program
/// is prepared and compiled the first time (then cached).
fn loading(program: &Path) -> String {
    let name = program.file_name().unwrap_or(program.as_os_str());
    format!(
        "loading {} (a new module is prepared and compiled once)",
        name.to_string_lossy()
    )
}

/// Shows a job's output. When whoever reads atoll's output has gone (`atoll
/// run prog | head`), atoll ends as a writer to a closed pipe does, with
/// SIGPIPE's status; that hangs up on the node, which ends the job.
fn write_out(stream: Stream, bytes: &[u8]) {
    progress::clear();
    let written = match stream {
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        Stream::Stderr => std::io::stderr().lock().write_all(bytes),
    };
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(status::killed(libc::SIGPIPE))
        }
        // Any other failure of the terminal is not the program's: carry on.
        _ => {}
    }
}

/// An embedded job's output goes to atoll's own stdout and stderr, and its
/// input comes from atoll's stdin.
struct TerminalSink {
    done: mpsc::Sender<i32>,
    stdin: StdinReader,
}

impl TerminalSink {
    fn new(done: mpsc::Sender<i32>) -> Self {
        TerminalSink {
            done,
            stdin: StdinReader::default(),
        }
    }
}

impl JobSink for TerminalSink {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        write_out(stream, bytes);
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        let _ = self.done.send(status);
    }

    fn input(&mut self, answer: InputAnswer) {
        self.stdin
            .read(answer.max(), move |bytes| answer.send(bytes));
    }
}

#[derive(Args)]
pub struct NodeArgs {
    /// Kernels to start [default: one per core]
    #[arg(short = 'k', long)]
    kernels: Option<u16>,
    /// Longest a process runs before yielding, in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    quantum_ms: u64,
    /// Processes that can be live at once (instances in the pool); the
    /// node holds more, dormant, each woken when it runs [default: 1024]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    instances: Option<u32>,
    /// How `kmigrate_to` moves a process within this node: `handover` or
    /// `copy` (between nodes it is always copy)
    #[arg(long, default_value = "handover", value_parser = within_node_mode)]
    migrate_mode: Mode,
    /// Take part in a cluster: listen for other nodes here (ADDR:PORT;
    /// port 0 picks one). Needs --certs and --name
    #[arg(long, value_name = "ADDR:PORT", requires_all = ["certs", "name"])]
    listen: Option<SocketAddr>,
    /// Join the cluster through this member (any member will do)
    #[arg(long, value_name = "ADDR:PORT", requires = "listen")]
    join: Option<SocketAddr>,
    /// Where the other nodes should dial this one, when not --listen
    /// (listening on 0.0.0.0, in a pod)
    #[arg(long, value_name = "ADDR:PORT", requires = "listen")]
    advertise: Option<SocketAddr>,
    /// The directory of the cluster's CA certificate and of this node's
    /// identity (`atoll ca init`, `atoll ca issue DIR NAME`)
    #[arg(long, value_name = "DIR")]
    certs: Option<PathBuf>,
    /// This node's name: its certificate is NAME.pem in --certs
    #[arg(long)]
    name: Option<String>,
    /// This node's id [default: 0 when it starts a cluster, else given by
    /// the member it joins through]
    #[arg(long, value_name = "N", requires = "listen")]
    node_id: Option<u16>,
    /// Turn this node's balancer off: its processes move only when asked
    #[arg(long)]
    no_balance: bool,
    /// Leave the kernels' threads to the Linux scheduler instead of pinning
    /// kernel i to core i % cores: for several nodes on one machine, whose
    /// kernels would otherwise share the first cores and leave the others
    /// idle
    #[arg(long)]
    no_pin: bool,
    /// Serve the dashboard in a browser here (ADDR:PORT; port 0 picks
    /// one): open the URL it prints, or `atoll dashboard` shows
    #[arg(long, value_name = "ADDR:PORT")]
    http: Option<SocketAddr>,
}

/// A node's own migration mode, for moves within it: post-copy moves a
/// process between nodes only.
fn within_node_mode(s: &str) -> Result<Mode, String> {
    match s.parse()? {
        Mode::PostCopy => Err(
            "post-copy moves a process between nodes; within one, use `handover` or `copy`".into(),
        ),
        mode => Ok(mode),
    }
}

pub fn node(ctx: &Context, a: NodeArgs) -> anyhow::Result<()> {
    let mut config = ctx.node_config_with(a.kernels, a.quantum_ms, a.instances);
    config.migration.mode = a.migrate_mode;
    config.balance = !a.no_balance;
    config.pin = !a.no_pin;
    if let (Some(listen), Some(certs), Some(name)) = (a.listen, &a.certs, &a.name) {
        let identity = identity::Identity::load(certs, name)?;
        config.cluster = Some(LinkConfig {
            identity,
            node: a.node_id,
            kernels: config.kernels,
            listen,
            advertise: a.advertise,
            join: a.join,
        });
    }
    let node = Arc::new(Node::start(config)?);
    let dashboard = a
        .http
        .map(|addr| Dashboard::start(node.clone(), addr, DASHBOARD_INTERVAL))
        .transpose()?;
    match node.members().iter().find(|m| m.node == node.id()) {
        Some(me) => eprintln!(
            "atoll: node {} ({}) with {} kernels, linked at {} to {} other node(s); control socket {}",
            me.node,
            me.name,
            node.kernel_count(),
            me.addr,
            node.members().len() - 1,
            ctx.socket.display()
        ),
        None => eprintln!(
            "atoll: node with {} kernels listening on {}",
            node.kernel_count(),
            ctx.socket.display()
        ),
    }
    let url = dashboard.as_ref().map(Dashboard::url);
    if let Some(url) = &url {
        eprintln!("atoll: dashboard at {url}");
    }
    stop_on_signal(node.clone(), ctx.socket.clone())?;
    daemon::serve(node, &ctx.socket, url)
}

/// Stops the node in order on SIGTERM or SIGINT (`systemctl stop`, a pod
/// deleted, Ctrl-C): the other members are told it stops, its control
/// socket is removed, and it exits 0. Its processes end with it, as they
/// would if it were killed.
fn stop_on_signal(node: Arc<Node>, socket: PathBuf) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .context("handling SIGTERM and SIGINT")?;
    std::thread::Builder::new()
        .name("atoll-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                tracing::info!(signal, "stopping");
                node.leave();
                let _ = std::fs::remove_file(&socket);
                eprintln!("atoll: node stopped");
                std::process::exit(0);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// How often the dashboard samples the node while someone watches.
const DASHBOARD_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Args)]
pub struct DashboardArgs {}

/// Prints the running node's dashboard URL (with its token): the socket
/// admits only those who may use the node, and so the URL too.
pub fn dashboard(ctx: &Context, _: DashboardArgs) -> anyhow::Result<()> {
    match ctx.ask(&Request::Dashboard, "dashboard")? {
        Response::Dashboard(Some(url)) => {
            println!("{url}");
            Ok(())
        }
        Response::Dashboard(None) => {
            bail!("the node serves no dashboard: start it with `atoll node --http ADDR:PORT`")
        }
        other => Err(unexpected(other)),
    }
}

#[derive(Args)]
pub struct PsArgs {
    /// Print JSON instead of a table (it always lists the threads)
    #[arg(long)]
    json: bool,
    /// Under each process with threads, one line per thread: its TID and
    /// what it is doing
    #[arg(long)]
    threads: bool,
}

/// What `atoll ps` asks of the node: every kernel's report, the domains
/// and the nodes of the cluster.
type Listing = (
    Vec<atoll_kernel::KernelReport>,
    Vec<DomainInfo>,
    Vec<atoll_node::NodeStatus>,
);

pub(crate) fn reports(ctx: &Context, what: &str) -> anyhow::Result<Listing> {
    match ctx.ask(&Request::Ps, what)? {
        Response::Ps(r, d, n) => Ok((r, d, n)),
        other => Err(unexpected(other)),
    }
}

pub fn ps(ctx: &Context, a: PsArgs) -> anyhow::Result<()> {
    let (reports, domains, nodes) = reports(ctx, "ps")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    let domain_name = |d: Option<atoll_ipc::DomainId>| match d {
        None => "-".to_string(),
        Some(id) => domains
            .iter()
            .find(|i| i.id == id)
            .map_or_else(|| format!("#{id}"), |i| i.name.clone()),
    };
    println!(
        "{:<14} {:<7} {:<10} {:<14} {:>9} {:>9} {:>8} {:>8} {:>8} {:>5} {:>8}  STATE",
        "PID",
        "KERNEL",
        "DOMAIN",
        "NAME",
        "CPU(ms)",
        "MEM(KiB)",
        "SYSCALLS",
        "SENT",
        "RECEIVED",
        "MOVES",
        "BALANCED"
    );
    for r in &reports {
        let mut procs = r.processes.clone();
        procs.sort_by_key(|p| p.pid);
        for p in procs {
            let threads = if a.threads {
                p.threads.clone()
            } else {
                Vec::new()
            };
            println!(
                "{:<14} {:<7} {:<10} {:<14} {:>9.1} {:>9} {:>8} {:>8} {:>8} {:>5} {:>8}  {}{}",
                p.pid.to_string(),
                p.kernel.to_string(),
                domain_name(p.domain),
                p.name,
                p.cpu_ns as f64 / 1e6,
                p.memory_bytes / 1024,
                p.syscalls,
                p.ipc.sent,
                p.ipc.received,
                p.moves,
                p.balanced,
                match p.dormant_bytes {
                    Some(_) => format!("{} (dormant)", p.state),
                    None => p.state,
                },
                if p.pinned { ", pinned" } else { "" }
            );
            for t in threads {
                println!("  thread {:<6} {}", t.tid, t.state);
            }
        }
    }
    for p in reports.iter().flat_map(|r| &r.processes) {
        if let Some(m) = &p.last_migration {
            println!("last migration of {}", m.summary());
        }
    }
    for r in &reports {
        let held = match r.held_files {
            0 => String::new(),
            n => format!(", {n} files held for other nodes"),
        };
        eprintln!(
            "kernel {}: {} processes ({} live), {} runnable, {} KiB, {} slices, {} NoC messages{held}",
            r.kernel,
            r.processes.len(),
            r.live,
            r.runnable,
            r.memory_bytes / 1024,
            r.slices,
            r.messages
        );
    }
    for n in &nodes {
        let state = if n.up { "up" } else { "DOWN" };
        eprintln!("{}: {state}", n.member);
    }
    Ok(())
}

#[derive(Args)]
pub struct KillArgs {
    /// The process (NODE.KERNEL:SLOT:GENERATION, as `atoll ps` shows it)
    pid: Pid,
    /// Signal number; the process ends with status 128+SIGNAL
    #[arg(short, long, default_value_t = status::SIGKILL)]
    signal: i32,
}

pub fn kill(ctx: &Context, a: KillArgs) -> anyhow::Result<()> {
    match ctx.ask(
        &Request::Kill {
            pid: a.pid,
            signal: a.signal,
        },
        &format!("kill {}", a.pid),
    )? {
        Response::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

#[derive(Args)]
pub struct MigrateArgs {
    /// The process (NODE.KERNEL:SLOT:GENERATION, as `atoll ps` shows it)
    pid: Pid,
    /// The kernel to move it to (NODE.INDEX or INDEX)
    #[arg(long)]
    to: KernelId,
    /// `handover` (the container changes kernel, nothing is copied),
    /// `copy` (pre-copy rounds, then stop-and-copy through the portal) or,
    /// to another node, `postcopy` (it runs there at once; its memory
    /// follows) [default: the node's; between nodes, copy]
    #[arg(long)]
    mode: Option<Mode>,
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
}

/// Migrates a running process and prints how it went: downtime (frozen
/// until running again), total time, bytes and rounds. It resumes on its
/// source if anything fails before the destination commits.
pub fn migrate(ctx: &Context, a: MigrateArgs) -> anyhow::Result<()> {
    let request = Request::Migrate {
        pid: a.pid,
        to: a.to,
        mode: a.mode,
    };
    let moving = Progress::start(format!("moving {} to kernel {}", a.pid, a.to), a.json);
    let answer = ctx.ask(&request, &format!("migrate {}", a.pid))?;
    moving.done();
    match answer {
        Response::Migrated(m) if a.json => {
            println!("{}", serde_json::to_string_pretty(&m)?);
            Ok(())
        }
        Response::Migrated(m) => {
            println!("migrated {}", m.summary());
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

#[derive(Args)]
pub struct CheckpointArgs {
    /// The process (NODE.KERNEL:SLOT:GENERATION)
    pid: Pid,
    /// The checkpoint file to write
    #[arg(short, long)]
    output: PathBuf,
    /// Keep the process running (by default it stops for good, and its
    /// job ends with status 128+SIGSTOP)
    #[arg(long)]
    leave_running: bool,
    /// Print JSON instead of a line
    #[arg(long)]
    json: bool,
}

/// Writes a process to a file, in the format of the migration stream.
pub fn checkpoint(ctx: &Context, a: CheckpointArgs) -> anyhow::Result<()> {
    let file = std::path::absolute(&a.output)?;
    let request = Request::Checkpoint {
        pid: a.pid,
        path: file.clone(),
        leave_running: a.leave_running,
    };
    let writing = Progress::start(format!("writing a checkpoint of {}", a.pid), a.json);
    let answer = ctx.ask(&request, &format!("checkpoint {}", a.pid))?;
    writing.done();
    match answer {
        Response::Checkpointed(bytes) if a.json => {
            let done = Checkpointed {
                pid: a.pid,
                file,
                bytes,
                left_running: a.leave_running,
            };
            println!("{}", serde_json::to_string_pretty(&done)?);
            Ok(())
        }
        Response::Checkpointed(bytes) => {
            println!("{} -> {} ({} KiB)", a.pid, a.output.display(), bytes / 1024);
            Ok(())
        }
        other => Err(unexpected(other)),
    }
}

#[derive(Args)]
pub struct RestoreArgs {
    /// A file written by `atoll checkpoint`
    file: PathBuf,
    /// The program it was taken from, if the node has not loaded it
    program: Option<PathBuf>,
    /// Kernel to restore on, NODE.INDEX of any node of the cluster
    /// [default: the one it last ran on]
    #[arg(long)]
    on: Option<KernelId>,
}

/// Restores a checkpoint as a job of the running node, attached to this
/// terminal; exits with the process's status.
pub fn restore(ctx: &Context, a: RestoreArgs) -> anyhow::Result<i32> {
    let Some(client) = ctx.client() else {
        bail!(
            "restore: no node is running at {} (start one with `atoll node`)",
            ctx.socket.display()
        );
    };
    let request = Request::Restore {
        path: std::path::absolute(&a.file)?,
        program: a.program.as_deref().map(std::path::absolute).transpose()?,
        kernel: a.on,
    };
    follow_job(client, &request)
}

#[derive(Args)]
pub struct DomainArgs {
    #[command(subcommand)]
    action: DomainAction,
}

#[derive(clap::Subcommand)]
enum DomainAction {
    /// Create a domain; `atoll run --domain NAME` runs programs in it
    Create {
        name: String,
        /// Processes the domain's processes may make and have alive at
        /// once: past it a spawn or fork fails with EAGAIN (a fork bomb
        /// stops there). Jobs started in the domain are not counted
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_processes: Option<u32>,
    },
    /// List the domains
    List {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// End a domain and every process in it
    End { name: String },
}

/// Domains are the node's: they need a running node.
pub fn domain(ctx: &Context, a: DomainArgs) -> anyhow::Result<()> {
    let (request, what) = match &a.action {
        DomainAction::Create {
            name,
            max_processes,
        } => (
            Request::DomainCreate {
                name: name.clone(),
                max_processes: *max_processes,
            },
            "domain create",
        ),
        DomainAction::End { name } => (Request::DomainEnd { name: name.clone() }, "domain end"),
        DomainAction::List { .. } => (Request::Domains, "domain list"),
    };
    match (ctx.ask(&request, what)?, a.action) {
        (Response::Done, _) => Ok(()),
        (Response::Domains(list), DomainAction::List { json: true }) => {
            println!("{}", serde_json::to_string_pretty(&list)?);
            Ok(())
        }
        (Response::Domains(list), _) => {
            let (reports, _, _) = reports(ctx, what)?;
            println!(
                "{:<6} {:<20} {:>9} {:>13}",
                "ID", "NAME", "PROCESSES", "MAX-PROCESSES"
            );
            for d in list {
                let n = reports
                    .iter()
                    .flat_map(|r| &r.processes)
                    .filter(|p| p.domain == Some(d.id))
                    .count();
                let max = d.max_processes.map_or("-".into(), |m| m.to_string());
                println!(
                    "{:<6} {:<20} {:>9} {:>13}",
                    d.id.to_string(),
                    d.name,
                    n,
                    max
                );
            }
            Ok(())
        }
        (other, _) => Err(unexpected(other)),
    }
}

#[derive(Args)]
pub struct IpcArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// Per-kernel IPC counters of the running node.
pub fn ipc(ctx: &Context, a: IpcArgs) -> anyhow::Result<()> {
    let (reports, _, _) = reports(ctx, "ipc")?;
    if a.json {
        let counters: Vec<_> = reports
            .iter()
            .map(|r| KernelIpc {
                kernel: r.kernel,
                ipc: r.ipc.clone(),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&counters)?);
        return Ok(());
    }
    println!(
        "{:<7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>12} {:>7} {:>7} {:>7}",
        "KERNEL",
        "LOCAL",
        "REMOTE-OUT",
        "REMOTE-IN",
        "IN-PLACE",
        "HANDED-OFF",
        "NOTIFY",
        "COPIES",
        "LENT",
        "COPIED(KiB)",
        "ELOCKED",
        "EDEAD",
        "DENIED"
    );
    for r in &reports {
        let c = &r.ipc;
        println!(
            "{:<7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>8} {:>12} {:>7} {:>7} {:>7}",
            r.kernel.to_string(),
            c.local,
            c.remote_out,
            c.remote_in,
            c.in_place,
            c.handed_off,
            c.notifications,
            c.copies,
            c.lent,
            c.copied_bytes / 1024,
            c.locked,
            c.dead,
            c.denied
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct PrepareArgs {
    /// The wasm32-wasi module to prepare
    input: PathBuf,
    /// Where to write the migratable module
    output: PathBuf,
}

pub fn prepare(a: PrepareArgs) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    let preparing = Progress::start(format!("preparing {}", a.input.display()), false);
    let out = atoll_prepare::prepare(&bytes, &atoll_prepare::Options::default())
        .with_context(|| format!("preparing {}", a.input.display()))?;
    preparing.done();
    std::fs::write(&a.output, &out).with_context(|| format!("writing {}", a.output.display()))?;
    eprintln!(
        "atoll: prepared {} ({} -> {} bytes)",
        a.output.display(),
        bytes.len(),
        out.len()
    );
    Ok(())
}

#[derive(Args)]
pub struct CaArgs {
    #[command(subcommand)]
    action: CaAction,
}

#[derive(clap::Subcommand)]
enum CaAction {
    /// Make a cluster's certificate authority in DIR: ca.pem (give it to
    /// every node) and ca.key (keep it with the operator)
    Init { dir: PathBuf },
    /// Issue node NAME a certificate from the CA in DIR: NAME.pem and
    /// NAME.key (give them, with ca.pem, to that node only)
    Issue {
        dir: PathBuf,
        /// The node's name: 1 to 63 lowercase letters, digits and '-'
        name: String,
    },
}

/// The cluster's own CA: nodes trust it and nothing else.
pub fn ca(a: CaArgs) -> anyhow::Result<()> {
    let (cert, key) = match &a.action {
        CaAction::Init { dir } => identity::init_ca(dir)?,
        CaAction::Issue { dir, name } => identity::issue(dir, name)?,
    };
    println!("{}\n{}", cert.display(), key.display());
    Ok(())
}
