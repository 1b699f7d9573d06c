//! `atoll_fork`: a child that is a copy of its parent returns 0 from the
//! same call, on the kernel asked for, on this node or another; the parent's
//! memory stays its own. `atoll_exec`: a new program in the same process,
//! on the kernel asked for.

mod common;

use atoll_migration::Mode;
use atoll_node::JobSpec;
use common::*;

/// The lines fork.wasm prints when every check held, the child on `at`.
fn forked(at: &str) -> String {
    format!(
        "child: a copy of its parent: yes\nchild: on {at}\n\
         grandchild: sees its parent's changes: yes\n\
         parent: its own memory unchanged: yes\nparent: child ended with 47\n"
    )
}

#[test]
fn a_forked_child_starts_on_the_kernel_asked_in_either_mode() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 3);
        for (arg, at) in [("0", "node 0 kernel 0"), ("2", "node 0 kernel 2")] {
            let (code, out) = run(&node, &job("fork", &[arg]));
            assert_eq!(code, 0, "{mode:?} {arg}: {}{}", out.stdout(), out.stderr());
            assert_eq!(out.stdout(), forked(at), "{mode:?} {arg}");
        }
        let (code, out) = run(&node, &job("fork", &["any"]));
        assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
        assert!(out.stdout().ends_with("parent: child ended with 47\n"));
    }
}

#[test]
fn a_child_forked_where_no_pid_was_made_yet_still_knows_it_is_the_parent() {
    // Started on kernel 1, the child is made there and moves to kernel 0,
    // which makes the grandchild's PID: the first of that kernel, whose
    // slot and generation are 0 but whose value must not be fork's 0.
    let node = node(2);
    let mut spec = job("fork", &["0"]);
    spec.kernel = Some(atoll_abi::KernelId::new(0, 1));
    let (code, out) = run(&node, &spec);
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), forked("node 0 kernel 0"));
}

/// `unlinked ARGS` with `data` preopened as `/data`.
fn unlinked(data: &std::path::Path, args: &[&str]) -> JobSpec {
    let mut spec = job("unlinked", args);
    spec.preopens = vec![atoll_process::Preopen {
        host: data.to_path_buf(),
        guest: "/data".into(),
    }];
    spec
}

/// What `unlinked /data fork|move K [BACK]` prints when every step held,
/// with `moved` the line of the child or of the move, and `back` that of
/// the move back if any.
fn unlinked_output(moved: &str, back: &str) -> String {
    format!(
        "unlinked: tmp is gone, wrote 5 bytes\n\
         unlinked: tmp reads \"hello\"\n\
         {moved}\
         unlinked: tmp reads \"hello world\"\n\
         {back}\
         unlinked: old reads \"old\" after new took its name\n\
         unlinked: ok\n"
    )
}

const FORKED_CHILD: &str = "child: tmp reads \"hello\", wrote 6 bytes\n";

#[test]
fn a_forked_or_execed_process_keeps_an_unlinked_file_on_any_kernel_of_the_node() {
    // The parent's host handles go with the child to its kernel, the
    // container itself (hand-over) or duplicates beside its copy: the file
    // has no name left to reopen it by. So do a process's own on a move.
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 2);
        for (args, moved) in [
            (["fork", "0"], FORKED_CHILD),
            (["fork", "1"], FORKED_CHILD),
            (["move", "1"], "unlinked: moved, wrote 6 bytes\n"),
        ] {
            let how = format!("{mode:?}: {}", args.join(" "));
            let data = tempfile::tempdir().unwrap();
            let args = [&["/data"][..], &args].concat();
            let mut spec = unlinked(data.path(), &args);
            spec.kernel = Some(atoll_abi::KernelId::new(0, 0));
            let (code, out) = run(&node, &spec);
            assert_eq!(code, 0, "{how}: {}{}", out.stdout(), out.stderr());
            assert_eq!(out.stdout(), unlinked_output(moved, ""), "{how}");
            assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 0);
        }
    }
    // An exec keeps the descriptors, and the handles behind them.
    let node = node_in(Mode::Handover, 2);
    let data = tempfile::tempdir().unwrap();
    let (code, out) = run(&node, &unlinked(data.path(), &["/data", "exec"]));
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(
        out.stdout(),
        "unlinked: tmp is gone, wrote 5 bytes\n\
         unlinked: tmp reads \"hello\"\n\
         after exec: tmp reads \"hello\"\n"
    );
}

