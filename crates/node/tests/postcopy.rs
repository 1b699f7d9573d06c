//! Post-copy migration of a running process between nodes: it runs at the
//! destination at once, its memory follows, and it is the same process
//! there as if it had not moved; a move within a node is refused, and a
//! process whose memory's node is lost is killed, never run on zeros.

mod common;

use std::time::{Duration, Instant};

use atoll_abi::KernelId;
use atoll_migration::Mode;
use common::*;

#[test]
fn a_running_process_moved_by_post_copy_ends_as_if_it_had_not_moved() {
    // `dirty` fills 16 MiB and keeps rewriting 256 KiB of it; its last line
    // is a checksum of all 16 MiB, which a block that never arrived (or
    // arrived stale) would change. It goes to node 1 by post-copy, and
    // back to node 0 by post-copy once it has run there: that move first
    // waits until its memory is whole on node 1. Without `userfaultfd`
    // the process waits for all of it before it runs.
    for faults in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(1);
        config.runtime.postcopy_faults = faults;
        let (a, _b) = cluster_pair_of(dir.path(), config);
        moved_by_post_copy_and_back(&a);
    }
}

fn moved_by_post_copy_and_back(a: &atoll_node::Node) {
    let spec = on(job("dirty", &["16", "256", "3000"]), 0);
    let (status, reference) = run(a, &spec);
    assert_eq!(status, 0, "{}", reference.stderr());
    let expected = reference.stdout();
    assert!(expected.contains("dirty: checksum="), "{expected}");

    let (pid, out, done) = start(a, &spec);
    wait_for_lines(&out, 1);
    let there = a
        .migrate(pid, KernelId::new(1, 0), Some(Mode::PostCopy))
        .unwrap();
    assert_eq!(
        (there.to, there.mode),
        (KernelId::new(1, 0), Mode::PostCopy)
    );
    // One frame, without the memory: the process's stack and the blocks it
    // reads on resuming.
    assert_eq!(there.rounds.len(), 1, "{there:?}");
    assert!(there.rounds[0].bytes < 1 << 20, "{there:?}");
    wait_for_lines(&out, 2);
    let back = a
        .migrate(pid, KernelId::new(0, 0), Some(Mode::PostCopy))
        .unwrap();
    assert_eq!(back.mode, Mode::PostCopy, "{back:?}");
    assert_eq!(ended(a, &done, &out), 0, "{}", out.stderr());
    assert_eq!(out.stdout(), expected);
}

#[test]
fn a_post_copy_refused_by_its_destination_resumes_the_process_at_its_source() {
    // The destination makes the container from a frame without memory
    // while the process still runs, then fails just before the commit: the
    // process, frozen meanwhile, runs on at its source, whole, and can
    // still move by post-copy.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    let spec = on(job("dirty", &["16", "256", "3000"]), 0);
    let (status, reference) = run(&a, &spec);
    assert_eq!(status, 0, "{}", reference.stderr());
    let (pid, out, done) = start(&a, &spec);
    wait_for_lines(&out, 1);
    b.fail_arrivals(KernelId::new(1, 0), 1).unwrap();
    let e = a
        .migrate(pid, KernelId::new(1, 0), Some(Mode::PostCopy))
        .unwrap_err();
    assert!(e.to_string().contains("injected"), "{e:#}");
    let moved = a
        .migrate(pid, KernelId::new(1, 0), Some(Mode::PostCopy))
        .unwrap();
    assert_eq!(moved.mode, Mode::PostCopy);
    assert_eq!(ended(&a, &done, &out), 0, "{}", out.stderr());
    assert_eq!(out.stdout(), reference.stdout());
}

#[test]
fn a_process_moved_on_while_its_memory_arrives_waits_for_all_of_it() {
    // `dirty` asleep with 256 MiB goes to node 1 by post-copy and is at
    // once moved on, back to node 0: node 1's kernel, polling its
    // connections while the blocks stream in, takes the request and waits
    // for the whole memory before it copies it. The connections must be
    // read meanwhile (by the links' thread): left to the kernels, they
    // were not, and the nodes gave each other up.
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 1);
    for mode in [Mode::Copy, Mode::PostCopy] {
        let (pid, out, done) = start(&a, &on(job("dirty", &["256", "idle", "0"]), 0));
        wait_for_lines(&out, 1);
        a.migrate(pid, KernelId::new(1, 0), Some(Mode::PostCopy))
            .unwrap();
        let back = a.migrate(pid, KernelId::new(0, 0), Some(mode)).unwrap();
        assert_eq!(back.to, KernelId::new(0, 0), "{mode}");
        a.kill(pid, atoll_abi::status::SIGKILL).unwrap();
        assert_eq!(done.recv_timeout(HANG).unwrap(), 128 + 9, "{mode}");
    }
}

#[test]
fn post_copy_within_a_node_is_refused_and_the_process_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    let (pid, _out, done) = start(&a, &on(job("spin", &[]), 0));
    let e = a.migrate(pid, k(1), Some(Mode::PostCopy)).unwrap_err();
    assert!(
        e.to_string()
            .contains("post-copy moves a process between nodes"),
        "{e:#}"
    );
    let kernel = a
        .ps()
        .unwrap()
        .into_iter()
        .find(|r| r.processes.iter().any(|p| p.pid == pid))
        .map(|r| r.kernel);
    assert_eq!(kernel, Some(k(0)));
    a.kill(pid, atoll_abi::status::SIGKILL).unwrap();
    assert_eq!(done.recv_timeout(HANG).unwrap(), 128 + 9);
}

#[test]
fn a_process_whose_memory_was_still_coming_from_a_lost_node_is_killed() {
    // A `dirty` of 256 MiB, homed on node 1 and moved to node 0 whole (by
    // copy), comes back by post-copy and rewrites its memory forever; node
    // 0 stops while the 256 MiB are on their way. The process must not
    // wait forever in a fault nor run on with zeros: it is killed, and
    // node 1 goes on serving.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    let mut spec = job("dirty", &["256", "64", "0"]);
    spec.kernel = Some(KernelId::new(1, 0));
    let (pid, out, done) = start(&b, &spec);
    wait_for_lines(&out, 1);
    b.migrate(pid, KernelId::new(0, 0), Some(Mode::Copy))
        .unwrap();
    let back = b
        .migrate(pid, KernelId::new(1, 0), Some(Mode::PostCopy))
        .unwrap();
    assert_eq!(back.mode, Mode::PostCopy);
    a.shutdown();
    let t = Instant::now();
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        assert!(t.elapsed() < HANG, "the process outlived its memory's node");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(status, 128 + 9, "{}", out.stderr());
    assert!(
        out.stderr()
            .contains("killed: node 0 was lost while its memory was still coming from there"),
        "{}",
        out.stderr()
    );
    let (code, out) = run(&b, &job("exit", &["3"]));
    assert_eq!(code, 3, "{}", out.stderr());
}
