//! What kernels say to each other, and what the node says to a kernel.
//!
//! [`NocMsg`] is the closed set of kernel-to-kernel messages; every kernel
//! handles them in one dispatcher (`Kernel::on_noc`). They are plain data, so
//! the same messages cross the links between nodes. [`Control`] is the
//! node's request channel into a kernel (it carries reply channels, so it
//! never leaves the machine).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_ipc::{DomainId, DomainOp, DomainTable, IpcStats};
use atoll_migration::{MigrationReport, Mode};
use atoll_placement::{Subtree, TreeEntry};
use atoll_prepare::ContentHash;
use atoll_process::postcopy::Ask;
use atoll_process::{ConsoleId, Container, HostFiles, Loan, Preopen, ProcessImage, Quota, Stream};

use crate::homes::Kin;
use serde::{Deserialize, Serialize};

/// Everything needed to start a process on any kernel.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// A program already loaded in the node's runtime.
    pub module: ContentHash,
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub console: ConsoleId,
    pub preopens: Vec<Preopen>,
    /// The kernel that serves `preopens` to other nodes: one of the node
    /// where the job started.
    pub files: KernelId,
    /// `None`: not bound to any domain (no IPC).
    pub domain: Option<DomainId>,
    /// Move after every system call ([`atoll_process::Wander`]).
    pub wander: bool,
    pub limits: atoll_process::Limits,
    /// Left where it is by the balancer.
    pub pinned: bool,
    /// The quotas that granted it a place (`quota.rs`).
    pub counted: Vec<Quota>,
}

/// Who is waiting for the answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum ReplyTo {
    /// A process blocked in a system call.
    Process(Pid),
    /// A node control request, parked on `kernel` under `req`.
    Control { kernel: KernelId, req: u64 },
}

impl ReplyTo {
    /// For a request `kernel` makes of its own accord, whose answer nobody
    /// waits for: request 0 is never parked (`Kernel::next_request` starts
    /// at 1), so the answer is dropped where it arrives.
    pub(crate) fn nobody(kernel: KernelId) -> ReplyTo {
        ReplyTo::Control { kernel, req: 0 }
    }
}

/// A NoC message with its routing budget, and what travels with it: bytes
/// through the portal (process images, copied memory), or, between kernels
/// of one node, a whole container handed over or the host files a copied
/// process keeps open.
///
/// Between nodes the bulk bytes travel beside the packet (on the bulk
/// connection), and a hand-over or host files never do: the kernel refuses
/// them first. Lent bytes are made bulk bytes before they leave.
#[derive(Debug, Serialize, Deserialize)]
pub struct Packet {
    /// Times the message has been forwarded while looking for its process.
    pub hops: u8,
    pub msg: NocMsg,
    #[serde(skip)]
    pub bulk: Option<Vec<u8>>,
    /// In place of `bulk` within a node: the bytes of a copy, read where
    /// they lie in their process's memory ([`atoll_process::Loan`]).
    #[serde(skip)]
    pub lent: Option<Loan>,
    #[serde(skip)]
    pub handover: Option<Handover>,
    /// With a copy-mode move's last frame, within a node.
    #[serde(skip)]
    pub files: Option<Box<HostFiles>>,
    /// Its receiver does not wait on it: to another node it may share the
    /// write of what follows ([`atoll_noc::Endpoint::send_lazy`]).
    #[serde(skip)]
    pub lazy: bool,
}

// Every message between kernels is moved by value several times on its
// way (out of the caller, into and out of the NoC's queue, through the
// dispatcher). At 360 bytes (a process's spec inline in `Spawn` and
// `Start`, the host files inline here) each move was a call to `memmove`,
// a fifth of the kernels' time in a round trip between two kernels;
// what is rare and large goes behind a `Box`.
const _: () = assert!(std::mem::size_of::<Packet>() <= 192);

impl Packet {
    pub fn new(msg: NocMsg) -> Self {
        Packet {
            hops: 0,
            msg,
            bulk: None,
            lent: None,
            handover: None,
            files: None,
            lazy: false,
        }
    }

