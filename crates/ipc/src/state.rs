//! The IPC part of a process's UArea. It travels with the process: pending
//! notifications, blocked senders and grants are the same after a move.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Range;

use atoll_abi::{Errno, Pid};
use serde::{Deserialize, Serialize};

use crate::domain::DomainId;
use crate::grant::GrantTable;
use crate::message::{CallKind, Message};

/// A process's IPC state.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IpcState {
    /// The domain it belongs to; `None` after `unbind` (no IPC at all).
    pub domain: Option<DomainId>,
    /// Number of the process's latest blocking IPC call, so that answers
    /// meant for an earlier call are recognised and dropped.
    pub seq: u64,
    /// Sources with a pending notification (coalesced: one per source).
    pub notifications: PidSet,
    /// Processes blocked sending to this one, in arrival order.
    pub senders: VecDeque<WaitingSender>,
    /// Clients blocked in `sendrec` whose request this process received and
    /// has not answered: a send to them completes at once (Minix's reply).
    pub owed: PidSet,
    /// Processes blocked receiving from this one by name; told if it ends.
    pub watchers: PidSet,
    /// The processes whose `watchers` hold this one.
    pub watching: PidSet,
    pub grants: GrantTable,
    pub stats: IpcStats,
    /// Asynchronous sends (`senda`) made, per receiver.
    pub async_out: BTreeMap<Pid, AsyncOut>,
    /// Asynchronous letters received, per sender.
    pub async_in: BTreeMap<Pid, AsyncIn>,
    /// Restored from a checkpoint: its senders went on numbering their
    /// letters after the checkpoint was taken, so the first letter that
    /// comes from each sets where that sender's numbering stands.
    pub async_resync: bool,
    /// The body of the message it received last (`ipc_senda_body`), kept
    /// for `ipc_body` until its next receive.
    pub body: Option<Vec<u8>>,
}

impl IpcState {
    pub fn new(domain: Option<DomainId>) -> Self {
        IpcState {
            domain,
            seq: 0,
            notifications: PidSet::default(),
            senders: VecDeque::new(),
            owed: PidSet::default(),
            watchers: PidSet::default(),
            watching: PidSet::default(),
            grants: GrantTable::default(),
            stats: IpcStats::default(),
            async_out: BTreeMap::new(),
            async_in: BTreeMap::new(),
            async_resync: false,
            body: None,
        }
    }

    /// The process was restored from a checkpoint, with its PID: the
    /// numbering of its asynchronous letters starts again as a sender
    /// (receivers take a letter 0 as the start of a new numbering) and is
    /// picked up anew as a receiver (`async_resync`).
    pub fn restored(&mut self) {
        self.async_out.clear();
        self.async_in.clear();
        self.async_resync = true;
    }

    /// Takes the first waiting sender that `from` (a PID or any) admits.
    pub fn take_sender(&mut self, from: Option<Pid>) -> Option<WaitingSender> {
        let i = self
            .senders
            .iter()
            .position(|s| from.is_none_or(|f| f == s.from))?;
        self.senders.remove(i)
    }

    /// Whether a receive from `from` (`None`: anyone) would take a message
    /// now: a notification or a waiting sender.
    pub fn has_message(&self, from: Option<Pid>) -> bool {
        match from {
            Some(p) => self.notifications.contains(&p) || self.senders.iter().any(|s| s.from == p),
            None => !self.notifications.is_empty() || !self.senders.is_empty(),
        }
    }

    /// Takes a pending notification that `from` admits (lowest PID first, as
    /// Minix scans its bitmap).
    pub fn take_notification(&mut self, from: Option<Pid>) -> Option<Pid> {
        match from {
            Some(p) => self.notifications.remove(&p).then_some(p),
            None => self.notifications.pop_first(),
        }
    }
}

/// A sorted set of PIDs. The sets above churn on every call (a `sendrec`
/// adds its client to `owed`, the reply removes it) and are small: a vector
/// keeps its capacity, where a `BTreeSet` allocates and frees a node each
/// time. A set that grows past [`PidSet::SMALL`] (a server with thousands of
/// pending notifications) becomes a `BTreeSet`, whose inserts and removals
/// stay logarithmic, until it is cleared. Either way it is encoded as a
/// sorted sequence.
#[derive(Clone, Debug)]
pub enum PidSet {
    Small(Vec<Pid>),
    Large(BTreeSet<Pid>),
}

