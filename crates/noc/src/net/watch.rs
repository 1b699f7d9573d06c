//! Who waits for a connection's bytes: the links' thread, or the kernels
//! that poll it.
//!
//! A kernel with nothing to do polls its node's connections
//! ([`Conn::poll`](super::conn::Conn::poll)), so that an answer reaches it
//! without a wake-up. If the links' thread waited on those sockets too,
//! every packet would wake it, to find the bytes already taken: on a VM an
//! interrupt to the other core and two context switches, paid partly by
//! the sender inside its write (a cross-node round trip took 20 us with
//! those wake-ups and 12 us without, over loopback on the 2-core VM).
//!
//! So the links' thread waits on an epoll set of its own, in which each
//! connection's socket is one-shot and armed only while nobody polls it:
//!
//! - when a kernel starts polling and none was ([`Watch::polling`]), the
//!   connections that talk are disarmed, and kernels poll every
//!   disarmed one ([`Ears::polled`]) until the last of them stops and
//!   they are armed again ([`Watch::settle`]). That is not at once: a
//!   kernel stops polling whenever it runs a process, and a process that
//!   answers a message and waits for the next one has the kernel polling
//!   again a microsecond later. So they are armed when a kernel goes to
//!   sleep, when the last poller stops while a kernel of the node sleeps
//!   (it waits for the links' thread to wake it), or at the next tick of
//!   the quantum ticker, which runs while a process does: a message for
//!   a kernel that is running a process waits at most that tick (1 ms).
//!   Arming at every stop and disarming at every start cost a cross-node
//!   IPC2 round trip four `epoll_ctl` (strace of a node serving one: 2.5
//!   a round trip before, 0.25 after);
//! - a connection's task asks to hear of bytes ([`Ears::heard`]) before
//!   it waits for them; the event disarms the socket until it asks again;
//! - bulk connections are disarmed as control ones are. A copy a process
//!   waits for comes on one, and so does a piece of a pre-copy. Left armed
//!   for the links' thread, every copy between two nodes woke that thread
//!   on both, which on a machine whose cores run the kernels waits for
//!   one to stop polling. With them armed, and a copy closing the
//!   kernels' polling window (`kernel/src/talk.rs`), an MPI message of
//!   256 KiB between two nodes took a median 552 us one way; with
//!   neither, 315 us (`docs/mpi.md`). Kernels also read a bulk
//!   connection that talks while it is still armed, first come first
//!   served.
//!
//! - while memories are on their way to the node after their processes
//!   (post-copy), the sockets stay armed whoever polls ([`Watch::hurry`]):
//!   a kernel counted as polling may be waiting in a page fault for a block
//!   that comes on them.
//!
//! A socket is therefore armed, or firing, or polled by a kernel that is
//! polling now: nothing that arrives waits for a reader. Arming and
//! disarming cost an `epoll_ctl` each (0.2 us here), on transitions only.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// Events taken from the set at a time.
const BATCH: usize = 32;
/// A socket is worth polling while a frame went out or came in this
/// recently: an answer is then likely on its way, and the quiet
/// connections of a large cluster cost a poller nothing.
const TALKING: Duration = Duration::from_millis(2);

/// The epoll set the links' thread waits on, and which sockets in it are
/// armed.
pub(super) struct Watch {
    epoll: AsyncFd<OwnedFd>,
    /// Kernels polling now. Changed without the lock, which is taken when
    /// it goes from 0, and to settle (each then reads it again).
    pollers: AtomicUsize,
    /// The last poller stopped and the sockets kernels polled are not
    /// armed again yet: that waits for [`settle`](Self::settle), since a
    /// kernel that stops polling to run a process usually polls again
    /// microseconds later.
    owed: AtomicBool,
    /// A thread of this node may wait on what a kernel counted as
    /// polling cannot read ([`hurry`](Self::hurry)): the sockets then stay
    /// armed for the links' thread whoever polls.
    hurried: AtomicBool,
    state: Mutex<State>,
}

struct State {
    next_key: u64,
    sockets: HashMap<u64, Entry>,
}

struct Entry {
    fd: RawFd,
    /// Strong: the set must never hold the last `Ears` (its drop takes
    /// the set's lock).
    signals: Arc<Signals>,
    /// Its task waits to hear of bytes.
    wanted: bool,
    /// Armed in the epoll set.
    armed: bool,
}

/// One socket's side of the watch, held by its connection; dropping it
/// takes the socket out of the set.
pub(super) struct Ears {
    key: u64,
    watch: Arc<Watch>,
    signals: Arc<Signals>,
}

/// What a socket's task, the kernels and the set tell each other about it.
struct Signals {
    /// Told when bytes (or the end) came.
    heard: Notify,
    /// Disarmed for the kernels to poll ([`Ears::polled`]).
    polled: AtomicBool,
    /// When a frame last went out or came in, in nanoseconds since `born`.
    busy: AtomicU64,
    born: Instant,
}

