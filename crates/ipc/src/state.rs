//! The IPC part of a process's UArea. It travels with the process: pending
//! notifications, blocked senders and grants are the same after a move.

use std::collections::VecDeque;

use atoll_abi::Pid;
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
        }
    }

    /// Takes the first waiting sender that `from` (a PID or any) admits.
    pub fn take_sender(&mut self, from: Option<Pid>) -> Option<WaitingSender> {
        let i = self
            .senders
            .iter()
            .position(|s| from.is_none_or(|f| f == s.from))?;
        self.senders.remove(i)
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

/// A small sorted set of PIDs. The sets above churn on every call (a
/// `sendrec` adds its client to `owed`, the reply removes it): a vector keeps
/// its capacity, where a `BTreeSet` allocates and frees a node each time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PidSet(Vec<Pid>);

impl PidSet {
    /// Adds `pid`; false if it was there.
    pub fn insert(&mut self, pid: Pid) -> bool {
        match self.0.binary_search(&pid) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, pid);
                true
            }
        }
    }

    /// Removes `pid`; false if it was not there.
    pub fn remove(&mut self, pid: &Pid) -> bool {
        match self.0.binary_search(pid) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, pid: &Pid) -> bool {
        self.0.binary_search(pid).is_ok()
    }

    pub fn pop_first(&mut self) -> Option<Pid> {
        (!self.0.is_empty()).then(|| self.0.remove(0))
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Pid> + '_ {
        self.0.iter().copied()
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
    type IntoIter = std::vec::IntoIter<Pid>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

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
}

/// A process's IPC counters, for `atoll ps`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
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
    fn receive_order() {
        let mut s = IpcState::new(Some(DomainId::DEFAULT));
        for slot in [3, 1, 3] {
            s.senders.push_back(WaitingSender {
                from: pid(slot),
                kind: CallKind::Send,
                seq: u64::from(slot),
                msg: None,
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
