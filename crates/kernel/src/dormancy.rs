//! Dormant processes: how a kernel holds more processes than it has
//! instances.
//!
//! A live process holds an instance of the node's pool: its memory mapped,
//! its tables, its store. A process that is not running is stopped at a
//! safepoint and can be captured, so it need not hold one: it can go
//! dormant ([`Container::hibernate`]) and be kept as its image, the
//! non-zero blocks of its memory. Each kernel keeps at most its share of
//! the pool live; when it needs one more, the processes it ran least
//! recently go dormant, blocked ones before runnable ones. A dormant process
//! wakes when it is about to run or when the kernel must touch its memory
//! (a message written into it, a grant copied), and a message it is
//! sending is read straight from its image. Everything else — replies,
//! kill, migration, checkpoint — works on it as it is.
//!
//! [`Container::hibernate`]: atoll_process::Container::hibernate

use std::sync::atomic::Ordering;

use atoll_abi::{status, Pid};
use atoll_process::CallState;

use crate::kernel::Kernel;

/// The smallest share of the pool a kernel can work with: a copy between
/// two processes needs both live besides the one running, and arrivals
/// need room while the kernel is full.
pub const MIN_INSTANCES_PER_KERNEL: u32 = 8;

/// The live processes a kernel keeps at most: its share of the node's pool,
/// less a reserve (an eighth, at least two) for processes that arrive while
/// it is full (migrations, restores, hand-overs back) and for the other
/// kernels' overshoots.
pub(crate) fn live_budget(instances: u32, kernels: u16) -> usize {
    let share = instances as usize / usize::from(kernels.max(1));
    share.saturating_sub((share / 8).max(2)).max(1)
}

impl Kernel {
    /// Live containers on this kernel (running, ready, arriving), and
    /// its spare instances ([`atoll_process::Spares`]).
    fn live_count(&self) -> usize {
        self.host.instances.load(Ordering::Relaxed)
    }

    /// Makes room for one more live process: if this kernel is at its
    /// budget, its spare instances go back to the pool, then, if it still
    /// is, the processes it ran least recently go dormant, a sixteenth of
    /// the budget at once so that the scan is paid rarely.
    pub(crate) fn make_room(&mut self, keep: &[Pid]) {
        if self.live_count() >= self.live_budget {
            self.spares.clear();
        }
        let live = self.live_count();
        if live >= self.live_budget {
            let count = (self.live_budget / 16).max(1) + live - self.live_budget;
            self.hibernate_oldest(keep, count);
        }
    }

    /// Hibernates up to `count` of the processes that ran least recently,
    /// blocked ones first. Processes in `keep`, migrating ones (their memory
    /// is being tracked) and ones that cannot be captured (run without
    /// preparation) stay live.
    pub(crate) fn hibernate_oldest(&mut self, keep: &[Pid], count: usize) {
        let mut candidates: Vec<(bool, u64, Pid)> = self
            .procs
            .iter()
            .filter(|(pid, p)| {
                !p.container.is_dormant()
                    && p.container.program().prepared()
                    && !keep.contains(pid)
                    && !self.departures.contains_key(pid)
            })
            .map(|(&pid, p)| {
                let runnable = !matches!(p.container.uarea().call, CallState::Blocked(_));
                (runnable, p.last_ran, pid)
            })
            .collect();
        if candidates.len() > count {
            candidates.select_nth_unstable(count);
            candidates.truncate(count);
        }
        for (_, _, pid) in candidates {
            let p = self.procs.get_mut(&pid).expect("listed above");
            if let Err(e) = p.container.hibernate() {
                tracing::warn!(kernel = %self.id, %pid, "cannot go dormant: {e}");
            }
        }
    }

    /// Makes `pid` (a process here) live, making room first without
    /// touching the processes in `keep`. If the pool has no instance left
    /// (other kernels are over their budgets), every other process here that
    /// can goes dormant and it is tried once more. False if there is no such
    /// process, or it could not be woken: it then ends, with the reason on
    /// its console.
    pub(crate) fn live(&mut self, pid: Pid, keep: &[Pid]) -> bool {
        match self.procs.get(&pid) {
            None => return false,
            Some(p) if !p.container.is_dormant() => return true,
            Some(_) => {}
        }
        let mut keep = keep.to_vec();
        keep.push(pid);
        self.make_room(&keep);
        let slices = self.slices;
        let p = self.procs.get_mut(&pid).expect("checked above");
        p.last_ran = slices;
        let Err(e) = p.container.wake() else {
            return true;
        };
        tracing::debug!(kernel = %self.id, %pid, "pool full ({e}): emptying this kernel's share");
        self.hibernate_oldest(&keep, usize::MAX);
        let p = self.procs.get_mut(&pid).expect("checked above");
        let Err(e) = p.container.wake() else {
            return true;
        };
        self.end_saying(pid, status::TRAPPED, &format!("could not be woken: {e}"));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::live_budget;

    #[test]
    fn budget_is_a_share_less_a_reserve() {
        assert_eq!(live_budget(1024, 2), 448);
        assert_eq!(live_budget(1024, 1), 896);
        assert_eq!(live_budget(16, 2), 6);
        assert_eq!(live_budget(16, 64), 1);
        assert_eq!(live_budget(1024, 0), 896);
    }
}
