//! A job's standard streams: stdin pulled by its processes wherever they
//! run, and output held back by a terminal that does not keep up, without
//! holding up other jobs.

mod common;

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use atoll_abi::{KernelId, Pid};
use atoll_node::{InputAnswer, JobSink, JobSpec, Node};
use atoll_process::{Stream, CONSOLE_WINDOW};
use common::*;

/// A job's sink whose stdin reads are handed to the test to answer, and
/// whose output waits while the test holds `gate`.
struct Stdio {
    sink: Sink,
    reads: Sender<InputAnswer>,
    gate: Arc<Mutex<()>>,
}

impl JobSink for Stdio {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        let _open = self.gate.lock().unwrap();
        self.sink.output(stream, bytes);
    }

    fn exited(&mut self, pid: Pid, status: i32) {
        self.sink.exited(pid, status);
    }

    fn input(&mut self, answer: InputAnswer) {
        self.reads.send(answer).unwrap();
    }
}

struct Started {
    pid: Pid,
    out: Output,
    ended: Receiver<i32>,
    reads: Receiver<InputAnswer>,
}

/// Starts a job (`start` runs or restores it) with a [`Stdio`] sink.
fn start_stdio(
    gate: &Arc<Mutex<()>>,
    start: impl FnOnce(Box<dyn JobSink>) -> anyhow::Result<Pid>,
) -> Started {
    let out = Output::default();
    let (done, ended) = mpsc::channel();
    let (to_test, reads) = mpsc::channel();
    let sink = Stdio {
        sink: Sink::new(out.clone(), done),
        reads: to_test,
        gate: gate.clone(),
    };
    let pid = start(Box::new(sink)).expect("job starts");
    Started {
        pid,
        out,
        ended,
        reads,
    }
}

/// Runs `spec` with a [`Stdio`] sink.
fn run_stdio(node: &Node, spec: &JobSpec, gate: &Arc<Mutex<()>>) -> Started {
    start_stdio(gate, |sink| node.run_job(spec, sink))
}

/// Answers every read from `input`, a few bytes at a time, then with end of
/// file.
fn feed(reads: &Receiver<InputAnswer>, input: &[u8], piece: usize) {
    let mut left = input;
    loop {
        let answer = reads.recv_timeout(HANG).expect("the job reads");
        let n = left.len().min(piece).min(answer.max());
        answer.send(left[..n].to_vec());
        if n == 0 {
            return;
        }
        left = &left[n..];
    }
}

#[test]
fn a_job_reads_its_whole_stdin_in_order_while_moving_after_every_call() {
    let node = node(2);
    let mut cat = job("cat", &["5"]);
    cat.wander = true;
    let s = run_stdio(&node, &cat, &Arc::default());
    let input: Vec<u8> = (0..2000u32)
        .flat_map(|i| format!("{i},").into_bytes())
        .collect();
    feed(&s.reads, &input, 3);
    assert_eq!(s.ended.recv_timeout(HANG).unwrap(), 0, "{}", s.out.stderr());
    assert_eq!(*s.out.stdout.lock().unwrap(), input);
    let moved = format!("cat: {} bytes", input.len());
    assert!(s.out.stderr().contains(&moved), "{}", s.out.stderr());
    node.shutdown();
}

#[test]
fn a_read_waiting_for_input_follows_its_process_to_another_kernel() {
    let node = node(2);
    let mut cat = job("cat", &[]);
    cat.kernel = Some(KernelId::new(0, 0));
    let s = run_stdio(&node, &cat, &Arc::default());
    let first = s.reads.recv_timeout(HANG).unwrap();
    assert_eq!(first.max(), 4096, "cat asks for its buffer's size");
    wait_until(&node, "cat reading stdin", |p| {
        p.pid == s.pid && p.state == "reading stdin"
    });
    let to = KernelId::new(0, 1);
    assert_eq!(node.migrate(s.pid, to, None).unwrap().to, to);
    first.send(b"hello\n".to_vec());
    let second = s.reads.recv_timeout(HANG).unwrap();
    let info = wait_until(&node, "cat reading again", |p| p.pid == s.pid);
    assert_eq!(info.kernel, to);
    second.send(Vec::new());
    assert_eq!(s.ended.recv_timeout(HANG).unwrap(), 0);
    assert_eq!(s.out.stdout(), "hello\n");
    node.shutdown();
}

