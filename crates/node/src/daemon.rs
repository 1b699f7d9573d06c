//! The node as a daemon: `atoll node` serves requests on a Unix socket, and
//! `atoll run`, `ps`, `kill` talk to it when it runs (the docker habit).
//!
//! Protocol: each message is a frame — a u32 little-endian length, then a
//! postcard-encoded [`Request`] (client to node) or [`Response`] (node to
//! client). A `Run` is answered by `Started`, then `Output` frames, then
//! `Exited`. A client that hangs up before its job ended has its job killed.

use std::io::{BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use atoll_abi::{status, KernelId, Pid};
use atoll_ipc::DomainInfo;
use atoll_kernel::KernelReport;
use atoll_migration::{MigrationReport, Mode};
use atoll_process::Stream;
use serde::{Deserialize, Serialize};

use crate::{JobSink, JobSpec, Node};

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
        kernel: Option<u16>,
    },
    DomainCreate {
        name: String,
    },
    DomainEnd {
        name: String,
    },
    Domains,
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
    /// Every kernel's report, and the domains (to name them).
    Ps(Vec<KernelReport>, Vec<DomainInfo>),
    Domains(Vec<DomainInfo>),
    Migrated(MigrationReport),
    /// A checkpoint file of this many bytes was written.
    Checkpointed(u64),
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
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/atoll-{uid}/node.sock"))
}

pub fn write_frame<T: Serialize>(w: &mut impl Write, msg: &T) -> std::io::Result<()> {
    let bytes = postcard::to_stdvec(msg).map_err(std::io::Error::other)?;
    w.write_all(&(bytes.len() as u32).to_le_bytes())?;
    w.write_all(&bytes)?;
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

/// Serves requests on `socket` until the process is killed.
///
/// # Errors
/// When the socket cannot be bound (another node already serves it).
pub fn serve(node: Arc<Node>, socket: &Path) -> anyhow::Result<()> {
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if UnixStream::connect(socket).is_ok() {
        bail!("a node already serves {}", socket.display());
    }
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    tracing::info!(socket = %socket.display(), "node listening");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let node = node.clone();
        std::thread::spawn(move || {
            if let Err(e) = handle(&node, conn) {
                tracing::warn!("client connection: {e:#}");
            }
        });
    }
    Ok(())
}

fn handle(node: &Node, conn: UnixStream) -> anyhow::Result<()> {
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
        Request::Ps => node.ps().map(|r| Response::Ps(r, node.domains())),
        Request::Kill { pid, signal } => node.kill(pid, signal).map(|()| Response::Done),
        Request::Migrate { pid, to, mode } => node.migrate(pid, to, mode).map(Response::Migrated),
        Request::Checkpoint {
            pid,
            path,
            leave_running,
        } => node
            .checkpoint(pid, &path, leave_running)
            .map(Response::Checkpointed),
        Request::DomainCreate { name } => node.domain_create(&name).map(|_| Response::Done),
        Request::DomainEnd { name } => node.domain_end(&name).map(|_| Response::Done),
        Request::Domains => Ok(Response::Domains(node.domains())),
    };
    write_frame(
        &mut writer,
        &answer.unwrap_or_else(|e| Response::Error(format!("{e:#}"))),
    )?;
    Ok(())
}

/// Runs a job (a program, or a restored checkpoint) for a client: `start`
/// starts it with the sink that streams its output back.
fn run(
    node: &Node,
    start: impl FnOnce(Box<dyn JobSink>) -> anyhow::Result<Pid>,
    mut reader: impl Read,
    mut writer: UnixStream,
) -> anyhow::Result<()> {
    let ended = Arc::new(AtomicBool::new(false));
    let sink = SocketSink {
        stream: writer.try_clone()?,
        ended: ended.clone(),
    };
    let pid = match start(Box::new(sink)) {
        Ok(pid) => pid,
        Err(e) => {
            return Ok(write_frame(
                &mut writer,
                &Response::Error(format!("{e:#}")),
            )?)
        }
    };
    // Wait for the client to hang up; if the job still runs, end it.
    let mut buf = [0u8; 64];
    while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
    if !ended.load(Ordering::Acquire) {
        let _ = node.kill(pid, status::SIGKILL);
    }
    Ok(())
}

/// Sends a job's output and end to its client.
struct SocketSink {
    stream: UnixStream,
    ended: Arc<AtomicBool>,
}

impl JobSink for SocketSink {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        let _ = write_frame(
            &mut self.stream,
            &Response::Output {
                stream,
                bytes: bytes.to_vec(),
            },
        );
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        self.ended.store(true, Ordering::Release);
        let _ = write_frame(&mut self.stream, &Response::Exited { status });
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

    pub fn send(&mut self, request: &Request) -> anyhow::Result<()> {
        Ok(write_frame(&mut self.stream, request)?)
    }

    /// The next response; an error if the node hung up.
    pub fn recv(&mut self) -> anyhow::Result<Response> {
        read_frame(&mut self.stream)?.context("the node closed the connection")
    }
}
