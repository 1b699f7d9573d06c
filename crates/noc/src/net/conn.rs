//! One connection between two nodes, once its first frames went through.
//!
//! Any thread may send on it: a kernel encrypts its frame and writes it to
//! the socket itself, so a message leaving the node wakes no other thread
//! on its way out (queueing it for the links' thread cost a wake-up, tens
//! of microseconds on a busy machine, on every message). The socket is
//! non-blocking, and the TLS state is behind a mutex held only to encrypt,
//! to decrypt, or to write what the socket takes at once: nobody waits for
//! the network while holding it, so senders and the reader never stall
//! each other. What the socket does not take stays in the TLS state and
//! the connection's task writes it when the socket has room.
//!
//! The same task reads: it decrypts what arrives, cuts it into frames
//! ([`Frames`]) and hands each to the node. A kernel with nothing to do
//! may read too ([`Conn::poll`]), so that an answer it waits for reaches
//! it without waking the task and then the kernel (`atoll bench cluster`
//! measures a TCP round trip between threads that poll at a seventh of one
//! between threads that sleep); meanwhile the task is not even told that
//! bytes came ([`super::watch`]). Whoever reads holds the inbox, so frames
//! are handed over one at a time and in order. A connection that fails in
//! either direction is shut down, which ends its task.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::TlsStream;

use super::frame::Frames;
use super::watch::{Ears, Watch};
use super::work::{LinksWork, Owed};

/// Bytes taken from the socket at a time.
const READ_CHUNK: usize = 64 << 10;
/// A large frame is encrypted and written this much at a time, so that
/// the peer decrypts the start of it while the rest is being encrypted.
const WRITE_CHUNK: usize = 64 << 10;

/// A TLS connection to another node that any thread may send on.
pub(super) struct Conn {
    /// Tells the task when bytes came, unless kernels poll for them.
    /// Before `io`: it leaves the watch before the socket closes.
    ears: Arc<Ears>,
    /// The socket, for the task to wait until it takes more output (a
    /// copy of `io`'s descriptor, registered for that alone: the links'
    /// thread is not woken by what arrives).
    out: AsyncFd<std::net::TcpStream>,
    io: std::net::TcpStream,
    tls: Mutex<Tls>,
    /// Held by whoever reads: the task, or a kernel polling.
    inbox: Mutex<Inbox>,
    /// Rung when output is left for the task to write.
    backlog: Notify,
    /// Whether anything was sent since the last heartbeat.
    sent: AtomicBool,
    /// Lazy frames wait in the TLS state, unwritten.
    lazy: AtomicBool,
    /// Where bytes left to the task are counted.
    work: Arc<LinksWork>,
}

/// What has been read and not yet handed over.
struct Inbox {
    frames: Frames,
    /// Bytes from the socket, before decryption.
    raw: Box<[u8]>,
    /// When the socket last gave bytes.
    heard: std::time::Instant,
    /// The peer was given up ([`Conn::seal`]): nothing more is handed over.
    sealed: bool,
}

struct Tls {
    conn: rustls::Connection,
    /// Why the connection failed; nothing is sent after that.
    failed: Option<String>,
    /// A frame is half written ([`Conn::send_all`]): nothing else may go
    /// out before its end.
    open: bool,
    /// Frames sent before the connection's first frame, kept until it goes
    /// out ([`Conn::hold`]).
    held: Option<Vec<u8>>,
    /// Encrypted bytes the socket did not take, counted as the links'
    /// thread's work until they are written.
    owed: Option<Owed>,
}

impl Conn {
    /// Takes over a handshaken stream whose frames are at most `max`
    /// bytes, its socket watched by `watch`, what it leaves to its task
    /// counted in `work`.
    /// Runs inside the links' runtime.
    ///
    /// # Errors
    /// The socket could not be watched.
    pub(super) fn new(
        stream: TlsStream<TcpStream>,
        max: u32,
        watch: &Arc<Watch>,
        work: Arc<LinksWork>,
    ) -> io::Result<Conn> {
        let (tcp, mut conn) = match stream {
            TlsStream::Client(s) => {
                let (tcp, conn) = s.into_inner();
                (tcp, rustls::Connection::from(conn))
            }
            TlsStream::Server(s) => {
                let (tcp, conn) = s.into_inner();
                (tcp, rustls::Connection::from(conn))
            }
        };
        // The queue is bounded by what senders queue, as it was when a
        // channel held it.
        conn.set_buffer_limit(None);
        let io = tcp.into_std()?;
        // SAFETY: the copy is owned by the `AsyncFd`, and stays open as long.
        let out = unsafe { AsyncFd::register_with_interest(io.try_clone()?, Interest::WRITABLE) }?;
        Ok(Conn {
            ears: watch.add(io.as_raw_fd())?,
            out,
            io,
            tls: Mutex::new(Tls {
                conn,
                failed: None,
                open: false,
                held: None,
                owed: None,
            }),
            inbox: Mutex::new(Inbox {
                frames: Frames::new(max),
                raw: vec![0; READ_CHUNK].into_boxed_slice(),
                heard: std::time::Instant::now(),
                sealed: false,
            }),
            backlog: Notify::new(),
            sent: AtomicBool::new(false),
            lazy: AtomicBool::new(false),
            work,
        })
    }

