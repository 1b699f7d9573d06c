//! Frames: how messages travel on a link between nodes.
//!
//! A frame is a little-endian `u32` length, then that many bytes: a `u16`
//! format version and a postcard-encoded message. The reader is told the
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
pub const VERSION: u16 = 5;

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
    let mut frame = vec![0u8; LEN];
    frame.extend_from_slice(&VERSION.to_le_bytes());
    let mut frame = postcard::to_extend(msg, frame).map_err(FrameError::Encode)?;
    let len = frame.len() - LEN;
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
    if (body.len() as u64) < len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
    }
    let version = u16::from_le_bytes([body[0], body[1]]);
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    postcard::from_bytes(&body[VERSION_LEN..]).map_err(FrameError::Decode)
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

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut frame = encode(&Msg::Ping(1)).unwrap();
        frame[LEN] = 9; // version 9
        assert!(matches!(
            read::<Msg>(&mut frame.as_slice(), 64),
            Err(FrameError::Version(9))
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
}
