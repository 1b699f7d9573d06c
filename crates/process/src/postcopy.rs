//! Post-copy: a process that arrives on another node before its memory.
//!
//! A child forked (or a program exec'd) onto another node has not run yet,
//! and sending its memory before it can start is most of what such a move
//! costs (a millisecond for 1 MiB through TLS, against a tenth of that for
//! a fork on one node). So its image goes without the memory's bytes, only
//! the list of blocks that will follow; it starts as soon as its home has
//! committed the move, and its source keeps the memory meanwhile. Once
//! the process runs on past its first slice, first faults on a missing
//! block, or is to be captured, the source streams the blocks a few at a
//! time ([`Ask::Stream`]), each piece acknowledged ([`Ask::More`]), until
//! all are in or the process has ended ([`Ask::Enough`], which its end
//! also sends). A child that exits or execs at once so costs its source no
//! copy at all. Until every block is in:
//!
//! - with `userfaultfd` (root, or `vm.unprivileged_userfaultfd`), the
//!   memory is registered with the node's one `userfaultfd` and its
//!   missing blocks have no page: a process (or its kernel, or a kernel
//!   reading a loan) that touches one waits in the page fault. The node's
//!   fault thread asks the source for that block at once
//!   ([`Ask::Block`]), which sends it ahead of the stream; the node's links
//!   write it (`UFFDIO_COPY`), which ends the wait. Blocks that are zero
//!   at the source are mapped zero at once, and never sent;
//! - without it, the process runs only once every block is in (the copy
//!   is then the eager one, later).
//!
//! The blocks are written by whoever reads the connection they come on
//! (the links' thread, or a kernel polling), never by the kernel the
//! process runs on, which may itself be waiting in a fault. A capture
//! (migration, dormancy, a checkpoint, a fork) first waits until the
//! memory is whole ([`LateMemory::wait`]): it reads the memory's pages,
//! and a missing one would read as zero.
//!
//! If the source's node is lost first, the memory is let go (its missing
//! pages read zero from then on) and the process must be killed: its
//! kernel does so when it hears of the loss ([`LateMemory::from_node`]).
//! Until it does the process may run on up to its next safepoint, and a
//! system call that was reading a missing page may complete with zeros.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

use atoll_abi::{KernelId, Pid};
use serde::{Deserialize, Serialize};
use userfaultfd::{Event, Uffd, UffdBuilder};

use crate::image::{MemoryView, BLOCK};

/// What the destination of a post-copy tells its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ask {
    /// The process waits in a fault on this block: send it now, and start
    /// the stream.
    Block(u32),
    /// The process runs on, or is to be captured: start the stream.
    Stream,
    /// A piece of the stream is in: send the next.
    More,
    /// The memory is whole, or its process ended: stop and let it go.
    Enough,
}

/// Sends an [`Ask`] about process `pid` to its source kernel: the node's
/// links, set once they exist ([`LateMemories::serve`]). `lazy`: the
/// source does not wait on it, and the asking thread, a kernel ending the
/// process, sends the news of that end next: the ask may share its write.
pub type Asker = Box<dyn Fn(Pid, KernelId, Ask, bool) + Send + Sync>;

/// Told `true` when a memory starts arriving on a node that had none on
/// its way, and `false` when the last one is in or let go: the node's
/// links must then read every connection themselves
/// ([`LateMemories::on_awaiting`]).
pub type Awaiting = Box<dyn Fn(bool) + Send + Sync>;

/// The node's memories still arriving, by process: what the links write
/// blocks into.
pub struct LateMemories {
    /// The node's `userfaultfd`, with which every late memory registers;
    /// `None` where the system gives none.
    uffd: Option<Uffd>,
    filling: Mutex<HashMap<Pid, Arc<Late>>>,
    asker: OnceLock<Asker>,
    awaiting: OnceLock<Awaiting>,
}

/// One process's memory while its blocks arrive.
struct Late {
    pid: Pid,
    /// The source kernel, which holds the memory.
    from: KernelId,
    /// Where the memory starts (a pool slot, which never moves) and its
    /// length: what the fault thread matches a fault's address against.
    base: usize,
    len: usize,
    /// The source was asked to stream the blocks.
    streaming: AtomicBool,
    state: Mutex<Filling>,
    changed: Condvar,
}

