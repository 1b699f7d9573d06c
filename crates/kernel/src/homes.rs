//! The home-kernel table: the PIDs this kernel allocated, and where each of
//! those processes runs now (ALMOS-MK's reference cluster).
//!
//! A slot's generation grows each time it is freed, so a PID whose process
//! ended never names a later process in the same slot. The home also knows
//! whom to tell if the process is lost with the node it runs on.

use std::collections::VecDeque;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_process::ConsoleId;
use serde::{Deserialize, Serialize};

/// Who hears that a process ended when it cannot say so itself: its
/// parent, or for a job's first process, the job's console.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kin {
    pub parent: Option<Pid>,
    pub console: ConsoleId,
}

#[derive(Debug)]
struct Slot {
    generation: u16,
    /// Where the process runs; `None` when the slot is free.
    location: Option<KernelId>,
    kin: Kin,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            generation: 0,
            location: None,
            kin: Kin {
                parent: None,
                console: ConsoleId(0),
            },
        }
    }
}

/// PIDs homed on one kernel.
#[derive(Debug)]
pub struct Homes {
    me: KernelId,
    slots: Vec<Slot>,
    free: VecDeque<u16>,
}

impl Homes {
    pub fn new(me: KernelId) -> Self {
        Homes {
            me,
            slots: Vec::new(),
            free: VecDeque::new(),
        }
    }

