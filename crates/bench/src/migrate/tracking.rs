//! The cost of dirty tracking itself, on an anonymous mapping.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use atoll_migration::{DirtyTracker, BLOCK};

use super::Tracking;
use crate::{median, progress};

/// An anonymous private mapping, unmapped on drop.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> anyhow::Result<Mapping> {
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!("mmap of {len} bytes: {}", std::io::Error::last_os_error());
        }
        // 4 KiB pages, as the tracker splits them anyway: the untracked
        // writes are then measured on the same pages as the tracked ones.
        // SAFETY: advice on our own mapping; failure only keeps huge pages.
        unsafe { libc::madvise(ptr, len, libc::MADV_NOHUGEPAGE) };
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
        })
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, readable and writable (or
        // write-protected by a tracker, whose handler makes writes succeed),
        // and only reachable through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Writes `value` to the first byte of every page; returns the time.
    fn touch(&mut self, value: u8) -> Duration {
        let t = Instant::now();
        for at in (0..self.len).step_by(BLOCK) {
            // SAFETY: `at` is inside the mapping (see `bytes`).
            unsafe { std::ptr::write_volatile(self.ptr.add(at), value) };
        }
        t.elapsed()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer referenced (borrows of `bytes` end
        // with `self`'s).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The cost of dirty tracking on `mib` MiB of anonymous memory.
pub(super) fn tracking(mib: usize, runs: usize) -> anyhow::Result<Tracking> {
    let mut map = Mapping::new(mib << 20)?;
    map.bytes().fill(1); // every page present and written once
    let pages = (mib << 20) / BLOCK;
    let per_page = |d: Duration| d.as_nanos() as f64 / pages as f64;
    let per_mib = |d: Duration| d.as_secs_f64() * 1e6 / mib as f64;
    let (mut untracked, mut tracked, mut start, mut dirty, mut clean) =
        (vec![], vec![], vec![], vec![], vec![]);
    for run in 0..runs {
        let value = 2 + (run % 100) as u8;
        untracked.push(per_page(map.touch(value)));
        let t = Instant::now();
        let mut tracker = DirtyTracker::start(map.bytes()).context("DirtyTracker::start")?;
        start.push(per_mib(t.elapsed()));
        tracked.push(per_page(map.touch(value + 1)));
        let t = Instant::now();
        let written = tracker.take(map.bytes())?;
        dirty.push(per_mib(t.elapsed()));
        if written.len() != pages {
            bail!("the tracker saw {} of {pages} pages written", written.len());
        }
        let t = Instant::now();
        let none = tracker.take(map.bytes())?;
        clean.push(per_mib(t.elapsed()));
        if !none.is_empty() {
            bail!("the tracker saw {} pages written, none were", none.len());
        }
        drop(tracker);
    }
    let t = Tracking {
        region_mib: mib,
        runs,
        untracked_ns_per_page: median(&untracked),
        tracked_ns_per_page: median(&tracked),
        start_us_per_mib: median(&start),
        take_dirty_us_per_mib: median(&dirty),
        take_clean_us_per_mib: median(&clean),
    };
    progress::note(&format!(
        "  first write per page: untracked {:.1} ns, tracked {:.1} ns; start {:.1} us/MiB, take {:.1} us/MiB all dirty, {:.2} us/MiB clean",
        t.untracked_ns_per_page,
        t.tracked_ns_per_page,
        t.start_us_per_mib,
        t.take_dirty_us_per_mib,
        t.take_clean_us_per_mib
    ));
    Ok(t)
}
