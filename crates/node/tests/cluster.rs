//! Two nodes of one cluster in one process: what crosses between them, and
//! that both stop cleanly (nothing they share keeps the other alive).

mod common;

use std::sync::mpsc;

use atoll_abi::KernelId;
use atoll_migration::Mode;
use common::*;

#[test]
fn two_nodes_share_domains_move_a_process_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    assert_eq!((a.id(), b.id()), (0, 1));
    a.domain_create("lab", None).unwrap();
    let t = std::time::Instant::now();
    while !b.domains().iter().any(|d| d.name == "lab") {
        assert!(t.elapsed() < HANG, "the domain never reached node 1");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut spin = job("spin", &[]);
    spin.domain = Some("lab".into());
    let (pid, _, ended) = start(&a, &spin);
    let r = b.migrate(pid, KernelId::new(1, 0), None).unwrap();
    assert_eq!((r.to, r.mode), (KernelId::new(1, 0), Mode::Copy));
    b.domain_end("lab").unwrap();
    assert_eq!(ended.recv_timeout(HANG).unwrap(), 128 + 9);
    // Each stops, the other still running: no hang.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        b.shutdown();
        a.shutdown();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(HANG).expect("the nodes stop");
}

#[test]
fn a_job_whose_first_process_was_homed_on_a_lost_node_ends_with_137() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    let mut spin = job("spin", &[]);
    spin.kernel = Some(KernelId::new(1, 0));
    let (pid, out, ended) = start(&a, &spin);
    assert_eq!(pid.home.node, 1);
    wait_until(&a, "spin on node 1", |p| p.pid == pid);
    b.shutdown();
    // Its home is gone with it: this node's console ends the job.
    assert_eq!(ended.recv_timeout(HANG).unwrap(), 128 + 9);
    assert!(
        out.stderr().contains("its node 1 was lost"),
        "{}",
        out.stderr()
    );
}

#[test]
fn a_domains_limit_made_on_one_node_holds_for_its_processes_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    a.domain_create("lab", Some(3)).unwrap();
    let t = std::time::Instant::now();
    while !b.domains().iter().any(|d| d.name == "lab") {
        assert!(t.elapsed() < HANG, "the domain never reached node 1");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Started from node 1, on its kernel: the count is kept on node 0.
    let mut bomb = job("bomb", &["500"]);
    bomb.domain = Some("lab".into());
    let (code, out) = run(&b, &bomb);
    assert_eq!(code, 0, "{}", out.stderr());
    assert!(out.stdout().contains("bomb: made 3;"), "{}", out.stdout());
    b.shutdown();
    a.shutdown();
}