    /// How many of its bulk bytes belong to a stream, whose next piece
    /// follows (a pre-copy round): none for a copy, a file op or a
    /// letter's body, each awaited alone ([`NocMsg::bulk_order_free`]).
    /// What an idle kernel weighs to poll for another node (`talk.rs`).
    pub(crate) fn stream_bytes(&self) -> usize {
        match &self.bulk {
            Some(bulk) if !self.msg.bulk_order_free() => bulk.len(),
            _ => 0,
        }
    }
}

/// A container in transit from one kernel to another of the same node: its
/// wasmtime store, memory and UArea change owner, and nothing is copied.
/// It never leaves the machine (a network link refuses it).
pub struct Handover(pub(crate) Box<Container>);

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Handover({})", self.0.uarea().pid)
    }
}

/// A message from one kernel to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum NocMsg {
    /// Create a process here, as a child of `parent`.
    Spawn { parent: Pid, spec: Box<ProcessSpec> },
    /// Start a job's first process here, for a node request that kernel
    /// `kernel` parked under `req` (`atoll run --on` another node's kernel).
    Start {
        spec: Box<ProcessSpec>,
        kernel: KernelId,
        req: u64,
    },
    /// Restore a checkpointed process here (its image in the portal) as a
    /// job's first process, for a node request that kernel `kernel` parked
    /// under `req` (`atoll restore --on` another node's kernel).
    Restore {
        module: ContentHash,
        kernel: KernelId,
        req: u64,
    },
    /// The answer to `Start` and `Restore`.
    Started {
        req: u64,
        result: Result<Pid, String>,
    },
    /// The answer to `Spawn`, for the parent.
    Spawned {
        parent: Pid,
        result: Result<Pid, Errno>,
    },
    /// A child ended, for its parent.
    ChildExited {
        parent: Pid,
        child: Pid,
        status: i32,
    },
    /// End `target`. A process may end only processes of its own domain
    /// (`domain` is the killer's); the node's operator may end any.
    Kill {
        target: Pid,
        signal: i32,
        reply_to: ReplyTo,
        domain: Option<DomainId>,
    },
    /// The answer to `Kill`.
    Killed {
        reply_to: ReplyTo,
        result: Result<(), Errno>,
    },
    /// For the home kernel: `pid` was restored on `at` and runs there once
    /// the home has recorded it (commit at the home kernel). `adopt`: it
    /// comes from a checkpoint and may take its PID's free slot back; whom
    /// to tell if it is lost.
    Commit {
        pid: Pid,
        at: KernelId,
        adopt: Option<Kin>,
    },
    /// The home's answer to `Commit`, for the kernel that restored `pid`:
    /// an error if the home knows no such process.
    Committed {
        pid: Pid,
        result: Result<(), String>,
    },
    /// What a kernel tells the hosts above and below it in the DQDT.
    Dqdt(atoll_placement::DqdtMsg),
    /// Go on placing a process within `within` (this kernel hosts it), for
    /// kernel `asker`'s placement `token`.
    Place {
        within: Subtree,
        asker: KernelId,
        token: u64,
    },
    /// The answer to `Place`: the process goes to `kernel`.
    Placed { token: u64, kernel: KernelId },
    /// From the balancer: move `count` runnable processes of subtree `from`
    /// (this kernel hosts it, or is it) to subtree `to`; with `idle`, `to`
    /// is a kernel that had nothing to run (it stole them, or the balancer
    /// saw it so).
    Shed {
        from: Subtree,
        to: Subtree,
        count: u32,
        idle: bool,
    },
    /// For the home kernel: `pid` ended; its slot may be reused.
    Ended { pid: Pid },
    /// For the home kernel, from `at`, which holds `pid` frozen for a
    /// migration to a node that went down: may it resume `pid`? Yes unless
    /// the move was committed (then `pid` was lost with that node).
    Reclaim { pid: Pid, at: KernelId, req: u64 },
    /// The home's answer to `Reclaim`.
    Reclaimed { pid: Pid, req: u64, resume: bool },
    /// For `pid`'s home kernel, from `kernel`, which parked request `req`
    /// for `pid` (a kill or a migration) and has just lost node `lost`:
    /// was `pid` there?
    Locate {
        pid: Pid,
        lost: u16,
        kernel: KernelId,
        req: u64,
    },
    /// The answer to `Locate`: `pid` is gone (it ran on the lost node, or
    /// has ended), so the request will never be answered.
    Located { req: u64, lost: u16, gone: bool },
    /// Node `node` (that incarnation of it) is down: its links failed, or
    /// it `stopped` in order. Every kernel of this node hears it, after
    /// whatever that node sent.
    NodeDown {
        node: u16,
        incarnation: u64,
        stopped: bool,
    },
    /// Migrate `pid` to kernel `to` (`atoll migrate` from any node), routed
    /// to wherever it runs.
    Migrate {
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
        reply_to: ReplyTo,
    },
    /// The answer to `Migrate`, for the kernel that parked request `req`,
    /// once the migration committed or failed.
    Migrated {
        req: u64,
        result: Result<Box<MigrationReport>, String>,
    },
    /// Report this kernel's processes to `kernel`, which parked request
    /// `req` (`atoll ps` on another node).
    Report { kernel: KernelId, req: u64 },
    /// The answer to `Report`.
    Reported { req: u64, report: Box<KernelReport> },
    /// This kernel lacks module `hash`, which a message it got from the
    /// receiver names: send it. Code is content-addressed, so a node is sent
    /// a module once, the first time one of its kernels needs it.
    NeedModule { hash: ContentHash },
    /// The answer to `NeedModule`: the module's bytes in the portal (none if
    /// the sender no longer has it).
    Module { hash: ContentHash },
    /// What a process of this node asks of the console service of another,
    /// whose terminal its job has (the links hand it to that service
    /// directly, so it keeps its order with the job's end).
    Console(ConsoleEvent),
    /// The answer to `ReadInput` (or to a read on this node's console), for
    /// `pid` wherever it runs: at most the bytes asked; none at the end.
    Input { pid: Pid, bytes: Vec<u8> },
    /// The answer to `Drain`, for `pid` wherever it runs.
    Drained { pid: Pid, upto: u64 },
    /// For the keeper of `quota`: a place for a child of `pid`, if fewer
    /// than `max` are taken (`quota.rs`).
    Admit { quota: Quota, max: u32, pid: Pid },
    /// The keeper's answer to `Admit`, for `pid` wherever it runs; a
    /// refusal says whether it is the first (`report`).
    Admitted {
        pid: Pid,
        quota: Quota,
        max: u32,
        granted: bool,
        report: bool,
    },
    /// For the keeper of `quota`: a place is free again.
    Release { quota: Quota },
    /// A domain changed on another node: for this node's table (the links
    /// hand it to the node, which gives its kernels the new table).
    Domain(DomainOp),
    /// A job's first process ended on another node than its terminal's:
    /// for that node's console service.
    JobEnded {
        pid: Pid,
        console: ConsoleId,
        status: i32,
    },
    /// A process moving between kernels (the `migration` module).
    Migration(MigrationMsg),
    /// The instance of a process that ended, in the packet's `handover`,
    /// back to the kernel of this node that made it before the process
    /// first ran (a fork placed elsewhere), to keep as a spare for its
    /// next fork ([`atoll_process::Spares`]).
    Spare,
    /// Minix IPC between processes on different kernels.
    Ipc(crate::ipc::IpcMsg),
    /// For the kernel that owns a file: execute the file op in the portal
    /// for `pid`, a process of another node (the `files` module).
    File { pid: Pid },
    /// The answer to `File`, in the portal, for `pid` wherever it runs.
    FileDone { pid: Pid },
    /// For the kernel that holds open `open` for `pid`: it was closed.
    FileClosed { pid: Pid, open: u64 },
    /// For a kernel that may hold files open for `pid`: it ended.
    FilesReleased { pid: Pid },
    /// For a kernel that holds files open for `parent`: hold them for
    /// `child`, its fork, too.
    FilesShared { parent: Pid, child: Pid },
}

