//! Starting, using and stopping a node.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use atoll_abi::{Errno, KernelId, Pid};
use atoll_ipc::{DomainId, DomainInfo};
use atoll_kernel::{
    Control, KernelParams, KernelReport, MigrationConfig, MigrationMsg, NocMsg, NodeEvent, Packet,
    ProcessSpec,
};
use atoll_migration::{MigrationReport, Mode};
use atoll_noc::net::{LinkConfig, Links, Member};
use atoll_noc::{Awake, Doorbell, Incoming, Noc, Remote, Uplink};
use atoll_prepare::ContentHash;
use atoll_process::{ConsoleId, Limits, Preopen, ProcessImage, Runtime, RuntimeConfig};

use crate::console::{self, ChannelConsole, Job, JobSink, Router, Sinks};
use crate::domains::Domains;
use crate::ranks::{Killer, Ranks};

/// How long `ps` waits for a kernel of another node.
const REMOTE_ANSWER: Duration = Duration::from_secs(5);
/// How long `kill` and `migrate` wait for an answer that may have to come
/// from another node: a request that reached a node just before it was
/// lost is never answered (one sent after is, at once, with an error).
const KILL_ANSWER: Duration = Duration::from_secs(60);
const MIGRATE_ANSWER: Duration = Duration::from_secs(600);
/// How long a job started on another node may take to start there (it may
/// have to fetch and compile its program first).
const START_ANSWER: Duration = Duration::from_secs(120);

/// How a node is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's number in a cluster (0 for a single machine).
    pub node: u16,
    /// Kernels to start; they are pinned round robin to the machine's cores.
    pub kernels: u16,
    /// Longest a process runs before it yields at its next safepoint.
    pub quantum: Duration,
    pub pin: bool,
    pub runtime: RuntimeConfig,
    /// How processes migrate when the request does not say (`kmigrate_to`).
    pub migration: MigrationConfig,
    /// Joined to other nodes (`atoll node --listen`): the node id is then
    /// the cluster's, not `node`.
    pub cluster: Option<LinkConfig>,
    /// Whether the balancer moves processes between this node's kernels
    /// and to other nodes (`atoll node --no-balance` turns it off).
    pub balance: bool,
}

impl NodeConfig {
    /// One kernel per core, a 10 ms quantum, the on-disk cache at `cache_dir`.
    pub fn new(cache_dir: Option<PathBuf>) -> Self {
        NodeConfig {
            node: 0,
            kernels: cores() as u16,
            quantum: Duration::from_millis(10),
            pin: true,
            runtime: RuntimeConfig {
                cache_dir,
                ..RuntimeConfig::default()
            },
            migration: MigrationConfig::default(),
            cluster: None,
            balance: true,
        }
    }

    /// `kernels` kernels (default: one per core), a quantum of
    /// `quantum_ms`, and `instances` processes live at once (default: the
    /// runtime's, or enough for the smallest share on every kernel).
    pub fn sized(mut self, kernels: Option<u16>, quantum_ms: u64, instances: Option<u32>) -> Self {
        if let Some(k) = kernels {
            self.kernels = k;
        }
        let least = u32::from(self.kernels) * atoll_kernel::MIN_INSTANCES_PER_KERNEL;
        self.runtime.instances = instances.unwrap_or(self.runtime.instances.max(least));
        self.quantum = Duration::from_millis(quantum_ms);
        self
    }
}

/// A node of the cluster, as `atoll ps` shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct NodeStatus {
    pub member: Member,
    /// Linked now; `false`: its links failed and it has not come back.
    pub up: bool,
}

/// What to run as a job: a program, its arguments and what it may see.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    pub program: PathBuf,
    /// argv, argv[0] included.
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub preopens: Vec<Preopen>,
    /// Kernel to start on, of this node or another; `None`: where the
    /// DQDT places it.
    pub kernel: Option<KernelId>,
    /// Prepare the module (safepoints, Asyncify) before running it.
    pub prepare: bool,
    /// The domain to run in (`None`: the default domain).
    pub domain: Option<String>,
    /// Move the process to the next kernel after every system call
    /// ([`atoll_process::Wander`]), to test that nothing is lost by moving.
    pub wander: bool,
    /// Run the program as an MPI job of this many ranks (`atoll run -n`).
    #[serde(default)]
    pub ranks: Option<Ranks>,
    /// Each process's resource limits (each MPI rank's, each child's).
    #[serde(default)]
    pub limits: Limits,
    /// Leave the job's processes where they are started: the balancer
    /// does not move them (`atoll run --pin`).
    #[serde(default)]
    pub pin: bool,
}

