//! Asynchronous sends (Minix's `senda`): the sender never waits.
//!
//! A letter goes where a synchronous message goes (straight into a waiting
//! receiver, or into its queue of senders, on this kernel or through the
//! NoC), but its sender returns at once. Two things replace the waiting:
//!
//! - **Order.** A sender may have many letters on their way, and they may
//!   take different routes when either end moves (a letter held by the
//!   kernel a receiver left reaches it after one sent later through its
//!   home). Letters carry a number per pair ([`AsyncOut::next`]); the
//!   receiver's kernel accepts them in that order and holds those that
//!   come early ([`AsyncIn`]), in the receiver's UArea, so they move with
//!   it.
//! - **Bounds.** A sender may have [`ASYNC_WINDOW`] letters to one receiver
//!   untaken, and [`ASYNC_BODY_WINDOW`] bytes of their bodies (beyond one
//!   letter's); past that `senda` fails with `EAGAIN`. Each letter taken (or
//!   refused) is confirmed to its sender ([`IpcMsg::AsyncTaken`]), and a
//!   sender that was refused for want of room is notified, as if by the
//!   receiver, when there is room again. A letter that cannot be delivered
//!   (the receiver ended, or is of another domain) is reported by the
//!   sender's next `senda` to it: nobody waits for it to fail.
//! - **Checkpoints.** A process restored from a checkpoint keeps its PID
//!   but not the numbering of its pairs ([`IpcState::restored`]): as a
//!   sender it starts again at 0, which its receivers take as a new start;
//!   as a receiver it takes each sender's next letter as where that sender
//!   stands. Letters that were on their way when the checkpoint was taken
//!   are not in it.
//!
//! [`AsyncOut::next`]: atoll_ipc::AsyncOut::next
//! [`IpcState::restored`]: atoll_ipc::IpcState::restored
//! [`AsyncIn`]: atoll_ipc::AsyncIn
//! [`ASYNC_WINDOW`]: atoll_ipc::ASYNC_WINDOW
//! [`ASYNC_BODY_WINDOW`]: atoll_ipc::ASYNC_BODY_WINDOW

use std::collections::BTreeMap;

use atoll_abi::{Errno, Pid};
use atoll_ipc::{body_fits, AsyncIn, BodyAt, CallKind, EarlyLetter, WaitingSender};
use atoll_process::{IpcCaller, IpcOutcome};

use super::{read_message, IpcMsg, Letter};
use crate::kernel::Kernel;
use crate::msg::NocMsg;

impl Kernel {
    /// `senda` of the message at `addr` to `to`, by the running process;
    /// `more`: more letters follow at once; `body`: bytes of its memory
    /// that go with the letter
    /// ([`IpcCall::SendA`](atoll_ipc::IpcCall::SendA)).
    pub(super) fn send_async(
        &mut self,
        me: &mut IpcCaller<'_>,
        to: Pid,
        addr: u32,
        more: bool,
        body: Option<BodyAt>,
    ) -> IpcOutcome {
        let here = self.procs.contains_key(&to);
        if here && self.domain_of(to) != me.ipc.domain {
            // Refused here and now: the letter never leaves.
            self.ipc.denied += 1;
            return IpcOutcome::Done(Err(Errno::CallDenied));
        }
        let body_len = body.as_ref().map_or(0, |b| b.len());
        let out = me.ipc.async_out.entry(to).or_default();
        if let Some(e) = out.error.take() {
            return IpcOutcome::Done(Err(e));
        }
        if !out.has_room(body_len) {
            out.want = true;
            return IpcOutcome::Done(Err(Errno::Again));
        }
        let seq = out.next;
        out.next += 1;
        out.sent(body_len);
        let mut msg = read_message(me.memory, addr);
        msg.set_source(me.pid);
        let body = body.map(|b| me.memory[b.start as usize..b.end as usize].to_vec());
        me.ipc.stats.sent += 1;
        let mut letter = Letter {
            from: me.pid,
            domain: me.ipc.domain,
            kind: CallKind::SendA,
            seq,
            reply: false,
            msg,
            confirms: 0,
        };
        if here {
            self.ipc.local += 1;
            self.letter_arrived(to, letter, body);
        } else {
            letter.confirms = self.unconfirmed_from(to);
            self.post(to, letter, body, more);
        }
        IpcOutcome::Done(Ok(()))
    }

    /// A letter (with its `body`, if any) for `to`, which runs here:
    /// accepted if it is the next one of its sender (with those held
    /// behind it), else held until it is.
    pub(super) fn letter_arrived(&mut self, to: Pid, letter: Letter, body: Option<Vec<u8>>) {
        if letter.confirms > 0 {
            self.letters_confirmed(to, letter.from, letter.confirms, Ok(()));
        }
        let Some(s) = self.ipc_state(to) else {
            return;
        };
        let (from, seq) = (letter.from, letter.seq);
        let resync = s.async_resync;
        let early = s.async_in.entry(from).or_insert_with(|| AsyncIn {
            next: if resync { seq } else { 0 },
            early: Vec::new(),
        });
        if seq == 0 && early.next > 0 {
            // The sender was restored from a checkpoint: its numbering
            // starts again, and what it held early will never be filled.
            *early = AsyncIn::default();
        }
        if seq != early.next {
            let held = EarlyLetter {
                seq,
                msg: letter.msg,
                body,
            };
            if seq < early.next || !early.hold(held) {
                tracing::warn!(kernel = %self.id, %to, %from, seq, "a letter came twice");
            }
            return;
        }
        early.next += 1;
        let (mut letter, mut body) = (letter, body);
        loop {
            self.accept_letter(to, letter, body);
            let held = self
                .ipc_state(to)
                .and_then(|s| s.async_in.get_mut(&from))
                .and_then(AsyncIn::take_next);
            let Some(next) = held else { return };
            letter = Letter {
                seq: next.seq,
                msg: next.msg,
                ..letter
            };
            body = next.body;
        }
    }

