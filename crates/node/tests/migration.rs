//! Live migration of real programs between the kernels of a node, in both
//! transfer modes: mid-run, under IPC load, with open files, several at
//! once, failing destinations, exits mid-migration, and checkpoints.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use atoll_abi::{status, KernelId, Pid};
use atoll_migration::Mode;
use atoll_node::{JobSpec, Node};
use common::*;

const MODES: [Mode; 2] = [Mode::Handover, Mode::Copy];

/// Runs a job to completion for the output a migrated run must match.
fn reference(node: &Node, spec: &JobSpec) -> String {
    let (status, out) = run(node, spec);
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    out.stdout()
}

/// A migration that failed only because the process had just ended.
fn ended(e: &anyhow::Error) -> bool {
    let e = e.to_string();
    e.contains("no process") || e.contains("ended during the migration")
}

/// Migrates `pid` around `kernels` kernels, `mode`s in turn, until it ends or
/// `limit` migrations succeeded; returns the successful ones.
fn keep_migrating(
    node: &Node,
    pid: Pid,
    done: &std::sync::mpsc::Receiver<i32>,
    kernels: u16,
    modes: &[Mode],
    limit: usize,
) -> (usize, Option<i32>) {
    let mut moved = 0;
    for i in 1.. {
        if let Ok(status) = done.try_recv() {
            return (moved, Some(status));
        }
        if moved == limit {
            return (moved, None);
        }
        let to = k((i % kernels as usize) as u16);
        match node.migrate(pid, to, Some(modes[i % modes.len()])) {
            Ok(report) => {
                moved += usize::from(report.from != report.to);
                // Committed at the home before it was reported (unless it
                // has just ended).
                if let Ok(at) = node.locate(pid) {
                    assert_eq!(at, to);
                }
            }
            Err(e) => assert!(ended(&e), "{e:#}"),
        }
        // Slices between migrations: a process moved nonstop never runs.
        std::thread::sleep(Duration::from_micros(500));
    }
    unreachable!()
}

#[test]
fn a_compute_program_migrated_100_times_mid_run_prints_what_an_unmigrated_run_prints() {
    let node = node(2);
    // About 3 s unmigrated: enough for 100 migrations in copy mode, where
    // each one waits for a slice of pre-copy.
    let spec = on(job("progress", &["4000", "400000"]), 0);
    let expected = reference(&node, &spec);
    for mode in MODES {
        let (pid, out, done) = start(&node, &spec);
        wait_for_lines(&out, 1);
        let (moved, ended) = keep_migrating(&node, pid, &done, 2, &[mode], 100);
        assert_eq!(ended, None, "{mode}: it ended after {moved} migrations");
        assert_eq!(moved, 100);
        assert!(
            !out.stdout().contains("done"),
            "{mode}: not mid-run any more"
        );
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0);
        assert_eq!(out.stdout(), expected, "{mode}");
    }
}

#[test]
fn a_javascript_engine_migrated_mid_script_prints_what_native_quickjs_prints() {
    // QuickJS (build/wasm/qjs.wasm, 800 KiB): an interpreter's deep,
    // call-heavy frames and a heap the garbage collector keeps churning,
    // captured mid-script; its lines must be those of QuickJS built natively.
    let native = std::process::Command::new(support::built("native/qjs"))
        .arg(support::repo().join("bench/qjs/workload.js"))
        .arg("6")
        .output()
        .unwrap();
    assert!(native.status.success(), "{native:?}");
    let node = node(2);
    let mut spec = on(job("qjs", &["/js/workload.js", "6"]), 0);
    spec.preopens = vec![
        format!("{}::/js", support::repo().join("bench/qjs").display())
            .parse()
            .unwrap(),
    ];
    for mode in MODES {
        let (pid, out, done) = start(&node, &spec);
        wait_for_lines(&out, 1);
        let (moved, status) = keep_migrating(&node, pid, &done, 2, &[mode], usize::MAX);
        assert_eq!(status, Some(0), "{mode}: {}", out.stderr());
        assert!(moved >= 3, "{mode}: only {moved} migrations");
        assert_eq!(out.stdout().as_bytes(), native.stdout, "{mode}");
    }
}

