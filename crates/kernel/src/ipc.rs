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
use atoll_ipc::{
    Access, CallKind, CopyAddr, CopyRequest, CopySide, DomainId, IpcCall, IpcState, Message, Phase, WaitingSender,
    MESSAGE_SIZE,
};
use atoll_process::{CallState, IpcCaller, IpcOutcome, KernelCall, KernelLink, Reply};
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
    /// Follow the wait-for chain from `at`.
    Probe { at: Pid, probe: Probe },
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

/// A walk along the wait-for graph (Chandy-Misra-Haas edge chasing),
/// looking for a cycle back to `origin`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Probe {
    origin: Pid,
    /// The origin's call number: a walk for an older call finds nothing.
    seq: u64,
    origin_sending: bool,
    /// Processes on the chain so far, the origin included.
    length: u32,
    /// The previous process, if it waits to send to the one visited next:
    /// its message must be queued there, or the edge is stale (the receiver
    /// took the message and the news is still on its way).
    via: Option<Pid>,
}

impl Probe {
    fn new(origin: Pid, seq: u64, origin_sending: bool) -> Self {
        Probe { origin, seq, origin_sending, length: 2, via: origin_sending.then_some(origin) }
    }
}

impl KernelLink for Kernel {
    fn ipc(&mut self, mut me: IpcCaller<'_>, call: IpcCall) -> IpcOutcome {
        match call {
            IpcCall::Send { to, msg, kind } => self.send_message(&mut me, call, to, msg, kind),
            IpcCall::SendRec { to, msg, .. } => self.send_message(&mut me, call, to, msg, CallKind::SendRec),
            IpcCall::Receive { from, msg, status } => self.receive(&mut me, call, from, msg, status),
            IpcCall::Notify { to } => self.notify(&mut me, call, to),
            IpcCall::Copy(req) => self.copy(&mut me, call, req),
        }
    }
}

