//! Sleep and wake-up for one kernel.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// Wakes a sleeping kernel when something is sent to it.
///
/// Protocol (a Dekker pair on two flags, hence `SeqCst`): a sender publishes
/// its message, sets `pending`, then unparks the owner only if `sleeping` is
/// set; the owner sets `sleeping`, re-checks `pending`, and parks only if
/// nothing is pending. One of the two always sees the other's store, so no
/// wake-up is lost, and a kernel that is awake costs its senders one load.
#[derive(Debug, Default)]
pub struct Doorbell {
    pending: AtomicBool,
    sleeping: AtomicBool,
    /// The owner's thread, set once when the owner starts.
    owner: OnceLock<Thread>,
    /// The node's count of awake kernels and the owner's index in it.
    awake: Option<(Arc<Awake>, u16)>,
}

impl Doorbell {
    /// The doorbell of kernel `kernel`, counted in `awake` while it is
    /// not asleep. The one who wakes a sleeper counts it awake at once:
    /// until its thread runs, the sleeper needs its core as much as if it
    /// ran.
    pub fn counted(awake: Arc<Awake>, kernel: u16) -> Doorbell {
        Doorbell {
            awake: Some((awake, kernel)),
            ..Doorbell::default()
        }
    }

    /// Binds the doorbell to the calling thread, which alone may [`sleep`](Self::sleep).
    pub fn bind_current_thread(&self) {
        let _ = self.owner.set(std::thread::current());
    }

    /// Says that work is waiting for the owner, waking it if it sleeps.
    pub fn ring(&self) {
        self.pending.store(true, SeqCst);
        if self.sleeping.load(SeqCst) && self.sleeping.swap(false, SeqCst) {
            self.count_awake(true);
            if let Some(t) = self.owner.get() {
                t.unpark();
            }
        }
    }

    /// Whether someone rang since the last [`take`](Self::take). Cheap
    /// enough to poll while a guest runs.
    pub fn is_pending(&self) -> bool {
        self.pending.load(SeqCst)
    }

    /// Clears the pending flag; the owner then drains its queues. Anything
    /// sent after this call rings again.
    pub fn take(&self) -> bool {
        self.pending.swap(false, SeqCst)
    }

    /// Parks the owner until rung or until `timeout` (forever if `None`).
    /// Returns at once if the doorbell was rung since the last `take`.
    pub fn sleep(&self, timeout: Option<Duration>) {
        self.sleeping.store(true, SeqCst);
        self.count_awake(false);
        if !self.pending.load(SeqCst) {
            match timeout {
                Some(t) => std::thread::park_timeout(t),
                None => std::thread::park(),
            }
        }
        // Not rung (a timeout, or pending before it parked): no one
        // counted it awake again.
        if self.sleeping.swap(false, SeqCst) {
            self.count_awake(true);
        }
    }

    /// Whether the owner has a core to itself, so that it may poll this
    /// doorbell rather than sleep ([`Awake`]); always, if not counted.
    pub fn room_to_poll(&self) -> bool {
        self.awake
            .as_ref()
            .is_none_or(|(awake, kernel)| awake.room_to_poll(*kernel))
    }

    /// Whether every kernel of the owner's node is awake; always, if not
    /// counted.
    pub fn all_awake(&self) -> bool {
        self.awake
            .as_ref()
            .is_none_or(|(awake, _)| awake.all_awake())
    }

    fn count_awake(&self, awake: bool) {
        if let Some((counts, kernel)) = &self.awake {
            let count = counts.count(*kernel);
            if awake {
                count.fetch_add(1, Relaxed);
            } else {
                count.fetch_sub(1, Relaxed);
            }
        }
    }
}

/// How many of a node's kernels are awake (running, polling, or rung and
/// not yet running), against the cores they have: whether an idle kernel
/// may poll its doorbell before it sleeps ([`Doorbell::room_to_poll`]).
///
/// Polling saves the wake-up of a sleeping thread, which costs tens of
/// microseconds on a VM, but only while the poller has a core to itself:
/// a kernel polling on a core another kernel needs takes the time from
/// it. With more kernels than cores most are usually asleep, and two that
/// talk to each other can still poll while the others sleep. Kernels
/// pinned to cores (kernel `i` on core `i % cores`) are counted per core,
/// the others together.
#[derive(Debug)]
pub struct Awake {
    /// Per core if pinned, else one count for the node.
    counts: Box<[Padded]>,
    kernels: usize,
    cores: usize,
    pinned: bool,
}

/// A count on a cache line of its own: a kernel polls its core's count
/// while the kernel of the next core writes its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicUsize);

impl Awake {
    /// `kernels` kernels, all awake, on `cores` cores, pinned or not.
    pub fn new(kernels: usize, cores: usize, pinned: bool) -> Awake {
        let cores = cores.max(1);
        let counts = if pinned {
            (0..cores)
                .map(|c| Padded(AtomicUsize::new((c..kernels).step_by(cores).count())))
                .collect()
        } else {
            vec![Padded(AtomicUsize::new(kernels))].into()
        };
        Awake {
            counts,
            kernels,
            cores,
            pinned,
        }
    }

