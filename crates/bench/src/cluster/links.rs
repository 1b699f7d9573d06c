//! Two nodes and the Linux alternatives on the same link: TCP and TLS
//! ping-pongs and streams, and ipcbench's runs.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use atoll_abi::KernelId;
use atoll_noc::net::identity::{self, Identity};
use atoll_noc::net::{tls, LinkConfig};
use atoll_node::{JobSpec, Node};
use rustls::{ClientConnection, ServerConnection, StreamOwned};

use super::{LinkRates, Measured, BLOCK, STREAM_BYTES};
use crate::netns::Veth;
use crate::{atoll_job, job_on_kernel0, progress, Context};

/// The JSON line a benchmark program printed.
pub(super) fn json_line(out: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(out.trim())
        .with_context(|| format!("expected a JSON line, got `{}`", out.trim()))
}

/// Two nodes of one kernel each, joined over loopback TLS, with a CA and
/// identities (`n0`, `n1`) made in `certs`; with `balance`, their balancers
/// on.
pub(crate) fn pair(ctx: &Context, certs: &Path, balance: bool) -> anyhow::Result<(Node, Node)> {
    identity::init_ca(certs)?;
    let id = |name: &str| -> anyhow::Result<Identity> {
        identity::issue(certs, name)?;
        Ok(Identity::load(certs, name)?)
    };
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let a = start(ctx, id("n0")?, loopback, None, balance)?;
    let join = a.members()[0].addr;
    let b = start(ctx, id("n1")?, loopback, Some(join), balance)?;
    Ok((a, b))
}

/// Two nodes as [`pair`] makes them (with the identities it made in
/// `certs`), each in one of `veth`'s namespaces.
pub(super) fn pair_over(ctx: &Context, certs: &Path, veth: &Veth) -> anyhow::Result<(Node, Node)> {
    let id = |name: &str| Identity::load(certs, name);
    let a = veth.within(0, || start(ctx, id("n0")?, veth.addr(0), None, false))?;
    let join = a.members()[0].addr;
    let b = veth.within(1, || start(ctx, id("n1")?, veth.addr(1), Some(join), false))?;
    Ok((a, b))
}

/// A node of one kernel, listening on `host`; the second joins the first.
fn start(
    ctx: &Context,
    identity: Identity,
    host: IpAddr,
    join: Option<SocketAddr>,
    balance: bool,
) -> anyhow::Result<Node> {
    let mut config = crate::bench_node(ctx, Some(1));
    config.pin = false;
    config.balance = balance;
    config.cluster = Some(LinkConfig {
        identity,
        node: None,
        kernels: 1,
        listen: SocketAddr::new(host, 0),
        advertise: None,
        join,
    });
    Node::start(config)
}

