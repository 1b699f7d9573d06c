//! System calls the kernel must serve, and how their answers come back.
//!
//! Most system calls are answered inside the host function: they touch only
//! the UArea and the process's memory. Calls that involve the kernel — that
//! block, or need another process or another kernel — are *kernel calls*:
//! the host function validates the arguments, records the [`KernelCall`] and
//! unwinds the guest's stack (Asyncify). The kernel serves the call, perhaps
//! much later, and stores a [`Reply`]; when the process runs again its stack
//! is rewound into the same host function, which returns the reply to the
//! guest. Meanwhile the process holds no OS thread and no native stack, and
//! can be serialized and moved.

use std::ops::Range;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_ipc::{IpcCall, IpcState};

use crate::fs::op::{FileAnswer, FileOp};
use crate::loan::{Lender, Loan};
use serde::{Deserialize, Serialize};

/// Where the process stands with respect to the kernel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum CallState {
    /// Runnable: not inside a kernel call.
    #[default]
    Running,
    /// Waiting for the kernel to serve this call.
    Blocked(KernelCall),
    /// The call was served; the reply is returned when the process resumes.
    Replied(Reply),
}

/// Why a process gives up the CPU: the kernel queues it accordingly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Yielding {
    /// Its quantum ran out (a safepoint found its yield flag set).
    Quantum,
    /// Messages came for its kernel while it ran: it stopped early so that
    /// the kernel handles them, and has not used its quantum.
    Messages,
    /// It asked to let the others run (`sched_yield`).
    Asked,
}

/// A system call the kernel serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum KernelCall {
    /// Give up the CPU, for the reason given.
    Yield(Yielding),
    /// Sleep until the node's monotonic clock reads `until_ns`.
    Sleep { until_ns: u64 },
    /// Start a process.
    Spawn(SpawnRequest),
    /// Wait for a child (`None` = any child) to end.
    Wait { pid: Option<Pid> },
    /// End another process.
    Kill { pid: Pid, signal: i32 },
    /// Minix IPC: send, receive, sendrec, notify, copies.
    Ipc(IpcCall),
    /// Join the named domain, or leave the current one (`None`).
    Bind { domain: Option<String> },
    /// Move this process to kernel `to`, of its node or another (`kmigrate_to`).
    Migrate { to: KernelId },
    /// A file call's op on a file of another node, for kernel `owner` of
    /// that node to execute.
    File { owner: KernelId, op: Box<FileOp> },
    /// Copy this process into a child (`atoll_fork`), started on `kernel`
    /// (`None`: the kernel chooses).
    Fork { kernel: Option<KernelId> },
    /// Replace this process's program (`atoll_exec`), then run on `kernel`
    /// if given (`None`: the kernel chooses).
    Exec(SpawnRequest),
    /// Read at most `max` bytes of the job's standard input, from the
    /// console service of the node that started the job.
    Input { max: u32 },
    /// Wait until the job's standard input has something to read (or its
    /// end), or until `until_ns` (monotonic) if given: a `poll_oneoff` on
    /// stdin, which reads ahead at most `max` bytes
    /// ([`crate::StdinAhead`]). Answered with [`Reply::Woken`], `timed_out`
    /// if the time came first.
    PollInput { max: u32, until_ns: Option<u64> },
    /// Wait until the console service has passed on what this process
    /// wrote to its console up to `upto`: for room in its window, for its
    /// output from another node, or, ended, before its end is told
    /// ([`crate::ConsoleFlow`]).
    Drain { upto: u64 },
}

impl KernelCall {
    /// A short description for `atoll ps`.
    pub fn describe(&self) -> String {
        match self {
            KernelCall::Yield(_) => "ready".into(),
            KernelCall::Sleep { .. } => "sleeping".into(),
            KernelCall::Spawn(_) => "spawning".into(),
            KernelCall::Wait { pid: None } => "waiting for any child".into(),
            KernelCall::Wait { pid: Some(p) } => format!("waiting for {p}"),
            KernelCall::Kill { pid, .. } => format!("killing {pid}"),
            KernelCall::Ipc(c) => c.describe(),
            KernelCall::Bind { .. } => "binding".into(),
            KernelCall::Migrate { to } => format!("migrating to kernel {to}"),
            KernelCall::File { owner, .. } => format!("in a file call served by kernel {owner}"),
            KernelCall::Fork { .. } => "forking".into(),
            KernelCall::Exec(_) => "executing".into(),
            KernelCall::Input { .. } => "reading stdin".into(),
            KernelCall::PollInput { .. } => "polling stdin".into(),
            KernelCall::Drain { .. } => "waiting for its console".into(),
        }
    }

    /// Whether the kernel answers this call without waiting for another
    /// process to act: a receive in the process's seat in the kernel may
    /// give way to it ([`crate::threads::Threads::withdraw_receive`]).
    /// `Wait`, `Input`, `PollInput`, `Drain` and IPC may wait on the very
    /// process the receive waits for.
    pub fn is_prompt(&self) -> bool {
        matches!(
            self,
            KernelCall::Spawn(_)
                | KernelCall::Kill { .. }
                | KernelCall::Bind { .. }
                | KernelCall::Migrate { .. }
                | KernelCall::File { .. }
                | KernelCall::Fork { .. }
                | KernelCall::Exec(_)
        )
    }
}

