//! Threads inside processes (`sdk/thread`, `crates/process/src/threads.rs`):
//! the POSIX API, and processes whose threads are in every state moved
//! between kernels, checkpointed and restored, coming back exactly as they
//! were.

mod common;

use std::time::{Duration, Instant};

use atoll_abi::{status, KernelId};
use atoll_migration::Mode;
use atoll_node::Node;
use common::*;

fn wait_for(node: &Node, out: &Output, text: &str) {
    let t = Instant::now();
    while !out.stdout().contains(text) {
        assert!(
            t.elapsed() < HANG,
            "never printed {text:?}: {}\nps: {:#?}",
            out.stdout(),
            node.ps()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_pthread_api_works_as_posix_says() {
    let node = node(1);
    let (status, out) = run(&node, &job("threads", &[]));
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    let lines: Vec<String> = out.stdout().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 22, "{lines:#?}");
    for line in &lines[..21] {
        assert!(line.ends_with(": ok"), "{line}");
    }
}

/// What an unmoved `threadmix` prints.
const EXPECTED: &str = "ready\ncondition: 1\nmutex: 2\njoin: 7\nreceive: 42\nsemaphore: 5\n\
                        compute: 754959235\nchild: spawned 0, exit 0\n";

#[test]
fn threads_in_every_state_migrate_with_their_process() {
    let node = node(2);
    let spec = on(job("threadmix", &["800"]), 0);
    let (status, out) = run(&node, &spec);
    assert_eq!(
        (status, out.stdout().as_str()),
        (0, EXPECTED),
        "{}",
        out.stderr()
    );
    for mode in [Mode::Handover, Mode::Copy] {
        let (pid, out, done) = start(&node, &spec);
        wait_for(&node, &out, "ready");
        // Seen by ps: the first thread sleeps, the others wait where they
        // were left (one in the kernel, in its receive), one computes. On
        // a loaded machine a thread may not have reached its wait when
        // "ready" is printed: ps is asked until it has.
        wait_until(&node, "eight threads waiting, one in its receive", |p| {
            let waiting = |what: &str| {
                p.threads
                    .iter()
                    .any(|t| t.state.to_lowercase().contains(what))
            };
            p.pid == pid && p.threads.len() == 8 && waiting("futex") && waiting("receiv")
        });
        let mut moved = 0;
        for i in 0..20 {
            if out.stdout().lines().count() > 1 {
                break;
            }
            let to = KernelId::new(0, (i + 1) % 2);
            if node.migrate(pid, to, Some(mode)).is_ok() {
                moved += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(moved >= 5, "{mode}: only {moved} moves in the window");
        assert_eq!(ended(&node, &done, &out), 0, "{}", out.stderr());
        assert_eq!(out.stdout(), EXPECTED, "{mode}: moved {moved} times");
    }
}

#[test]
fn the_last_frame_does_not_carry_again_what_threads_that_did_not_run_saved() {
    // Seventeen threads that wait for good: their contexts (globals, saved
    // stack, words: about 120 bytes each) go in the pre-copy frame, and
    // the stop-and-copy gives only their numbers.
    let node = node(2);
    let (pid, out, done) = start(&node, &on(job("threadbench", &["park", "16", "1"]), 0));
    wait_for(&node, &out, "ready");
    // A failed move puts the contexts back: the process stays whole here,
    // and the moves below (each starting from a full frame) find them.
    node.fail_arrivals(KernelId::new(0, 1), 1).unwrap();
    let e = node
        .migrate(pid, KernelId::new(0, 1), Some(Mode::Copy))
        .unwrap_err();
    assert!(e.to_string().contains("injected fault"), "{e:#}");
    for to in [1, 0, 1] {
        let report = node
            .migrate(pid, KernelId::new(0, to), Some(Mode::Copy))
            .unwrap();
        assert!(report.rounds.len() >= 2, "{report:?}");
        let last = report.rounds.last().unwrap();
        assert!(last.bytes < 17 * 64, "{report:?}");
    }
    let p = wait_until(&node, "seventeen threads", |p| {
        p.pid == pid && p.threads.len() == 17
    });
    assert_eq!(p.kernel, KernelId::new(0, 1));
    node.kill(pid, status::SIGKILL).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGKILL)
    );
}

#[test]
fn a_checkpointed_process_with_threads_is_restored_as_it_was() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("threadmix.img");
    let spec = on(job("threadmix", &["800", "alone"]), 0);
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}", out.stderr());
    let expected = out.stdout();
    assert!(!expected.contains("receive"), "{expected}");

    let (pid, out, done) = start(&node, &spec);
    wait_for(&node, &out, "ready");
    node.checkpoint(pid, &file, false).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGSTOP)
    );
    let (restored, status, rest) = restore_and_run(&node, &file, 1);
    assert_eq!(restored, pid, "the PID does not change");
    assert_eq!(status, 0, "{}", rest.stderr());
    assert_eq!(out.stdout() + &rest.stdout(), expected);
}

#[test]
fn processes_with_threads_go_dormant_and_wake_as_they_were() {
    // Eight instances per kernel: of 24 processes whose threads all wait,
    // most are kept as images while they do.
    let mut config = config(2);
    config.runtime.instances = 16;
    let node = atoll_node::Node::start(config).unwrap();
    let spec = job("threadmix", &["1500", "alone"]);
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}", out.stderr());
    let expected = out.stdout();
    let jobs: Vec<_> = (0..24).map(|_| start(&node, &spec)).collect();
    wait_until(&node, "a dormant process with threads", |p| {
        p.dormant_bytes.is_some() && !p.threads.is_empty()
    });
    for (_, out, done) in jobs {
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stderr());
        assert_eq!(out.stdout(), expected);
    }
}