/// Each kernel's lanes to the other nodes, in kernel order.
type KernelLanes = Vec<Option<Remote<Packet>>>;

/// What the links hand to the node itself rather than to a kernel.
struct NodeServices {
    doorbells: Arc<[Doorbell]>,
    runtime: Arc<Runtime>,
    events: Sender<NodeEvent>,
    domains: Arc<Domains>,
}

/// Joins the cluster `config` describes: the links, and each kernel's lanes
/// to them. What comes for a kernel is queued for it and wakes it; output,
/// stdin reads, drains and job ends go straight to the console service, so that they keep the
/// order in which the other node sent them, and domain changes to the
/// node's table. Every kernel hears that a member is down (`NodeDown`),
/// after everything that member sent it.
fn join(
    config: LinkConfig,
    node: NodeServices,
) -> anyhow::Result<(Arc<Links<Packet>>, KernelLanes)> {
    let (inbound, receivers): (Vec<_>, Vec<_>) =
        (0..node.doorbells.len()).map(|_| mpsc::channel()).unzip();
    let kernels = Arc::new(Inbound {
        queues: inbound,
        doorbells: node.doorbells.clone(),
        runtime: node.runtime.clone(),
    });
    let (events, domains, to_kernels) = (node.events, node.domains, kernels.clone());
    let lost = events.clone();
    let late = node.runtime.late_memories().clone();
    let lost_late = late.clone();
    let deliver = move |to: KernelId, m: Incoming<Packet>| match m.msg.msg {
        // Written here, not by the kernel: it may be waiting in a fault on
        // one of these blocks (`atoll_process::postcopy`).
        NocMsg::Migration(MigrationMsg::Fill { pid, streamed }) => {
            let bytes = m.bulk.as_deref().unwrap_or_default();
            if let Err(why) = late.fill(m.from, pid, bytes, streamed) {
                tracing::warn!("dropped blocks from {}: {why}", m.from);
            }
        }
        NocMsg::Domain(op) => domains.apply(op, m.from.node),
        NocMsg::Console(event) => {
            let _ = events.send(NodeEvent::Console(event));
        }
        NocMsg::JobEnded {
            pid,
            console,
            status,
        } => {
            let _ = events.send(NodeEvent::Exited {
                pid,
                console,
                status,
            });
        }
        _ => to_kernels.push(to.index, m),
    };
    let down = move |m: &Member, stopped: bool| {
        // Before the kernels hear it: one may be waiting in a fault for a
        // block that will never come.
        lost_late.lost(m.node);
        let _ = lost.send(NodeEvent::Lost { node: m.node });
        for i in 0..kernels.queues.len() as u16 {
            let msg = NocMsg::NodeDown {
                node: m.node,
                incarnation: m.incarnation,
                stopped,
            };
            let from = KernelId::new(m.node, 0);
            let down = Incoming {
                from,
                msg: Packet::new(msg),
                bulk: None,
            };
            kernels.push(i, down);
        }
    };
    let links = Arc::new(Links::start(config, Box::new(deliver), Box::new(down))?);
    // Faults and acknowledgements of late memories go out from this node's
    // first kernel's name (the source answers whoever holds the memory).
    let uplink = Arc::downgrade(&links);
    let me = KernelId::new(links.me().node, 0);
    node.runtime
        .late_memories()
        .serve(Box::new(move |pid, source, ask, lazy| {
            let Some(links) = uplink.upgrade() else {
                return;
            };
            let msg = Packet::new(NocMsg::Migration(MigrationMsg::Ask { pid, ask }));
            let sent = match lazy {
                true => links.send_lazy(me, source, msg),
                false => links.send(me, source, msg, None),
            };
            if let Err(e) = sent {
                tracing::warn!(%pid, "cannot ask kernel {source} for its memory: {e}");
            }
        }));
    let uplink = Arc::downgrade(&links);
    node.runtime
        .late_memories()
        .on_awaiting(Box::new(move |on| {
            if let Some(links) = uplink.upgrade() {
                links.hurry(on);
            }
        }));
    let remotes = receivers
        .into_iter()
        .map(|inbound| {
            Some(Remote {
                uplink: links.clone(),
                inbound,
            })
        })
        .collect();
    Ok((links, remotes))
}