/// IPC2 and COPY1 from kernel 0 of `a_node` to `there`, and the Linux
/// ping-pongs and streams, over loopback or across `veth`; `runs` of each.
pub(super) fn link_rates(
    a_node: &Node,
    ipcbench: &Path,
    there: KernelId,
    identity: &Identity,
    veth: Option<&Veth>,
    runs: usize,
    iters: u32,
) -> anyhow::Result<LinkRates> {
    let node_arg = format!("node{}", there.node);
    let (mut ipc2, mut copy1) = (Vec::new(), Vec::new());
    let (mut tcp, mut tls_rt) = (Vec::new(), Vec::new());
    let (mut tcp_polled, mut tls_polled) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ipc2.push(ipcbench_run(
            a_node,
            ipcbench,
            &["ipc2", &node_arg, &iters.to_string()],
        )?);
        let copies = (iters / 100).max(200).to_string();
        let ns = ipcbench_run(
            a_node,
            ipcbench,
            &["copy1", &node_arg, &copies, &BLOCK.to_string()],
        )?;
        copy1.push(BLOCK as f64 / ns * 1e3);
        tcp.push(pingpong(ends(None, veth, Wait::Sleep)?, iters)?);
        tls_rt.push(pingpong(ends(Some(identity), veth, Wait::Sleep)?, iters)?);
        tcp_polled.push(pingpong(ends(None, veth, Wait::Poll)?, iters)?);
        tls_polled.push(pingpong(ends(Some(identity), veth, Wait::Poll)?, iters)?);
    }
    let (tcp_stream, tls_stream) = streams(identity, veth, runs)?;
    let rates = LinkRates {
        ipc2_ns: Measured::of(ipc2),
        tcp_pingpong_ns: Measured::of(tcp),
        tls_pingpong_ns: Measured::of(tls_rt),
        tcp_polled_pingpong_ns: Measured::of(tcp_polled),
        tls_polled_pingpong_ns: Measured::of(tls_polled),
        copy1_mbps: Measured::of(copy1),
        tcp_stream_mbps: tcp_stream,
        tls_stream_mbps: tls_stream,
    };
    progress::note(&format!(
        "  IPC2 {:.0} ns, TCP {:.0} ns, TLS {:.0} ns (polled {:.0}, {:.0}); COPY1 {:.0} MB/s, TCP stream {:.0} MB/s, TLS stream {:.0} MB/s",
        rates.ipc2_ns.median,
        rates.tcp_pingpong_ns.median,
        rates.tls_pingpong_ns.median,
        rates.tcp_polled_pingpong_ns.median,
        rates.tls_polled_pingpong_ns.median,
        rates.copy1_mbps.median,
        rates.tcp_stream_mbps.median,
        rates.tls_stream_mbps.median
    ));
    Ok(rates)
}

/// Runs ipcbench on kernel 0 of `node`; returns its ns per operation.
fn ipcbench_run(node: &Node, program: &Path, args: &[&str]) -> anyhow::Result<f64> {
    let job = job(program, "ipcbench", args);
    let (out, _) = atoll_job(node, &job)?;
    let line: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("ipcbench printed `{}`", out.trim()))?;
    line["ns_per_op"]
        .as_f64()
        .context("no ns_per_op in ipcbench's line")
}

pub(super) fn job(program: &Path, name: &str, args: &[&str]) -> JobSpec {
    let argv = std::iter::once(name).chain(args.iter().copied());
    job_on_kernel0(program.to_path_buf(), argv.map(String::from).collect())
}

/// A connected pair of sockets over loopback, or across `veth` (the
/// server in its second namespace, the client in its first).
fn socket_pair(veth: Option<&Veth>) -> anyhow::Result<(TcpStream, TcpStream)> {
    let (client, server) = match veth {
        None => {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let client = TcpStream::connect(listener.local_addr()?)?;
            (client, listener.accept()?.0)
        }
        Some(veth) => {
            let listener = veth.within(1, || Ok(TcpListener::bind((veth.addr(1), 0))?))?;
            let to = listener.local_addr()?;
            let client = veth.within(0, || Ok(TcpStream::connect(to)?))?;
            (client, listener.accept()?.0)
        }
    };
    for s in [&client, &server] {
        s.set_nodelay(true)?;
    }
    Ok((client, server))
}

/// One end of a link, plain or TLS.
type End = Box<dyn ReadWrite + Send>;

/// How an end waits for the other's bytes.
#[derive(Clone, Copy)]
enum Wait {
    /// In the system call: the thread sleeps and is woken.
    Sleep,
    /// Trying again at once, as Open MPI's TCP transport and atoll's idle
    /// kernels do: no wake-up, a core kept busy.
    Poll,
}

/// A non-blocking socket that retries what would block, at once.
struct Polled(TcpStream);

impl Polled {
    fn new(socket: TcpStream) -> std::io::Result<Polled> {
        socket.set_nonblocking(true)?;
        Ok(Polled(socket))
    }
}

impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.0.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                other => return other,
            }
        }
    }
}

