//! Whether the links' thread has work: for kernels that poll only in case
//! an answer comes, which then leave it the core.
//!
//! A kernel that talked with another node lately keeps polling a while
//! before it sleeps ([`Uplink::busy`](crate::Uplink::busy)), but never at the
//! cost of the links' thread: on a machine whose cores all run kernels,
//! a polling kernel would hold the core that thread needs to write a
//! migration's pre-copy or the end of a large copy. The thread has work
//! while it is awake, while frames wait in a bulk lane's queue, and while
//! a connection holds encrypted bytes its socket did not take: those two
//! are counted from the moment they are left to it, since it may not be
//! running yet to say so.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// What the links' thread has to do, as seen by the kernels.
#[derive(Default)]
pub(super) struct LinksWork {
    /// The thread is running (tokio's park and unpark hooks).
    awake: AtomicBool,
    /// Frames and unwritten bytes left to it ([`Owed`]).
    owed: AtomicUsize,
}

impl LinksWork {
    /// The links' thread parks (`false`) or runs again (`true`).
    pub(super) fn set_awake(&self, awake: bool) {
        self.awake.store(awake, Ordering::Relaxed);
    }

    /// Counts one piece of work left to the thread until the guard drops.
    pub(super) fn owe(self: &Arc<Self>) -> Owed {
        self.owed.fetch_add(1, Ordering::Relaxed);
        Owed(self.clone())
    }

    /// Whether the thread is running or has work waiting for it.
    pub(super) fn busy(&self) -> bool {
        self.awake.load(Ordering::Relaxed) || self.owed.load(Ordering::Relaxed) > 0
    }
}

/// A piece of work left to the links' thread: a queued bulk frame, or a
/// connection's unwritten bytes. Dropped when done, or with its connection.
pub(super) struct Owed(Arc<LinksWork>);

impl Drop for Owed {
    fn drop(&mut self) {
        self.0.owed.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_owed_until_each_piece_is_done_and_while_the_thread_runs() {
        let work = Arc::new(LinksWork::default());
        assert!(!work.busy());
        let frame = work.owe();
        let bytes = work.owe();
        drop(frame);
        assert!(work.busy(), "one piece is left");
        drop(bytes);
        assert!(!work.busy());
        work.set_awake(true);
        assert!(work.busy());
        work.set_awake(false);
        assert!(!work.busy());
    }
}
