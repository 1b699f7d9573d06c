//! A process image: everything a process is, as bytes.
//!
//! An image holds the UArea, the values of the module's mutable globals and
//! linear memory (which includes the saved stack). The code is not in it: it
//! is named by the UArea's content hash and is the same on every kernel.
//!
//! One format serves checkpoint files and the migration stream. A
//! *complete* image (a checkpoint, or the first frame of a migration) holds
//! every block of memory that is not all zero; a *delta* (a later pre-copy
//! round, or the stop-and-copy) holds only the blocks written since the
//! previous frame, and is applied on top of it.
//!
//! Encoding: `ATOLLIMG`, a format version (u16 LE), the payload length (u64
//! LE), a CRC-32 of the payload (u32 LE), then the payload (postcard). A
//! damaged, truncated or foreign file is refused with a precise error. An
//! image in transit between kernels has no checksum (0): the NoC carries it
//! intact, in memory within a machine and over TLS between machines, whose
//! every record is authenticated; summing every byte at both ends cost
//! about 5 % of a migration's CPU between nodes.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::uarea::UArea;

/// Bytes in one WebAssembly page.
pub const PAGE_SIZE: usize = 65536;

/// Memory travels in blocks of the size dirty tracking works with.
pub use atoll_migration::BLOCK;

const MAGIC: &[u8; 8] = b"ATOLLIMG";
/// 2: memory in runs of 4 KiB blocks, complete or delta.
/// 3: each descriptor keeps its WASI rights mask.
/// 4: kernels and PIDs name their node.
/// 5: open files and directories name the kernel that owns them, and files
///    their device and inode.
/// 6: the UArea holds the process's resource limits.
/// 7: it says whether the balancer may move the process, and counts its moves.
/// 8: it counts the console output not yet passed on and the process quotas
///    it counts in; calls wait for stdin and for the console.
/// 9: its IPC state numbers the asynchronous letters (`senda`) it sent and
///    received, per peer.
/// 10: domain ids are 64-bit (the node's id above 40 bits of sequence).
/// 11: thread contexts are numbered, and a migration's last frame may give
///     a context as the number of one an earlier frame carried.
/// 12: its last migration's report carries the downtime in nanoseconds.
/// 13: an open file names its open (`FileFd::open`), the key of the host
///     handle its node holds for it; a spawn or exec may wait for a module
///     of another node (`SpawnModule::OtherNode`).
/// 14: a spawn or exec may wait for a module of another node already read
///     (`SpawnModule::Fetched`); a checkpoint keeps the bytes of open files
///     that have no name (`FileFd::ghost`).
/// 15: an asynchronous send says whether more letters follow it
///     (`IpcCall::SendA::more`).
/// 16: letters may carry a body (`IpcCall::SendA::body`, held with the
///     letter, `IpcState::body` once received).
/// 17: a drain says how far it waits for (`KernelCall::Drain::upto`), the
///     console's flow the node of the last write (`ConsoleFlow::from`),
///     and a process may have ended waiting for its output
///     (`UArea::ending`).
/// 18: a process that ended keeps its node's words about its end (a trap's
///     line) while they wait for its output (`Ending::words`).
/// 19: a migration's mode may be post-copy (`Mode::PostCopy`, in the
///     report of a process's last move, `Accounting::last_migration`).
const VERSION: u16 = 19;
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

/// Linear memory, or what changed in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryImage {
    /// Size in WebAssembly pages.
    pub pages: u32,
    /// `true`: blocks left out are zero. `false` (a delta): they are as the
    /// previous frame left them.
    pub complete: bool,
    /// Runs of consecutive blocks, in increasing order.
    pub runs: Vec<Run>,
}

/// Consecutive blocks of memory, starting at byte `at`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    pub at: u32,
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// A [`MemoryImage`] whose runs are borrowed: from the memory it was taken
/// from, or from the frame it was decoded from. It encodes and decodes
/// exactly as the image, so a migration encodes its frames straight from
/// the process's memory and applies them straight from the frame: one copy
/// at each end instead of two, and no image to allocate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryView<'a> {
    pub pages: u32,
    pub complete: bool,
    #[serde(borrow)]
    pub runs: Vec<RunView<'a>>,
}

