//! The fixed-size message and the call kinds a receiver is told about.

use atoll_abi::Pid;
use serde::{Deserialize, Serialize};
use serde_big_array::BigArray;

/// Bytes in a message: one cache line, one NoC mailbox slot's payload.
pub const MESSAGE_SIZE: usize = 64;
/// `m_source` (i64) and `m_type` (i32) come first; the payload follows.
pub const PAYLOAD_OFFSET: usize = 12;
/// Bytes of payload. Minix 3 has 56 with a 32-bit endpoint; atoll's endpoint
/// is a 64-bit global PID, so 52 remain (M3-IPC's whole message was 36).
pub const PAYLOAD_SIZE: usize = MESSAGE_SIZE - PAYLOAD_OFFSET;
/// `m_type` of a message made by `notify` (Minix's `NOTIFY_MESSAGE`).
pub const NOTIFY_MESSAGE: i32 = 0x1000;

/// A message as it lies in guest memory: `{ i64 m_source; i32 m_type; u8
/// payload[52]; }`, little-endian. The kernel fills in `m_source`, so a
/// receiver always knows who really sent it.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message(#[serde(with = "BigArray")] [u8; MESSAGE_SIZE]);

impl Message {
    pub fn from_bytes(bytes: &[u8; MESSAGE_SIZE]) -> Self {
        Message(*bytes)
    }

    pub fn as_bytes(&self) -> &[u8; MESSAGE_SIZE] {
        &self.0
    }

    /// The message `notify` delivers: from `source`, of type
    /// [`NOTIFY_MESSAGE`], with an empty payload.
    pub fn notification(source: Pid) -> Self {
        let mut m = Message([0; MESSAGE_SIZE]);
        m.set_source(source);
        m.0[8..12].copy_from_slice(&NOTIFY_MESSAGE.to_le_bytes());
        m
    }

    pub fn source(&self) -> i64 {
        i64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }

    pub fn set_source(&mut self, pid: Pid) {
        self.0[..8].copy_from_slice(&pid.to_abi().to_le_bytes());
    }

    pub fn kind(&self) -> i32 {
        i32::from_le_bytes(self.0[8..12].try_into().expect("4 bytes"))
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Message {{ source: {}, type: {} }}",
            self.source(),
            self.kind()
        )
    }
}

/// How a message was sent, as the receiver's `status` reports it (Minix's
/// call numbers, so `IPC_STATUS_CALL` reads the same).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum CallKind {
    Send = 1,
    SendRec = 3,
    Notify = 4,
    SendNb = 5,
    /// Asynchronous: the sender did not wait (Minix's `SENDA`).
    SendA = 16,
}

/// The bit of a receiver's status word that says a receive from the same
/// source would take another message at once (`IPC_STATUS_MORE`): a
/// library that drains what came (MPI's progress) stops without a last
/// `receivenb` that finds nothing.
pub const STATUS_MORE: u32 = 1 << 31;

impl CallKind {
    /// The value written to the receiver's status word: the call, the
    /// length of the message's body above it (`IPC_STATUS_BODY`), and
    /// [`STATUS_MORE`] if `more`.
    pub fn status(self, body: Option<&[u8]>, more: bool) -> u32 {
        let more = if more { STATUS_MORE } else { 0 };
        self as u32 | (body.map_or(0, <[u8]>::len) as u32) << 8 | more
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_abi::KernelId;

    #[test]
    fn layout() {
        let pid = Pid::new(KernelId::new(1, 2), 3, 4);
        let m = Message::notification(pid);
        assert_eq!(m.source(), pid.to_abi());
        assert_eq!(m.kind(), NOTIFY_MESSAGE);
        assert!(m.as_bytes()[PAYLOAD_OFFSET..].iter().all(|&b| b == 0));
        let bytes = postcard::to_allocvec(&m).unwrap();
        assert_eq!(postcard::from_bytes::<Message>(&bytes).unwrap(), m);
    }

    #[test]
    fn status_word_holds_call_body_and_more_apart() {
        let body = vec![0; crate::state::BODY_MAX];
        let status = CallKind::SendA.status(Some(&body), true);
        assert_eq!(status & 0xFF, CallKind::SendA as u32, "IPC_STATUS_CALL");
        assert_eq!(
            (status >> 8) & 0x7F_FFFF,
            body.len() as u32,
            "IPC_STATUS_BODY"
        );
        assert_eq!(status >> 31, 1, "IPC_STATUS_MORE");
        assert_eq!(CallKind::Send.status(None, false), CallKind::Send as u32);
    }
}