impl NocMsg {
    /// Whether it carries a message or a notification from one process to
    /// another (what the IPC counters count), not the kernels' own traffic.
    pub fn is_message_between_processes(&self) -> bool {
        matches!(
            self,
            NocMsg::Ipc(crate::ipc::IpcMsg::Deliver { .. } | crate::ipc::IpcMsg::Notify { .. })
        )
    }

    /// Whether its bulk bytes may overtake, or be overtaken by, other bulk
    /// bytes between the same two kernels ([`atoll_noc::Endpoint::send_bulk_unordered`]):
    /// a copy between processes and a remote file op or its answer, each
    /// awaited alone by its process, and a letter's body (letters are
    /// numbered, and taken in order wherever they come from). A
    /// migration's frames keep their order.
    pub fn bulk_order_free(&self) -> bool {
        use crate::ipc::{IpcMsg, Letter};
        matches!(
            self,
            NocMsg::Ipc(
                IpcMsg::CopyWrite { .. }
                    | IpcMsg::Deliver {
                        letter: Letter {
                            kind: atoll_ipc::CallKind::SendA,
                            ..
                        },
                        ..
                    }
            ) | NocMsg::File { .. }
                | NocMsg::FileDone { .. }
                | NocMsg::Migration(
                    MigrationMsg::Fill {
                        streamed: false,
                        ..
                    } | MigrationMsg::Final { alone: true, .. }
                )
        )
    }