impl Default for PidSet {
    fn default() -> Self {
        PidSet::Small(Vec::new())
    }
}

impl PidSet {
    /// Largest set kept as a vector.
    pub const SMALL: usize = 64;

    /// Adds `pid`; false if it was there.
    pub fn insert(&mut self, pid: Pid) -> bool {
        let PidSet::Small(v) = self else {
            let PidSet::Large(set) = self else {
                unreachable!()
            };
            return set.insert(pid);
        };
        match v.binary_search(&pid) {
            Ok(_) => false,
            Err(_) if v.len() >= Self::SMALL => {
                let mut set: BTreeSet<Pid> = v.drain(..).collect();
                set.insert(pid);
                *self = PidSet::Large(set);
                true
            }
            Err(i) => {
                v.insert(i, pid);
                true
            }
        }
    }

    /// Removes `pid`; false if it was not there.
    pub fn remove(&mut self, pid: &Pid) -> bool {
        match self {
            PidSet::Small(v) => match v.binary_search(pid) {
                Ok(i) => {
                    v.remove(i);
                    true
                }
                Err(_) => false,
            },
            PidSet::Large(set) => set.remove(pid),
        }
    }

    pub fn contains(&self, pid: &Pid) -> bool {
        match self {
            PidSet::Small(v) => v.binary_search(pid).is_ok(),
            PidSet::Large(set) => set.contains(pid),
        }
    }

    /// Removes and returns the smallest PID.
    pub fn pop_first(&mut self) -> Option<Pid> {
        match self {
            PidSet::Small(v) => (!v.is_empty()).then(|| v.remove(0)),
            PidSet::Large(set) => set.pop_first(),
        }
    }

    pub fn clear(&mut self) {
        *self = PidSet::default();
    }

    pub fn len(&self) -> usize {
        match self {
            PidSet::Small(v) => v.len(),
            PidSet::Large(set) => set.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// In increasing order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = Pid> + '_> {
        match self {
            PidSet::Small(v) => Box::new(v.iter().copied()),
            PidSet::Large(set) => Box::new(set.iter().copied()),
        }
    }
}

impl PartialEq for PidSet {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Extend<Pid> for PidSet {
    fn extend<I: IntoIterator<Item = Pid>>(&mut self, iter: I) {
        for p in iter {
            self.insert(p);
        }
    }
}

impl IntoIterator for PidSet {
    type Item = Pid;
    type IntoIter = Box<dyn Iterator<Item = Pid>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            PidSet::Small(v) => Box::new(v.into_iter()),
            PidSet::Large(set) => Box::new(set.into_iter()),
        }
    }
}

impl Serialize for PidSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for PidSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let pids = Vec::<Pid>::deserialize(deserializer)?;
        let mut set = PidSet::default();
        set.extend(pids);
        Ok(set)
    }
}

/// Asynchronous letters one sender may have sent to one receiver and the
/// receiver not yet taken: past this, `senda` fails with `EAGAIN`. It bounds
/// what a sender can make a receiver's kernel keep for it (the receiver's
/// queue holds at most this many letters per sender).
pub const ASYNC_WINDOW: u32 = 64;

/// The largest body a letter carries (`ipc_senda_body`): a frame that holds
/// the control lane between two nodes for tens of microseconds at most, as
/// Open MPI's eager limit over TCP.
pub const BODY_MAX: usize = 64 << 10;

/// Whether a letter may carry a body of `len` bytes: checked by the
/// sender's host call and again by a receiving kernel, for a letter that
/// came from another node.
pub fn body_fits(len: usize) -> Result<(), Errno> {
    if len > BODY_MAX {
        return Err(Errno::MsgSize);
    }
    Ok(())
}

/// Bytes of bodies one sender may have untaken by one receiver (besides
/// one letter's, however large): with [`ASYNC_WINDOW`], what a sender can
/// make a receiver's kernel keep for it.
pub const ASYNC_BODY_WINDOW: usize = 256 << 10;

/// What a sender knows of its asynchronous sends to one receiver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AsyncOut {
    /// Number of the next letter: the receiver takes them in this order,
    /// whatever routes they took (both ends may move meanwhile).
    pub next: u64,
    /// Letters sent whose receipt has not been confirmed.
    pub in_flight: u32,
    /// A letter could not be delivered (the receiver ended, or is of
    /// another domain): the next `senda` to it fails with this.
    pub error: Option<Errno>,
    /// `senda` failed with `EAGAIN`: notify the sender, as from the
    /// receiver, when a letter is taken.
    pub want: bool,
    /// The body bytes of each letter in flight, oldest first (they are
    /// taken in order), and their sum.
    pub bodies: VecDeque<u32>,
    pub body_bytes: usize,
}

