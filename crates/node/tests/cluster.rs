//! Two nodes of one cluster in one process: what crosses between them, and
//! that both stop cleanly (nothing they share keeps the other alive).

mod common;

use std::sync::mpsc;

use atoll_abi::KernelId;
use atoll_migration::Mode;
use atoll_noc::net::identity::{self, Identity};
use atoll_noc::net::LinkConfig;
use atoll_node::{Node, NodeConfig};
use common::*;

fn cluster_node(dir: &std::path::Path, name: &str, join: Option<std::net::SocketAddr>) -> Node {
    identity::issue(dir, name).unwrap();
    let mut config = NodeConfig::new(Some(support::cache_dir()));
    config.kernels = 1;
    config.cluster = Some(LinkConfig {
        identity: Identity::load(dir, name).unwrap(),
        node: None,
        kernels: 1,
        listen: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        join,
    });
    Node::start(config).expect("node starts")
}

#[test]
fn two_nodes_share_domains_move_a_process_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    identity::init_ca(dir.path()).unwrap();
    let a = cluster_node(dir.path(), "n0", None);
    let b = cluster_node(dir.path(), "n1", Some(a.members()[0].addr));
    assert_eq!((a.id(), b.id()), (0, 1));
    a.domain_create("lab").unwrap();
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
