//! When pre-copy stops.
//!
//! Round 0 sends every non-zero block while the process keeps running (in
//! chunks, between its slices);
//! round n sends the blocks written during round n-1. Xen (seed 002) stops
//! when the dirty set is small, when it no longer shrinks (the process
//! writes its working set as fast as it is sent: the writable working set)
//! or after a fixed number of rounds. The process is then frozen and what
//! is still dirty goes in the stop-and-copy, which is the downtime.

/// The stop conditions of pre-copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundPolicy {
    /// Rounds after which the process is frozen whatever its dirty set.
    /// Zero disables pre-copy: the process is frozen at once.
    pub max_rounds: u32,
    /// A dirty set this small (bytes) is sent in the stop-and-copy.
    pub small_bytes: u64,
    /// Round 0 goes out in pieces of this many bytes, each when the
    /// window has room: the source kernel copies memory on the same core
    /// the process runs on, and a whole large memory at once would stall
    /// the process as long as a stop-and-copy.
    pub chunk_bytes: u64,
    /// Pieces of round 0 sent to another node and not yet applied there,
    /// at most: the next piece goes out while the link carries the previous
    /// ones (between machines the link, not the copy, sets the pace; within
    /// a node one piece at a time keeps up). The later rounds, and the
    /// freeze, wait until every frame is applied, so that the stop-and-copy
    /// never queues behind them.
    pub window: u32,
}

impl Default for RoundPolicy {
    fn default() -> Self {
        RoundPolicy {
            max_rounds: 8,
            small_bytes: 256 << 10,
            chunk_bytes: 4 << 20,
            window: 4,
        }
    }
}

/// What to do after a pre-copy round found `dirty` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send them in another round while the process runs.
    Round,
    /// Freeze the process; the reason is logged.
    Freeze(&'static str),
}

impl RoundPolicy {
    /// `rounds` pre-copy rounds have been sent; the last sent `previous`
    /// bytes, and `dirty` bytes were written since.
    pub fn next(&self, rounds: u32, previous: u64, dirty: u64) -> Next {
        if dirty <= self.small_bytes {
            Next::Freeze("dirty set is small")
        } else if rounds >= self.max_rounds {
            Next::Freeze("round limit")
        } else if rounds > 1 && dirty >= previous {
            Next::Freeze("dirty set no longer shrinks")
        } else {
            Next::Round
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_when_small_stalled_or_at_the_limit() {
        let p = RoundPolicy {
            max_rounds: 4,
            small_bytes: 100,
            ..RoundPolicy::default()
        };
        assert_eq!(p.next(1, 10_000, 50), Next::Freeze("dirty set is small"));
        assert_eq!(p.next(1, 10_000, 5_000), Next::Round);
        assert_eq!(p.next(2, 5_000, 4_000), Next::Round);
        assert_eq!(
            p.next(3, 4_000, 4_000),
            Next::Freeze("dirty set no longer shrinks")
        );
        assert_eq!(p.next(4, 4_000, 1_000), Next::Freeze("round limit"));
    }

    #[test]
    fn the_first_round_always_gets_a_second_chance() {
        // Round 0 sends everything, so its size says nothing about the
        // working set: a larger dirty set after it does not stop pre-copy.
        let p = RoundPolicy::default();
        assert_eq!(p.next(1, 1 << 20, 2 << 20), Next::Round);
    }
}
