//! How long an idle kernel keeps polling for another node's answer.
//!
//! A kernel with nothing to do polls before it sleeps: 50 us, the time
//! in which an answer from a kernel of its own node usually comes. An
//! answer from another node takes longer (a network trip, then that
//! node's work: restoring a forked child, running it, its exit's trip
//! back) and, once the kernel sleeps, arrives through the links' thread,
//! which must be woken and must wake the kernel: on the 2-core VM, most
//! of a cross-node fork's exit trip. So a kernel that talked with another
//! node lately polls until [`REMOTE_SPIN`] after that exchange.
//!
//! Not while a stream's large bulk bytes flow (a pre-copy round, in
//! either direction, within that window): encrypting and decrypting them
//! needs the cores, and a kernel polling for the next piece takes one. A
//! copy, a file op or a letter's body is no stream: each is awaited
//! alone, and the small answer that follows it at once is what the kernel
//! polls for (`Packet::stream_bytes`; when they closed the window, an
//! MPI message of 256 KiB between two nodes took 1.7x as long:
//! `docs/mpi.md`). And not
//! while the links' thread has work (the caller checks
//! [`Endpoint::links_busy`](atoll_noc::Endpoint::links_busy)). Messages
//! of the DQDT do not count: they come every tick whether anyone waits or
//! not.

use std::time::{Duration, Instant};

use atoll_noc::SMALL_BULK;

/// How long after its last exchange with another node an idle kernel
/// polls.
pub(crate) const REMOTE_SPIN: Duration = Duration::from_micros(500);

/// When this kernel last exchanged messages with other nodes.
#[derive(Default)]
pub(crate) struct RemoteTalk {
    /// The last message sent to or taken from another node.
    talked: Option<Instant>,
    /// The last one of them with more than [`SMALL_BULK`] bulk bytes of
    /// a stream.
    streamed: Option<Instant>,
}

impl RemoteTalk {
    /// A message with `bulk` bulk bytes of a stream (0 for any other
    /// message) went to, or came from, another node.
    pub(crate) fn exchanged(&mut self, bulk: usize) {
        let now = Instant::now();
        self.talked = Some(now);
        if bulk > SMALL_BULK {
            self.streamed = Some(now);
        }
    }

    /// Until when an idle kernel may poll for another node's answer, if
    /// it talked with one within `window` and no large bulk bytes of a
    /// stream flowed meanwhile.
    pub(crate) fn poll_until(&self, window: Duration) -> Option<Instant> {
        let talked = self.talked?;
        match self.streamed {
            Some(streamed) if streamed.elapsed() < window => None,
            _ => Some(talked + window),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(3600);

    #[test]
    fn a_small_exchange_opens_the_window_and_a_large_one_closes_it() {
        let mut talk = RemoteTalk::default();
        assert_eq!(talk.poll_until(WINDOW), None, "no exchange yet");
        talk.exchanged(0);
        let until = talk.poll_until(WINDOW).expect("an answer may come");
        assert!(until > Instant::now() + WINDOW / 2);
        talk.exchanged(SMALL_BULK);
        assert!(
            talk.poll_until(WINDOW).is_some(),
            "a forked child's image is small"
        );
        talk.exchanged(SMALL_BULK + 1);
        assert_eq!(talk.poll_until(WINDOW), None, "bytes are streaming");
    }

    #[test]
    fn the_window_passes() {
        let mut talk = RemoteTalk::default();
        talk.exchanged(0);
        let until = talk.poll_until(Duration::ZERO).expect("talked");
        assert!(until <= Instant::now());
        talk.exchanged(1 << 20);
        assert!(
            talk.poll_until(Duration::ZERO).is_some(),
            "the stream is over"
        );
    }
}
