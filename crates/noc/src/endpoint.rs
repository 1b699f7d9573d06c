//! One kernel's end of the NoC.

use std::collections::VecDeque;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use atoll_abi::KernelId;
use rtrb::{Consumer, Producer, RingBuffer};

use crate::Doorbell;

/// What a kernel receives: the sender, the control message, and the bulk
/// bytes that came with it through the portal, if any.
#[derive(Debug)]
pub struct Incoming<M> {
    pub from: KernelId,
    pub msg: M,
    pub bulk: Option<Vec<u8>>,
}

/// A send that cannot be routed. The message is handed back.
#[derive(Debug, thiserror::Error)]
pub enum SendError<M> {
    #[error("kernel {to} does not exist")]
    UnknownKernel { to: KernelId, msg: M },
    /// The kernel's node is a member, but its link is down.
    #[error("node {} of kernel {to} cannot be reached: {why}", to.node)]
    Unreachable { to: KernelId, msg: M, why: String },
}

/// Where an endpoint sends what is meant for kernels of other nodes: the
/// links between nodes ([`crate::net::Links`]). Messages to one kernel
/// arrive in the order they were sent, within each lane (control messages,
/// and messages with bulk bytes).
pub trait Uplink<M>: Send + Sync {
    /// Sends `msg` (and `bulk`) from local kernel `from` to remote kernel `to`.
    ///
    /// # Errors
    /// `UnknownKernel` for a node or kernel index the cluster does not
    /// have, `Unreachable` when its node's link is down.
    fn send(
        &self,
        from: KernelId,
        to: KernelId,
        msg: M,
        bulk: Option<Vec<u8>>,
    ) -> Result<(), SendError<M>>;

    /// As [`send`](Self::send), for a message that can wait: it goes out
    /// with the next message to the same node, or at the next
    /// [`flush`](Self::flush), in one write.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    fn send_lazy(&self, from: KernelId, to: KernelId, msg: M) -> Result<(), SendError<M>>;

    /// Writes what [`send_lazy`](Self::send_lazy) left waiting.
    fn flush(&self);

    /// A kernel of this node starts (`true`) or stops polling the links
    /// ([`poll`](Self::poll)): while any does, the links' thread leaves
    /// the connections that talk to the pollers, and is not woken by what
    /// arrives on them.
    fn polling(&self, on: bool);

    /// No kernel of this node polls now, and one is going to sleep or
    /// every one is running a process: the connections the kernels
    /// polled go back to the links' thread, which wakes for what comes
    /// on them. (Stopping to poll leaves them to the kernels, which
    /// usually poll again within microseconds.)
    fn settle(&self);

    /// As [`send`](Self::send) with bulk bytes whose order against other
    /// bulk bytes between the same kernels does not matter: at most
    /// [`SMALL_BULK`] of them travel with the small messages, ahead of
    /// the large transfers (and are read by polling kernels); more go as
    /// `send` sends them.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    fn send_unordered(
        &self,
        from: KernelId,
        to: KernelId,
        msg: M,
        bulk: Vec<u8>,
    ) -> Result<(), SendError<M>>;

    /// Whether kernel `to` of another node exists and its node is linked.
    fn reaches(&self, to: KernelId) -> bool;

    /// The other nodes linked now: (node id, kernel count).
    fn linked(&self) -> Vec<(u16, u16)>;

    /// Whether the links' thread has work: it is awake, or frames wait
    /// in a bulk lane's queue, or a connection holds bytes its socket did
    /// not take. It then needs a core, which a kernel polling on in case
    /// an answer comes may be taking.
    fn busy(&self) -> bool;

    /// Reads, on the calling thread, what has arrived from the other
    /// nodes and delivers it as the links would: a kernel with nothing to
    /// do polls this, so that an answer reaches it without two threads'
    /// wake-ups on the way.
    fn poll(&self);
}

/// The most bulk bytes that [`Uplink::send_unordered`] sends with the
/// small messages: a 64 KiB frame holds the control connection for tens
/// of microseconds at most.
pub const SMALL_BULK: usize = 64 << 10;

