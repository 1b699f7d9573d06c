//! Frames: how messages travel on a link between nodes.
//!
//! A frame is a little-endian `u32` length, then that many bytes: a `u16`
//! format version, a postcard-encoded message, and the message's tail: raw
//! bytes (a process image, a file's data) that the sender writes from where
//! they lie instead of copying them into the frame. The reader is told the
//! largest frame its link accepts (small for control, large for bulk) and
//! refuses a longer one before allocating for it, so a garbled or hostile
//! peer can make a link fail but never make a node allocate at will. A
//! frame that does not decode is an error for that link: its caller closes
//! it, and nothing else is disturbed.

use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The frame format this atoll speaks. A peer speaking another is refused.
/// 2: remote file ops; open files name their owner.
/// 3: a process's spec and UArea carry its resource limits.
/// 4: the DQDT's messages; UAreas say whether a process is pinned.
/// 5: stdin and the console's drain cross nodes; UAreas count the backlog.
/// 6: bulk bytes travel as the frame's tail, after the message.
/// 7: asynchronous letters (`senda`) and their confirmations; UAreas number
///    them per pair.
/// 8: domain ids are 64-bit (the node's id above 40 bits of sequence).
/// 9: the balancer's `Shed` says whether its taker is idle (work stealing).
/// 10: migration reports carry the downtime in nanoseconds.
/// 11: a module is read from another node's directory (`ReadModule`); open
///     files name their open, held by their node (`FileClosed`,
///     `FilesReleased`).
/// 12: a letter carries the confirmation of letters its sender took.
/// 13: a fork tells the holders of its parent's files (`FilesShared`); a
///     spawn's UArea may name a module already fetched; a kernel's report
///     counts the files it holds for other nodes.
/// 14: a migration's times say when its image was sent (`Times::sent_ns`),
///     for a destination on another clock; a kernel's report says the rate
///     its balancer expects of a copy to another node.
/// 15: a kernel's report counts the balancer's moves it called off
///     (`balancer_called_off`).
/// 16: UAreas name the node of a process's last console write, and keep
///     how a process that ended waits for its output (`UArea::ending`).
/// 17: a migration's mode may be post-copy (`Mode::PostCopy`), and a
///     pre-copy frame says whether the memory follows the freeze
///     (`MigrationMsg::Round::memory_follows`).
pub const VERSION: u16 = 17;

/// Bytes of the length prefix.
const LEN: usize = 4;
/// Bytes of the version, counted in the length.
const VERSION_LEN: usize = 2;
/// Bytes allocated ahead of what has arrived.
const GROW: u64 = 1 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("link: {0}")]
    Io(#[from] io::Error),
    #[error("frame of {len} bytes is larger than the link's {max}")]
    TooLarge { len: u64, max: u32 },
    #[error("frame of {len} bytes is too short to hold a version")]
    TooShort { len: u32 },
    #[error("frame format version {0} is not supported (this atoll speaks {VERSION})")]
    Version(u16),
    #[error("frame does not decode: {0}")]
    Decode(postcard::Error),
    #[error("message does not encode: {0}")]
    Encode(postcard::Error),
}

/// Encodes `msg` as one frame.
///
/// # Errors
/// `Encode` when serde refuses the message; `TooLarge` past 4 GiB.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    encode_head(msg, 0)
}

/// Encodes `msg` as the head of a frame whose tail, `tail` bytes, the
/// sender writes right after it.
///
/// # Errors
/// `Encode` when serde refuses the message; `TooLarge` past 4 GiB.
pub fn encode_head<T: Serialize>(msg: &T, tail: usize) -> Result<Vec<u8>, FrameError> {
    let mut frame = vec![0u8; LEN];
    frame.extend_from_slice(&VERSION.to_le_bytes());
    let mut frame = postcard::to_extend(msg, frame).map_err(FrameError::Encode)?;
    let len = frame.len() - LEN + tail;
    let len32 = u32::try_from(len).map_err(|_| FrameError::TooLarge {
        len: len as u64,
        max: u32::MAX,
    })?;
    frame[..LEN].copy_from_slice(&len32.to_le_bytes());
    Ok(frame)
}