impl Kernel {
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
            IpcMsg::Probe { at, probe } => self.walk(at, probe),
            IpcMsg::CopyRead { copy, .. } => {
                if let Some(result) = self.copy_read(copy) {
                    self.answer(copy.requester, copy.seq, result);
                }
            }
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
            | IpcMsg::Probe { .. } => {}
        }
    }

    // ------------------------------------------------------------ sending

    fn send_message(&mut self, me: &mut IpcCaller<'_>, call: IpcCall, to: Pid, addr: u32, kind: CallKind) -> IpcOutcome {
        let (domain, seq) = (me.ipc.domain, me.ipc.seq);
        let mut msg = read_message(me.memory, addr);
        msg.set_source(me.pid);
        let reply = me.ipc.owed.remove(&to);
        if !self.procs.contains_key(&to) {
            self.ipc.remote_out += 1;
            self.route(to, NocMsg::Ipc(IpcMsg::Deliver { to, from: me.pid, domain, kind, seq, reply, msg }));
            if reply && kind != CallKind::SendRec {
                me.ipc.stats.sent += 1;
                return IpcOutcome::Done(Ok(()));
            }
            return IpcOutcome::Block(call);
        }
        if self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return IpcOutcome::Done(Err(Errno::CallDenied));
        }
        if self.admits(to, me.pid, reply) {
            self.ipc.local += 1;
            me.ipc.stats.sent += 1;
            self.hand_over(to, me.pid, kind, &msg);
            return match call {
                IpcCall::SendRec { to, msg, .. } => IpcOutcome::Block(IpcCall::SendRec { to, msg, phase: Phase::AwaitingReply }),
                _ => IpcOutcome::Done(Ok(())),
            };
        }
        if kind == CallKind::SendNb {
            return IpcOutcome::Done(Err(Errno::NotReady));
        }
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender { from: me.pid, kind, seq, msg: None });
        }
        self.walk(to, Probe::new(me.pid, seq, true));
        IpcOutcome::Block(call)
    }

    /// A message from another kernel for `to`, which runs here.
    #[allow(clippy::too_many_arguments)]
    fn deliver_remote(&mut self, to: Pid, from: Pid, domain: Option<DomainId>, kind: CallKind, seq: u64, reply: bool, msg: Message) {
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return self.answer(from, seq, Err(Errno::CallDenied));
        }
        if self.admits(to, from, reply) {
            self.hand_over(to, from, kind, &msg);
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
        self.walk(to, Probe::new(from, seq, true));
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

    fn receive(&mut self, me: &mut IpcCaller<'_>, call: IpcCall, from: Option<Pid>, addr: u32, status: u32) -> IpcOutcome {
        let taken = if let Some(source) = me.ipc.take_notification(from) {
            self.ipc.notifications += 1;
            Some((Message::notification(source), CallKind::Notify))
        } else if let Some(w) = me.ipc.take_sender(from) {
            let msg = match w.msg {
                Some(m) => m,
                None => {
                    self.ipc.local += 1;
                    // Never `None`: a sender here leaves the queue when it ends or moves.
                    self.pending_message(w.from).unwrap_or_else(|| Message::notification(w.from))
                }
            };
            if w.kind == CallKind::SendRec {
                me.ipc.owed.insert(w.from);
            }
            self.answer(w.from, w.seq, Ok(()));
            Some((msg, w.kind))
        } else {
            None
        };
        if let Some((msg, kind)) = taken {
            me.memory[addr as usize..addr as usize + MESSAGE_SIZE].copy_from_slice(msg.as_bytes());
            me.memory[status as usize..status as usize + 4].copy_from_slice(&kind.status().to_le_bytes());
            me.ipc.stats.received += 1;
            return IpcOutcome::Done(Ok(()));
        }
        let Some(q) = from else { return IpcOutcome::Block(call) };
        self.walk(q, Probe::new(me.pid, me.ipc.seq, false));
        if me.ipc.watching.insert(q) {
            match self.ipc_state(q) {
                Some(qs) => {
                    qs.watchers.insert(me.pid);
                }
                None => self.route(q, NocMsg::Ipc(IpcMsg::Watch { to: q, watcher: me.pid })),
            }
        }
        IpcOutcome::Block(call)
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
    fn hand_over(&mut self, receiver: Pid, from: Pid, kind: CallKind, msg: &Message) {
        let Some((addr, status)) = (match self.ipc_call(receiver) {
            Some(&IpcCall::Receive { msg, status, .. }) => Some((msg, Some(status))),
            Some(&IpcCall::SendRec { msg, .. }) => Some((msg, None)),
            _ => None,
        }) else {
            return;
        };
        let Some(r) = self.procs.get_mut(&receiver) else { return };
        let mem = r.container.memory_mut();
        mem[addr as usize..addr as usize + MESSAGE_SIZE].copy_from_slice(msg.as_bytes());
        if let Some(status) = status {
            mem[status as usize..status as usize + 4].copy_from_slice(&kind.status().to_le_bytes());
        }
        let u = r.container.uarea_mut();
        u.ipc.stats.received += 1;
        if kind == CallKind::SendRec {
            u.ipc.owed.insert(from);
        }
        self.finish(receiver, Ok(()));
    }

    // ------------------------------------------------------ notifications

    fn notify(&mut self, me: &mut IpcCaller<'_>, call: IpcCall, to: Pid) -> IpcOutcome {
        if to == me.pid {
            me.ipc.notifications.insert(me.pid);
            return IpcOutcome::Done(Ok(()));
        }
        if self.procs.contains_key(&to) {
            return IpcOutcome::Done(self.post_notification(to, me.pid, me.ipc.domain));
        }
        self.ipc.remote_out += 1;
        let (domain, seq) = (me.ipc.domain, me.ipc.seq);
        self.route(to, NocMsg::Ipc(IpcMsg::Notify { to, from: me.pid, domain, seq }));
        IpcOutcome::Block(call)
    }

    /// A notification from `from` for `to`, which runs here: delivered if
    /// `to` is receiving, otherwise left pending (coalesced).
    fn post_notification(&mut self, to: Pid, from: Pid, domain: Option<DomainId>) -> Result<(), Errno> {
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return Err(Errno::CallDenied);
        }
        if matches!(self.ipc_call(to), Some(IpcCall::Receive { from: want, .. }) if want.is_none_or(|w| w == from)) {
            self.ipc.notifications += 1;
            self.hand_over(to, from, CallKind::Notify, &Message::notification(from));
        } else if let Some(s) = self.ipc_state(to) {
            s.notifications.insert(from);
            self.ipc.notifications += 1;
        }
        Ok(())
    }

    // ------------------------------------------------------------- copies

    fn copy(&mut self, me: &mut IpcCaller<'_>, call: IpcCall, req: CopyRequest) -> IpcOutcome {
        let CopyRequest { src, dst, len } = req;
        let copy = CopyOrder { requester: me.pid, domain: me.ipc.domain, seq: me.ipc.seq, req };
        let mine = |side: CopySide| match side.at {
            // The host function checked the caller's own ranges.
            CopyAddr::Direct(a) => a as usize..a as usize + len as usize,
            CopyAddr::Grant { .. } => unreachable!("a grant names another process's memory"),
        };
        let result = match (src.pid == me.pid, dst.pid == me.pid) {
            (true, true) => {
                me.memory.copy_within(mine(src), mine(dst).start);
                Some(Ok(()))
            }
            (true, false) if self.procs.contains_key(&dst.pid) => Some(self.copy_write(&copy, &me.memory[mine(src)])),
            (true, false) => {
                let bytes = me.memory[mine(src)].to_vec();
                self.route_bulk(dst.pid, NocMsg::Ipc(IpcMsg::CopyWrite { to: dst.pid, copy }), bytes);
                None
            }
            (false, true) if self.procs.contains_key(&src.pid) => Some(self.resolve(&copy, src, Access::READ).map(|a| {
                let from = &self.procs[&src.pid].container.memory()[a as usize..a as usize + len as usize];
                me.memory[mine(dst)].copy_from_slice(from);
                self.counted(len);
            })),
            (false, _) if self.procs.contains_key(&src.pid) => self.copy_read(copy),
            (false, _) => {
                self.route(src.pid, NocMsg::Ipc(IpcMsg::CopyRead { to: src.pid, copy }));
                None
            }
        };
        match result {
            Some(r) => {
                if r.is_ok() {
                    me.ipc.stats.copied_bytes += u64::from(len);
                }
                IpcOutcome::Done(r)
            }
            None => IpcOutcome::Block(call),
        }
    }

    /// Reads the source side, which is here, and writes it to the
    /// destination: directly if that is here too (one copy), else through
    /// the portal. The result, if the copy is finished here.
    fn copy_read(&mut self, copy: CopyOrder) -> Option<Result<(), Errno>> {
        let CopyRequest { src, dst, len } = copy.req;
        let from = match self.resolve(&copy, src, Access::READ) {
            Ok(a) => a as usize..a as usize + len as usize,
            Err(e) => return Some(Err(e)),
        };
        if !self.procs.contains_key(&dst.pid) {
            let bytes = self.procs[&src.pid].container.memory()[from].to_vec();
            self.route_bulk(dst.pid, NocMsg::Ipc(IpcMsg::CopyWrite { to: dst.pid, copy }), bytes);
            return None;
        }
        Some(self.resolve(&copy, dst, Access::WRITE).map(|to| {
            let to = to as usize;
            if src.pid == dst.pid {
                self.procs.get_mut(&src.pid).expect("resolved").container.memory_mut().copy_within(from, to);
            } else if let [Some(s), Some(d)] = self.procs.get_disjoint_mut([&src.pid, &dst.pid]) {
                d.container.memory_mut()[to..to + len as usize].copy_from_slice(&s.container.memory()[from]);
            }
            self.copied(&copy);
        }))
    }

    fn copy_write(&mut self, copy: &CopyOrder, bytes: &[u8]) -> Result<(), Errno> {
        let dst = copy.req.dst;
        let to = self.resolve(copy, dst, Access::WRITE)? as usize;
        let p = self.procs.get_mut(&dst.pid).ok_or(Errno::DeadSrcDst)?;
        p.container.memory_mut()[to..to + bytes.len()].copy_from_slice(bytes);
        self.copied(copy);
        Ok(())
    }

    /// Counts a finished copy, for the requester if it is not running.
    fn copied(&mut self, copy: &CopyOrder) {
        self.counted(copy.req.len);
        if let Some(s) = self.ipc_state(copy.requester) {
            s.stats.copied_bytes += u64::from(copy.req.len);
        }
    }

    fn counted(&mut self, len: u32) {
        self.ipc.copies += 1;
        self.ipc.copied_bytes += u64::from(len);
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

    /// Follows the wait-for chain from `at`, here and then (by probe) on
    /// other kernels, back to the origin, which decides on its own kernel
    /// where its state is current. The origin's call, now blocked, then
    /// fails with ELOCKED. Two processes waiting on each other are a cycle
    /// only if both send (one sending, one receiving is a rendezvous about
    /// to happen). A process that is running is not waiting: the walk for
    /// the caller of a call made during its slice resumes after the slice.
    fn walk(&mut self, mut at: Pid, mut probe: Probe) {
        loop {
            if probe.length > MAX_CHAIN {
                return;
            }
            if !self.procs.contains_key(&at) {
                return self.route(at, NocMsg::Ipc(IpcMsg::Probe { at, probe }));
            }
            if let Some(v) = probe.via {
                if !self.procs[&at].container.uarea().ipc.senders.iter().any(|w| w.from == v) {
                    return;
                }
            }
            if at == probe.origin {
                let rendezvous = probe.length == 2 && probe.via.is_some() != probe.origin_sending;
                if !rendezvous {
                    self.locked(at, probe.seq);
                }
                return;
            }
            let Some(call) = self.ipc_call(at) else { return };
            let Some(next) = call.blocked_on() else { return };
            probe.via = call.is_sending().then_some(at);
            if next != probe.origin {
                probe.length += 1;
            }
            at = next;
        }
    }

    /// A walk found that call `seq` of `pid` (which runs here) closes a cycle.
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