impl Watch {
    /// An empty set; must be made inside the links' runtime, whose thread
    /// then runs [`serve`](Self::serve).
    pub(super) fn new() -> io::Result<Arc<Watch>> {
        // SAFETY: plain system call; the descriptor is checked and owned.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `fd` is owned by the `AsyncFd`, and stays open as long.
        let epoll = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Arc::new(Watch {
            epoll,
            pollers: AtomicUsize::new(0),
            owed: AtomicBool::new(false),
            hurried: AtomicBool::new(false),
            state: Mutex::new(State {
                next_key: 0,
                sockets: HashMap::new(),
            }),
        }))
    }

    /// Adds `socket` to the set, disarmed.
    pub(super) fn add(self: &Arc<Self>, socket: RawFd) -> io::Result<Arc<Ears>> {
        let mut state = self.state();
        let key = state.next_key;
        state.next_key += 1;
        self.ctl(libc::EPOLL_CTL_ADD, socket, key, false)?;
        let signals = Arc::new(Signals {
            heard: Notify::new(),
            polled: AtomicBool::new(false),
            busy: AtomicU64::new(0),
            born: Instant::now(),
        });
        let ears = Arc::new(Ears {
            key,
            watch: self.clone(),
            signals: signals.clone(),
        });
        state.sockets.insert(
            key,
            Entry {
                fd: socket,
                signals,
                wanted: false,
                armed: false,
            },
        );
        Ok(ears)
    }

    /// A kernel starts (`true`) or stops polling the connections. Only
    /// the first to start takes the lock: the sockets are then set for
    /// the count as it is under the lock, and a stop that crossed it
    /// leaves the re-arming owed as any last stop does. The last to stop
    /// only leaves the re-arming [`owed`](Self::owed): a kernel stops polling
    /// whenever it runs a process, and arming every socket then, and
    /// disarming it when the process blocks a microsecond later, took two
    /// `epoll_ctl` a round trip on each side.
    pub(super) fn polling(&self, on: bool) {
        if on {
            if self.pollers.fetch_add(1, Ordering::AcqRel) == 0 {
                self.set(&mut self.state());
            }
        } else {
            let before = self.pollers.fetch_sub(1, Ordering::AcqRel);
            debug_assert_ne!(before, 0, "a stop without a start");
            if before == 1 {
                self.owed.store(true, Ordering::Release);
            }
        }
    }

    /// Arms again the sockets kernels polled, if none polls now: a kernel
    /// is going to sleep, or a tick passed while every kernel ran a
    /// process. Until then what arrives on them waits for a kernel to poll
    /// or settle.
    pub(super) fn settle(&self) {
        if self.owed.load(Ordering::Acquire) && self.pollers.load(Ordering::Acquire) == 0 {
            self.set(&mut self.state());
        }
    }

    /// While `on`, the sockets stay armed for the links' thread even while
    /// kernels poll them (first come first served): a thread of this node
    /// may be waiting for what they bring where a kernel counted as polling
    /// cannot read it. A kernel that waits in place for a message polls the
    /// links, and faults writing what it took into a process whose memory
    /// is still coming (`atoll_process::postcopy`); it reads nothing until
    /// the block comes, on these sockets. Left to the kernels, two nodes of
    /// one kernel each waited for each other until they gave each other up.
    pub(super) fn hurry(&self, on: bool) {
        self.hurried.store(on, Ordering::Release);
        self.set(&mut self.state());
    }

    /// Whether kernels are the sockets' readers now: some poll, and no
    /// thread is [`hurried`](Self::hurry).
    fn kernels_read(&self, pollers: usize) -> bool {
        pollers > 0 && !self.hurried.load(Ordering::Acquire)
    }

    /// Sets the sockets for the count of pollers as it is now, under the
    /// lock: disarmed for the kernels while any polls, armed otherwise.
    fn set(&self, state: &mut State) {
        let on = self.kernels_read(self.pollers.load(Ordering::Acquire));
        self.owed.store(false, Ordering::Release);
        for (&key, e) in &mut state.sockets {
            let signals = &e.signals;
            if on && signals.talking() {
                signals.polled.store(true, Ordering::Release);
                if e.armed && self.ctl(libc::EPOLL_CTL_MOD, e.fd, key, false).is_ok() {
                    e.armed = false;
                }
            } else if !on && signals.polled.swap(false, Ordering::AcqRel) && e.wanted && !e.armed {
                e.armed = self.ctl(libc::EPOLL_CTL_MOD, e.fd, key, true).is_ok();
            }
        }
    }

    /// Serves the set until the node stops: tells each socket's task what
    /// it waits to hear.
    pub(super) async fn serve(self: Arc<Self>) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
        loop {
            let Ok(mut ready) = self.epoll.readable().await else {
                return;
            };
            // SAFETY: `events` holds BATCH entries; a zero timeout returns at once.
            let n = unsafe {
                libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), BATCH as i32, 0)
            };
            if n < BATCH as i32 {
                ready.clear_ready();
            }
            let mut state = self.state();
            for ev in &events[..n.max(0) as usize] {
                let key = ev.u64;
                if let Some(e) = state.sockets.get_mut(&key) {
                    // One-shot: the set disarmed it.
                    e.armed = false;
                    e.wanted = false;
                    e.signals.heard.notify_one();
                }
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ctl(&self, op: i32, fd: RawFd, key: u64, armed: bool) -> io::Result<()> {
        let events = if armed {
            libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT
        } else {
            libc::EPOLLONESHOT
        };
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: key,
        };
        // SAFETY: `ev` lives for the call; the kernel checks the descriptors.
        if unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Ears {
    /// Waits until bytes, or the end, may have come. Arms the socket
    /// unless kernels poll it.
    pub(super) async fn heard(&self) {
        {
            let mut state = self.watch.state();
            let pollers = self.watch.pollers.load(Ordering::Acquire);
            if let Some(e) = state.sockets.get_mut(&self.key) {
                e.wanted = true;
                // A socket that starts talking while kernels poll is
                // theirs too.
                let polled = self.watch.kernels_read(pollers) && self.talking();
                if polled {
                    self.signals.polled.store(true, Ordering::Release);
                }
                if !polled && !e.armed {
                    e.armed = self
                        .watch
                        .ctl(libc::EPOLL_CTL_MOD, e.fd, self.key, true)
                        .is_ok();
                }
            }
        }
        self.signals.heard.notified().await;
    }

    /// Wakes the task: a kernel found the end of the stream, or an error,
    /// which the task then finds too.
    pub(super) fn tell(&self) {
        self.signals.heard.notify_one();
    }

    /// Whether kernels poll this socket now (it is disarmed for them).
    pub(super) fn polled(&self) -> bool {
        self.signals.polled.load(Ordering::Acquire)
    }

    /// A frame went out or came in.
    pub(super) fn mark_busy(&self) {
        let s = &self.signals;
        s.busy.store(s.now_ns(), Ordering::Relaxed);
    }

    /// Whether a frame went out or came in within [`TALKING`].
    pub(super) fn talking(&self) -> bool {
        self.signals.talking()
    }
}

impl Signals {
    fn talking(&self) -> bool {
        self.now_ns() <= self.busy.load(Ordering::Relaxed) + TALKING.as_nanos() as u64
    }

    fn now_ns(&self) -> u64 {
        self.born.elapsed().as_nanos() as u64
    }
}

impl Drop for Ears {
    fn drop(&mut self) {
        let mut state = self.watch.state();
        if let Some(e) = state.sockets.remove(&self.key) {
            let _ = self.watch.ctl(libc::EPOLL_CTL_DEL, e.fd, self.key, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// Whether the socket of `ears` is armed in the set, and polled by kernels.
    fn armed_and_polled(watch: &Watch, ears: &Ears) -> (bool, bool) {
        (watch.state().sockets[&ears.key].armed, ears.polled())
    }

    #[test]
    fn a_kernel_that_stops_polling_leaves_the_socket_disarmed_until_one_settles() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        let _in_runtime = runtime.enter();
        let watch = Watch::new().expect("epoll set");
        let (socket, _peer) = UnixStream::pair().expect("socket pair");
        let ears = watch.add(socket.as_raw_fd()).expect("added");
        // Its task waits for bytes, armed, and a frame just went out.
        {
            let mut state = watch.state();
            let e = state.sockets.get_mut(&ears.key).expect("added");
            e.wanted = true;
            e.armed = watch.ctl(libc::EPOLL_CTL_MOD, e.fd, ears.key, true).is_ok();
        }
        ears.mark_busy();
        assert_eq!(armed_and_polled(&watch, &ears), (true, false));

        watch.polling(true);
        assert_eq!(armed_and_polled(&watch, &ears), (false, true));
        // The kernel runs a process and polls again: nothing is armed
        // between, and nobody may settle while it polls.
        watch.polling(false);
        assert_eq!(armed_and_polled(&watch, &ears), (false, true));
        watch.polling(true);
        watch.settle();
        assert_eq!(armed_and_polled(&watch, &ears), (false, true));
        // It stops and goes to sleep: the links' thread has it back.
        watch.polling(false);
        watch.settle();
        assert_eq!(armed_and_polled(&watch, &ears), (true, false));
        // Settling again, or with nothing owed, changes nothing.
        watch.settle();
        assert_eq!(armed_and_polled(&watch, &ears), (true, false));
        // The set keeps no `Ears` of its own (once it upgraded one under
        // its lock, and a connection closing meanwhile left it the last,
        // whose drop waited on that lock): the connection's is the last,
        // and its drop takes the socket out.
        assert_eq!(Arc::strong_count(&ears), 1);
        drop(ears);
        assert!(watch.state().sockets.is_empty());
    }
}