/// Writes `msg` as one frame.
pub fn write<T: Serialize>(w: &mut impl Write, msg: &T) -> Result<(), FrameError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Reads one frame of at most `max` bytes (after the length prefix).
///
/// # Errors
/// `Io` (end of stream is `UnexpectedEof`), `TooLarge` before anything past
/// the prefix is read, `TooShort`, `Version`, `Decode`.
pub fn read<T: DeserializeOwned>(r: &mut impl Read, max: u32) -> Result<T, FrameError> {
    let mut prefix = [0u8; LEN];
    r.read_exact(&mut prefix)?;
    let len = check_len(prefix, max)?;
    let mut body = Vec::with_capacity(len.min(GROW) as usize);
    r.take(len).read_to_end(&mut body)?;
    decode(&body, len)
}

/// As [`read`], from an asynchronous stream (a link's connection).
pub async fn read_async<T: DeserializeOwned>(
    r: &mut (impl AsyncRead + Unpin),
    max: u32,
) -> Result<T, FrameError> {
    let mut prefix = [0u8; LEN];
    r.read_exact(&mut prefix).await?;
    let len = check_len(prefix, max)?;
    let mut body = Vec::with_capacity(len.min(GROW) as usize);
    r.take(len).read_to_end(&mut body).await?;
    decode(&body, len)
}

/// Cuts a byte stream into frames as its bytes arrive, for a reader that
/// cannot wait for a whole frame (a link's non-blocking connection). The
/// length of a frame is checked against the link's largest as soon as its
/// prefix is in, and the buffer grows only with bytes that arrived. The
/// tail of a large frame (a process image, a copy's bytes) is read into a
/// vector of its own as soon as the message before it is in, and handed
/// over as it is: its bytes are copied once, from the stream, not into
/// the buffer and out again.
pub struct Frames {
    /// Zeroed once as it grows, so that reading into it costs no zeroing.
    buf: Vec<u8>,
    /// Where the first frame not yet taken starts.
    start: usize,
    /// Where the bytes that arrived end.
    end: usize,
    max: u32,
    /// The tail of the frame at `start`, arriving.
    tail: Option<Tail>,
}

/// A large frame's tail, read apart from the buffer.
struct Tail {
    /// Bytes of the frame before it, in the buffer from `start`.
    head: usize,
    /// As long as the tail, zeroed when made.
    bytes: Vec<u8>,
    /// Bytes of it that arrived.
    filled: usize,
}

/// The least room made in the buffer before reading into it.
const FILL: usize = 64 << 10;
/// A buffer emptied after growing past this is given back.
const KEEP: usize = 16 << 20;
/// Frames at least this long have their tail read apart.
const APART: u64 = 256 << 10;

impl Frames {
    /// Frames of at most `max` bytes (after the length prefix).
    pub fn new(max: u32) -> Frames {
        Frames {
            buf: Vec::new(),
            start: 0,
            end: 0,
            max,
            tail: None,
        }
    }

    /// Takes what `r` has now, until it would block. Returns `false` when
    /// `r` is at its end.
    ///
    /// # Errors
    /// What `r` gives other than `WouldBlock`.
    pub fn fill(&mut self, r: &mut impl Read) -> io::Result<bool> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            let into_tail = self.tail.as_ref().is_some_and(|t| t.filled < t.bytes.len());
            if !into_tail && self.buf.len() - self.end < FILL {
                let grown = (self.buf.len() * 2).max(self.end + FILL);
                self.buf.resize(grown, 0);
            }
            let room = match &mut self.tail {
                Some(t) if into_tail => &mut t.bytes[t.filled..],
                _ => &mut self.buf[self.end..],
            };
            match r.read(room) {
                Ok(0) => return Ok(false),
                Ok(n) => match &mut self.tail {
                    Some(t) if into_tail => t.filled += n,
                    _ => self.end += n,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The next whole frame, if it is all in: its message and its tail.
    ///
    /// # Errors
    /// `TooLarge` as soon as the prefix is in, `TooShort`, `Version`,
    /// `Decode`: the stream cannot be read further.
    pub fn take<T: DeserializeOwned>(&mut self) -> Result<Option<(T, Vec<u8>)>, FrameError> {
        let avail = &self.buf[self.start..self.end];
        if let Some(tail) = &self.tail {
            if tail.filled < tail.bytes.len() {
                return Ok(None);
            }
            let head = &avail[LEN..tail.head];
            let (msg, _) = decode_with_tail(head, head.len() as u64)?;
            self.start += tail.head;
            let tail = self.tail.take().expect("checked above").bytes;
            self.emptied();
            return Ok(Some((msg, tail)));
        }
        let Some(prefix) = avail.first_chunk::<LEN>() else {
            return Ok(None);
        };
        let len = check_len(*prefix, self.max)?;
        let Some(body) = avail[LEN..].get(..len as usize) else {
            if len >= APART {
                self.read_tail_apart::<T>(len)?;
            }
            return Ok(None);
        };
        let (msg, tail) = decode_with_tail(body, len)?;
        let msg = (msg, tail.to_vec());
        self.start += LEN + len as usize;
        self.emptied();
        Ok(Some(msg))
    }

    /// The frame at `start`, `len` bytes long, is not all in: once the
    /// message before its tail is, the rest of the tail goes to a vector of
    /// its own.
    fn read_tail_apart<T: DeserializeOwned>(&mut self, len: u64) -> Result<(), FrameError> {
        let body = &self.buf[self.start + LEN..self.end];
        let Some(version) = body.first_chunk::<VERSION_LEN>() else {
            return Ok(());
        };
        let version = u16::from_le_bytes(*version);
        if version != VERSION {
            return Err(FrameError::Version(version));
        }
        // Not decoded yet: more of the message is to come (or it is
        // garbled, which the whole frame will show).
        let Ok((_, rest)) = postcard::take_from_bytes::<T>(&body[VERSION_LEN..]) else {
            return Ok(());
        };
        let head = body.len() - rest.len();
        let mut bytes = vec![0u8; len as usize - head];
        bytes[..rest.len()].copy_from_slice(rest);
        self.tail = Some(Tail {
            head: LEN + head,
            bytes,
            filled: rest.len(),
        });
        // What followed the message is the tail's now.
        self.end = self.start + LEN + head;
        Ok(())
    }

    /// After a frame was taken: an empty buffer starts over, and is given
    /// back if it grew large.
    fn emptied(&mut self) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            if self.buf.len() > KEEP {
                self.buf = Vec::new();
            }
        }
    }
}

