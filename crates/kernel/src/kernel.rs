//! The kernel loop and its two dispatchers: node requests and NoC messages.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use atoll_abi::{status, Errno, KernelId, Pid};
use atoll_ipc::{DomainId, DomainTable, IpcState};
use atoll_migration::{MigrationReport, Mode, RoundPolicy};
use atoll_noc::{Doorbell, Endpoint, SendError};
use atoll_prepare::ContentHash;
pub(crate) use atoll_process::clock::monotonic_ns;
use atoll_process::{
    CallState, Console, Container, ContainerError, EndStep, FdTable, HeldFiles, Host, KernelCall,
    ProcessImage, Reply, Runtime, Slice, Spares, Stream, UArea, Yielding,
};
use rustc_hash::FxHashMap;

use crate::homes::{Homes, Kin};
use crate::loader::{Load, Loaded, Loader};
use crate::migration::{Arriving, Departure, Incoming, Lend};
use crate::msg::{
    Control, Handover, IpcCounters, KernelReport, NocMsg, NodeEvent, Packet, ProcInfo, ProcessSpec,
    ReplyTo, ThreadInfo,
};
use crate::placement::{AfterPlace, Placement};
use crate::runqueue::RunQueue;
use crate::talk::{RemoteTalk, REMOTE_SPIN};

/// A message looking for its process gives up after this many forwards
/// (it can only loop while a move is being recorded at the home kernel).
const MAX_HOPS: u8 = 32;

/// A kernel that has not worked for this long polls no more before it
/// sleeps ([`Kernel::worked_lately`]): each kernel of an idle node of 64
/// kernels polled 50 us after every tick of its timer, half a core in all.
const IDLE_AFTER: Duration = Duration::from_millis(10);

/// What a kernel is given when it starts.
pub struct KernelParams {
    pub endpoint: Endpoint<Packet>,
    pub doorbells: Arc<[Doorbell]>,
    pub control: Receiver<Control>,
    pub events: Sender<NodeEvent>,
    pub runtime: Arc<Runtime>,
    pub console: Arc<dyn Console>,
    pub quantum: Duration,
    /// How long an idle kernel polls for messages before it sleeps, while
    /// its doorbell says it has a core to itself (zero: never).
    pub spin: Duration,
    /// Pin the thread to core `index % cores`.
    pub pin: bool,
    pub migration: MigrationConfig,
    /// Whether the balancer moves this kernel's processes.
    pub balance: bool,
}

/// How this kernel migrates processes when the request does not say.
#[derive(Clone, Copy, Debug, Default)]
pub struct MigrationConfig {
    pub mode: Mode,
    pub policy: RoundPolicy,
}

/// Starts a kernel thread.
pub fn start(params: KernelParams) -> std::io::Result<JoinHandle<()>> {
    let id = params.endpoint.id();
    std::thread::Builder::new()
        .name(format!("atoll-kernel-{id}"))
        // Guest code runs on this thread's stack.
        .stack_size(8 << 20)
        .spawn(move || {
            if params.pin {
                pin_to_core(id.index);
            }
            Kernel::new(params).run();
        })
}

fn pin_to_core(index: u16) {
    if let Some(cores) = core_affinity::get_core_ids().filter(|c| !c.is_empty()) {
        core_affinity::set_for_current(cores[index as usize % cores.len()]);
    }
}

/// A process this kernel runs.
pub(crate) struct Process {
    pub container: Container,
    /// The kernel's slice count when it last ran or woke: the processes
    /// that ran least recently go dormant first (`dormancy.rs`).
    pub last_ran: u64,
    /// When it came to this kernel (made, arrived or returned): the
    /// balancer leaves it there for a while (`placement.rs`).
    pub arrived: Instant,
    /// The kernel of this node that handed it its instance before it first
    /// ran: a fork or exec placed here from there, where the parent is
    /// likely to fork again. The instance goes back there as a spare when
    /// the process ends ([`NocMsg::Spare`]).
    pub spare_home: Option<KernelId>,
    /// What a copy of it to another node is projected to take, from one
    /// the balancer called off here (`call_off_dear_move`): the balancer
    /// weighs its next such move at that.
    pub far_copy: Option<Duration>,
    /// CPU time of its current turn: the slices in a row it ran before
    /// stopping for the kernel's messages. It goes on with the rest of its
    /// quantum, not a new one: messages that come more often than a
    /// quantum (a copy's acknowledgements, a busy link) must not keep it
    /// on the CPU while the others of the kernel wait.
    pub turn_ns: u64,
}

impl Process {
    pub(crate) fn new(container: Container) -> Self {
        Process {
            container,
            last_ran: 0,
            arrived: Instant::now(),
            spare_home: None,
            far_copy: None,
            turn_ns: 0,
        }
    }
}

/// Who asked for a job to start (or be restored) on this kernel: this
/// node, or a kernel of another node on behalf of its node.
pub(crate) enum JobAsker {
    Node(Sender<Result<Pid, String>>),
    Kernel { kernel: KernelId, req: u64 },
}

/// A checkpoint asked of a process in a file call to another node: its op
/// may have run there, so it is captured once the answer is in.
struct HeldCheckpoint {
    pid: Pid,
    leave_running: bool,
    reply: Sender<Result<ProcessImage, String>>,
}

/// A node request parked on this kernel until another kernel answers it.
pub(crate) enum Pending {
    Start(Sender<Result<Pid, String>>),
    Kill(Sender<Result<(), Errno>>),
    Migrate(Sender<Result<MigrationReport, String>>),
    Report(Sender<KernelReport>),
}

/// Who is to answer a parked request: so that losing a node ends the
/// requests it held (`nodes.rs`).
#[derive(Clone, Copy)]
pub(crate) enum Awaits {
    /// A kernel it was sent to.
    Kernel(KernelId),
    /// Wherever this process runs, reached through its home.
    Process(Pid),
}

