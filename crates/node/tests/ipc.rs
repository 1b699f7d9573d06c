//! Minix IPC between processes of a real node: every scenario of
//! `tests/guests/ipc.c` with the peers on the caller's kernel and on others.

mod common;

use atoll_abi::{status, KernelId};
use atoll_ipc::DomainId;
use atoll_kernel::IpcCounters;
use atoll_node::Node;
use common::*;

/// Runs `ipc SCENARIO WHERE ARGS` for both placements of the peers.
fn both_ways(node: &Node, scenario: &str, args: &[&str]) {
    for place in ["same", "other"] {
        let mut argv = vec![scenario, place];
        argv.extend(args);
        let mut spec = job("ipc", &argv);
        spec.kernel = Some(KernelId::new(0, 0));
        let (status, out) = run(node, &spec);
        assert_eq!(
            status,
            0,
            "{scenario} {place}: {}{}",
            out.stdout(),
            out.stderr()
        );
        assert_eq!(
            out.stdout(),
            format!("ok {scenario}\n"),
            "{scenario} {place}"
        );
    }
}

/// Runs `ipc ARGS` from kernel 0.0 and checks that it passed; returns one
/// IPC counter summed over the node's kernels, and all of them (for a
/// failure's message).
fn passes_counting(
    node: &Node,
    args: &[&str],
    counter: impl Fn(&IpcCounters) -> u64,
) -> (u64, String) {
    let mut spec = job("ipc", args);
    spec.kernel = Some(KernelId::new(0, 0));
    let (status, out) = run(node, &spec);
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), format!("ok {}\n", args[0]));
    let reports = node.ps().unwrap();
    let sum = reports.iter().map(|r| counter(&r.ipc)).sum();
    let all = reports.iter().map(|r| &r.ipc).collect::<Vec<_>>();
    (sum, format!("{all:?}"))
}

#[test]
fn sendrec_and_send_receive_keep_their_sequence() {
    both_ways(&node(3), "pingpong", &["3000"]);
}

#[test]
fn calls_to_another_kernel_are_answered_in_place_when_nothing_else_runs() {
    // Two kernels on two cores, one process each: every sendrec, send and
    // receive of the conversation waits for the other kernel inside the
    // call (ipc/in_place.rs), and the sequence numbers still check out.
    let (in_place, counters) =
        passes_counting(&node(2), &["pingpong", "other", "2000"], |c| c.in_place);
    assert!(in_place > 0, "no call was answered in place: {counters}");
}

#[test]
fn calls_on_one_kernel_hand_the_core_to_the_process_they_wait_for() {
    // One kernel, two processes: a sendrec, send or receive that must wait
    // for the other runs the other's slice inside the call
    // (ipc/handoff.rs), and the sequence numbers still check out.
    let (handed_off, counters) =
        passes_counting(&node(1), &["pingpong", "same", "2000"], |c| c.handed_off);
    assert!(handed_off > 0, "no call handed the core over: {counters}");
}

#[test]
fn asynchronous_letters_arrive_in_order_through_a_full_window() {
    both_ways(&node(3), "senda", &["2000"]);
}

#[test]
fn notifications_coalesce_and_sendnb_and_receivenb_never_wait() {
    both_ways(&node(3), "notify", &[]);
}

#[test]
fn cycles_of_one_two_and_three_processes_are_refused_with_elocked() {
    both_ways(&node(3), "locked", &[]);
}

#[test]
fn calls_to_and_blocked_on_a_process_that_ends_fail_with_edeadsrcdst() {
    both_ways(&node(3), "dead", &[]);
}

#[test]
fn bad_endpoints_pointers_and_binds_get_their_errors() {
    both_ways(&node(3), "errors", &[]);
}