    /// The process the message is for, if it is for a process (and so must
    /// be routed to wherever that process runs).
    pub fn target(&self) -> Option<Pid> {
        match self {
            NocMsg::Spawned { parent, .. } | NocMsg::ChildExited { parent, .. } => Some(*parent),
            NocMsg::FileDone { pid }
            | NocMsg::Input { pid, .. }
            | NocMsg::Drained { pid, .. }
            | NocMsg::Admitted { pid, .. } => Some(*pid),
            NocMsg::Kill { target, .. } => Some(*target),
            NocMsg::Killed {
                reply_to: ReplyTo::Process(p),
                ..
            } => Some(*p),
            NocMsg::Ipc(m) => Some(m.target()),
            NocMsg::Migrate { pid, .. } => Some(*pid),
            _ => None,
        }
    }

    /// The module a receiving kernel must have loaded to handle this
    /// message: the program of a process that arrives or starts there.
    pub fn module(&self) -> Option<ContentHash> {
        match self {
            NocMsg::Spawn { spec, .. } | NocMsg::Start { spec, .. } => Some(spec.module),
            NocMsg::Restore { module, .. } => Some(*module),
            NocMsg::Migration(MigrationMsg::Round { module, .. })
            | NocMsg::Migration(MigrationMsg::Final { module, .. }) => Some(*module),
            _ => None,
        }
    }
}

