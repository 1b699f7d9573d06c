//! Which pages of a memory have something behind them.
//!
//! A small process in a large memory (a pool slot, a 1 MiB stack reserved)
//! touches few of its pages, and reading the others to find them zero
//! would fault each one in. Before a memory is copied (fork, capture), the
//! host kernel is asked which of its pages exist, in memory or in swap:
//! the others read as zero and are skipped unread.

use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use atoll_migration::BLOCK;

/// Which blocks of `range` of `bytes` have a page behind them, in memory or
/// in swap (a block is a host page). A block without one was never written
/// since it was mapped, or was given back, or maps the shared zero page:
/// it reads as zero. `None` where that cannot be asked (memory not
/// page-aligned, as in tests): every block is then read.
///
/// `PAGEMAP_SCAN` (Linux 6.7) answers exactly, in one call for up to 256
/// runs of pages. Where it is missing, `mincore(2)` answers for pages in
/// memory and the pagemap is read for the runs it finds absent (a page in
/// swap is absent to `mincore`): a fork of a process holding 1 MiB asked
/// four times (one `mincore`, three reads), and now asks once.
pub(crate) fn mapped_blocks(bytes: &[u8], range: Range<u32>) -> Option<Vec<bool>> {
    let (addr, blocks) = pages_of(bytes, range)?;
    scanned(addr, blocks, ZeroPage::Out).or_else(|| resident(addr, blocks))
}

/// Which blocks of `range` of `bytes` have any page behind them: as
/// [`mapped_blocks`], the shared zero page too. A block with none is what
/// `userfaultfd` reports a touch of (`postcopy`). `None` where the memory
/// is not page-aligned or the host lacks `PAGEMAP_SCAN`: the caller then
/// treats every block as having a page.
pub(crate) fn entered_blocks(bytes: &[u8], range: Range<u32>) -> Option<Vec<bool>> {
    let (addr, blocks) = pages_of(bytes, range)?;
    scanned(addr, blocks, ZeroPage::In)
}

/// The address and page count of `range` of `bytes`; `None` if empty or
/// not page-aligned.
fn pages_of(bytes: &[u8], range: Range<u32>) -> Option<(usize, usize)> {
    let start = (range.start as usize * BLOCK).min(bytes.len());
    let end = (range.end as usize * BLOCK).min(bytes.len());
    let addr = bytes.as_ptr() as usize + start;
    if start == end || !addr.is_multiple_of(BLOCK) {
        return None;
    }
    Some((addr, (end - start).div_ceil(BLOCK)))
}

/// Whether a page mapping the shared zero page counts as a page.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ZeroPage {
    In,
    Out,
}

/// The process's `/proc/self/pagemap`, opened once; `None` where it cannot
/// be read.
fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP
        .get_or_init(|| File::open("/proc/self/pagemap").ok())
        .as_ref()
}

/// `struct page_region` of `<linux/fs.h>`: pages `start..end` sharing
/// `categories`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `struct pm_scan_arg` of `<linux/fs.h>`.
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((size_of::<PmScanArg>() as u64) << 16) | (0x66 << 8) | 16;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;
const PAGE_IS_PFNZERO: u64 = 1 << 5;

