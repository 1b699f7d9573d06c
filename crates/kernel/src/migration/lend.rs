//! The source's side of a post-copy (`atoll_process::postcopy`): once the
//! destination has committed a process that went without its memory, this
//! kernel keeps the memory. When the destination asks for it (the process
//! runs on, faults, or is to be captured) it sends it, a window of pieces
//! ahead on the bulk lane, each acknowledged before the next goes; a block
//! the process waits for goes at once, ahead of them. The memory is let go
//! once every block is sent, or when the destination has enough (the
//! process ended), or its node is lost.

use std::ops::Range;

use atoll_abi::{KernelId, Pid};
use atoll_process::postcopy::{encode_blocks, Ask};
use atoll_process::BLOCK;

use crate::kernel::{Kernel, Process};
use crate::msg::{MigrationMsg, NocMsg, Packet};

/// Blocks in one piece: small enough that a block sent at once is not
/// long behind the pieces before it.
const PIECE: usize = (64 << 10) / BLOCK;
/// Most pieces in flight: enough to keep the link busy while each is
/// acknowledged. The stream starts with one and doubles the window with
/// each acknowledgement, as TCP's slow start does: a process that ends
/// early costs its source one piece, not a window of them, which on two
/// cores slowed such a fork by 1.9x (`placebench fork`, window 1 against
/// 4).
const WINDOW: usize = 8;
/// Most lends let go and not dropped yet; past it, the oldest is dropped
/// at once, so that a kernel that never runs out of work holds few.
const RETIRED: usize = 2;

/// A memory being sent after its process.
pub(crate) struct Lend {
    to: KernelId,
    /// The process as it left, which holds the memory.
    process: Process,
    /// One per block: not sent yet.
    unsent: Vec<bool>,
    left: usize,
    /// Where the stream goes on.
    next: usize,
    /// Pieces sent and not yet acknowledged, and how many may be (none
    /// until the destination asks for the stream).
    in_flight: usize,
    window: usize,
}

impl Kernel {
    /// Whether this kernel lends a memory to another node, or is about to
    /// (a departure whose memory follows it).
    ///
    /// A kernel serves what it lends itself, between its processes'
    /// slices, and a kernel whose process waits in a fault on a block
    /// serves nothing until the block comes. So no kernel may lend and
    /// await at once, or two that do could each wait for the other (seen:
    /// two nodes of one kernel each, ranks of IS moved between them by
    /// post-copy): a post-copy is refused by a kernel that lends, and by
    /// one that awaits ([`awaits_memory`](Self::awaits_memory)).
    /// Process `but`'s own memory does not count: it comes back whole.
    pub(crate) fn lends_memory(&self, but: Pid) -> bool {
        self.lends.keys().any(|&p| p != but)
            || self
                .departures
                .iter()
                .any(|(&p, d)| p != but && d.memory_follows())
    }

    /// Whether a process on this kernel, or on its way in, waits for
    /// memory from another node ([`lends_memory`](Self::lends_memory)).
    pub(crate) fn awaits_memory(&self) -> bool {
        self.procs
            .values()
            .any(|p| p.container.late_from().is_some())
            || self.arrivals.values().any(|a| a.awaits_memory())
            || self.incoming.values().any(|i| i.awaits_memory())
    }

    /// Keeps `process`'s memory, whose blocks `coming` are for kernel `to`,
    /// where it now runs, until they are asked for.
    pub(crate) fn lend(&mut self, pid: Pid, to: KernelId, process: Process, coming: &[Range<u32>]) {
        let blocks = process.container.memory().len().div_ceil(BLOCK);
        let mut unsent = vec![false; blocks];
        for r in coming {
            unsent[r.start as usize..(r.end as usize).min(blocks)].fill(true);
        }
        let left = unsent.iter().filter(|u| **u).count();
        self.lends.insert(
            pid,
            Lend {
                to,
                process,
                unsent,
                left,
                next: 0,
                in_flight: 0,
                window: 0,
            },
        );
    }

