//! What the node tests share: starting nodes and jobs, collecting output.

#![allow(dead_code)] // each test file uses its own part

#[path = "../../../../tests/support.rs"]
pub mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use atoll_abi::{KernelId, Pid};
use atoll_noc::net::identity::{self, Identity};
use atoll_noc::net::LinkConfig;
use atoll_node::{JobSink, JobSpec, Node, NodeConfig};
use atoll_process::Stream;

/// Long enough for anything these tests run; only guards against hangs.
pub const HANG: Duration = Duration::from_secs(120);

/// A node's configuration for the tests: `kernels` kernels, and no
/// balancer, since the tests place their processes and move them on
/// purpose (the balancer's own tests, placement.rs, turn it on).
pub fn config(kernels: u16) -> NodeConfig {
    let mut config = NodeConfig::new(Some(support::cache_dir()));
    config.kernels = kernels;
    config.balance = false;
    config
}

pub fn node(kernels: u16) -> Node {
    Node::start(config(kernels)).expect("node starts")
}

/// A node whose kernels move processes that ask to move (`kmigrate_to`,
/// `--wander`) in `mode`.
pub fn node_in(mode: atoll_migration::Mode, kernels: u16) -> Node {
    let mut config = config(kernels);
    config.migration.mode = mode;
    Node::start(config).expect("node starts")
}

/// A node of a cluster on loopback, with an identity issued from the CA
/// in `dir`; it starts the cluster, or joins it through `join`.
pub fn cluster_node(dir: &Path, name: &str, join: Option<SocketAddr>, kernels: u16) -> Node {
    cluster_node_of(dir, name, join, config(kernels))
}

/// As [`cluster_node`], from `config`.
pub fn cluster_node_of(
    dir: &Path,
    name: &str,
    join: Option<SocketAddr>,
    mut config: NodeConfig,
) -> Node {
    identity::issue(dir, name).unwrap();
    config.cluster = Some(LinkConfig {
        identity: Identity::load(dir, name).unwrap(),
        node: None,
        kernels: config.kernels,
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
    });
    Node::start(config).expect("node starts")
}

/// Two nodes of `kernels` kernels each, `n0` and `n1`, joined on loopback
/// with a CA made in `dir`; returns once each lists the other.
pub fn cluster_pair(dir: &Path, kernels: u16) -> (Node, Node) {
    cluster_pair_of(dir, config(kernels))
}

/// As [`cluster_pair`], both nodes from `config`.
pub fn cluster_pair_of(dir: &Path, config: NodeConfig) -> (Node, Node) {
    identity::init_ca(dir).unwrap();
    let a = cluster_node_of(dir, "n0", None, config.clone());
    let b = cluster_node_of(dir, "n1", Some(a.members()[0].addr), config);
    let t = Instant::now();
    while a.members().len() < 2 || b.members().len() < 2 {
        assert!(t.elapsed() < HANG, "the nodes never joined");
        std::thread::sleep(Duration::from_millis(5));
    }
    (a, b)
}

pub fn job(name: &str, args: &[&str]) -> JobSpec {
    let mut argv = vec![name.to_string()];
    argv.extend(args.iter().map(|s| s.to_string()));
    JobSpec {
        program: support::guest(name),
        args: argv,
        env: vec![],
        preopens: vec![],
        kernel: None,
        prepare: true,
        domain: None,
        wander: false,
        ranks: None,
        limits: Default::default(),
        pin: false,
    }
}

/// A job's output so far, shared with the test, and its end.
#[derive(Clone, Default)]
pub struct Output {
    pub stdout: Arc<Mutex<Vec<u8>>>,
    pub stderr: Arc<Mutex<Vec<u8>>>,
}

impl Output {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
}

pub struct Sink {
    out: Output,
    done: mpsc::Sender<i32>,
}

impl Sink {
    pub fn new(out: Output, done: mpsc::Sender<i32>) -> Self {
        Sink { out, done }
    }
}

impl JobSink for Sink {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        let buf = match stream {
            Stream::Stdout => &self.out.stdout,
            Stream::Stderr => &self.out.stderr,
        };
        buf.lock().unwrap().extend_from_slice(bytes);
    }

    fn exited(&mut self, _pid: Pid, status: i32) {
        let _ = self.done.send(status);
    }
}

pub fn start(node: &Node, spec: &JobSpec) -> (Pid, Output, Receiver<i32>) {
    let out = Output::default();
    let (tx, rx) = mpsc::channel();
    let pid = node
        .run_job(
            spec,
            Box::new(Sink {
                out: out.clone(),
                done: tx,
            }),
        )
        .expect("job starts");
    (pid, out, rx)
}

pub fn run(node: &Node, spec: &JobSpec) -> (i32, Output) {
    let (_, out, rx) = start(node, spec);
    (ended(node, &rx, &out), out)
}

/// The status of a job started with [`start`]; if it does not end within
/// [`HANG`], a panic that shows where every thread of the node's
/// processes waits, and what the job printed.
pub fn ended(node: &Node, done: &Receiver<i32>, out: &Output) -> i32 {
    done.recv_timeout(HANG).unwrap_or_else(|_| {
        panic!(
            "the job never ended\nstdout: {}\nstderr: {}\nps: {:#?}",
            out.stdout(),
            out.stderr(),
            node.ps()
        )
    })
}

/// Restores the checkpoint `file` as a job of its own on kernel `kernel`
/// of node 0 and runs it to its end: its PID, status and output.
pub fn restore_and_run(node: &Node, file: &Path, kernel: u16) -> (Pid, i32, Output) {
    let (tx, rx) = mpsc::channel();
    let out = Output::default();
    let pid = node
        .restore_job(
            file,
            None,
            Some(atoll_abi::KernelId::new(0, kernel)),
            Box::new(Sink::new(out.clone(), tx)),
        )
        .expect("restored");
    let status = rx.recv_timeout(HANG).expect("restored job ends");
    (pid, status, out)
}

/// A sink for jobs that are expected not to start.
pub struct NullSink;

impl JobSink for NullSink {
    fn output(&mut self, _: Stream, _: &[u8]) {}
    fn exited(&mut self, _: Pid, _: i32) {}
}

/// Kernel `index` of node 0.
pub fn k(index: u16) -> KernelId {
    KernelId::new(0, index)
}

/// `spec` started on kernel `kernel` of node 0.
pub fn on(mut spec: JobSpec, kernel: u16) -> JobSpec {
    spec.kernel = Some(k(kernel));
    spec
}

/// Waits until the job has printed at least `lines` lines.
pub fn wait_for_lines(out: &Output, lines: usize) {
    let t = Instant::now();
    while out.stdout().lines().count() < lines {
        assert!(t.elapsed() < HANG, "no progress: {}", out.stdout());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Polls `ps` until `pred` holds for some process.
pub fn wait_until(
    node: &Node,
    what: &str,
    pred: impl Fn(&atoll_kernel::ProcInfo) -> bool,
) -> atoll_kernel::ProcInfo {
    let t = Instant::now();
    loop {
        let found = node
            .ps()
            .unwrap()
            .into_iter()
            .flat_map(|r| r.processes)
            .find(|p| pred(p));
        if let Some(p) = found {
            return p;
        }
        assert!(
            t.elapsed() < HANG,
            "never saw {what}: {:#?}",
            node.ps().unwrap()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
