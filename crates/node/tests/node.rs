//! Whole nodes running real C programs compiled to wasm32-wasi.

mod common;

use std::time::Duration;

use atoll_abi::{status, KernelId};
use atoll_migration::Mode;
use atoll_process::Preopen;
use common::*;

#[test]
fn hello_reports_its_identity_on_the_chosen_kernel() {
    let node = node(4);
    let mut spec = job("hello", &["one", "two"]);
    spec.kernel = Some(KernelId::new(0, 2));
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0);
    let text = out.stdout();
    assert!(
        text.starts_with("hello from pid 0.2:0:0 on kernel 2 of 4 (node 0)\n"),
        "{text}"
    );
    assert!(text.contains("argv[1] = one\nargv[2] = two\n"), "{text}");
}

#[test]
fn children_spread_over_sixteen_kernels_on_two_cores() {
    let node = node(16);
    let (status, out) = run(&node, &job("spawn", &["16"]));
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    let text = out.stdout();
    for i in 0..16 {
        assert!(
            text.contains(&format!("child {i} exited with status {}\n", i + 10)),
            "{text}"
        );
        assert!(
            text.contains(&format!("on kernel {i}:")),
            "child {i} not on kernel {i}: {text}"
        );
    }
    assert!(
        text.contains("spawn: all 16 children exited as expected"),
        "{text}"
    );
}

#[test]
fn a_spinning_process_does_not_starve_its_neighbour() {
    let node = node(1);
    let (spinner, _, spin_done) = start(&node, &job("spin", &[]));
    let (status, out) = run(&node, &job("hello", &[]));
    assert_eq!(status, 0);
    assert!(out.stdout().starts_with("hello from"));
    let spin = node
        .ps()
        .unwrap()
        .remove(0)
        .processes
        .into_iter()
        .find(|p| p.pid == spinner)
        .expect("spinner still runs");
    assert!(spin.cpu_ns > 0);
    node.kill(spinner, status::SIGKILL).unwrap();
    assert_eq!(spin_done.recv_timeout(HANG).unwrap(), status::killed(9));
}

/// Each kernel has its own yield flag, and a process reads its kernel's: one
/// handed over to another kernel (and back) must stop there for its
/// neighbours too, in either mode.
#[test]
fn a_spinning_process_moved_to_another_kernel_still_gives_way_there() {
    let node = node(2);
    let (spinner, _, spin_done) = start(&node, &on(job("spin", &[]), 0));
    for mode in [Mode::Handover, Mode::Copy] {
        for (to, back) in [(1, 0), (0, 1)] {
            node.migrate(spinner, k(to), Some(mode)).unwrap();
            let (status, out) = run(&node, &on(job("hello", &[]), to));
            assert_eq!(status, 0, "{mode:?} to {to}: {}", out.stderr());
            assert!(out.stdout().contains(&format!("on kernel {to} of 2")));
            // The kernel it left has nothing to preempt any more.
            let (status, _) = run(&node, &on(job("hello", &[]), back));
            assert_eq!(status, 0);
        }
    }
    node.kill(spinner, status::SIGKILL).unwrap();
    assert_eq!(spin_done.recv_timeout(HANG).unwrap(), status::killed(9));
}

#[test]
fn a_trap_is_reported_and_contained() {
    let node = node(1);
    let (spinner, _, spin_done) = start(&node, &job("spin", &[]));
    for kind in ["div0", "unreachable", "oob", "stack"] {
        let (status, out) = run(&node, &job("trap", &[kind]));
        assert_eq!(status, status::TRAPPED, "{kind}");
        let err = out.stderr();
        assert!(err.contains("(trap) trapped: wasm trap:"), "{kind}: {err}");
        assert!(
            out.stdout().contains(&format!("about to trap: {kind}")),
            "{kind}"
        );
    }
    let (status, out) = run(&node, &job("trap", &["div0"]));
    assert_eq!(status, status::TRAPPED);
    assert!(
        out.stderr().contains("integer divide by zero"),
        "{}",
        out.stderr()
    );
    // The kernel and its other process carry on.
    assert!(node.ps().unwrap()[0]
        .processes
        .iter()
        .any(|p| p.pid == spinner));
    node.kill(spinner, 15).unwrap();
    assert_eq!(spin_done.recv_timeout(HANG).unwrap(), status::killed(15));
}

