//! MPI jobs (`atoll run -n`): the C suites of tests/mpi/ on real ranks,
//! still and moving between kernels (asked by the ranks themselves, and
//! from outside at arbitrary points), and a failing rank ending its job.

mod common;

use std::collections::HashSet;

use atoll_abi::{KernelId, Pid};
use atoll_migration::Mode;
use atoll_node::{JobSpec, MapBy, Node, Ranks};
use atoll_process::Preopen;
use common::{cluster_pair, job, node, node_in, run, start};

fn mpi(name: &str, args: &[&str], ranks: u32) -> JobSpec {
    let mut spec = job(name, args);
    spec.ranks = Some(Ranks {
        count: ranks,
        map_by: MapBy::Kernel,
        tag_output: false,
    });
    spec
}

/// Runs a suite and checks its verdict line; returns stdout.
fn passes(node: &Node, spec: &JobSpec) -> String {
    let (status, out) = run(node, spec);
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    out.stdout()
}

#[test]
fn matching_queues_keep_mpi_order() {
    assert_eq!(passes(&node(1), &job("matching", &[])), "ok matching\n");
}

#[test]
fn point_to_point_semantics_hold_for_2_3_and_5_ranks() {
    let node = node(3);
    for n in [2, 3, 5] {
        assert_eq!(
            passes(&node, &mpi("pt2pt", &[], n)),
            format!("ok pt2pt ({n} ranks, still)\n")
        );
    }
}

#[test]
fn collectives_match_a_serial_reference_for_1_to_5_ranks() {
    let node = node(2);
    for n in 1..=5 {
        assert_eq!(
            passes(&node, &mpi("coll", &[], n)),
            format!("ok coll ({n} ranks, still)\n")
        );
    }
}

#[test]
fn ranks_that_move_themselves_mid_traffic_lose_nothing_in_either_mode() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 3);
        for (name, n) in [("pt2pt", 4), ("coll", 5)] {
            let mut spec = mpi(name, &[], n);
            spec.env.push("ATOLL_MPI_TEST_MOVE=1".into());
            assert_eq!(
                passes(&node, &spec),
                format!("ok {name} ({n} ranks, moving)\n"),
                "{mode:?}"
            );
        }
    }
}

/// The processes of a job: those of its program's name.
fn ranks_of(node: &Node, name: &str) -> Vec<(Pid, KernelId)> {
    node.ps()
        .unwrap()
        .into_iter()
        .flat_map(|k| k.processes)
        .filter(|p| p.name == name)
        .map(|p| (p.pid, p.kernel))
        .collect()
}

/// Runs `spec` (program `name`) while moving its ranks, one after the
/// other, to the next kernel of `node` until the job ends; returns its
/// status, output and how many ranks were moved at least once.
fn run_while_moving(node: &Node, spec: &JobSpec, name: &str) -> (i32, common::Output, usize) {
    let kernels = node.kernel_count();
    run_while_moving_to(node, spec, name, None, |at| {
        KernelId::new(0, (at.index + 1) % kernels)
    })
}

/// As [`run_while_moving`], each rank moved by `mode` to `next(where it
/// is)`.
fn run_while_moving_to(
    node: &Node,
    spec: &JobSpec,
    name: &str,
    mode: Option<Mode>,
    next: impl Fn(KernelId) -> KernelId,
) -> (i32, common::Output, usize) {
    let (_, out, done) = start(node, spec);
    let mut moved = HashSet::new();
    let mut i = 0usize;
    let t = std::time::Instant::now();
    let status = loop {
        if let Ok(status) = done.try_recv() {
            break status;
        }
        assert!(
            t.elapsed() < common::HANG,
            "{name} never ended: {}",
            out.stdout()
        );
        let ranks = ranks_of(node, name);
        if let Some(&(pid, at)) = ranks.get(i % ranks.len().max(1)) {
            // A rank that ends meanwhile cannot be moved, and a move may
            // be refused: that is fine.
            if node.migrate(pid, next(at), mode).is_ok() {
                moved.insert(pid);
            }
        }
        i += 1;
    };
    (status, out, moved.len())
}