/// A [`Run`], borrowed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct RunView<'a> {
    pub at: u32,
    #[serde(borrow, with = "serde_bytes")]
    pub bytes: &'a [u8],
}

impl<'a> MemoryView<'a> {
    /// `bytes` (a whole linear memory), leaving zero blocks out.
    pub fn whole(bytes: &'a [u8]) -> Self {
        let all = 0..bytes.len().div_ceil(BLOCK) as u32;
        MemoryView {
            complete: true,
            ..MemoryView::nonzero(bytes, all)
        }
    }

    /// The size of `bytes` alone: a complete image with no block, for a
    /// process whose blocks follow it ([`crate::postcopy`]).
    pub fn size_of(bytes: &'a [u8]) -> Self {
        MemoryView {
            pages: bytes.len().div_ceil(PAGE_SIZE) as u32,
            complete: true,
            runs: Vec::new(),
        }
    }

    /// The blocks of `range` that are not all zero, as a delta. Blocks
    /// with no page behind them are zero without being read.
    pub fn nonzero(bytes: &'a [u8], range: std::ops::Range<u32>) -> Self {
        MemoryView::blocks_of(bytes, nonzero_blocks(bytes, range))
    }

    /// The given blocks of `bytes` (ascending), as a delta.
    pub fn blocks_of(bytes: &'a [u8], blocks: impl IntoIterator<Item = u32>) -> Self {
        let mut runs: Vec<RunView<'a>> = Vec::new();
        for b in blocks {
            let at = b as usize * BLOCK;
            let end = (at + BLOCK).min(bytes.len());
            if at >= end {
                continue;
            }
            match runs.last_mut() {
                Some(run) if run.at as usize + run.bytes.len() == at => {
                    run.bytes = &bytes[run.at as usize..end];
                }
                _ => runs.push(RunView {
                    at: at as u32,
                    bytes: &bytes[at..end],
                }),
            }
        }
        MemoryView {
            pages: bytes.len().div_ceil(PAGE_SIZE) as u32,
            complete: false,
            runs,
        }
    }

    /// Writes the image into `memory`, which already has its size and is
    /// zero outside `dirty`: a complete image first clears those ranges
    /// (only them, so that a fresh instance's untouched pages stay so).
    ///
    /// # Errors
    /// A run outside `memory`, with what it names.
    pub fn write_into(
        &self,
        memory: &mut [u8],
        dirty: &[std::ops::Range<usize>],
    ) -> Result<(), String> {
        if self.complete {
            clear(memory, dirty);
        }
        for run in &self.runs {
            let at = run.at as usize;
            memory
                .get_mut(at..at + run.bytes.len())
                .ok_or_else(|| format!("memory run at {at} is out of range"))?
                .copy_from_slice(run.bytes);
        }
        Ok(())
    }

    /// The image, copied out of memory.
    pub fn to_image(&self) -> MemoryImage {
        MemoryImage {
            pages: self.pages,
            complete: self.complete,
            runs: self
                .runs
                .iter()
                .map(|r| Run {
                    at: r.at,
                    bytes: r.bytes.to_vec(),
                })
                .collect(),
        }
    }

    /// Bytes of memory it carries.
    pub fn data_bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes.len()).sum()
    }

    /// Blocks it carries.
    pub fn blocks(&self) -> usize {
        self.runs
            .iter()
            .map(|r| r.bytes.len().div_ceil(BLOCK))
            .sum()
    }
}

impl MemoryImage {
    /// Bytes of memory the image carries.
    pub fn data_bytes(&self) -> usize {
        self.runs.iter().map(|r| r.bytes.len()).sum()
    }

    /// The image as a view, to encode it.
    pub fn view(&self) -> MemoryView<'_> {
        MemoryView {
            pages: self.pages,
            complete: self.complete,
            runs: self
                .runs
                .iter()
                .map(|r| RunView {
                    at: r.at,
                    bytes: &r.bytes,
                })
                .collect(),
        }
    }

    /// Reads `out.len()` bytes at `at` from a complete image (blocks it
    /// leaves out are zero).
    pub fn read(&self, at: usize, out: &mut [u8]) {
        debug_assert!(self.complete, "a delta does not say what it leaves out");
        out.fill(0);
        let end = at + out.len();
        for run in &self.runs {
            let (start, stop) = (run.at as usize, run.at as usize + run.bytes.len());
            if stop <= at || start >= end {
                continue;
            }
            let (from, to) = (start.max(at), stop.min(end));
            out[from - at..to - at].copy_from_slice(&run.bytes[from - start..to - start]);
        }
    }
}