struct Filling {
    /// One per block of the memory: its bytes are still to come.
    missing: Vec<bool>,
    left: usize,
    /// Whether (parts of) the memory are registered with the node's
    /// `userfaultfd`.
    registered: bool,
    /// `None` while blocks are still to come.
    outcome: Option<Result<(), String>>,
}

/// A process's hold on its memory's arrival; dropping it (the process
/// ended) lets the memory go, complete or not.
pub struct LateMemory {
    late: Arc<Late>,
    memories: Arc<LateMemories>,
}

impl LateMemories {
    /// Asks the system once for the node's `userfaultfd`, unless `faults`
    /// is false (a process then always waits for all of its memory).
    pub fn new(faults: bool) -> Arc<Self> {
        let uffd = faults
            .then(|| {
                UffdBuilder::new()
                    .close_on_exec(true)
                    .non_blocking(true)
                    .user_mode_only(false)
                    .create()
                    .inspect_err(|e| {
                        tracing::info!("no userfaultfd ({e}): a process sent to this node before its memory waits for all of it");
                    })
                    .ok()
            })
            .flatten();
        Arc::new(LateMemories {
            uffd,
            filling: Mutex::new(HashMap::new()),
            asker: OnceLock::new(),
            awaiting: OnceLock::new(),
        })
    }

    /// Whether a late memory lets its process run before it is whole.
    pub fn faults(&self) -> bool {
        self.uffd.is_some()
    }

    /// Tells `awaiting` whether memories are on their way to this node.
    /// A thread that waits for one (a process in a fault, a kernel about to
    /// capture one) may be a kernel that polls the links: it reads nothing
    /// until its block comes, so the links' thread must. Once per node.
    pub fn on_awaiting(&self, awaiting: Awaiting) {
        let _ = self.awaiting.set(awaiting);
    }

    /// Says whether memories are on their way, under the `filling` lock
    /// (so that two changes are told in their order).
    fn tell_awaiting(&self, filling: &HashMap<Pid, Arc<Late>>) {
        if let Some(awaiting) = self.awaiting.get() {
            awaiting(!filling.is_empty());
        }
    }

    /// Starts answering faults: `asker` reaches the sources. Once per node.
    pub fn serve(self: &Arc<Self>, asker: Asker) {
        if self.asker.set(asker).is_err() || self.uffd.is_none() {
            return;
        }
        let memories = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("atoll-faults".into())
            .spawn(move || serve_faults(&memories));
        if let Err(e) = spawned {
            tracing::error!("no fault thread ({e}): late memories wait for their stream");
        }
    }

    /// `memory` (process `pid`'s, whose bytes do not matter: every page is
    /// given back, and it reads zero but for what comes) is to receive the
    /// blocks of `coming` from kernel `from`. With `userfaultfd`, touching
    /// one of them waits for its bytes.
    ///
    /// # Errors
    /// `coming` names blocks outside the memory or out of order, `pid`
    /// already has a memory arriving, or `userfaultfd` refused the memory.
    pub fn expect(
        self: &Arc<Self>,
        pid: Pid,
        from: KernelId,
        memory: &mut [u8],
        coming: &[Range<u32>],
    ) -> Result<LateMemory, String> {
        let blocks = memory.len().div_ceil(BLOCK);
        let mut missing = vec![false; blocks];
        let mut last = 0;
        for r in coming {
            if r.start < last || r.start >= r.end || r.end as usize > blocks {
                return Err(format!(
                    "blocks {r:?} do not follow in a memory of {blocks} blocks"
                ));
            }
            missing[r.start as usize..r.end as usize].fill(true);
            last = r.end;
        }
        let left = missing.iter().filter(|m| **m).count();
        let uffd = self.uffd.as_ref().filter(|_| left > 0);
        let ranges = uffd.map(|_| registered_ranges(coming)).unwrap_or_default();
        clear(memory, &ranges)?;
        if let Some(uffd) = uffd {
            register(uffd, memory, coming, &ranges)?;
        }
        let registered = uffd.is_some();
        let (base, len) = (memory.as_mut_ptr() as usize, blocks * BLOCK);
        let late = Arc::new(Late {
            pid,
            from,
            base,
            len,
            streaming: AtomicBool::new(false),
            state: Mutex::new(Filling {
                missing,
                left,
                registered,
                outcome: (left == 0).then_some(Ok(())),
            }),
            changed: Condvar::new(),
        });
        let hold = LateMemory {
            late: late.clone(),
            memories: self.clone(),
        };
        if left > 0 {
            let mut filling = self.filling.lock().expect("late memories");
            if filling.contains_key(&pid) {
                drop(filling);
                return Err(format!("the memory of {pid} is already arriving"));
            }
            filling.insert(pid, late);
            if filling.len() == 1 {
                self.tell_awaiting(&filling);
            }
        }
        Ok(hold)
    }

