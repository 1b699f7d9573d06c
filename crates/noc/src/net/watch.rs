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
//!   control connections that talk are disarmed, and kernels poll every
//!   disarmed one ([`Watch::polled`]) until the last of them stops, which
//!   arms them again;
//! - a connection's task asks to hear of bytes ([`Watch::want`]) before it
//!   waits for them; the event disarms the socket until it asks again;
//! - bulk connections are never disarmed: a migration's stream is the
//!   links' thread's to read. Kernels that poll read those that talk
//!   too, first come first served (a copy a process waits for comes on
//!   one).
//!
//! A socket is therefore armed, or firing, or polled by a kernel that is
//! polling now: nothing that arrives waits for a reader. Arming and
//! disarming cost an `epoll_ctl` each (0.2 us here), on transitions only.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
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
    /// it goes from 0 or to 0 (and then reads it again).
    pollers: AtomicUsize,
    state: Mutex<State>,
}

struct State {
    next_key: u64,
    sockets: HashMap<u64, Entry>,
}

struct Entry {
    fd: RawFd,
    ears: Weak<Ears>,
    /// Bulk connections: never disarmed.
    always: bool,
    /// Its task waits to hear of bytes.
    wanted: bool,
    /// Armed in the epoll set.
    armed: bool,
}

/// One socket's side of the watch, held by its connection.
pub(super) struct Ears {
    key: u64,
    watch: Arc<Watch>,
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
            state: Mutex::new(State {
                next_key: 0,
                sockets: HashMap::new(),
            }),
        }))
    }

    /// Adds `socket` to the set, disarmed. `always`: never disarmed for
    /// the kernels (a bulk connection).
    pub(super) fn add(self: &Arc<Self>, socket: RawFd, always: bool) -> io::Result<Arc<Ears>> {
        let mut state = self.state();
        let key = state.next_key;
        state.next_key += 1;
        self.ctl(libc::EPOLL_CTL_ADD, socket, key, false)?;
        let ears = Arc::new(Ears {
            key,
            watch: self.clone(),
            heard: Notify::new(),
            polled: AtomicBool::new(false),
            busy: AtomicU64::new(0),
            born: Instant::now(),
        });
        state.sockets.insert(
            key,
            Entry {
                fd: socket,
                ears: Arc::downgrade(&ears),
                always,
                wanted: false,
                armed: false,
            },
        );
        Ok(ears)
    }

    /// A kernel starts (`true`) or stops polling the connections. Only
    /// the first to start and the last to stop take the lock: the sockets
    /// are then set for the count as it is under the lock, so that of a
    /// start and a stop that cross, the later sets them right.
    pub(super) fn polling(&self, on: bool) {
        let before = if on {
            self.pollers.fetch_add(1, Ordering::AcqRel)
        } else {
            let before = self.pollers.fetch_sub(1, Ordering::AcqRel);
            debug_assert_ne!(before, 0, "a stop without a start");
            before
        };
        if before != usize::from(!on) {
            return;
        }
        let mut state = self.state();
        let on = self.pollers.load(Ordering::Acquire) > 0;
        for (&key, e) in &mut state.sockets {
            let Some(ears) = e.ears.upgrade() else {
                continue;
            };
            if on && !e.always && ears.talking() {
                ears.polled.store(true, Ordering::Release);
                if e.armed && self.ctl(libc::EPOLL_CTL_MOD, e.fd, key, false).is_ok() {
                    e.armed = false;
                }
            } else if !on && ears.polled.swap(false, Ordering::AcqRel) && e.wanted && !e.armed {
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
                    if let Some(ears) = e.ears.upgrade() {
                        ears.heard.notify_one();
                    }
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
                let polled = pollers > 0 && !e.always && self.talking();
                if polled {
                    self.polled.store(true, Ordering::Release);
                }
                if !polled && !e.armed {
                    e.armed = self
                        .watch
                        .ctl(libc::EPOLL_CTL_MOD, e.fd, self.key, true)
                        .is_ok();
                }
            }
        }
        self.heard.notified().await;
    }

    /// Wakes the task: a kernel found the end of the stream, or an error,
    /// which the task then finds too.
    pub(super) fn tell(&self) {
        self.heard.notify_one();
    }

    /// Whether kernels poll this socket now (it is disarmed for them).
    pub(super) fn polled(&self) -> bool {
        self.polled.load(Ordering::Acquire)
    }

    /// A frame went out or came in.
    pub(super) fn mark_busy(&self) {
        self.busy.store(self.now_ns(), Ordering::Relaxed);
    }

    /// Whether a frame went out or came in within [`TALKING`].
    pub(super) fn talking(&self) -> bool {
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
