//! A process's threads: cooperative, on its kernel, kept in its UArea.
//!
//! A process starts with one thread and no table. Its first
//! `atoll_thread_spawn` (or futex wait) makes the table, with the thread
//! that was running as thread 1. From then on [`Container::run`] is a small
//! scheduler: it runs a ready thread until it stops (a system call that
//! waits, a safepoint at the end of the quantum), saves what is the
//! thread's own, and runs the next, until none is ready or the slice is
//! used up.
//!
//! What is a thread's own, saved when it stops and written back when it
//! runs again ([`Context`]): the instance's mutable globals (the C stack
//! pointer among them), its Asyncify stack (the bytes its unwind left in
//! the stack area), and the words of linear memory the program registered
//! as per-thread (`errno`, the thread's `pthread_self`). Its C stack is in
//! linear memory already, where the guest library allocated it. So a
//! process with threads is, between slices, its memory, its globals and its
//! UArea, as any other: it is captured, migrated and restored without
//! anything new.
//!
//! The kernel sees one call per process, [`UArea::call`]. A thread that
//! makes a kernel call while another thread is in one (the *seat* is
//! taken) waits for its turn; the others go on running. Waits that concern
//! the process alone (futexes, sleeps, yields) never reach the kernel:
//! the kernel only learns when to run the process again (`Slice::Idle`).
//!
//! [`Container::run`]: crate::Container::run
//! [`UArea::call`]: crate::UArea::call

use std::collections::{BTreeMap, VecDeque};

use atoll_ipc::IpcCall;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::call::{CallState, KernelCall, Reply};
use crate::image::GlobalValue;

/// A thread's number within its process: 1 for the thread that started
/// it, then 2, 3, ... in order of creation, never reused.
pub type Tid = u32;

/// Most threads a process may have at once.
pub const MAX_THREADS: usize = 4096;

/// Most per-thread words a program may register (`atoll_thread_locals`).
pub const MAX_LOCALS: usize = 16;

/// A process's threads; empty while it has only the one it started with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Threads {
    threads: BTreeMap<Tid, Thread>,
    /// Threads that can run, in the order they will.
    ready: VecDeque<Tid>,
    /// Threads waiting for the seat, in the order they asked.
    queued: VecDeque<Tid>,
    /// Threads waiting on each futex, in the order they came: a wake
    /// costs what it wakes, not a scan of every thread. Inline: a futex
    /// rarely has many waiters, and a wait then allocates nothing.
    futexes: BTreeMap<u32, SmallVec<[Tid; 4]>>,
    /// The thread in a kernel call ([`crate::UArea::call`] is its call).
    seat: Option<Tid>,
    /// The thread that runs (during a slice) or ran last.
    current: Tid,
    next: Tid,
    /// Addresses of the words each thread has its own copy of.
    locals: Vec<u32>,
    /// No waiting thread's deadline is earlier (some may be later: a
    /// thread woken before its deadline leaves it here until the next
    /// [`wake_due`](Self::wake_due)).
    earliest: Option<u64>,
    /// Contexts saved so far: the next one's [`Context::seq`].
    saves: u64,
}

/// One thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thread {
    pub state: ThreadState,
    /// What it runs: `None` for thread 1 (`_start`).
    pub entry: Option<Entry>,
    /// Its own state while it does not run; `None` before it first runs.
    pub saved: Option<Saved>,
}

/// A waiting thread's own state, or, in the last frame of a migration,
/// which one the destination already has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Saved {
    Context(Context),
    /// The context numbered `seq`, sent in an earlier frame: its thread
    /// has not run since. Resolved by [`Threads::resolve_sent`]; a process
    /// is never run or restored with one.
    AsSent {
        seq: u64,
    },
}

/// Where a thread starts: `func(arg)`, `func` an index into the module's
/// function table (a C function pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub func: u32,
    pub arg: u32,
}

/// What a thread is doing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ThreadState {
    /// Running, or can run: it resumes with this answer (`None`: it has
    /// not started, or is the one running).
    Ready(Option<Reply>),
    /// Waits, within the process.
    Waiting(Wait),
    /// In a kernel call: the process's [`crate::UArea::call`].
    InKernel,
}

/// What a thread waits for, within its process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Wait {
    /// A `futex_wake` on this address, or the deadline.
    Futex { addr: u32, until_ns: Option<u64> },
    /// The node's monotonic clock to read `until_ns`.
    Sleep { until_ns: u64 },
    /// Its turn in the kernel, to make this call (`None`: to make again
    /// the IPC call it was making, which goes to the kernel directly).
    Seat(Option<KernelCall>),
}