#[test]
fn pre_copy_misses_no_block_a_program_writes_while_it_is_copied() {
    let mut config = config(2);
    // Small enough that the 1 MiB working set takes pre-copy rounds.
    config.migration.policy.small_bytes = 64 << 10;
    let node = Node::start(config).unwrap();
    let spec = on(job("dirty", &["8", "1024", "6000"]), 0);
    let expected = reference(&node, &spec);
    assert!(expected.contains("dirty: checksum="), "{expected}");
    let (pid, out, done) = start(&node, &spec);
    wait_for_lines(&out, 1);
    let mut precopied = 0;
    let mut i = 0;
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        i += 1;
        match node.migrate(pid, k(i % 2), Some(Mode::Copy)) {
            Ok(report) => {
                precopied += usize::from(report.precopy_rounds() > 0);
                let last = report.rounds.last().expect("a stop-and-copy");
                // The stop-and-copy sends what is dirty, not all 8 MiB.
                if report.precopy_rounds() > 0 {
                    assert!(last.bytes < 4 << 20, "{report:?}");
                }
            }
            Err(e) => assert!(ended(&e), "{e:#}"),
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(status, 0, "{}", out.stderr());
    assert!(precopied >= 3, "only {precopied} migrations used pre-copy");
    assert_eq!(out.stdout(), expected);
}

#[test]
fn grants_and_pending_notifications_move_with_their_processes() {
    // ipc.c `moved`: the parent grants, notifies its moving child three
    // times and moves twice itself; the child finds one notification and
    // copies through the grant. Both modes, as the node's default.
    for mode in MODES {
        let node = node_in(mode, 3);
        for place in ["same", "other"] {
            let (status, out) = run(&node, &on(job("ipc", &["moved", place]), 0));
            assert_eq!(status, 0, "{mode} {place}: {}", out.stderr());
            // Every kmigrate_to in it checks that it returned 0.
            assert_eq!(out.stdout(), "ok moved\n");
        }
    }
}

#[test]
fn a_sleeping_process_migrates_and_wakes_on_time() {
    let node = node(2);
    for mode in MODES {
        let (pid, out, done) = start(&node, &on(job("sleep", &["300"]), 0));
        wait_until_state(&node, pid, "sleeping");
        let report = node.migrate(pid, k(1), Some(mode)).unwrap();
        assert_eq!(report.to, k(1));
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stderr());
        assert_eq!(out.stdout(), "slept at least 300ms: yes\n");
    }
}

/// Waits until `pid` is blocked in a call whose description starts with `state`.
fn wait_until_state(node: &Node, pid: Pid, state: &str) {
    wait_until(node, state, |p| {
        p.pid == pid && p.state.to_lowercase().starts_with(state)
    });
}

#[test]
fn migration_under_ipc_load_keeps_every_sequence_number() {
    // 12 client/server pairs over 4 kernels check their sequence numbers
    // (ipc.c: stress) while the test moves them around, in both modes.
    let node = node(4);
    let spec = on(job("ipc", &["stress", "same", "12", "3000"]), 0);
    let (main, out, done) = start(&node, &spec);
    let mut moved = 0;
    let mut i = 0usize;
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        let peers: Vec<Pid> = node
            .ps()
            .unwrap()
            .into_iter()
            .flat_map(|r| r.processes)
            .map(|p| p.pid)
            .filter(|&p| p != main)
            .collect();
        for pid in peers.iter().skip(i % 3).step_by(3) {
            i += 1;
            let to = k((i % 4) as u16);
            match node.migrate(*pid, to, Some(MODES[i % 2])) {
                Ok(r) => moved += usize::from(r.from != r.to),
                Err(e) => assert!(ended(&e) || e.to_string().contains("runs on"), "{e:#}"),
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), "ok stress\n");
    assert!(moved >= 20, "only {moved} migrations");
    eprintln!("{moved} migrations under load");
}