/// A kernel's lanes to the other nodes: the uplink for what it sends, and
/// the channel on which the links deliver what comes for it (the sender
/// rings the doorbell).
pub struct Remote<M> {
    pub uplink: Arc<dyn Uplink<M>>,
    pub inbound: Receiver<Incoming<M>>,
}

/// A mailbox entry; `bulk` says the next portal item from the same sender
/// belongs to this message.
struct Envelope<M> {
    msg: M,
    bulk: bool,
}

/// Builder of a node's NoC.
pub struct Noc;

impl Noc {
    /// Builds the rings between `kernels` kernels of node `node` and returns
    /// one [`Endpoint`] per kernel, in index order. `capacity` is the number
    /// of messages a ring holds before the sender backlogs.
    pub fn build<M>(node: u16, kernels: u16, capacity: usize) -> Vec<Endpoint<M>> {
        Noc::build_with_doorbells(
            node,
            capacity,
            (0..kernels).map(|_| Doorbell::default()).collect(),
        )
    }

    /// As [`build`](Self::build), with doorbells the caller keeps handles to
    /// (the node rings them when it posts control requests).
    pub fn build_with_doorbells<M>(
        node: u16,
        capacity: usize,
        doorbells: Arc<[Doorbell]>,
    ) -> Vec<Endpoint<M>> {
        let remotes = (0..doorbells.len()).map(|_| None).collect();
        Noc::build_with_remotes(node, capacity, doorbells, remotes)
    }

    /// As [`build_with_doorbells`](Self::build_with_doorbells), for a node
    /// of a cluster: kernel `i` reaches the other nodes through `remotes[i]`.
    pub fn build_with_remotes<M>(
        node: u16,
        capacity: usize,
        doorbells: Arc<[Doorbell]>,
        remotes: Vec<Option<Remote<M>>>,
    ) -> Vec<Endpoint<M>> {
        let n = doorbells.len();
        assert_eq!(remotes.len(), n, "one remote lane per kernel");
        // rings[to][from]: what `from` sends to `to`.
        let mut producers: Vec<Vec<Option<Outbox<M>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        let mut consumers: Vec<Vec<Option<Inbox<M>>>> =
            (0..n).map(|_| (0..n).map(|_| None).collect()).collect();
        for to in 0..n {
            for from in 0..n {
                if to == from {
                    continue;
                }
                let (mp, mc) = RingBuffer::new(capacity);
                let (pp, pc) = RingBuffer::new(capacity);
                producers[from][to] = Some((mp, pp));
                consumers[to][from] = Some((mc, pc));
            }
        }
        producers
            .into_iter()
            .zip(consumers)
            .zip(remotes)
            .enumerate()
            .map(|(i, ((outboxes, inboxes), remote))| Endpoint {
                id: KernelId::new(node, i as u16),
                outboxes,
                inboxes,
                backlog: (0..n).map(|_| VecDeque::new()).collect(),
                loopback: VecDeque::new(),
                next_inbox: 0,
                doorbells: doorbells.clone(),
                remote,
            })
            .collect()
    }
}

/// The two lanes towards one kernel: mailbox and portal.
type Outbox<M> = (Producer<Envelope<M>>, Producer<Vec<u8>>);
/// The two lanes from one kernel.
type Inbox<M> = (Consumer<Envelope<M>>, Consumer<Vec<u8>>);

/// A kernel's view of the NoC: its outgoing rings to every other kernel of
/// the node, its incoming rings from each of them, and its doorbell.
///
/// Owned by exactly one kernel thread (the rings are single-producer,
/// single-consumer; an `Endpoint` is `Send` but not shareable).
pub struct Endpoint<M> {
    id: KernelId,
    /// `outboxes[to]`: mailbox and portal producers towards `to`.
    outboxes: Vec<Option<Outbox<M>>>,
    /// `inboxes[from]`: mailbox and portal consumers from `from`.
    inboxes: Vec<Option<Inbox<M>>>,
    /// `backlog[to]`: messages that found the ring full, oldest first.
    backlog: Vec<VecDeque<(M, Option<Vec<u8>>)>>,
    /// Messages a kernel sends to itself.
    loopback: VecDeque<(M, Option<Vec<u8>>)>,
    /// Where the next receive starts scanning, so no sender is starved.
    next_inbox: usize,
    doorbells: Arc<[Doorbell]>,
    /// The other nodes, when this node is part of a cluster.
    remote: Option<Remote<M>>,
}

