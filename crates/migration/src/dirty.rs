//! Dirty-page tracking by write protection.
//!
//! Pre-copy sends a process's linear memory while the process keeps running,
//! then sends again what was written meanwhile. [`DirtyTracker`] tells which
//! [`BLOCK`]-sized blocks were written: [`DirtyTracker::start`] makes the
//! whole memory read-only (`mprotect(PROT_READ)`), and the first write to
//! each block faults. A process-wide `SIGSEGV` handler, installed once, finds
//! the faulting address in a fixed registry of tracked ranges, sets the
//! block's bit in that range's bitmap, makes that one block writable again
//! and returns: the faulting store is retried and succeeds, and later writes
//! to the block cost nothing. [`DirtyTracker::take`] collects the bits and
//! write-protects those blocks again for the next round.
//!
//! # Why `mprotect` and a signal handler
//!
//! - It works where atoll runs: in containers `userfaultfd` is usually
//!   forbidden (seccomp, `vm.unprivileged_userfaultfd = 0`), and the
//!   kernel's soft-dirty bits (`/proc/self/clear_refs` + `/proc/self/pagemap`)
//!   are often not compiled in or not readable, and are process-wide: clearing
//!   them for one memory clears them for every kernel thread's memories.
//!   Write protection is per range, so several kernels can track their own
//!   memories at once.
//! - It costs nothing while no migration runs: nothing is protected and the
//!   handler only sees faults that would have happened anyway (wasm traps),
//!   which it hands on after a scan of the registry.
//! - During a migration the cost is one fault (a signal delivery and an
//!   `mprotect`, a few microseconds) per block on its first write in each
//!   round, not per write.
//!
//! # Limits
//!
//! - The host page size must be [`BLOCK`] (4096); `start` checks it.
//! - A system call that writes into a protected block (`read(2)` into a wasm
//!   buffer, `getrandom(2)`, ...) does not fault: it fails with `EFAULT`.
//!   Code that lets the kernel write into linear memory must first touch the
//!   buffer from user code (write one byte per block, e.g. read-and-write-back
//!   the first byte), which takes the fault here and marks the block dirty;
//!   the host-call layer of atoll does that.
//! - Each protected/unprotected run of blocks is a separate kernel mapping
//!   (VMA); the kernel limits a process to `vm.max_map_count` of them
//!   (65530 by default). When a fault cannot split a mapping any more, the
//!   handler makes the whole tracked range writable and records it all as
//!   dirty ([`DirtyTracker::take`] returns every block, and protects the
//!   range again as one mapping), so tracking degrades to a full copy
//!   instead of failing; `take` does the same if it cannot protect blocks
//!   again. Splitting also breaks transparent huge pages of the
//!   memory into 4 KiB pages.
//! - The handler must run before wasmtime's: wasmtime treats every fault in
//!   wasm code as a wasm trap. Our handler is installed at the first `start`
//!   and chains to the handler that was installed before it, so wasmtime's
//!   `Engine` must have been created before the first `start` in the process
//!   (wasmtime installs its handlers once per process, at the first
//!   `Engine`). `start` checks that its handler is still the installed one
//!   and fails otherwise. For the same reason wasmtime's
//!   `Engine::unload_process_handlers` must not be used after `start`.
//!   Once installed, the handler stays for the life of the process; with
//!   nothing tracked it only scans the (empty) registry before delegating.
//! - Linux only (`si_addr`, `SEGV_ACCERR`, `__errno_location`), as atoll is.
//!
//! # The owning thread
//!
//! A tracked memory is written only by the thread that owns its tracker (in
//! atoll, the kernel thread running the process), and `take` and `drop` run
//! on that thread too, or at least never while the memory is being written.
//! The handler runs on the thread whose write faulted, so it never runs for
//! a range while that range's `take` or `drop` is updating it. This is what
//! makes the registry updates in `take` simple, and is also what makes the
//! dirty set exact: a write racing with `take` could be lost.
//!
//! The tracker must be dropped before the memory is unmapped or reused (in
//! wasmtime terms: before the `Store` that owns it is dropped), since `drop`
//! makes the tracked range writable again.

use std::ffi::c_void;
use std::io;
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Bytes per tracked block: the host page size this tracker requires.
pub const BLOCK: usize = 4096;