#[test]
fn bad_pointers_in_system_calls_get_efault() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = job("efault", &[]);
    spec.preopens = vec![Preopen {
        host: dir.path().into(),
        guest: "/tmp".into(),
    }];
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}", out.stdout());
    assert!(
        out.stdout().contains("efault: 0 failures"),
        "{}",
        out.stdout()
    );
    assert!(!out.stdout().contains("FAIL"));
}

#[test]
fn a_sleeping_process_holds_no_thread_and_can_be_killed() {
    let node = node(1);
    let (sleeper, _, done) = start(&node, &job("sleep", &["60000"]));
    wait_until(&node, "the sleeper asleep", |p| {
        p.pid == sleeper && p.state == "sleeping"
    });
    // While it sleeps, the kernel runs others.
    let (status, _) = run(&node, &job("hello", &[]));
    assert_eq!(status, 0);
    let ps = node.ps().unwrap().remove(0);
    let p = ps.processes.iter().find(|p| p.pid == sleeper).unwrap();
    assert_eq!(p.state, "sleeping");
    node.kill(sleeper, 9).unwrap();
    assert_eq!(done.recv_timeout(HANG).unwrap(), 137);
    assert!(node
        .kill(sleeper, 9)
        .unwrap_err()
        .to_string()
        .contains("no such process"));
}

#[test]
fn sleeping_takes_as_long_as_asked() {
    let node = node(2);
    let (status, out) = run(&node, &job("sleep", &["30"]));
    assert_eq!(status, 0);
    assert_eq!(out.stdout(), "slept at least 30ms: yes\n");
}

#[test]
fn files_under_a_preopened_directory() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = job("files", &["/data"]);
    spec.preopens = vec![Preopen {
        host: dir.path().into(),
        guest: "/data".into(),
    }];
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}\n{}", out.stdout(), out.stderr());
}

#[test]
fn args_and_environment_reach_the_program() {
    let node = node(1);
    let mut spec = job("env", &["a b", "c"]);
    spec.env = vec!["B=2".into(), "A=1".into()];
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0);
    let text = out.stdout();
    assert!(
        text.contains("a b") && text.contains("A=1") && text.contains("B=2"),
        "{text}"
    );
}

#[test]
fn exit_status_is_the_programs() {
    let node = node(1);
    assert_eq!(run(&node, &job("exit", &["42"])).0, 42);
    assert_eq!(run(&node, &job("true", &[])).0, 0);
}

#[test]
fn a_parent_moved_while_its_children_end_hears_from_every_child() {
    let node = node(4);
    // Enough children that the job outlasts a few moves: with prepared
    // loops near native speed, 12 children ended before a second move.
    let mut spec = job("spawn", &["100"]);
    spec.kernel = Some(KernelId::new(0, 0));
    let (pid, out, done) = start(&node, &spec);
    let mut moves = 0;
    for i in 1.. {
        if let Ok(status) = done.try_recv() {
            assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
            break;
        }
        // Exit statuses sent while the parent is in flight must follow it.
        if let Ok(report) = node.migrate(pid, KernelId::new(0, (i % 4) as u16), None) {
            moves += usize::from(report.from != report.to);
        }
        // Give it slices between moves: a process moved nonstop never runs.
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(moves >= 2, "only {moves} moves happened");
    assert!(
        out.stdout()
            .contains("spawn: all 100 children exited as expected"),
        "{}",
        out.stdout()
    );
}

#[test]
fn a_process_moves_itself_to_every_kernel_with_kmigrate_to() {
    let node = node(4);
    let mut spec = job("hop", &["25"]);
    spec.kernel = Some(KernelId::new(0, 0));
    let (status, out) = run(&node, &spec);
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    let text = out.stdout();
    assert_eq!(text.lines().count(), 101, "{text}");
    assert!(text.contains("hop 24.3: on kernel 0\n"), "{text}");
    // The running sum of kernels visited, kept in memory across the moves.
    assert!(text.ends_with("\nhop: ok 1371639310\n"), "{text}");
}