impl<M> Endpoint<M> {
    /// This kernel's id.
    pub fn id(&self) -> KernelId {
        self.id
    }

    /// How many kernels the node has.
    pub fn kernel_count(&self) -> u16 {
        self.inboxes.len() as u16
    }

    /// This kernel's doorbell.
    pub fn doorbell(&self) -> &Doorbell {
        &self.doorbells[self.id.index as usize]
    }

    /// Whether kernel `to` exists and can be sent to: a kernel of this node,
    /// or of a node this one is linked to.
    pub fn reaches(&self, to: KernelId) -> bool {
        if to.node == self.id.node {
            (to.index as usize) < self.outboxes.len()
        } else {
            self.remote.as_ref().is_some_and(|r| r.uplink.reaches(to))
        }
    }

    /// The nodes this kernel can send to now, its own first: (node id,
    /// kernel count).
    pub fn nodes(&self) -> Vec<(u16, u16)> {
        let mut nodes = vec![(self.id.node, self.kernel_count())];
        if let Some(r) = &self.remote {
            nodes.extend(r.uplink.linked());
        }
        nodes
    }

    /// Sends a control message to kernel `to`.
    ///
    /// # Errors
    /// [`SendError`] if `to` does not exist or its node cannot be reached.
    pub fn send(&mut self, to: KernelId, msg: M) -> Result<(), SendError<M>> {
        self.post(to, msg, None)
    }

    /// Sends a control message and bulk bytes that travel with it through
    /// the portal. The receiver gets both in one [`Incoming`].
    ///
    /// # Errors
    /// [`SendError`] if `to` does not exist or its node cannot be reached.
    pub fn send_bulk(&mut self, to: KernelId, msg: M, bulk: Vec<u8>) -> Result<(), SendError<M>> {
        self.post(to, msg, Some(bulk))
    }

    /// As [`send`](Self::send), for a message whose receiver does not wait
    /// on it: to another node it may wait, and share the write of the next
    /// message to that node ([`Uplink::send_lazy`]). It goes out at the
    /// latest at the next [`flush_lazy`](Self::flush_lazy), which a kernel
    /// calls before it waits for anything.
    ///
    /// # Errors
    /// [`SendError`] if `to` does not exist or its node cannot be reached.
    pub fn send_lazy(&mut self, to: KernelId, msg: M) -> Result<(), SendError<M>> {
        match &self.remote {
            Some(r) if to.node != self.id.node => r.uplink.send_lazy(self.id, to, msg),
            _ => self.post(to, msg, None),
        }
    }

    /// Writes the messages to other nodes that [`send_lazy`](Self::send_lazy)
    /// left waiting.
    pub fn flush_lazy(&self) {
        if let Some(r) = &self.remote {
            r.uplink.flush();
        }
    }

    /// As [`send_bulk`](Self::send_bulk), for bytes whose order against
    /// other bulk bytes to `to` does not matter ([`Uplink::send_unordered`]):
    /// between nodes, a few of them need not wait behind a large transfer.
    /// Inside a node there is one order for everything, as ever.
    ///
    /// # Errors
    /// [`SendError`] if `to` does not exist or its node cannot be reached.
    pub fn send_bulk_unordered(
        &mut self,
        to: KernelId,
        msg: M,
        bulk: Vec<u8>,
    ) -> Result<(), SendError<M>> {
        match &self.remote {
            Some(r) if to.node != self.id.node => r.uplink.send_unordered(self.id, to, msg, bulk),
            _ => self.post(to, msg, Some(bulk)),
        }
    }