/// Copies the blocks of `from` that are not all zero into `to`, a memory
/// at least as large that is zero but for the `dirty` ranges (cleared
/// first): a fresh instance's memory. What [`MemoryView::whole`] then
/// [`MemoryView::write_into`] do, without the view between them.
pub fn copy_nonzero(from: &[u8], to: &mut [u8], dirty: &[std::ops::Range<usize>]) {
    clear(to, dirty);
    for b in nonzero_blocks(from, 0..from.len().div_ceil(BLOCK) as u32) {
        let at = b as usize * BLOCK;
        let end = (at + BLOCK).min(from.len());
        to[at..end].copy_from_slice(&from[at..end]);
    }
}

/// Makes `to`, a memory as large as `from` that held another process,
/// hold what `from` holds: the blocks of `from` that are not all zero are
/// copied, and the other blocks of `to` that have a page and are not all
/// zero are zeroed. One pass over each memory, where zeroing `to` first
/// and copying into it was two over `to`.
pub fn overwrite(from: &[u8], to: &mut [u8]) {
    let blocks = to.len().div_ceil(BLOCK) as u32;
    let mapped = crate::resident::mapped_blocks(to, 0..blocks);
    let zero = |to: &mut [u8], range: std::ops::Range<u32>| {
        for b in range {
            if mapped.as_ref().is_none_or(|m| m[b as usize]) {
                let at = b as usize * BLOCK;
                let end = (at + BLOCK).min(to.len());
                let block = &mut to[at..end];
                if !is_zero(block) {
                    block.fill(0);
                }
            }
        }
    };
    let mut next = 0;
    for b in nonzero_blocks(from, 0..from.len().div_ceil(BLOCK) as u32) {
        zero(to, next..b);
        let at = b as usize * BLOCK;
        let end = (at + BLOCK).min(from.len());
        to[at..end].copy_from_slice(&from[at..end]);
        next = b + 1;
    }
    zero(to, next..blocks);
}

/// The blocks of `bytes` that may hold data, as ranges of consecutive
/// blocks in increasing order: those with a page of their own, as the page
/// tables say without a byte being read, or where that cannot be asked,
/// those not all zero. Reading the first bytes of every block of 256 MiB
/// took 2.4 ms on the 2-core VM, the whole freeze of a post-copy.
pub fn mapped_ranges(bytes: &[u8]) -> Vec<std::ops::Range<u32>> {
    let blocks = bytes.len().div_ceil(BLOCK) as u32;
    let mut ranges: Vec<std::ops::Range<u32>> = Vec::new();
    let mut add = |b: u32| match ranges.last_mut() {
        Some(r) if r.end == b => r.end += 1,
        _ => ranges.push(b..b + 1),
    };
    match crate::resident::mapped_blocks(bytes, 0..blocks) {
        Some(mapped) => (0..blocks)
            .filter(|&b| mapped[b as usize])
            .for_each(&mut add),
        None => nonzero_blocks(bytes, 0..blocks).for_each(&mut add),
    }
    ranges
}

/// Zeroes the `dirty` ranges of `memory` (clipped to it).
fn clear(memory: &mut [u8], dirty: &[std::ops::Range<usize>]) {
    for range in dirty {
        let end = range.end.min(memory.len());
        memory[range.start.min(end)..end].fill(0);
    }
}

/// The blocks of `range` that are not all zero. Blocks with no page behind
/// them are zero without being read.
fn nonzero_blocks(bytes: &[u8], range: std::ops::Range<u32>) -> impl Iterator<Item = u32> + '_ {
    let mapped = crate::resident::mapped_blocks(bytes, range.clone());
    let start = range.start;
    range.filter(move |&b| {
        let at = b as usize * BLOCK;
        mapped.as_ref().is_none_or(|m| m[(b - start) as usize])
            && bytes
                .get(at..(at + BLOCK).min(bytes.len()))
                .is_some_and(|block| !is_zero(block))
    })
}