/// How many memories can be tracked at once in a process.
const SLOTS: usize = 256;

/// Bits per bitmap word.
const WORD_BITS: usize = 64;

/// Bitmaps are allocated for at least this many blocks (one word).
const MIN_CAPACITY: usize = WORD_BITS;

/// One tracked range, as the signal handler sees it. Only atomics, so the
/// handler reads it without locks or allocation.
struct Slot {
    /// Taken by a tracker (allocation of the slot; the handler ignores it).
    claimed: AtomicBool,
    /// First byte of the range; 0 while the slot is not published.
    start: AtomicUsize,
    /// One past the last tracked byte. Only grows while published.
    end: AtomicUsize,
    /// One bit per block of `start..end`, as `AtomicU64` words. Always has
    /// room for `(end - start) / BLOCK` bits.
    bitmap: AtomicPtr<AtomicU64>,
    /// A fault could not make its block writable (out of kernel mappings),
    /// so the handler made the whole range writable: everything is dirty.
    all_dirty: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            claimed: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            bitmap: AtomicPtr::new(ptr::null_mut()),
            all_dirty: AtomicBool::new(false),
        }
    }
}

/// The process-wide registry the signal handler searches.
static REGISTRY: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// Tracks which blocks of one linear memory are written.
///
/// How it works and why is in the `dirty` module's documentation (in the
/// source). What the user must keep to:
///
/// - Only the thread that owns the tracker writes the memory, and `take` and
///   `drop` run while nothing writes it.
/// - wasmtime's `Engine` (its signal handlers) exists before the process's
///   first `start`, so the tracker's handler runs before wasmtime's.
/// - A system call writing into the memory (`read(2)` into a wasm buffer)
///   fails with `EFAULT` on a protected block: touch the buffer from user
///   code first.
/// - The tracker is dropped before the memory is unmapped or reused.
pub struct DirtyTracker {
    /// Index in [`REGISTRY`].
    slot: usize,
    /// Base address of the memory (never moves: wasm memories are reserved
    /// up front and grow in place).
    base: usize,
    /// Bytes tracked, a multiple of [`BLOCK`]; `REGISTRY[slot].end - base`.
    len: usize,
    /// The bitmap published in the slot; its heap address is what the
    /// handler uses, so it is never moved or freed while published.
    bitmap: Box<[AtomicU64]>,
    /// Bitmaps replaced when the memory grew, kept until `drop` so that a
    /// handler can never read freed memory, even one that broke the owning
    /// thread invariant. They add up to less than the current one.
    retired: Vec<Box<[AtomicU64]>>,
}

impl std::fmt::Debug for DirtyTracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtyTracker").finish_non_exhaustive()
    }
}