    /// Allocates a PID for a process that starts on this kernel.
    pub fn allocate(&mut self, kin: Kin) -> Result<Pid, Errno> {
        let slot = match self.free.pop_front() {
            Some(s) => s,
            None if self.slots.len() <= u16::MAX as usize => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u16
            }
            None => return Err(Errno::Again),
        };
        let s = &mut self.slots[slot as usize];
        if Pid::new(self.me, slot, s.generation).to_abi() == Pid::CHILD_ABI {
            // A parent given this PID would take itself for the child.
            s.generation = s.generation.wrapping_add(1);
        }
        s.location = Some(self.me);
        s.kin = kin;
        Ok(Pid::new(self.me, slot, s.generation))
    }

    fn slot(&mut self, pid: Pid) -> Option<&mut Slot> {
        debug_assert_eq!(pid.home, self.me, "asked the wrong home");
        self.slots
            .get_mut(pid.slot as usize)
            .filter(|s| s.generation == pid.generation && s.location.is_some())
    }

    /// Where `pid` runs, or `None` if it ended (or never existed).
    pub fn locate(&mut self, pid: Pid) -> Option<KernelId> {
        self.slot(pid)?.location
    }

    /// Records that `pid` now runs on `at`.
    /// Records that `pid` now runs on `at`; false if `pid` is not a live
    /// process of this home.
    pub fn relocate(&mut self, pid: Pid, at: KernelId) -> bool {
        match self.slot(pid) {
            Some(s) => {
                s.location = Some(at);
                true
            }
            None => false,
        }
    }

    /// Gives a restored checkpoint its PID back: its slot must be free (the
    /// process ended when it was checkpointed, or this is another run of
    /// the node). The slot takes the PID's generation, so the PID names the
    /// process again.
    pub fn adopt(&mut self, pid: Pid, at: KernelId, kin: Kin) -> Result<(), String> {
        let slot = pid.slot as usize;
        while self.slots.len() <= slot {
            self.free.push_back(self.slots.len() as u16);
            self.slots.push(Slot::default());
        }
        let s = &mut self.slots[slot];
        if s.location.is_some() {
            return Err(format!(
                "PID {pid} is taken: slot {} holds a running process (generation {})",
                pid.slot, s.generation
            ));
        }
        s.generation = pid.generation;
        s.location = Some(at);
        s.kin = kin;
        self.free.retain(|&f| f != pid.slot);
        Ok(())
    }

    /// Frees the slot of a process that ended; returns whom to tell, if it
    /// was live.
    pub fn release(&mut self, pid: Pid) -> Option<Kin> {
        let s = self.slot(pid)?;
        s.location = None;
        s.generation = s.generation.wrapping_add(1);
        let kin = s.kin;
        self.free.push_back(pid.slot);
        Some(kin)
    }

    /// The processes that ran on node `node`, which is down: they are lost
    /// with it. Their slots are freed; returns them and whom to tell.
    pub fn lost_on(&mut self, node: u16) -> Vec<(Pid, Kin)> {
        let lost: Vec<Pid> = (0..self.slots.len())
            .filter_map(|i| {
                let s = &self.slots[i];
                let at = s.location?;
                (at.node == node).then(|| Pid::new(self.me, i as u16, s.generation))
            })
            .collect();
        lost.into_iter()
            .filter_map(|pid| Some((pid, self.release(pid)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIN: Kin = Kin {
        parent: None,
        console: ConsoleId(0),
    };

    #[test]
    fn generations_make_reused_slots_distinct() {
        let me = KernelId::new(0, 2);
        let mut h = Homes::new(me);
        let a = h.allocate(KIN).unwrap();
        assert_eq!((a.home, a.slot, a.generation), (me, 0, 0));
        h.relocate(a, KernelId::new(0, 5));
        assert_eq!(h.locate(a), Some(KernelId::new(0, 5)));
        h.release(a);
        assert_eq!(h.locate(a), None);
        let b = h.allocate(KIN).unwrap();
        assert_eq!((b.slot, b.generation), (0, 1));
        assert_eq!(h.locate(a), None, "old PID must not name the new process");
        assert_eq!(h.locate(b), Some(me));
        h.release(a); // stale release is ignored
        assert_eq!(h.locate(b), Some(me));
    }

    #[test]
    fn no_process_is_given_the_pid_fork_returns_in_the_child() {
        let first = KernelId::new(0, 0);
        let mut h = Homes::new(first);
        let mut pid = h.allocate(KIN).unwrap();
        assert_eq!((pid.slot, pid.generation), (0, 1));
        // Nor once the slot's generation wraps.
        for _ in 0..u16::MAX {
            h.release(pid);
            pid = h.allocate(KIN).unwrap();
            assert_ne!(pid.to_abi(), Pid::CHILD_ABI);
        }
        assert_eq!((pid.slot, pid.generation), (0, 1));
        // Other kernels' slot 0 starts at generation 0.
        let other = Homes::new(KernelId::new(0, 1)).allocate(KIN).unwrap();
        assert_eq!((other.slot, other.generation), (0, 0));
    }

    #[test]
    fn a_checkpoint_takes_its_pid_back_only_from_a_free_slot() {
        let me = KernelId::new(0, 0);
        let there = KernelId::new(0, 1);
        let mut h = Homes::new(me);
        let a = h.allocate(KIN).unwrap();
        assert!(h.adopt(a, there, KIN).unwrap_err().contains("is taken"));
        h.release(a);
        h.adopt(a, there, KIN).unwrap();
        assert_eq!(h.locate(a), Some(there));
        // Its slot is not handed out again while it runs.
        assert_ne!(h.allocate(KIN).unwrap().slot, a.slot);
        // On another run of the node, slots below it stay free to allocate.
        let mut fresh = Homes::new(me);
        let far = Pid::new(me, 3, 7);
        fresh.adopt(far, me, KIN).unwrap();
        assert_eq!(fresh.locate(far), Some(me));
        let slots: Vec<u16> = (0..4).map(|_| fresh.allocate(KIN).unwrap().slot).collect();
        assert_eq!(slots, [0, 1, 2, 4]);
    }

    #[test]
    fn processes_that_ran_on_a_lost_node_are_released_with_their_kin() {
        let me = KernelId::new(0, 0);
        let mut h = Homes::new(me);
        let parent = Pid::new(me, 9, 0);
        let kin = Kin {
            parent: Some(parent),
            console: ConsoleId(1),
        };
        let [a, b, c] = [0, 1, 2].map(|_| h.allocate(kin).unwrap());
        h.relocate(a, KernelId::new(2, 0));
        h.relocate(c, KernelId::new(2, 3));
        h.relocate(b, KernelId::new(1, 0));
        assert_eq!(h.lost_on(2), vec![(a, kin), (c, kin)]);
        assert_eq!(
            (h.locate(a), h.locate(b), h.locate(c)),
            (None, Some(KernelId::new(1, 0)), None)
        );
        assert!(h.lost_on(2).is_empty());
    }
}
