//! Minix 3 IPC: the rendezvous of senders and receivers, notifications,
//! deadlock refusal, and copies between processes.
//!
//! A process makes an IPC call while it runs: its host function hands the
//! call to the kernel through [`KernelLink`], and the kernel serves it on
//! the spot if it can (the caller is outside the process table for its
//! slice, and comes as an [`IpcCaller`]: PID, IPC state, memory). A call
//! that must wait is recorded as `Blocked(KernelCall::Ipc(call))` and the
//! process unwinds; the call names the addresses of its message (and status)
//! buffers, checked when it was made. Everything else the rendezvous needs
//! lives in the processes' UAreas ([`IpcState`]), so it follows a process
//! that moves.
//!
//! **On one kernel** a message goes straight from the sender's memory to
//! the receiver's: a sender that finds its receiver waiting is copied at
//! once; otherwise it waits in the receiver's queue with its message still
//! in its own memory, and is copied when the receiver comes. No kernel buffer
//! (the 64 bytes pass through registers).
//!
//! **Across kernels** the sender's kernel reads the message and sends one
//! [`IpcMsg::Deliver`] to wherever the receiver runs (routed by PID through
//! its home kernel); the receiver's kernel answers [`IpcMsg::Done`] when the
//! receiver took it. A server's reply to a client blocked in `sendrec` never
//! waits: the client can only be waiting for it (Minix's reply rule), so the
//! reply is one message and no answer.
//!
//! **Errors.** A send or receive that would close a cycle of processes
//! blocked on each other fails with `ELOCKED` (Minix's `deadlock()`: the
//! wait-for chain is followed, across kernels with [`IpcMsg::Probe`]). A call
//! to a process that ended, or blocked on one that ends, fails with
//! `EDEADSRCDST`: an ending process answers its queued senders, the clients
//! it owes a reply and its watchers (processes receiving from it by name).
//! IPC across domains fails with `ECALLDENIED`, checked by the receiver's
//! kernel, which knows both domains.

use atoll_abi::{Errno, Pid};
use atoll_ipc::{CallKind, DomainId, IpcCall, IpcState, Message, MESSAGE_SIZE};
use atoll_process::{CallState, IpcCaller, IpcOutcome, KernelCall, KernelLink, Loan, Reply};
use serde::{Deserialize, Serialize};

use crate::kernel::Kernel;
use crate::msg::NocMsg;

mod asynchronous;
mod copy;
mod cycles;
mod ends;
mod handoff;
mod in_place;
mod rendezvous;

pub use copy::CopyOrder;
pub use cycles::Probe;
pub(crate) use handoff::Below;

/// What one kernel tells another about IPC. Each is for one process (its
/// `target`) and is routed to wherever that process runs.
#[derive(Debug, Serialize, Deserialize)]
pub enum IpcMsg {
    /// A message for `to`, from a sender on another kernel.
    Deliver { to: Pid, letter: Letter },
    /// `from` notifies `to`.
    Notify {
        to: Pid,
        from: Pid,
        domain: Option<DomainId>,
        seq: u64,
    },
    /// The answer to call `seq` of `to` (a send, notify or copy).
    Done {
        to: Pid,
        seq: u64,
        result: Result<(), Errno>,
    },
    /// `watcher` is blocked receiving from `to` by name.
    Watch { to: Pid, watcher: Pid },
    /// `watcher` no longer needs to hear that `to` ended.
    Unwatch { to: Pid, watcher: Pid },
    /// `dead` ended: `to`'s call blocked on it fails.
    PeerDead { to: Pid, dead: Pid },
    /// Take call `seq` of `from` off `to`'s waiting senders (and off the
    /// replies `to` owes); if it was still there, answer it with `why`.
    Withdraw {
        to: Pid,
        from: Pid,
        seq: u64,
        why: Errno,
    },
    /// `from` took `count` of `to`'s asynchronous letters, or could not
    /// (`result`).
    AsyncTaken {
        to: Pid,
        from: Pid,
        count: u32,
        result: Result<(), Errno>,
    },
    /// Follow the wait-for chain from `at`.
    Probe { at: Pid, probe: Probe },
    /// Read the source side of a copy (`to` owns it).
    CopyRead { to: Pid, copy: CopyOrder },
    /// Write the destination side (`to` owns it); the bytes are the bulk.
    CopyWrite { to: Pid, copy: CopyOrder },
}