/// Why a thread stopped without a kernel call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ThreadStop {
    Wait(Wait),
    /// `atoll_thread_exit`: it unwinds (cheaper than a trap out of the
    /// guest) and is dropped.
    Exit,
    /// The process ends with this status (`proc_exit`, a kill of itself,
    /// the last thread's exit): it unwinds rather than trap out, since a
    /// trap captures a wasm backtrace that nobody reads.
    ProcessExit(i32),
}

/// What is a thread's own while another runs. Kept inline where it is small
/// (a C program has one mutable global, and registers two words): a
/// migration's final round encodes and decodes every thread's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Its number among the process's saved contexts. A context never
    /// changes once saved (a thread that runs again saves a new one), so
    /// the same number is the same context.
    pub seq: u64,
    pub globals: SmallVec<[GlobalValue; 2]>,
    /// The Asyncify data its unwind left (the stack area's buffer); as
    /// bytes, not a sequence: a migration's downtime pays for its encoding.
    #[serde(with = "serde_bytes")]
    pub stack: Vec<u8>,
    /// Its values of the registered per-thread words.
    pub locals: SmallVec<[u32; 4]>,
}

impl Threads {
    /// Whether the process has a thread table (it made a second thread, or
    /// waited on a futex).
    pub fn active(&self) -> bool {
        !self.threads.is_empty()
    }

    /// Makes the table, with the running thread as thread 1.
    pub(crate) fn activate(&mut self) {
        if self.active() {
            return;
        }
        self.threads.insert(
            1,
            Thread {
                state: ThreadState::Ready(None),
                entry: None,
                saved: None,
            },
        );
        self.current = 1;
        self.next = 2;
    }

    /// Adds a thread that will run `entry`.
    ///
    /// # Errors
    /// `EAGAIN` past [`MAX_THREADS`].
    pub(crate) fn spawn(&mut self, entry: Entry) -> Result<Tid, atoll_abi::Errno> {
        self.activate();
        if self.threads.len() >= MAX_THREADS {
            return Err(atoll_abi::Errno::Again);
        }
        let tid = self.next;
        self.next += 1;
        self.threads.insert(
            tid,
            Thread {
                state: ThreadState::Ready(None),
                entry: Some(entry),
                saved: None,
            },
        );
        self.ready.push_back(tid);
        Ok(tid)
    }

    pub fn current(&self) -> Tid {
        self.current
    }

    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    pub(crate) fn thread_mut(&mut self, tid: Tid) -> Option<&mut Thread> {
        self.threads.get_mut(&tid)
    }

    /// Ends thread `tid`. Returns whether threads remain.
    pub(crate) fn end(&mut self, tid: Tid) -> bool {
        // Its places in the ready and seat lines are skipped when reached.
        if let Some(t) = self.threads.remove(&tid) {
            self.unqueue_futex(tid, &t.state);
        }
        if self.seat == Some(tid) {
            self.seat = None;
        }
        !self.threads.is_empty()
    }

    /// Makes `tid` ready to resume with `reply`, last in line.
    pub(crate) fn make_ready(&mut self, tid: Tid, reply: Option<Reply>) {
        if let Some(t) = self.threads.get_mut(&tid) {
            let was = std::mem::replace(&mut t.state, ThreadState::Ready(reply));
            self.ready.push_back(tid);
            self.unqueue_futex(tid, &was);
        }
    }

    /// Takes `tid` out of the queue of the futex it waited on, if any.
    fn unqueue_futex(&mut self, tid: Tid, was: &ThreadState) {
        if let ThreadState::Waiting(Wait::Futex { addr, .. }) = was {
            if let Some(queue) = self.futexes.get_mut(addr) {
                queue.retain(|t| *t != tid);
                if queue.is_empty() {
                    self.futexes.remove(addr);
                }
            }
        }
    }

    /// Puts `tid` to wait for `wait`.
    pub(crate) fn wait(&mut self, tid: Tid, wait: Wait) {
        if let Some(t) = self.threads.get_mut(&tid) {
            let deadline = match wait {
                Wait::Seat(_) => {
                    self.queued.push_back(tid);
                    None
                }
                Wait::Sleep { until_ns } => Some(until_ns),
                Wait::Futex { addr, until_ns } => {
                    self.futexes.entry(addr).or_default().push(tid);
                    until_ns
                }
            };
            if let Some(d) = deadline {
                self.earliest = Some(self.earliest.map_or(d, |e| e.min(d)));
            }
            t.state = ThreadState::Waiting(wait);
        }
    }