#[test]
fn a_pair_that_hands_the_core_over_is_moved_without_losing_a_message() {
    // One client/server pair (ipc.c: stress) moved together from kernel to
    // kernel, in both modes: between moves they share a kernel, where each
    // call that waits for the other runs it inside the call
    // (ipc/handoff.rs), and every sequence number still checks out.
    let node = node(2);
    let spec = on(job("ipc", &["stress", "same", "1", "100000"]), 0);
    let (main, out, done) = start(&node, &spec);
    let (mut moved, mut round) = (0, 0usize);
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        round += 1;
        let reports = node.ps().unwrap();
        let pair = reports
            .iter()
            .flat_map(|r| &r.processes)
            .filter(|p| p.pid != main);
        for pid in pair.map(|p| p.pid).collect::<Vec<_>>() {
            match node.migrate(pid, k((round % 2) as u16), Some(MODES[round % 2])) {
                Ok(r) => moved += usize::from(r.from != r.to),
                Err(e) => assert!(ended(&e) || e.to_string().contains("runs on"), "{e:#}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), "ok stress\n");
    let handed_off: u64 = node.ps().unwrap().iter().map(|r| r.ipc.handed_off).sum();
    assert!(moved >= 4, "only {moved} migrations");
    assert!(handed_off > 0, "no call handed the core over");
    eprintln!("{moved} migrations, {handed_off} calls handed the core over");
}

#[test]
fn a_copier_moved_in_the_middle_of_its_copies_leaves_them_intact() {
    // A child copies a mebibyte of its memory into its parent on another
    // kernel, again and again, while the test moves it between the three
    // kernels in both modes: its copies in flight are read from where the
    // child was (kept alive for them once it has left, in copy mode), and
    // the parent checks every few milliseconds that its block is whole.
    let node = node(3);
    let spec = on(job("ipc", &["moved-copier", "other", "1500"]), 0);
    let (main, out, done) = start(&node, &spec);
    wait_for_lines(&out, 1);
    let mut moved = 0;
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        let copier = node
            .ps()
            .unwrap()
            .into_iter()
            .flat_map(|r| r.processes)
            .map(|p| p.pid)
            .find(|&p| p != main);
        if let Some(pid) = copier {
            match node.migrate(pid, k((moved % 3) as u16), Some(MODES[moved % 2])) {
                Ok(_) => moved += 1,
                Err(e) => assert!(ended(&e) || e.to_string().contains("runs on"), "{e:#}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), "copying\nok moved-copier\n");
    assert!(moved >= 20, "only {moved} migrations");
}

#[test]
fn a_failed_destination_rolls_back_and_the_process_goes_on_at_its_source() {
    let node = node(2);
    let spec = on(job("progress", &["40", "400000"]), 0);
    let expected = reference(&node, &spec);
    for mode in MODES {
        let (pid, out, done) = start(&node, &spec);
        wait_for_lines(&out, 3);
        node.fail_arrivals(k(1), 1).unwrap();
        let e = node.migrate(pid, k(1), Some(mode)).unwrap_err();
        assert!(e.to_string().contains("injected fault"), "{mode}: {e:#}");
        assert_eq!(node.locate(pid).unwrap(), k(0), "{mode}");
        let before = out.stdout().lines().count();
        wait_for_lines(&out, before + 2);
        // The fault is spent: the next migration goes through.
        let report = node.migrate(pid, k(1), Some(mode)).unwrap();
        assert_eq!((report.from, report.to, report.mode), (k(0), k(1), mode));
        assert_eq!(node.locate(pid).unwrap(), k(1));
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0);
        assert_eq!(out.stdout(), expected, "{mode}");
    }
}

#[test]
fn a_process_that_exits_while_being_migrated_ends_once_with_its_status() {
    // Round 0 of 256 MiB goes out in 64 pieces, one between two slices and
    // each after the destination applied the last (over a second on the
    // benchmark machine); the process ends a few hundred milliseconds after
    // it said it was ready, so while it is being migrated.
    let node = node(2);
    let spec = on(job("dirty", &["256", "64", "20000"]), 0);
    let expected = reference(&node, &spec);
    for _ in 0..3 {
        let (pid, out, done) = start(&node, &spec);
        wait_for_lines(&out, 1);
        // Usually the process ends first and the migration fails; on a slow
        // or loaded machine it may outlive the migration. Either way it
        // must end once, with its status and its output.
        match node.migrate(pid, k(1), Some(Mode::Copy)) {
            Err(e) => assert!(
                e.to_string()
                    .contains("ended during the migration (status 0)"),
                "{e:#}"
            ),
            Ok(report) => eprintln!("the process outlived its migration: {report:?}"),
        }
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stderr());
        assert!(
            done.recv_timeout(Duration::from_millis(20)).is_err(),
            "ended twice"
        );
        assert_eq!(out.stdout(), expected);
        // Its home hears of its end from the kernel it ended on (kernel 1
        // when it outlived its migration): by a message, soon.
        let t = std::time::Instant::now();
        while node.locate(pid).is_ok() && t.elapsed() < HANG {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(node.locate(pid).is_err(), "{pid} still exists");
    }
    // Nothing is left behind on either kernel; the destination dropped its
    // partial container, and the node still migrates.
    let left: usize = node.ps().unwrap().iter().map(|r| r.processes.len()).sum();
    assert_eq!(left, 0);
    let (pid, out, done) = start(&node, &on(job("progress", &["20", "4000000"]), 0));
    wait_for_lines(&out, 1);
    node.migrate(pid, k(1), Some(Mode::Handover)).unwrap();
    assert_eq!(done.recv_timeout(HANG).unwrap(), 0);
}

#[test]
fn a_move_asked_for_during_another_is_made_where_that_one_ends() {
    // `asks` keeps rewriting its 64 MiB while an operator's copy of it is
    // under way (its pre-copy cannot converge), then asks to go to kernel
    // 2: its call waits for the operator's move and starts its own from
    // kernel 1. (The balancer raced `kmigrate_to` this way in a cluster,
    // and the process was told EAGAIN.)
    let node = node(3);
    let (pid, out, done) = start(&node, &on(job("asks", &["512", "50", "2"]), 0));
    wait_for_lines(&out, 1);
    let report = node.migrate(pid, k(1), Some(Mode::Copy)).unwrap();
    assert_eq!(report.to, k(1));
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        0,
        "{}{}",
        out.stdout(),
        out.stderr()
    );
    assert_eq!(out.stdout(), "ready\nkmigrate_to(2) = 0, on 0.2\n");
}

#[test]
fn a_process_writing_an_open_file_keeps_writing_it_across_migrations() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = on(job("logger", &["/data/reference", "2000", "200000"]), 0);
    spec.preopens = vec![format!("{}::/data", dir.path().display()).parse().unwrap()];
    reference(&node, &spec);
    spec.args[1] = "/data/moved".into();
    let (pid, out, done) = start(&node, &spec);
    let (moved, status) = keep_migrating(&node, pid, &done, 2, &MODES, usize::MAX);
    let status = status.unwrap();
    assert_eq!(status, 0, "{}", out.stderr());
    assert_eq!(out.stdout(), "logger: wrote 2000 lines\n");
    assert!(moved >= 10, "only {moved} migrations");
    let reference = std::fs::read_to_string(dir.path().join("reference")).unwrap();
    let moved_file = std::fs::read_to_string(dir.path().join("moved")).unwrap();
    assert_eq!(reference.lines().count(), 2000);
    assert_eq!(moved_file, reference);
}

#[test]
fn several_migrations_at_once_between_disjoint_pairs_and_into_one_kernel() {
    let node = Arc::new(node(4));
    let spec = job("progress", &["4000", "400000"]);
    let expected = reference(&node, &on(spec.clone(), 0));
    let jobs: Vec<_> = (0..4).map(|i| start(&node, &on(spec.clone(), i))).collect();
    for (_, out, _) in &jobs {
        wait_for_lines(out, 1);
    }
    let pids: Vec<Pid> = jobs.iter().map(|j| j.0).collect();
    // Runs one migration per (pid, destination, mode) at the same moment.
    let at_once = |moves: Vec<(Pid, u16, Mode)>| {
        let barrier = Arc::new(Barrier::new(moves.len()));
        let threads: Vec<_> = moves
            .into_iter()
            .map(|(pid, to, mode)| {
                let (node, barrier) = (node.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    node.migrate(pid, k(to), Some(mode))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap().map(|r| r.to))
            .collect::<Vec<_>>()
    };
    for round in 0..6 {
        let mode = MODES[round % 2];
        // Disjoint pairs: 0 <-> 1 and 2 <-> 3 swap their processes.
        let swaps = (0..4)
            .map(|i| (pids[i], (i as u16) ^ 1 ^ (round as u16 % 2), mode))
            .collect();
        for r in at_once(swaps) {
            r.unwrap();
        }
        // Many to one: all four into kernel `round % 4`.
        let into = (round % 4) as u16;
        let all = pids
            .iter()
            .map(|&p| (p, into, MODES[(round + 1) % 2]))
            .collect();
        for r in at_once(all) {
            assert_eq!(r.unwrap(), k(into));
        }
    }
    for (pid, out, done) in jobs {
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{pid}");
        assert_eq!(out.stdout(), expected, "{pid}");
    }
}

#[test]
fn a_checkpoint_file_restores_the_process_where_it_stopped() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("progress.img");
    let spec = on(job("progress", &["40", "400000"]), 0);
    let expected = reference(&node, &spec);

    // Checkpointed and left running: the file cannot be restored while
    // the process lives (its PID is taken), and the process goes on.
    let (pid, out, done) = start(&node, &spec);
    wait_for_lines(&out, 2);
    node.checkpoint(pid, &file, true).unwrap();
    let e = node
        .restore_job(&file, None, Some(KernelId::new(0, 1)), Box::new(NullSink))
        .unwrap_err();
    assert!(format!("{e:#}").contains("is taken"), "{e:#}");
    assert_eq!(done.recv_timeout(HANG).unwrap(), 0);
    assert_eq!(out.stdout(), expected);

    // Checkpointed for good: the job ends with 128+SIGSTOP, and the restored
    // process prints the rest, on another kernel.
    let (pid, out, done) = start(&node, &spec);
    wait_for_lines(&out, 5);
    let size = node.checkpoint(pid, &file, false).unwrap();
    assert!(size > 0);
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGSTOP)
    );
    assert!(out.stderr().contains("checkpointed"), "{}", out.stderr());
    let first = out.stdout();
    assert!(expected.starts_with(&first) && first.len() < expected.len());
    let (restored, status, rest) = restore_and_run(&node, &file, 1);
    assert_eq!(restored, pid, "the PID does not change");
    assert_eq!(status, 0, "{}", rest.stderr());
    assert_eq!(first + &rest.stdout(), expected);
}

#[test]
fn a_checkpoint_keeps_an_open_file_that_has_no_name() {
    // The file cannot be reopened by its path after the restore: its
    // bytes travel in the checkpoint, and come back nameless.
    let node = node(2);
    let data = tempfile::tempdir().unwrap();
    let images = tempfile::tempdir().unwrap();
    let file = images.path().join("unlinked.img");
    let mut spec = on(job("unlinked", &["/data", "wait"]), 0);
    spec.preopens = vec![atoll_process::Preopen {
        host: data.path().to_path_buf(),
        guest: "/data".into(),
    }];
    let (pid, out, done) = start(&node, &spec);
    wait_for_lines(&out, 3);
    node.checkpoint(pid, &file, false).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        status::killed(status::SIGSTOP)
    );
    assert_eq!(
        out.stdout(),
        "unlinked: tmp is gone, wrote 5 bytes\n\
         unlinked: tmp reads \"hello\"\n\
         unlinked: waiting for /data/go\n"
    );
    std::fs::write(data.path().join("go"), "").unwrap();
    let (restored, status, rest) = restore_and_run(&node, &file, 1);
    assert_eq!(restored, pid);
    assert_eq!(status, 0, "{}{}", rest.stdout(), rest.stderr());
    assert_eq!(
        rest.stdout(),
        "unlinked: went on, tmp reads \"hello world\"\n\
         unlinked: old reads \"old\" after new took its name\n\
         unlinked: ok\n"
    );
    let left: Vec<_> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["go"]);
}

