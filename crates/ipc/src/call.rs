//! The IPC calls a process can be blocked in, as recorded in its UArea.

use atoll_abi::Pid;
use serde::{Deserialize, Serialize};

use crate::message::CallKind;
use crate::state::BodyAt;

/// An IPC call the kernel serves. Addresses are in the caller's linear
/// memory and were checked when the call was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum IpcCall {
    /// `send` or `sendnb` (`kind`) of the message at `msg` to `to`.
    Send { to: Pid, msg: u32, kind: CallKind },
    /// Send the message at `msg` to `to`, then receive its reply there.
    SendRec { to: Pid, msg: u32, phase: Phase },
    /// Receive from `from` (`None`: any process) into `msg`, and write how
    /// it was sent to `status`.
    Receive {
        from: Option<Pid>,
        msg: u32,
        status: u32,
    },
    /// Notify a process on another kernel (waits only for that kernel's
    /// answer, never for the process).
    Notify { to: Pid },
    /// Copy memory between two processes.
    Copy(CopyRequest),
    /// Receive as [`Receive`](IpcCall::Receive) if a message or notification
    /// is already there, else fail with `ENOTREADY` (Minix's `receivenb`):
    /// never blocks, so a process is never seen in this call.
    ReceiveNb {
        from: Option<Pid>,
        msg: u32,
        status: u32,
    },
    /// Queue the message at `msg` for `to` and return at once (Minix's
    /// `senda`): never blocks, so a process is never seen in this call.
    /// `more`: the caller sends more letters at once (`ipc_senda_more`),
    /// which may share one write to another node, as `MSG_MORE` does for
    /// a socket. `body`: bytes of the caller's memory that travel with the
    /// letter (`ipc_senda_body`), at most [`BODY_MAX`](crate::BODY_MAX).
    SendA {
        to: Pid,
        msg: u32,
        more: bool,
        body: Option<BodyAt>,
    },
}

/// Where a `sendrec` stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The request waits for the server to receive it.
    Sending,
    /// The server has the request; the reply is awaited.
    AwaitingReply,
}

/// A copy of `len` bytes from one process's memory to another's, either of
/// which may be the requester's own (COPY1) or neither (COPY2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRequest {
    pub src: CopySide,
    pub dst: CopySide,
    pub len: u32,
}

/// One end of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopySide {
    pub pid: Pid,
    pub at: CopyAddr,
}

/// How a copy names memory of another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CopyAddr {
    /// An address; some grant of the owner must cover the range (vcopy), or
    /// the owner is the requester.
    Direct(u32),
    /// An offset into grant `id` of the owner (safecopy).
    Grant { id: u32, offset: u32 },
}

impl IpcCall {
    /// The process whose action this call waits for, if one: the edges of
    /// the wait-for graph that deadlock detection follows.
    pub fn blocked_on(&self) -> Option<Pid> {
        match *self {
            IpcCall::Send { to, .. } | IpcCall::SendRec { to, .. } => Some(to),
            IpcCall::Receive { from, .. } => from,
            IpcCall::Notify { .. }
            | IpcCall::Copy(_)
            | IpcCall::ReceiveNb { .. }
            | IpcCall::SendA { .. } => None,
        }
    }

    /// Whether the call waits to *send* (as opposed to receive) — Minix's
    /// `RTS_SENDING`.
    pub fn is_sending(&self) -> bool {
        matches!(
            self,
            IpcCall::Send { .. }
                | IpcCall::SendRec {
                    phase: Phase::Sending,
                    ..
                }
        )
    }

    /// For `atoll ps`: `SENDING to X`, `RECEIVING from Y`, ...
    pub fn describe(&self) -> String {
        match self {
            IpcCall::Send { to, .. }
            | IpcCall::SendRec {
                to,
                phase: Phase::Sending,
                ..
            } => format!("SENDING to {to}"),
            IpcCall::SendRec {
                to,
                phase: Phase::AwaitingReply,
                ..
            } => format!("RECEIVING from {to} (reply)"),
            IpcCall::Receive { from: Some(p), .. } => format!("RECEIVING from {p}"),
            IpcCall::Receive { from: None, .. } => "RECEIVING from ANY".into(),
            IpcCall::ReceiveNb { .. } => "POLLING".into(),
            IpcCall::SendA { to, .. } => format!("SENDING ASYNCHRONOUSLY to {to}"),
            IpcCall::Notify { to } => format!("NOTIFYING {to}"),
            IpcCall::Copy(c) => format!("COPYING {} -> {}", c.src.pid, c.dst.pid),
        }
    }
}