    /// A letter whose turn it is: handed to `to` if it waits for it, else
    /// queued behind its senders. A letter across domains is refused, and
    /// so is one whose body no sender's kernel would have sent (it came
    /// from another node).
    fn accept_letter(&mut self, to: Pid, letter: Letter, body: Option<Vec<u8>>) {
        let Letter {
            from,
            domain,
            seq,
            msg,
            ..
        } = letter;
        if domain.is_none() || self.domain_of(to) != domain {
            self.ipc.denied += 1;
            return self.letters_taken(from, to, 1, Err(Errno::CallDenied));
        }
        if let Err(e) = body_fits(body.as_ref().map_or(0, Vec::len)) {
            tracing::warn!(kernel = %self.id, %to, %from, "a letter's body is too large: refused");
            self.ipc.denied += 1;
            return self.letters_taken(from, to, 1, Err(e));
        }
        if self.admits(to, from, false) {
            self.hand_over(to, from, CallKind::SendA, &msg, body);
            return self.letters_taken(from, to, 1, Ok(()));
        }
        if let Some(s) = self.ipc_state(to) {
            s.senders.push_back(WaitingSender {
                from,
                kind: CallKind::SendA,
                seq,
                msg: Some(msg),
                body,
            });
        }
    }

    /// Tells `sender`, here or wherever it runs, that `receiver` took
    /// `count` of its letters (or that it could not). Letters the running
    /// process takes from another kernel's are confirmed at the latest when
    /// its slice ends or it waits, and with its next letter to their sender
    /// if that comes first ([`confirm_taken`](Self::confirm_taken)).
    pub(super) fn letters_taken(
        &mut self,
        sender: Pid,
        receiver: Pid,
        count: u32,
        result: Result<(), Errno>,
    ) {
        if self.procs.contains_key(&sender) {
            self.letters_confirmed(sender, receiver, count, result);
        } else if result.is_ok() && self.running == Some(receiver) {
            match self.unconfirmed.iter_mut().find(|(s, _)| *s == sender) {
                Some((_, n)) => *n += count,
                None => self.unconfirmed.push((sender, count)),
            }
        } else {
            self.send_taken(sender, receiver, count, result);
        }
    }

    /// Tells `sender`, wherever it runs, that `receiver` took `count` of
    /// its letters (or could not). The sender waits on it only when its
    /// window is full: it may share the write of what follows.
    fn send_taken(&mut self, sender: Pid, receiver: Pid, count: u32, result: Result<(), Errno>) {
        self.route_lazily(
            sender,
            NocMsg::Ipc(IpcMsg::AsyncTaken {
                to: sender,
                from: receiver,
                count,
                result,
            }),
        );
    }

    /// The letters of `sender` the running process took and has not
    /// confirmed: its letter to `sender` carries the confirmation.
    fn unconfirmed_from(&mut self, sender: Pid) -> u32 {
        match self.unconfirmed.iter().position(|(s, _)| *s == sender) {
            Some(i) => self.unconfirmed.swap_remove(i).1,
            None => 0,
        }
    }

    /// Confirms to their senders the letters `receiver` (the running
    /// process) took and has not confirmed: when its slice ends, and before
    /// it waits, since a sender may wait for room in its window. One
    /// message per sender, however many letters.
    pub(crate) fn confirm_taken(&mut self, receiver: Pid) {
        for (sender, count) in std::mem::take(&mut self.unconfirmed) {
            self.send_taken(sender, receiver, count, Ok(()));
        }
    }

    /// `receiver` took `count` letters of `sender` (which runs here), or
    /// could not: as many more may be sent, and a sender that was refused
    /// for want of room hears of it.
    pub(super) fn letters_confirmed(
        &mut self,
        sender: Pid,
        receiver: Pid,
        count: u32,
        result: Result<(), Errno>,
    ) {
        let Some(s) = self.ipc_state(sender) else {
            return;
        };
        let domain = s.domain;
        let Some(out) = s.async_out.get_mut(&receiver) else {
            return;
        };
        out.taken(count);
        if let Err(e) = result {
            out.error.get_or_insert(e);
        }
        if std::mem::take(&mut out.want) {
            // As if from the receiver, which may have ended: the sender
            // learns why from its next senda.
            let _ = self.post_notification(sender, receiver, domain);
        }
    }

    /// The letters a receiver leaves untaken when it ends or leaves its
    /// domain (those queued in `senders`, which it gives up, and those held
    /// early in `async_in`): each sender is told, with `why`.
    pub(crate) fn letters_refused(
        &mut self,
        receiver: Pid,
        senders: &[WaitingSender],
        held: &BTreeMap<Pid, AsyncIn>,
        why: Errno,
    ) {
        let mut untaken: BTreeMap<Pid, u32> = BTreeMap::new();
        for w in senders.iter().filter(|w| w.is_async()) {
            *untaken.entry(w.from).or_default() += 1;
        }
        for (&sender, early) in held {
            *untaken.entry(sender).or_default() += early.early.len() as u32;
        }
        for (sender, count) in untaken.into_iter().filter(|&(_, n)| n > 0) {
            self.letters_taken(sender, receiver, count, Err(why));
        }
    }
}
