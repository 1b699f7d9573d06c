//! The home-kernel table: the PIDs this kernel allocated, and where each of
//! those processes runs now (ALMOS-MK's reference cluster).
//!
//! A slot's generation grows each time it is freed, so a PID whose process
//! ended never names a later process in the same slot.

use std::collections::VecDeque;

use atoll_abi::{Errno, KernelId, Pid};

#[derive(Debug, Default)]
struct Slot {
    generation: u16,
    /// Where the process runs; `None` when the slot is free.
    location: Option<KernelId>,
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
    pub fn allocate(&mut self) -> Result<Pid, Errno> {
        let slot = match self.free.pop_front() {
            Some(s) => s,
            None if self.slots.len() <= u16::MAX as usize => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u16
            }
            None => return Err(Errno::Again),
        };
        let s = &mut self.slots[slot as usize];
        s.location = Some(self.me);
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
    pub fn adopt(&mut self, pid: Pid, at: KernelId) -> Result<(), String> {
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
        self.free.retain(|&f| f != pid.slot);
        Ok(())
    }

    /// Frees the slot of a process that ended.
    pub fn release(&mut self, pid: Pid) {
        if let Some(s) = self.slot(pid) {
            s.location = None;
            s.generation = s.generation.wrapping_add(1);
            self.free.push_back(pid.slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_make_reused_slots_distinct() {
        let me = KernelId::new(0, 2);
        let mut h = Homes::new(me);
        let a = h.allocate().unwrap();
        assert_eq!((a.home, a.slot, a.generation), (me, 0, 0));
        h.relocate(a, KernelId::new(0, 5));
        assert_eq!(h.locate(a), Some(KernelId::new(0, 5)));
        h.release(a);
        assert_eq!(h.locate(a), None);
        let b = h.allocate().unwrap();
        assert_eq!((b.slot, b.generation), (0, 1));
        assert_eq!(h.locate(a), None, "old PID must not name the new process");
        assert_eq!(h.locate(b), Some(me));
        h.release(a); // stale release is ignored
        assert_eq!(h.locate(b), Some(me));
    }

    #[test]
    fn a_checkpoint_takes_its_pid_back_only_from_a_free_slot() {
        let me = KernelId::new(0, 0);
        let there = KernelId::new(0, 1);
        let mut h = Homes::new(me);
        let a = h.allocate().unwrap();
        assert!(h.adopt(a, there).unwrap_err().contains("is taken"));
        h.release(a);
        h.adopt(a, there).unwrap();
        assert_eq!(h.locate(a), Some(there));
        // Its slot is not handed out again while it runs.
        assert_ne!(h.allocate().unwrap().slot, a.slot);
        // On another run of the node, slots below it stay free to allocate.
        let mut fresh = Homes::new(me);
        let far = Pid::new(me, 3, 7);
        fresh.adopt(far, me).unwrap();
        assert_eq!(fresh.locate(far), Some(me));
        let slots: Vec<u16> = (0..4).map(|_| fresh.allocate().unwrap().slot).collect();
        assert_eq!(slots, [0, 1, 2, 4]);
    }
}
