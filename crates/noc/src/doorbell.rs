//! Sleep and wake-up for one kernel.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::OnceLock;
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
}

impl Doorbell {
    /// Binds the doorbell to the calling thread, which alone may [`sleep`](Self::sleep).
    pub fn bind_current_thread(&self) {
        let _ = self.owner.set(std::thread::current());
    }

    /// Says that work is waiting for the owner, waking it if it sleeps.
    pub fn ring(&self) {
        self.pending.store(true, SeqCst);
        if self.sleeping.load(SeqCst) && self.sleeping.swap(false, SeqCst) {
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
        if !self.pending.load(SeqCst) {
            match timeout {
                Some(t) => std::thread::park_timeout(t),
                None => std::thread::park(),
            }
        }
        self.sleeping.store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

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