/// A message on its way from a sender on one kernel to a receiver on
/// another (or, sent with `senda`, to one anywhere).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Letter {
    pub from: Pid,
    /// The sender's domain, which the receiver's kernel checks.
    pub domain: Option<DomainId>,
    pub kind: CallKind,
    /// The sender's call number, for the answer.
    pub seq: u64,
    /// The receiver waits in `sendrec` for exactly this, and the sender did
    /// not wait for an answer.
    pub reply: bool,
    pub msg: Message,
    /// Letters of the receiver that the sender took and had not confirmed
    /// yet: the confirmation rides with the answer
    /// ([`Kernel::confirm_taken`](crate::kernel::Kernel::confirm_taken)).
    pub confirms: u32,
}

impl IpcMsg {
    /// The process the message is for.
    pub fn target(&self) -> Pid {
        match *self {
            IpcMsg::Deliver { to, .. }
            | IpcMsg::Notify { to, .. }
            | IpcMsg::Done { to, .. }
            | IpcMsg::Watch { to, .. }
            | IpcMsg::Unwatch { to, .. }
            | IpcMsg::PeerDead { to, .. }
            | IpcMsg::Withdraw { to, .. }
            | IpcMsg::AsyncTaken { to, .. }
            | IpcMsg::CopyRead { to, .. }
            | IpcMsg::CopyWrite { to, .. } => to,
            IpcMsg::Probe { at, .. } => at,
        }
    }
}

impl KernelLink for Kernel {
    fn ipc(&mut self, mut me: IpcCaller<'_>, call: IpcCall) -> IpcOutcome {
        match call {
            IpcCall::Send { to, msg, kind } => {
                let sent = self.send_message(&mut me, call, to, msg, kind);
                self.answer_waiting(&mut me, sent)
            }
            IpcCall::SendRec { to, msg, .. } => {
                let sent = self.send_message(&mut me, call, to, msg, CallKind::SendRec);
                self.answer_waiting(&mut me, sent)
            }
            IpcCall::Receive { from, msg, status } => {
                self.receive_waiting(&mut me, call, from, msg, status)
            }
            IpcCall::ReceiveNb { from, msg, status } => {
                self.take_deferred_before_receive(&mut me);
                self.receive(&mut me, call, from, msg, status)
            }
            IpcCall::Notify { to } => {
                let notified = self.notify(&mut me, call, to);
                self.answer_waiting(&mut me, notified)
            }
            IpcCall::Copy(req) => {
                let copied = self.copy(&mut me, call, req);
                self.answer_waiting(&mut me, copied)
            }
            IpcCall::SendA {
                to,
                msg,
                more,
                body,
            } => self.send_async(&mut me, to, msg, more, body),
        }
    }

    fn take_in(&mut self, mut me: IpcCaller<'_>) -> bool {
        self.take_in_while_running(&mut me)
    }
}

impl Kernel {
    /// The IPC handler of the NoC dispatcher, for a process that runs here.
    pub(crate) fn on_ipc(&mut self, msg: IpcMsg, bulk: Option<Vec<u8>>, lent: Option<Loan>) {
        match msg {
            IpcMsg::Deliver { to, letter } => {
                self.ipc.remote_in += 1;
                self.deliver_remote(to, letter, bulk);
            }
            IpcMsg::Notify {
                to,
                from,
                domain,
                seq,
            } => {
                let result = self.post_notification(to, from, domain);
                self.answer(from, seq, result);
            }
            IpcMsg::Done { to, seq, result } => self.sender_done(to, seq, result),
            IpcMsg::Watch { to, watcher } => {
                if let Some(s) = self.ipc_state(to) {
                    s.watchers.insert(watcher);
                }
            }
            IpcMsg::Unwatch { to, watcher } => {
                if let Some(s) = self.ipc_state(to) {
                    s.watchers.remove(&watcher);
                }
            }
            IpcMsg::PeerDead { to, dead } => self.peer_dead(to, dead),
            IpcMsg::Withdraw { to, from, seq, why } => self.withdraw(to, from, seq, why),
            IpcMsg::AsyncTaken {
                to,
                from,
                count,
                result,
            } => self.letters_confirmed(to, from, count, result),
            IpcMsg::Probe { at, probe } => self.walk(at, probe),
            IpcMsg::CopyRead { copy, .. } => {
                if let Some(result) = self.copy_read(copy) {
                    self.answer(copy.requester, copy.seq, result);
                }
            }
            IpcMsg::CopyWrite { copy, .. } => {
                let bytes = lent
                    .as_ref()
                    .map_or_else(|| bulk.as_deref().unwrap_or_default(), Loan::bytes);
                let result = self.copy_write(&copy, bytes);
                if result.is_ok() && lent.is_some() {
                    self.ipc.lent += 1;
                }
                // The requester may write its bytes again once answered.
                drop(lent);
                self.answer(copy.requester, copy.seq, result);
            }
        }
    }