pub(crate) struct Kernel {
    pub id: KernelId,
    noc: Endpoint<Packet>,
    control: Receiver<Control>,
    events: Sender<NodeEvent>,
    pub runtime: Arc<Runtime>,
    pub(crate) host: Host,
    quantum: Duration,
    /// How long an idle kernel polls before it sleeps (and a call waits in
    /// place, `ipc/in_place.rs`).
    pub(crate) spin: Duration,
    /// When it last exchanged messages with another node (`talk.rs`).
    remote_talk: RemoteTalk,
    /// Hashed with FxHash: the IPC paths look processes up several times
    /// per message, and SipHash showed up at 9% of a ping-pong.
    pub procs: FxHashMap<Pid, Process>,
    pub(crate) run_queue: RunQueue,
    /// Sleeping processes by wake-up time.
    pub timers: BinaryHeap<Reverse<(u64, Pid)>>,
    pub(crate) homes: Homes,
    /// Node requests waiting for an answer from another kernel.
    pub(crate) pending: HashMap<u64, (Pending, Awaits)>,
    /// Messages that could not be sent (their kernel's node is down), with
    /// why: each is answered as its sender expects, at the next turn of the
    /// loop (`nodes.rs`).
    pub(crate) unsent: Vec<(KernelId, Packet, String)>,
    /// Checkpoints of processes that were waiting for another node's file
    /// server, taken once it answers (`settle_checkpoints`).
    held_checkpoints: Vec<HeldCheckpoint>,
    /// Prepares and compiles modules on its own thread.
    pub(crate) loader: Loader,
    /// Messages from other nodes naming a module this node does not have
    /// yet, by module, in arrival order; it has been asked for.
    pub(crate) awaiting_modules: HashMap<ContentHash, Vec<(KernelId, Packet)>>,
    pub(crate) migration: MigrationConfig,
    /// Processes migrating to another kernel, at most one departure each.
    pub(crate) departures: FxHashMap<Pid, Departure>,
    /// Memories sent after their processes (post-copy), by process.
    pub(crate) lends: FxHashMap<Pid, Lend>,
    /// Instances of lends let go that cannot serve as spares, to drop
    /// when there is nothing else to do, with the count of slices run when
    /// each was let go.
    pub(crate) retired_lends: Vec<(u64, Container)>,
    /// Instances of processes that ended here, for the next forks.
    pub(crate) spares: Spares,
    /// Files of this node held open for processes of other nodes.
    pub(crate) held: HeldFiles,
    /// Processes whose pre-copy rounds are arriving here.
    pub(crate) incoming: FxHashMap<Pid, Incoming>,
    /// Processes restored here, not yet committed at their home.
    pub(crate) arrivals: FxHashMap<Pid, Arriving>,
    /// Migrations to refuse before they commit (`Control::FailArrivals`).
    pub(crate) faults: u32,
    next_req: u64,
    /// Its part of the DQDT, placements under way, the balancer.
    pub(crate) placement: Placement,
    pub(crate) slices: u64,
    messages: u64,
    /// When this kernel last ran out of work after running a process or
    /// serving a message other than the DQDT's: a kernel that worked lately
    /// polls before it sleeps, as more work often follows within
    /// microseconds (a spawn, an answer); one woken only by its own timers
    /// sleeps again at once.
    worked_at: quanta::Instant,
    /// `slices` when `worked_at` was last set.
    worked_slices: u64,
    /// When the last slice ended, as its process read the clock: the loop
    /// checks its tick against that rather than read the clock again.
    slice_end: Option<quanta::Instant>,
    /// Live processes this kernel keeps at most; the others are dormant.
    pub(crate) live_budget: usize,
    /// This kernel's copy of the node's domain table.
    pub(crate) domains: Arc<DomainTable>,
    /// The process quotas this kernel keeps (`quota.rs`).
    pub(crate) quotas: crate::quota::Counts,
    /// The process whose slice is running (it is out of `procs` meanwhile),
    /// and messages for it that arrive during the slice.
    pub(crate) running: Option<Pid>,
    pub(crate) deferred: Vec<Packet>,
    /// Messages taken off the NoC during a slice that the loop serves
    /// first, in the order they came ([`take_in_noc`](Self::take_in_noc)).
    pub(crate) early: VecDeque<(KernelId, Packet)>,
    /// Requests of the node and modules the loader finished, taken in
    /// during a slice (they rang the doorbell too): the loop serves them
    /// first.
    early_control: VecDeque<Control>,
    early_loaded: VecDeque<Loaded>,
    /// The process whose IPC state is lent back to the kernel while it
    /// serves messages for it in the middle of the process's call
    /// (`ipc/in_place.rs`); [`ipc_state`](Self::ipc_state) finds it there.
    pub(crate) lent_to: Option<Pid>,
    /// That state while it is lent; a blank one, swapped into the process
    /// meanwhile, when it is not.
    pub(crate) lent_ipc: Box<IpcState>,
    /// The caller whose call runs the running process's slice, and what
    /// comes for it meanwhile (`ipc/handoff.rs`).
    pub(crate) below: Option<crate::ipc::Below>,
    pub(crate) below_deferred: Vec<Packet>,
    /// The client the running process last replied to here this slice: its
    /// receive does not hand the core to it (`ipc/handoff.rs`).
    pub(crate) replied_to: Option<Pid>,
    /// How long the running process's calls waited in place this slice:
    /// idle time, taken off its CPU time.
    pub(crate) waited_in_place: Duration,
    /// Letters the running process took from processes of other kernels,
    /// per sender, not confirmed yet (`Kernel::confirm_taken`).
    pub(crate) unconfirmed: Vec<(Pid, u32)>,
    pub(crate) ipc: IpcCounters,
}

impl Kernel {
    fn new(p: KernelParams) -> Self {
        let id = p.endpoint.id();
        p.endpoint.doorbell().bind_current_thread();
        let doorbells = p.doorbells.clone();
        let loader =
            Loader::start(id, p.runtime.clone(), p.doorbells.clone()).expect("a loader thread");
        let live_budget =
            crate::dormancy::live_budget(p.runtime.instances(), p.endpoint.kernel_count());
        let placement = Placement::new(id, p.endpoint.nodes(), p.balance);
        let host = Host {
            kernel: id,
            kernel_count: p.endpoint.kernel_count(),
            console: p.console,
            wake: Arc::new(move || doorbells[id.index as usize].is_pending()),
            instances: Default::default(),
        };
        Kernel {
            id,
            noc: p.endpoint,
            control: p.control,
            events: p.events,
            runtime: p.runtime,
            host,
            quantum: p.quantum,
            spin: p.spin,
            remote_talk: RemoteTalk::default(),
            procs: FxHashMap::default(),
            run_queue: RunQueue::new(p.quantum),
            timers: BinaryHeap::new(),
            homes: Homes::new(id),
            pending: HashMap::new(),
            unsent: Vec::new(),
            held_checkpoints: Vec::new(),
            loader,
            awaiting_modules: HashMap::new(),
            migration: p.migration,
            departures: FxHashMap::default(),
            lends: FxHashMap::default(),
            retired_lends: Vec::new(),
            spares: Spares::default(),
            held: HeldFiles::default(),
            incoming: FxHashMap::default(),
            arrivals: FxHashMap::default(),
            faults: 0,
            next_req: 0,
            placement,
            slices: 0,
            messages: 0,
            worked_at: quanta::Instant::now(),
            worked_slices: 0,
            slice_end: None,
            live_budget,
            domains: Arc::new(DomainTable::default()),
            quotas: Default::default(),
            running: None,
            deferred: Vec::new(),
            below: None,
            below_deferred: Vec::new(),
            replied_to: None,
            early: VecDeque::new(),
            early_control: VecDeque::new(),
            early_loaded: VecDeque::new(),
            lent_to: None,
            lent_ipc: Box::new(IpcState::new(None)),
            waited_in_place: Duration::ZERO,
            unconfirmed: Vec::new(),
            ipc: IpcCounters::default(),
        }
    }

    /// Whether kernel `to` exists and can be sent to (of this node, or of a
    /// node linked to it).
    pub(crate) fn noc_reaches(&self, to: KernelId) -> bool {
        self.noc.reaches(to)
    }

    /// The nodes this kernel can reach now: (node id, kernel count).
    pub(crate) fn noc_nodes(&self) -> Vec<(u16, u16)> {
        self.noc.nodes()
    }

    pub(crate) fn host_kernel_count(&self) -> u16 {
        self.host.kernel_count
    }

    pub(crate) fn console(&self) -> &dyn Console {
        &*self.host.console
    }