impl AsyncOut {
    /// Whether one more letter, with `body` bytes, fits in the windows.
    pub fn has_room(&self, body: usize) -> bool {
        self.in_flight < ASYNC_WINDOW
            && (self.in_flight == 0 || body == 0 || self.body_bytes + body <= ASYNC_BODY_WINDOW)
    }

    /// One more letter, with `body` bytes, is in flight.
    pub fn sent(&mut self, body: usize) {
        self.in_flight += 1;
        self.bodies.push_back(body as u32);
        self.body_bytes += body;
    }

    /// The oldest `count` letters in flight were taken (or refused).
    pub fn taken(&mut self, count: u32) {
        self.in_flight = self.in_flight.saturating_sub(count);
        let taken = (count as usize).min(self.bodies.len());
        for len in self.bodies.drain(..taken) {
            self.body_bytes -= len as usize;
        }
        if self.in_flight == 0 {
            self.bodies.clear();
            self.body_bytes = 0;
        }
    }
}

/// What a receiver knows of one sender's asynchronous letters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AsyncIn {
    /// Number of the next letter to accept.
    pub next: u64,
    /// Letters that came before one sent earlier (a route around a
    /// migration can be shorter): held, in order, until it comes.
    pub early: Vec<EarlyLetter>,
}

/// A letter held until its turn.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlyLetter {
    pub seq: u64,
    pub msg: Message,
    pub body: Option<Vec<u8>>,
}

impl AsyncIn {
    /// Keeps a letter until its turn; `false` if it is already here.
    pub fn hold(&mut self, letter: EarlyLetter) -> bool {
        match self.early.binary_search_by_key(&letter.seq, |l| l.seq) {
            Ok(_) => false,
            Err(i) => {
                self.early.insert(i, letter);
                true
            }
        }
    }

    /// The held letter whose turn it is now, if it came; the turn passes
    /// to the one after it.
    pub fn take_next(&mut self) -> Option<EarlyLetter> {
        match self.early.first() {
            Some(l) if l.seq == self.next => {
                self.next += 1;
                Some(self.early.remove(0))
            }
            _ => None,
        }
    }
}

/// Where a letter's body lies in its sender's memory, checked at the call.
pub type BodyAt = Range<u32>;

/// A sender blocked on this process. Its message stays in its own memory
/// while both run on one kernel (`msg: None`: one copy, at delivery); it is
/// carried here when the sender is elsewhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WaitingSender {
    pub from: Pid,
    pub kind: CallKind,
    /// The sender's call number (`IpcState::seq`), to match its answer.
    pub seq: u64,
    pub msg: Option<Message>,
    /// A letter's body (`ipc_senda_body`).
    pub body: Option<Vec<u8>>,
}

impl WaitingSender {
    /// A letter of `senda`: its sender does not wait for it (its `seq` is
    /// the letter's number, not a call's).
    pub fn is_async(&self) -> bool {
        self.kind == CallKind::SendA
    }
}