#[test]
fn a_job_without_input_reads_end_of_file() {
    let node = node(1);
    let (status, out) = run(&node, &job("cat", &[]));
    assert_eq!(status, 0);
    assert_eq!(out.stdout(), "");
    assert!(out.stderr().contains("cat: 0 bytes"), "{}", out.stderr());
    node.shutdown();
}

#[test]
fn a_terminal_that_does_not_keep_up_holds_up_its_job_and_no_other() {
    let node = node(2);
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let lines = 100_000;
    let mut flood = job("flood", &[&lines.to_string()]);
    flood.kernel = Some(KernelId::new(0, 0));
    let s = run_stdio(&node, &flood, &gate);
    // Its window full, the writer waits for the console, holding no thread.
    let waiting = wait_until(&node, "flood waiting for its console", |p| {
        p.pid == s.pid && p.state == "waiting for its console"
    });
    let written: u64 = (1..=lines)
        .map(|i| format!("line {i}\n").len() as u64)
        .sum();
    assert!(CONSOLE_WINDOW < written, "flood must outrun the window");
    // Each line is one write of at least 7 bytes; a few calls start it.
    assert!(
        waiting.syscalls <= CONSOLE_WINDOW / 7 + 50,
        "{} calls before waiting: it wrote more than its window",
        waiting.syscalls
    );
    // Another job, on the other kernel and on the same one, goes on.
    for k in 0..2 {
        let mut other = job("flood", &["1000"]);
        other.kernel = Some(KernelId::new(0, k));
        let (status, out) = run(&node, &other);
        assert_eq!(status, 0);
        assert_eq!(out.stdout().lines().count(), 1000);
    }
    assert!(s.out.stdout.lock().unwrap().is_empty());
    drop(held);
    assert_eq!(s.ended.recv_timeout(HANG).unwrap(), 0);
    let stdout = s.out.stdout();
    let mut expected = 1..=lines;
    for line in stdout.lines() {
        assert_eq!(line, format!("line {}", expected.next().unwrap()));
    }
    assert_eq!(expected.next(), None, "lines are missing");
    node.shutdown();
}

#[test]
fn a_process_checkpointed_while_reading_reads_from_the_job_it_is_restored_into() {
    let node = node(1);
    let s = run_stdio(&node, &job("cat", &[]), &Arc::default());
    let unanswered = s.reads.recv_timeout(HANG).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cat.ckpt");
    node.checkpoint(s.pid, &path, false).unwrap();
    assert_eq!(
        s.ended.recv_timeout(HANG).unwrap(),
        128 + 19,
        "ended by SIGSTOP"
    );
    // The old job's terminal answers too late: nobody is there to read it.
    unanswered.send(b"lost\n".to_vec());

    let restored = start_stdio(&Arc::default(), |sink| {
        node.restore_job(&path, None, None, sink)
    });
    feed(&restored.reads, b"restored\n", 100);
    assert_eq!(restored.ended.recv_timeout(HANG).unwrap(), 0);
    assert_eq!(restored.out.stdout(), "restored\n");
    node.shutdown();
}

#[test]
fn a_process_on_another_node_reads_the_stdin_and_waits_for_the_terminal_of_its_job() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    // Reads cross to node 0's console and back; so do drains, several
    // windows of them.
    let mut cat = job("cat", &["1000"]);
    cat.kernel = Some(KernelId::new(1, 0));
    let s = run_stdio(&a, &cat, &Arc::default());
    assert_eq!(s.pid.home.node, 1);
    let input: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    assert!(input.len() as u64 > 2 * CONSOLE_WINDOW);
    feed(&s.reads, &input, 1000);
    assert_eq!(s.ended.recv_timeout(HANG).unwrap(), 0);
    assert_eq!(*s.out.stdout.lock().unwrap(), input);
    // A writer there waits for a terminal here that does not keep up.
    let gate = Arc::new(Mutex::new(()));
    let held = gate.lock().unwrap();
    let mut flood = job("flood", &["20000"]);
    flood.kernel = Some(KernelId::new(1, 0));
    let s = run_stdio(&a, &flood, &gate);
    wait_until(&a, "flood waiting for its console", |p| {
        p.pid == s.pid && p.state == "waiting for its console"
    });
    drop(held);
    assert_eq!(s.ended.recv_timeout(HANG).unwrap(), 0);
    assert_eq!(s.out.stdout().lines().count(), 20_000);
    assert!(s.out.stdout().ends_with("line 20000\n"));
    b.shutdown();
    a.shutdown();
}