    /// Writes the blocks `bytes` carries (an encoded [`MemoryView`]) into
    /// the memory of `pid`, sent by kernel `from`; blocks already in are
    /// left as they are. A piece of the stream (`streamed`) is answered:
    /// more, or enough if the memory is now whole or its process ended.
    ///
    /// # Errors
    /// The bytes do not decode, or name blocks outside the memory: the
    /// frame is dropped (the stream goes on).
    pub fn fill(
        &self,
        from: KernelId,
        pid: Pid,
        bytes: &[u8],
        streamed: bool,
    ) -> Result<(), String> {
        let late = self
            .filling
            .lock()
            .expect("late memories")
            .get(&pid)
            .cloned();
        // No memory awaited: its process ended, and is over too.
        let written = late.map_or(Ok(true), |late| self.write(&late, bytes));
        if streamed {
            let ask = match written {
                Ok(true) => Ask::Enough,
                Ok(false) | Err(_) => Ask::More,
            };
            self.ask(pid, from, ask, false);
        }
        written.map(drop)
    }

    fn ask(&self, pid: Pid, from: KernelId, ask: Ask, lazy: bool) {
        if let Some(asker) = self.asker.get() {
            asker(pid, from, ask, lazy);
        }
    }

    /// Writes a piece into `late`; whether it is now over (whole, or
    /// ended).
    fn write(&self, late: &Late, bytes: &[u8]) -> Result<bool, String> {
        let pid = late.pid;
        let view: MemoryView<'_> =
            postcard::from_bytes(bytes).map_err(|e| format!("blocks of {pid}: {e}"))?;
        let mut state = late.state.lock().expect("late memory");
        if state.outcome.is_some() {
            return Ok(true);
        }
        for run in &view.runs {
            let at = run.at as usize;
            if !at.is_multiple_of(BLOCK)
                || !run.bytes.len().is_multiple_of(BLOCK)
                || at + run.bytes.len() > late.len
            {
                return Err(format!(
                    "blocks of {pid} at {at} ({} bytes) do not fit its memory",
                    run.bytes.len()
                ));
            }
            for (i, block) in run.bytes.chunks(BLOCK).enumerate() {
                let b = at / BLOCK + i;
                if !state.missing[b] {
                    continue;
                }
                let dst = late.base + b * BLOCK;
                match (&self.uffd, state.registered) {
                    (Some(uffd), true) => copy(uffd, block, dst)
                        .map_err(|e| format!("userfaultfd copy into {pid}: {e}"))?,
                    // SAFETY: unregistered, the process does not run, and
                    // its kernel does not touch its memory, until every
                    // block is in (`LateMemory::wait`); `dst` lies within
                    // the memory (checked above).
                    _ => unsafe {
                        std::ptr::copy_nonoverlapping(block.as_ptr(), dst as *mut u8, BLOCK);
                    },
                }
                state.missing[b] = false;
                state.left -= 1;
            }
        }
        if state.left == 0 {
            self.finish(late, &mut state, Ok(()));
            return Ok(true);
        }
        Ok(false)
    }

    /// Node `node` is lost: the memories it was sending are let go.
    pub fn lost(&self, node: u16) {
        let lost: Vec<Arc<Late>> = self
            .filling
            .lock()
            .expect("late memories")
            .values()
            .filter(|l| l.from.node == node)
            .cloned()
            .collect();
        for late in lost {
            let mut state = late.state.lock().expect("late memory");
            if state.outcome.is_none() {
                let why = format!(
                    "node {node} was lost before the memory of {} arrived",
                    late.pid
                );
                self.finish(&late, &mut state, Err(why));
            }
        }
    }