/// Whether a block is all zero; written so that it vectorizes.
pub(crate) fn is_zero(block: &[u8]) -> bool {
    block
        .chunks(64)
        .all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
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
    Truncated { have: usize, need: u64 },
    #[error("process image is corrupted (checksum mismatch)")]
    Checksum,
    #[error("process image payload is malformed: {0}")]
    Payload(#[from] postcard::Error),
}

/// A stopped process's state, borrowed where it can be: it encodes as
/// the [`ProcessImage`] it would make, so a process can be encoded
/// without a copy of its UArea or its memory ([`crate::Container::encode`]).
#[derive(Serialize)]
pub(crate) struct ImageParts<'a> {
    pub uarea: &'a UArea,
    pub globals: Cow<'a, [(String, GlobalValue)]>,
    pub memory: MemoryView<'a>,
}

impl ImageParts<'_> {
    /// Encodes the image these parts make, with its header and checksum
    /// (for a file).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(Checksum::Summed)
    }

    /// Encodes the image these parts make for another kernel: with its
    /// header, without a checksum ([`ProcessImage::decode_in_transit`]).
    pub fn encode_in_transit(&self) -> Vec<u8> {
        self.encode_with(Checksum::InTransit)
    }

    fn encode_with(&self, checksum: Checksum) -> Vec<u8> {
        let out = unsealed(HEADER + self.memory.data_bytes() + 4096);
        let mut out = postcard::to_extend(self, out).expect("images always serialize");
        seal(&mut out, checksum);
        out
    }

    pub fn into_image(self) -> ProcessImage {
        ProcessImage {
            uarea: self.uarea.clone(),
            globals: self.globals.into_owned(),
            memory: self.memory.to_image(),
        }
    }
}

/// A decoded image whose memory is still in the frame it came in
/// ([`ProcessImage::decode_view`]).
#[derive(Debug, Deserialize)]
pub struct ImageView<'a> {
    pub uarea: UArea,
    pub globals: Vec<(String, GlobalValue)>,
    #[serde(borrow)]
    pub memory: MemoryView<'a>,
}

impl ImageView<'_> {
    pub fn into_image(self) -> ProcessImage {
        ProcessImage {
            uarea: self.uarea,
            globals: self.globals,
            memory: self.memory.to_image(),
        }
    }
}

/// A header with room for the payload's length and checksum, which
/// [`seal`] writes once the payload follows it.
fn unsealed(capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 12]);
    out
}

/// Whether an image's payload is summed: in a file, yes; between kernels,
/// the NoC keeps it intact.
#[derive(Clone, Copy, PartialEq)]
enum Checksum {
    Summed,
    InTransit,
}

/// Writes the length and checksum of the payload that follows the header.
fn seal(out: &mut [u8], checksum: Checksum) {
    let payload = &out[HEADER..];
    let len = (payload.len() as u64).to_le_bytes();
    let crc = match checksum {
        Checksum::Summed => crc32fast::hash(payload),
        Checksum::InTransit => 0,
    }
    .to_le_bytes();
    out[10..18].copy_from_slice(&len);
    out[18..22].copy_from_slice(&crc);
}

impl ProcessImage {
    /// Any bytes as an image's payload, behind a header and checksum that
    /// match them, so that they reach the payload's decoder: what an
    /// encoder with a bug, not a damaged wire, would send (the fuzz
    /// targets, crates/fuzz).
    pub fn seal_payload(payload: &[u8]) -> Vec<u8> {
        let mut out = unsealed(HEADER + payload.len());
        out.extend_from_slice(payload);
        seal(&mut out, Checksum::Summed);
        out
    }