fn check_len(prefix: [u8; LEN], max: u32) -> Result<u64, FrameError> {
    let len = u32::from_le_bytes(prefix);
    if len > max {
        return Err(FrameError::TooLarge {
            len: len.into(),
            max,
        });
    }
    if (len as usize) < VERSION_LEN {
        return Err(FrameError::TooShort { len });
    }
    Ok(len.into())
}

/// Decodes a frame's body, which should be `len` bytes long.
fn decode<T: DeserializeOwned>(body: &[u8], len: u64) -> Result<T, FrameError> {
    decode_with_tail(body, len).map(|(msg, _)| msg)
}

/// Decodes a frame's body into its message and its tail.
fn decode_with_tail<T: DeserializeOwned>(body: &[u8], len: u64) -> Result<(T, &[u8]), FrameError> {
    if (body.len() as u64) < len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    let version = u16::from_le_bytes([body[0], body[1]]);
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    postcard::take_from_bytes(&body[VERSION_LEN..]).map_err(FrameError::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    enum Msg {
        Ping(u64),
        Bulk(Vec<u8>),
    }

    #[test]
    fn frames_round_trip_back_to_back() {
        let mut wire = Vec::new();
        write(&mut wire, &Msg::Ping(7)).unwrap();
        write(&mut wire, &Msg::Bulk(vec![1; 1000])).unwrap();
        let mut r = wire.as_slice();
        assert_eq!(read::<Msg>(&mut r, 4096).unwrap(), Msg::Ping(7));
        assert_eq!(read::<Msg>(&mut r, 4096).unwrap(), Msg::Bulk(vec![1; 1000]));
        assert!(
            matches!(read::<Msg>(&mut r, 4096), Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof)
        );
    }

    #[test]
    fn a_long_frame_is_refused_before_it_is_read() {
        let frame = encode(&Msg::Bulk(vec![0; 100])).unwrap();
        let err = read::<Msg>(&mut frame.as_slice(), 64).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { max: 64, .. }), "{err}");
        // A length of 4 GiB with nothing behind it allocates nothing.
        let huge = u32::MAX.to_le_bytes();
        assert!(matches!(
            read::<Msg>(&mut huge.as_slice(), 1 << 20),
            Err(FrameError::TooLarge { .. })
        ));
    }

    /// Gives its bytes a few at a time, then would block.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = self.1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn frames_are_cut_from_pieces_of_any_size() {
        let mut wire = Vec::new();
        write(&mut wire, &Msg::Ping(7)).unwrap();
        write(&mut wire, &Msg::Bulk(vec![3; 5000])).unwrap();
        write(&mut wire, &Msg::Ping(8)).unwrap();
        wire.extend(encode_head(&Msg::Ping(9), 3).unwrap());
        wire.extend([1, 2, 3]);
        for piece in [1, 3, 7, 100, 4096, wire.len()] {
            let mut frames = Frames::new(1 << 20);
            let (mut got, mut tails) = (Vec::new(), Vec::new());
            for bytes in wire.chunks(piece) {
                assert!(frames.fill(&mut Trickle(bytes, 5)).unwrap());
                while let Some((m, tail)) = frames.take::<Msg>().unwrap() {
                    got.push(m);
                    tails.push(tail);
                }
            }
            assert_eq!(
                got,
                [
                    Msg::Ping(7),
                    Msg::Bulk(vec![3; 5000]),
                    Msg::Ping(8),
                    Msg::Ping(9)
                ],
                "pieces of {piece}"
            );
            assert_eq!(tails, [vec![], vec![], vec![], vec![1, 2, 3]]);
        }
        // A reader at its end says so.
        assert!(!Frames::new(64).fill(&mut [].as_slice()).unwrap());
    }

    #[test]
    fn a_long_frame_is_refused_from_its_prefix_alone() {
        let mut frames = Frames::new(64);
        frames
            .fill(&mut Trickle(&u32::MAX.to_le_bytes(), 4))
            .unwrap();
        assert!(matches!(
            frames.take::<Msg>(),
            Err(FrameError::TooLarge { max: 64, .. })
        ));
        let mut frames = Frames::new(64);
        let mut garbled = encode(&Msg::Ping(1)).unwrap();
        let other = VERSION + 1;
        garbled[LEN..LEN + VERSION_LEN].copy_from_slice(&other.to_le_bytes());
        frames.fill(&mut Trickle(&garbled, 100)).unwrap();
        assert!(matches!(frames.take::<Msg>(), Err(FrameError::Version(v)) if v == other));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut frame = encode(&Msg::Ping(1)).unwrap();
        let other = VERSION + 1;
        frame[LEN..LEN + VERSION_LEN].copy_from_slice(&other.to_le_bytes());
        assert!(matches!(
            read::<Msg>(&mut frame.as_slice(), 64),
            Err(FrameError::Version(v)) if v == other
        ));
        let mut bad_variant = encode(&Msg::Ping(1)).unwrap();
        bad_variant[LEN + VERSION_LEN] = 200;
        assert!(matches!(
            read::<Msg>(&mut bad_variant.as_slice(), 64),
            Err(FrameError::Decode(_))
        ));
        let short = [1u8, 0, 0, 0, 1];
        assert!(matches!(
            read::<Msg>(&mut short.as_slice(), 64),
            Err(FrameError::TooShort { len: 1 })
        ));
        // Truncated: the length promises more than arrives.
        let whole = encode(&Msg::Bulk(vec![5; 50])).unwrap();
        assert!(matches!(
            read::<Msg>(&mut &whole[..20], 4096),
            Err(FrameError::Io(_))
        ));
    }

    #[test]
    fn a_large_tail_is_read_apart_and_handed_over_whole() {
        let tail: Vec<u8> = (0..APART as usize + 5000)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut wire = Vec::new();
        write(&mut wire, &Msg::Ping(1)).unwrap();
        wire.extend(encode_head(&Msg::Ping(2), tail.len()).unwrap());
        wire.extend(&tail);
        write(&mut wire, &Msg::Bulk(vec![5; 10])).unwrap();
        for piece in [3, 1000, 65536, wire.len()] {
            let mut frames = Frames::new(u32::MAX);
            let mut got = Vec::new();
            let mut largest_buffer = 0;
            for bytes in wire.chunks(piece) {
                assert!(frames.fill(&mut Trickle(bytes, 7000)).unwrap());
                largest_buffer = largest_buffer.max(frames.buf.len());
                while let Some(frame) = frames.take::<Msg>().unwrap() {
                    got.push(frame);
                }
            }
            assert_eq!(
                got,
                [
                    (Msg::Ping(1), vec![]),
                    (Msg::Ping(2), tail.clone()),
                    (Msg::Bulk(vec![5; 10]), vec![])
                ],
                "pieces of {piece}"
            );
            if piece < APART as usize {
                // The tail never went through the buffer.
                assert!(largest_buffer < APART as usize, "pieces of {piece}");
            }
        }
    }

    #[test]
    fn a_large_frame_of_another_version_is_refused_before_its_tail() {
        let mut head = encode_head(&Msg::Ping(2), APART as usize).unwrap();
        head[LEN..LEN + VERSION_LEN].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let mut frames = Frames::new(u32::MAX);
        frames.fill(&mut Trickle(&head, 100)).unwrap();
        assert!(matches!(frames.take::<Msg>(), Err(FrameError::Version(_))));
    }
}