    /// Ends an arrival: the memory leaves `userfaultfd` (whoever waits in
    /// a fault then reads the page, zero if it never came), and whoever
    /// waits for it whole is told.
    fn finish(
        &self,
        late: &Late,
        state: &mut MutexGuard<'_, Filling>,
        outcome: Result<(), String>,
    ) {
        if let (Some(uffd), true) = (&self.uffd, state.registered) {
            state.registered = false;
            if let Err(e) = uffd.unregister(late.base as *mut libc::c_void, late.len) {
                tracing::error!(pid = %late.pid, "cannot unregister a late memory: {e}");
            }
        }
        state.outcome = Some(outcome);
        late.changed.notify_all();
        let mut filling = self.filling.lock().expect("late memories");
        if filling
            .get(&late.pid)
            .is_some_and(|l| std::ptr::eq(&**l, late))
        {
            filling.remove(&late.pid);
            if filling.is_empty() {
                self.tell_awaiting(&filling);
            }
        }
    }

    /// The memory that `addr` lies in, and its block there.
    fn at(&self, addr: usize) -> Option<(Arc<Late>, u32)> {
        let filling = self.filling.lock().expect("late memories");
        let late = filling
            .values()
            .find(|l| (l.base..l.base + l.len).contains(&addr))?;
        Some((late.clone(), ((addr - late.base) / BLOCK) as u32))
    }
}

impl LateMemory {
    /// The process runs on: asks its source, once, to stream the blocks.
    pub fn stream(&self) {
        if !self.late.streaming.swap(true, Ordering::Relaxed) {
            self.ask(Ask::Stream);
        }
    }

    /// Waits until every block is in, asking the source to stream them
    /// (again: a stream asked for before the source was ready is not
    /// lost).
    ///
    /// # Errors
    /// The source's node was lost first.
    pub fn wait(&self) -> Result<(), String> {
        self.late.streaming.store(true, Ordering::Relaxed);
        if self
            .late
            .state
            .lock()
            .expect("late memory")
            .outcome
            .is_none()
        {
            self.ask(Ask::Stream);
        }
        let state = self.late.state.lock().expect("late memory");
        let state = self
            .late
            .changed
            .wait_while(state, |s| s.outcome.is_none())
            .expect("late memory");
        state.outcome.clone().expect("waited for it")
    }

    /// The node sending the blocks, while some are still to come or if
    /// they never came.
    pub fn from_node(&self) -> Option<u16> {
        let state = self.late.state.lock().expect("late memory");
        (!matches!(state.outcome, Some(Ok(())))).then_some(self.late.from.node)
    }

    fn ask(&self, ask: Ask) {
        self.memories.ask(self.late.pid, self.late.from, ask, false);
    }
}

impl Drop for LateMemory {
    /// The process ended: a memory still arriving is let go, here and at
    /// its source. The source's `Enough` shares the write of the end's
    /// news, which its kernel sends next: a write to another node costs
    /// 10-30 us of system call here, on the way to a parent's `wait`.
    fn drop(&mut self) {
        let mut state = self.late.state.lock().expect("late memory");
        if state.outcome.is_some() {
            return;
        }
        let why = format!("process {} ended before its memory arrived", self.late.pid);
        self.memories.finish(&self.late, &mut state, Err(why));
        drop(state);
        let late = &self.late;
        self.memories.ask(late.pid, late.from, Ask::Enough, true);
    }
}

/// The blocks of `memory` (the process at its source) from the ranges
/// `blocks`, encoded as one [`MemoryView`]: what [`LateMemories::fill`]
/// takes.
pub fn encode_blocks(memory: &[u8], blocks: impl IntoIterator<Item = u32>) -> Vec<u8> {
    let view = MemoryView::blocks_of(memory, blocks);
    postcard::to_allocvec(&view).expect("a memory view encodes")
}