/// A process may name itself as the owner of a grant: safecopy through its
/// own grant works as the grant says, and a grant it never made or a range
/// past its end are errors. (Found by the system-call fuzzer: the kernel
/// took a grant naming the caller for a bug, and its thread died.)
#[test]
fn safecopy_through_a_grant_of_ones_own_is_ruled_by_that_grant() {
    const SELF: i64 = atoll_abi::Pid::SELF_ABI;
    let wat = format!(
        r#"(module
  (import "atoll" "grant" (func $grant (param i64 i32 i32 i32 i32) (result i32)))
  (import "atoll" "safecopy_from" (func $from (param i64 i32 i32 i32 i32) (result i32)))
  (import "atoll" "safecopy_to" (func $to (param i64 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "0123456789abcdef")
  (func $check (param i32 i32) (if (local.get 0) (then (call $exit (local.get 1)))))
  (func (export "_start")
    ;; bytes 100..116, granted to itself to read and write; the id at 0
    (call $check (call $grant (i64.const {SELF}) (i32.const 100) (i32.const 16) (i32.const 3) (i32.const 0)) (i32.const 10))
    (call $check (call $from (i64.const {SELF}) (i32.load (i32.const 0)) (i32.const 8) (i32.const 200) (i32.const 8)) (i32.const 11))
    (call $check (i32.ne (i32.load8_u (i32.const 200)) (i32.const 0x38)) (i32.const 12))
    (call $check (i32.ne (i32.load8_u (i32.const 207)) (i32.const 0x66)) (i32.const 13))
    (call $check (call $to (i64.const {SELF}) (i32.load (i32.const 0)) (i32.const 0) (i32.const 200) (i32.const 8)) (i32.const 14))
    (call $check (i32.ne (i32.load8_u (i32.const 100)) (i32.const 0x38)) (i32.const 15))
    (call $check (i32.eqz (call $from (i64.const {SELF}) (i32.const 999) (i32.const 0) (i32.const 200) (i32.const 8))) (i32.const 16))
    (call $check (i32.eqz (call $from (i64.const {SELF}) (i32.load (i32.const 0)) (i32.const 12) (i32.const 200) (i32.const 8))) (i32.const 17))
    (call $exit (i32.const 0))))
"#
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selfgrant.wat");
    std::fs::write(&path, wat).unwrap();
    let node = node(2);
    node.domain_create("own", None).unwrap();
    let mut spec = job("hello", &[]);
    spec.program = path;
    spec.args = vec!["selfgrant".into()];
    spec.domain = Some("own".into());
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}", out.stderr());
    // The kernel is still there.
    assert_eq!(run(&node, &job("hello", &[])).0, 0);
    node.shutdown();
}

#[test]
fn grants_rule_every_copy_of_sixteen_mebibytes() {
    both_ways(&node(3), "grants", &[]);
}

#[test]
fn a_copy_to_another_kernel_reads_the_requesters_bytes_in_place() {
    // Of the scenario's copies from the requester to a process of another
    // kernel, one may be lent (ipc/copy.rs); the other is of bytes the
    // requester granted another process to write, and must be carried.
    let (lent, counters) = passes_counting(&node(3), &["grants", "other"], |c| c.lent);
    assert_eq!(lent, 1, "{counters}");
}

#[test]
fn a_copier_killed_mid_copy_leaves_what_it_lent_as_it_was() {
    // Each of 40 children on the other kernel copies a mebibyte into its
    // parent again and again until the parent kills it; most kills find a
    // copy under way, read from the child's memory by the parent's kernel.
    // The child's instance must outlive its copy: given back to the pool
    // it would read as zeros, which the parent checks for.
    let (lent, counters) = passes_counting(&node(2), &["killed-copier", "other", "40"], |c| c.lent);
    assert!(lent >= 40, "{counters}");
}

#[test]
fn ipc_across_domains_is_refused() {
    let node = node(3);
    node.domain_create("other", None).unwrap();
    both_ways(&node, "domain", &[]);
}

#[test]
fn many_pairs_across_kernels_lose_and_duplicate_no_message() {
    // 24 clients and their servers placed round robin over 4 kernels on 2
    // cores; each checks 2000 sequence numbers (ipc.c: stress).
    let (remote, counters) = passes_counting(&node(4), &["stress", "same", "24", "2000"], |c| {
        c.remote_out
    });
    assert!(remote > 0, "no message crossed kernels: {counters}");
}

#[test]
fn ps_shows_who_sends_to_and_receives_from_whom() {
    let node = node(2);
    let mut spec = job("ipc", &["hold", "other"]);
    spec.kernel = Some(KernelId::new(0, 0));
    let (pid, _out, done) = start(&node, &spec);
    // Past its sendrec to the echo child (which may show as SENDING too,
    // until the child receives), it sends to the sleeper for ever.
    let parent = wait_until(&node, "the parent sending", |p| {
        p.pid == pid && p.state.starts_with("SENDING to") && p.ipc.received == 1
    });
    assert_eq!(parent.domain, Some(DomainId::DEFAULT));
    assert_eq!((parent.ipc.sent, parent.ipc.received), (1, 1), "{parent:?}");
    let echo = wait_until(&node, "the echo child receiving", |p| {
        p.state == "RECEIVING from ANY"
    });
    assert_eq!((echo.ipc.sent, echo.ipc.received), (1, 1), "{echo:?}");
    assert_eq!(echo.kernel.index, 1);
    node.kill(pid, status::SIGKILL).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGKILL)
    );
}