/// Host files of `dir` this test process (and so its nodes) has open.
fn open_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[test]
fn an_unlinked_file_is_used_from_another_node_and_let_go_after() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    // The process moves itself to node 1, or forks a child there, once the
    // file has no name: node 0, which the process leaves, holds the file
    // open for it and serves it from there, also once it comes back to
    // node 0 (to the kernel that holds it, or to another).
    // Started on node 1, it opens the file through node 0, which holds it
    // from the open on, also once the process comes to node 0.
    let moved = "unlinked: moved, wrote 6 bytes\n";
    let back = "unlinked: back, tmp reads \"hello world\"\n";
    for (start, args, moved, back) in [
        ((0, 0), &["move", "1.1"][..], moved, ""),
        ((0, 1), &["fork", "1.1"], FORKED_CHILD, ""),
        ((0, 0), &["move", "1.1", "0.0"], moved, back),
        ((0, 0), &["move", "1.1", "0.1"], moved, back),
        ((1, 0), &["move", "1.1", "0.1"], moved, back),
    ] {
        run_unlinked_away(&a, start, args, &unlinked_output(moved, back));
    }
}

/// Runs `unlinked /data ARGS` on kernel `start` of `node`'s cluster, its
/// directory on node 0; checks that it printed `expected`, and that once
/// it ended nothing is held open in the directory any more.
fn run_unlinked_away(node: &atoll_node::Node, start: (u16, u16), args: &[&str], expected: &str) {
    let how = format!("from {}.{}: {}", start.0, start.1, args.join(" "));
    let data = tempfile::tempdir().unwrap();
    let args = [&["/data"][..], args].concat();
    let mut spec = unlinked(data.path(), &args);
    spec.kernel = Some(atoll_abi::KernelId::new(start.0, start.1));
    let (code, out) = run(node, &spec);
    assert_eq!(code, 0, "{how}: {}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), expected, "{how}");
    let t = std::time::Instant::now();
    while open_in(data.path()) > 0 {
        assert!(t.elapsed() < HANG, "{how}: node 0 still holds its files");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_forked_child_keeps_an_unlinked_file_its_parent_closed_first() {
    // The child holds the open file itself, wherever the file's node keeps
    // it: closing the parent's descriptor leaves the child's.
    let expected = format!(
        "unlinked: tmp is gone, wrote 5 bytes\n\
         unlinked: tmp reads \"hello\"\n\
         {FORKED_CHILD}\
         unlinked: closed tmp before the child used it\n\
         unlinked: old reads \"old\" after new took its name\n\
         unlinked: ok\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    for (start, child) in [
        ((0, 0), "0.1"),
        ((0, 0), "1.1"),
        ((1, 0), "1.1"),
        ((1, 0), "1.0"),
        ((1, 0), "0.1"),
    ] {
        run_unlinked_away(&a, start, &["forkclose", child], &expected);
    }
}

#[test]
fn ps_counts_the_files_a_kernel_holds_for_processes_of_other_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    let held = || -> usize { a.ps().unwrap().iter().map(|k| k.held_files).sum() };
    assert_eq!(held(), 0);
    let data = tempfile::tempdir().unwrap();
    // On node 1, its files on node 0: node 0 holds the unlinked one while
    // the process waits.
    let mut spec = unlinked(data.path(), &["/data", "wait"]);
    spec.kernel = Some(atoll_abi::KernelId::new(1, 0));
    let (pid, out, done) = start(&a, &spec);
    wait_until(&a, "the process waiting", |p| {
        p.pid == pid && out.stdout().contains("waiting for")
    });
    let holders: Vec<_> = a
        .ps()
        .unwrap()
        .into_iter()
        .filter(|k| k.held_files > 0)
        .map(|k| (k.kernel.node, k.held_files))
        .collect();
    assert_eq!(holders, [(0, 1)]);
    std::fs::write(data.path().join("go"), "").unwrap();
    assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stdout());
    let t = std::time::Instant::now();
    while held() > 0 {
        assert!(t.elapsed() < HANG, "node 0 still holds its files");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_child_forked_onto_another_node_runs_there() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    let (code, out) = run(&a, &job("fork", &["1.1"]));
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), forked("node 1 kernel 1"));
}

/// Children forked one after another, on their parent's kernel, on
/// another kernel and on another node, may get the instance an elder
/// sibling ended in (a spare): each still sees its parent's memory and
/// globals, not what the sibling wrote, whether that sibling grew its
/// memory or not.
#[test]
fn forked_siblings_never_see_what_the_one_before_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 2);
    for kernel in ["0", "1", "1.0"] {
        let (code, out) = run(&a, &on(job("siblings", &["12", kernel]), 0));
        assert_eq!(code, 0, "{kernel}: {}{}", out.stdout(), out.stderr());
        assert_eq!(out.stdout(), "siblings: 12 copies\n", "{kernel}");
    }
}