#[test]
fn ranks_moved_from_outside_at_any_moment_lose_nothing() {
    // The moves land wherever the ranks are: in a send, in the progress
    // engine with letters on their way or queued for room, in a copy.
    let node = node_in(Mode::Copy, 3);
    for name in ["pt2pt", "coll"] {
        let (status, out, moved) = run_while_moving(&node, &mpi(name, &[], 4), name);
        assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
        assert_eq!(out.stdout(), format!("ok {name} (4 ranks, still)\n"));
        assert!(moved >= 2, "{name}: only {moved} ranks were moved");
    }
}

#[test]
fn npb_kernels_verify_still_and_with_their_ranks_moving() {
    let node = node_in(Mode::Copy, 3);
    for (name, class, n) in [
        ("npb_ep", "S", 2),
        ("npb_is", "S", 3),
        ("npb_is", "W", 4),
        // Class A's own verification rule (seed 002's experiment runs B).
        ("npb_is", "A", 4),
        ("npb_cg", "S", 3),
    ] {
        let out = passes(&node, &mpi(name, &[class], n));
        assert!(out.contains("verified=1"), "{out}");
    }
    // IS moves all its keys between ranks ten times, CG gathers its
    // direction vector at every step: both moved meanwhile.
    for (name, class) in [("npb_is", "W"), ("npb_cg", "W")] {
        let (status, out, moved) = run_while_moving(&node, &mpi(name, &[class], 3), name);
        assert_eq!(status, 0, "{name}: {}{}", out.stdout(), out.stderr());
        assert!(out.stdout().contains("verified=1"), "{}", out.stdout());
        assert!(moved >= 1, "{name}: no rank was moved");
    }
}

/// HPL (from Debian's HPCC source) on `n` ranks in a P x Q grid, in a
/// directory of its own for hpccinf.txt and hpccoutf.txt.
fn hpl(dir: &tempfile::TempDir, args: &[&str], n: u32) -> JobSpec {
    let mut spec = mpi("hpl", args, n);
    spec.preopens = vec![Preopen {
        host: dir.path().to_path_buf(),
        guest: ".".into(),
    }];
    spec
}

#[test]
fn hpl_passes_its_residual_check_still_and_with_its_ranks_moving() {
    let node = node_in(Mode::Copy, 3);
    let dir = tempfile::tempdir().unwrap();
    let spec = hpl(&dir, &["500", "32", "2", "2"], 4);
    let out = passes(&node, &spec);
    assert!(
        out.contains("hpl: N=500 NB=32 P=2 Q=2") && out.ends_with("PASSED\n"),
        "{out}"
    );
    assert!(
        out.contains("1 tests completed and passed residual checks"),
        "{out}"
    );
    // Panel broadcasts, row swaps and the update, with ranks moved meanwhile.
    let (status, out, moved) = run_while_moving(&node, &spec, "hpl");
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert!(out.stdout().ends_with("PASSED\n"), "{}", out.stdout());
    assert!(moved >= 1, "no HPL rank was moved");
}

#[test]
fn hpl_refuses_an_illegal_input_with_its_reason() {
    let node = node(2);
    let dir = tempfile::tempdir().unwrap();
    // A block size of 0 is illegal; HPCC would silently run its defaults.
    let (status, out) = run(&node, &hpl(&dir, &["500", "0", "1", "2"], 2));
    assert_ne!(status, 0);
    assert!(
        out.stderr().contains("hpccinf.txt holds an illegal value"),
        "{}",
        out.stderr()
    );
    // Bad arguments: a usage line, and every rank ends.
    let (status, out) = run(&node, &hpl(&dir, &["500"], 2));
    assert_eq!(status, 2, "{}", out.stderr());
    assert!(
        out.stderr().contains("usage: hpl [N NB P Q]"),
        "{}",
        out.stderr()
    );
}

