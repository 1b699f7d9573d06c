use serde::{Deserialize, Serialize};

/// The load of a subtree: a kernel's own, or the sum over its kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Load {
    /// Kernels in the subtree.
    pub kernels: u32,
    /// Processes ready to run (in a run queue) when each kernel last looked.
    pub runnable: u32,
    /// Processes of any state (ready, blocked, dormant).
    pub processes: u32,
    /// Kernel-seconds per second spent running processes over the last
    /// window: 1.0 is one kernel busy all the time.
    pub busy: f32,
    /// Bytes of linear memory of the processes.
    pub memory: u64,
    /// Processes created on or moved to the subtree's kernels since they
    /// started. It only grows, so a placer can tell the first report that
    /// has its placement in it, however late the process arrives.
    pub arrivals: u64,
}

impl Load {
    /// Adds `other`'s kernels and processes to this one.
    pub fn add(&mut self, other: &Load) {
        self.kernels += other.kernels;
        self.runnable += other.runnable;
        self.processes += other.processes;
        self.busy += other.busy;
        self.memory += other.memory;
        self.arrivals += other.arrivals;
    }

    /// Counts `n` more processes, about to arrive: placed there but not
    /// yet in the subtree's next report.
    pub fn expect(&mut self, n: u32) {
        self.runnable += n;
        self.processes += n;
    }

    /// Counts one process less, about to leave.
    pub fn lose_one(&mut self) {
        self.runnable = self.runnable.saturating_sub(1);
        self.processes = self.processes.saturating_sub(1);
    }

    /// What placement compares, lowest first: runnable processes per
    /// kernel, then processes per kernel, then how busy each kernel was.
    pub fn order_key(&self) -> (f64, f64, f64) {
        let k = f64::from(self.kernels.max(1));
        (
            f64::from(self.runnable) / k,
            f64::from(self.processes) / k,
            f64::from(self.busy) / k,
        )
    }

    /// How many runnable processes to move from `self` to `to` so that the
    /// two are as even as whole processes allow: the most `m` with
    /// `(r_self - m) / k_self >= (r_to + m) / k_to`. Zero when a move would
    /// only turn the imbalance around.
    pub fn excess_over(&self, to: &Load) -> u32 {
        let (kd, kr) = (u64::from(self.kernels.max(1)), u64::from(to.kernels.max(1)));
        let (rd, rr) = (u64::from(self.runnable), u64::from(to.runnable));
        let (give, take) = (rd * kr, rr * kd);
        if give <= take {
            return 0;
        }
        ((give - take) / (kd + kr)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(kernels: u32, runnable: u32) -> Load {
        Load {
            kernels,
            runnable,
            processes: runnable,
            ..Load::default()
        }
    }

    #[test]
    fn excess_evens_whole_processes() {
        assert_eq!(load(1, 32).excess_over(&load(1, 0)), 16);
        assert_eq!(load(1, 3).excess_over(&load(1, 2)), 0);
        assert_eq!(load(1, 4).excess_over(&load(1, 2)), 1);
        assert_eq!(load(1, 2).excess_over(&load(1, 4)), 0);
        // Two kernels against one: 9 over 3 kernels is 3 each.
        assert_eq!(load(2, 9).excess_over(&load(1, 0)), 3);
        assert_eq!(load(1, 9).excess_over(&load(2, 0)), 6);
    }

    #[test]
    fn order_is_per_kernel() {
        assert!(load(4, 4).order_key() < load(1, 2).order_key());
        let mut busy = load(1, 0);
        busy.busy = 0.5;
        assert!(load(1, 0).order_key() < busy.order_key());
    }
}