/// What to run in a new process (`Spawn`), or instead of this one's
/// program (`Exec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpawnRequest {
    pub module: SpawnModule,
    pub args: Vec<String>,
    /// The kernel to start on; `None` lets the kernel choose.
    pub kernel: Option<KernelId>,
}

/// The code of a new process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SpawnModule {
    /// The caller's own module.
    Same,
    /// A module file, already resolved to a host path beneath one of the
    /// caller's preopened directories.
    File(std::path::PathBuf),
    /// A module file beneath a preopened directory of another node: the
    /// directory's owner reads it (`FileOp::ReadModule`) and sends it.
    OtherNode(crate::fs::op::Beneath),
    /// What `OtherNode` becomes once the owner has sent the file: the call
    /// then waits for this node's loader only, not for that node. Never a
    /// guest's request.
    Fetched,
}

/// The kernel's answer to a [`KernelCall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    /// Yield and sleep: nothing to return.
    Done,
    Spawned(Result<Pid, Errno>),
    Waited(Result<(Pid, i32), Errno>),
    Killed(Result<(), Errno>),
    /// IPC calls and bind: the message, if any, is already in the caller's memory.
    Ipc(Result<(), Errno>),
    /// `Migrate`: the process now runs on its destination, or (`Err`) stayed.
    Migrated(Result<(), Errno>),
    /// The owner's answer to a `File` call.
    File(Result<FileAnswer, Errno>),
    /// `Fork`, as the child sees it: it is the copy (the parent is answered
    /// with `Spawned`).
    Forked,
    /// `Exec` failed; the process goes on with its old program. (One that
    /// succeeds never returns.)
    ExecFailed(Errno),
    /// Bytes of standard input, at most the `max` asked; none at its end.
    Input(Vec<u8>),
    /// Its console output got as far as it waited for.
    Drained,
    /// To a thread's futex wait: woken by `futex_wake`, or its deadline
    /// came first ([`crate::threads`]); to `PollInput`: input came, or the
    /// time.
    Woken {
        timed_out: bool,
    },
    /// To a thread that waited for its turn in the kernel to make an IPC
    /// call: make it now.
    Retry,
}

/// The kernel, as a running process's IPC calls see it.
///
/// Most IPC calls complete at once: a send to a receiver that waits, a
/// receive with a message queued, a notify, a copy between processes of one
/// kernel. Unwinding the guest's stack for those would cost more than the
/// call itself, so the host function asks the kernel directly, in the middle
/// of the slice; only a call that must wait unwinds ([`IpcOutcome::Block`]).
/// The kernel implements this; [`Container::run`](crate::Container::run)
/// lends it to the process for one slice.
pub trait KernelLink {
    /// Serves `call` of the process `me` describes, as far as it can now.
    fn ipc(&mut self, me: IpcCaller<'_>, call: IpcCall) -> IpcOutcome;

    /// Something rang the kernel's doorbell while the process `me`
    /// describes runs (outside any call): the kernel takes in what came and
    /// serves what it can without stopping the process (letters for it
    /// join its queues). Returns whether the kernel needs its loop now, and
    /// so the process must yield.
    fn take_in(&mut self, me: IpcCaller<'_>) -> bool;
}

/// The calling process, which is running and so not in the kernel's table:
/// its PID, its IPC state and its memory.
pub struct IpcCaller<'a> {
    pub pid: Pid,
    pub ipc: &'a mut Box<IpcState>,
    pub memory: &'a mut [u8],
    /// No other thread of the process could run while this one waits: the
    /// kernel may let the call wait in place rather than unwind.
    pub alone: bool,
    pub(crate) lender: &'a Lender,
}

impl IpcCaller<'_> {
    /// Lends the caller's bytes at `range` to another kernel of the node,
    /// for a copy out of them that the caller now waits in ([`crate::loan`]);
    /// `None` if something else could write them meanwhile (another thread
    /// of the process, or a process the caller granted them to).
    ///
    /// # Safety
    /// The caller must stay stopped in this call until the copy is
    /// answered, and the copy must be answered only once the loan's bytes
    /// have been read (or it has been dropped).
    pub unsafe fn lend(&self, range: Range<usize>) -> Option<Loan> {
        let (at, len) = (
            u32::try_from(range.start).ok()?,
            u32::try_from(range.len()).ok()?,
        );
        if !self.alone || self.ipc.grants.writable(at, len) {
            return None;
        }
        // SAFETY: nothing but the caller can write these bytes (checked
        // above), and it waits until they are read (this function's rule).
        Some(unsafe { self.lender.lend(&self.memory[range]) })
    }
}

/// What became of an IPC call.
#[derive(Debug, PartialEq)]
pub enum IpcOutcome {
    /// Finished: the call returns this.
    Done(Result<(), Errno>),
    /// The process waits in this call (possibly advanced, e.g. a `sendrec`
    /// whose request was taken and which now waits for the reply).
    Block(IpcCall),
}
