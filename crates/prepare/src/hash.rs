//! Content hashes of modules.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 of some bytes (a module, before or after preparation).
///
/// Displays and parses as 64 lowercase hex digits (parsing also accepts
/// uppercase), so it can be used in file names and in the
/// [`PREPARED_SECTION`](crate::conventions::PREPARED_SECTION) payload.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ContentHash(pub [u8; 32]);

/// Hashes `bytes` with SHA-256.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    ContentHash(Sha256::digest(bytes).into())
}

impl ContentHash {
    /// The 32 bytes of the digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

/// Why a string is not a [`ContentHash`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a sha256 content hash (expected 64 hex digits): {0}")]
pub struct ParseContentHashError(String);

impl FromStr for ContentHash {
    type Err = ParseContentHashError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut digest = [0u8; 32];
        hex::decode_to_slice(s, &mut digest).map_err(|e| ParseContentHashError(e.to_string()))?;
        Ok(ContentHash(digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        // sha256("abc") from FIPS 180-2.
        assert_eq!(
            content_hash(b"abc").to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn display_from_str_round_trip() {
        let h = content_hash(b"some module");
        let s = h.to_string();
        assert_eq!(s.len(), 64);
        assert_eq!(s.parse::<ContentHash>().unwrap(), h);
        assert_eq!(s.to_uppercase().parse::<ContentHash>().unwrap(), h);
    }

    #[test]
    fn rejects_bad_strings() {
        for bad in ["", "abc", &"0".repeat(63), &"0".repeat(65), &"g".repeat(64)] {
            assert!(bad.parse::<ContentHash>().is_err(), "{bad:?} parsed");
        }
    }
}
