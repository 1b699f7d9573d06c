//! Waiting in place: an IPC call that waits for another kernel waits inside
//! the call for a while, when nothing else needs this kernel.
//!
//! A process that blocks unwinds its stack (Asyncify) and is rewound when
//! its answer comes: about 0.2 us each way, a good part of what a message
//! between two kernels costs. An idle kernel polls its doorbell before it
//! sleeps anyway (`spin_before_sleep`); if the only process it could run is
//! the one about to block, it can as well poll inside that process's call
//! and give it its answer without the unwind and the rewind (as an MPI
//! library polls shared memory, but through the NoC).
//!
//! Four calls wait so: a `receive` (for a message), a `send` or `notify`
//! to a process of another kernel (for its answer), a `sendrec` to one (for
//! the answer, then the reply), and a copy from or to one (for the bytes,
//! or the answer). Only while the kernel has nothing else to do: no other
//! process runnable, no timer due, a core to itself
//! ([`Doorbell::room_to_poll`](atoll_noc::Doorbell::room_to_poll)), and no
//! other thread in the caller.
//!
//! Meanwhile the kernel takes in what the NoC brings as its loop would
//! ([`Kernel::take_in_noc`]), and [`Kernel::forward`] keeps the caller's
//! own messages aside (`deferred`), in order. Those are served from the
//! front, with the caller's IPC state lent back to the kernel for the
//! moment (`lent_ipc`), as far as they are what the call waits for or
//! need no more of the caller than its queues and its grants (letters,
//! notifications, its letters taken, a copy out of its memory for another
//! process: an MPI rendezvous). Anything else for the caller, or any
//! message the loop must see first (the kernels' own traffic, the node's
//! requests), ends the wait: the call then blocks as ever, and the loop
//! serves the rest in the order it came. The wait lasts at most the
//! kernel's spin time, and is idle time, not the caller's CPU time.
//!
//! The same serving runs when the doorbell rings while the process runs
//! outside any call ([`Kernel::take_in_while_running`]): what only joins its
//! queues does not stop it.

use atoll_abi::{Errno, Pid};
use atoll_ipc::{CallKind, DomainId, IpcCall, Phase, MESSAGE_SIZE};
use atoll_process::{IpcCaller, IpcOutcome, Loan};

use super::IpcMsg;
use crate::kernel::Kernel;
use crate::msg::NocMsg;

/// What the caller does with a message for it, met while it waits.
enum Take {
    /// Served as the loop would serve it: it only adds to its queues.
    Serve,
    /// An answer to an earlier call, which the loop would drop too.
    Drop,
    /// It ends the call with this result.
    Answer(Result<(), Errno>),
    /// Its `sendrec`'s request was taken: the reply is next.
    Sent,
    /// The reply its `sendrec` waits for.
    Reply,
    /// A copy out of its memory, for another process's call.
    CopyOut,
    /// The bytes of its own copy, for its memory: the end of the call.
    CopyIn,
    /// The loop must serve it: the wait ends.
    Stop,
}

impl Kernel {
    /// The doorbell rang while the caller runs: takes in what came and
    /// serves the caller's messages that need no call of it, so that it
    /// need not stop ([`KernelLink::take_in`](atoll_process::KernelLink::take_in)).
    /// Returns whether the loop has work (the caller must yield).
    pub(super) fn take_in_while_running(&mut self, me: &mut IpcCaller<'_>) -> bool {
        self.take_in_noc();
        self.take_in_local();
        if !self.deferred.is_empty() {
            self.take_deferred(me, None);
        }
        !self.early.is_empty() || !self.deferred.is_empty() || self.has_local_work()
    }

    /// Before a receive: serves what came for the caller since its last
    /// call and only joins its queues (a call that waited in place ends at
    /// the message it waited for, and leaves those that came with it), so
    /// that the receive finds them rather than block until the loop serves
    /// them at the slice's end.
    pub(super) fn take_deferred_before_receive(&mut self, me: &mut IpcCaller<'_>) {
        if !self.deferred.is_empty() {
            self.take_deferred(me, None);
        }
    }