impl DirtyTracker {
    /// Write-protects `memory` and starts recording the first write to each block.
    ///
    /// `memory` must start on a page boundary and be a whole number of pages
    /// (a wasm linear memory is); otherwise `InvalidInput`. `Unsupported` if
    /// the host page size is not [`BLOCK`]; an error too if the registry is
    /// full, the range overlaps a tracked one, or the signal handler cannot
    /// be installed or was replaced by another one.
    pub fn start(memory: &mut [u8]) -> io::Result<DirtyTracker> {
        // SAFETY: sysconf only reads a system value.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page != BLOCK as libc::c_long {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("dirty tracking needs {BLOCK}-byte pages, the host has {page}"),
            ));
        }
        let base = memory.as_mut_ptr() as usize;
        let len = memory.len();
        if !base.is_multiple_of(BLOCK) || !len.is_multiple_of(BLOCK) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "dirty tracking needs a page-aligned memory: address {base:#x}, length {len:#x}"
                ),
            ));
        }
        install_handler()?;

        for other in &REGISTRY {
            let start = other.start.load(Ordering::Acquire);
            let end = other.end.load(Ordering::Acquire);
            if start != 0 && start < base + len.max(1) && base < end.max(start + 1) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("memory at {base:#x} is already dirty-tracked"),
                ));
            }
        }

        let slot = REGISTRY
            .iter()
            .position(|s| {
                s.claimed
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or_else(|| {
                io::Error::other(format!(
                    "dirty tracking registry is full ({SLOTS} memories)"
                ))
            })?;

        let bitmap = new_bitmap(capacity_for(len / BLOCK));
        let s = &REGISTRY[slot];
        s.all_dirty.store(false, Ordering::Relaxed);
        s.bitmap
            .store(bitmap.as_ptr().cast_mut(), Ordering::Release);
        s.end.store(base + len, Ordering::Release);
        // Publishing `start` last makes the slot visible to the handler only
        // once `end` and `bitmap` are valid.
        s.start.store(base, Ordering::Release);

        let tracker = DirtyTracker {
            slot,
            base,
            len,
            bitmap,
            retired: Vec::new(),
        };
        // SAFETY: `base..base + len` is the caller's `&mut [u8]`, mapped and
        // writable; making it read-only only makes the next write to each
        // block fault into our handler, which is installed and owns the
        // range now, and makes that block writable again.
        if let Err(e) = unsafe { protect(base, len, libc::PROT_READ) } {
            // Dropping unpublishes the slot and makes the range writable.
            drop(tracker);
            return Err(e);
        }
        Ok(tracker)
    }

    /// Blocks written since `start` or the previous `take`, ascending; they
    /// are write-protected again. `memory` is the current memory: blocks
    /// past the length tracked so far (it grew) are returned and tracked too.
    ///
    /// `InvalidInput` if `memory` is not the tracked memory: another base
    /// address, shorter than tracked (wasm memories never shrink) or not a
    /// whole number of blocks.
    pub fn take(&mut self, memory: &mut [u8]) -> io::Result<Vec<u32>> {
        self.collect(memory, true)
    }

    /// The last `take` before the tracker is dropped: the blocks written
    /// since the previous one, left writable rather than protected again
    /// (a migration's freeze, where every `mprotect` is downtime). Writes
    /// after it may go unrecorded.
    ///
    /// # Errors
    /// As [`take`](Self::take).
    pub fn finish(&mut self, memory: &mut [u8]) -> io::Result<Vec<u32>> {
        self.collect(memory, false)
    }

    fn collect(&mut self, memory: &mut [u8], rearm: bool) -> io::Result<Vec<u32>> {
        let base = memory.as_mut_ptr() as usize;
        let len = memory.len();
        if base != self.base {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "memory moved from {:#x} to {base:#x} while dirty-tracked",
                    self.base
                ),
            ));
        }
        if len < self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "memory shrank from {:#x} to {len:#x} bytes while dirty-tracked",
                    self.len
                ),
            ));
        }
        if !len.is_multiple_of(BLOCK) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("memory length {len:#x} is not a whole number of blocks"),
            ));
        }
        if u32::try_from(len / BLOCK).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memory has more blocks than a u32 can number",
            ));
        }
        if len > self.len {
            self.grow(len);
        }

        let blocks = self.len / BLOCK;
        let s = &REGISTRY[self.slot];
        let mut dirty = Vec::new();
        if s.all_dirty.swap(false, Ordering::Acquire) {
            // The handler ran out of kernel mappings and unprotected the
            // whole range: everything may have been written.
            for word in self.bitmap.iter() {
                word.store(0, Ordering::Relaxed);
            }
            dirty.extend(0..blocks as u32);
            // SAFETY: the tracked range is the caller's memory (checked
            // above: same base, at least as long); protecting it again is
            // what `start` did, our handler still owns it.
            if rearm && unsafe { protect(self.base, self.len, libc::PROT_READ) }.is_err() {
                self.degrade()?;
            }
            return Ok(dirty);
        }

        // Runs of consecutive dirty blocks, protected with one call each.
        // Should that fail, everything is left writable and dirty instead.
        let mut protecting = rearm;
        let mut rearm = |first: usize, next: usize| -> io::Result<()> {
            if protecting && self.reprotect(first, next).is_err() {
                self.degrade()?;
                protecting = false;
            }
            Ok(())
        };
        let mut run: Option<(usize, usize)> = None;
        for (w, word) in self.bitmap.iter().enumerate() {
            let mut bits = word.swap(0, Ordering::Acquire);
            while bits != 0 {
                let block = w * WORD_BITS + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                debug_assert!(block < blocks);
                dirty.push(block as u32);
                run = match run {
                    Some((first, next)) if next == block => Some((first, block + 1)),
                    Some((first, next)) => {
                        rearm(first, next)?;
                        Some((block, block + 1))
                    }
                    None => Some((block, block + 1)),
                };
            }
        }
        if let Some((first, next)) = run {
            rearm(first, next)?;
        }
        Ok(dirty)
    }

    /// Blocks currently recorded as written, without re-arming them.
    pub fn dirty_count(&self) -> usize {
        if REGISTRY[self.slot].all_dirty.load(Ordering::Acquire) {
            return self.len / BLOCK;
        }
        self.bitmap
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }

    /// Bytes of the memory tracked now: its length at `start`, or at the
    /// last `take` if it grew.
    pub fn tracked_len(&self) -> usize {
        self.len
    }

    /// Protecting blocks again failed (out of kernel mappings): as the
    /// handler does in that case, make the whole range writable (which
    /// merges its mappings) and record it all as dirty for the next `take`.
    fn degrade(&self) -> io::Result<()> {
        // SAFETY: the tracked range is the caller's memory, writable before
        // `start`; writable again, with every block recorded as dirty.
        unsafe { protect(self.base, self.len, libc::PROT_READ | libc::PROT_WRITE)? };
        REGISTRY[self.slot].all_dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// Write-protects blocks `first..next` again after their bits were taken.
    fn reprotect(&self, first: usize, next: usize) -> io::Result<()> {
        // SAFETY: `first..next` are blocks of the tracked range, which is the
        // caller's memory (`take` checked base and length); they were written
        // (so writable) and are read-only again, as `start` made them, with
        // their bits cleared so the next write is recorded.
        unsafe {
            protect(
                self.base + first * BLOCK,
                (next - first) * BLOCK,
                libc::PROT_READ,
            )
        }
    }

    /// The memory grew to `len` bytes: track the new blocks, marked dirty
    /// (they were never sent). `take` then returns and protects them.
    fn grow(&mut self, len: usize) {
        let old_blocks = self.len / BLOCK;
        let blocks = len / BLOCK;
        let s = &REGISTRY[self.slot];
        if blocks > self.bitmap.len() * WORD_BITS {
            let bigger = new_bitmap(capacity_for(blocks));
            for (new, old) in bigger.iter().zip(self.bitmap.iter()) {
                new.store(old.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            // SAFETY (of the handler reading the slot; no unsafe code here):
            // the handler only looks up a block of this slot for a write to
            // this memory, which happens only on the owning thread, the one
            // running this `take`; a signal handler cannot run on it in the
            // middle of this update (nothing here touches the memory), so no
            // handler is reading the old bitmap. Even so, the new bitmap is
            // published before `end` grows (a handler that sees the new end
            // sees the new bitmap) and the old one is kept until `drop`
            // rather than freed, so a handler holding the old pointer still
            // reads live memory, within the old end it was checked against.
            s.bitmap
                .store(bigger.as_ptr().cast_mut(), Ordering::Release);
            let old = std::mem::replace(&mut self.bitmap, bigger);
            self.retired.push(old);
        }
        // The grown part is writable (the runtime made it accessible) and
        // not yet in the range, so the handler never touches these bits.
        for block in old_blocks..blocks {
            self.bitmap[block / WORD_BITS].fetch_or(1 << (block % WORD_BITS), Ordering::Relaxed);
        }
        s.end.store(self.base + len, Ordering::Release);
        self.len = len;
    }
}

impl Drop for DirtyTracker {
    /// Stops tracking: the whole tracked range is writable again and the
    /// registry slot is free.
    fn drop(&mut self) {
        // SAFETY: the tracked range is the memory given to `start` (grown
        // by `take`), which must outlive the tracker (module docs); it was
        // writable before `start` and is writable again.
        let _ = unsafe { protect(self.base, self.len, libc::PROT_READ | libc::PROT_WRITE) };
        let s = &REGISTRY[self.slot];
        s.start.store(0, Ordering::Release);
        s.end.store(0, Ordering::Release);
        s.bitmap.store(ptr::null_mut(), Ordering::Release);
        s.all_dirty.store(false, Ordering::Relaxed);
        s.claimed.store(false, Ordering::Release);
        // The bitmaps are freed after this, once nothing can reach them.
    }
}

/// Bitmap capacity (blocks) for a memory of `blocks`: the next power of two,
/// so a growing memory reallocates a logarithmic number of times.
fn capacity_for(blocks: usize) -> usize {
    blocks.max(MIN_CAPACITY).next_power_of_two()
}

fn new_bitmap(capacity: usize) -> Box<[AtomicU64]> {
    (0..capacity.div_ceil(WORD_BITS))
        .map(|_| AtomicU64::new(0))
        .collect()
}

/// `mprotect(addr, len, prot)`.
///
/// # Safety
///
/// `addr..addr + len` must be memory the caller may change the protection
/// of: no code relying on its current protection, other than our handler.
unsafe fn protect(addr: usize, len: usize, prot: libc::c_int) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: per this function's contract.
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

// ---------------------------------------------------------------------------
// The signal handler.

/// The signals handled: on Linux a write to a read-only page is `SIGSEGV`
/// (`SEGV_ACCERR`); `SIGBUS` is what some other systems raise for it.
const SIGNALS: [libc::c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// The actions installed before ours, for [`SIGNALS`], written once (before
/// our handler is installed) and then only read.
struct PrevActions([std::cell::UnsafeCell<MaybeUninit<libc::sigaction>>; 2]);

// SAFETY: each entry is written once, inside `install_handler`'s `OnceLock`
// initialisation and before the handler that reads it is installed; after
// that it is only read.
unsafe impl Sync for PrevActions {}

static PREV: PrevActions = PrevActions([
    std::cell::UnsafeCell::new(MaybeUninit::zeroed()),
    std::cell::UnsafeCell::new(MaybeUninit::zeroed()),
]);

/// Set when our handler is installed: `Err(errno)` if that failed.
static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();

/// Installs [`handler`] for [`SIGNALS`] once per process, remembering the
/// previous actions to delegate to; later calls check it is still installed.
fn install_handler() -> io::Result<()> {
    let installed = INSTALLED.get_or_init(|| {
        for (i, &signal) in SIGNALS.iter().enumerate() {
            let prev = PREV.0[i].get().cast::<libc::sigaction>();
            // SAFETY: first read the current action into our static (nobody
            // reads it yet: our handler is not installed), then install ours
            // with `sigaction`. Reading first, rather than in the same call,
            // means a fault on another thread never finds our handler
            // without its previous action. The `sigaction` struct is fully
            // initialised (zeroed, then the fields set; empty mask).
            unsafe {
                if libc::sigaction(signal, ptr::null(), prev) != 0 {
                    return Err(errno());
                }
                let mut ours: libc::sigaction = std::mem::zeroed();
                // Like wasmtime's: SA_SIGINFO for the faulting address,
                // SA_ONSTACK to run on the alternate stack wasmtime and Rust
                // set up, SA_NODEFER so a fault in a handler we delegate to
                // reaches the handlers again instead of being blocked.
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                ours.sa_sigaction = handler as *const () as usize;
                libc::sigemptyset(&mut ours.sa_mask);
                if libc::sigaction(signal, &ours, ptr::null_mut()) != 0 {
                    return Err(errno());
                }
            }
        }
        Ok(())
    });
    if let Err(errno) = *installed {
        return Err(io::Error::from_raw_os_error(errno));
    }
    for signal in SIGNALS {
        // SAFETY: reads the current action into a zeroed struct.
        let current = unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut current) != 0 {
                return Err(io::Error::last_os_error());
            }
            current
        };
        if current.sa_sigaction != handler as *const () as usize {
            return Err(io::Error::other(format!(
                "the dirty-tracking handler for signal {signal} was replaced by another \
                 (was a wasmtime Engine created after dirty tracking started?)"
            )));
        }
    }
    Ok(())
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The `SIGSEGV`/`SIGBUS` handler: records and undoes the write protection
/// of tracked blocks, and hands every other fault to the previous handler.
///
/// Async-signal-safe: it reads the registry's atomics, calls `mprotect` and
/// `sigaction`, and keeps `errno` as it found it.
unsafe extern "C" fn handler(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
) {
    // SAFETY: libc's errno location of the current thread; always valid.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: `errno` is valid for reads and writes on this thread.
    let saved = unsafe { *errno };
    // SAFETY: the kernel passes a valid `siginfo_t` for SA_SIGINFO handlers.
    let handled = unsafe { record(signal, &*info) };
    // SAFETY: as above.
    unsafe { *errno = saved };
    if !handled {
        // SAFETY: the arguments are the kernel's, handed on unchanged.
        unsafe { delegate(signal, info, context) };
    }
}

/// `si_code` of a `SIGSEGV` for an access the page's protection forbids
/// (Linux `<asm-generic/siginfo.h>`, every architecture; `libc` lacks it).
const SEGV_ACCERR: libc::c_int = 2;

/// If `info` is a write to a tracked, protected block: records it, makes the
/// block writable and returns true.
///
/// # Safety
///
/// Called from the signal handler with the kernel's `siginfo_t`.
unsafe fn record(signal: libc::c_int, info: &libc::siginfo_t) -> bool {
    // A write to a read-only page is SEGV_ACCERR on Linux; a missing page
    // (SEGV_MAPERR) is not ours even in a tracked range (e.g. unmapped).
    if signal == libc::SIGSEGV && info.si_code != SEGV_ACCERR {
        return false;
    }
    // SAFETY: SIGSEGV and SIGBUS carry the faulting address.
    let addr = unsafe { info.si_addr() } as usize;
    for slot in &REGISTRY {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start {
            continue;
        }
        // `end` before `bitmap`: `take` publishes a bigger bitmap before a
        // bigger end.
        let end = slot.end.load(Ordering::Acquire);
        if addr >= end {
            continue;
        }
        let bitmap = slot.bitmap.load(Ordering::Acquire);
        if bitmap.is_null() {
            return false;
        }
        let block = (addr - start) / BLOCK;
        let bit = 1u64 << (block % WORD_BITS);
        // SAFETY: a published bitmap has a bit for every block below `end`,
        // and stays allocated while the slot is published (it is freed only
        // by the tracker's drop, after unpublishing, on the owning thread,
        // which is the only one writing this memory).
        let word = unsafe { &*bitmap.add(block / WORD_BITS) };
        let was = word.fetch_or(bit, Ordering::Relaxed);
        if signal != libc::SIGSEGV && was & bit != 0 {
            // A second SIGBUS on a block already made writable is not ours:
            // returning would retry it forever.
            return false;
        }
        let page = start + block * BLOCK;
        // SAFETY: `page` is a block of a tracked range, which is writable
        // memory that `start` protected; making it writable again is the
        // point of the fault.
        if unsafe {
            libc::mprotect(
                page as *mut c_void,
                BLOCK,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        } == 0
        {
            return true;
        }
        // SAFETY: reading errno on this thread (restored by the handler).
        if unsafe { *libc::__errno_location() } == libc::ENOMEM {
            // Out of kernel mappings (vm.max_map_count): splitting a mapping
            // for one block needs new ones, making the whole range writable
            // merges them. Record it all as dirty.
            // SAFETY: as above, for the whole tracked range.
            let whole = unsafe {
                libc::mprotect(
                    start as *mut c_void,
                    end - start,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if whole == 0 {
                slot.all_dirty.store(true, Ordering::Release);
                return true;
            }
        }
        return false;
    }
    false
}

/// Hands a fault that is not ours to the action installed before ours,
/// exactly as the kernel would have.
///
/// # Safety
///
/// Called from the signal handler with the kernel's arguments.
unsafe fn delegate(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let Some(i) = SIGNALS.iter().position(|&s| s == signal) else {
        return;
    };
    // SAFETY: written before our handler was installed, then only read.
    let prev = unsafe { &*PREV.0[i].get().cast::<libc::sigaction>() };
    if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
        // Put the default (or ignore) back and return: the faulting
        // instruction runs again and the kernel does what it would have
        // done without us (for a fault, end the process).
        // SAFETY: restoring an action the kernel gave us.
        unsafe { libc::sigaction(signal, prev, ptr::null_mut()) };
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: with SA_SIGINFO, `sa_sigaction` is a three-argument
        // handler, called as the kernel would have called it.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(prev.sa_sigaction);
            f(signal, info, context);
        }
    } else {
        // SAFETY: without SA_SIGINFO, `sa_sigaction` is a plain handler.
        unsafe {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
            f(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous read-write mapping of `pages` blocks, unmapped on drop.
    struct Mapping {
        ptr: *mut u8,
        len: usize,
    }

    impl Mapping {
        fn new(pages: usize) -> Mapping {
            let len = pages * BLOCK;
            // SAFETY: a fresh private anonymous mapping; no address given.
            let ptr = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(ptr, libc::MAP_FAILED, "{}", io::Error::last_os_error());
            Mapping {
                ptr: ptr.cast(),
                len,
            }
        }

        /// The first `pages` blocks.
        fn slice(&mut self, pages: usize) -> &mut [u8] {
            assert!(pages * BLOCK <= self.len);
            // SAFETY: inside the mapping, which lives as long as `self`.
            unsafe { std::slice::from_raw_parts_mut(self.ptr, pages * BLOCK) }
        }

        fn all(&mut self) -> &mut [u8] {
            self.slice(self.len / BLOCK)
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: our mapping, no longer borrowed.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }

    /// Writes through a volatile pointer so the compiler keeps every store.
    fn write(memory: &mut [u8], offset: usize, value: u8) {
        // SAFETY: in bounds of the slice (indexing checks it).
        unsafe { ptr::write_volatile(&mut memory[offset], value) };
    }

    fn read(memory: &[u8], offset: usize) -> u8 {
        // SAFETY: in bounds of the slice (indexing checks it).
        unsafe { ptr::read_volatile(&memory[offset]) }
    }

    #[test]
    fn finish_reports_the_last_writes_and_leaves_them_writable() {
        let mut m = Mapping::new(16);
        let mut t = DirtyTracker::start(m.all()).unwrap();
        write(m.all(), 2 * BLOCK, 1);
        write(m.all(), 9 * BLOCK, 2);
        assert_eq!(t.finish(m.all()).unwrap(), vec![2, 9]);
        // Not protected again: these writes take no fault and are not
        // recorded; other blocks still are.
        write(m.all(), 2 * BLOCK + 1, 3);
        write(m.all(), 5 * BLOCK, 4);
        assert_eq!(t.take(m.all()).unwrap(), vec![5]);
        drop(t);
        assert_eq!(read(m.all(), 2 * BLOCK + 1), 3);
    }

    #[test]
    fn records_first_writes_and_rearms() {
        let mut m = Mapping::new(64);
        let mut t = DirtyTracker::start(m.all()).unwrap();
        assert_eq!(t.dirty_count(), 0);
        let mem = m.all();
        write(mem, 3 * BLOCK + 17, 1);
        write(mem, 3 * BLOCK + 18, 2);
        write(mem, 4 * BLOCK, 3);
        write(mem, 40 * BLOCK + BLOCK - 1, 4);
        assert_eq!(t.dirty_count(), 3);
        assert_eq!(t.take(m.all()).unwrap(), vec![3, 4, 40]);
        assert_eq!(t.dirty_count(), 0);

        let mem = m.all();
        write(mem, 4 * BLOCK + 5, 5);
        assert_eq!(t.take(m.all()).unwrap(), vec![4]);
        assert_eq!(t.take(m.all()).unwrap(), Vec::<u32>::new());

        // Reading never marks, even of blocks written before.
        let mem = m.all();
        let sum: u32 = (0..64).map(|b| u32::from(read(mem, b * BLOCK + 17))).sum();
        assert_eq!(sum, 1);
        assert_eq!(read(mem, 4 * BLOCK + 5), 5);
        assert_eq!(t.take(m.all()).unwrap(), Vec::<u32>::new());

        // Every write was kept.
        let mem = m.all();
        assert_eq!(read(mem, 3 * BLOCK + 18), 2);
        assert_eq!(read(mem, 40 * BLOCK + BLOCK - 1), 4);

        drop(t);
        // Untracked and writable everywhere again (a fault here would kill
        // the test process: the handler no longer owns the range).
        let mem = m.all();
        for b in 0..64 {
            write(mem, b * BLOCK + 100, b as u8);
        }
        assert_eq!(read(mem, 63 * BLOCK + 100), 63);
    }

    #[test]
    fn coalesced_runs_are_rearmed() {
        let mut m = Mapping::new(200);
        let mut t = DirtyTracker::start(m.all()).unwrap();
        // Runs crossing bitmap words, single blocks, the last block.
        let written: Vec<u32> = (60..70)
            .chain([100, 102])
            .chain(128..131)
            .chain([199])
            .collect();
        for round in 0..3u8 {
            let mem = m.all();
            for &b in &written {
                write(mem, b as usize * BLOCK, round);
            }
            assert_eq!(t.take(m.all()).unwrap(), written);
        }
    }

    #[test]
    fn grown_memory_is_returned_and_tracked() {
        let mut m = Mapping::new(32);
        let mut t = DirtyTracker::start(m.slice(16)).unwrap();
        assert_eq!(t.tracked_len(), 16 * BLOCK);
        write(m.all(), 5 * BLOCK, 1);
        // Past the tracked length: not protected, not recorded yet.
        write(m.all(), 20 * BLOCK, 1);
        assert_eq!(t.dirty_count(), 1);

        let mut expected = vec![5];
        expected.extend(16..32);
        assert_eq!(t.take(m.all()).unwrap(), expected);
        assert_eq!(t.tracked_len(), 32 * BLOCK);

        write(m.all(), 20 * BLOCK + 1, 2);
        write(m.all(), 31 * BLOCK, 2);
        assert_eq!(t.take(m.all()).unwrap(), vec![20, 31]);
        assert_eq!(t.take(m.all()).unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn growth_past_the_bitmap_reallocates() {
        // 64 blocks fit one word; 200 need a new bitmap, and the bits
        // recorded in the old one must survive.
        let mut m = Mapping::new(200);
        let mut t = DirtyTracker::start(m.slice(64)).unwrap();
        write(m.all(), 7 * BLOCK, 1);
        write(m.all(), 63 * BLOCK, 1);
        let mut expected = vec![7, 63];
        expected.extend(64..200);
        assert_eq!(t.take(m.all()).unwrap(), expected);
        write(m.all(), 150 * BLOCK, 1);
        write(m.all(), 7 * BLOCK, 1);
        assert_eq!(t.dirty_count(), 2);
        assert_eq!(t.take(m.all()).unwrap(), vec![7, 150]);
        drop(t);
        write(m.all(), 199 * BLOCK, 1);
    }

    #[test]
    fn threads_track_their_own_memories() {
        let handles: Vec<_> = (0..4usize)
            .map(|n| {
                std::thread::spawn(move || {
                    let pages = 48 + 16 * n;
                    let mut m = Mapping::new(pages);
                    let mut t = DirtyTracker::start(m.all()).unwrap();
                    for round in 0..50usize {
                        let mut expected: Vec<u32> = (0..pages)
                            .filter(|b| (b + round + n) % (3 + n) == 0)
                            .map(|b| b as u32)
                            .collect();
                        expected.push((pages - 1) as u32);
                        expected.dedup();
                        let mem = m.all();
                        for _ in 0..3 {
                            for &b in &expected {
                                write(mem, b as usize * BLOCK + round, round as u8);
                            }
                        }
                        assert_eq!(
                            t.take(m.all()).unwrap(),
                            expected,
                            "thread {n} round {round}"
                        );
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn rejects_bad_memories() {
        let mut m = Mapping::new(8);
        let err = DirtyTracker::start(&mut m.all()[1..BLOCK + 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = DirtyTracker::start(&mut m.all()[..BLOCK + 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);

        let mut t = DirtyTracker::start(m.slice(4)).unwrap();
        let err = DirtyTracker::start(m.slice(2)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let err = t.take(m.slice(3)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = t.take(&mut m.all()[BLOCK..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        // Still tracking after the errors.
        write(m.all(), BLOCK, 1);
        assert_eq!(t.take(m.slice(4)).unwrap(), vec![1]);
    }

    #[test]
    fn empty_memory_can_be_tracked_and_grow() {
        let mut m = Mapping::new(4);
        let mut t = DirtyTracker::start(m.slice(0)).unwrap();
        assert_eq!(t.take(m.slice(0)).unwrap(), Vec::<u32>::new());
        assert_eq!(t.take(m.slice(2)).unwrap(), vec![0, 1]);
        write(m.all(), BLOCK, 1);
        assert_eq!(t.take(m.slice(2)).unwrap(), vec![1]);
    }
}