/// A process's IPC counters, for `atoll ps`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IpcStats {
    pub sent: u64,
    pub received: u64,
    pub notified: u64,
    pub copied_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_abi::KernelId;

    fn pid(slot: u16) -> Pid {
        Pid::new(KernelId::new(0, 0), slot, 0)
    }

    #[test]
    fn early_letters_wait_for_their_turn_and_come_once() {
        let letter = |n: u8| EarlyLetter {
            seq: u64::from(n),
            msg: Message::from_bytes(&[n; crate::MESSAGE_SIZE]),
            body: (n == 3).then(|| vec![n; 1000]),
        };
        let mut a = AsyncIn::default();
        assert!(a.hold(letter(3)));
        assert!(a.hold(letter(1)));
        assert!(!a.hold(letter(3)), "a duplicate is not held twice");
        assert_eq!(a.take_next(), None, "letter 0 has not come");
        a.next = 1;
        assert_eq!(a.take_next(), Some(letter(1)));
        assert_eq!(a.next, 2, "the turn passes on");
        assert_eq!(a.take_next(), None, "letter 2 has not come");
        a.next = 3;
        assert_eq!(a.take_next(), Some(letter(3)), "with its body");
        assert_eq!(a.next, 4);
        assert!(a.early.is_empty());
    }

    #[test]
    fn has_message_sees_what_a_receive_would_take() {
        let mut s = IpcState::new(None);
        assert!(!s.has_message(None));
        s.senders.push_back(WaitingSender {
            from: pid(2),
            kind: CallKind::SendA,
            seq: 0,
            msg: Some(Message::notification(pid(2))),
            body: None,
        });
        s.notifications.insert(pid(3));
        assert!(s.has_message(None));
        assert!(s.has_message(Some(pid(2))), "its letter");
        assert!(s.has_message(Some(pid(3))), "its notification");
        assert!(!s.has_message(Some(pid(4))), "nothing from it");
        assert!(s.take_sender(Some(pid(2))).is_some());
        assert!(!s.has_message(Some(pid(2))));
        assert_eq!(s.take_notification(None), Some(pid(3)));
        assert!(!s.has_message(None));
    }

    #[test]
    fn a_body_is_at_most_body_max() {
        assert_eq!(body_fits(0), Ok(()));
        assert_eq!(body_fits(BODY_MAX), Ok(()));
        assert_eq!(body_fits(BODY_MAX + 1), Err(Errno::MsgSize));
    }

    #[test]
    fn bodies_in_flight_are_bounded_but_one_always_goes() {
        let mut out = AsyncOut::default();
        assert!(out.has_room(BODY_MAX), "a first letter goes, however large");
        out.sent(BODY_MAX);
        for _ in 0..(ASYNC_BODY_WINDOW / BODY_MAX - 1) {
            assert!(out.has_room(BODY_MAX));
            out.sent(BODY_MAX);
        }
        assert!(!out.has_room(1), "the bytes window is full");
        assert!(out.has_room(0), "a letter without a body still goes");
        out.sent(0);
        out.taken(1);
        assert_eq!(out.body_bytes, ASYNC_BODY_WINDOW - BODY_MAX);
        assert!(
            out.has_room(BODY_MAX),
            "the oldest letter's bytes came back"
        );
        out.taken(u32::MAX);
        assert_eq!((out.in_flight, out.body_bytes), (0, 0));
        assert!(out.bodies.is_empty());
        for _ in 0..ASYNC_WINDOW {
            out.sent(0);
        }
        assert!(!out.has_room(0), "the letters window is full");
    }

    #[test]
    fn a_large_set_keeps_order_and_encoding() {
        let n = PidSet::SMALL as u16 * 4;
        let mut set = PidSet::default();
        // Inserted out of order, with duplicates.
        for slot in (0..n).rev().chain(0..n) {
            set.insert(pid(slot));
        }
        assert!(matches!(set, PidSet::Large(_)));
        assert_eq!(set.len(), n as usize);
        assert!(set.contains(&pid(7)) && set.remove(&pid(7)) && !set.contains(&pid(7)));
        let bytes = postcard::to_allocvec(&set).unwrap();
        let as_vec: Vec<Pid> = set.iter().collect();
        assert_eq!(bytes, postcard::to_allocvec(&as_vec).unwrap());
        let mut back: PidSet = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, set);
        let mut small = PidSet::default();
        small.extend([pid(2), pid(1)]);
        assert!(matches!(small, PidSet::Small(_)));
        assert_ne!(small, set);
        for slot in 0..n {
            if slot != 7 {
                assert_eq!(back.pop_first(), Some(pid(slot)));
            }
        }
        assert_eq!(back.pop_first(), None);
    }

    #[test]
    fn receive_order() {
        let mut s = IpcState::new(Some(DomainId::DEFAULT));
        for slot in [3, 1, 3] {
            s.senders.push_back(WaitingSender {
                from: pid(slot),
                kind: CallKind::Send,
                seq: u64::from(slot),
                msg: None,
                body: None,
            });
        }
        assert_eq!(s.take_sender(Some(pid(1))).unwrap().from, pid(1));
        assert_eq!(s.take_sender(Some(pid(2))), None);
        assert_eq!(s.take_sender(None).unwrap().from, pid(3));
        s.notifications.extend([pid(5), pid(4), pid(5)]);
        assert_eq!(s.take_notification(Some(pid(6))), None);
        assert_eq!(s.take_notification(None), Some(pid(4)));
        assert_eq!(s.take_notification(Some(pid(5))), Some(pid(5)));
        assert!(s.notifications.is_empty());
    }
}