    /// A blocking `receive` (`call`) that first waits in place while it
    /// may, or runs the one other process of its kernel inside the call
    /// (`handoff.rs`).
    pub(super) fn receive_waiting(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: IpcCall,
        from: Option<Pid>,
        msg: u32,
        status: u32,
    ) -> IpcOutcome {
        self.take_deferred_before_receive(me);
        let in_place = self.may_wait_in_place(me);
        // A client just answered will call again: its call, finding this
        // process in the table, hands the request over and the core with
        // it, where this receive handing it the core would make its request
        // travel as if between kernels.
        let hand_off = self.may_hand_off(me) && self.run_queue.only() != self.replied_to;
        if !in_place && !hand_off {
            return self.receive(me, call, from, msg, status);
        }
        let now = || IpcCall::ReceiveNb { from, msg, status };
        let check = |k: &mut Kernel, me: &mut IpcCaller<'_>| match k.receive(
            me,
            now(),
            from,
            msg,
            status,
        ) {
            IpcOutcome::Done(Err(Errno::NotReady)) => None,
            IpcOutcome::Done(result) => Some(result),
            IpcOutcome::Block(_) => unreachable!("a receivenb never blocks"),
        };
        if let Some(result) = check(self, me) {
            return IpcOutcome::Done(result);
        }
        let mut waiting = IpcCall::Receive { from, msg, status };
        let outcome = if in_place {
            self.wait_in_place(me, &mut waiting, check)
        } else {
            self.hand_off(me, &mut waiting, check)
        };
        match outcome {
            Some(result) => IpcOutcome::Done(result),
            // Blocks now, recorded as waiting (and watching its sender).
            None => self.receive(me, call, from, msg, status),
        }
    }

    /// A `send`, `notify`, `sendrec` or copy that must wait for a process
    /// of another kernel waits in place for its answer while it may; one
    /// that waits for a process of this kernel may hand it the core
    /// (`handoff.rs`).
    pub(super) fn answer_waiting(
        &mut self,
        me: &mut IpcCaller<'_>,
        outcome: IpcOutcome,
    ) -> IpcOutcome {
        let IpcOutcome::Block(mut call) = outcome else {
            return outcome;
        };
        let peer = match call {
            IpcCall::Send { to, .. } | IpcCall::SendRec { to, .. } | IpcCall::Notify { to } => to,
            IpcCall::Copy(req) if req.src.pid == me.pid => req.dst.pid,
            IpcCall::Copy(req) => req.src.pid,
            _ => return IpcOutcome::Block(call),
        };
        // One of this kernel cannot answer while the caller holds it. A
        // `sendrec` whose request it has taken may hand it the core, and so
        // may a send whose message waits in its queue as a copy: what is
        // left of the call needs nothing of the caller's memory.
        if self.procs.contains_key(&peer) {
            let taken = matches!(
                call,
                IpcCall::SendRec {
                    phase: Phase::AwaitingReply,
                    ..
                }
            ) || self.ipc_state(peer).is_some_and(|s| {
                s.senders
                    .iter()
                    .any(|w| w.from == me.pid && w.seq == me.ipc.seq && w.msg.is_some())
            });
            return match taken.then(|| self.hand_off(me, &mut call, |_, _| None)) {
                Some(Some(result)) => IpcOutcome::Done(result),
                _ => IpcOutcome::Block(call),
            };
        }
        if !self.may_wait_in_place(me) {
            return IpcOutcome::Block(call);
        }
        match self.wait_in_place(me, &mut call, |_, _| None) {
            Some(result) => IpcOutcome::Done(result),
            None => IpcOutcome::Block(call),
        }
    }

    /// Polls the NoC for `call` while the kernel may wait in place, serving
    /// the caller's messages as they come; after each, `check` says whether
    /// the call is over. Returns its result, or `None` if it must block.
    fn wait_in_place(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: &mut IpcCall,
        check: impl Fn(&mut Kernel, &mut IpcCaller<'_>) -> Option<Result<(), Errno>>,
    ) -> Option<Result<(), Errno>> {
        if !self.may_wait_in_place(me) {
            return None;
        }
        // A sender of letters it took may wait for room meanwhile.
        self.confirm_taken(me.pid);
        self.flush_lazy();
        let start = quanta::Instant::now();
        let deadline = start + self.spin;
        let mut result = None;
        self.polling_remote(true);
        while result.is_none() && self.may_wait_in_place(me) {
            if self.take_in_noc() {
                self.take_in_local();
                result = self
                    .take_deferred(me, Some(call))
                    .or_else(|| check(self, me));
            } else if quanta::Instant::now() >= deadline {
                break;
            } else {
                std::hint::spin_loop();
            }
        }
        self.polling_remote(false);
        self.waited_in_place += start.elapsed();
        if result.is_some() {
            self.ipc.in_place += 1;
        }
        result
    }

    /// Whether the kernel has nothing to do but wait for the caller's
    /// answer: a caller with no other thread, nothing runnable, no timer
    /// due, nothing taken in that the loop must serve first (messages, the
    /// node's requests, modules loaded), and a core to itself.
    fn may_wait_in_place(&self, me: &IpcCaller<'_>) -> bool {
        me.alone
            && !self.spin.is_zero()
            && self.below.is_none()
            && self.run_queue.len() == 0
            && self.early.is_empty()
            && self.deferred.is_empty()
            && !self.has_local_work()
            && !self.timer_due()
            && self.room_to_poll()
    }

    /// Serves the caller's deferred messages from the front while they are
    /// its to take during `call` ([`Take`]); returns the call's result if
    /// one of them ends it.
    pub(super) fn take_deferred(
        &mut self,
        me: &mut IpcCaller<'_>,
        mut call: Option<&mut IpcCall>,
    ) -> Option<Result<(), Errno>> {
        if self.deferred.is_empty() {
            return None;
        }
        let (seq, domain) = (me.ipc.seq, me.ipc.domain);
        std::mem::swap(me.ipc, &mut self.lent_ipc);
        self.lent_to = Some(me.pid);
        let mut result = None;
        while result.is_none() {
            let Some(packet) = self.deferred.first() else {
                break;
            };
            let take = match &packet.msg {
                NocMsg::Ipc(m) => what_to_take(m, call.as_deref(), me.pid, seq, domain),
                _ => Take::Stop,
            };
            if matches!(take, Take::Stop) {
                break;
            }
            let packet = self.deferred.remove(0);
            let NocMsg::Ipc(m) = packet.msg else {
                unreachable!("checked above")
            };
            let state = &mut self.lent_ipc;
            match take {
                Take::Serve => self.on_ipc(m, packet.bulk, packet.lent),
                Take::Drop | Take::Stop => {}
                Take::Answer(r) => {
                    if r.is_ok() && matches!(call.as_deref(), Some(IpcCall::Send { .. })) {
                        state.stats.sent += 1;
                    }
                    result = Some(r);
                }
                Take::Sent => {
                    if let Some(IpcCall::SendRec { phase, .. }) = call.as_deref_mut() {
                        state.stats.sent += 1;
                        *phase = Phase::AwaitingReply;
                    }
                }
                Take::Reply => {
                    let (IpcMsg::Deliver { letter, .. }, Some(IpcCall::SendRec { msg, .. })) =
                        (m, call.as_deref())
                    else {
                        unreachable!("what_to_take matched them")
                    };
                    let at = *msg as usize;
                    me.memory[at..at + MESSAGE_SIZE].copy_from_slice(letter.msg.as_bytes());
                    state.stats.received += 1;
                    if letter.kind == CallKind::SendRec {
                        // A reply that is also a request: answered as taken.
                        state.owed.insert(letter.from);
                        self.answer_taken(letter.from, letter.seq, CallKind::SendRec);
                    }
                    result = Some(Ok(()));
                }
                Take::CopyOut => {
                    let IpcMsg::CopyRead { copy, .. } = m else {
                        unreachable!("what_to_take matched it")
                    };
                    self.copy_read_caller(copy, me.memory);
                }
                Take::CopyIn => {
                    let IpcMsg::CopyWrite { copy, .. } = m else {
                        unreachable!("what_to_take matched it")
                    };
                    let bytes = packet
                        .lent
                        .as_ref()
                        .map_or_else(|| packet.bulk.as_deref().unwrap_or_default(), Loan::bytes);
                    result = Some(self.copy_write_caller(&copy, bytes, me.memory));
                }
            }
        }
        self.lent_to = None;
        std::mem::swap(me.ipc, &mut self.lent_ipc);
        result
    }
}

