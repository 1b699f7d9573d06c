//! The node as a daemon: `atoll node` serves requests on a Unix socket, and
//! `atoll run`, `ps`, `kill` talk to it when it runs (the docker habit).
//!
//! Protocol: each message is a frame — a u32 little-endian length, then a
//! postcard-encoded [`Request`] (client to node) or [`Response`] (node to
//! client). A `Run` is answered by `Started` (or `Error`), then `Output`
//! frames, then `Exited` (a fast job's first output may come before
//! `Started`). Meanwhile each `ReadInput` (a process of the job reads stdin)
//! is answered by the client with one `Input` from its own stdin, in order.
//! A client that hangs up before its job ended has its job killed.
//!
//! Access: the node runs programs, reads and writes files (checkpoints) as
//! the user it runs as, so only that user and root may use it. The socket's
//! directory is created private (0700) and refused if another user owns it
//! or could replace the socket in it; the socket is 0600; and every
//! connection's peer credentials are checked before its request is read.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use atoll_abi::{status, KernelId, Pid};
use atoll_ipc::DomainInfo;
use atoll_kernel::KernelReport;
use atoll_migration::{MigrationReport, Mode};
use atoll_process::Stream;
use serde::{Deserialize, Serialize};

use crate::{InputAnswer, JobSink, JobSpec, Node, NodeStatus};

/// Largest frame accepted (a `ps` of many processes fits easily).
const MAX_FRAME: u32 = 64 << 20;

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    Run(JobSpec),
    Ps,
    Kill {
        pid: Pid,
        signal: i32,
    },
    Migrate {
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
    },
    /// Write a checkpoint file (an absolute path, written by the node).
    Checkpoint {
        pid: Pid,
        path: PathBuf,
        leave_running: bool,
    },
    /// Restore a checkpoint file as a job; answered like `Run`.
    Restore {
        path: PathBuf,
        program: Option<PathBuf>,
        kernel: Option<KernelId>,
    },
    DomainCreate {
        name: String,
        max_processes: Option<u32>,
    },
    DomainEnd {
        name: String,
    },
    Domains,
    /// The URL of the node's dashboard (with its token), if it serves one.
    Dashboard,
    /// The answer to a `ReadInput` of the job this connection runs: at
    /// most the bytes it asked for; none at the end of the client's input.
    Input(Vec<u8>),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Started(Pid),
    Output {
        stream: Stream,
        bytes: Vec<u8>,
    },
    Exited {
        status: i32,
    },
    /// A process of the job reads stdin: send at most `max` bytes of it
    /// (`Request::Input`).
    ReadInput {
        max: u32,
    },
    /// Every kernel's report, the domains (to name them), and the nodes of
    /// the cluster (empty for a node alone).
    Ps(Vec<KernelReport>, Vec<DomainInfo>, Vec<NodeStatus>),
    Domains(Vec<DomainInfo>),
    Migrated(MigrationReport),
    /// A checkpoint file of this many bytes was written.
    Checkpointed(u64),
    /// The dashboard's URL; `None` when the node runs without `--http`.
    Dashboard(Option<String>),
    Done,
    Error(String),
}

/// The socket `atoll` uses when none is given: `$ATOLL_SOCKET`, else
/// `$XDG_RUNTIME_DIR/atoll.sock`, else `/tmp/atoll-$UID/node.sock`.
pub fn default_socket() -> PathBuf {
    if let Some(p) = std::env::var_os("ATOLL_SOCKET") {
        return p.into();
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return Path::new(&d).join("atoll.sock");
    }
    PathBuf::from(format!("/tmp/atoll-{}/node.sock", current_uid()))
}

/// Writes one frame: a little-endian u32 length, then the postcard body.
pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    // One write per frame, so a reader never sees a length without its body.
    let mut frame = postcard::to_extend(msg, vec![0u8; 4]).map_err(std::io::Error::other)?;
    let len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    w.write_all(&frame)?;
    w.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> anyhow::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        bail!("frame of {len} bytes is too large: not an atoll peer?");
    }
    let mut buf = vec![0; len as usize];
    r.read_exact(&mut buf).context("truncated frame")?;
    Ok(Some(postcard::from_bytes(&buf).context("malformed frame")?))
}