    /// The time, from `clock`, if a waiting thread's deadline may have
    /// come by then. The clock is read only when some thread has a
    /// deadline: this is asked at every switch between threads.
    pub(crate) fn due(&self, clock: impl FnOnce() -> u64) -> Option<u64> {
        let earliest = self.earliest?;
        let now_ns = clock();
        (earliest <= now_ns).then_some(now_ns)
    }

    /// Whether the seat is taken, or promised to threads waiting for it:
    /// a kernel call now would have to wait.
    pub(crate) fn seat_taken(&self) -> bool {
        self.seat.is_some() || !self.queued.is_empty()
    }

    pub fn seat(&self) -> Option<Tid> {
        self.seat
    }

    /// `tid` is in a kernel call now.
    pub(crate) fn take_seat(&mut self, tid: Tid) {
        self.seat = Some(tid);
        if let Some(t) = self.threads.get_mut(&tid) {
            t.state = ThreadState::InKernel;
        }
    }

    /// The thread in the seat, blocked in a receive that nothing has
    /// answered yet (`seat_call`), gives the seat up if the first thread
    /// in line makes a prompt call ([`KernelCall::is_prompt`]): it waits
    /// in line behind it to make its receive again. Otherwise a spawn,
    /// fork or kill would wait for a message that may never come, or
    /// that only the process it would spawn sends. The kernel keeps no
    /// more of a blocked receive than the call in the UArea (what it
    /// records besides is tied to the call's sequence number, or also
    /// holds for the receive made again), so the receive loses nothing.
    /// Returns whether it did.
    pub(crate) fn withdraw_receive(&mut self, seat_call: &CallState) -> bool {
        if !matches!(
            seat_call,
            CallState::Blocked(KernelCall::Ipc(IpcCall::Receive { .. }))
        ) {
            return false;
        }
        let prompt_in_line = self
            .queued
            .iter()
            .find_map(|tid| match &self.threads.get(tid)?.state {
                ThreadState::Waiting(Wait::Seat(call)) => Some(call.as_ref()),
                _ => None,
            })
            .is_some_and(|call| call.is_some_and(KernelCall::is_prompt));
        if !prompt_in_line {
            return false;
        }
        let Some(tid) = self.seat.take() else {
            return false;
        };
        self.wait(tid, Wait::Seat(None));
        true
    }

    /// The thread in the kernel was answered: it runs now, out of the seat.
    pub(crate) fn resume_seat(&mut self) {
        if let Some(tid) = self.seat.take() {
            self.current = tid;
            if let Some(t) = self.threads.get_mut(&tid) {
                t.state = ThreadState::Ready(None);
            }
        }
    }

    /// The next thread waiting for the free seat, and the call it makes.
    pub(crate) fn next_in_line(&mut self) -> Option<(Tid, Option<KernelCall>)> {
        if self.seat.is_some() {
            return None;
        }
        while let Some(tid) = self.queued.pop_front() {
            if let Some(ThreadState::Waiting(Wait::Seat(call))) =
                self.threads.get_mut(&tid).map(|t| &mut t.state)
            {
                return Some((tid, call.take()));
            }
        }
        None
    }

    /// The next ready thread, taken out of line; it becomes the current one.
    pub(crate) fn next_ready(&mut self) -> Option<(Tid, Option<Reply>)> {
        while let Some(tid) = self.ready.pop_front() {
            if let Some(t) = self.threads.get_mut(&tid) {
                if let ThreadState::Ready(reply) = &mut t.state {
                    let reply = reply.take();
                    self.current = tid;
                    return Some((tid, reply));
                }
            }
        }
        None
    }

    /// Whether a thread could run now (ready, or next for a free seat; an
    /// ended thread's place in a line may make this say so wrongly once,
    /// which costs an empty slice).
    pub fn runnable(&self) -> bool {
        !self.ready.is_empty() || (self.seat.is_none() && !self.queued.is_empty())
    }

