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
//! ([`Frames`]) and hands each to the node. A connection that fails in
//! either direction is shut down, which ends its task.

use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::TlsStream;

use super::frame::Frames;

/// Bytes taken from the socket at a time.
const READ_CHUNK: usize = 64 << 10;
/// A large frame is encrypted and written this much at a time, so that
/// the peer decrypts the start of it while the rest is being encrypted.
const WRITE_CHUNK: usize = 64 << 10;

/// A TLS connection to another node that any thread may send on.
pub(super) struct Conn {
    io: TcpStream,
    tls: Mutex<Tls>,
    /// Rung when output is left for the task to write.
    backlog: Notify,
    /// Whether anything was sent since the last heartbeat.
    sent: AtomicBool,
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
}

impl Conn {
    /// Takes over a handshaken stream.
    pub(super) fn new(stream: TlsStream<TcpStream>) -> Conn {
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
        Conn {
            io: tcp,
            tls: Mutex::new(Tls {
                conn,
                failed: None,
                open: false,
                held: None,
            }),
            backlog: Notify::new(),
            sent: AtomicBool::new(false),
        }
    }

    /// Sends one frame: encrypts it and writes what the socket takes now,
    /// leaving the rest to the connection's task. Frames from concurrent
    /// senders never interleave.
    ///
    /// # Errors
    /// The connection failed (now or before), with why.
    pub(super) fn send(&self, frame: &[u8]) -> Result<(), String> {
        let mut tls = self.lock()?;
        debug_assert!(!tls.open, "a frame sent into another");
        self.write(&mut tls, frame)
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
        self.write(&mut tls, first)?;
        self.write(&mut tls, &held)
    }

    /// Encrypts `bytes` and writes what the socket takes now.
    fn write(&self, tls: &mut Tls, bytes: &[u8]) -> Result<(), String> {
        if let Some(held) = &mut tls.held {
            held.extend_from_slice(bytes);
            return Ok(());
        }
        if let Err(e) = tls.conn.writer().write_all(bytes) {
            return Err(self.fail(tls, format!("TLS: {e}")));
        }
        self.sent.store(true, Ordering::Relaxed);
        self.push_out(tls)
    }

    /// Writes what the socket takes now and leaves the rest to the task.
    fn push_out(&self, tls: &mut Tls) -> Result<(), String> {
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
                    self.write(&mut tls, piece)?;
                }
                self.flushed().await?;
            }
        }
        Ok(())
    }

    /// Shuts the socket down: the task ends, and so does the peer's side.
    pub(super) fn close(&self) {
        let _ = socket2::SockRef::from(&self.io).shutdown(Shutdown::Both);
    }

    /// Serves the connection until it fails or is closed, handing each
    /// frame that arrives (at most `max` bytes), message and tail, to
    /// `each`, whose error closes it. Sends `ping` after `heartbeat` of
    /// silence and gives up after `dead_after` without a byte. Returns why
    /// it ended.
    pub(super) async fn serve<T: DeserializeOwned>(
        &self,
        max: u32,
        ping: &[u8],
        heartbeat: Duration,
        dead_after: Duration,
        each: impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> String {
        let why = tokio::select! {
            why = self.receive(max, dead_after, each) => why,
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Waits until everything queued is written.
    async fn flushed(&self) -> Result<(), String> {
        loop {
            self.io.writable().await.map_err(|e| e.to_string())?;
            let mut tls = self.lock()?;
            match self.write_out(&mut tls) {
                Ok(true) => return Ok(()),
                // The socket's readiness was cleared: `writable` waits.
                Ok(false) => {}
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
        loop {
            tokio::time::sleep(every).await;
            if self.sent.swap(false, Ordering::Relaxed) {
                continue;
            }
            // A connection busy with a long frame is not silent.
            let sent = self.lock().and_then(|mut tls| {
                if tls.open {
                    Ok(())
                } else {
                    self.write(&mut tls, ping)
                }
            });
            if let Err(why) = sent {
                return why;
            }
        }
    }

    async fn receive<T: DeserializeOwned>(
        &self,
        max: u32,
        dead_after: Duration,
        mut each: impl FnMut(T, Vec<u8>) -> Result<(), String>,
    ) -> String {
        let mut frames = Frames::new(max);
        let mut raw = vec![0u8; READ_CHUNK];
        let mut deadline = Instant::now() + dead_after;
        // The TLS state may hold frames already: those that came with the
        // first ones.
        let mut taken = 0;
        loop {
            if let Err(why) = self.decrypt(&raw[..taken], &mut frames) {
                return why;
            }
            loop {
                match frames.take::<T>() {
                    Ok(Some((msg, tail))) => {
                        if let Err(why) = each(msg, tail) {
                            return why;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return e.to_string(),
                }
            }
            taken = loop {
                match tokio::time::timeout_at(deadline, self.io.readable()).await {
                    Err(_) => return format!("nothing came for {dead_after:?}"),
                    Ok(Err(e)) => return e.to_string(),
                    Ok(Ok(())) => {}
                }
                match self.io.try_read(&mut raw) {
                    Ok(0) => return "closed by the peer".into(),
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return e.to_string(),
                }
            };
            deadline = Instant::now() + dead_after;
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

/// The socket as a writer for TLS records, from any thread: `try_write`
/// never blocks, and a `WouldBlock` clears the readiness the connection's
/// task then waits on.
struct Socket<'a>(&'a TcpStream);

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