/// The migration protocol between a source and a destination kernel. `req`
/// names one migration: a late message of an earlier one is ignored.
#[derive(Debug, Serialize, Deserialize)]
pub enum MigrationMsg {
    /// A pre-copy frame while the process still runs at the source: an
    /// encoded [`ProcessImage`] in the portal. Frame 0 starts the process
    /// at the destination; the next frames are the rest of round 0, then
    /// the later rounds, as deltas.
    Round {
        pid: Pid,
        req: u64,
        frame: u32,
        module: ContentHash,
        /// Frame 0 of a post-copy: the container without its memory, which
        /// follows the freeze; its pages are given back now, while the
        /// process still runs at the source.
        memory_follows: bool,
    },
    /// The destination has applied frame `frame`: the source may send the
    /// next one, or freeze. Without this pacing, frames would queue up at
    /// a destination still busy with round 0, and the stop-and-copy would
    /// wait behind them, frozen.
    Applied { pid: Pid, req: u64, frame: u32 },
    /// The stop-and-copy: the process is frozen at the source and this is
    /// the rest of it (a delta on the rounds, or a complete image if there
    /// were none), in the portal. `report` is the migration so far.
    Final {
        pid: Pid,
        req: u64,
        module: ContentHash,
        report: Box<MigrationReport>,
        times: Times,
        /// Between nodes, for a process that has not run yet: the image
        /// carries no memory block, and these ranges of blocks follow once
        /// the move is committed (post-copy, `atoll_process::postcopy`).
        late: Option<Vec<Range<u32>>>,
        /// No pre-copy frame went before it: it is the whole migration, and
        /// may overtake other bulk bytes ([`NocMsg::bulk_order_free`]).
        alone: bool,
        /// The source is the process's home and recorded the move as it
        /// sent it: the process runs as soon as it is restored.
        committed: bool,
    },
    /// Blocks of a post-copy's memory (an encoded memory view, in the
    /// portal), written where they arrive by whoever reads them
    /// (`LateMemories::fill`): a piece of the stream (`streamed`, to be
    /// acknowledged), or blocks a process waits for.
    Fill { pid: Pid, streamed: bool },
    /// The destination of a post-copy to its source: a block wanted now,
    /// the next piece, or enough.
    Ask { pid: Pid, ask: Ask },
    /// The frozen container itself, in the packet's `handover`.
    Handover {
        pid: Pid,
        req: u64,
        report: Box<MigrationReport>,
        times: Times,
        /// As in `Final`.
        committed: bool,
    },
    /// The source gives up a migration still in pre-copy (the process
    /// ended): the destination drops what it has. Sent with (empty) bulk
    /// bytes, so that between nodes it takes the bulk connection behind the
    /// frames it cancels.
    Abort { pid: Pid, req: u64 },
    /// The destination's answer: the process runs there (the report is
    /// complete), or it failed and the source resumes it. A handed-over
    /// container comes back in the packet's `handover`.
    Done {
        pid: Pid,
        req: u64,
        result: Result<Box<MigrationReport>, String>,
    },
}

/// When a migration was asked for, when its process was frozen and when
/// it was sent, on the source's monotonic clock. Kernels of one machine
/// share that clock; another machine's destination reads the times with
/// [`Times::rebased`] (and the source measures its own answer, see
/// `on_migration_done`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Times {
    pub requested_ns: u64,
    pub frozen_ns: u64,
    pub sent_ns: u64,
}

impl Times {
    /// The same times on another clock that reads `received_ns` as the
    /// process arrives: the durations before the send are kept, the trip
    /// is not counted (it cannot be, without a shared clock).
    pub fn rebased(self, received_ns: u64) -> Times {
        let before = |t: u64| received_ns.saturating_sub(self.sent_ns.saturating_sub(t));
        Times {
            requested_ns: before(self.requested_ns),
            frozen_ns: before(self.frozen_ns),
            sent_ns: received_ns,
        }
    }
}

/// One process, as `atoll ps` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProcInfo {
    pub pid: Pid,
    pub parent: Option<Pid>,
    pub name: String,
    pub kernel: KernelId,
    pub domain: Option<DomainId>,
    pub state: String,
    pub cpu_ns: u64,
    /// Bytes of linear memory.
    pub memory_bytes: usize,
    /// Dormant (out of any instance, `dormancy.rs`): the bytes its image
    /// holds. `None` while it is live.
    pub dormant_bytes: Option<usize>,
    pub syscalls: u64,
    pub moves: u32,
    /// Of its moves, those the balancer decided.
    pub balanced: u32,
    /// Left where it is by the balancer (`atoll run --pin`).
    pub pinned: bool,
    pub ipc: IpcStats,
    /// The process's last migration.
    pub last_migration: Option<MigrationReport>,
    /// Its threads, once it has made one (`atoll ps --threads`); empty for
    /// a process with only the thread it started with.
    #[serde(default)]
    pub threads: Vec<ThreadInfo>,
}

/// One thread of a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ThreadInfo {
    /// 1 for the thread the process started with.
    pub tid: u32,
    pub state: String,
}