/// [`mapped_blocks`] by `PAGEMAP_SCAN`: pages present or swapped, and the
/// shared zero page only if `zero_page` says so. `None` where the host
/// kernel lacks the scan.
fn scanned(addr: usize, blocks: usize, zero_page: ZeroPage) -> Option<Vec<bool>> {
    let left_out = match zero_page {
        ZeroPage::In => 0,
        ZeroPage::Out => PAGE_IS_PFNZERO,
    };
    static MISSING: AtomicBool = AtomicBool::new(false);
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let pagemap = pagemap()?;
    let end = addr + blocks * BLOCK;
    let mut mapped = vec![false; blocks];
    let mut regions = [PageRegion::default(); 256];
    let mut from = addr;
    while from < end {
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags: 0,
            start: from as u64,
            end: end as u64,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: left_out,
            category_mask: left_out,
            category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
            return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        };
        // SAFETY: `arg` is a valid `pm_scan_arg` whose `vec` names
        // `regions`, `vec_len` long, and both outlive the call; the scan
        // only reads the page tables of `from..end`.
        let found = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        let Ok(found) = usize::try_from(found) else {
            let errno = std::io::Error::last_os_error().raw_os_error();
            if matches!(errno, Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP)) {
                MISSING.store(true, Ordering::Relaxed);
            }
            return None;
        };
        for region in &regions[..found.min(regions.len())] {
            let first = (region.start as usize).saturating_sub(addr) / BLOCK;
            let last = (region.end as usize).saturating_sub(addr).div_ceil(BLOCK);
            mapped[first.min(blocks)..last.min(blocks)].fill(true);
        }
        // The walk stops where the regions ran out, or at `end`.
        let walked = arg.walk_end as usize;
        if walked <= from {
            return None;
        }
        from = walked;
    }
    Some(mapped)
}

/// Past this many runs of absent pages, [`resident`] reads the pagemap
/// once over all of them rather than once per run.
const ABSENT_RUNS_READ_APART: usize = 8;

/// [`mapped_blocks`] by `mincore(2)`, then the pagemap (bits 63 and 62)
/// for the runs of pages it finds absent, each on its own, or all in one
/// read where there are many.
fn resident(addr: usize, blocks: usize) -> Option<Vec<bool>> {
    let mut resident = vec![0u8; blocks];
    // SAFETY: `addr..addr + blocks * BLOCK` is memory the caller borrows,
    // and `resident` has a byte for each of its pages.
    let asked = unsafe {
        libc::mincore(
            addr as *mut libc::c_void,
            blocks * BLOCK,
            resident.as_mut_ptr(),
        )
    };
    if asked != 0 {
        return in_pagemap(addr, blocks);
    }
    let mut mapped: Vec<bool> = resident.iter().map(|r| r & 1 != 0).collect();
    let mut absent = Vec::new();
    let mut at = 0;
    while let Some(from) = mapped[at..].iter().position(|m| !m).map(|i| at + i) {
        let to = mapped[from..]
            .iter()
            .position(|m| *m)
            .map_or(blocks, |i| from + i);
        absent.push(from..to);
        at = to;
    }
    if absent.len() > ABSENT_RUNS_READ_APART {
        let end = absent[absent.len() - 1].end;
        absent.truncate(1);
        absent[0].end = end;
    }
    for run in absent {
        let found = in_pagemap(addr + run.start * BLOCK, run.len())?;
        for (m, f) in mapped[run].iter_mut().zip(found) {
            *m |= f;
        }
    }
    Some(mapped)
}

/// Whether each of the `blocks` pages from `addr` is in memory or in swap,
/// by `/proc/self/pagemap`; `None` where it cannot be read.
fn in_pagemap(addr: usize, blocks: usize) -> Option<Vec<bool>> {
    use std::os::unix::fs::FileExt;
    let mut entries = vec![0u8; blocks * 8];
    pagemap()?
        .read_exact_at(&mut entries, (addr / BLOCK * 8) as u64)
        .ok()?;
    Some(
        entries
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().expect("8 bytes")) >> 62 != 0)
            .collect(),
    )
}