    pub(crate) fn parts(&self) -> ImageParts<'_> {
        ImageParts {
            uarea: &self.uarea,
            globals: Cow::Borrowed(&self.globals),
            memory: self.memory.view(),
        }
    }

    /// Encodes the image with its header and checksum.
    pub fn encode(&self) -> Vec<u8> {
        self.parts().encode()
    }

    /// Decodes and checks an encoded image.
    ///
    /// # Errors
    /// [`ImageError`] says whether the bytes are foreign, from another format
    /// version, truncated, damaged or malformed.
    pub fn decode(bytes: &[u8]) -> Result<Self, ImageError> {
        ProcessImage::decode_view(bytes).map(ImageView::into_image)
    }

    /// Decodes and checks an encoded image, leaving its memory in `bytes`.
    ///
    /// # Errors
    /// As [`decode`](Self::decode).
    pub fn decode_view(bytes: &[u8]) -> Result<ImageView<'_>, ImageError> {
        decode_view(bytes, Checksum::Summed)
    }

    /// Decodes an image another kernel sent
    /// ([`Container::encode`](crate::Container::encode)), leaving its
    /// memory in `bytes`: it has no checksum.
    ///
    /// # Errors
    /// As [`decode`](Self::decode), but for `Checksum`.
    pub fn decode_in_transit(bytes: &[u8]) -> Result<ImageView<'_>, ImageError> {
        decode_view(bytes, Checksum::InTransit)
    }
}