    /// Wakes at most `count` threads waiting on the futex at `addr`, in the
    /// order they began to wait; returns how many.
    pub(crate) fn futex_wake(&mut self, addr: u32, count: u32) -> u32 {
        let Some(queue) = self.futexes.get_mut(&addr) else {
            return 0;
        };
        let n = queue.len().min(count as usize);
        for tid in queue.drain(..n) {
            if let Some(t) = self.threads.get_mut(&tid) {
                t.state = ThreadState::Ready(Some(Reply::Woken { timed_out: false }));
                self.ready.push_back(tid);
            }
        }
        if queue.is_empty() {
            self.futexes.remove(&addr);
        }
        n as u32
    }

    /// Makes ready the threads whose deadline is `now_ns` or earlier;
    /// returns whether there were any.
    pub fn wake_due(&mut self, now_ns: u64) -> bool {
        let due: Vec<(Tid, Reply)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| match t.state {
                ThreadState::Waiting(Wait::Sleep { until_ns }) if until_ns <= now_ns => {
                    Some((tid, Reply::Done))
                }
                ThreadState::Waiting(Wait::Futex {
                    until_ns: Some(until_ns),
                    ..
                }) if until_ns <= now_ns => Some((tid, Reply::Woken { timed_out: true })),
                _ => None,
            })
            .collect();
        let any = !due.is_empty();
        for (tid, reply) in due {
            self.make_ready(tid, Some(reply));
        }
        self.earliest = self.next_deadline();
        any
    }

    /// The earliest deadline a thread waits for.
    pub fn next_deadline(&self) -> Option<u64> {
        self.threads
            .values()
            .filter_map(|t| match t.state {
                ThreadState::Waiting(Wait::Sleep { until_ns }) => Some(until_ns),
                ThreadState::Waiting(Wait::Futex { until_ns, .. }) => until_ns,
                _ => None,
            })
            .min()
    }

    /// Registers the per-thread words (`atoll_thread_locals`): the running
    /// thread keeps their current values, the others start with zeros.
    ///
    /// # Errors
    /// `EINVAL` past [`MAX_LOCALS`].
    pub(crate) fn set_locals(&mut self, addrs: Vec<u32>) -> Result<(), atoll_abi::Errno> {
        if addrs.len() > MAX_LOCALS {
            return Err(atoll_abi::Errno::Inval);
        }
        for t in self.threads.values_mut() {
            if let Some(Saved::Context(saved)) = &mut t.saved {
                saved.locals = smallvec::smallvec![0; addrs.len()];
                saved.seq = self.saves;
                self.saves += 1;
            }
        }
        self.locals = addrs;
        Ok(())
    }

    pub(crate) fn locals(&self) -> &[u32] {
        &self.locals
    }

    /// Keeps `context` as thread `tid`'s, numbered; `false` if there is no
    /// such thread.
    pub(crate) fn save(&mut self, tid: Tid, mut context: Context) -> bool {
        let Some(thread) = self.threads.get_mut(&tid) else {
            return false;
        };
        context.seq = self.saves;
        self.saves += 1;
        thread.saved = Some(Saved::Context(context));
        true
    }

    /// How many contexts have been saved: every context numbered below
    /// this was in an image of the process encoded now.
    pub fn saves(&self) -> u64 {
        self.saves
    }

    /// Replaces each context numbered below `sent` with its number, for
    /// the last frame of a migration whose destination has the frame
    /// encoded when [`saves`](Self::saves) was `sent`; returns them, to be
    /// [`put back`](Self::put_back) once the frame is encoded.
    pub fn leave_out_sent(&mut self, sent: u64) -> Vec<Context> {
        let mut left_out = Vec::with_capacity(self.threads.len());
        for t in self.threads.values_mut() {
            let seq = match &t.saved {
                Some(Saved::Context(c)) if c.seq < sent => c.seq,
                _ => continue,
            };
            if let Some(Saved::Context(c)) = t.saved.replace(Saved::AsSent { seq }) {
                left_out.push(c);
            }
        }
        left_out
    }

    /// Undoes [`leave_out_sent`](Self::leave_out_sent): each context goes
    /// back where its number is, in the same order.
    pub fn put_back(&mut self, left_out: Vec<Context>) {
        let mut left_out = left_out.into_iter().peekable();
        for t in self.threads.values_mut() {
            let Some(Saved::AsSent { seq }) = t.saved else {
                continue;
            };
            if let Some(c) = left_out.next_if(|c| c.seq == seq) {
                t.saved = Some(Saved::Context(c));
            }
        }
    }

    /// Takes from `earlier` (the process as an earlier frame left it) the
    /// contexts this table has only the numbers of.
    ///
    /// # Errors
    /// If `earlier` lacks one of them: the frames do not fit together.
    pub fn resolve_sent(&mut self, earlier: &mut Threads) -> Result<(), String> {
        for (tid, t) in &mut self.threads {
            let Some(Saved::AsSent { seq }) = t.saved else {
                continue;
            };
            let had = earlier.threads.get_mut(tid).and_then(|e| e.saved.take());
            match had {
                Some(Saved::Context(c)) if c.seq == seq => t.saved = Some(Saved::Context(c)),
                _ => return Err(format!("thread {tid}: context {seq} was never sent")),
            }
        }
        Ok(())
    }

    /// Whether a context is only a number ([`Saved::AsSent`]): an image
    /// that cannot be restored on its own.
    pub fn needs_earlier_frame(&self) -> bool {
        self.threads
            .values()
            .any(|t| matches!(t.saved, Some(Saved::AsSent { .. })))
    }

    /// Keeps only thread `tid` (a fork's child: POSIX copies the calling
    /// thread alone).
    pub fn keep_only(&mut self, tid: Tid) {
        self.threads.retain(|&t, _| t == tid);
        self.ready.retain(|&t| t == tid);
        self.queued.clear();
        self.futexes.clear();
        self.seat = self.seat.filter(|&t| t == tid);
        self.current = tid;
    }

    /// Each thread and what it is doing, for `ps --threads`; the kernel
    /// call of the one in the kernel is `in_kernel`.
    pub fn describe(&self, in_kernel: &str) -> Vec<(Tid, String)> {
        self.threads
            .iter()
            .map(|(&tid, t)| {
                let state = match &t.state {
                    ThreadState::Ready(_) => "ready".into(),
                    ThreadState::InKernel => in_kernel.to_owned(),
                    ThreadState::Waiting(Wait::Futex { .. }) => "waiting on a futex".into(),
                    ThreadState::Waiting(Wait::Sleep { .. }) => "sleeping".into(),
                    ThreadState::Waiting(Wait::Seat(_)) => {
                        "waiting for its turn in the kernel".into()
                    }
                };
                (tid, state)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_run_in_turn_and_futexes_wake_the_oldest() {
        let mut t = Threads::default();
        assert!(!t.active());
        let a = t.spawn(Entry { func: 1, arg: 100 }).unwrap();
        let b = t.spawn(Entry { func: 1, arg: 200 }).unwrap();
        assert_eq!((a, b), (2, 3));
        assert_eq!(t.next_ready(), Some((2, None)));
        t.wait(
            2,
            Wait::Futex {
                addr: 8,
                until_ns: None,
            },
        );
        assert_eq!(t.next_ready(), Some((3, None)));
        t.wait(
            3,
            Wait::Futex {
                addr: 8,
                until_ns: Some(50),
            },
        );
        assert!(!t.runnable());
        assert_eq!(t.next_deadline(), Some(50));
        assert_eq!(t.futex_wake(8, 1), 1);
        assert_eq!(
            t.next_ready(),
            Some((2, Some(Reply::Woken { timed_out: false })))
        );
        assert!(t.wake_due(50));
        assert_eq!(
            t.next_ready(),
            Some((3, Some(Reply::Woken { timed_out: true })))
        );
        assert_eq!(t.futex_wake(8, 10), 0);

        // In the order they began to wait, whatever their numbers.
        t.wait(
            3,
            Wait::Futex {
                addr: 4,
                until_ns: None,
            },
        );
        t.wait(
            2,
            Wait::Futex {
                addr: 4,
                until_ns: Some(10),
            },
        );
        assert!(t.wake_due(10), "2 timed out and left the queue");
        assert_eq!(t.futex_wake(4, 5), 1);
        assert_eq!(
            t.next_ready(),
            Some((2, Some(Reply::Woken { timed_out: true })))
        );
        assert_eq!(
            t.next_ready(),
            Some((3, Some(Reply::Woken { timed_out: false })))
        );
    }

    #[test]
    fn the_seat_goes_to_threads_in_the_order_they_asked() {
        let mut t = Threads::default();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.take_seat(1);
        assert!(t.seat_taken());
        t.wait(2, Wait::Seat(Some(KernelCall::Drain { upto: 1 })));
        t.wait(3, Wait::Seat(None));
        assert_eq!(t.next_in_line(), None, "the seat is taken");
        t.resume_seat();
        assert!(t.runnable());
        assert_eq!(
            t.next_in_line(),
            Some((2, Some(KernelCall::Drain { upto: 1 })))
        );
        t.take_seat(2);
        t.resume_seat();
        assert_eq!(t.next_in_line(), Some((3, None)));
        assert!(!t.end(1) || t.len() == 2);
    }

    #[test]
    fn a_receive_in_the_seat_gives_way_to_a_prompt_call_only() {
        let receiving = CallState::Blocked(KernelCall::Ipc(IpcCall::Receive {
            from: None,
            msg: 0,
            status: 0,
        }));
        let waiting = CallState::Blocked(KernelCall::Wait { pid: None });
        let kill = KernelCall::Kill {
            pid: atoll_abi::Pid::new(atoll_abi::KernelId::new(0, 0), 1, 0),
            signal: 9,
        };
        let mut t = Threads::default();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.take_seat(2);
        // In line first, an IPC call (which may wait on the receive's
        // sender) and a wait: the receive stays.
        t.wait(3, Wait::Seat(None));
        assert!(!t.withdraw_receive(&receiving));
        assert_eq!(t.next_in_line(), None);
        t.make_ready(3, Some(Reply::Retry));
        t.wait(1, Wait::Seat(Some(KernelCall::Wait { pid: None })));
        assert!(!t.withdraw_receive(&receiving));
        t.make_ready(1, None);
        // A prompt call first: the receiver goes in line behind it.
        t.wait(1, Wait::Seat(Some(kill.clone())));
        assert!(!t.withdraw_receive(&waiting), "only a receive gives way");
        assert!(t.withdraw_receive(&receiving));
        assert_eq!(t.seat(), None);
        assert_eq!(t.next_in_line(), Some((1, Some(kill))));
        t.take_seat(1);
        t.resume_seat();
        assert_eq!(t.next_in_line(), Some((2, None)), "to receive again");
    }

    #[test]
    fn a_fork_keeps_the_calling_thread() {
        let mut t = Threads::default();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.spawn(Entry { func: 1, arg: 0 }).unwrap();
        t.take_seat(3);
        t.keep_only(3);
        assert_eq!(t.len(), 1);
        assert_eq!(t.seat(), Some(3));
        assert_eq!(t.current(), 3);
    }

    fn context(word: u32) -> Context {
        Context {
            locals: smallvec::smallvec![word],
            ..Context::default()
        }
    }

    fn saved_word(t: &Threads, tid: Tid) -> Option<u32> {
        match &t.threads[&tid].saved {
            Some(Saved::Context(c)) => Some(c.locals[0]),
            _ => None,
        }
    }

    #[test]
    fn a_last_frame_leaves_out_the_contexts_an_earlier_frame_carried() {
        let mut source = Threads::default();
        source.spawn(Entry { func: 1, arg: 0 }).unwrap();
        source.spawn(Entry { func: 1, arg: 0 }).unwrap();
        assert!(source.save(2, context(20)) && source.save(3, context(30)));
        // A frame goes out: the destination has the table as it is now.
        let mut destination = source.clone();
        let sent = source.saves();
        // Thread 3 runs again; thread 2 does not.
        assert!(source.save(3, context(31)));

        let left_out = source.leave_out_sent(sent);
        assert_eq!(left_out.len(), 1);
        let mut last = source.clone();
        assert!(last.needs_earlier_frame());
        source.put_back(left_out);
        assert_eq!(
            (saved_word(&source, 2), saved_word(&source, 3)),
            (Some(20), Some(31))
        );

        last.resolve_sent(&mut destination).unwrap();
        assert!(!last.needs_earlier_frame());
        assert_eq!(last, source);
    }

    #[test]
    fn a_context_the_destination_lacks_is_an_error() {
        let mut source = Threads::default();
        source.spawn(Entry { func: 1, arg: 0 }).unwrap();
        assert!(source.save(2, context(20)));
        let mut earlier = source.clone();
        // The earlier frame had another context of thread 2 (numbered the
        // same only if it were the same one).
        assert!(earlier.save(2, context(21)));
        let sent = source.saves();
        let mut last = source.clone();
        last.leave_out_sent(sent);
        assert!(last.resolve_sent(&mut earlier).is_err());
        assert!(last.resolve_sent(&mut Threads::default()).is_err());
        // Registering per-thread words changes the saved contexts: they
        // are numbered anew, and sent again.
        source.set_locals(vec![8]).unwrap();
        assert!(source.leave_out_sent(sent).is_empty());
    }
}