    /// A message for a process that no longer exists: the sender learns
    /// that its peer is dead.
    pub(crate) fn ipc_undeliverable(&mut self, msg: IpcMsg) {
        match msg {
            IpcMsg::Deliver {
                to,
                letter:
                    Letter {
                        from,
                        kind: CallKind::SendA,
                        ..
                    },
            } => {
                self.ipc.dead += 1;
                self.letters_taken(from, to, 1, Err(Errno::DeadSrcDst));
            }
            IpcMsg::Deliver {
                letter:
                    Letter {
                        from,
                        seq,
                        reply: false,
                        ..
                    },
                ..
            }
            | IpcMsg::Notify { from, seq, .. } => {
                self.ipc.dead += 1;
                self.answer(from, seq, Err(Errno::DeadSrcDst));
            }
            IpcMsg::Watch { to, watcher } => self.route(
                watcher,
                NocMsg::Ipc(IpcMsg::PeerDead {
                    to: watcher,
                    dead: to,
                }),
            ),
            IpcMsg::CopyRead { copy, .. } | IpcMsg::CopyWrite { copy, .. } => {
                self.ipc.dead += 1;
                self.answer(copy.requester, copy.seq, Err(Errno::DeadSrcDst));
            }
            // Replies to the dead, answers to the dead and bookkeeping.
            IpcMsg::Deliver { .. }
            | IpcMsg::Done { .. }
            | IpcMsg::Unwatch { .. }
            | IpcMsg::PeerDead { .. }
            | IpcMsg::Withdraw { .. }
            | IpcMsg::AsyncTaken { .. }
            | IpcMsg::Probe { .. } => {}
        }
    }
    /// The IPC call `pid` (which runs here) is blocked in.
    pub(super) fn ipc_call(&self, pid: Pid) -> Option<&IpcCall> {
        match &self.procs.get(&pid)?.container.uarea().call {
            CallState::Blocked(KernelCall::Ipc(c)) => Some(c),
            _ => None,
        }
    }

    /// Whether `pid` runs here, blocked in its IPC call number `seq`.
    pub(super) fn in_call(&self, pid: Pid, seq: u64) -> bool {
        self.ipc_call(pid).is_some() && self.procs[&pid].container.uarea().ipc.seq == seq
    }

    /// The IPC state of `pid`, which runs here (or is the caller waiting
    /// in place, whose state is lent to the kernel meanwhile).
    pub(super) fn ipc_state(&mut self, pid: Pid) -> Option<&mut IpcState> {
        if self.lent_to == Some(pid) {
            return Some(&mut self.lent_ipc);
        }
        Some(&mut self.procs.get_mut(&pid)?.container.uarea_mut().ipc)
    }

    pub(super) fn domain_of(&self, pid: Pid) -> Option<DomainId> {
        if self.lent_to == Some(pid) {
            return self.lent_ipc.domain;
        }
        self.procs.get(&pid)?.container.uarea().ipc.domain
    }

    /// Answers `pid`'s call and makes it runnable.
    pub(super) fn finish(&mut self, pid: Pid, result: Result<(), Errno>) {
        self.reply_if_blocked(pid, |c| matches!(c, KernelCall::Ipc(_)), Reply::Ipc(result));
    }
}

fn read_message(memory: &[u8], addr: u32) -> Message {
    let bytes: &[u8; MESSAGE_SIZE] = memory[addr as usize..addr as usize + MESSAGE_SIZE]
        .try_into()
        .expect("checked at the call");
    Message::from_bytes(bytes)
}