/// One kernel's answer to `ps`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelReport {
    pub kernel: KernelId,
    pub runnable: usize,
    /// Processes in an instance; the others are dormant.
    pub live: usize,
    pub memory_bytes: usize,
    pub slices: u64,
    pub messages: u64,
    pub ipc: IpcCounters,
    pub processes: Vec<ProcInfo>,
    /// Its leaf of the DQDT and the subtrees it hosts, with their loads.
    pub tree: Vec<TreeEntry>,
    /// Processes its balancer has started to move away since it started.
    pub balancer_moves: u64,
    /// Of those, the ones moved to a kernel that had nothing to run (work
    /// stealing).
    pub balancer_moves_to_idle: u64,
    /// Of those, moves to another node it called off during their
    /// pre-copy: the process rewrote a quarter of its memory or more in a
    /// round, faster than the link carried it, and stayed.
    #[serde(default)]
    pub balancer_called_off: u64,
    /// The rate, in MB of a process's memory per second, at which its
    /// balancer expects a copy to another node to go: what its own went,
    /// or 1,000 before the first.
    #[serde(default)]
    pub copy_rate_mbps: f64,
    /// Host files it holds open for processes that run on other nodes
    /// (`HeldFiles`).
    #[serde(default)]
    pub held_files: usize,
}

/// One kernel's IPC activity, for `atoll ipc`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpcCounters {
    /// Messages handed from a process to another on this kernel (one copy).
    pub local: u64,
    /// Messages sent to, and received from, processes on other kernels.
    pub remote_out: u64,
    pub remote_in: u64,
    /// Calls that waited for another kernel in place and were answered
    /// there, without unwinding (`ipc/in_place.rs`).
    #[serde(default)]
    pub in_place: u64,
    /// Calls that ran the one other process of their kernel inside the
    /// call, rather than stop (`ipc/handoff.rs`).
    #[serde(default)]
    pub handed_off: u64,
    /// Of `remote_in` and the notifications from other kernels, how many
    /// came from each kernel (the last hop): the flows between kernels
    /// that the dashboard draws.
    #[serde(default)]
    pub from_kernels: BTreeMap<KernelId, u64>,
    /// Notifications delivered here or left pending.
    pub notifications: u64,
    /// Copies finished here, and their bytes.
    pub copies: u64,
    pub copied_bytes: u64,
    /// Of `copies`, those read where they lay in the memory of a process
    /// of another kernel ([`atoll_process::Loan`]): one copy, not two.
    #[serde(default)]
    pub lent: u64,
    /// Calls that failed with ELOCKED, EDEADSRCDST and ECALLDENIED.
    pub locked: u64,
    pub dead: u64,
    pub denied: u64,
}

/// A request from the node.
pub enum Control {
    /// Start a job's first process on kernel `on`: this one, or one of
    /// another node.
    Start {
        spec: ProcessSpec,
        on: KernelId,
        reply: Sender<Result<Pid, String>>,
    },
    /// Report this kernel's processes.
    Ps { reply: Sender<KernelReport> },
    /// End a process, wherever it runs.
    Kill {
        pid: Pid,
        signal: i32,
        reply: Sender<Result<(), Errno>>,
    },
    /// Capture a process that runs here at its safepoint, for a checkpoint
    /// file. Unless `leave_running`, it then ends (status 128+SIGSTOP).
    Checkpoint {
        pid: Pid,
        leave_running: bool,
        reply: Sender<Result<ProcessImage, String>>,
    },
    /// Restore a checkpointed process on kernel `on` (this one, or one of
    /// another node) and run it.
    Restore {
        image: Box<ProcessImage>,
        on: KernelId,
        reply: Sender<Result<Pid, String>>,
    },
    /// Migrate a process, wherever it runs, to kernel `to` (`mode`: the
    /// default of the kernel it runs on when `None`).
    Migrate {
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
        reply: Sender<Result<MigrationReport, String>>,
    },
    /// Make the next `count` migrations arriving here fail just before
    /// they would commit, as if the destination broke (failure tests).
    FailArrivals { count: u32 },
    /// Ask kernel `kernel` of another node for its report.
    Report {
        kernel: KernelId,
        reply: Sender<KernelReport>,
    },
    /// Where the DQDT would put a new process (`atoll run` without `--on`,
    /// MPI ranks by load).
    Place { reply: Sender<KernelId> },
    /// Where a process homed here runs (`None`: it ended or never existed).
    Locate {
        pid: Pid,
        reply: Sender<Option<KernelId>>,
    },
    /// The node's domains changed: this is the new table. Processes of
    /// domains no longer in it are ended.
    Domains(Arc<DomainTable>),
    /// Route `msg` to the process it is for, wherever it runs: the console
    /// service's answers (`Input`, `Drained`).
    Route(NocMsg),
    /// Stop the kernel thread.
    Shutdown,
}