    fn run(mut self) {
        tracing::debug!(kernel = %self.id, "kernel started");
        loop {
            let rung = self.noc.doorbell().take();
            while let Some(c) = self.early_control.pop_front() {
                if matches!(c, Control::Shutdown) {
                    tracing::debug!(kernel = %self.id, "kernel stopped");
                    return;
                }
                self.on_control(c);
            }
            loop {
                match self.control.try_recv() {
                    Ok(Control::Shutdown) | Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                        tracing::debug!(kernel = %self.id, "kernel stopped");
                        return;
                    }
                    Ok(c) => self.on_control(c),
                    Err(std::sync::mpsc::TryRecvError::Empty) => break,
                }
            }
            while let Some((from, packet)) = self.early.pop_front() {
                self.messages += 1;
                self.on_noc(from, packet);
            }
            // Unrung, the inboxes are as the last drain left them, empty:
            // a sender rings after it posts, and every `take` is followed
            // by a drain. Scanning them anyway, a cache line per kernel of
            // the node, was 8 % of a fork's time with 64 kernels.
            let mut worked = false;
            while let Some(m) = if rung {
                self.noc.try_recv()
            } else {
                self.noc.try_recv_loopback()
            } {
                self.messages += 1;
                let mut packet = m.msg;
                packet.bulk = m.bulk;
                worked |= !matches!(packet.msg, NocMsg::Dqdt(_));
                self.on_noc(m.from, packet);
            }
            while !self.unsent.is_empty() {
                for (to, packet, why) in std::mem::take(&mut self.unsent) {
                    self.unsendable(to, packet, why);
                }
            }
            if !self.held_checkpoints.is_empty() {
                self.settle_checkpoints();
            }
            while let Some(loaded) = self.early_loaded.pop_front() {
                self.on_loaded(loaded);
            }
            while let Ok(loaded) = self.loader.done.try_recv() {
                self.on_loaded(loaded);
            }
            if !self.procs.is_empty() {
                self.placement.hurry();
            }
            let now = self.slice_end.take().unwrap_or_else(quanta::Instant::now);
            if self.placement.tick_due(now) {
                self.placement_tick();
            }
            let backlog = self.noc.flush();
            self.fire_timers();
            let next = self.run_queue.pop();
            if self.ran_out(next.is_none()) {
                self.steal();
            }
            if let Some((pid, woken)) = next {
                self.run_slice(pid, woken);
                continue;
            }
            // Read the clock here, as the kernel runs out of work, rather
            // than after every slice: IPC on one kernel is a slice a message.
            if worked || self.slices != self.worked_slices {
                self.worked_slices = self.slices;
                self.worked_at = quanta::Instant::now();
            }
            if self.noc.has_loopback() {
                continue;
            }
            // Nothing to run: what waits to share a write goes now.
            self.flush_lazy();
            if self.drop_retired_lend(false) || self.spin_before_sleep() {
                continue;
            }
            if self.drop_retired_lend(true) {
                continue;
            }
            let next_tick = self.placement.until_tick();
            let next_timer = self
                .timers
                .peek()
                .map(|Reverse((t, _))| Duration::from_nanos(t.saturating_sub(monotonic_ns())))
                .map_or(next_tick, |t| t.min(next_tick));
            // A backlog waits for the receiver to drain its ring: poll it.
            let timeout = if backlog {
                Duration::from_micros(50)
            } else {
                next_timer
            };
            // Asleep, it needs the links' thread to hear other nodes.
            self.noc.settle_remote();
            self.noc.doorbell().sleep(Some(timeout));
        }
    }

    /// Polls the doorbell, and the links to other nodes, for a short while
    /// before sleeping: an answer from another kernel often arrives within
    /// microseconds, and waking from a futex costs more than that. Longer
    /// after an exchange with another node, while the links' thread has
    /// nothing to do (`talk.rs`). Only while this kernel has a core to
    /// itself ([`Doorbell::room_to_poll`]); otherwise spinning steals the
    /// core from another kernel.
    fn spin_before_sleep(&self) -> bool {
        if self.spin.is_zero() || !(self.awaits_answers() || self.worked_lately()) {
            return false;
        }
        let until = Instant::now() + self.spin;
        let remote_until = self.remote_talk.poll_until(REMOTE_SPIN);
        let doorbell = self.noc.doorbell();
        let mut rung = false;
        self.noc.polling_remote(true);
        while doorbell.room_to_poll() {
            let now = Instant::now();
            if now >= until && !remote_until.is_some_and(|u| now < u && !self.noc.links_busy()) {
                break;
            }
            if doorbell.is_pending() || self.timer_due() {
                rung = true;
                break;
            }
            self.noc.poll_remote();
            std::hint::spin_loop();
        }
        self.noc.polling_remote(false);
        rung
    }

    /// Whether this kernel ran a process or served a message (other than
    /// the DQDT's) within the last [`IDLE_AFTER`].
    fn worked_lately(&self) -> bool {
        self.worked_at.elapsed() < IDLE_AFTER
    }

    /// Whether anything here may be waiting for another kernel: a process
    /// (one of its calls), a migration under way, a request of the node.
    /// A kernel with none has no answer to catch early: unless it worked
    /// lately it sleeps without polling, and it ticks seldom
    /// ([`Placement::hurry`]).
    pub(crate) fn awaits_answers(&self) -> bool {
        !self.procs.is_empty()
            || !self.departures.is_empty()
            || !self.incoming.is_empty()
            || !self.arrivals.is_empty()
            || !self.pending.is_empty()
    }

    /// Writes the messages to other nodes that wait to share a write
    /// ([`Endpoint::send_lazy`]): before this kernel waits for anything.
    pub(crate) fn flush_lazy(&self) {
        self.noc.flush_lazy();
    }

    /// This kernel starts (`true`) or stops polling the links to other
    /// nodes ([`Endpoint::polling_remote`]): around a wait in place.
    pub(crate) fn polling_remote(&self, on: bool) {
        self.noc.polling_remote(on);
    }

    /// Takes in what the NoC brought during a slice, for a call waiting in
    /// place (`ipc/in_place.rs`): messages between processes are served
    /// now (those for the running process are deferred, as ever); the
    /// first other one, and all after it, wait for the loop, which serves
    /// them first (`early`). Returns whether the doorbell had rung.
    pub(crate) fn take_in_noc(&mut self) -> bool {
        // A load first: swapping would pull the line from the ringer's core.
        if !self.noc.doorbell().is_pending() {
            self.noc.poll_remote();
            return false;
        }
        self.noc.doorbell().take();
        while let Some(m) = self.noc.try_recv() {
            let mut packet = m.msg;
            packet.bulk = m.bulk;
            if self.early.is_empty() && matches!(packet.msg, NocMsg::Ipc(_)) {
                self.messages += 1;
                self.on_noc(m.from, packet);
            } else {
                self.early.push_back((m.from, packet));
            }
        }
        true
    }

    /// Takes in, during a slice, what else rings the doorbell: the node's
    /// requests and the loader's finished modules, for the loop.
    pub(crate) fn take_in_local(&mut self) {
        while let Ok(c) = self.control.try_recv() {
            self.early_control.push_back(c);
        }
        while let Ok(loaded) = self.loader.done.try_recv() {
            self.early_loaded.push_back(loaded);
        }
    }

    /// Whether the node or the loader asked for something the loop serves.
    pub(crate) fn has_local_work(&self) -> bool {
        !self.early_control.is_empty() || !self.early_loaded.is_empty()
    }

    /// Whether the kernel has a core to itself ([`Doorbell::room_to_poll`]).
    pub(crate) fn room_to_poll(&self) -> bool {
        self.noc.doorbell().room_to_poll()
    }

    pub(crate) fn timer_due(&self) -> bool {
        self.timers
            .peek()
            .is_some_and(|Reverse((t, _))| *t <= monotonic_ns())
    }

    fn fire_timers(&mut self) {
        if self.timers.is_empty() {
            return;
        }
        let now = monotonic_ns();
        while let Some(&Reverse((t, pid))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            // The entry may be stale: the process ended, moved or was woken.
            if let Some(p) = self.procs.get_mut(&pid) {
                let due = match p.container.uarea().call {
                    CallState::Blocked(KernelCall::Sleep { until_ns }) if until_ns == t => {
                        Some(Reply::Done)
                    }
                    CallState::Blocked(KernelCall::PollInput {
                        until_ns: Some(until_ns),
                        ..
                    }) if until_ns == t => Some(Reply::Woken { timed_out: true }),
                    _ => None,
                };
                if let Some(reply) = due {
                    p.container.reply(reply);
                    self.run_queue.wake(pid);
                } else if p.container.uarea().threads.active() {
                    let threads = &mut p.container.uarea_mut().threads;
                    if threads.wake_due(now) {
                        self.run_queue.wake(pid);
                    } else if let Some(next) = threads.next_deadline() {
                        // Early: the thread it was set for was woken
                        // before its deadline; the next one's stands.
                        self.timers.push(Reverse((next, pid)));
                    }
                }
            }
        }
    }

    /// Runs a slice of `pid` and serves what it stopped for. Returns the
    /// CPU time the slice was charged (nanoseconds).
    pub(crate) fn run_slice(&mut self, pid: Pid, woken: bool) -> u64 {
        // The process leaves the table for its slice: its IPC calls come
        // back into this kernel (`KernelLink`), which may then touch every
        // other process.
        let Some(mut p) = self.procs.remove(&pid) else {
            return 0;
        };
        if p.container.is_dormant() {
            self.procs.insert(pid, p);
            if !self.live(pid, &[]) {
                return 0;
            }
            p = self.procs.remove(&pid).expect("just woken");
        }
        self.slices += 1;
        p.last_ran = self.slices;
        self.running = Some(pid);
        self.replied_to = None;
        let cpu_before = p.container.uarea().accounting.cpu_ns;
        let left = self.quantum.saturating_sub(Duration::from_nanos(p.turn_ns));
        let slice = p.container.run(left, Some(self));
        self.slice_end = p.container.slice_end();
        self.confirm_taken(pid);
        let waited = std::mem::take(&mut self.waited_in_place).as_nanos() as u64;
        let accounting = &mut p.container.uarea_mut().accounting;
        let cpu = (accounting.cpu_ns - cpu_before).saturating_sub(waited);
        accounting.cpu_ns = cpu_before + cpu;
        for (holder, open) in p.container.take_closed_files() {
            if holder == self.id {
                self.held.close(pid, open);
            } else {
                self.send(holder, NocMsg::FileClosed { pid, open });
            }
        }
        self.placement.busy_ns += cpu;
        self.run_queue.ran(cpu, woken);
        self.running = None;
        let for_messages = matches!(
            slice,
            Slice::Preempted(Yielding::Messages)
                | Slice::Call(KernelCall::Yield(Yielding::Messages))
        );
        p.turn_ns = if for_messages { p.turn_ns + cpu } else { 0 };
        self.procs.insert(pid, p);
        match slice {
            Slice::Exited(code) => self.ended(pid, code, None),
            Slice::Trapped(why) => {
                let name = self.procs[&pid].container.uarea().name();
                let line = format!("atoll: process {pid} ({name}) trapped: {why}\n");
                self.ended(pid, status::TRAPPED, Some(line));
            }
            Slice::Call(call) => {
                if !self.over_cpu_limit(pid) {
                    self.serve(pid, call);
                    self.keep_threads_going(pid);
                }
            }
            Slice::Preempted(why) => {
                if !self.over_cpu_limit(pid) {
                    self.requeue(pid, why);
                }
            }
            Slice::Idle { until_ns } => {
                if !self.over_cpu_limit(pid) {
                    if let Some(t) = until_ns {
                        self.timers.push(Reverse((t, pid)));
                    }
                }
            }
        }
        // Drained rather than taken: the vector keeps its room for the
        // next slice (a message a slice, with IPC on one kernel).
        let mut deferred = std::mem::take(&mut self.deferred);
        for packet in deferred.drain(..) {
            self.forward(pid, packet);
        }
        debug_assert!(self.deferred.is_empty(), "no process runs now");
        self.deferred = deferred;
        if self.departures.contains_key(&pid) {
            self.precopy_step(pid);
        }
        // What waits to share a write goes now, with what the slice's end
        // sent: a process that ends sends its parent the news, and with it
        // its home's and its memory source's.
        self.flush_lazy();
        cpu
    }

    /// Puts `pid`, which stopped with its threads ready, back in the run
    /// queue: before the other ready processes if it stopped early for the
    /// kernel's messages and its turn lasts ([`Process::turn_ns`]), after
    /// them otherwise.
    pub(crate) fn requeue(&mut self, pid: Pid, why: Yielding) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if why == Yielding::Messages && p.turn_ns < self.quantum.as_nanos() as u64 {
            return self.run_queue.resume(pid);
        }
        p.turn_ns = 0;
        self.run_queue.push(pid);
    }

    /// A process whose kernel call waits may have other threads to run:
    /// it is queued if one can run now, else woken at the earliest
    /// deadline one waits for. (Answered at once, it is queued already.)
    fn keep_threads_going(&mut self, pid: Pid) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let u = p.container.uarea();
        if !u.threads.active() || !matches!(u.call, CallState::Blocked(_)) {
            return;
        }
        if u.threads.runnable() {
            self.run_queue.push(pid);
        } else if let Some(t) = u.threads.next_deadline() {
            self.timers.push(Reverse((t, pid)));
        }
    }

    /// Ends `pid` with 128 + SIGXCPU if it has used up its CPU time limit;
    /// checked at the end of each slice, so it may overrun by one quantum.
    fn over_cpu_limit(&mut self, pid: Pid) -> bool {
        let u = self.procs[&pid].container.uarea();
        let Some(limit) = u.limits.cpu_ns else {
            return false;
        };
        if u.accounting.cpu_ns <= limit {
            return false;
        }
        let line = format!(
            "atoll: process {pid} ({}) used up its CPU time limit ({:.3} s)\n",
            u.name(),
            limit as f64 / 1e9
        );
        self.ended(pid, status::killed(status::SIGXCPU), Some(line));
        true
    }

    /// Creates a process here, counted in the quotas that granted it a
    /// place (freed if it cannot be made). The caller has loaded its
    /// program.
    pub(crate) fn create(
        &mut self,
        mut spec: ProcessSpec,
        parent: Option<Pid>,
    ) -> Result<Pid, (Errno, String)> {
        let counted = std::mem::take(&mut spec.counted);
        match self.instantiate(spec, parent) {
            Ok(pid) => {
                let p = self.procs.get_mut(&pid).expect("just made");
                p.container.uarea_mut().quotas.counted = counted;
                Ok(pid)
            }
            Err(e) => {
                self.release(counted);
                Err(e)
            }
        }
    }

    /// Makes a process of `spec` here and queues it to run.
    fn instantiate(
        &mut self,
        spec: ProcessSpec,
        parent: Option<Pid>,
    ) -> Result<Pid, (Errno, String)> {
        let program = self.runtime.program(&spec.module).ok_or_else(|| {
            (
                Errno::NoExec,
                format!("module {} is not loaded", spec.module),
            )
        })?;
        let kin = Kin {
            parent,
            console: spec.console,
        };
        let pid = self
            .homes
            .allocate(kin)
            .map_err(|e| (e, "process table is full".to_string()))?;
        let fds = FdTable::new(&spec.preopens, spec.files);
        let mut uarea = UArea::new(
            pid,
            parent,
            spec.module,
            spec.args,
            spec.env,
            spec.console,
            fds,
            spec.domain,
        );
        uarea.wander.enabled = spec.wander;
        uarea.limits = spec.limits;
        uarea.pinned = spec.pinned;
        self.make_room(&[]);
        let made = match Container::new(
            &self.runtime,
            program.clone(),
            uarea.clone(),
            self.host.clone(),
        ) {
            // The pool is exhausted (other kernels over their budgets):
            // everything here that can goes dormant, and once more.
            Err(ContainerError::Instantiate(_)) => {
                self.hibernate_oldest(&[], usize::MAX);
                Container::new(&self.runtime, program, uarea, self.host.clone())
            }
            made => made,
        };
        match made {
            Ok(container) => {
                self.procs.insert(pid, Process::new(container));
                self.placement.arrivals += 1;
                self.run_queue.push(pid);
                Ok(pid)
            }
            Err(e) => {
                self.homes.release(pid);
                Err((Errno::NoMem, e.to_string()))
            }
        }
    }

    /// `pid` ended with `code` as it ran (an exit, a trap, its CPU time
    /// used up), and this node has `words` to show about it on its stderr,
    /// if any. Its output from another node goes ahead of the words, and
    /// all of its output ahead of its end ([`UArea::end_step`]): until
    /// then it waits in a drain.
    ///
    /// [`UArea::end_step`]: atoll_process::UArea::end_step
    pub(crate) fn ended(&mut self, pid: Pid, code: i32, words: Option<String>) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let u = p.container.uarea_mut();
        u.ended(code, words);
        loop {
            match u.end_step(self.id.node) {
                EndStep::Say(words) => {
                    self.host
                        .console
                        .write(u.console, Stream::Stderr, words.as_bytes())
                }
                EndStep::Wait(call) => return self.serve(pid, call),
                EndStep::End(code) => return self.end(pid, code),
            }
        }
    }

    /// Ends `pid` at once with `code`, after the line "atoll: process PID
    /// (NAME) `what`" on its job's stderr: the node's words about an end
    /// that cannot wait for the process's output (`ended` waits).
    pub(crate) fn end_saying(&mut self, pid: Pid, code: i32, what: &str) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let u = p.container.uarea();
        let line = format!("atoll: process {pid} ({}) {what}\n", u.name());
        self.host
            .console
            .write(u.console, Stream::Stderr, line.as_bytes());
        self.end(pid, code);
    }

    /// Ends a process: tells whoever waits for it and frees its PID.
    pub(crate) fn end(&mut self, pid: Pid, code: i32) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        // One that had ended, and waited only for its output, keeps its
        // own status however it goes now.
        let code = p
            .container
            .uarea()
            .ending
            .as_ref()
            .map_or(code, |e| e.status);
        // Before the container goes: pre-copy may have write-protected it.
        self.abandon_departure(pid, code);
        let mut p = self.procs.remove(&pid).expect("checked above");
        let ipc = std::mem::replace(&mut *p.container.uarea_mut().ipc, IpcState::new(None));
        self.ipc_ended(pid, ipc, &p.container.uarea().call);
        let quotas = std::mem::take(&mut p.container.uarea_mut().quotas);
        self.release(quotas.counted);
        self.release(quotas.granted);
        let u = p.container.uarea();
        self.release_files(pid, &u.fds);
        tracing::debug!(kernel = %self.id, %pid, code, "process ended");
        let kin = Kin {
            parent: u.parent,
            console: u.console,
        };
        // A memory still arriving is let go at its source, and the home
        // told, ahead of the news, which may make its parent fork again at
        // once; to another node, they share the news's write.
        p.container.let_late_go();
        if pid.home == self.id {
            self.homes.release(pid);
        } else {
            self.send_lazily(pid.home, NocMsg::Ended { pid });
        }
        // Ahead of the news, as the parent's next fork may follow it.
        match p.spare_home {
            Some(to) if to != self.id => self.give_spare(to, p.container),
            _ => drop(self.spares.keep(p.container)),
        }
        self.announce_end(pid, kin, code);
    }

    /// Hands the instance of a process that ended to kernel `to` of this
    /// node as a spare, if it can serve as one.
    fn give_spare(&mut self, to: KernelId, mut container: Container) {
        if container.retire() {
            let packet = Packet {
                handover: Some(Handover(Box::new(container))),
                ..Packet::new(NocMsg::Spare)
            };
            self.transmit(to, packet);
        }
    }

    /// Tells `pid`'s parent, or its job's console, that it ended.
    pub(crate) fn announce_end(&mut self, pid: Pid, kin: Kin, code: i32) {
        match kin.parent {
            Some(parent) => self.route(
                parent,
                NocMsg::ChildExited {
                    parent,
                    child: pid,
                    status: code,
                },
            ),
            None if kin.console.node() != self.id.node => {
                let to = KernelId::new(kin.console.node(), 0);
                let console = kin.console;
                let status = code;
                self.send(
                    to,
                    NocMsg::JobEnded {
                        pid,
                        console,
                        status,
                    },
                );
            }
            None => {
                let _ = self.events.send(NodeEvent::Exited {
                    pid,
                    console: kin.console,
                    status: code,
                });
            }
        }
    }

    /// Sends a message to a kernel; a send to a kernel that does not exist
    /// is a bug in the sender, logged and dropped.
    pub(crate) fn send(&mut self, to: KernelId, msg: NocMsg) {
        self.transmit(to, Packet::new(msg));
    }

    /// Like [`send`](Self::send), for a message its receiver does not wait
    /// on ([`Packet::lazy`]).
    pub(crate) fn send_lazily(&mut self, to: KernelId, msg: NocMsg) {
        self.transmit(
            to,
            Packet {
                lazy: true,
                ..Packet::new(msg)
            },
        );
    }

    /// Puts a packet on the NoC: its message in the mailbox, its bulk bytes
    /// (if any) in the portal; or, for a kernel of another node, on the
    /// links to that node.
    pub(crate) fn transmit(&mut self, to: KernelId, mut packet: Packet) {
        let local = to.node == self.id.node;
        if !local && (packet.handover.is_some() || packet.files.is_some()) {
            // `migrate` refuses this; a container must never be dropped.
            panic!(
                "kernel {}: a hand-over to kernel {to} of another node",
                self.id
            );
        }
        if !local {
            if let Some(loan) = packet.lent.take() {
                packet.bulk = Some(loan.bytes().to_vec());
            }
        }
        if !local {
            self.talked_remotely(&packet);
        }
        let sent = match packet.bulk.take() {
            None if packet.lazy => self.noc.send_lazy(to, packet),
            None => self.noc.send(to, packet),
            Some(bulk) if packet.msg.bulk_order_free() => {
                self.noc.send_bulk_unordered(to, packet, bulk)
            }
            Some(bulk) => self.noc.send_bulk(to, packet, bulk),
        };
        match sent {
            Ok(()) if local => self.runtime.interrupt(to.index),
            Ok(()) => {}
            Err(e) => {
                let why = e.to_string();
                let (SendError::UnknownKernel { to, msg } | SendError::Unreachable { to, msg, .. }) =
                    e;
                self.unsent.push((to, msg, why));
            }
        }
    }

    /// Sends a message for process `pid` towards wherever it runs.
    pub(crate) fn route(&mut self, pid: Pid, msg: NocMsg) {
        self.forward(pid, Packet::new(msg));
    }

    /// Like [`route`](Self::route), for a message its receiver does not
    /// wait on: to another node it may share the write of what follows
    /// it ([`Packet::lazy`]).
    pub(crate) fn route_lazily(&mut self, pid: Pid, msg: NocMsg) {
        self.forward(
            pid,
            Packet {
                lazy: true,
                ..Packet::new(msg)
            },
        );
    }

    /// Like [`route`](Self::route), with bytes that travel in the portal.
    pub(crate) fn route_bulk(&mut self, pid: Pid, msg: NocMsg, bulk: Vec<u8>) {
        self.forward(
            pid,
            Packet {
                bulk: Some(bulk),
                ..Packet::new(msg)
            },
        );
    }

    pub(crate) fn forward(&mut self, pid: Pid, mut packet: Packet) {
        if self.running == Some(pid) {
            return self.deferred.push(packet);
        }
        if self.is_below(pid) {
            return self.below_deferred.push(packet);
        }
        if self.procs.contains_key(&pid) {
            return self.deliver(pid, packet);
        }
        if let Some(d) = self.departures.get_mut(&pid) {
            return d.held.push(packet);
        }
        if let Some(a) = self.arrivals.get_mut(&pid) {
            return a.held.push(packet);
        }
        let next = if pid.home == self.id {
            match self.homes.locate(pid) {
                Some(at) if at != self.id => at,
                _ => return self.undeliverable(packet.msg),
            }
        } else {
            pid.home
        };
        packet.hops += 1;
        if packet.hops > MAX_HOPS {
            tracing::warn!(kernel = %self.id, %pid, "message could not find its process: {:?}", packet.msg);
            return self.undeliverable(packet.msg);
        }
        self.transmit(next, packet);
    }

    /// A message for a process that no longer exists: answer requests with
    /// ESRCH, drop notifications.
    pub(crate) fn undeliverable(&mut self, msg: NocMsg) {
        match msg {
            NocMsg::Kill { reply_to, .. } => self.answer_kill(reply_to, Err(Errno::Srch)),
            // The parent ended in its spawn or fork (killed while the
            // child's module loaded, or while the request crossed kernels)
            // and never learned of the child: the child ends too, as if the
            // call had not returned.
            NocMsg::Spawned {
                parent,
                result: Ok(child),
            } => {
                tracing::debug!(kernel = %self.id, %parent, %child, "ending the child of a parent that ended in its spawn");
                let kill = NocMsg::Kill {
                    target: child,
                    signal: status::SIGKILL,
                    reply_to: ReplyTo::nobody(self.id),
                    domain: None,
                };
                self.route(child, kill);
            }
            NocMsg::Migrate { pid, reply_to, .. } => {
                self.answer_migration(reply_to, Err(format!("no process {pid}")))
            }
            NocMsg::Ipc(m) => self.ipc_undeliverable(m),
            NocMsg::Admitted {
                quota,
                granted: true,
                ..
            } => self.release(vec![quota]),
            other => {
                tracing::debug!(kernel = %self.id, "dropping message for a process that ended: {other:?}")
            }
        }
    }

    pub(crate) fn answer_kill(&mut self, reply_to: ReplyTo, result: Result<(), Errno>) {
        match reply_to {
            ReplyTo::Process(p) => self.route(p, NocMsg::Killed { reply_to, result }),
            ReplyTo::Control { kernel, .. } if kernel == self.id => {
                self.on_killed(reply_to, result)
            }
            ReplyTo::Control { kernel, .. } => {
                self.send(kernel, NocMsg::Killed { reply_to, result })
            }
        }
    }

    fn on_killed(&mut self, reply_to: ReplyTo, result: Result<(), Errno>) {
        match reply_to {
            ReplyTo::Control { req, .. } => {
                if let Some(Pending::Kill(tx)) = self.unpark(req) {
                    let _ = tx.send(result);
                }
            }
            ReplyTo::Process(pid) => self.reply_if_blocked(
                pid,
                |c| matches!(c, KernelCall::Kill { .. }),
                Reply::Killed(result),
            ),
        }
    }

    /// Answers a process blocked in the call `is_call` matches, and makes it runnable.
    pub(crate) fn reply_if_blocked(
        &mut self,
        pid: Pid,
        is_call: impl Fn(&KernelCall) -> bool,
        reply: Reply,
    ) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if matches!(&p.container.uarea().call, CallState::Blocked(c) if is_call(c)) {
            p.container.reply(reply);
            self.run_queue.wake(pid);
        }
    }

    /// Answers whoever asked for a migration: a node request parked here
    /// or on another kernel. A process that asked to move itself learns
    /// where it runs when it resumes (`schedule`).
    pub(crate) fn answer_migration(
        &mut self,
        reply_to: ReplyTo,
        result: Result<MigrationReport, String>,
    ) {
        match reply_to {
            ReplyTo::Control { kernel, req } if kernel == self.id => {
                if let Some(Pending::Migrate(tx)) = self.unpark(req) {
                    let _ = tx.send(result);
                }
            }
            ReplyTo::Control { kernel, req } => {
                let result = result.map(Box::new);
                self.send(kernel, NocMsg::Migrated { req, result })
            }
            ReplyTo::Process(_) => {}
        }
    }

    /// Answers whoever asked to start or restore a job here.
    pub(crate) fn answer_start(&mut self, asker: JobAsker, result: Result<Pid, String>) {
        match asker {
            JobAsker::Node(reply) => {
                let _ = reply.send(result);
            }
            JobAsker::Kernel { kernel, req } => self.send(kernel, NocMsg::Started { req, result }),
        }
    }

    /// The answer to a node request to start a job on another node.
    pub(crate) fn on_started(&mut self, req: u64, result: Result<Pid, String>) {
        if let Some(Pending::Start(tx)) = self.unpark(req) {
            let _ = tx.send(result);
        }
    }

    /// Parks a message from another node until module `hash` has come
    /// from its sender (asked for once).
    fn await_module(&mut self, from: KernelId, hash: ContentHash, packet: Packet) {
        let waiting = self.awaiting_modules.entry(hash).or_default();
        waiting.push((from, packet));
        if waiting.len() == 1 {
            tracing::debug!(kernel = %self.id, %hash, "asking kernel {from} for a module");
            self.send(from, NocMsg::NeedModule { hash });
        }
    }

    /// A module asked for has come (or not, `bulk` empty): load it, then
    /// handle the messages that waited for it. Without it they fail as
    /// they would for any missing module.
    pub(crate) fn on_module_bytes(&mut self, hash: ContentHash, bulk: Option<Vec<u8>>) {
        match bulk.filter(|b| !b.is_empty()) {
            None => self.on_module(hash, Err("the sender no longer has it".to_string())),
            // Compiled off this thread (`loader`); what waits for it, waits.
            Some(bytes) => self.loader.load(Load::Module { hash, bytes }),
        }
    }

    /// Module `hash` is loaded (or will not be): what waited for it goes on.
    pub(crate) fn on_module(&mut self, hash: ContentHash, loaded: Result<(), String>) {
        if let Err(why) = loaded {
            tracing::warn!(kernel = %self.id, %hash, "module not loaded: {why}");
        }
        for (from, packet) in self.awaiting_modules.remove(&hash).unwrap_or_default() {
            self.dispatch(from, packet);
        }
    }

    /// Counts `packet`, sent to or taken from another node, in how long
    /// this kernel polls for that node (`talk.rs`); the DQDT's messages do
    /// not count.
    fn talked_remotely(&mut self, packet: &Packet) {
        if !matches!(packet.msg, NocMsg::Dqdt(_)) {
            self.remote_talk.exchanged(packet.stream_bytes());
        }
    }

    /// The NoC dispatcher.
    fn on_noc(&mut self, from: KernelId, packet: Packet) {
        if from.node != self.id.node {
            self.talked_remotely(&packet);
        }
        if let Some(hash) = packet.msg.module() {
            if from.node != self.id.node && self.runtime.program(&hash).is_none() {
                return self.await_module(from, hash, packet);
            }
        }
        self.dispatch(from, packet);
    }

    fn dispatch(&mut self, from: KernelId, packet: Packet) {
        if from != self.id && packet.msg.is_message_between_processes() {
            *self.ipc.from_kernels.entry(from).or_default() += 1;
        }
        if let Some(pid) = packet.msg.target() {
            return self.forward(pid, packet);
        }
        let Packet {
            bulk,
            handover,
            files,
            ..
        } = packet;
        match packet.msg {
            NocMsg::Spawn { parent, spec } => {
                let result = self.create(*spec, Some(parent)).map_err(|(errno, why)| {
                    tracing::warn!(kernel = %self.id, %parent, "spawn failed: {why}");
                    errno
                });
                self.route(parent, NocMsg::Spawned { parent, result });
            }
            NocMsg::Killed { reply_to, result } => self.on_killed(reply_to, result),
            NocMsg::Commit { pid, at, adopt } => {
                let result = self.commit(pid, at, adopt);
                self.send(at, NocMsg::Committed { pid, result });
            }
            NocMsg::Committed { pid, result } => self.on_committed(pid, result),
            NocMsg::Ended { pid } => {
                self.homes.release(pid);
            }
            NocMsg::Reclaim { pid, at, req } => {
                let resume = self.reclaim(pid, at);
                self.send(at, NocMsg::Reclaimed { pid, req, resume });
            }
            NocMsg::Reclaimed { pid, req, resume } => self.on_reclaimed(pid, req, resume),
            NocMsg::Locate {
                pid,
                lost,
                kernel,
                req,
            } => {
                let gone = self.lost_with(pid, lost);
                self.send(kernel, NocMsg::Located { req, lost, gone });
            }
            NocMsg::Located { req, lost, gone } => {
                if gone {
                    self.fail_request(req, lost);
                }
            }
            NocMsg::NodeDown {
                node,
                incarnation,
                stopped,
            } => self.on_node_down(node, incarnation, stopped),
            NocMsg::Migration(m) => self.on_migration(from, m, bulk, handover, files),
            NocMsg::Spare => {
                if let Some(Handover(mut container)) = handover {
                    container.set_host(self.host.clone());
                    drop(self.spares.keep(*container));
                }
            }
            NocMsg::Migrated { req, result } => {
                let reply_to = ReplyTo::Control {
                    kernel: self.id,
                    req,
                };
                self.answer_migration(reply_to, result.map(|r| *r));
            }
            NocMsg::Report { kernel, req } => {
                let report = Box::new(self.report());
                self.send(kernel, NocMsg::Reported { req, report });
            }
            NocMsg::Start { spec, kernel, req } => {
                let result = self.create(*spec, None).map_err(|(_, why)| why);
                self.answer_start(JobAsker::Kernel { kernel, req }, result);
            }
            NocMsg::Restore { kernel, req, .. } => {
                let restored = ProcessImage::decode(&bulk.unwrap_or_default())
                    .map_err(|e| e.to_string())
                    .and_then(|image| self.restore(image, JobAsker::Kernel { kernel, req }));
                if let Err(why) = restored {
                    self.answer_start(JobAsker::Kernel { kernel, req }, Err(why));
                }
            }
            NocMsg::Started { req, result } => self.on_started(req, result),
            NocMsg::Reported { req, report } => {
                if let Some(Pending::Report(tx)) = self.unpark(req) {
                    let _ = tx.send(*report);
                }
            }
            NocMsg::NeedModule { hash } => {
                let bytes = self
                    .runtime
                    .program(&hash)
                    .map(|p| p.module_bytes().to_vec())
                    .unwrap_or_default();
                self.transmit(
                    from,
                    Packet {
                        bulk: Some(bytes),
                        ..Packet::new(NocMsg::Module { hash })
                    },
                );
            }
            NocMsg::Module { hash } => self.on_module_bytes(hash, bulk),
            NocMsg::Dqdt(m) => {
                self.placement.dqdt.on_msg(m, Instant::now());
                self.placement.hurry();
                // Fresh loads: an idle kernel need not wait for its tick.
                if self.run_queue.len() == 0 {
                    self.steal();
                }
            }
            NocMsg::Place {
                within,
                asker,
                token,
            } => self.on_place(within, asker, token),
            NocMsg::Placed { token, kernel } => self.on_placed(token, kernel),
            NocMsg::Shed {
                from,
                to,
                count,
                idle,
            } => self.shed(from, to, count, idle),
            NocMsg::File { pid } => self.on_file_op(pid, from, bulk),
            NocMsg::FileClosed { pid, open } => self.held.close(pid, open),
            NocMsg::FilesReleased { pid } => self.held.release(pid),
            NocMsg::FilesShared { parent, child } => self.held.share(parent, child),
            NocMsg::Admit { quota, max, pid } => self.on_admit(quota, max, pid),
            NocMsg::Release { quota } => self.on_release(quota),
            m @ (NocMsg::Console(_) | NocMsg::JobEnded { .. } | NocMsg::Domain(_)) => {
                unreachable!("for the node, which the links hand it to: {m:?}")
            }
            m @ (NocMsg::Spawned { .. }
            | NocMsg::ChildExited { .. }
            | NocMsg::FileDone { .. }
            | NocMsg::Input { .. }
            | NocMsg::Drained { .. }
            | NocMsg::Admitted { .. }
            | NocMsg::Kill { .. }
            | NocMsg::Migrate { .. }
            | NocMsg::Ipc(_)) => {
                unreachable!("routed by target: {m:?}")
            }
        }
    }

    /// Handles a message for a process that runs here.
    pub(crate) fn deliver(&mut self, pid: Pid, packet: Packet) {
        match packet.msg {
            NocMsg::Spawned { result, .. } => {
                if let (Ok(child), Some(p)) = (result, self.procs.get_mut(&pid)) {
                    p.container.uarea_mut().children.born(child);
                }
                self.reply_if_blocked(
                    pid,
                    |c| matches!(c, KernelCall::Spawn(_) | KernelCall::Fork { .. }),
                    Reply::Spawned(result),
                );
            }
            NocMsg::ChildExited { child, status, .. } => self.child_exited(pid, child, status),
            NocMsg::Kill {
                signal,
                reply_to,
                domain,
                ..
            } => {
                let result = self.kill_here(pid, signal, reply_to, domain);
                self.answer_kill(reply_to, result);
            }
            NocMsg::Killed { reply_to, result } => self.on_killed(reply_to, result),
            NocMsg::Migrate {
                to, mode, reply_to, ..
            } => {
                if let Err(why) = self.migrate(pid, to, mode, reply_to) {
                    self.answer_migration(reply_to, Err(why));
                }
            }
            NocMsg::Ipc(m) => self.on_ipc(m, packet.bulk, packet.lent),
            NocMsg::FileDone { .. } => self.on_file_done(pid, packet.bulk),
            NocMsg::Input { bytes, .. } => self.on_input(pid, bytes),
            NocMsg::Drained { upto, .. } => self.on_drained(pid, upto),
            NocMsg::Admitted {
                quota,
                max,
                granted,
                report,
                ..
            } => self.on_admitted(pid, quota, max, granted, report),
            other => tracing::error!(kernel = %self.id, "not a message for a process: {other:?}"),
        }
    }

    /// Ends `pid`, which runs here, if the one asking may: the operator, or
    /// a process of the same domain (domains isolate processes).
    pub(crate) fn kill_here(
        &mut self,
        pid: Pid,
        signal: i32,
        by: ReplyTo,
        domain: Option<DomainId>,
    ) -> Result<(), Errno> {
        let target_domain = self
            .procs
            .get(&pid)
            .ok_or(Errno::Srch)?
            .container
            .uarea()
            .ipc
            .domain;
        if matches!(by, ReplyTo::Process(_)) && target_domain != domain {
            return Err(Errno::Perm);
        }
        self.end(pid, status::killed(signal));
        Ok(())
    }

    pub(crate) fn child_exited(&mut self, parent: Pid, child: Pid, code: i32) {
        let Some(p) = self.procs.get_mut(&parent) else {
            return;
        };
        let u = p.container.uarea_mut();
        u.children.exited(child, code);
        if let CallState::Blocked(KernelCall::Wait { pid: which }) = u.call {
            if let Ok(Some(done)) = u.children.reap(which) {
                p.container.reply(Reply::Waited(Ok(done)));
                self.run_queue.wake(parent);
            }
        }
    }

    /// The node-request dispatcher.
    fn on_control(&mut self, c: Control) {
        match c {
            Control::Start { spec, on, reply } if on == self.id => {
                let result = self.create(spec, None).map_err(|(_, why)| why);
                self.answer_start(JobAsker::Node(reply), result);
            }
            // Another node's kernel (one that cannot be reached answers
            // through `unsendable`).
            Control::Start { spec, on, reply } => {
                let req = self.park(Pending::Start(reply), Awaits::Kernel(on));
                let kernel = self.id;
                let spec = Box::new(spec);
                self.send(on, NocMsg::Start { spec, kernel, req });
            }
            Control::Ps { reply } => {
                let _ = reply.send(self.report());
            }
            Control::Kill { pid, signal, reply } => {
                let req = self.park(Pending::Kill(reply), Awaits::Process(pid));
                let reply_to = ReplyTo::Control {
                    kernel: self.id,
                    req,
                };
                self.route(
                    pid,
                    NocMsg::Kill {
                        target: pid,
                        signal,
                        reply_to,
                        domain: None,
                    },
                );
            }
            Control::Checkpoint {
                pid,
                leave_running,
                reply,
            } => {
                let held = HeldCheckpoint {
                    pid,
                    leave_running,
                    reply,
                };
                if self.in_file_call(pid) {
                    self.held_checkpoints.push(held);
                } else {
                    let _ = held.reply.send(self.checkpoint(pid, leave_running));
                }
            }
            Control::Restore { image, on, reply } if on == self.id => {
                if let Err(why) = self.restore(*image, JobAsker::Node(reply.clone())) {
                    let _ = reply.send(Err(why));
                }
            }
            Control::Restore { image, on, reply } => {
                let req = self.park(Pending::Start(reply), Awaits::Kernel(on));
                let (module, kernel) = (image.uarea.module, self.id);
                let packet = Packet {
                    bulk: Some(image.encode()),
                    ..Packet::new(NocMsg::Restore {
                        module,
                        kernel,
                        req,
                    })
                };
                self.transmit(on, packet);
            }
            Control::Migrate {
                pid,
                to,
                mode,
                reply,
            } => {
                let req = self.park(Pending::Migrate(reply), Awaits::Process(pid));
                let reply_to = ReplyTo::Control {
                    kernel: self.id,
                    req,
                };
                self.route(
                    pid,
                    NocMsg::Migrate {
                        pid,
                        to,
                        mode,
                        reply_to,
                    },
                );
            }
            Control::Report { kernel, reply } => {
                let req = self.park(Pending::Report(reply), Awaits::Kernel(kernel));
                let me = self.id;
                self.send(kernel, NocMsg::Report { kernel: me, req });
            }
            Control::FailArrivals { count } => self.faults = count,
            Control::Place { reply } => self.place(AfterPlace::Answer(reply)),
            Control::Locate { pid, reply } => {
                let at = if self.procs.contains_key(&pid) {
                    Some(self.id)
                } else {
                    self.homes.locate(pid)
                };
                let _ = reply.send(at);
            }
            Control::Domains(table) => {
                self.domains = table;
                let gone: Vec<Pid> = self
                    .procs
                    .keys()
                    .copied()
                    .filter(|&pid| self.in_ended_domain(pid))
                    .collect();
                for pid in gone {
                    tracing::info!(kernel = %self.id, %pid, "domain ended: ending its process");
                    self.end(pid, status::killed(status::SIGKILL));
                }
            }
            Control::Route(msg) => match msg.target() {
                Some(pid) => self.route(pid, msg),
                None => tracing::error!(kernel = %self.id, "not a message for a process: {msg:?}"),
            },
            Control::Shutdown => unreachable!("handled by the loop"),
        }
    }

    /// Keeps a node request until another kernel answers it; returns the
    /// number the answer will carry.
    fn park(&mut self, pending: Pending, awaits: Awaits) -> u64 {
        let req = self.next_request();
        self.pending.insert(req, (pending, awaits));
        req
    }

    /// Takes parked request `req` back, to answer it. Dropping it unanswered
    /// (its kernel cannot be reached) tells the node that asked.
    pub(crate) fn unpark(&mut self, req: u64) -> Option<Pending> {
        self.pending.remove(&req).map(|(p, _)| p)
    }

    pub(crate) fn next_request(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    /// Captures a process that runs here (it is between slices, so at a
    /// safepoint) for a checkpoint file; unless `leave_running`, it then
    /// ends as a process stopped for good (128+SIGSTOP).
    fn checkpoint(&mut self, pid: Pid, leave_running: bool) -> Result<ProcessImage, String> {
        if !self.procs.contains_key(&pid) {
            return Err(self.not_here(pid));
        }
        if self.departures.contains_key(&pid) {
            return Err(format!("process {pid} is migrating"));
        }
        if self.in_exec(pid) {
            return Err(format!("process {pid} is replacing its program (exec)"));
        }
        self.ipc_detach(pid);
        let p = self.procs.get_mut(&pid).expect("checked above");
        let image = p
            .container
            .checkpoint()
            .map_err(|e| format!("cannot checkpoint {pid}: {e}"))?;
        if !leave_running {
            self.end_saying(pid, status::killed(status::SIGSTOP), "checkpointed");
        }
        Ok(image)
    }

    /// Whether `pid` runs here and waits in `atoll_exec` for its new
    /// program: the answer comes to this kernel, so it cannot leave (or be
    /// captured) until then.
    pub(crate) fn in_exec(&self, pid: Pid) -> bool {
        self.procs.get(&pid).is_some_and(|p| {
            matches!(
                p.container.uarea().call,
                CallState::Blocked(KernelCall::Exec(_))
            )
        })
    }

    /// Whether `pid` runs here and waits for another node's file server.
    fn in_file_call(&self, pid: Pid) -> bool {
        self.procs.get(&pid).is_some_and(
            |p| matches!(&p.container.uarea().call, CallState::Blocked(c) if crate::files::is_file(c)),
        )
    }

    /// Takes the held checkpoints whose file call was answered (before the
    /// process runs again, so it is captured with the answer to apply),
    /// and fails those of processes that left or ended meanwhile.
    fn settle_checkpoints(&mut self) {
        for held in std::mem::take(&mut self.held_checkpoints) {
            if self.in_file_call(held.pid) {
                self.held_checkpoints.push(held);
            } else {
                let _ = held
                    .reply
                    .send(self.checkpoint(held.pid, held.leave_running));
            }
        }
    }

    pub(crate) fn not_here(&mut self, pid: Pid) -> String {
        match (pid.home == self.id)
            .then(|| self.homes.locate(pid))
            .flatten()
        {
            Some(at) => format!("process {pid} runs on kernel {at}, not {}", self.id),
            None if pid.home == self.id => format!("no process {pid}"),
            // It may have just ended, before its home heard of it.
            None => format!("no process {pid} on kernel {}", self.id),
        }
    }

    /// Whether `pid` (running here) belongs to a domain that has ended.
    pub(crate) fn in_ended_domain(&self, pid: Pid) -> bool {
        self.procs.get(&pid).is_some_and(|p| {
            p.container
                .uarea()
                .ipc
                .domain
                .is_some_and(|d| !self.domains.contains(d))
        })
    }

    /// Puts a process that arrived (or came back) where its state says.
    pub(crate) fn schedule(&mut self, pid: Pid) {
        // Its other threads go on, whatever the one in the kernel waits for.
        self.keep_threads_going(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let u = p.container.uarea();
        match u.call.clone() {
            CallState::Running | CallState::Replied(_) => self.run_queue.push(pid),
            CallState::Blocked(KernelCall::Sleep { until_ns }) => {
                self.timers.push(Reverse((until_ns, pid)))
            }
            // Its poll's read ahead is routed to wherever it is; its clock
            // is this kernel's now.
            CallState::Blocked(KernelCall::PollInput { until_ns, .. }) => {
                if let Some(t) = until_ns {
                    self.timers.push(Reverse((t, pid)));
                }
            }
            CallState::Blocked(KernelCall::Wait { pid: which }) => {
                let u = p.container.uarea_mut();
                if let Ok(Some(done)) = u.children.reap(which) {
                    p.container.reply(Reply::Waited(Ok(done)));
                    self.run_queue.wake(pid);
                }
            }
            CallState::Blocked(KernelCall::Yield(_)) => {
                p.container.reply(Reply::Done);
                self.run_queue.push(pid);
            }
            // It asked to move, and it is where it asked to be.
            CallState::Blocked(KernelCall::Migrate { to }) if to == self.id => {
                p.container.reply(Reply::Migrated(Ok(())));
                self.run_queue.push(pid);
            }
            // It asked while another move of it was in flight, which
            // brought it here (or failed): it makes its call again, afresh,
            // from here. (A move of its own that failed was answered
            // before it came back.)
            CallState::Blocked(KernelCall::Migrate { .. }) => {
                p.container.reply(Reply::Retry);
                self.run_queue.push(pid);
            }
            // Answers to spawn, fork, kill, IPC, file ops and the console
            // are routed to wherever the process is; bind is answered before a process
            // can move, and exec keeps it where it is until it is done.
            CallState::Blocked(
                KernelCall::Spawn(_)
                | KernelCall::Fork { .. }
                | KernelCall::Exec(_)
                | KernelCall::Kill { .. }
                | KernelCall::Ipc(_)
                | KernelCall::File { .. }
                | KernelCall::Input { .. }
                | KernelCall::Drain { .. }
                | KernelCall::Bind { .. },
            ) => {}
        }
    }

    fn report(&self) -> KernelReport {
        let processes: Vec<ProcInfo> = self
            .procs
            .iter()
            .map(|(&pid, p)| {
                let u = p.container.uarea();
                let state = match &u.call {
                    _ if u.ending.is_some() => "ended, its output on its way".into(),
                    CallState::Blocked(c) => c.describe(),
                    CallState::Running | CallState::Replied(_) => "ready".into(),
                };
                let threads = u
                    .threads
                    .describe(&state)
                    .into_iter()
                    .map(|(tid, state)| ThreadInfo { tid, state })
                    .collect();
                ProcInfo {
                    pid,
                    parent: u.parent,
                    name: u.name().to_owned(),
                    kernel: self.id,
                    domain: u.ipc.domain,
                    state,
                    cpu_ns: u.accounting.cpu_ns,
                    memory_bytes: p.container.memory_bytes(),
                    dormant_bytes: p.container.dormant_bytes(),
                    syscalls: u.accounting.syscalls,
                    moves: u.accounting.moves,
                    balanced: u.accounting.balanced,
                    pinned: u.pinned,
                    ipc: u.ipc.stats.clone(),
                    last_migration: u.accounting.last_migration.clone(),
                    threads,
                }
            })
            .collect();
        KernelReport {
            kernel: self.id,
            runnable: self.run_queue.len(),
            live: processes
                .iter()
                .filter(|p| p.dormant_bytes.is_none())
                .count(),
            memory_bytes: processes.iter().map(|p| p.memory_bytes).sum(),
            slices: self.slices,
            messages: self.messages,
            ipc: self.ipc.clone(),
            processes,
            tree: self.placement.dqdt.entries(),
            balancer_moves: self.placement.moves,
            balancer_moves_to_idle: self.placement.moves_to_idle,
            balancer_called_off: self.placement.called_off,
            copy_rate_mbps: self.placement.copy_rate() / 1e6,
            held_files: self.held.len(),
        }
    }
}