/// Decodes an encoded image, leaving its memory in `bytes`; checks its
/// checksum if `checksum` says it was summed.
fn decode_view(bytes: &[u8], checksum: Checksum) -> Result<ImageView<'_>, ImageError> {
    if bytes.len() < HEADER {
        return Err(if bytes.starts_with(&MAGIC[..bytes.len().min(8)]) {
            ImageError::Truncated {
                have: bytes.len(),
                need: HEADER as u64,
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
    // The length is a claim: any u64 (found by the image fuzz target).
    let len = u64::from_le_bytes(bytes[10..18].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[18..22].try_into().expect("4 bytes"));
    let payload = usize::try_from(len)
        .ok()
        .and_then(|len| bytes[HEADER..].get(..len))
        .ok_or(ImageError::Truncated {
            have: bytes.len(),
            need: (HEADER as u64).saturating_add(len),
        })?;
    if checksum == Checksum::Summed && crc32fast::hash(payload) != crc {
        return Err(ImageError::Checksum);
    }
    Ok(postcard::from_bytes(payload)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd::FdTable;
    use crate::uarea::ConsoleId;
    use atoll_abi::{KernelId, Pid};

    #[test]
    fn blocks_without_a_page_or_all_zero_are_left_out() {
        const PAGES: usize = 24;
        let base = crate::resident::anonymous(PAGES * BLOCK).cast::<libc::c_void>();
        // SAFETY: the mapping is PAGES * BLOCK bytes, readable and writable.
        let bytes = unsafe { std::slice::from_raw_parts_mut(base.cast::<u8>(), PAGES * BLOCK) };
        // Written: 1, 2, 6 and 9 (with zeros); read only (the zero page): 4;
        // given back after a write: 2.
        for page in [1, 2, 6] {
            bytes[page * BLOCK + 5] = 9;
        }
        bytes[9 * BLOCK + 5] = 0;
        assert_eq!(std::hint::black_box(bytes[4 * BLOCK]), 0);
        // SAFETY: page 2 of the mapping; its contents become zero.
        unsafe {
            libc::madvise(
                base.cast::<u8>().add(2 * BLOCK).cast(),
                BLOCK,
                libc::MADV_DONTNEED,
            )
        };
        let nonzero: Vec<u32> = nonzero_blocks(bytes, 0..PAGES as u32).collect();
        assert_eq!(nonzero, [1, 6]);
        // Written with zeros, 9 has a page: the page tables say so.
        assert_eq!(mapped_ranges(bytes), [1..2, 6..7, 9..10]);
        // Not page-aligned, it is read: 9 is zero.
        assert_eq!(mapped_ranges(&bytes[1..]), [1..2, 6..7]);
        // SAFETY: the mapping made above, no longer borrowed.
        unsafe { libc::munmap(base, PAGES * BLOCK) };
    }

    #[test]
    fn a_direct_copy_equals_capture_then_write() {
        let mut from = vec![0u8; 4 * BLOCK + 100];
        from[10] = 1;
        from[2 * BLOCK + 5] = 7;
        from[4 * BLOCK + 99] = 9;
        // A fresh memory: zero but for a data segment across blocks 1 and 2.
        let fresh = |len| {
            let mut m = vec![0u8; len];
            m[BLOCK + 1..2 * BLOCK + 10].fill(0xAA);
            m
        };
        let segment = BLOCK + 1..2 * BLOCK + 10;
        let dirty = std::slice::from_ref(&segment);
        let mut direct = fresh(5 * BLOCK);
        copy_nonzero(&from, &mut direct, dirty);
        let mut via_image = fresh(5 * BLOCK);
        MemoryView::whole(&from)
            .write_into(&mut via_image, dirty)
            .unwrap();
        assert_eq!(direct, via_image);
        assert_eq!(&direct[..from.len()], &from[..]);
        assert!(direct[from.len()..].iter().all(|&b| b == 0));
    }

    /// A spare's memory (`to`) holds another process: blocks it wrote
    /// where `from` is zero, blocks it never had, blocks both wrote.
    /// `mapped`: `to` is a page-aligned mapping whose pages are asked about;
    /// otherwise every block of it is read.
    fn overwrite_holds_what_from_holds(mapped: bool) {
        let len = 6 * BLOCK;
        let mut from = vec![0u8; len];
        from[10] = 1;
        from[3 * BLOCK..4 * BLOCK].fill(3);
        from[5 * BLOCK + 7] = 5;
        let mut owned = vec![0u8; len];
        let to: &mut [u8] = if mapped {
            // SAFETY: a fresh mapping of `len` bytes, unmapped below.
            unsafe { std::slice::from_raw_parts_mut(crate::resident::anonymous(len), len) }
        } else {
            &mut owned
        };
        to[BLOCK..2 * BLOCK].fill(0xEE);
        to[3 * BLOCK + 1] = 0xEE;
        to[5 * BLOCK..].fill(0xEE);
        // Block 4 is read but never written: a page of zeros.
        assert_eq!(to[4 * BLOCK], 0);
        overwrite(&from, to);
        assert_eq!(&to[..], &from[..]);
        if mapped {
            let at = crate::resident::mapped_blocks(to, 0..6).unwrap();
            // Block 2 was never touched, block 4 only read: neither was
            // written by the overwrite.
            assert!(!at[2] && !at[4], "{at:?}");
            // SAFETY: the mapping made above, no longer used.
            unsafe { libc::munmap(to.as_mut_ptr().cast(), len) };
        }
    }

    #[test]
    fn an_overwritten_spare_holds_what_its_new_process_had() {
        overwrite_holds_what_from_holds(false);
        overwrite_holds_what_from_holds(true);
    }

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
            FdTable::new(&[], pid.home),
            None,
        );
        let mut mem = vec![0u8; 3 * PAGE_SIZE];
        mem[PAGE_SIZE + 5] = 9;
        mem[PAGE_SIZE + BLOCK + 1] = 8;
        mem[2 * PAGE_SIZE] = 7;
        ProcessImage {
            uarea,
            globals: vec![("atoll_global_0".into(), GlobalValue::I32(-4))],
            memory: MemoryView::whole(&mem).to_image(),
        }
    }

    #[test]
    fn a_view_encodes_as_the_image_it_makes() {
        let img = image();
        let mut mem = vec![0u8; 3 * PAGE_SIZE];
        img.memory.view().write_into(&mut mem, &[]).unwrap();
        // Blocks 16 and 17 are adjacent (one run), 32 alone; 40 is zero.
        for view in [
            MemoryView::whole(&mem),
            MemoryView::blocks_of(&mem, [16, 17, 32, 40]),
        ] {
            let parts = ImageParts {
                uarea: &img.uarea,
                globals: Cow::Borrowed(&img.globals),
                memory: view.clone(),
            };
            let owned = ProcessImage {
                memory: view.to_image(),
                ..img.clone()
            };
            assert_eq!(parts.encode(), owned.encode());
            assert_eq!(
                ProcessImage::decode(&parts.encode()).unwrap().memory,
                owned.memory
            );
        }
        assert_eq!(MemoryView::blocks_of(&mem, [16, 17, 32, 40]).runs.len(), 3);
    }

    #[test]
    fn round_trip_keeps_only_nonzero_blocks_in_runs() {
        let img = image();
        assert_eq!(img.memory.pages, 3);
        assert!(img.memory.complete);
        // Two adjacent blocks make one run; the third block is alone.
        assert_eq!(img.memory.view().blocks(), 3);
        assert_eq!(img.memory.runs.len(), 2);
        assert_eq!(img.memory.runs[0].at as usize, PAGE_SIZE);
        let back = ProcessImage::decode(&img.encode()).unwrap();
        assert_eq!(back.memory, img.memory);
        assert_eq!(back.globals, img.globals);
        assert_eq!(back.uarea.pid, img.uarea.pid);
    }

    #[test]
    fn limits_and_quotas_travel_in_the_image() {
        let mut img = image();
        img.uarea.limits = crate::uarea::Limits {
            memory: Some(16 << 20),
            cpu_ns: Some(250_000_000),
            processes: Some(8),
        };
        img.uarea.quotas.counted = vec![crate::Quota::Job(crate::ConsoleId(3))];
        let back = ProcessImage::decode(&img.encode()).unwrap();
        assert_eq!(back.uarea.limits, img.uarea.limits);
        assert_eq!(back.uarea.quotas, img.uarea.quotas);
    }

    #[test]
    fn a_delta_changes_only_its_blocks() {
        let mut mem = vec![1u8; 4 * BLOCK];
        let mut copy = mem.clone();
        mem[BLOCK] = 2;
        mem[3 * BLOCK + 7] = 3;
        let delta = MemoryView::blocks_of(&mem, [1, 3]).to_image();
        assert!(!delta.complete);
        assert_eq!(delta.runs.len(), 2);
        delta.view().write_into(&mut copy, &[]).unwrap();
        assert_eq!(copy, mem);
        let complete = MemoryView::whole(&[0u8; 2 * BLOCK]).to_image();
        complete
            .view()
            .write_into(
                &mut copy[..2 * BLOCK],
                std::slice::from_ref(&(0..2 * BLOCK)),
            )
            .unwrap();
        assert!(copy[..2 * BLOCK].iter().all(|&b| b == 0));
        assert!(delta.view().write_into(&mut [0u8; BLOCK], &[]).is_err());
        // Only the dirty ranges are cleared before a complete image.
        let mut mem = vec![5u8; 3 * BLOCK];
        complete
            .view()
            .write_into(&mut mem, std::slice::from_ref(&(BLOCK..BLOCK + 10)))
            .unwrap();
        assert!(mem[BLOCK..BLOCK + 10].iter().all(|&b| b == 0));
        assert_eq!(mem[BLOCK + 10], 5);
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
        let mut endless = bytes.clone();
        endless[10..18].fill(0xff);
        assert!(matches!(
            ProcessImage::decode(&endless),
            Err(ImageError::Truncated { need: u64::MAX, .. })
        ));
        let mut v1 = bytes.clone();
        v1[8] = 1;
        assert!(matches!(
            ProcessImage::decode(&v1),
            Err(ImageError::Version(1))
        ));
    }

    #[test]
    fn an_image_in_transit_has_no_checksum_and_is_not_a_file() {
        let img = image();
        let parts = img.parts();
        let in_transit = parts.encode_in_transit();
        let view = ProcessImage::decode_in_transit(&in_transit).unwrap();
        assert_eq!(view.into_image().memory, img.memory);
        // The same bytes but for the checksum's field.
        let file = parts.encode();
        assert_eq!(in_transit[..18], file[..18]);
        assert_eq!(in_transit[22..], file[22..]);
        assert_eq!(in_transit[18..22], [0; 4]);
        // Read as a file, it is refused: its checksum is not its payload's.
        assert!(matches!(
            ProcessImage::decode(&in_transit),
            Err(ImageError::Checksum)
        ));
        // What the header checks still holds in transit.
        assert!(matches!(
            ProcessImage::decode_in_transit(&in_transit[..in_transit.len() - 1]),
            Err(ImageError::Truncated { .. })
        ));
    }

    #[test]
    fn a_sealed_payload_is_the_image_it_came_from() {
        let bytes = image().encode();
        assert_eq!(ProcessImage::seal_payload(&bytes[HEADER..]), bytes);
    }
}