/// The links' way into this node's kernels.
struct Inbound {
    queues: Vec<Sender<Incoming<Packet>>>,
    doorbells: Arc<[Doorbell]>,
    runtime: Arc<Runtime>,
}

impl Inbound {
    /// Queues `m` for kernel `index` and wakes it.
    fn push(&self, index: u16, m: Incoming<Packet>) {
        let _ = self.queues[index as usize].send(m);
        self.doorbells[index as usize].ring();
        self.runtime.interrupt(index);
    }
}

/// What every process of a job starts from.
pub(crate) struct JobStart {
    /// The loaded program.
    pub module: ContentHash,
    pub domain: DomainId,
}

/// The node's way into its own kernels: each one's control channel and
/// doorbell. Cloned by what reaches them outside a request: the domains'
/// table, and the console service ending a failed MPI job's ranks.
#[derive(Clone)]
pub(crate) struct KernelDoors {
    controls: Vec<Sender<Control>>,
    doorbells: Arc<[Doorbell]>,
    runtime: Arc<Runtime>,
}

impl KernelDoors {
    pub(crate) fn len(&self) -> usize {
        self.controls.len()
    }

    /// Hands `control` to kernel `i` and wakes it, preempting the process
    /// it runs (a request is waited for); false when the kernel has stopped.
    pub(crate) fn hand(&self, i: usize, control: Control) -> bool {
        if self.controls[i].send(control).is_err() {
            return false;
        }
        self.doorbells[i].ring();
        self.runtime.interrupt(i as u16);
        true
    }

    /// Tells kernel `i` (it wakes if asleep; no process is preempted).
    pub(crate) fn tell(&self, i: usize, control: Control) {
        let _ = self.controls[i].send(control);
        self.doorbells[i].ring();
    }