    /// Sends one frame made of `parts` (a head and its tail): encrypts it
    /// and writes what the socket takes now, leaving the rest to the
    /// connection's task. Frames from concurrent senders never interleave.
    ///
    /// A `lazy` frame is only encrypted: it goes out with the next frame
    /// sent, or at the next [`flush`](Self::flush), in one write. On
    /// loopback or a LAN a write costs microseconds (the receiver's TCP
    /// work runs in it), so an answer that can wait for what follows it
    /// (the news that a `sendrec`'s request was taken, then the reply)
    /// shares that write.
    ///
    /// # Errors
    /// The connection failed (now or before), with why.
    pub(super) fn send(&self, parts: &[&[u8]], lazy: bool) -> Result<(), String> {
        let mut tls = self.lock()?;
        debug_assert!(!tls.open, "a frame sent into another");
        self.mark_busy();
        if lazy && tls.held.is_none() {
            for part in parts {
                if let Err(e) = tls.conn.writer().write_all(part) {
                    return Err(self.fail(&mut tls, format!("TLS: {e}")));
                }
            }
            self.sent.store(true, Ordering::Relaxed);
            self.lazy.store(true, Ordering::Release);
            return Ok(());
        }
        self.write(&mut tls, parts)
    }

    /// Sends one frame made of `parts` on the calling thread, unless a
    /// frame is half written ([`send_all`](Self::send_all)): then returns
    /// `false`, having sent nothing. Each piece goes out as soon as it is
    /// encrypted, so that the peer decrypts the start of a large frame
    /// while its end is being encrypted; what the socket does not take is
    /// left to the task.
    ///
    /// # Errors
    /// The connection failed (now or before), with why.
    pub(super) fn try_send(&self, parts: &[&[u8]]) -> Result<bool, String> {
        let mut tls = self.lock()?;
        if tls.open {
            return Ok(false);
        }
        self.mark_busy();
        for piece in parts.iter().flat_map(|p| p.chunks(WRITE_CHUNK)) {
            self.write(&mut tls, &[piece])?;
        }
        Ok(true)
    }

    /// Writes the lazy frames that wait ([`send`](Self::send)), if any.
    pub(super) fn flush(&self) {
        if self.lazy.load(Ordering::Acquire) {
            if let Ok(mut tls) = self.lock() {
                let _ = self.push_out(&mut tls);
            }
        }
    }

    /// Whether kernels poll the connection now ([`super::watch`]).
    pub(super) fn polled(&self) -> bool {
        self.ears.polled()
    }

    /// Whether a frame went out or came in lately ([`super::watch`]).
    pub(super) fn talking(&self) -> bool {
        self.ears.talking()
    }

