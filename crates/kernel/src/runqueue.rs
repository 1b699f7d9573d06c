//! A kernel's run queue. Processes woken from a blocking call (an IPC
//! answer, a child's end, a timer) run before those whose quantum ran out,
//! so that a process waiting on a message is not queued behind every
//! CPU-bound process of its kernel: with one FIFO, a round trip between two
//! processes sharing a kernel with four spinners took 86 ms (a quantum per
//! spinner, each way). Woken processes may not keep the others waiting for
//! more than a quantum of CPU in a row: then one of those runs.

use std::collections::VecDeque;
use std::time::Duration;

use atoll_abi::Pid;

#[derive(Debug)]
pub(crate) struct RunQueue {
    woken: VecDeque<Pid>,
    ready: VecDeque<Pid>,
    /// CPU time woken processes have had since a ready one last ran.
    streak_ns: u64,
    quantum_ns: u64,
}

impl RunQueue {
    pub(crate) fn new(quantum: Duration) -> RunQueue {
        RunQueue {
            woken: VecDeque::new(),
            ready: VecDeque::new(),
            streak_ns: 0,
            quantum_ns: u64::try_from(quantum.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// A process that was blocked and can go on: it runs soon.
    pub(crate) fn wake(&mut self, pid: Pid) {
        self.woken.push_back(pid);
    }

    /// A running process that stopped early so that the kernel handles its
    /// messages: it goes on before the other ready ones (after the woken),
    /// as it had not used its quantum.
    pub(crate) fn resume(&mut self, pid: Pid) {
        self.ready.push_front(pid);
    }

    /// A process new here, or whose quantum ran out: it runs after the
    /// others.
    pub(crate) fn push(&mut self, pid: Pid) {
        self.ready.push_back(pid);
    }

    /// The next process to run, and whether it was woken.
    pub(crate) fn pop(&mut self) -> Option<(Pid, bool)> {
        if !self.woken.is_empty() && (self.ready.is_empty() || self.streak_ns < self.quantum_ns) {
            return self.woken.pop_front().map(|p| (p, true));
        }
        self.streak_ns = 0;
        self.ready.pop_front().map(|p| (p, false))
    }

    /// Counts a slice of `ns` of CPU time of a process `pop` gave.
    pub(crate) fn ran(&mut self, ns: u64, woken: bool) {
        if woken {
            self.streak_ns = self.streak_ns.saturating_add(ns);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.woken.len() + self.ready.len()
    }

    /// The one process waiting to run, if there is exactly one.
    pub(crate) fn only(&self) -> Option<Pid> {
        match (self.woken.len(), self.ready.len()) {
            (1, 0) => self.woken.front().copied(),
            (0, 1) => self.ready.front().copied(),
            _ => None,
        }
    }

    pub(crate) fn contains(&self, pid: Pid) -> bool {
        self.woken.contains(&pid) || self.ready.contains(&pid)
    }

    /// Takes `pid` out (it leaves the kernel).
    pub(crate) fn remove(&mut self, pid: Pid) {
        self.woken.retain(|&q| q != pid);
        self.ready.retain(|&q| q != pid);
    }

    /// The processes waiting to run that are not just woken: new ones, and
    /// those whose quantum ran out (the CPU-bound ones).
    pub(crate) fn ready(&self) -> impl Iterator<Item = Pid> + '_ {
        self.ready.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_abi::KernelId;

    fn pid(slot: u16) -> Pid {
        Pid::new(KernelId::new(0, 0), slot, 0)
    }

    #[test]
    fn woken_processes_run_first_until_they_have_had_a_quantum() {
        let mut q = RunQueue::new(Duration::from_millis(10));
        q.push(pid(1));
        q.push(pid(2));
        q.wake(pid(3));
        assert_eq!(q.pop(), Some((pid(3), true)));
        q.ran(4_000_000, true);
        q.wake(pid(3));
        assert_eq!(q.pop(), Some((pid(3), true)));
        q.ran(7_000_000, true);
        // 11 ms of woken CPU in a row: a ready process's turn.
        q.wake(pid(3));
        assert_eq!(q.pop(), Some((pid(1), false)));
        q.ran(10_000_000, false);
        assert_eq!(q.pop(), Some((pid(3), true)));
        q.push(pid(1));
        q.resume(pid(4));
        assert_eq!(q.pop(), Some((pid(4), false)));
        assert_eq!(q.pop(), Some((pid(2), false)));
        assert_eq!(q.pop(), Some((pid(1), false)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn only_names_a_lone_process_in_either_queue() {
        let mut q = RunQueue::new(Duration::from_millis(10));
        assert_eq!(q.only(), None);
        q.wake(pid(1));
        assert_eq!(q.only(), Some(pid(1)));
        q.push(pid(2));
        assert_eq!(q.only(), None);
        q.pop();
        assert_eq!(q.only(), Some(pid(2)));
    }

    #[test]
    fn membership_spans_both_queues() {
        let mut q = RunQueue::new(Duration::from_millis(10));
        q.push(pid(1));
        q.wake(pid(2));
        assert_eq!(q.len(), 2);
        assert!(q.contains(pid(1)) && q.contains(pid(2)));
        assert_eq!(q.ready().collect::<Vec<_>>(), [pid(1)]);
        q.remove(pid(2));
        assert!(!q.contains(pid(2)));
        assert_eq!(q.len(), 1);
    }
}