/// Each child forked onto another node leaves its memory lent by its
/// parent's kernel, in an instance of that node's pool, until the child
/// needs no more of it; that instance is freed once the kernel has a
/// moment. Forty children through a pool of eight all start.
#[test]
fn forks_onto_another_node_outnumber_the_pool_that_lends_their_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(1);
    config.runtime.instances = atoll_kernel::MIN_INSTANCES_PER_KERNEL;
    let (a, _b) = cluster_pair_of(dir.path(), config);
    // 256 KiB of heap: more than goes with the image, so the rest is lent.
    let (code, out) = run(&a, &job("placebench", &["fork", "40", "1.0", "256"]));
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert!(
        out.stdout().starts_with("placebench what=fork n=40"),
        "{}",
        out.stdout()
    );
}

#[test]
fn without_userfaultfd_a_child_forked_onto_another_node_runs_once_its_memory_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(2);
    config.runtime.postcopy_faults = false;
    let (a, _b) = cluster_pair_of(dir.path(), config);
    let (code, out) = run(&a, &job("fork", &["1.1"]));
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert_eq!(out.stdout(), forked("node 1 kernel 1"));
}

/// The processes named `name` that `node` sees on the kernels of node
/// `on`.
fn named(node: &atoll_node::Node, on: u16, name: &str) -> Vec<atoll_abi::Pid> {
    node.ps()
        .unwrap()
        .into_iter()
        .filter(|r| r.kernel.node == on)
        .flat_map(|r| r.processes)
        .filter(|p| p.name == name)
        .map(|p| p.pid)
        .collect()
}

#[test]
fn a_child_whose_memory_was_still_coming_from_a_lost_node_is_killed() {
    // The child, on node 1, starts before its 256 MiB heap has come from
    // node 0 and reads all of it; node 0 stops meanwhile. The child must
    // not wait forever in a fault, nor run on with zeros: it is killed,
    // and node 1 goes on serving.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    let (_pid, out, _ended) = start(&a, &job("fork", &["1.0", "256"]));
    wait_for_lines(&out, 1);
    assert_eq!(out.stdout(), "child: started\n");
    assert_eq!(named(&b, 1, "fork").len(), 1, "the child runs on node 1");
    a.shutdown();
    let t = std::time::Instant::now();
    while !named(&b, 1, "fork").is_empty() {
        assert!(t.elapsed() < HANG, "the child outlived its memory's node");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (code, out) = run(&b, &job("exit", &["3"]));
    assert_eq!(code, 3, "{}", out.stderr());
}

#[test]
fn a_child_moved_while_its_memory_arrives_keeps_all_of_it() {
    // The child of a parent holding 256 MiB starts on node 1 and reads
    // its heap as it arrives; it is moved meanwhile: by hand-over on its
    // node (the blocks go on arriving where it runs) and by copy to node
    // 0 (the move first waits for the whole memory: a missing page would
    // be captured as zero).
    for (to, mode) in [
        (atoll_abi::KernelId::new(1, 1), Mode::Handover),
        (atoll_abi::KernelId::new(0, 1), Mode::Copy),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = cluster_pair(dir.path(), 2);
        let (_pid, out, ended) = start(&a, &job("fork", &["1.0", "256"]));
        wait_for_lines(&out, 1);
        let child = named(&b, 1, "fork")[0];
        let report = b.migrate(child, to, Some(mode)).unwrap();
        assert_eq!(report.to, to);
        wait_for_lines(&out, 2);
        assert_eq!(
            out.stdout(),
            "child: started\nchild: a copy of its parent: yes\n",
            "{mode:?}"
        );
        a.kill(child, atoll_abi::status::SIGKILL).unwrap();
        ended.recv_timeout(HANG).expect("the parent ends");
    }
}

#[test]
fn a_child_refused_by_the_other_node_runs_at_home_and_outlives_that_node() {
    // A forked child's move is committed at its home, the parent's kernel,
    // as the child leaves; when the destination refuses it, the commit is
    // undone: the child runs on its parent's kernel, and is not taken for
    // a process of the other node when that node is lost.
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 1);
    let home = atoll_abi::KernelId::new(0, 0);
    b.fail_arrivals(atoll_abi::KernelId::new(1, 0), 1).unwrap();
    let (parent, out, ended) = start(&a, &on(job("fork", &["1.0", "1"]), 0));
    wait_for_lines(&out, 2);
    assert_eq!(
        out.stdout(),
        "child: started\nchild: a copy of its parent: yes\n"
    );
    let child = named(&a, 0, "fork")
        .into_iter()
        .find(|p| *p != parent)
        .expect("the child runs on node 0");
    assert_eq!(a.locate(child).unwrap(), home);
    // Had its home kept it on node 1, node 1's loss would end it.
    b.shutdown();
    let t = std::time::Instant::now();
    while a.members().len() > 1 {
        assert!(t.elapsed() < HANG, "node 1 is never seen gone");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(named(&a, 0, "fork").contains(&child), "the child was ended");
    assert_eq!(out.stdout().lines().count(), 2, "{}", out.stdout());
    a.kill(child, atoll_abi::status::SIGKILL).unwrap();
    ended.recv_timeout(HANG).expect("the parent ends");
}

#[test]
fn fork_fails_cleanly_for_a_missing_kernel_and_an_unprepared_module() {
    let node = node(2);
    let (code, out) = run(&node, &job("fork", &["9"]));
    assert_eq!(code, 1);
    assert_eq!(out.stdout(), "parent: fork failed: Invalid argument\n");
    let mut spec = job("fork", &["1"]);
    spec.prepare = false;
    let (code, out) = run(&node, &spec);
    assert_eq!(code, 1);
    assert_eq!(out.stdout(), "parent: fork failed: Not supported\n");
}

#[test]
fn exec_keeps_the_pid_and_parent_and_moves_when_asked_in_either_mode() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 3);
        for (arg, at) in [("0", "node 0 kernel 0"), ("2", "node 0 kernel 2")] {
            let (code, out) = run(&node, &job("exec", &["start", arg]));
            assert_eq!(code, 5, "{mode:?} {arg}: {}{}", out.stdout(), out.stderr());
            let text = out.stdout();
            assert!(
                text.starts_with("start: pid ")
                    && text.ends_with(&format!("\nafter: same pid: yes; on {at}\n")),
                "{mode:?} {arg}: {text}"
            );
        }
        // A forked child that execs is still its parent's to wait for.
        let (code, out) = run(&node, &job("exec", &["child", "1"]));
        assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
        assert_eq!(
            out.stdout(),
            "after: same pid: yes; on node 0 kernel 1\nchild: ended with 5\n"
        );
    }
}