    fn post(&mut self, to: KernelId, msg: M, bulk: Option<Vec<u8>>) -> Result<(), SendError<M>> {
        if to.node != self.id.node {
            return match &self.remote {
                Some(r) => r.uplink.send(self.id, to, msg, bulk),
                None => Err(SendError::UnknownKernel { to, msg }),
            };
        }
        if to.index as usize >= self.outboxes.len() {
            return Err(SendError::UnknownKernel { to, msg });
        }
        if to == self.id {
            self.loopback.push_back((msg, bulk));
            return Ok(());
        }
        let t = to.index as usize;
        // Straight into the ring when nothing waits before it.
        if let (true, Some(outbox)) = (self.backlog[t].is_empty(), &mut self.outboxes[t]) {
            if has_room(outbox, bulk.is_some()) {
                push(outbox, msg, bulk);
                self.doorbells[t].ring();
                return Ok(());
            }
        }
        self.backlog[t].push_back((msg, bulk));
        self.flush_to(t);
        Ok(())
    }

    /// Moves backlogged messages into rings that have room again. The
    /// kernel calls this once per loop; returns whether a backlog remains.
    pub fn flush(&mut self) -> bool {
        let mut left = false;
        for t in 0..self.backlog.len() {
            if !self.backlog[t].is_empty() {
                self.flush_to(t);
                left |= !self.backlog[t].is_empty();
            }
        }
        left
    }

    fn flush_to(&mut self, t: usize) {
        let Some(outbox) = self.outboxes[t].as_mut() else {
            return;
        };
        let mut sent = false;
        while let Some((_, bulk)) = self.backlog[t].front() {
            if !has_room(outbox, bulk.is_some()) {
                break;
            }
            let (msg, bulk) = self.backlog[t].pop_front().expect("front exists");
            push(outbox, msg, bulk);
            sent = true;
        }
        if sent {
            self.doorbells[t].ring();
        }
    }

    /// Takes one waiting message, if any, visiting senders in turn.
    pub fn try_recv(&mut self) -> Option<Incoming<M>> {
        if let Some(m) = self.try_recv_loopback() {
            return Some(m);
        }
        let n = self.inboxes.len();
        for k in 0..n {
            let from = (self.next_inbox + k) % n;
            let Some((mailbox, portal)) = self.inboxes[from].as_mut() else {
                continue;
            };
            if let Ok(env) = mailbox.pop() {
                // The portal item was pushed before its envelope, so it is there.
                let bulk = env
                    .bulk
                    .then(|| portal.pop().expect("bulk precedes its envelope"));
                self.next_inbox = (from + 1) % n;
                return Some(Incoming {
                    from: KernelId::new(self.id.node, from as u16),
                    msg: env.msg,
                    bulk,
                });
            }
        }
        self.remote.as_ref()?.inbound.try_recv().ok()
    }

    /// Takes one message this kernel sent itself, if any: the only ones
    /// that can wait while the doorbell has not rung since the inboxes were
    /// drained (the doorbell does not ring for those).
    pub fn try_recv_loopback(&mut self) -> Option<Incoming<M>> {
        let (msg, bulk) = self.loopback.pop_front()?;
        Some(Incoming {
            from: self.id,
            msg,
            bulk,
        })
    }

    /// This kernel starts (`true`) or stops polling the links to other
    /// nodes ([`Uplink::polling`]). Between the two it must call
    /// [`poll_remote`](Self::poll_remote) again and again: what arrives
    /// meanwhile waits for it. After the last kernel stops, the links'
    /// thread gets the connections back only when a kernel goes to sleep
    /// ([`settle_remote`](Self::settle_remote)), when one of the node
    /// sleeps already, or at the quantum ticker's next tick.
    pub fn polling_remote(&self, on: bool) {
        if let Some(r) = &self.remote {
            r.uplink.polling(on);
            // A kernel of this node that sleeps waits for the links'
            // thread to wake it: the connections go back to it at once.
            if !on && !self.doorbell().all_awake() {
                r.uplink.settle();
            }
        }
    }

    /// This kernel goes to sleep: what arrives from other nodes must wake
    /// it ([`Uplink::settle`]).
    pub fn settle_remote(&self) {
        if let Some(r) = &self.remote {
            r.uplink.settle();
        }
    }

    /// Reads what has arrived from other nodes ([`Uplink::poll`]); what
    /// is for this kernel rings its doorbell.
    pub fn poll_remote(&self) {
        if let Some(r) = &self.remote {
            r.uplink.poll();
        }
    }

