//! Minix 3 IPC: the rendezvous of senders and receivers, notifications,
//! deadlock refusal, and copies between processes.
//!
//! A process in an IPC call is unwound and `Blocked(KernelCall::Ipc(call))`;
//! the call names the addresses of its message (and status) buffers, checked
//! when it was made. Everything else the rendezvous needs lives in the
//! processes' UAreas ([`IpcState`]), so it follows a process that moves.
//!
//! **On one kernel** a message goes straight from the sender's memory to
//! the receiver's: a sender that finds its receiver waiting is copied at
//! once; otherwise it waits in the receiver's queue with its message still
//! in its own memory, and is copied when the receiver comes. No kernel buffer.
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
use atoll_ipc::{
    Access, CallKind, CopyAddr, CopyRequest, CopySide, DomainId, IpcCall, IpcState, Message, Phase, WaitingSender,
    MESSAGE_SIZE,
};
use atoll_process::{CallState, KernelCall, Reply};
use serde::{Deserialize, Serialize};

use crate::kernel::Kernel;
use crate::msg::NocMsg;

/// A wait-for chain longer than this is not followed further (Minix bounds
/// it by the process table; a real cycle this long is not a practical case).
const MAX_CHAIN: u32 = 4096;

/// What one kernel tells another about IPC. Each is for one process (its
/// `target`) and is routed to wherever that process runs.
#[derive(Debug, Serialize, Deserialize)]
pub enum IpcMsg {
    /// `from` sends `msg` to `to`. `reply`: `to` waits in `sendrec` for
    /// exactly this, and the sender did not wait for an answer.
    Deliver { to: Pid, from: Pid, domain: Option<DomainId>, kind: CallKind, seq: u64, reply: bool, msg: Message },
    /// `from` notifies `to`.
    Notify { to: Pid, from: Pid, domain: Option<DomainId>, seq: u64 },
    /// The answer to call `seq` of `to` (a send, notify or copy).
    Done { to: Pid, seq: u64, result: Result<(), Errno> },
    /// `watcher` is blocked receiving from `to` by name.
    Watch { to: Pid, watcher: Pid },
    /// `watcher` no longer needs to hear that `to` ended.
    Unwatch { to: Pid, watcher: Pid },
    /// `dead` ended: `to`'s call blocked on it fails.
    PeerDead { to: Pid, dead: Pid },
    /// Take call `seq` of `from` off `to`'s waiting senders (and off the
    /// replies `to` owes); if it was still there, answer it with `why`.
    Withdraw { to: Pid, from: Pid, seq: u64, why: Errno },
    /// Follow the wait-for chain from `at`, looking for `origin` (blocked
    /// in call `seq`).
    Probe { at: Pid, origin: Pid, seq: u64, origin_sending: bool, length: u32 },
    /// The chain from `to`'s call `seq` came back to it: a cycle.
    Locked { to: Pid, seq: u64 },
    /// Read the source side of a copy (`to` owns it).
    CopyRead { to: Pid, copy: CopyOrder },
    /// Write the destination side (`to` owns it); the bytes are the bulk.
    CopyWrite { to: Pid, copy: CopyOrder },
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
            | IpcMsg::Locked { to, .. }
            | IpcMsg::CopyRead { to, .. }
            | IpcMsg::CopyWrite { to, .. } => to,
            IpcMsg::Probe { at, .. } => at,
        }
    }
}

/// A copy in progress: who asked, and what.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct CopyOrder {
    pub requester: Pid,
    pub domain: Option<DomainId>,
    pub seq: u64,
    pub req: CopyRequest,
}

/// Where a message to deliver is.
enum Source {
    /// In the memory of a sender on this kernel, at this address.
    Memory(Pid, u32),
    /// Carried here from another kernel.
    Carried(Message),
    /// A notification from this process.
    Notification(Pid),
}

/// The outcome of following a wait-for chain.
enum Walk {
    Cycle,
    NoCycle,
    /// The chain left this kernel; a probe follows it.
    Probing,
}

