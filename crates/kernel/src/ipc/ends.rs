//! What a process leaves behind when it ends, leaves a domain or moves:
//! queued messages, owed replies, watchers (EDEADSRCDST).

use atoll_abi::{Errno, Pid};
use atoll_ipc::{IpcCall, IpcState, Message, WaitingSender, MESSAGE_SIZE};
use atoll_process::{CallState, KernelCall};

use super::IpcMsg;
use crate::kernel::Kernel;
use crate::msg::NocMsg;

impl Kernel {
    /// Takes call `seq` of `from` off `to`'s queue and owed replies; answers
    /// it with `why` if it was still queued. `to` may be anywhere.
    pub(super) fn withdraw(&mut self, to: Pid, from: Pid, seq: u64, why: Errno) {
        let Some(s) = self.ipc_state(to) else {
            return self.route(to, NocMsg::Ipc(IpcMsg::Withdraw { to, from, seq, why }));
        };
        s.owed.remove(&from);
        let Some(i) = s
            .senders
            .iter()
            .position(|w| w.from == from && w.seq == seq && !w.is_async())
        else {
            return;
        };
        s.senders.remove(i);
        if why != Errno::DeadSrcDst {
            self.answer(from, seq, Err(why));
        }
    }

    /// `dead` ended: a call of `pid` blocked on it fails.
    pub(super) fn peer_dead(&mut self, pid: Pid, dead: Pid) {
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
        let senders: Vec<WaitingSender> = ipc.senders.into();
        self.letters_refused(pid, &senders, &ipc.async_in, Errno::DeadSrcDst);
        for w in senders.into_iter().filter(|w| !w.is_async()) {
            self.ipc.dead += 1;
            self.answer(w.from, w.seq, Err(Errno::DeadSrcDst));
        }
        for other in ipc.owed.into_iter().chain(ipc.watchers) {
            match self.procs.contains_key(&other) {
                true => self.peer_dead(other, pid),
                false => self.route(
                    other,
                    NocMsg::Ipc(IpcMsg::PeerDead {
                        to: other,
                        dead: pid,
                    }),
                ),
            }
        }
        for q in ipc.watching {
            match self.ipc_state(q) {
                Some(s) => {
                    s.watchers.remove(&pid);
                }
                None => self.route(
                    q,
                    NocMsg::Ipc(IpcMsg::Unwatch {
                        to: q,
                        watcher: pid,
                    }),
                ),
            }
        }
        if let CallState::Blocked(KernelCall::Ipc(
            c @ (IpcCall::Send { .. } | IpcCall::SendRec { .. }),
        )) = call
        {
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
            .map(|s| {
                s.senders
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.msg.is_none())
                    .map(|(i, w)| (i, w.from))
                    .collect()
            })
            .unwrap_or_default();
        for (i, sender) in waiting {
            let m = self.pending_message(sender);
            if let Some(s) = self.ipc_state(pid) {
                s.senders[i].msg = m;
            }
        }
        // `pid` waiting on a receiver here.
        let Some(c) = self.ipc_call(pid).filter(|c| c.is_sending()).cloned() else {
            return;
        };
        let to = c.blocked_on().expect("a send has a destination");
        let m = self.pending_message(pid);
        if let Some(s) = self.ipc_state(to) {
            if let Some(w) = s
                .senders
                .iter_mut()
                .find(|w| w.from == pid && w.msg.is_none())
            {
                w.msg = m;
            }
        }
    }

    /// The message a sender blocked here is sending, read from its memory.
    pub(super) fn pending_message(&self, sender: Pid) -> Option<Message> {
        let (IpcCall::Send { msg, .. } | IpcCall::SendRec { msg, .. }) = self.ipc_call(sender)?
        else {
            return None;
        };
        let mut bytes = [0; MESSAGE_SIZE];
        let container = &self.procs.get(&sender)?.container;
        container.read_memory(*msg as usize, &mut bytes);
        let mut m = Message::from_bytes(&bytes);
        m.set_source(sender);
        Some(m)
    }
}
