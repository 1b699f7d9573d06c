//! Refusing calls that would close a cycle of blocked processes (ELOCKED).

use atoll_abi::{Errno, Pid};
use serde::{Deserialize, Serialize};

use super::IpcMsg;
use crate::kernel::Kernel;
use crate::msg::NocMsg;

/// A wait-for chain longer than this is not followed further (Minix bounds
/// it by the process table; a real cycle this long is not a practical case).
const MAX_CHAIN: u32 = 4096;

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
    pub(super) fn new(origin: Pid, seq: u64, origin_sending: bool) -> Self {
        Probe {
            origin,
            seq,
            origin_sending,
            length: 2,
            via: origin_sending.then_some(origin),
        }
    }
}

impl Kernel {
    /// Follows the wait-for chain from `at`, here and then (by probe) on
    /// other kernels, back to the origin, which decides on its own kernel
    /// where its state is current. The origin's call, now blocked, then
    /// fails with ELOCKED. Two processes waiting on each other are a cycle
    /// only if both send (one sending, one receiving is a rendezvous about
    /// to happen). A process that is running is not waiting: the walk for
    /// the caller of a call made during its slice resumes after the slice.
    pub(super) fn walk(&mut self, mut at: Pid, mut probe: Probe) {
        loop {
            if probe.length > MAX_CHAIN {
                return;
            }
            // A caller waiting in place is not blocked (yet): the chain
            // ends there, and it walks its own when it blocks.
            if self.lent_to == Some(at) {
                return;
            }
            if !self.procs.contains_key(&at) {
                return self.route(at, NocMsg::Ipc(IpcMsg::Probe { at, probe }));
            }
            if let Some(v) = probe.via {
                if !self.procs[&at]
                    .container
                    .uarea()
                    .ipc
                    .senders
                    .iter()
                    .any(|w| w.from == v && !w.is_async())
                {
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
            let Some(call) = self.ipc_call(at) else {
                return;
            };
            let Some(next) = call.blocked_on() else {
                return;
            };
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
}