    /// Reads what the socket holds now on the calling thread, and hands
    /// each whole frame to `each` (whose error closes the connection, as
    /// in [`serve`](Self::serve)). Does nothing if another thread is
    /// reading: that one hands over what comes.
    pub(super) fn poll<T: DeserializeOwned>(
        &self,
        mut each: impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) {
        // `poll(2)` does not take the socket's lock, which `recv` would
        // contend for with the packets arriving.
        let mut pollfd = libc::pollfd {
            fd: self.io.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid `pollfd` for the duration of the call, and a
        // zero timeout: it returns at once.
        if unsafe { libc::poll(&mut pollfd, 1, 0) } != 1 {
            return;
        }
        let Some(mut inbox) = self.try_inbox() else {
            return;
        };
        // The end of the stream and errors are left for the task, which
        // finds them too once told.
        match (&self.io).read(&mut inbox.raw) {
            Ok(n @ 1..) => {
                let _ = self.take_in(&mut inbox, n, &mut each);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(0) | Err(_) => self.ears.tell(),
        }
    }

    /// Keeps what is sent from now on until [`release`](Self::release):
    /// the connection can be made known to senders before its first frame
    /// is ready, and nothing goes out ahead of that frame.
    pub(super) fn hold(&self) {
        if let Ok(mut tls) = self.lock() {
            tls.held.get_or_insert_with(Vec::new);
        }
    }

    /// Sends `first`, then what was held.
    ///
    /// # Errors
    /// The connection failed, with why.
    pub(super) fn release(&self, first: &[u8]) -> Result<(), String> {
        let mut tls = self.lock()?;
        let held = tls.held.take().unwrap_or_default();
        self.write(&mut tls, &[first, &held])
    }

    /// Encrypts `parts` and writes what the socket takes now.
    fn write(&self, tls: &mut Tls, parts: &[&[u8]]) -> Result<(), String> {
        if let Some(held) = &mut tls.held {
            for part in parts {
                held.extend_from_slice(part);
            }
            return Ok(());
        }
        for part in parts {
            if let Err(e) = tls.conn.writer().write_all(part) {
                return Err(self.fail(tls, format!("TLS: {e}")));
            }
        }
        self.sent.store(true, Ordering::Relaxed);
        self.push_out(tls)
    }

    /// Writes what the socket takes now and leaves the rest to the task.
    fn push_out(&self, tls: &mut Tls) -> Result<(), String> {
        self.lazy.store(false, Ordering::Relaxed);
        match self.write_out(tls) {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.backlog.notify_one();
                Ok(())
            }
            Err(e) => Err(self.fail(tls, e.to_string())),
        }
    }

    /// Sends one frame made of `parts` (a head and its tail), a piece at a
    /// time, each once the socket took the one before: a bulk sender's pace
    /// is the link's, and the peer decrypts a large frame while its end is
    /// being encrypted. Only one task may send this way on a connection.
    pub(super) async fn send_all(&self, parts: &[&[u8]]) -> Result<(), String> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sent = 0;
        for part in parts {
            let mut at = 0;
            while at < part.len() {
                let piece = &part[at..part.len().min(at + WRITE_CHUNK)];
                at += piece.len();
                sent += piece.len();
                {
                    let mut tls = self.lock()?;
                    tls.open = sent < total;
                    self.write(&mut tls, &[piece])?;
                }
                self.flushed().await?;
            }
        }
        Ok(())
    }

    /// Hands nothing more over, and closes the connection: once this
    /// returns, every frame that was handed over was handed over before,
    /// so that the news that the peer is down comes after its last frame
    /// whichever thread read it.
    pub(super) fn seal(&self) {
        self.inbox().sealed = true;
        self.close();
    }

    /// Shuts the socket down: the task ends, and so does the peer's side.
    pub(super) fn close(&self) {
        let _ = self.io.shutdown(Shutdown::Both);
        self.ears.tell();
    }

    /// Serves the connection until it fails or is closed, handing each
    /// frame that arrives, message and tail, to `each`, whose error closes
    /// it. Sends `ping` after `heartbeat` of silence and gives up after
    /// `dead_after` without a byte. Returns why it ended.
    pub(super) async fn serve<T: DeserializeOwned>(
        &self,
        ping: &[u8],
        heartbeat: Duration,
        dead_after: Duration,
        each: impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> String {
        let why = tokio::select! {
            why = self.receive(dead_after, each) => why,
            why = self.write_backlog() => why,
            why = self.beat(ping, heartbeat) => why,
        };
        self.close();
        why
    }

    fn lock(&self) -> Result<MutexGuard<'_, Tls>, String> {
        let tls = self.tls.lock().unwrap_or_else(|e| e.into_inner());
        match &tls.failed {
            Some(why) => Err(why.clone()),
            None => Ok(tls),
        }
    }

    /// Records why the connection failed and shuts it down.
    fn fail(&self, tls: &mut Tls, why: String) -> String {
        tls.failed.get_or_insert(why.clone());
        // Nothing more goes out on it.
        tls.owed = None;
        self.close();
        why
    }