/// A fresh private anonymous mapping of `len` bytes, as a pool slot's
/// memory is (for tests; unmapping it is the caller's).
#[cfg(test)]
pub(crate) fn anonymous(len: usize) -> *mut u8 {
    // SAFETY: a fresh mapping, which nothing else uses.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapping of `pages` host pages, and the bytes in it.
    struct Mapping(*mut u8, usize);

    impl Mapping {
        fn new(pages: usize) -> Mapping {
            Mapping(anonymous(pages * BLOCK), pages)
        }

        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: the mapping is `pages * BLOCK` bytes, readable and
            // writable, and borrowed through `self`.
            unsafe { std::slice::from_raw_parts_mut(self.0, self.1 * BLOCK) }
        }

        fn give_back(&mut self, page: usize) {
            // SAFETY: a page of the mapping; its contents become zero.
            unsafe { libc::madvise(self.0.add(page * BLOCK).cast(), BLOCK, libc::MADV_DONTNEED) };
        }

        fn all(&self) -> Range<u32> {
            0..self.1 as u32
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, no longer borrowed.
            unsafe { libc::munmap(self.0.cast(), self.1 * BLOCK) };
        }
    }

    /// Whether the host kernel has `PAGEMAP_SCAN`: Linux 6.7 or later.
    fn host_scans() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = numbers.next().unwrap().parse().unwrap();
        let minor: u32 = numbers.next().unwrap().parse().unwrap();
        (major, minor) >= (6, 7)
    }

    fn pages(mapped: &[bool]) -> Vec<usize> {
        (0..mapped.len()).filter(|&p| mapped[p]).collect()
    }

    #[test]
    fn only_pages_that_exist_are_mapped() {
        let mut m = Mapping::new(24);
        // Written: 1, 2 and 6; read only (the zero page): 4; given back
        // after a write: 2.
        for page in [1, 2, 6] {
            m.bytes()[page * BLOCK + 5] = 9;
        }
        assert_eq!(std::hint::black_box(m.bytes()[4 * BLOCK]), 0);
        m.give_back(2);
        let (addr, blocks) = (m.0 as usize, m.1);
        // `mincore` counts the zero page in; the scan, where the host has
        // it, leaves it out.
        assert_eq!(pages(&resident(addr, blocks).expect("asked")), [1, 4, 6]);
        let all = m.all();
        let mapped = pages(&mapped_blocks(m.bytes(), all).expect("asked"));
        assert_eq!(scanned(addr, blocks, ZeroPage::Out).is_some(), host_scans());
        match scanned(addr, blocks, ZeroPage::Out) {
            Some(scan) => {
                assert_eq!(pages(&scan), [1, 6]);
                assert_eq!(mapped, [1, 6]);
            }
            None => assert_eq!(mapped, [1, 4, 6]),
        }
        // What userfaultfd would not report a touch of: the zero page too.
        let all = m.all();
        match entered_blocks(m.bytes(), all) {
            Some(entered) => assert_eq!(pages(&entered), [1, 4, 6]),
            None => assert!(!host_scans()),
        }
        // A range inside the mapping answers for its own pages.
        let inner = pages(&mapped_blocks(m.bytes(), 5..8).expect("asked"));
        assert_eq!(inner, [1]);
    }

    #[test]
    fn more_runs_than_a_call_returns_are_all_found() {
        // 300 runs of one page: the scan returns 256 regions a call, and
        // `mincore` finds more absent runs than are read apart.
        let mut m = Mapping::new(600);
        for page in (0..600).step_by(2) {
            m.bytes()[page * BLOCK] = 1;
        }
        let even: Vec<usize> = (0..600).step_by(2).collect();
        let (addr, blocks) = (m.0 as usize, m.1);
        assert_eq!(pages(&resident(addr, blocks).expect("asked")), even);
        if let Some(scan) = scanned(addr, blocks, ZeroPage::Out) {
            assert_eq!(pages(&scan), even);
        }
        let all = m.all();
        assert_eq!(pages(&mapped_blocks(m.bytes(), all).unwrap()), even);
    }

    #[test]
    fn unaligned_memory_is_not_asked_about() {
        let bytes = vec![1u8; 3 * BLOCK];
        // One byte past an allocation's start, at least 16-byte aligned.
        assert!(mapped_blocks(&bytes[1..2 * BLOCK + 1], 0..2).is_none());
    }
}