#[test]
fn a_failing_rank_ends_every_rank_and_gives_the_job_its_status() {
    let node = node(2);
    for (how, status, says) in [
        (
            "abort",
            3,
            "MPI_Abort was called on rank 1 with errorcode 3",
        ),
        ("trap", 134, "trapped"),
        ("exit", 5, "rank 1 ended with status 5"),
    ] {
        let (got, out) = run(&node, &mpi("abort", &[how], 4));
        assert_eq!(got, status, "{how}: {}{}", out.stdout(), out.stderr());
        assert!(out.stderr().contains(says), "{how}: {}", out.stderr());
        assert!(!out.stdout().contains("never sent"), "{}", out.stdout());
    }
    // Nothing of those jobs is left.
    assert!(ranks_of(&node, "abort").is_empty());
}

#[test]
fn output_is_tagged_with_its_rank_and_bad_shapes_are_refused() {
    let node = node(2);
    let mut spec = mpi("coll", &[], 3);
    spec.ranks.as_mut().unwrap().tag_output = true;
    assert_eq!(
        passes(&node, &spec),
        "[1,0]<stdout>:ok coll (3 ranks, still)\n"
    );
    // -n 0 and --on are refused before anything starts.
    let mut none = mpi("coll", &[], 0);
    assert!(node.run_job(&none, Box::new(common::NullSink)).is_err());
    none.ranks.as_mut().unwrap().count = 2;
    none.kernel = Some(KernelId::new(0, 1));
    let err = node.run_job(&none, Box::new(common::NullSink)).unwrap_err();
    assert!(err.to_string().contains("--map-by"), "{err}");
}

#[test]
fn ranks_on_two_nodes_talk_and_move_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = cluster_pair(dir.path(), 2);
    for (name, n) in [("pt2pt", 4), ("coll", 3)] {
        let mut spec = mpi(name, &[], n);
        spec.ranks.as_mut().unwrap().map_by = MapBy::Node;
        spec.env.push("ATOLL_MPI_TEST_MOVE=node".into());
        spec.env.push("ATOLL_MPI_TEST_NODES=2".into());
        assert_eq!(
            passes(&a, &spec),
            format!("ok {name} ({n} ranks, moving)\n")
        );
    }
    b.shutdown();
    a.shutdown();
}

#[test]
fn ranks_moved_between_two_nodes_by_post_copy_lose_nothing() {
    // Each node has one kernel, which waits in place for the ranks'
    // messages, polling the links: a rank whose memory is still coming
    // faults there, writing a message it took into that memory, and the
    // blocks it waits for must still be read (by the links' thread); and
    // no two kernels may each lend memory to the other while awaiting
    // from it (such moves are refused). IS sends all of its keys at each
    // of its ten steps.
    let dir = tempfile::tempdir().unwrap();
    let (a, _b) = cluster_pair(dir.path(), 1);
    let mut spec = mpi("npb_is", &["W"], 4);
    spec.ranks.as_mut().unwrap().map_by = MapBy::Node;
    let (status, out, moved) =
        run_while_moving_to(&a, &spec, "npb_is", Some(Mode::PostCopy), |at| {
            KernelId::new(1 - at.node, 0)
        });
    assert_eq!(status, 0, "{}{}", out.stdout(), out.stderr());
    assert!(out.stdout().contains("verified=1"), "{}", out.stdout());
    assert!(moved >= 1, "no rank was moved");
}

#[test]
fn windows_of_sends_that_overflow_the_runtimes_window_end_cleanly_on_one_kernel() {
    // osu bw: 64 sends in flight per window, and the peer's answers, fill
    // the runtime's window of asynchronous letters to a peer (the peer
    // runs only once the sender stops), so messages queue in memory, down
    // to MPI_Finalize's own barrier.
    let node = node(1);
    let out = passes(&node, &mpi("osu", &["bw", "4096"], 2));
    assert_eq!(out.lines().count(), 7, "{out}");
    assert!(out.lines().all(|l| l.starts_with("bw size=")), "{out}");
}