    /// Tells every kernel (those asleep wake; no process is preempted).
    pub(crate) fn tell_all(&self, make: impl Fn() -> Control) {
        for i in 0..self.len() {
            self.tell(i, make());
        }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A running node.
pub struct Node {
    id: u16,
    runtime: Arc<Runtime>,
    doors: KernelDoors,
    kernels: Vec<JoinHandle<()>>,
    console: Option<JoinHandle<()>>,
    sinks: Sinks,
    /// How the console service answers processes.
    router: Router,
    next_console: AtomicU64,
    /// The node's domains; each kernel has a copy of the latest table.
    domains: Arc<Domains>,
    /// The other nodes, when this one is part of a cluster.
    links: Option<Arc<Links<Packet>>>,
}

impl Node {
    /// Starts the kernels and the console service.
    pub fn start(config: NodeConfig) -> anyhow::Result<Node> {
        if config.kernels == 0 {
            bail!("a node needs at least one kernel");
        }
        let least = u32::from(config.kernels) * atoll_kernel::MIN_INSTANCES_PER_KERNEL;
        if config.runtime.instances < least {
            bail!(
                "a pool of {} instances is too small for {} kernels: at least {least} ({} per kernel)",
                config.runtime.instances,
                config.kernels,
                atoll_kernel::MIN_INSTANCES_PER_KERNEL
            );
        }
        let runtime = Runtime::new(config.runtime).context("starting the WebAssembly runtime")?;
        let awake = Arc::new(Awake::new(usize::from(config.kernels), cores(), config.pin));
        let doorbells: Arc<[Doorbell]> = (0..config.kernels)
            .map(|k| Doorbell::counted(awake.clone(), k))
            .collect();
        let (events_tx, events_rx) = mpsc::channel();
        let (controls, control_rxs): (Vec<_>, Vec<_>) =
            (0..config.kernels).map(|_| mpsc::channel()).unzip();
        let doors = KernelDoors {
            controls,
            doorbells: doorbells.clone(),
            runtime: runtime.clone(),
        };
        let domains = Arc::new(Domains::new(doors.clone()));
        let node = NodeServices {
            doorbells: doorbells.clone(),
            runtime: runtime.clone(),
            events: events_tx.clone(),
            domains: domains.clone(),
        };
        let (id, links, remotes) = match config.cluster {
            None => (
                config.node,
                None,
                (0..config.kernels).map(|_| None).collect(),
            ),
            Some(cluster) => {
                let (links, remotes) = join(cluster, node).context("joining the cluster")?;
                // While every kernel runs a process, none polls the links,
                // and none goes to sleep to hand them back.
                let weak = Arc::downgrade(&links);
                runtime.on_tick(move || {
                    if let Some(links) = weak.upgrade() {
                        links.settle();
                    }
                });
                (links.me().node, Some(links), remotes)
            }
        };
        let endpoints = Noc::build_with_remotes(id, 256, doorbells.clone(), remotes);
        let sinks = Sinks::default();
        let console_sinks = sinks.clone();
        let router = Router {
            doors: doors.clone(),
            node: id,
        };
        let console_router = router.clone();
        let console = std::thread::Builder::new()
            .name("atoll-console".into())
            .spawn(move || console::serve(events_rx, console_sinks, console_router))?;
        let console_impl = Arc::new(ChannelConsole {
            tx: events_tx.clone(),
            node: id,
            links: links.clone(),
        });
        let mut kernels = Vec::new();
        for (endpoint, rx) in endpoints.into_iter().zip(control_rxs) {
            kernels.push(atoll_kernel::start(KernelParams {
                endpoint,
                doorbells: doorbells.clone(),
                control: rx,
                events: events_tx.clone(),
                runtime: runtime.clone(),
                console: console_impl.clone(),
                quantum: config.quantum,
                spin: Duration::from_micros(50),
                pin: config.pin,
                migration: config.migration,
                balance: config.balance,
            })?);
        }
        domains.started(id, links.clone());
        tracing::info!(node = id, kernels = config.kernels, "node started");
        Ok(Node {
            id,
            runtime,
            doors,
            kernels,
            console: Some(console),
            sinks,
            router,
            next_console: AtomicU64::new(1),
            domains,
            links,
        })
    }

    /// This node's id (0 unless a cluster gave it another).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Every node this one knows of, up or down, by node id (empty for a
    /// node alone).
    pub fn nodes(&self) -> Vec<NodeStatus> {
        let lost = self.links.as_ref().map(|l| l.lost()).unwrap_or_default();
        let up = self
            .members()
            .into_iter()
            .map(|member| NodeStatus { member, up: true });
        let down = lost
            .into_iter()
            .map(|member| NodeStatus { member, up: false });
        let mut all: Vec<NodeStatus> = up.chain(down).collect();
        all.sort_by_key(|s| s.member.node);
        all
    }

    /// Whether kernel `k` is on a node linked to this one.
    fn linked(&self, k: KernelId) -> bool {
        self.members()
            .iter()
            .any(|m| m.node == k.node && k.index < m.kernels)
    }

    /// Tells the other members that this node is stopping, so that its
    /// links closing next is heard as an orderly stop, not a failure.
    pub fn leave(&self) {
        if let Some(links) = &self.links {
            links.leave();
        }
    }

    /// This node and the others it is linked to now, by node id.
    pub fn members(&self) -> Vec<Member> {
        match &self.links {
            Some(l) => {
                let mut all = l.members();
                all.push(l.me().clone());
                all.sort_by_key(|m| m.node);
                all
            }
            None => Vec::new(),
        }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    pub fn kernel_count(&self) -> u16 {
        self.doors.len() as u16
    }

    fn kernel(&self, k: KernelId) -> anyhow::Result<usize> {
        if k.node != self.id || k.index as usize >= self.doors.len() {
            bail!(
                "kernel {k} does not exist (this node has kernels {}.0 to {}.{})",
                self.id,
                self.id,
                self.doors.len() - 1
            );
        }
        Ok(k.index as usize)
    }

    /// Sends a request to kernel `k` and waits for its answer.
    fn ask<T>(&self, k: KernelId, make: impl FnOnce(Sender<T>) -> Control) -> anyhow::Result<T> {
        self.post(k, make)?
            .recv()
            .map_err(|_| anyhow!("kernel {k} did not answer"))
    }

    /// As [`ask`](Self::ask), for a request about a process that may run
    /// on another node: it waits at most `limit`.
    fn ask_within<T>(
        &self,
        k: KernelId,
        limit: Duration,
        make: impl FnOnce(Sender<T>) -> Control,
    ) -> anyhow::Result<T> {
        self.post(k, make)?
            .recv_timeout(limit)
            .map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => anyhow!(
                    "no answer in {}s: the process's node may have been lost",
                    limit.as_secs()
                ),
                mpsc::RecvTimeoutError::Disconnected => anyhow!("kernel {k} did not answer"),
            })
    }

    /// Sends a request to kernel `k`; its answer will come on the receiver.
    fn post<T>(
        &self,
        k: KernelId,
        make: impl FnOnce(Sender<T>) -> Control,
    ) -> anyhow::Result<Receiver<T>> {
        let i = self.kernel(k)?;
        let (tx, rx) = mpsc::channel();
        if !self.doors.hand(i, make(tx)) {
            bail!("kernel {k} has stopped");
        }
        Ok(rx)
    }

    /// The kernel of this node that takes a request about kernel `k`'s
    /// processes: `k` itself, or for another node's kernel, kernel 0 (it
    /// sends the request on).
    fn asker(&self, k: KernelId) -> KernelId {
        if k.node == self.id {
            k
        } else {
            KernelId::new(self.id, 0)
        }
    }

    /// Where the DQDT puts a new process, asked of kernel 0, which hosts the
    /// subtree of all of this node's kernels: the least loaded kernel, each
    /// answer counted there until its load reports have the process.
    pub fn place(&self) -> anyhow::Result<KernelId> {
        self.ask_within(
            KernelId::new(self.id, 0),
            Duration::from_secs(10),
            |reply| Control::Place { reply },
        )
    }

    /// Loads the program and starts the job's first process; its output and
    /// end go to `sink`.
    ///
    /// # Errors
    /// When the program cannot be loaded or the kernel does not exist.
    pub fn run_job(&self, job: &JobSpec, sink: Box<dyn JobSink>) -> anyhow::Result<Pid> {
        let start = self.job_start(job)?;
        if let Some(ranks) = &job.ranks {
            return self.run_ranks(job, &start, ranks, sink);
        }
        let kernel = match job.kernel {
            Some(k) => k,
            None => self.place()?,
        };
        self.start_process(job, &start, kernel, job.env.clone(), sink)
    }

    /// What every process of a job starts from: its loaded program and its
    /// domain.
    fn job_start(&self, job: &JobSpec) -> anyhow::Result<JobStart> {
        let program = self
            .runtime
            .load_file(&job.program, job.prepare)
            .with_context(|| format!("cannot run {}", job.program.display()))?;
        for p in &job.preopens {
            if !p.host.is_dir() {
                bail!("--dir {}: not a directory", p.host.display());
            }
        }
        let domain = match &job.domain {
            None => DomainId::DEFAULT,
            Some(name) => self.domains.lookup(name).ok_or_else(|| {
                anyhow!("no domain `{name}` (create it with `atoll domain create {name}`)")
            })?,
        };
        Ok(JobStart {
            module: program.hash(),
            domain,
        })
    }

    /// Starts one process of `job` on `kernel` with the environment `env`;
    /// its output and end go to `sink`.
    pub(crate) fn start_process(
        &self,
        job: &JobSpec,
        start: &JobStart,
        kernel: KernelId,
        env: Vec<String>,
        sink: Box<dyn JobSink>,
    ) -> anyhow::Result<Pid> {
        if kernel.node == self.id {
            self.kernel(kernel)?;
        } else if !self.linked(kernel) {
            bail!(
                "kernel {kernel} does not exist: no node linked to this one has it (`atoll top` shows the cluster's kernels)"
            );
        }
        let console = self.open_job(sink);
        let spec = ProcessSpec {
            module: start.module,
            args: job.args.clone(),
            env,
            console,
            preopens: job.preopens.clone(),
            // The directories are this node's: its kernel that starts the
            // job serves them wherever the job's processes go.
            files: self.asker(kernel),
            domain: Some(start.domain),
            wander: job.wander,
            limits: job.limits,
            pinned: job.pin,
            // A job's first process counts in no quota.
            counted: Vec::new(),
        };
        // A kernel of another node is asked through kernel 0 of this one;
        // the job's output and end come back here.
        let started = self
            .ask_within(self.asker(kernel), START_ANSWER, |reply| Control::Start {
                spec,
                on: kernel,
                reply,
            })
            .and_then(|r| r.map_err(|e| anyhow!(e)));
        self.started(console, &started);
        started
    }

    /// A new console for a job whose output and end go to `sink`; its first
    /// process is recorded once it has started ([`started`](Self::started)).
    fn open_job(&self, sink: Box<dyn JobSink>) -> ConsoleId {
        let console = ConsoleId::new(self.id, self.next_console.fetch_add(1, Ordering::Relaxed));
        let job = Job::open(console, sink, self.router.clone());
        self.sinks.lock().expect("sinks").insert(console, job);
        console
    }

    /// Records the first process of the job on `console`, or forgets the
    /// job if it did not start.
    fn started(&self, console: ConsoleId, result: &anyhow::Result<Pid>) {
        let mut sinks = self.sinks.lock().expect("sinks");
        match result {
            Ok(pid) => {
                if let Some(job) = sinks.get_mut(&console) {
                    job.first = Some(*pid);
                }
            }
            Err(_) => drop(sinks.remove(&console)),
        }
    }

    /// The processes of every kernel of this node and of the nodes linked
    /// to it. A kernel of another node that does not answer in time is
    /// left out (and logged).
    pub fn ps(&self) -> anyhow::Result<Vec<KernelReport>> {
        let mut reports = (0..self.kernel_count())
            .map(|i| self.ask(KernelId::new(self.id, i), |reply| Control::Ps { reply }))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let here = KernelId::new(self.id, 0);
        let mut asked = Vec::new();
        for m in self.members().into_iter().filter(|m| m.node != self.id) {
            for i in 0..m.kernels {
                let kernel = KernelId::new(m.node, i);
                asked.push((
                    kernel,
                    self.post(here, |reply| Control::Report { kernel, reply })?,
                ));
            }
        }
        for (kernel, rx) in asked {
            match rx.recv_timeout(REMOTE_ANSWER) {
                Ok(r) => reports.push(r),
                Err(_) => tracing::warn!("kernel {kernel} did not answer `ps`"),
            }
        }
        Ok(reports)
    }

    /// Where `pid` runs, asked of its home kernel.
    pub fn locate(&self, pid: Pid) -> anyhow::Result<KernelId> {
        if pid.home.node != self.id {
            bail!("process {pid} is not on this node");
        }
        self.ask(pid.home, |reply| Control::Locate { pid, reply })?
            .ok_or_else(|| anyhow!("no process {pid}"))
    }

    /// Ends `pid` with `signal`, wherever it runs, on any node.
    pub fn kill(&self, pid: Pid, signal: i32) -> anyhow::Result<()> {
        let home = pid.home;
        if home.node == self.id {
            self.kernel(home).map_err(|_| anyhow!("no process {pid}"))?;
        }
        self.ask_within(self.asker(home), KILL_ANSWER, |reply| Control::Kill {
            pid,
            signal,
            reply,
        })?
        .map_err(|e: Errno| anyhow!("cannot kill {pid}: {e}"))
    }

    /// Writes `pid` to the checkpoint file `path`, captured at its next
    /// safepoint. Unless `leave_running`, the process then ends (its job
    /// sees status 128+SIGSTOP). Returns the file's size.
    pub fn checkpoint(&self, pid: Pid, path: &Path, leave_running: bool) -> anyhow::Result<u64> {
        let at = self.locate(pid)?;
        let image = self
            .ask(at, |reply| Control::Checkpoint {
                pid,
                leave_running,
                reply,
            })?
            .map_err(|e| anyhow!(e))?;
        let bytes = image.encode();
        // Written aside and renamed, so a crash never leaves half a file
        // under the name.
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, &bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(bytes.len() as u64)
    }

    /// Restores a checkpoint file as a new job: its output and end go to
    /// `sink`. The program is the one loaded on this node under the image's
    /// content hash, or `program` (prepared and checked against it). It
    /// runs on `kernel`, else where it last ran.
    ///
    /// # Errors
    /// A file that is not a valid image, a program that does not match it,
    /// a PID that is taken.
    pub fn restore_job(
        &self,
        path: &Path,
        program: Option<&Path>,
        kernel: Option<KernelId>,
        sink: Box<dyn JobSink>,
    ) -> anyhow::Result<Pid> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut image = ProcessImage::decode(&bytes)
            .with_context(|| format!("cannot restore {}", path.display()))?;
        let module = image.uarea.module;
        if let Some(program) = program {
            let loaded = self
                .runtime
                .load_file(program, true)
                .with_context(|| format!("cannot load {}", program.display()))?;
            if loaded.hash() != module {
                bail!(
                    "{} was not taken from {}: it runs module {module}",
                    path.display(),
                    program.display()
                );
            }
        } else if self.runtime.program(&module).is_none() {
            bail!(
                "module {module} of {} is not loaded on this node: name its program \
                 (atoll restore FILE PROGRAM.wasm)",
                path.display()
            );
        }
        let on = match kernel {
            Some(k) => k,
            // Where it last ran, if that kernel is here or linked.
            None => image
                .uarea
                .accounting
                .last_kernel
                .filter(|&k| self.kernel(k).is_ok() || self.linked(k))
                .unwrap_or(KernelId::new(self.id, 0)),
        };
        if on.node == self.id {
            self.kernel(on)?;
        }
        let console = self.open_job(sink);
        // The restored process is the first process of a new job, counted
        // in no quota (its old places were freed when it was checkpointed),
        // with nothing on its way to the new console.
        image.uarea.console = console;
        image.uarea.parent = None;
        image.uarea.quotas = Default::default();
        image.uarea.console_flow = Default::default();
        let restored = self
            .ask_within(self.asker(on), START_ANSWER, |reply| Control::Restore {
                image: Box::new(image),
                on,
                reply,
            })
            .and_then(|r| r.map_err(|e| anyhow!(e)));
        self.started(console, &restored);
        restored
    }