impl Write for Polled {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Both ends of a connection (see [`socket_pair`]), with TLS 1.3 between
/// them when `identity` is given (the cluster's certificates, atoll's
/// configuration), each waiting as `wait` says once connected.
fn ends(
    identity: Option<&Identity>,
    veth: Option<&Veth>,
    wait: Wait,
) -> anyhow::Result<(End, End)> {
    let (client, server) = socket_pair(veth)?;
    let Some(id) = identity else {
        return Ok(match wait {
            Wait::Sleep => (Box::new(client), Box::new(server)),
            Wait::Poll => (
                Box::new(Polled::new(client)?),
                Box::new(Polled::new(server)?),
            ),
        });
    };
    let server_conn = ServerConnection::new(tls::server_config(id)?)?;
    let handshake = std::thread::spawn(move || -> anyhow::Result<_> {
        let mut s = StreamOwned::new(server_conn, server);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(s)
    });
    let name = tls::server_name(&id.name)?;
    let mut c = StreamOwned::new(
        ClientConnection::new(tls::client_config(id)?, name)?,
        client,
    );
    while c.conn.is_handshaking() {
        c.conn.complete_io(&mut c.sock)?;
    }
    let s = handshake.join().expect("handshake thread")?;
    // The handshakes waited in the system calls; from here on, `wait`.
    Ok(match wait {
        Wait::Sleep => (Box::new(c), Box::new(s)),
        Wait::Poll => (
            Box::new(StreamOwned::new(c.conn, Polled::new(c.sock)?)),
            Box::new(StreamOwned::new(s.conn, Polled::new(s.sock)?)),
        ),
    })
}

/// MB/s of the TCP and the TLS streams over loopback or across `veth`;
/// `runs` of each.
pub(super) fn streams(
    identity: &Identity,
    veth: Option<&Veth>,
    runs: usize,
) -> anyhow::Result<(Measured, Measured)> {
    let (mut tcp, mut tls) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        tcp.push(stream(ends(None, veth, Wait::Sleep)?)?);
        tls.push(stream(ends(Some(identity), veth, Wait::Sleep)?)?);
    }
    Ok((Measured::of(tcp), Measured::of(tls)))
}

/// Median-free: the ns per round trip of `iters` 64-byte ping-pongs
/// between two threads (after a tenth as many untimed ones).
fn pingpong((mut client, mut server): (End, End), iters: u32) -> anyhow::Result<f64> {
    let warmup = (iters / 10).max(100);
    let total = warmup + iters;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut m = [0u8; 64];
        for _ in 0..total {
            server.read_exact(&mut m)?;
            m[0] = m[0].wrapping_add(1);
            server.write_all(&m)?;
            server.flush()?;
        }
        Ok(())
    });
    let mut m = [0u8; 64];
    let mut t = Instant::now();
    for i in 0..total {
        if i == warmup {
            t = Instant::now();
        }
        client.write_all(&m)?;
        client.flush()?;
        client.read_exact(&mut m)?;
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(iters);
    echo.join().expect("echo thread")?;
    Ok(ns)
}

/// MB/s of [`STREAM_BYTES`] written in 1 MiB writes from one thread to another.
fn stream((mut client, mut server): (End, End)) -> anyhow::Result<f64> {
    let sink = std::thread::spawn(move || -> std::io::Result<()> {
        let mut buf = vec![0u8; BLOCK];
        let mut left = STREAM_BYTES;
        while left > 0 {
            let n = server.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            left -= n.min(left);
        }
        server.write_all(b"k")?;
        server.flush()
    });
    let block = vec![7u8; BLOCK];
    let t = Instant::now();
    for _ in 0..STREAM_BYTES / BLOCK {
        client.write_all(&block)?;
    }
    client.flush()?;
    let mut ack = [0u8; 1];
    client.read_exact(&mut ack)?;
    let secs = t.elapsed().as_secs_f64();
    sink.join().expect("sink thread")?;
    Ok(STREAM_BYTES as f64 / secs / 1e6)
}