/// What caller `me`, of `domain`, waiting in `call` (its number `seq`;
/// `None`: running, in no call), does with `m`.
fn what_to_take(
    m: &IpcMsg,
    call: Option<&IpcCall>,
    me: Pid,
    seq: u64,
    domain: Option<DomainId>,
) -> Take {
    match (m, call) {
        // Running, it waits for no answer: the loop would drop it too.
        (IpcMsg::Done { .. }, None) => Take::Drop,
        (IpcMsg::Done { seq: s, .. }, _) if *s != seq => Take::Drop,
        (IpcMsg::Done { result: Err(e), .. }, _) => Take::Answer(Err(*e)),
        (IpcMsg::Done { .. }, Some(IpcCall::Send { .. } | IpcCall::Notify { .. })) => {
            Take::Answer(Ok(()))
        }
        (IpcMsg::Done { .. }, Some(IpcCall::SendRec { .. })) => Take::Sent,
        // A copy into another process's memory: its kernel wrote it.
        (IpcMsg::Done { .. }, Some(IpcCall::Copy(_))) => Take::Answer(Ok(())),
        // The reply rule: the client can only be waiting for it. One from
        // another domain is the loop's to refuse (`deliver_remote`).
        (IpcMsg::Deliver { letter, .. }, Some(IpcCall::SendRec { to, .. }))
            if letter.reply
                && letter.from == *to
                && domain.is_some()
                && letter.domain == domain =>
        {
            Take::Reply
        }
        // A `sendnb` must find its receiver blocked, and a reply for a
        // process not in `sendrec` is the loop's to refuse.
        (IpcMsg::Deliver { letter, .. }, _) if !letter.reply && letter.kind != CallKind::SendNb => {
            Take::Serve
        }
        (IpcMsg::Notify { .. } | IpcMsg::AsyncTaken { .. }, _) => Take::Serve,
        // Reading its memory, checked against its grants, needs no more
        // of it than a letter does.
        (IpcMsg::CopyRead { copy, .. }, _) if copy.req.src.pid == me => Take::CopyOut,
        (IpcMsg::CopyWrite { copy, .. }, Some(IpcCall::Copy(_)))
            if copy.requester == me && copy.seq == seq && copy.req.dst.pid == me =>
        {
            Take::CopyIn
        }
        _ => Take::Stop,
    }
}
