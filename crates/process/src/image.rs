//! A process image: everything a process is, as bytes.
//!
//! An image holds the UArea, the values of the module's mutable globals and
//! the non-zero pages of linear memory (which include the saved stack). The
//! code is not in it: it is named by the UArea's content hash and is the same
//! on every kernel. Images are what a process is restored from, on any
//! kernel, and the payload of migration and checkpoint files.
//!
//! Encoding: `ATOLLIMG`, a format version (u16 LE), the payload length (u64
//! LE), a CRC-32 of the payload (u32 LE), then the payload (postcard). A
//! damaged, truncated or foreign file is refused with a precise error.

use serde::{Deserialize, Serialize};

use crate::uarea::UArea;

/// Bytes in one WebAssembly page.
pub const PAGE_SIZE: usize = 65536;

const MAGIC: &[u8; 8] = b"ATOLLIMG";
const VERSION: u16 = 1;
const HEADER: usize = 8 + 2 + 8 + 4;

/// The whole state of a stopped process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProcessImage {
    pub uarea: UArea,
    /// `atoll_global_N` exports and their values.
    pub globals: Vec<(String, GlobalValue)>,
    pub memory: MemoryImage,
}

/// The value of one global, bit-exact.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum GlobalValue {
    I32(i32),
    I64(i64),
    F32(u32),
    F64(u64),
}

/// Linear memory: its size, and the pages that are not all zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryImage {
    pub pages: u32,
    pub data: Vec<(u32, Vec<u8>)>,
}

impl MemoryImage {
    /// Captures `bytes` (a whole linear memory), leaving zero pages out.
    pub fn capture(bytes: &[u8]) -> Self {
        let data = bytes
            .chunks(PAGE_SIZE)
            .enumerate()
            .filter(|(_, page)| page.iter().any(|&b| b != 0))
            .map(|(i, page)| (i as u32, page.to_vec()))
            .collect();
        MemoryImage {
            pages: bytes.len().div_ceil(PAGE_SIZE) as u32,
            data,
        }
    }

    /// Bytes of page data the image carries.
    pub fn data_bytes(&self) -> usize {
        self.data.iter().map(|(_, p)| p.len()).sum()
    }
}

/// Why an image could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("not an atoll process image (bad magic)")]
    BadMagic,
    #[error(
        "process image format version {0} is not supported (this atoll reads version {VERSION})"
    )]
    Version(u16),
    #[error("process image is truncated: {have} bytes, {need} expected")]
    Truncated { have: usize, need: usize },
    #[error("process image is corrupted (checksum mismatch)")]
    Checksum,
    #[error("process image payload is malformed: {0}")]
    Payload(#[from] postcard::Error),
}

impl ProcessImage {
    /// Encodes the image with its header and checksum.
    pub fn encode(&self) -> Vec<u8> {
        let payload = postcard::to_stdvec(self).expect("images always serialize");
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// Decodes and checks an encoded image.
    ///
    /// # Errors
    /// [`ImageError`] says whether the bytes are foreign, from another format
    /// version, truncated, damaged or malformed.
    pub fn decode(bytes: &[u8]) -> Result<Self, ImageError> {
        if bytes.len() < HEADER {
            return Err(if bytes.starts_with(&MAGIC[..bytes.len().min(8)]) {
                ImageError::Truncated {
                    have: bytes.len(),
                    need: HEADER,
                }
            } else {
                ImageError::BadMagic
            });
        }
        if &bytes[..8] != MAGIC {
            return Err(ImageError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != VERSION {
            return Err(ImageError::Version(version));
        }
        let len = u64::from_le_bytes(bytes[10..18].try_into().expect("8 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[18..22].try_into().expect("4 bytes"));
        let payload = &bytes[HEADER..];
        if payload.len() < len {
            return Err(ImageError::Truncated {
                have: bytes.len(),
                need: HEADER + len,
            });
        }
        let payload = &payload[..len];
        if crc32fast::hash(payload) != crc {
            return Err(ImageError::Checksum);
        }
        Ok(postcard::from_bytes(payload)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd::FdTable;
    use crate::uarea::ConsoleId;
    use atoll_abi::{KernelId, Pid};

    fn image() -> ProcessImage {
        let pid = Pid::new(KernelId::new(0, 1), 2, 3);
        let hash = atoll_prepare::content_hash(b"module");
        let uarea = UArea::new(
            pid,
            None,
            hash,
            vec!["a".into()],
            vec![],
            ConsoleId(7),
            FdTable::new(&[]),
            None,
        );
        let mut mem = vec![0u8; 3 * PAGE_SIZE];
        mem[PAGE_SIZE + 5] = 9;
        ProcessImage {
            uarea,
            globals: vec![("atoll_global_0".into(), GlobalValue::I32(-4))],
            memory: MemoryImage::capture(&mem),
        }
    }

    #[test]
    fn round_trip_keeps_only_nonzero_pages() {
        let img = image();
        assert_eq!(img.memory.pages, 3);
        assert_eq!(img.memory.data.len(), 1);
        let back = ProcessImage::decode(&img.encode()).unwrap();
        assert_eq!(back.memory, img.memory);
        assert_eq!(back.globals, img.globals);
        assert_eq!(back.uarea.pid, img.uarea.pid);
    }

    #[test]
    fn damaged_images_are_refused() {
        let bytes = image().encode();
        assert!(matches!(
            ProcessImage::decode(b"hello"),
            Err(ImageError::BadMagic)
        ));
        assert!(matches!(
            ProcessImage::decode(&bytes[..5]),
            Err(ImageError::Truncated { .. })
        ));
        assert!(matches!(
            ProcessImage::decode(&bytes[..bytes.len() - 1]),
            Err(ImageError::Truncated { .. })
        ));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            ProcessImage::decode(&flipped),
            Err(ImageError::Checksum)
        ));
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert!(matches!(
            ProcessImage::decode(&v2),
            Err(ImageError::Version(2))
        ));
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = ProcessImage::decode(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&bytes);
            let _ = ProcessImage::decode(&framed);
        }
    }
}