impl Kernel {
    /// Serves an IPC call of `pid`, which runs here and is unwound.
    pub(crate) fn serve_ipc(&mut self, pid: Pid, call: IpcCall) {
        match call {
            IpcCall::Send { to, msg, kind } => self.send_message(pid, to, msg, kind),
            IpcCall::SendRec { to, msg, .. } => self.send_message(pid, to, msg, CallKind::SendRec),
            IpcCall::Receive { from, .. } => self.receive(pid, from),
            IpcCall::Notify { to } => self.notify(pid, to),
            IpcCall::Copy(req) => self.copy(pid, req),
        }
    }

    /// The IPC handler of the NoC dispatcher, for a process that runs here.
    pub(crate) fn on_ipc(&mut self, msg: IpcMsg, bulk: Option<Vec<u8>>) {
        match msg {
            IpcMsg::Deliver { to, from, domain, kind, seq, reply, msg } => {
                self.ipc.remote_in += 1;
                self.deliver_remote(to, from, domain, kind, seq, reply, msg);
            }
            IpcMsg::Notify { to, from, domain, seq } => {
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
            IpcMsg::Probe { at, origin, seq, origin_sending, length } => {
                if let Walk::Cycle = self.walk(origin, seq, origin_sending, at, length) {
                    self.route(origin, NocMsg::Ipc(IpcMsg::Locked { to: origin, seq }));
                }
            }
            IpcMsg::Locked { to, seq } => self.locked(to, seq),
            IpcMsg::CopyRead { copy, .. } => self.copy_read(copy),
            IpcMsg::CopyWrite { copy, .. } => {
                let result = self.copy_write(&copy, &bulk.unwrap_or_default());
                self.answer(copy.requester, copy.seq, result);
            }
        }
    }

    /// A message for a process that no longer exists: the sender learns
    /// that its peer is dead.
    pub(crate) fn ipc_undeliverable(&mut self, msg: IpcMsg) {
        self.ipc.dead += 1;
        match msg {
            IpcMsg::Deliver { from, seq, reply: false, .. } | IpcMsg::Notify { from, seq, .. } => {
                self.answer(from, seq, Err(Errno::DeadSrcDst));
            }
            IpcMsg::Watch { to, watcher } => self.route(watcher, NocMsg::Ipc(IpcMsg::PeerDead { to: watcher, dead: to })),
            IpcMsg::CopyRead { copy, .. } | IpcMsg::CopyWrite { copy, .. } => {
                self.answer(copy.requester, copy.seq, Err(Errno::DeadSrcDst));
            }
            // Replies to the dead, answers to the dead and bookkeeping.
            IpcMsg::Deliver { .. }
            | IpcMsg::Done { .. }
            | IpcMsg::Unwatch { .. }
            | IpcMsg::PeerDead { .. }
            | IpcMsg::Withdraw { .. }
            | IpcMsg::Probe { .. }
            | IpcMsg::Locked { .. } => {}
        }
    }

    // ------------------------------------------------------------ sending

    fn send_message(&mut self, pid: Pid, to: Pid, addr: u32, kind: CallKind) {
        let Some(p) = self.procs.get(&pid) else { return };
        let (domain, seq) = (p.container.uarea().ipc.domain, p.container.uarea().ipc.seq);
        if !self.procs.contains_key(&to) {
            return self.send_remote(pid, to, addr, kind, domain, seq);
        }
        if self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return self.finish(pid, Err(Errno::CallDenied));
        }
        let owed = self.ipc_state(pid).is_some_and(|s| s.owed.remove(&to));
        if self.admits(to, pid, owed) {
            self.ipc.local += 1;
            self.hand_over(to, pid, kind, Source::Memory(pid, addr));
            return self.sent(pid, seq);
        }
        if kind == CallKind::SendNb {
            return self.finish(pid, Err(Errno::NotReady));
        }
        if let Walk::Cycle = self.walk(pid, seq, true, to, 2) {
            self.ipc.locked += 1;
            return self.finish(pid, Err(Errno::Locked));
        }
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender { from: pid, kind, seq, msg: None });
        }
    }

    fn send_remote(&mut self, pid: Pid, to: Pid, addr: u32, kind: CallKind, domain: Option<DomainId>, seq: u64) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        let mut msg = read_message(p.container.memory(), addr);
        msg.set_source(pid);
        let reply = p.container.uarea_mut().ipc.owed.remove(&to);
        self.ipc.remote_out += 1;
        self.route(to, NocMsg::Ipc(IpcMsg::Deliver { to, from: pid, domain, kind, seq, reply, msg }));
        if reply && kind != CallKind::SendRec {
            self.sent(pid, seq);
        }
    }

    /// A message from another kernel for `to`, which runs here.
    #[allow(clippy::too_many_arguments)]
    fn deliver_remote(&mut self, to: Pid, from: Pid, domain: Option<DomainId>, kind: CallKind, seq: u64, reply: bool, msg: Message) {
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return self.answer(from, seq, Err(Errno::CallDenied));
        }
        if self.admits(to, from, reply) {
            self.hand_over(to, from, kind, Source::Carried(msg));
            if !reply || kind == CallKind::SendRec {
                self.answer(from, seq, Ok(()));
            }
            return;
        }
        if kind == CallKind::SendNb {
            return self.answer(from, seq, Err(Errno::NotReady));
        }
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender { from, kind, seq, msg: Some(msg) });
        }
        if let Walk::Cycle = self.walk(from, seq, true, to, 2) {
            self.ipc.locked += 1;
            self.withdraw(to, from, seq, Errno::Locked);
        }
    }

    /// The sender `pid`'s call `seq` handed its message over: a send
    /// returns, a sendrec now waits for the reply.
    fn sent(&mut self, pid: Pid, seq: u64) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        let u = p.container.uarea_mut();
        if u.ipc.seq != seq {
            return;
        }
        match &mut u.call {
            CallState::Blocked(KernelCall::Ipc(IpcCall::SendRec { phase, .. })) if *phase == Phase::Sending => {
                u.ipc.stats.sent += 1;
                *phase = Phase::AwaitingReply;
            }
            CallState::Blocked(KernelCall::Ipc(IpcCall::Send { .. })) => {
                u.ipc.stats.sent += 1;
                self.finish(pid, Ok(()));
            }
            _ => {}
        }
    }

    /// The answer to call `seq` of `pid` (which runs here).
    fn sender_done(&mut self, pid: Pid, seq: u64, result: Result<(), Errno>) {
        if !self.in_call(pid, seq) {
            return;
        }
        match result {
            Ok(()) if self.ipc_call(pid).is_some_and(|c| matches!(c, IpcCall::Send { .. } | IpcCall::SendRec { .. })) => {
                self.sent(pid, seq)
            }
            result => self.finish(pid, result),
        }
    }

    /// Answers call `seq` of `pid`, here or on its kernel.
    pub(crate) fn answer(&mut self, pid: Pid, seq: u64, result: Result<(), Errno>) {
        if self.procs.contains_key(&pid) {
            self.sender_done(pid, seq, result);
        } else {
            self.route(pid, NocMsg::Ipc(IpcMsg::Done { to: pid, seq, result }));
        }
    }

    // ---------------------------------------------------------- receiving

    fn receive(&mut self, pid: Pid, from: Option<Pid>) {
        let Some(s) = self.ipc_state(pid) else { return };
        let seq = s.seq;
        if let Some(source) = s.take_notification(from) {
            self.hand_over(pid, source, CallKind::Notify, Source::Notification(source));
            return;
        }
        if let Some(w) = s.take_sender(from) {
            let source = match w.msg {
                Some(m) => Source::Carried(m),
                None => match self.ipc_call(w.from) {
                    Some(&IpcCall::Send { msg, .. } | &IpcCall::SendRec { msg, .. }) => Source::Memory(w.from, msg),
                    // Never happens: a local sender leaves the queue when it ends or moves.
                    _ => return self.finish(pid, Err(Errno::DeadSrcDst)),
                },
            };
            if matches!(source, Source::Memory(..)) {
                self.ipc.local += 1;
            }
            self.hand_over(pid, w.from, w.kind, source);
            return self.answer(w.from, w.seq, Ok(()));
        }
        let Some(q) = from else { return };
        if let Walk::Cycle = self.walk(pid, seq, false, q, 2) {
            self.ipc.locked += 1;
            return self.finish(pid, Err(Errno::Locked));
        }
        self.watch(pid, q);
    }

    /// Makes sure `watcher` hears if `q` ends.
    fn watch(&mut self, watcher: Pid, q: Pid) {
        let Some(s) = self.ipc_state(watcher) else { return };
        if !s.watching.insert(q) {
            return;
        }
        match self.ipc_state(q) {
            Some(qs) => {
                qs.watchers.insert(watcher);
            }
            None => self.route(q, NocMsg::Ipc(IpcMsg::Watch { to: q, watcher })),
        }
    }

    /// Whether `pid` is blocked receiving a message that `from` may send
    /// now. `reply`: the message is the reply to `pid`'s sendrec, which may
    /// come before the news that its request was taken.
    fn admits(&self, pid: Pid, from: Pid, reply: bool) -> bool {
        match self.ipc_call(pid) {
            Some(IpcCall::Receive { from: want, .. }) => want.is_none_or(|w| w == from),
            Some(&IpcCall::SendRec { to, phase, .. }) => to == from && (phase == Phase::AwaitingReply || reply),
            _ => false,
        }
    }

    /// Gives `receiver` (blocked receiving here) its message, and makes it
    /// runnable.
    fn hand_over(&mut self, receiver: Pid, from: Pid, kind: CallKind, source: Source) {
        let Some((addr, status)) = (match self.ipc_call(receiver) {
            Some(&IpcCall::Receive { msg, status, .. }) => Some((msg, Some(status))),
            Some(&IpcCall::SendRec { msg, .. }) => Some((msg, None)),
            _ => None,
        }) else {
            return;
        };
        let result = match source {
            Source::Memory(sender, at) => match self.procs.get_disjoint_mut([&receiver, &sender]) {
                [Some(r), Some(s)] => {
                    let dst = &mut r.container.memory_mut()[addr as usize..addr as usize + MESSAGE_SIZE];
                    dst.copy_from_slice(&s.container.memory()[at as usize..at as usize + MESSAGE_SIZE]);
                    dst[..8].copy_from_slice(&sender.to_abi().to_le_bytes());
                    Ok(())
                }
                _ => Err(Errno::DeadSrcDst),
            },
            Source::Carried(m) => self.write_message(receiver, addr, &m),
            Source::Notification(src) => {
                self.ipc.notifications += 1;
                self.write_message(receiver, addr, &Message::notification(src))
            }
        };
        let Some(r) = self.procs.get_mut(&receiver) else { return };
        if let (Ok(()), Some(status)) = (result, status) {
            let mem = r.container.memory_mut();
            mem[status as usize..status as usize + 4].copy_from_slice(&kind.status().to_le_bytes());
        }
        let u = r.container.uarea_mut();
        if result.is_ok() {
            u.ipc.stats.received += 1;
            if kind == CallKind::SendRec {
                u.ipc.owed.insert(from);
            }
        }
        self.finish(receiver, result);
    }

    fn write_message(&mut self, pid: Pid, addr: u32, m: &Message) -> Result<(), Errno> {
        let p = self.procs.get_mut(&pid).ok_or(Errno::DeadSrcDst)?;
        p.container.memory_mut()[addr as usize..addr as usize + MESSAGE_SIZE].copy_from_slice(m.as_bytes());
        Ok(())
    }

    // ------------------------------------------------------ notifications

    fn notify(&mut self, pid: Pid, to: Pid) {
        let Some(s) = self.ipc_state(pid) else { return };
        let (domain, seq) = (s.domain, s.seq);
        if self.procs.contains_key(&to) {
            let result = self.post_notification(to, pid, domain);
            return self.finish(pid, result);
        }
        self.ipc.remote_out += 1;
        self.route(to, NocMsg::Ipc(IpcMsg::Notify { to, from: pid, domain, seq }));
    }

    /// A notification from `from` for `to`, which runs here: delivered if
    /// `to` is receiving, otherwise left pending (coalesced).
    fn post_notification(&mut self, to: Pid, from: Pid, domain: Option<DomainId>) -> Result<(), Errno> {
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return Err(Errno::CallDenied);
        }
        if matches!(self.ipc_call(to), Some(IpcCall::Receive { from: want, .. }) if want.is_none_or(|w| w == from)) {
            self.hand_over(to, from, CallKind::Notify, Source::Notification(from));
        } else if let Some(s) = self.ipc_state(to) {
            s.notifications.insert(from);
            self.ipc.notifications += 1;
        }
        Ok(())
    }

    // ------------------------------------------------------------- copies

    fn copy(&mut self, pid: Pid, req: CopyRequest) {
        let Some(s) = self.ipc_state(pid) else { return };
        let copy = CopyOrder { requester: pid, domain: s.domain, seq: s.seq, req };
        if !self.procs.contains_key(&req.src.pid) {
            return self.route(req.src.pid, NocMsg::Ipc(IpcMsg::CopyRead { to: req.src.pid, copy }));
        }
        self.copy_read(copy);
    }

    /// Reads the source side, which is here, and writes it to the
    /// destination: directly if that is here too (one copy).
    fn copy_read(&mut self, copy: CopyOrder) {
        let CopyRequest { src, dst, len } = copy.req;
        let from = match self.resolve(&copy, src, Access::READ) {
            Ok(a) => a as usize..a as usize + len as usize,
            Err(e) => return self.answer(copy.requester, copy.seq, Err(e)),
        };
        if !self.procs.contains_key(&dst.pid) {
            let bytes = self.procs[&src.pid].container.memory()[from].to_vec();
            return self.route_bulk(dst.pid, NocMsg::Ipc(IpcMsg::CopyWrite { to: dst.pid, copy }), bytes);
        }
        let result = self.resolve(&copy, dst, Access::WRITE).map(|to| {
            let to = to as usize;
            if src.pid == dst.pid {
                self.procs.get_mut(&src.pid).expect("resolved").container.memory_mut().copy_within(from, to);
            } else if let [Some(s), Some(d)] = self.procs.get_disjoint_mut([&src.pid, &dst.pid]) {
                d.container.memory_mut()[to..to + len as usize].copy_from_slice(&s.container.memory()[from]);
            }
            self.copied(&copy);
        });
        self.answer(copy.requester, copy.seq, result);
    }

    fn copy_write(&mut self, copy: &CopyOrder, bytes: &[u8]) -> Result<(), Errno> {
        let dst = copy.req.dst;
        let to = self.resolve(copy, dst, Access::WRITE)? as usize;
        let p = self.procs.get_mut(&dst.pid).ok_or(Errno::DeadSrcDst)?;
        p.container.memory_mut()[to..to + bytes.len()].copy_from_slice(bytes);
        self.copied(copy);
        Ok(())
    }

    fn copied(&mut self, copy: &CopyOrder) {
        self.ipc.copies += 1;
        self.ipc.copied_bytes += u64::from(copy.req.len);
        if let Some(s) = self.ipc_state(copy.requester) {
            s.stats.copied_bytes += u64::from(copy.req.len);
        }
    }

    /// The address of one side of a copy in its owner's memory (the owner
    /// runs here), if the requester may access it: its own memory, or
    /// memory the owner granted it.
    fn resolve(&mut self, copy: &CopyOrder, side: CopySide, need: Access) -> Result<u32, Errno> {
        let len = copy.req.len;
        let p = self.procs.get(&side.pid).ok_or(Errno::DeadSrcDst)?;
        let u = p.container.uarea();
        let addr = match side.at {
            CopyAddr::Direct(a) if side.pid == copy.requester => a,
            _ if u.ipc.domain.is_none() || u.ipc.domain != copy.domain => {
                self.ipc.denied += 1;
                return Err(Errno::CallDenied);
            }
            CopyAddr::Direct(a) => u.ipc.grants.covers(copy.requester, a, len, need).map(|()| a)?,
            CopyAddr::Grant { id, offset } => u.ipc.grants.resolve(id, copy.requester, offset, len, need)?,
        };
        match (addr as usize).checked_add(len as usize) {
            Some(end) if end <= p.container.memory().len() => Ok(addr),
            _ => Err(Errno::Fault),
        }
    }

    // ---------------------------------------------------- cycles and ends

    /// Follows the wait-for chain from `at` (the process `origin`'s call
    /// `seq` waits on, `length` processes in so far) looking for `origin`.
    /// Two processes waiting on each other are a cycle only if both send
    /// (one sending, one receiving is a rendezvous about to happen).
    fn walk(&mut self, origin: Pid, seq: u64, origin_sending: bool, mut at: Pid, mut length: u32) -> Walk {
        loop {
            if length > MAX_CHAIN {
                return Walk::NoCycle;
            }
            if !self.procs.contains_key(&at) {
                self.route(at, NocMsg::Ipc(IpcMsg::Probe { at, origin, seq, origin_sending, length }));
                return Walk::Probing;
            }
            let Some(call) = self.ipc_call(at) else { return Walk::NoCycle };
            let Some(next) = call.blocked_on() else { return Walk::NoCycle };
            if next == origin {
                let rendezvous = length == 2 && call.is_sending() != origin_sending;
                return if rendezvous { Walk::NoCycle } else { Walk::Cycle };
            }
            at = next;
            length += 1;
        }
    }

    /// A probe found that call `seq` of `pid` closes a cycle.
    fn locked(&mut self, pid: Pid, seq: u64) {
        if !self.in_call(pid, seq) {
            return;
        }
        self.ipc.locked += 1;
        match self.ipc_call(pid).cloned() {
            // Its message waits at the receiver: take it back first, unless
            // the receiver took it meanwhile (then there was no cycle).
            Some(c) if c.is_sending() => {
                let to = c.blocked_on().expect("a send has a destination");
                self.withdraw(to, pid, seq, Errno::Locked);
            }
            _ => self.finish(pid, Err(Errno::Locked)),
        }
    }

    /// Takes call `seq` of `from` off `to`'s queue and owed replies; answers
    /// it with `why` if it was still queued. `to` may be anywhere.
    fn withdraw(&mut self, to: Pid, from: Pid, seq: u64, why: Errno) {
        let Some(s) = self.ipc_state(to) else {
            return self.route(to, NocMsg::Ipc(IpcMsg::Withdraw { to, from, seq, why }));
        };
        s.owed.remove(&from);
        let Some(i) = s.senders.iter().position(|w| w.from == from && w.seq == seq) else { return };
        s.senders.remove(i);
        if why != Errno::DeadSrcDst {
            self.answer(from, seq, Err(why));
        }
    }

    /// `dead` ended: a call of `pid` blocked on it fails.
    fn peer_dead(&mut self, pid: Pid, dead: Pid) {
        let Some(s) = self.ipc_state(pid) else { return };
        s.watching.remove(&dead);
        s.owed.remove(&dead);
        s.notifications.remove(&dead);
        if self.ipc_call(pid).and_then(IpcCall::blocked_on) == Some(dead) {
            self.ipc.dead += 1;
            self.finish(pid, Err(Errno::DeadSrcDst));
        }
    }

    /// Tells everyone blocked on a process that it ended, and withdraws
    /// what it left waiting elsewhere. Its UArea and last call are given.
    pub(crate) fn ipc_ended(&mut self, pid: Pid, ipc: IpcState, call: &CallState) {
        for w in ipc.senders {
            self.answer(w.from, w.seq, Err(Errno::DeadSrcDst));
        }
        for other in ipc.owed.into_iter().chain(ipc.watchers) {
            match self.procs.contains_key(&other) {
                true => self.peer_dead(other, pid),
                false => self.route(other, NocMsg::Ipc(IpcMsg::PeerDead { to: other, dead: pid })),
            }
        }
        for q in ipc.watching {
            match self.ipc_state(q) {
                Some(s) => {
                    s.watchers.remove(&pid);
                }
                None => self.route(q, NocMsg::Ipc(IpcMsg::Unwatch { to: q, watcher: pid })),
            }
        }
        if let CallState::Blocked(KernelCall::Ipc(c @ (IpcCall::Send { .. } | IpcCall::SendRec { .. }))) = call {
            let to = c.blocked_on().expect("a send has a destination");
            self.withdraw(to, pid, ipc.seq, Errno::DeadSrcDst);
        }
    }

    /// Before `pid` leaves this kernel: messages that wait in the memory of
    /// a sender here are copied into the queues they wait in, since sender
    /// and receiver are about to be on different kernels.
    pub(crate) fn ipc_detach(&mut self, pid: Pid) {
        // Senders here waiting on `pid`.
        let waiting: Vec<(usize, Pid)> = self
            .ipc_state(pid)
            .map(|s| s.senders.iter().enumerate().filter(|(_, w)| w.msg.is_none()).map(|(i, w)| (i, w.from)).collect())
            .unwrap_or_default();
        for (i, sender) in waiting {
            let m = self.pending_message(sender);
            if let Some(s) = self.ipc_state(pid) {
                s.senders[i].msg = m;
            }
        }
        // `pid` waiting on a receiver here.
        let Some(c) = self.ipc_call(pid).filter(|c| c.is_sending()).cloned() else { return };
        let to = c.blocked_on().expect("a send has a destination");
        let m = self.pending_message(pid);
        if let Some(s) = self.ipc_state(to) {
            if let Some(w) = s.senders.iter_mut().find(|w| w.from == pid && w.msg.is_none()) {
                w.msg = m;
            }
        }
    }

    /// The message a sender blocked here is sending, read from its memory.
    fn pending_message(&self, sender: Pid) -> Option<Message> {
        let (IpcCall::Send { msg, .. } | IpcCall::SendRec { msg, .. }) = self.ipc_call(sender)? else { return None };
        let mut m = read_message(self.procs.get(&sender)?.container.memory(), *msg);
        m.set_source(sender);
        Some(m)
    }

    // ------------------------------------------------------------ helpers

    /// The IPC call `pid` (which runs here) is blocked in.
    fn ipc_call(&self, pid: Pid) -> Option<&IpcCall> {
        match &self.procs.get(&pid)?.container.uarea().call {
            CallState::Blocked(KernelCall::Ipc(c)) => Some(c),
            _ => None,
        }
    }

    /// Whether `pid` runs here, blocked in its IPC call number `seq`.
    fn in_call(&self, pid: Pid, seq: u64) -> bool {
        self.ipc_call(pid).is_some() && self.procs[&pid].container.uarea().ipc.seq == seq
    }

    fn ipc_state(&mut self, pid: Pid) -> Option<&mut IpcState> {
        Some(&mut self.procs.get_mut(&pid)?.container.uarea_mut().ipc)
    }

    fn domain_of(&self, pid: Pid) -> Option<DomainId> {
        self.procs.get(&pid)?.container.uarea().ipc.domain
    }

    /// Answers `pid`'s call and makes it runnable.
    fn finish(&mut self, pid: Pid, result: Result<(), Errno>) {
        self.reply_if_blocked(pid, |c| matches!(c, KernelCall::Ipc(_)), Reply::Ipc(result));
    }
}

fn read_message(memory: &[u8], addr: u32) -> Message {
    let bytes: &[u8; MESSAGE_SIZE] = memory[addr as usize..addr as usize + MESSAGE_SIZE].try_into().expect("checked at the call");
    Message::from_bytes(bytes)
}