/// Serves requests on `socket` until the process is killed. `dashboard` is
/// the URL of the node's dashboard, told to those who may use the node.
///
/// # Errors
/// When the socket cannot be bound (another node already serves it).
pub fn serve(node: Arc<Node>, socket: &Path, dashboard: Option<String>) -> anyhow::Result<()> {
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir)?;
    }
    if UnixStream::connect(socket).is_ok() {
        bail!("a node already serves {}", socket.display());
    }
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", socket.display()))?;
    tracing::info!(socket = %socket.display(), "node listening");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let node = node.clone();
        let dashboard = dashboard.clone();
        std::thread::spawn(move || {
            if let Err(e) = handle(&node, conn, dashboard) {
                tracing::warn!("client connection: {}", crate::report(&e));
            }
        });
    }
    Ok(())
}

/// Makes sure `dir` can hold the node's socket safely: created 0700 if
/// missing; owned by this user or root; and if others may write to it, only
/// with the sticky bit (as /tmp), so nobody else can replace the socket.
fn private_dir(dir: &Path) -> anyhow::Result<()> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let meta = std::fs::metadata(dir).with_context(|| format!("checking {}", dir.display()))?;
    let me = current_uid();
    if meta.uid() != me && meta.uid() != 0 {
        bail!(
            "{} belongs to uid {}, not to this user (uid {me}): refusing to serve a socket there",
            dir.display(),
            meta.uid()
        );
    }
    let mode = meta.mode();
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        bail!(
            "others can write to {} (mode {:o}): refusing to serve a socket there",
            dir.display(),
            mode & 0o7777
        );
    }
    Ok(())
}

fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// The user at the other end of `conn` (`SO_PEERCRED`).
fn peer_uid(conn: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and
    // the descriptor is open for the borrow of `conn`.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(cred.uid)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether user `peer` may use a node that runs as user `node`.
fn may_use(peer: u32, node: u32) -> bool {
    peer == node || peer == 0
}

fn handle(node: &Node, conn: UnixStream, dashboard: Option<String>) -> anyhow::Result<()> {
    let peer = peer_uid(&conn)?;
    if !may_use(peer, current_uid()) {
        let why = format!(
            "uid {peer} may not use this node: it runs as uid {}",
            current_uid()
        );
        tracing::warn!("refused a client: {why}");
        let mut conn = conn;
        write_frame(&mut conn, &Response::Error(why))?;
        return Ok(());
    }
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    let Some(request) = read_frame::<Request>(&mut reader)? else {
        return Ok(());
    };
    let answer = match request {
        Request::Run(job) => {
            return run(node, |sink| node.run_job(&job, sink), reader, writer);
        }
        Request::Restore {
            path,
            program,
            kernel,
        } => {
            let start = |sink| node.restore_job(&path, program.as_deref(), kernel, sink);
            return run(node, start, reader, writer);
        }
        Request::Ps => node
            .ps()
            .map(|r| Response::Ps(r, node.domains(), node.nodes())),
        Request::Kill { pid, signal } => node.kill(pid, signal).map(|()| Response::Done),
        Request::Migrate { pid, to, mode } => node.migrate(pid, to, mode).map(Response::Migrated),
        Request::Checkpoint {
            pid,
            path,
            leave_running,
        } => node
            .checkpoint(pid, &path, leave_running)
            .map(Response::Checkpointed),
        Request::DomainCreate {
            name,
            max_processes,
        } => node
            .domain_create(&name, max_processes)
            .map(|_| Response::Done),
        Request::DomainEnd { name } => node.domain_end(&name).map(|_| Response::Done),
        Request::Domains => Ok(Response::Domains(node.domains())),
        Request::Dashboard => Ok(Response::Dashboard(dashboard)),
        Request::Input(_) => Err(anyhow::anyhow!("input, but no job runs for it")),
    };
    write_frame(
        &mut writer,
        &answer.unwrap_or_else(|e| Response::Error(crate::report(&e))),
    )?;
    Ok(())
}

/// Runs a job (a program, or a restored checkpoint) for a client: `start`
/// starts it with the sink that streams its output back.
fn run(
    node: &Node,
    start: impl FnOnce(Box<dyn JobSink>) -> anyhow::Result<Pid>,
    mut reader: impl Read,
    writer: UnixStream,
) -> anyhow::Result<()> {
    let ended = Arc::new(AtomicBool::new(false));
    let reads = Reads::default();
    // The job's thread writes its frames, and this one `Started`: one
    // writer at a time, so that frames do not interleave.
    let writer = Arc::new(Mutex::new(writer));
    let sink = SocketSink {
        stream: writer.clone(),
        ended: ended.clone(),
        reads: reads.clone(),
    };
    let started = match start(Box::new(sink)) {
        Ok(pid) => Response::Started(pid),
        Err(e) => Response::Error(crate::report(&e)),
    };
    let _ = write_frame(&mut *writer.lock().expect("writer"), &started);
    let Response::Started(pid) = started else {
        return Ok(());
    };
    // The client's input, until it hangs up; then, if the job still runs,
    // end it. Reads it did not answer find end of file.
    loop {
        match read_frame::<Request>(&mut reader) {
            Ok(Some(Request::Input(bytes))) => match reads.lock().expect("reads").pop_front() {
                Some(answer) => answer.send(bytes),
                None => tracing::warn!("a client sent input nobody asked for"),
            },
            Ok(Some(other)) => {
                tracing::warn!("a client sent {other:?} while its job runs: hanging up");
                break;
            }
            Ok(None) | Err(_) => break,
        }
    }
    for answer in reads.lock().expect("reads").drain(..) {
        answer.send(Vec::new());
    }
    if !ended.load(Ordering::Acquire) {
        let _ = node.kill(pid, status::SIGKILL);
    }
    Ok(())
}

/// The stdin reads of a job that its client has yet to answer, in order.
type Reads = Arc<Mutex<VecDeque<InputAnswer>>>;

/// Sends a job's output and end to its client, and asks it for input.
struct SocketSink {
    stream: Arc<Mutex<UnixStream>>,
    ended: Arc<AtomicBool>,
    reads: Reads,
}

impl SocketSink {
    fn send(&self, response: &Response) {
        let _ = write_frame(&mut *self.stream.lock().expect("writer"), response);
    }
}

impl JobSink for SocketSink {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        self.send(&Response::Output {
            stream,
            bytes: bytes.to_vec(),
        });
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        self.ended.store(true, Ordering::Release);
        self.send(&Response::Exited { status });
    }

    fn input(&mut self, answer: InputAnswer) {
        let max = answer.max() as u32;
        self.reads.lock().expect("reads").push_back(answer);
        self.send(&Response::ReadInput { max });
    }
}

/// A connection to a running node.
pub struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connects to the node at `socket`, if one serves it.
    pub fn connect(socket: &Path) -> Option<Client> {
        UnixStream::connect(socket)
            .ok()
            .map(|stream| Client { stream })
    }

    /// A second handle on the same connection, to send from another thread
    /// (a job's input) while this one receives.
    pub fn try_clone(&self) -> std::io::Result<Client> {
        Ok(Client {
            stream: self.stream.try_clone()?,
        })
    }

    pub fn send(&mut self, request: &Request) -> anyhow::Result<()> {
        Ok(write_frame(&mut self.stream, request)?)
    }

    /// The next response; an error if the node hung up.
    pub fn recv(&mut self) -> anyhow::Result<Response> {
        read_frame(&mut self.stream)?.context("the node closed the connection")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_directory_is_made_private_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        private_dir(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("others can write"), "{err}");
        // Writable by all but sticky, as /tmp: nobody can replace our socket.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&dir).unwrap();
        if current_uid() == 0 {
            std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
            let err = private_dir(&dir).unwrap_err().to_string();
            assert!(err.contains("belongs to uid 65534"), "{err}");
        }
    }

    #[test]
    fn only_the_nodes_user_and_root_may_use_it() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), current_uid());
        assert!(may_use(1000, 1000));
        assert!(may_use(0, 1000));
        assert!(!may_use(1001, 1000));
        assert!(!may_use(1000, 0));
    }
}