/// What a process asks of its job's console service, on its own node
/// ([`NodeEvent::Console`]) or on the node that started the job
/// ([`NocMsg::Console`]).
#[derive(Debug, Serialize, Deserialize)]
pub enum ConsoleEvent {
    /// It wrote to stdout or stderr.
    Output {
        console: ConsoleId,
        stream: Stream,
        bytes: Vec<u8>,
    },
    /// It reads the job's standard input, at most `max` bytes; answered
    /// with `NocMsg::Input`.
    ReadInput {
        console: ConsoleId,
        pid: Pid,
        max: u32,
    },
    /// It asks to be told once its first `upto` bytes of output have been
    /// passed on (after that output, on the same channel); answered with
    /// `NocMsg::Drained`.
    Drain {
        console: ConsoleId,
        pid: Pid,
        upto: u64,
    },
}

impl ConsoleEvent {
    /// The console it is for.
    pub fn console(&self) -> ConsoleId {
        match *self {
            ConsoleEvent::Output { console, .. }
            | ConsoleEvent::ReadInput { console, .. }
            | ConsoleEvent::Drain { console, .. } => console,
        }
    }
}

/// What a kernel tells the node.
#[derive(Debug)]
pub enum NodeEvent {
    /// What a process asks of its job's console, on this node.
    Console(ConsoleEvent),
    /// A process without a parent (a job's first process) ended.
    Exited {
        pid: Pid,
        console: ConsoleId,
        status: i32,
    },
    /// Node `node` was lost, after everything it sent: a job whose first
    /// process was homed there has nobody left to tell its end, so it
    /// ends here (as a process lost with its node, status 137).
    Lost { node: u16 },
}

#[cfg(test)]
mod tests {
    use atoll_abi::{KernelId, Pid};

    use super::*;
    use crate::ipc::{CopyOrder, IpcMsg};

    #[test]
    fn only_a_streams_bulk_bytes_count_as_streamed() {
        let pid = Pid {
            home: KernelId::new(1, 0),
            slot: 1,
            generation: 1,
        };
        let copy = CopyOrder::within(pid, 1 << 20);
        let with_bulk = |msg| Packet {
            bulk: Some(vec![0; 1 << 20]),
            ..Packet::new(msg)
        };
        let copied = with_bulk(NocMsg::Ipc(IpcMsg::CopyWrite { to: pid, copy }));
        assert_eq!(copied.stream_bytes(), 0);
        let asked_for = with_bulk(NocMsg::Migration(MigrationMsg::Fill {
            pid,
            streamed: false,
        }));
        assert_eq!(asked_for.stream_bytes(), 0);
        let piece = with_bulk(NocMsg::Migration(MigrationMsg::Fill {
            pid,
            streamed: true,
        }));
        assert_eq!(piece.stream_bytes(), 1 << 20);
        assert_eq!(Packet::new(NocMsg::FilesReleased { pid }).stream_bytes(), 0);
    }

    #[test]
    fn times_rebased_keep_the_durations_before_the_send() {
        let at_source = Times {
            requested_ns: 1_000,
            frozen_ns: 9_000,
            sent_ns: 10_000,
        };
        // Another machine's clock, behind the source's.
        let here = at_source.rebased(5_000);
        assert_eq!(here.sent_ns, 5_000);
        assert_eq!(here.frozen_ns, 4_000);
        // Further back than that clock goes: from its zero.
        assert_eq!(here.requested_ns, 0);
        let ahead = at_source.rebased(1_000_000);
        assert_eq!(ahead.requested_ns, 1_000_000 - 9_000);
        assert_eq!(ahead.frozen_ns, 1_000_000 - 1_000);
    }
}