    /// What the destination of a post-copy asks for.
    pub(crate) fn on_ask(&mut self, pid: Pid, ask: Ask) {
        match ask {
            Ask::Block(b) => {
                self.send_now(pid, b as usize);
                self.start_stream(pid);
            }
            Ask::Stream => self.start_stream(pid),
            Ask::More => {
                if let Some(lend) = self.lends.get_mut(&pid) {
                    lend.in_flight = lend.in_flight.saturating_sub(1);
                    lend.window = (lend.window * 2).min(WINDOW);
                }
                self.send_pieces(pid);
            }
            Ask::Enough => self.let_go(pid),
        }
    }

    fn start_stream(&mut self, pid: Pid) {
        if let Some(lend) = self.lends.get_mut(&pid).filter(|l| l.window == 0) {
            lend.window = 1;
            self.send_pieces(pid);
        }
    }

    /// The next pieces of the stream, up to the window; the memory goes
    /// once all is sent.
    fn send_pieces(&mut self, pid: Pid) {
        while let Some(lend) = self.lends.get_mut(&pid) {
            if lend.in_flight >= lend.window {
                return;
            }
            let from = lend.next;
            let blocks = take_unsent(lend, from, usize::MAX);
            lend.next = blocks.last().map_or(lend.unsent.len(), |b| *b as usize + 1);
            lend.in_flight += 1;
            self.send_blocks(pid, blocks, true);
        }
    }

    /// Block `b`, which the process waits for, and the unsent ones after
    /// it up to a piece, ahead of the stream.
    fn send_now(&mut self, pid: Pid, b: usize) {
        let Some(lend) = self.lends.get_mut(&pid) else {
            return;
        };
        let blocks = take_unsent(lend, b, b + PIECE);
        self.send_blocks(pid, blocks, false);
    }

    fn send_blocks(&mut self, pid: Pid, blocks: Vec<u32>, streamed: bool) {
        let Some(lend) = self.lends.get(&pid) else {
            return;
        };
        let to = lend.to;
        if !blocks.is_empty() {
            let bytes = encode_blocks(lend.process.container.memory(), blocks);
            let msg = NocMsg::Migration(MigrationMsg::Fill { pid, streamed });
            self.transmit(
                to,
                Packet {
                    bulk: Some(bytes),
                    ..Packet::new(msg)
                },
            );
        }
        if self.lends.get(&pid).is_some_and(|l| l.left == 0) {
            self.let_go(pid);
        }
    }

    /// The destination has all it needs of `pid`'s memory. Its instance
    /// serves the next fork if it can ([`atoll_process::Spares`]): a
    /// forked child's, whose parent forks again once it hears of the
    /// child's end, which comes right behind this news. Dropping one that
    /// cannot resets its memory, 38-46 us for a forked child holding
    /// 1 MiB: dropped at once, or as soon as this kernel found nothing to
    /// run, it made the parent's `wait` wait for it. So it is kept until
    /// this kernel has run a slice since and has nothing to run, or is
    /// about to sleep ([`drop_retired_lend`](Self::drop_retired_lend)), or
    /// more are let go.
    fn let_go(&mut self, pid: Pid) {
        let Some(lend) = self.lends.remove(&pid) else {
            return;
        };
        if let Some(container) = self.spares.keep(lend.process.container) {
            if self.retired_lends.len() == RETIRED {
                self.retired_lends.remove(0);
            }
            self.retired_lends.push((self.slices, container));
        }
    }

    /// Drops the oldest lend let go, if a slice ran since or this kernel
    /// is about to `sleep`; whether it did.
    pub(crate) fn drop_retired_lend(&mut self, sleep: bool) -> bool {
        let due = self
            .retired_lends
            .first()
            .is_some_and(|(slices, _)| sleep || *slices != self.slices);
        if due {
            self.retired_lends.remove(0);
        }
        due
    }

    /// Node `node` is lost: what was being sent there is let go.
    pub(crate) fn lends_to_lost_node(&mut self, node: u16) {
        self.lends.retain(|_, l| l.to.node != node);
    }
}

/// Up to a piece of unsent blocks of `lend` from `from`, before `until`,
/// marked sent.
fn take_unsent(lend: &mut Lend, from: usize, until: usize) -> Vec<u32> {
    let until = until.min(lend.unsent.len());
    let mut blocks = Vec::new();
    let mut b = from;
    while b < until && blocks.len() < PIECE {
        if lend.unsent[b] {
            lend.unsent[b] = false;
            lend.left -= 1;
            blocks.push(b as u32);
        }
        b += 1;
    }
    blocks
}
