//! When the kernel runs out of mappings for the process (`vm.max_map_count`)
//! the tracker degrades to "everything is dirty" instead of failing.
//!
//! Its own test process: it uses up the process's mappings for a moment,
//! which would make any other test's `mmap` fail meanwhile.

use std::ptr;

use atoll_migration::{DirtyTracker, BLOCK};

#[test]
fn running_out_of_kernel_mappings_marks_everything_dirty() {
    let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(65530);
    if max > 200_000 {
        eprintln!("vm.max_map_count is {max}: too many mappings to use up in a test, skipped");
        return;
    }
    // Writing every other block splits one mapping per write: about
    // 2 * blocks / 2 mappings, more than the limit.
    let blocks = max + 4096;
    let len = blocks * BLOCK;
    // SAFETY: a fresh private anonymous mapping.
    let memory = unsafe {
        let p = libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::slice::from_raw_parts_mut(p.cast::<u8>(), len)
    };
    let mut tracker = DirtyTracker::start(memory).unwrap();
    for block in (0..blocks).step_by(2) {
        // SAFETY: in bounds.
        unsafe { ptr::write_volatile(&mut memory[block * BLOCK], 1) };
    }
    // Every write happened, and the limit was reached on the way: the
    // tracker reports every block.
    assert!((0..blocks).step_by(2).all(|b| memory[b * BLOCK] == 1));
    assert_eq!(tracker.dirty_count(), blocks);
    let all: Vec<u32> = (0..blocks as u32).collect();
    assert_eq!(tracker.take(memory).unwrap(), all);

    // Tracking goes on, block by block, in the next round.
    // SAFETY: in bounds.
    unsafe { ptr::write_volatile(&mut memory[5 * BLOCK], 2) };
    // SAFETY: in bounds.
    unsafe { ptr::write_volatile(&mut memory[(blocks - 1) * BLOCK], 2) };
    assert_eq!(tracker.take(memory).unwrap(), vec![5, blocks as u32 - 1]);
    drop(tracker);
    // SAFETY: our mapping, no longer used.
    unsafe { libc::munmap(memory.as_mut_ptr().cast(), len) };
}