#[test]
fn damaged_foreign_and_mismatched_checkpoints_are_refused_clearly() {
    let node = node(1);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.img");
    let (pid, out, done) = start(&node, &job("progress", &["40", "400000"]));
    wait_for_lines(&out, 1);
    node.checkpoint(pid, &file, false).unwrap();
    done.recv_timeout(HANG).unwrap();
    let restore = |path: &std::path::Path, program: Option<&std::path::Path>| {
        format!(
            "{:#}",
            node.restore_job(path, program, None, Box::new(NullSink))
                .unwrap_err()
        )
    };
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let damaged = dir.path().join("damaged.img");
    std::fs::write(&damaged, &bytes).unwrap();
    assert!(restore(&damaged, None).contains("checksum"));
    let foreign = dir.path().join("foreign.img");
    std::fs::write(&foreign, b"\x7fELF not an image").unwrap();
    assert!(restore(&foreign, None).contains("not an atoll process image"));
    let truncated = dir.path().join("truncated.img");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert!(restore(&truncated, None).contains("truncated"));
    let other = support::guest("hello");
    assert!(restore(&file, Some(&other)).contains("was not taken from"));
    // The node is unharmed: the good file still restores.
    let (tx, rx) = std::sync::mpsc::channel();
    node.restore_job(
        &file,
        None,
        None,
        Box::new(Sink::new(Output::default(), tx)),
    )
    .unwrap();
    assert_eq!(rx.recv_timeout(HANG).unwrap(), 0);
}