/// The fault thread: each fault on a late memory asks its source for the
/// block. It ends with the node (its `LateMemories` gone), which it checks
/// between waits of at most [`FAULT_WAIT_MS`].
fn serve_faults(memories: &Weak<LateMemories>) {
    while let Some(m) = memories.upgrade() {
        let uffd = m.uffd.as_ref().expect("served only with a userfaultfd");
        let mut fd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(uffd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, on a descriptor `m` keeps open.
        if unsafe { libc::poll(&mut fd, 1, FAULT_WAIT_MS) } <= 0 {
            continue;
        }
        loop {
            match uffd.read_event() {
                Ok(Some(Event::Pagefault { addr, .. })) => {
                    if let Some((late, block)) = m.at(addr as usize) {
                        late.streaming.store(true, Ordering::Relaxed);
                        m.ask(late.pid, late.from, Ask::Block(block), false);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("the fault thread stops: {e}");
                    return;
                }
            }
        }
    }
}

/// How long the fault thread waits for a fault before it checks that the
/// node still runs.
const FAULT_WAIT_MS: i32 = 200;

/// The ranges of a memory registered for the blocks `coming`: every range
/// is a mapping of its own, so ranges closer than [`MERGED_GAP`] blocks are
/// registered as one; fewer than [`MOST_RANGES`] are registered in all.
fn registered_ranges(coming: &[Range<u32>]) -> Vec<Range<u32>> {
    let mut gap = MERGED_GAP;
    loop {
        let merged = merge(coming, gap);
        if merged.len() <= MOST_RANGES {
            return merged;
        }
        gap *= 4;
    }
}

/// Makes `memory` read as zero, with no page at all in `absent` (blocks),
/// where `userfaultfd` must see a touch. Only blocks that have a page are
/// touched: one `MADV_DONTNEED` of the whole memory took 41 us on the
/// 2-core VM when restoring a forked child into a spare instance, whose
/// 2 MiB had three pages (`placebench fork` across nodes).
fn clear(memory: &mut [u8], absent: &[Range<u32>]) -> Result<(), String> {
    let len = memory.len();
    let blocks = len.div_ceil(BLOCK);
    let Some(entered) = crate::resident::entered_blocks(memory, 0..blocks as u32) else {
        return give_back(memory, 0..blocks);
    };
    let mut in_absent = vec![false; blocks];
    for r in absent {
        in_absent[r.start as usize..(r.end as usize).min(blocks)].fill(true);
    }
    let mut b = 0;
    while b < blocks {
        if !entered[b] {
            b += 1;
        } else if in_absent[b] {
            let end = (b..blocks)
                .find(|&e| !(entered[e] && in_absent[e]))
                .unwrap_or(blocks);
            give_back(memory, b..end)?;
            b = end;
        } else {
            let block = &mut memory[b * BLOCK..((b + 1) * BLOCK).min(len)];
            if !crate::image::is_zero(block) {
                block.fill(0);
            }
            b += 1;
        }
    }
    Ok(())
}

/// Gives back every page of `memory` that has one (`Container::give_back_memory`).
pub(crate) fn give_back_all(memory: &mut [u8]) -> Result<(), String> {
    let all = 0..memory.len().div_ceil(BLOCK) as u32;
    clear(memory, std::slice::from_ref(&all))
}

/// Gives back the pages of `blocks` of `memory`: they read zero, and have
/// no page until touched.
fn give_back(memory: &mut [u8], blocks: Range<usize>) -> Result<(), String> {
    let end = (blocks.end * BLOCK).min(memory.len());
    let bytes = &mut memory[blocks.start * BLOCK..end];
    // SAFETY: the range is these bytes, which the caller holds and gives up.
    if unsafe { libc::madvise(bytes.as_mut_ptr().cast(), bytes.len(), libc::MADV_DONTNEED) } != 0 {
        return Err(format!("madvise: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Registers `ranges` of `memory` (which have no page), where the blocks
/// `coming` lie, for missing-page faults; the blocks between the parts of
/// one range are mapped zero, as the kernel maps a page of the memory that
/// is not registered on its first touch.
fn register(
    uffd: &Uffd,
    memory: &mut [u8],
    coming: &[Range<u32>],
    ranges: &[Range<u32>],
) -> Result<(), String> {
    let base = memory.as_mut_ptr();
    let mut done: Vec<Range<u32>> = Vec::new();
    let undo = |done: &[Range<u32>], why: String| {
        for r in done {
            // SAFETY: a range registered above.
            let _ = uffd.unregister(
                unsafe { base.add(r.start as usize * BLOCK) }.cast(),
                r.len() * BLOCK,
            );
        }
        why
    };
    let mut parts = coming.iter().peekable();
    for r in ranges {
        // SAFETY: `r` lies within the memory (checked by the caller).
        let at = |b: u32| unsafe { base.add(b as usize * BLOCK) }.cast::<libc::c_void>();
        uffd.register(at(r.start), r.len() * BLOCK)
            .map_err(|e| undo(&done, format!("userfaultfd register: {e}")))?;
        done.push(r.clone());
        // The gaps between the parts it merged.
        let mut next = r.start;
        while let Some(part) = parts.next_if(|p| p.start < r.end) {
            if part.start > next {
                // SAFETY: within the range just registered.
                unsafe { uffd.zeropage(at(next), (part.start - next) as usize * BLOCK, false) }
                    .map_err(|e| undo(&done, format!("userfaultfd zero page: {e}")))?;
            }
            next = part.end;
        }
    }
    Ok(())
}

/// Blocks between two ranges of a late memory below which they are
/// registered as one.
const MERGED_GAP: u32 = 16;
/// Most ranges of one memory registered apart.
const MOST_RANGES: usize = 64;

/// `ranges` (ascending), those closer than `gap` blocks made one.
fn merge(ranges: &[Range<u32>], gap: u32) -> Vec<Range<u32>> {
    let mut out: Vec<Range<u32>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start - last.end < gap => last.end = r.end,
            _ => out.push(r.clone()),
        }
    }
    out
}

/// `UFFDIO_COPY` of `bytes` to `dst`, which may take several calls.
fn copy(uffd: &Uffd, bytes: &[u8], dst: usize) -> Result<(), userfaultfd::Error> {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: `dst..dst + bytes.len()` is missing pages of a registered
        // memory (checked by the caller), and `bytes` is readable.
        done += match unsafe {
            uffd.copy(
                bytes[done..].as_ptr().cast(),
                (dst + done) as *mut libc::c_void,
                bytes.len() - done,
                true,
            )
        } {
            Ok(n) | Err(userfaultfd::Error::PartiallyCopied(n)) => n,
            Err(e) => return Err(e),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const BLOCKS: usize = 16;

    /// Anonymous memory, as a pool slot is.
    struct Mapped(*mut u8);

    impl Mapped {
        fn new() -> Self {
            Mapped(crate::resident::anonymous(BLOCKS * BLOCK))
        }
        fn bytes(&self) -> &'static mut [u8] {
            // SAFETY: the mapping outlives every test's use of it (it is
            // leaked: a thread may still wait in it when a test fails).
            unsafe { std::slice::from_raw_parts_mut(self.0, BLOCKS * BLOCK) }
        }
        /// Reads a byte of block `b` on another thread, as the process
        /// would (it may wait in a fault).
        fn read_later(&self, b: usize) -> mpsc::Receiver<u8> {
            let (tx, rx) = mpsc::channel();
            let at = self.0 as usize + b * BLOCK + 5;
            std::thread::spawn(move || {
                // SAFETY: within the mapping, which is never unmapped.
                let byte = unsafe { std::ptr::read_volatile(at as *const u8) };
                tx.send(byte)
            });
            rx
        }
    }

    fn only(r: Range<u32>) -> Vec<Range<u32>> {
        std::iter::once(r).collect()
    }

    fn pid() -> Pid {
        Pid::new(KernelId::new(1, 0), 3, 1)
    }
    const SOURCE: KernelId = KernelId { node: 0, index: 0 };

    /// A piece carrying block `b`, every byte `v`.
    fn piece(b: u32, v: u8) -> Vec<u8> {
        let memory = vec![v; BLOCKS * BLOCK];
        encode_blocks(&memory, [b])
    }

    /// A memory whose blocks `coming` are awaited from `SOURCE`.
    fn awaiting(m: &Arc<LateMemories>, coming: Range<u32>) -> (Mapped, LateMemory) {
        let memory = Mapped::new();
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &only(coming))
            .unwrap();
        (memory, late)
    }

    /// What `m` asks the source, as it asks it.
    fn asked(m: &Arc<LateMemories>) -> mpsc::Receiver<(Pid, KernelId, Ask)> {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        m.serve(Box::new(move |pid, to, ask, _lazy| {
            tx.lock().unwrap().send((pid, to, ask)).unwrap()
        }));
        rx
    }

    fn faulting() -> Option<Arc<LateMemories>> {
        let m = LateMemories::new(true);
        if !m.faults() {
            eprintln!("no userfaultfd here: the fault tests cannot run");
            return None;
        }
        Some(m)
    }

    #[test]
    fn without_faults_blocks_are_copied_and_the_wait_ends_when_all_are_in() {
        let m = LateMemories::new(false);
        let memory = Mapped::new();
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &only(2..4))
            .unwrap();
        assert_eq!(late.from_node(), Some(0));
        m.fill(SOURCE, pid(), &piece(2, 9), false).unwrap();
        // Blocks already in are left as they are.
        m.fill(SOURCE, pid(), &piece(2, 1), false).unwrap();
        assert_eq!(memory.bytes()[2 * BLOCK], 9);
        let waiting = std::thread::scope(|s| {
            let w = s.spawn(|| late.wait());
            std::thread::sleep(Duration::from_millis(20));
            assert!(!w.is_finished(), "the wait ended with a block missing");
            m.fill(SOURCE, pid(), &piece(3, 8), false).unwrap();
            w.join().unwrap()
        });
        assert_eq!(waiting, Ok(()));
        assert_eq!(memory.bytes()[3 * BLOCK + 100], 8);
        assert_eq!(late.from_node(), None);
    }

    #[test]
    fn blocks_outside_the_memory_or_not_whole_are_refused() {
        let m = LateMemories::new(false);
        let memory = Mapped::new();
        assert!(m
            .expect(
                pid(),
                SOURCE,
                memory.bytes(),
                &only(Range { start: 4, end: 2 })
            )
            .is_err());
        assert!(m
            .expect(pid(), SOURCE, memory.bytes(), &only(3..BLOCKS as u32 + 1))
            .is_err());
        let _late = m
            .expect(pid(), SOURCE, memory.bytes(), &only(1..2))
            .unwrap();
        assert!(
            m.expect(pid(), SOURCE, memory.bytes(), &only(1..2))
                .is_err(),
            "twice"
        );
        let far = vec![1u8; 2 * BLOCKS * BLOCK];
        let outside = encode_blocks(&far, [BLOCKS as u32 + 1]);
        assert!(m.fill(SOURCE, pid(), &outside, false).is_err());
        let half = postcard::to_allocvec(&MemoryView::blocks_of(&far[..BLOCK + 10], [1])).unwrap();
        assert!(m.fill(SOURCE, pid(), &half, false).is_err());
        assert!(m.fill(SOURCE, pid(), b"garbage", false).is_err());
    }

    #[test]
    fn the_stream_is_acknowledged_until_the_memory_is_whole_or_its_process_gone() {
        let m = LateMemories::new(false);
        let rx = asked(&m);
        let (_memory, late) = awaiting(&m, 0..2);
        m.fill(SOURCE, pid(), &piece(0, 1), true).unwrap();
        assert_eq!(rx.try_recv(), Ok((pid(), SOURCE, Ask::More)));
        m.fill(SOURCE, pid(), &piece(1, 1), true).unwrap();
        assert_eq!(rx.try_recv(), Ok((pid(), SOURCE, Ask::Enough)));
        assert_eq!(late.wait(), Ok(()));
        // A piece for a process that ended: enough.
        m.fill(SOURCE, pid(), &piece(5, 1), true).unwrap();
        assert_eq!(rx.try_recv(), Ok((pid(), SOURCE, Ask::Enough)));
        // Blocks wanted now are not acknowledged.
        m.fill(SOURCE, pid(), &piece(5, 1), false).unwrap();
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn the_stream_is_asked_for_once_and_an_ended_process_says_enough() {
        let m = LateMemories::new(false);
        let rx = asked(&m);
        let (memory, late) = awaiting(&m, 0..2);
        assert!(rx.try_recv().is_err(), "asked before the process ran");
        late.stream();
        late.stream();
        assert_eq!(rx.try_recv(), Ok((pid(), SOURCE, Ask::Stream)));
        assert!(rx.try_recv().is_err(), "asked twice");
        // A capture waits, and asks again (the first ask may have come
        // before the source was ready).
        std::thread::scope(|s| {
            let w = s.spawn(|| late.wait());
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(5)),
                Ok((pid(), SOURCE, Ask::Stream))
            );
            m.fill(SOURCE, pid(), &piece(0, 1), false).unwrap();
            m.fill(SOURCE, pid(), &piece(1, 1), false).unwrap();
            assert_eq!(w.join().unwrap(), Ok(()));
        });
        // Whole, it asks nothing when its process ends.
        drop(late);
        assert!(rx.try_recv().is_err());
        // Ended before its memory came: the source may let it go.
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &only(3..4))
            .unwrap();
        drop(late);
        assert_eq!(rx.try_recv(), Ok((pid(), SOURCE, Ask::Enough)));
    }

    #[test]
    fn a_missing_block_waits_for_its_bytes_and_a_zero_one_does_not() {
        let Some(m) = faulting() else { return };
        let rx = asked(&m);
        let memory = Mapped::new();
        memory.bytes().fill(0);
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &[3..5, 9..10])
            .unwrap();
        assert_eq!(
            memory.read_later(0).recv_timeout(Duration::from_secs(5)),
            Ok(0)
        );
        let waiting = memory.read_later(4);
        // The fault thread asks the source for the block.
        let asked = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(asked, (pid(), SOURCE, Ask::Block(4)));
        assert!(
            waiting.recv_timeout(Duration::from_millis(50)).is_err(),
            "read before its bytes came"
        );
        m.fill(SOURCE, pid(), &piece(4, 6), false).unwrap();
        assert_eq!(waiting.recv_timeout(Duration::from_secs(5)), Ok(6));
        // Written by the process as any page, once there.
        memory.bytes()[4 * BLOCK] = 2;
        m.fill(SOURCE, pid(), &piece(3, 7), false).unwrap();
        m.fill(SOURCE, pid(), &piece(9, 5), false).unwrap();
        assert_eq!(late.wait(), Ok(()));
        assert_eq!(
            (memory.bytes()[3 * BLOCK], memory.bytes()[4 * BLOCK]),
            (7, 2)
        );
        assert_eq!(memory.bytes()[9 * BLOCK + BLOCK - 1], 5);
    }

    #[test]
    fn a_used_memory_reads_zero_but_for_what_comes() {
        let Some(m) = faulting() else { return };
        let rx = asked(&m);
        let memory = Mapped::new();
        // Another process's bytes, as a spare instance holds them: blocks
        // 1, 3, 6 and 14 written, 4 only read (the shared zero page, which
        // userfaultfd would not report a touch of).
        for b in [1, 3, 6, 14] {
            memory.bytes()[b * BLOCK + 5] = 9;
        }
        assert_eq!(std::hint::black_box(memory.bytes()[4 * BLOCK + 5]), 0);
        // Registered as one range, 3..13, block 6 between its parts.
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &[3..5, 12..13])
            .unwrap();
        for b in [1, 6, 14] {
            let read = memory.read_later(b).recv_timeout(Duration::from_secs(5));
            assert_eq!(read, Ok(0), "block {b}");
        }
        let waiting = memory.read_later(4);
        let asked = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(asked, (pid(), SOURCE, Ask::Block(4)));
        m.fill(SOURCE, pid(), &piece(4, 6), false).unwrap();
        assert_eq!(waiting.recv_timeout(Duration::from_secs(5)), Ok(6));
        m.fill(SOURCE, pid(), &piece(3, 7), false).unwrap();
        m.fill(SOURCE, pid(), &piece(12, 5), false).unwrap();
        assert_eq!(late.wait(), Ok(()));
        assert_eq!(memory.bytes()[3 * BLOCK + 5], 7);
        assert_eq!(memory.bytes()[12 * BLOCK + 5], 5);
    }

    #[test]
    fn a_lost_source_or_an_ended_process_lets_the_memory_go() {
        let Some(m) = faulting() else { return };
        let memory = Mapped::new();
        let late = m
            .expect(pid(), SOURCE, memory.bytes(), &only(1..3))
            .unwrap();
        let waiting = memory.read_later(1);
        assert!(waiting.recv_timeout(Duration::from_millis(50)).is_err());
        m.lost(1);
        assert!(
            waiting.recv_timeout(Duration::from_millis(50)).is_err(),
            "another node's loss"
        );
        m.lost(0);
        assert_eq!(waiting.recv_timeout(Duration::from_secs(5)), Ok(0));
        assert!(late.wait().unwrap_err().contains("node 0 was lost"));
        assert_eq!(late.from_node(), Some(0));
        drop(late);
        // A process that ends with blocks missing leaves no fault behind.
        let other = Mapped::new();
        let late = m.expect(pid(), SOURCE, other.bytes(), &only(2..3)).unwrap();
        drop(late);
        assert_eq!(
            other.read_later(2).recv_timeout(Duration::from_secs(5)),
            Ok(0)
        );
        // And its pid may arrive again.
        assert!(m.expect(pid(), SOURCE, other.bytes(), &only(2..3)).is_ok());
    }
}