    /// Whether the links' thread is at work ([`Uplink::busy`]).
    pub fn links_busy(&self) -> bool {
        self.remote.as_ref().is_some_and(|r| r.uplink.busy())
    }

    /// Whether a message sent to itself is waiting (the doorbell does not
    /// ring for those).
    pub fn has_loopback(&self) -> bool {
        !self.loopback.is_empty()
    }
}

/// Whether `outbox` takes a message now (with bulk bytes: both lanes, or
/// the pair would be split).
fn has_room<M>((mailbox, portal): &Outbox<M>, bulk: bool) -> bool {
    !(mailbox.is_full() || bulk && portal.is_full())
}

/// Pushes a message and its bulk bytes into `outbox`, which has room
/// ([`has_room`]): the bytes first, so that they are there when the
/// receiver takes the envelope.
fn push<M>((mailbox, portal): &mut Outbox<M>, msg: M, bulk: Option<Vec<u8>>) {
    let has_bulk = bulk.is_some();
    if let Some(b) = bulk {
        assert!(portal.push(b).is_ok(), "portal had room");
    }
    let pushed = mailbox.push(Envelope {
        msg,
        bulk: has_bulk,
    });
    assert!(pushed.is_ok(), "mailbox had room");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_travels_with_its_message() {
        let mut eps = Noc::build::<u32>(0, 2, 4);
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        a.send(b.id(), 1).unwrap();
        a.send_bulk(b.id(), 2, vec![7; 100]).unwrap();
        a.send(b.id(), 3).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| b.try_recv())
            .map(|m| (m.msg, m.bulk))
            .collect();
        assert_eq!(got, vec![(1, None), (2, Some(vec![7; 100])), (3, None)]);
    }

    #[test]
    fn full_ring_backlogs_in_order() {
        let mut eps = Noc::build::<u32>(0, 2, 2);
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        for i in 0..10 {
            a.send(b.id(), i).unwrap();
        }
        let mut got = vec![];
        while got.len() < 10 {
            a.flush();
            while let Some(m) = b.try_recv() {
                got.push(m.msg);
            }
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(!a.flush());
    }

    #[test]
    fn unknown_kernel_hands_message_back() {
        let mut eps = Noc::build::<u32>(0, 2, 2);
        let err = eps[0].send(KernelId::new(0, 5), 9).unwrap_err();
        assert!(matches!(err, SendError::UnknownKernel { msg: 9, .. }));
        let err = eps[0].send(KernelId::new(1, 0), 9).unwrap_err();
        assert!(err.to_string().contains("1.0"));
    }

    #[test]
    fn loopback_and_fair_scan() {
        let mut eps = Noc::build::<u32>(0, 3, 8);
        let mut c = eps.pop().unwrap();
        let (a, b) = eps.split_at_mut(1);
        let (a, b) = (&mut a[0], &mut b[0]);
        for i in 0..3 {
            a.send(c.id(), 10 + i).unwrap();
            b.send(c.id(), 20 + i).unwrap();
        }
        c.send(c.id(), 99).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| c.try_recv()).map(|m| m.msg).collect();
        assert_eq!(got, vec![99, 10, 20, 11, 21, 12, 22]);
    }

    #[test]
    fn what_others_send_rings_and_what_a_kernel_sends_itself_does_not() {
        let mut eps = Noc::build::<u32>(0, 2, 8);
        let mut b = eps.pop().unwrap();
        let mut a = eps.pop().unwrap();
        assert!(!b.doorbell().take(), "nothing sent yet");
        b.send(b.id(), 1).unwrap();
        assert!(!b.doorbell().take(), "its own message does not ring");
        a.send(b.id(), 2).unwrap();
        assert!(b.doorbell().take(), "another kernel's message rings");
        // Unrung, a kernel looks only at what it sent itself; rung, at
        // everything, its own first.
        assert_eq!(b.try_recv_loopback().map(|m| m.msg), Some(1));
        assert!(b.try_recv_loopback().is_none());
        assert_eq!(b.try_recv().map(|m| (m.from, m.msg)), Some((a.id(), 2)));
        assert!(b.try_recv().is_none());
    }
}
