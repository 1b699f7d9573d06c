//! Matching senders with receivers: send, receive, sendrec, notify, on one
//! kernel or across the NoC.

use atoll_abi::{Errno, Pid};
use atoll_ipc::{CallKind, DomainId, IpcCall, Message, Phase, WaitingSender, MESSAGE_SIZE};
use atoll_process::{CallState, IpcCaller, IpcOutcome, KernelCall};

use super::{read_message, IpcMsg, Letter, Probe};
use crate::kernel::Kernel;
use crate::msg::NocMsg;

impl Kernel {
    pub(super) fn send_message(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: IpcCall,
        to: Pid,
        addr: u32,
        kind: CallKind,
    ) -> IpcOutcome {
        let (domain, seq) = (me.ipc.domain, me.ipc.seq);
        let mut msg = read_message(me.memory, addr);
        msg.set_source(me.pid);
        let reply = me.ipc.owed.remove(&to);
        let Some(to_domain) = self.procs.get(&to).map(|p| p.container.uarea().ipc.domain) else {
            let taken = kind == CallKind::Send && self.claim_below_receive(me.pid, domain);
            self.post(
                to,
                Letter {
                    from: me.pid,
                    domain,
                    kind,
                    seq,
                    reply,
                    msg,
                    confirms: 0,
                },
                None,
                false,
            );
            if taken || reply && kind != CallKind::SendRec {
                me.ipc.stats.sent += 1;
                return IpcOutcome::Done(Ok(()));
            }
            return IpcOutcome::Block(call);
        };
        if to_domain != domain {
            self.ipc.denied += 1;
            return IpcOutcome::Done(Err(Errno::CallDenied));
        }
        if self.admits(to, me.pid, reply) {
            self.ipc.local += 1;
            me.ipc.stats.sent += 1;
            self.hand_over(to, me.pid, kind, &msg, None);
            if reply {
                self.replied_to = Some(to);
            }
            return match call {
                IpcCall::SendRec { to, msg, .. } => IpcOutcome::Block(IpcCall::SendRec {
                    to,
                    msg,
                    phase: Phase::AwaitingReply,
                }),
                _ => IpcOutcome::Done(Ok(())),
            };
        }
        if kind == CallKind::SendNb {
            return IpcOutcome::Done(Err(Errno::NotReady));
        }
        // A sender about to hand its receiver the core leaves a copy of
        // its message in the queue: it will be out of the table, below the
        // receiver, where the receive could not read it (`handoff.rs`).
        let carried = (self.may_hand_off(me) && self.run_queue.only() == Some(to)).then_some(msg);
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender {
                from: me.pid,
                kind,
                seq,
                msg: carried,
                body: None,
            });
        }
        self.walk(to, Probe::new(me.pid, seq, true));
        IpcOutcome::Block(call)
    }

    /// Sends `letter` (and its body, which travels as the packet's bulk)
    /// to `to`, which runs on another kernel. `lazy`: more letters follow
    /// at once, and to another node it waits to share their write.
    pub(super) fn post(&mut self, to: Pid, letter: Letter, body: Option<Vec<u8>>, lazy: bool) {
        // A caller below the running process is of this kernel
        // (`handoff.rs`).
        if self.is_below(to) {
            self.ipc.local += 1;
        } else {
            self.ipc.remote_out += 1;
        }
        let deliver = NocMsg::Ipc(IpcMsg::Deliver { to, letter });
        match body {
            Some(body) => self.route_bulk(to, deliver, body),
            None if lazy => self.route_lazily(to, deliver),
            None => self.route(to, deliver),
        }
    }

    /// A message from another kernel for `to`, which runs here; only a
    /// letter of `senda` has a `body`.
    pub(super) fn deliver_remote(&mut self, to: Pid, letter: Letter, body: Option<Vec<u8>>) {
        if letter.kind == CallKind::SendA {
            return self.letter_arrived(to, letter, body);
        }
        let Letter {
            from,
            domain,
            kind,
            seq,
            reply,
            msg,
            ..
        } = letter;
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return self.answer(from, seq, Err(Errno::CallDenied));
        }
        if self.admits(to, from, reply) {
            self.hand_over(to, from, kind, &msg, None);
            if !reply || kind == CallKind::SendRec {
                self.answer_taken(from, seq, kind);
            }
            return;
        }
        if kind == CallKind::SendNb {
            return self.answer(from, seq, Err(Errno::NotReady));
        }
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender {
                from,
                kind,
                seq,
                msg: Some(msg),
                body: None,
            });
        }
        self.walk(to, Probe::new(from, seq, true));
    }

    /// The sender `pid`'s call `seq` handed its message over: a send
    /// returns, a sendrec now waits for the reply.
    fn sent(&mut self, pid: Pid, seq: u64) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let u = p.container.uarea_mut();
        if u.ipc.seq != seq {
            return;
        }
        match &mut u.call {
            CallState::Blocked(KernelCall::Ipc(IpcCall::SendRec { phase, .. }))
                if *phase == Phase::Sending =>
            {
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
    pub(super) fn sender_done(&mut self, pid: Pid, seq: u64, result: Result<(), Errno>) {
        if !self.in_call(pid, seq) {
            return;
        }
        match result {
            Ok(())
                if self.ipc_call(pid).is_some_and(|c| {
                    matches!(c, IpcCall::Send { .. } | IpcCall::SendRec { .. })
                }) =>
            {
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
            self.route(
                pid,
                NocMsg::Ipc(IpcMsg::Done {
                    to: pid,
                    seq,
                    result,
                }),
            );
        }
    }

    /// Answers call `seq` of `pid`, whose message of `kind` was taken. The
    /// caller of a `sendrec` waits for the reply, not for this, and the
    /// reply may come first anyway ([`admits`](Self::admits)): to another
    /// node the answer waits to share the write of what follows it,
    /// usually the reply.
    pub(super) fn answer_taken(&mut self, pid: Pid, seq: u64, kind: CallKind) {
        if kind != CallKind::SendRec || self.procs.contains_key(&pid) {
            return self.answer(pid, seq, Ok(()));
        }
        let done = NocMsg::Ipc(IpcMsg::Done {
            to: pid,
            seq,
            result: Ok(()),
        });
        self.route_lazily(pid, done);
    }

    pub(super) fn receive(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: IpcCall,
        from: Option<Pid>,
        addr: u32,
        status: u32,
    ) -> IpcOutcome {
        let taken = if let Some(source) = me.ipc.take_notification(from) {
            self.ipc.notifications += 1;
            me.ipc.body = None;
            Some((Message::notification(source), CallKind::Notify))
        } else if let Some(mut w) = me.ipc.take_sender(from) {
            me.ipc.body = w.body.take();
            let msg = match w.msg {
                Some(m) => m,
                None => {
                    self.ipc.local += 1;
                    // Never `None`: a sender here leaves the queue when it ends or moves.
                    self.pending_message(w.from)
                        .unwrap_or_else(|| Message::notification(w.from))
                }
            };
            if w.kind == CallKind::SendRec {
                me.ipc.owed.insert(w.from);
            }
            if w.is_async() {
                self.letters_taken(w.from, me.pid, 1, Ok(()));
            } else {
                self.answer_taken(w.from, w.seq, w.kind);
            }
            Some((msg, w.kind))
        } else {
            None
        };
        if let Some((msg, kind)) = taken {
            let more = me.ipc.has_message(from);
            me.memory[addr as usize..addr as usize + MESSAGE_SIZE].copy_from_slice(msg.as_bytes());
            me.memory[status as usize..status as usize + 4]
                .copy_from_slice(&kind.status(me.ipc.body.as_deref(), more).to_le_bytes());
            me.ipc.stats.received += 1;
            return IpcOutcome::Done(Ok(()));
        }
        if matches!(call, IpcCall::ReceiveNb { .. }) {
            return IpcOutcome::Done(Err(Errno::NotReady));
        }
        let Some(q) = from else {
            return IpcOutcome::Block(call);
        };
        self.walk(q, Probe::new(me.pid, me.ipc.seq, false));
        if me.ipc.watching.insert(q) {
            match self.ipc_state(q) {
                Some(qs) => {
                    qs.watchers.insert(me.pid);
                }
                None => self.route(
                    q,
                    NocMsg::Ipc(IpcMsg::Watch {
                        to: q,
                        watcher: me.pid,
                    }),
                ),
            }
        }
        IpcOutcome::Block(call)
    }

    /// Whether `pid` is blocked receiving a message that `from` may send
    /// now. `reply`: the message is the reply to `pid`'s sendrec, which may
    /// come before the news that its request was taken.
    pub(super) fn admits(&self, pid: Pid, from: Pid, reply: bool) -> bool {
        match self.ipc_call(pid) {
            Some(IpcCall::Receive { from: want, .. }) => want.is_none_or(|w| w == from),
            Some(&IpcCall::SendRec { to, phase, .. }) => {
                to == from && (phase == Phase::AwaitingReply || reply)
            }
            _ => false,
        }
    }

    /// Gives `receiver` (blocked receiving here) its message, and its body
    /// if it is a letter with one, and makes it runnable.
    pub(super) fn hand_over(
        &mut self,
        receiver: Pid,
        from: Pid,
        kind: CallKind,
        msg: &Message,
        body: Option<Vec<u8>>,
    ) {
        let Some((addr, status, want)) = (match self.ipc_call(receiver) {
            Some(&IpcCall::Receive { msg, status, from }) => Some((msg, Some(status), from)),
            Some(&IpcCall::SendRec { msg, .. }) => Some((msg, None, None)),
            _ => None,
        }) else {
            return;
        };
        let Some(mut r) = self.procs.get_mut(&receiver) else {
            return;
        };
        if r.container.is_dormant() {
            if !self.live(receiver, &[from]) {
                return;
            }
            r = self.procs.get_mut(&receiver).expect("just woken");
        }
        let more = status.is_some() && r.container.uarea().ipc.has_message(want);
        let mem = r.container.memory_mut();
        mem[addr as usize..addr as usize + MESSAGE_SIZE].copy_from_slice(msg.as_bytes());
        if let Some(status) = status {
            mem[status as usize..status as usize + 4]
                .copy_from_slice(&kind.status(body.as_deref(), more).to_le_bytes());
        }
        let u = r.container.uarea_mut();
        u.ipc.body = body;
        u.ipc.stats.received += 1;
        if kind == CallKind::SendRec {
            u.ipc.owed.insert(from);
        }
        self.finish(receiver, Ok(()));
    }

    pub(super) fn notify(&mut self, me: &mut IpcCaller<'_>, call: IpcCall, to: Pid) -> IpcOutcome {
        if to == me.pid {
            me.ipc.notifications.insert(me.pid);
            return IpcOutcome::Done(Ok(()));
        }
        if self.procs.contains_key(&to) {
            return IpcOutcome::Done(self.post_notification(to, me.pid, me.ipc.domain));
        }
        let (domain, seq) = (me.ipc.domain, me.ipc.seq);
        // The caller below the running process (`handoff.rs`) is of this
        // kernel: the notification is posted at once, as to any process
        // here, and served with its other messages when the slice ends
        // (their answer, for a call over by then, is dropped).
        let below = self
            .below
            .as_ref()
            .filter(|b| b.pid == to)
            .map(|b| b.domain);
        if below.is_some_and(|d| domain.is_none() || domain != d) {
            self.ipc.denied += 1;
            return IpcOutcome::Done(Err(Errno::CallDenied));
        }
        if below.is_none() {
            self.ipc.remote_out += 1;
        }
        self.route(
            to,
            NocMsg::Ipc(IpcMsg::Notify {
                to,
                from: me.pid,
                domain,
                seq,
            }),
        );
        if below.is_some() {
            return IpcOutcome::Done(Ok(()));
        }
        IpcOutcome::Block(call)
    }

    /// A notification from `from` for `to`, which runs here: delivered if
    /// `to` is receiving, otherwise left pending (coalesced).
    pub(super) fn post_notification(
        &mut self,
        to: Pid,
        from: Pid,
        domain: Option<DomainId>,
    ) -> Result<(), Errno> {
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return Err(Errno::CallDenied);
        }
        if matches!(self.ipc_call(to), Some(IpcCall::Receive { from: want, .. }) if want.is_none_or(|w| w == from))
        {
            self.ipc.notifications += 1;
            self.hand_over(
                to,
                from,
                CallKind::Notify,
                &Message::notification(from),
                None,
            );
        } else if let Some(s) = self.ipc_state(to) {
            s.notifications.insert(from);
            self.ipc.notifications += 1;
        }
        Ok(())
    }
}