#[test]
fn exec_runs_a_module_by_path_and_a_failed_exec_goes_on() {
    let node = node(2);
    let bin = tempfile::tempdir().unwrap();
    std::fs::copy(support::guest("hello"), bin.path().join("hello.wasm")).unwrap();
    let mut spec = job("exec", &["module", "/bin/hello.wasm"]);
    spec.preopens = vec![atoll_process::Preopen {
        host: bin.path().to_path_buf(),
        guest: "/bin".into(),
    }];
    let (code, out) = run(&node, &spec);
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert!(
        out.stdout()
            .contains("argv[0] = /bin/hello.wasm\nargv[1] = from-exec\n"),
        "{}",
        out.stdout()
    );
    let (code, out) = run(&node, &job("exec", &["missing"]));
    assert_eq!(code, 0);
    assert_eq!(
        out.stdout(),
        "missing: Capabilities insufficient; still here\n"
    );
}

/// A spawn by path waits for the loader; a parent killed meanwhile never
/// learns of a child, so none must be started for it.
#[test]
fn a_parent_killed_while_its_childs_module_loads_leaves_no_child() {
    // An empty cache: preparing bzip2 takes about a second, the window.
    let cache = tempfile::tempdir().unwrap();
    let mut config = atoll_node::NodeConfig::new(Some(cache.path().to_path_buf()));
    config.kernels = 1;
    config.balance = false;
    let node = atoll_node::Node::start(config).unwrap();
    let bin = tempfile::tempdir().unwrap();
    std::fs::copy(support::guest("bzip2"), bin.path().join("bzip2.wasm")).unwrap();
    for name in ["a", "b"] {
        std::fs::write(bin.path().join(name), "to compress\n").unwrap();
    }
    let compress = |file: &str| {
        let mut spec = job("launch", &["/bin/bzip2.wasm", "-k", file]);
        spec.preopens = vec![atoll_process::Preopen {
            host: bin.path().to_path_buf(),
            guest: "/bin".into(),
        }];
        spec
    };
    let (pid, _out, done) = start(&node, &compress("/bin/a"));
    wait_until(&node, "the parent spawning", |p| {
        p.pid == pid && p.state == "spawning"
    });
    node.kill(pid, atoll_abi::status::SIGKILL).unwrap();
    assert_eq!(
        done.recv_timeout(HANG).unwrap(),
        atoll_abi::status::killed(atoll_abi::status::SIGKILL)
    );
    // The loader takes modules in order: this one is prepared after the
    // killed parent's.
    let (code, out) = run(&node, &compress("/bin/b"));
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
    assert!(bin.path().join("b.bz2").exists());
    let t = std::time::Instant::now();
    while node.ps().unwrap().iter().any(|k| !k.processes.is_empty()) {
        assert!(t.elapsed() < HANG, "{:#?}", node.ps().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !bin.path().join("a.bz2").exists(),
        "a child was started for the killed parent"
    );
}
