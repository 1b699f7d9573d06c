//! Handing the core over: a call that must wait for the one other process
//! its kernel could run runs that process's slice inside the call.
//!
//! On one kernel a `sendrec` round trip stopped both processes: the client
//! unwound its stack once its request was handed over, the server was
//! rewound to take it, replied, and unwound in its next `receive`, and the
//! client was rewound to take the reply. When the server is the only
//! process the kernel could run next, the kernel loses nothing by running
//! it at once, from inside the client's call, as L4 switches directly to
//! the thread a call wakes and LRPC runs the server on the client's
//! thread. The server's slice is an ordinary slice ([`Kernel::run_slice`]);
//! meanwhile the client is *below* it: out of the process table, its call
//! still on the kernel thread's stack, and what comes for it is kept aside
//! (`below_deferred`) exactly as messages from other kernels are kept for
//! a caller that waits in place (`in_place.rs`). When the slice ends the
//! client serves them, and the server's reply ends its call: a round trip
//! then unwinds and rewinds the server only.
//!
//! While the client is below, it is to every other process as one of
//! another kernel: what is sent to it goes as messages, with the semantics
//! IPC has across kernels. Those need a domain, so only a caller in one
//! hands off. Two exceptions keep this kernel's semantics: a notification
//! to it is posted at once (one to a process of the kernel never waits),
//! and a send that its receive is sure to take is over at once, as one to
//! a receiver waiting here is ([`Kernel::claim_below_receive`]).
//!
//! The server's slice cannot hand off in turn (one level: the stack stays
//! shallow), nor wait in place (it would poll for a message only the
//! client below could send). Anything the caller cannot take in its call
//! (a kill, a migration, a child's end) ends the wait: the call then
//! blocks and unwinds as ever, and the loop serves the rest.

use std::time::Duration;

use atoll_abi::{Errno, Pid};
use atoll_ipc::{DomainId, IpcCall};
use atoll_process::IpcCaller;

use crate::kernel::Kernel;

/// A caller whose call runs the running process's slice.
pub(crate) struct Below {
    pub pid: Pid,
    pub domain: Option<DomainId>,
    /// The call it waits in.
    pub call: IpcCall,
    /// A send to it was over at once ([`Kernel::claim_below_receive`]): its
    /// letter, the first of its messages, is what its receive returns.
    pub taken: bool,
}

impl Kernel {
    /// Whether `pid` is the caller below the running process.
    pub(crate) fn is_below(&self, pid: Pid) -> bool {
        self.below.as_ref().is_some_and(|b| b.pid == pid)
    }

    /// Claims the receive of the caller below for a message of `from`, of
    /// `domain`, if it is sure to take it: it receives from `from` (or
    /// anyone), nothing came for it since its receive found its queues
    /// empty, the two share a domain, and no other message claimed it.
    /// Returns whether it did; such a send is over at once, as when it
    /// finds its receiver waiting on this kernel.
    pub(super) fn claim_below_receive(&mut self, from: Pid, domain: Option<DomainId>) -> bool {
        let empty = self.below_deferred.is_empty();
        self.below.as_mut().is_some_and(|b| {
            let takes = !b.taken
                && matches!(b.call, IpcCall::Receive { from: want, .. } if want.is_none_or(|w| w == from))
                && domain.is_some()
                && b.domain == domain
                && empty;
            b.taken |= takes;
            takes
        })
    }

    /// Whether the caller may run the only process its kernel could run
    /// inside its call: it has no other thread, a domain, and the kernel
    /// nothing else to do first.
    pub(super) fn may_hand_off(&self, me: &IpcCaller<'_>) -> bool {
        me.alone
            && me.ipc.domain.is_some()
            && self.below.is_none()
            && self.run_queue.only().is_some()
            && self.early.is_empty()
            && self.deferred.is_empty()
            && !self.has_local_work()
            && !self.timer_due()
    }

    /// Runs a slice of the only process the kernel could run, inside the
    /// caller's `call`, then serves the caller's messages that came
    /// meanwhile; after them `check` says whether the call is over.
    /// Returns its result, or `None` if it must block (or could not hand
    /// off).
    pub(super) fn hand_off(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: &mut IpcCall,
        check: impl Fn(&mut Kernel, &mut IpcCaller<'_>) -> Option<Result<(), Errno>>,
    ) -> Option<Result<(), Errno>> {
        if !self.may_hand_off(me) {
            return None;
        }
        let (next, woken) = self.run_queue.pop().expect("it holds one");
        // Letters the caller took are confirmed as its own, not `next`'s.
        self.confirm_taken(me.pid);
        let caller = self.running.take();
        self.below = Some(Below {
            pid: me.pid,
            domain: me.ipc.domain,
            call: call.clone(),
            taken: false,
        });
        let waited = std::mem::take(&mut self.waited_in_place);
        let cpu = self.run_slice(next, woken);
        // The other's slice is not the caller's CPU time.
        self.waited_in_place = waited + Duration::from_nanos(cpu);
        self.running = caller;
        let taken = self.below.take().is_some_and(|b| b.taken);
        // The slice left `deferred` empty: the caller's messages take its
        // place, and their vector waits for the next hand-off.
        std::mem::swap(&mut self.deferred, &mut self.below_deferred);
        self.ipc.handed_off += 1;
        // A letter taken at once is the first; the receive returns it
        // before what came after it (a notification would otherwise come
        // first), and the rest waits for the caller's next call.
        let rest = if taken && !self.deferred.is_empty() {
            self.deferred.split_off(1)
        } else {
            Vec::new()
        };
        let result = self
            .take_deferred(me, Some(call))
            .or_else(|| check(self, me));
        self.deferred.extend(rest);
        result
    }
}