#[test]
fn ending_a_domain_ends_its_processes_on_every_kernel() {
    let node = node(2);
    node.domain_create("lab", None).unwrap();
    let mut lab = job("ipc", &["sleeper", "same"]);
    lab.domain = Some("lab".into());
    let mut jobs = Vec::new();
    for k in 0..2 {
        lab.kernel = Some(KernelId::new(0, k));
        jobs.push(start(&node, &lab));
    }
    let (outsider, _, outsider_done) = start(&node, &job("ipc", &["sleeper", "same"]));
    for (pid, ..) in &jobs {
        wait_until(&node, "the lab job", |p| p.pid == *pid);
    }
    node.domain_end("lab").unwrap();
    for (_, _, done) in jobs {
        assert_eq!(
            done.recv_timeout(HANG).unwrap(),
            status::killed(status::SIGKILL)
        );
    }
    assert!(node.domains().iter().all(|d| d.name != "lab"));
    let mut gone = job("ipc", &["sleeper", "same"]);
    gone.domain = Some("lab".into());
    let err = node.run_job(&gone, Box::new(NullSink)).unwrap_err();
    assert!(format!("{err:#}").contains("no domain `lab`"), "{err:#}");
    // The default domain's process was left alone.
    wait_until(&node, "the outsider", |p| p.pid == outsider);
    node.kill(outsider, status::SIGKILL).unwrap();
    assert_eq!(
        outsider_done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGKILL)
    );
    assert!(node.domain_end("default").is_err());
}

/// Runs `ipc SCENARIO same N` on kernel 0 of a two-kernel node and moves
/// the caller and its peer between the kernels, in turn and in both modes,
/// until it ends; it must pass and each must have moved at least 4 times.
fn passes_while_both_migrate(scenario: &str, n: &str) {
    let node = node(2);
    let mut spec = job("ipc", &[scenario, "same", n]);
    spec.kernel = Some(KernelId::new(0, 0));
    let (caller, out, done) = start(&node, &spec);
    let peer = wait_until(&node, "the peer", |p| p.pid != caller && p.name == "ipc").pid;
    let modes = [atoll_migration::Mode::Handover, atoll_migration::Mode::Copy];
    let mut moves = [0, 0];
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        let i = (moves[0] + moves[1]) % 4;
        let who = [caller, peer][i % 2];
        let to = node.locate(who).map_or(0, |k| 1 - k.index);
        // The peer ends just before the caller: a failed move is fine then.
        if node
            .migrate(who, KernelId::new(0, to), Some(modes[i / 2]))
            .is_ok()
        {
            moves[i % 2] += 1;
        }
    };
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), format!("ok {scenario}\n"));
    assert!(moves[0] >= 4 && moves[1] >= 4, "only {moves:?} moves");
    eprintln!("{scenario}: {moves:?} moves of the caller and its peer");
}

#[test]
fn a_client_in_sendrec_and_a_server_in_receive_migrate_mid_conversation() {
    // Each migration catches the client in sendrec or the server in
    // receive (or between calls); every round trip must still complete,
    // once, in order (pingpong checks its sequence numbers).
    passes_while_both_migrate("pingpong", "20000");
}

#[test]
fn asynchronous_letters_keep_their_order_while_both_ends_migrate() {
    // Letters on their way when either end moves take other routes (held
    // by the kernel a receiver left, or sent from the sender's new
    // kernel): the receiver must still take every one, once, in order
    // (child-letters checks their numbers).
    passes_while_both_migrate("senda", "300000");
}

/// Runs `ipc SCENARIO same` on kernel 0, checkpoints its child for good
/// once letters flow, and restores the child on kernel 1: both must end
/// well (the scenarios check the letters' order).
fn passes_with_its_child_checkpointed_and_restored(scenario: &str) {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("child.img");
    let mut spec = job("ipc", &[scenario, "same"]);
    spec.kernel = Some(KernelId::new(0, 0));
    let (main, out, done) = start(&node, &spec);
    let child = wait_until(&node, "the child", |p| p.pid != main && p.name == "ipc").pid;
    std::thread::sleep(std::time::Duration::from_millis(300));
    node.checkpoint(child, &file, false).unwrap();
    let (restored, status, rest) = restore_and_run(&node, &file, 1);
    assert_eq!(restored, child);
    assert_eq!(status, 0, "{}{}", rest.stdout(), rest.stderr());
    assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stderr());
    assert_eq!(out.stdout(), format!("ok {scenario}\n"));
}

#[test]
fn a_sender_restored_from_a_checkpoint_goes_on_in_order() {
    // Its numbering restarts at 0, which the receiver takes as a new start
    // (for a checkpoint whose process went on sending after it, that is
    // what keeps its letters from being taken for ones already had).
    passes_with_its_child_checkpointed_and_restored("restored-sender");
}

#[test]
fn a_receiver_restored_from_a_checkpoint_picks_up_its_senders_numbering() {
    // Its sender went on numbering (its letters to the checkpoint file were
    // refused): the restored receiver must not wait for those.
    passes_with_its_child_checkpointed_and_restored("restored-receiver");
}