    /// Whether no kernel of the node sleeps (as far as the counts, read
    /// without a lock, tell).
    pub fn all_awake(&self) -> bool {
        self.counts.iter().map(|c| c.0.load(Relaxed)).sum::<usize>() >= self.kernels
    }

    fn count(&self, kernel: u16) -> &AtomicUsize {
        let slot = if self.pinned {
            usize::from(kernel) % self.cores
        } else {
            0
        };
        &self.counts[slot].0
    }

    /// Whether `kernel` has a core to itself: no other kernel pinned to
    /// its core is awake, or (unpinned) no more kernels are awake than
    /// there are cores.
    fn room_to_poll(&self, kernel: u16) -> bool {
        let awake = self.count(kernel).load(Relaxed);
        if self.pinned {
            awake <= 1
        } else {
            awake <= self.cores
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// The doorbells of a node's `kernels` kernels on `cores` cores.
    fn node_bells(kernels: u16, cores: usize, pinned: bool) -> Arc<Vec<Doorbell>> {
        let awake = Arc::new(Awake::new(usize::from(kernels), cores, pinned));
        Arc::new(
            (0..kernels)
                .map(|k| Doorbell::counted(awake.clone(), k))
                .collect(),
        )
    }

    /// Kernel `k`'s doorbell put to sleep until rung (or for 10 s), on a
    /// thread of its own; returns that thread once it sleeps.
    fn doze(bells: &Arc<Vec<Doorbell>>, k: usize) -> std::thread::JoinHandle<()> {
        let b = bells.clone();
        let t = std::thread::spawn(move || {
            b[k].bind_current_thread();
            b[k].sleep(Some(Duration::from_secs(10)));
        });
        while !bells[k].sleeping.load(SeqCst) {
            std::thread::yield_now();
        }
        t
    }

    #[test]
    fn a_node_is_all_awake_until_one_of_its_kernels_sleeps() {
        for pinned in [false, true] {
            let bells = node_bells(3, 2, pinned);
            assert!(bells.iter().all(|b| b.all_awake()));
            let sleeper = doze(&bells, 2);
            // It counts itself asleep just after it says it sleeps.
            let t = Instant::now();
            while bells[0].all_awake() && t.elapsed() < Duration::from_secs(10) {
                std::thread::yield_now();
            }
            assert!(bells.iter().all(|b| !b.all_awake()), "pinned: {pinned}");
            bells[2].ring();
            sleeper.join().expect("woke");
            assert!(bells.iter().all(|b| b.all_awake()), "pinned: {pinned}");
        }
        assert!(Doorbell::default().all_awake());
    }

    #[test]
    fn unpinned_kernels_may_poll_while_no_more_are_awake_than_cores() {
        let bells = node_bells(4, 2, false);
        assert!(!bells[0].room_to_poll(), "4 awake on 2 cores");
        let two = doze(&bells, 2);
        assert!(!bells[0].room_to_poll(), "3 awake");
        let three = doze(&bells, 3);
        assert!(bells[0].room_to_poll(), "2 awake");
        bells[2].ring();
        assert!(
            !bells[0].room_to_poll(),
            "rung: counted awake before it runs"
        );
        bells[3].ring();
        two.join().unwrap();
        three.join().unwrap();
        assert!(!bells[0].room_to_poll(), "all 4 awake again");
    }

    #[test]
    fn pinned_kernels_may_poll_while_alone_awake_on_their_core() {
        // Kernels 0, 2 and 4 on core 0; 1 and 3 on core 1.
        let bells = node_bells(5, 2, true);
        assert!(!bells[1].room_to_poll());
        let three = doze(&bells, 3);
        assert!(bells[1].room_to_poll(), "alone on core 1");
        assert!(!bells[0].room_to_poll(), "core 0 has three");
        let two = doze(&bells, 2);
        let four = doze(&bells, 4);
        assert!(bells[0].room_to_poll(), "alone on core 0");
        for k in [2, 3, 4] {
            bells[k].ring();
        }
        for t in [two, three, four] {
            t.join().unwrap();
        }
        assert!(!bells[1].room_to_poll());
    }

    #[test]
    fn ring_before_sleep_is_not_lost() {
        let d = Doorbell::default();
        d.bind_current_thread();
        d.ring();
        let t = Instant::now();
        d.sleep(Some(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(d.take());
        assert!(!d.is_pending());
    }

    #[test]
    fn ring_wakes_a_sleeper() {
        let d = Arc::new(Doorbell::default());
        let d2 = d.clone();
        let sleeper = std::thread::spawn(move || {
            d2.bind_current_thread();
            while !d2.take() {
                d2.sleep(None);
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        d.ring();
        sleeper.join().unwrap();
    }
}