    /// Migrates `pid`, wherever it runs, to kernel `to` of any node while
    /// it runs (`mode`: the default of the node it runs on when `None`; a
    /// move between nodes is always a copy), and reports how it went.
    pub fn migrate(
        &self,
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
    ) -> anyhow::Result<MigrationReport> {
        if to.node == self.id {
            self.kernel(to)?;
        }
        if pid.home.node == self.id {
            self.kernel(pid.home)
                .map_err(|_| anyhow!("no process {pid}"))?;
        }
        self.ask_within(self.asker(pid.home), MIGRATE_ANSWER, |reply| {
            Control::Migrate {
                pid,
                to,
                mode,
                reply,
            }
        })?
        .map_err(|e| anyhow!(e))
    }

    /// Makes the next `count` migrations arriving at kernel `k` fail just
    /// before they commit, as if the destination broke (failure tests).
    pub fn fail_arrivals(&self, k: KernelId, count: u32) -> anyhow::Result<()> {
        let i = self.kernel(k)?;
        if !self.doors.hand(i, Control::FailArrivals { count }) {
            bail!("kernel {k} has stopped");
        }
        Ok(())
    }

    /// Creates a domain, on every kernel of every node; its processes may
    /// make `max_processes` processes (`None`: as many as the node holds).
    pub fn domain_create(
        &self,
        name: &str,
        max_processes: Option<u32>,
    ) -> anyhow::Result<DomainId> {
        Ok(self.domains.create(name, max_processes)?)
    }

    /// Ends a domain: every kernel of every node ends the domain's processes.
    pub fn domain_end(&self, name: &str) -> anyhow::Result<DomainId> {
        Ok(self.domains.end(name)?)
    }

    pub fn domains(&self) -> Vec<DomainInfo> {
        self.domains.list()
    }

    /// A way to end processes that outlives any one request (the console
    /// service ends a failed MPI job's ranks with it).
    pub(crate) fn killer(&self) -> Killer {
        Killer {
            node: self.id,
            doors: self.doors.clone(),
        }
    }

    /// Stops every kernel; processes still running are dropped.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.kernels.is_empty() {
            return;
        }
        self.doors.tell_all(|| Control::Shutdown);
        for k in self.kernels.drain(..) {
            let _ = k.join();
        }
        // The kernels and the links held the last senders of the console
        // channel.
        self.links = None;
        if let Some(c) = self.console.take() {
            let _ = c.join();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}
