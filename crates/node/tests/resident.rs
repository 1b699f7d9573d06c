//! What a node keeps resident after a process has moved through it. Alone
//! in its test binary: it reads the resident memory of the whole process,
//! which the other tests' nodes would share if they ran beside it (in
//! `migration.rs` it once read 137 MiB of another test's growth).

mod common;

use atoll_abi::status;
use atoll_migration::Mode;
use common::*;

/// Resident bytes of this process (the node's kernels run in it).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_kernel_gives_back_the_memory_of_a_process_that_moved_away() {
    // A process of 64 MiB copied back and forth: each kernel it leaves
    // must let go of those 64 MiB, not keep them until some later batch of
    // clean-ups (the pool's decommits were once batched by 64, and a node
    // held the memory of every process that had passed through).
    const MIB: u64 = 64;
    let node = node(2);
    let spec = on(job("dirty", &[&MIB.to_string(), "idle", "0"]), 0);
    let (pid, out, done) = start(&node, &spec);
    wait_for_lines(&out, 1);
    node.migrate(pid, k(1), Some(Mode::Copy)).unwrap();
    node.migrate(pid, k(0), Some(Mode::Copy)).unwrap();
    let before = resident_bytes();
    for i in 0..8 {
        node.migrate(pid, k((i + 1) % 2), Some(Mode::Copy)).unwrap();
    }
    let grown = resident_bytes().saturating_sub(before);
    assert!(
        grown < MIB << 20,
        "{} MiB more resident after 8 moves of a {MIB} MiB process",
        grown >> 20
    );
    node.kill(pid, status::SIGKILL).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGKILL)
    );
}