    /// Writes queued TLS records until done (`true`) or the socket is
    /// full (`false`).
    fn write_out(&self, tls: &mut Tls) -> io::Result<bool> {
        let mut socket = Socket(&self.io);
        while tls.conn.wants_write() {
            match tls.conn.write_tls(&mut socket) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if tls.owed.is_none() {
                        tls.owed = Some(self.work.owe());
                    }
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        tls.owed = None;
        Ok(true)
    }

    /// Waits until everything queued is written.
    async fn flushed(&self) -> Result<(), String> {
        loop {
            let mut ready = self.out.writable().await.map_err(|e| e.to_string())?;
            let mut tls = self.lock()?;
            match self.write_out(&mut tls) {
                Ok(true) => return Ok(()),
                Ok(false) => ready.clear_ready(),
                Err(e) => return Err(self.fail(&mut tls, e.to_string())),
            }
        }
    }

    async fn write_backlog(&self) -> String {
        loop {
            self.backlog.notified().await;
            if let Err(why) = self.flushed().await {
                return why;
            }
        }
    }

    async fn beat(&self, ping: &[u8], every: Duration) -> String {
        let mut lazy_before = false;
        loop {
            tokio::time::sleep(every).await;
            // Kernels flush their lazy frames before they wait; this is
            // the backstop, for frames that waited a whole beat.
            let lazy = self.lazy.load(Ordering::Acquire);
            if lazy && lazy_before {
                self.flush();
            }
            lazy_before = lazy;
            if self.sent.swap(false, Ordering::Relaxed) {
                continue;
            }
            // A connection busy with a long frame is not silent.
            let sent = self.lock().and_then(|mut tls| {
                if tls.open {
                    Ok(())
                } else {
                    self.write(&mut tls, &[ping])
                }
            });
            if let Err(why) = sent {
                return why;
            }
        }
    }

    async fn receive<T: DeserializeOwned>(
        &self,
        dead_after: Duration,
        mut each: impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> String {
        // The TLS state may hold frames already: those that came with the
        // first ones.
        if let Err(why) = self.take_in(&mut self.inbox(), 0, &mut each) {
            return why;
        }
        loop {
            // A kernel polling may have read meanwhile: silence counts
            // from the last bytes anyone read.
            let heard = self.inbox().heard;
            let deadline = Instant::from_std(heard + dead_after);
            match tokio::time::timeout_at(deadline, self.ears.heard()).await {
                Err(_) if self.inbox().heard == heard => {
                    return format!("nothing came for {dead_after:?}");
                }
                Err(_) => continue,
                Ok(()) => {}
            }
            // Everything the socket holds, a chunk at a time. A kernel
            // reading holds the inbox briefly, and hands over what it
            // reads: this thread serves the other connections meanwhile.
            loop {
                let more = match self.try_inbox() {
                    Some(mut inbox) => match self.read_chunk(&mut inbox, &mut each) {
                        Ok(more) => more,
                        Err(why) => return why,
                    },
                    None => false,
                };
                if !more {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    /// Reads a chunk from the socket and hands over its whole frames.
    /// Returns whether the socket may hold more, or why the connection
    /// ended.
    fn read_chunk<T: DeserializeOwned>(
        &self,
        inbox: &mut Inbox,
        each: &mut impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> Result<bool, String> {
        match (&self.io).read(&mut inbox.raw) {
            Ok(0) => Err(self
                .lock()
                .err()
                .unwrap_or_else(|| "closed by the peer".into())),
            Ok(n) => {
                self.take_in(inbox, n, each)?;
                Ok(n == inbox.raw.len())
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    fn inbox(&self) -> MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn try_inbox(&self) -> Option<MutexGuard<'_, Inbox>> {
        match self.inbox.try_lock() {
            Ok(inbox) => Some(inbox),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn mark_busy(&self) {
        self.ears.mark_busy();
    }

    /// Decrypts the first `n` bytes of the inbox's raw buffer (and what
    /// the TLS state holds) and hands each whole frame to `each`. An
    /// error fails the connection, and says why.
    fn take_in<T: DeserializeOwned>(
        &self,
        inbox: &mut Inbox,
        n: usize,
        each: &mut impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        let Inbox {
            frames,
            raw,
            heard,
            sealed,
        } = inbox;
        if *sealed {
            return Err("the peer was given up".into());
        }
        if n > 0 {
            *heard = std::time::Instant::now();
        }
        self.decrypt(&raw[..n], frames)?;
        loop {
            let why = match frames.take::<T>() {
                Ok(Some((msg, tail))) => {
                    self.mark_busy();
                    match each(msg, tail) {
                        Ok(()) => continue,
                        Err(why) => why,
                    }
                }
                Ok(None) => return Ok(()),
                Err(e) => e.to_string(),
            };
            let mut tls = self.tls.lock().unwrap_or_else(|e| e.into_inner());
            return Err(self.fail(&mut tls, why));
        }
    }

    /// Feeds `raw` to the TLS state and moves the plaintext into `frames`;
    /// answers the peer if TLS has something to say (a key update).
    fn decrypt(&self, mut raw: &[u8], frames: &mut Frames) -> Result<(), String> {
        let mut tls = self.lock()?;
        loop {
            if let Err(e) = tls.conn.process_new_packets() {
                // Sends the alert that says why, if the socket takes it.
                let _ = self.write_out(&mut tls);
                return Err(self.fail(&mut tls, format!("TLS: {e}")));
            }
            match frames.fill(&mut tls.conn.reader()) {
                Ok(true) => {}
                Ok(false) => return Err(self.fail(&mut tls, "closed by the peer".into())),
                Err(e) => return Err(self.fail(&mut tls, e.to_string())),
            }
            if raw.is_empty() {
                break;
            }
            if let Err(e) = tls.conn.read_tls(&mut raw) {
                return Err(self.fail(&mut tls, format!("TLS: {e}")));
            }
        }
        self.push_out(&mut tls)
    }
}

/// The socket as a writer for TLS records, from any thread: the socket
/// does not block, and what it does not take stays in the TLS state for
/// the task (which waits until the socket takes more).
struct Socket<'a>(&'a std::net::TcpStream);

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        (&*self.0).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
