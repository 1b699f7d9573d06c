//! Placement by the DQDT and the balancer, on real nodes running
//! `balance.wasm` (bench/guests/balance.c): CPU-bound processes forked at
//! once, on one kernel or wherever the DQDT places them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use atoll_abi::KernelId;
use atoll_node::{MapBy, Node, Ranks};
use common::*;

/// Rounds of xorshift in a unit of balance.c's work: tens of milliseconds,
/// so that the processes are still running when the balancer looks.
const UNIT: &str = "20000000";

fn node_balancing(kernels: u16, balance: bool) -> Node {
    let mut config = config(kernels);
    config.balance = balance;
    Node::start(config).expect("node starts")
}

/// Runs `balance -m HOLD_MIB N UNIT KERNEL` on kernel 0.0; returns how many
/// children ended on each kernel (NODE.INDEX), after checking that every
/// child printed the value an unmoved run computes.
fn balance(
    node: &Node,
    n: usize,
    kernel: &str,
    pin: bool,
    hold_mib: u32,
) -> BTreeMap<String, usize> {
    let hold = hold_mib.to_string();
    let mut spec = job("balance", &["-m", &hold, &n.to_string(), UNIT, kernel]);
    // The parent on kernel 0.0: KERNEL is an index on its node.
    spec.kernel = Some(KernelId::new(0, 0));
    spec.pin = pin;
    let (code, out) = run(node, &spec);
    let stdout = out.stdout();
    assert_eq!(code, 0, "{stdout}{}", out.stderr());
    let mut on = BTreeMap::new();
    let children: Vec<&str> = stdout.lines().filter(|l| l.contains(" child=")).collect();
    assert_eq!(children.len(), n, "{stdout}");
    for line in children {
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key} in {line}"))
        };
        let (child, value) = (field("child"), field("value"));
        assert_eq!(value, expected(child.parse().unwrap()), "{line}");
        *on.entry(field("kernel").to_string()).or_default() += 1;
    }
    on
}

/// What child `i` of balance.c computes.
fn expected(i: u64) -> String {
    let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_add(i);
    for _ in 0..(1 + i % 4) * UNIT.parse::<u64>().unwrap() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    format!("0x{x:016x}")
}

fn balancer_moves(node: &Node) -> u64 {
    node.ps().unwrap().iter().map(|r| r.balancer_moves).sum()
}

#[test]
fn the_balancer_spreads_processes_started_on_one_kernel() {
    let node = node_balancing(2, true);
    let on = balance(&node, 8, "0", false, 0);
    assert!(balancer_moves(&node) > 0, "nothing moved");
    assert!(
        on.contains_key("0.1"),
        "every child ended on kernel 0: {on:?}"
    );
}

/// The spinners running on `kernel`.
fn spinners_on(node: &Node, kernel: KernelId) -> Vec<atoll_kernel::ProcInfo> {
    node.ps()
        .unwrap()
        .into_iter()
        .flat_map(|r| r.processes)
        .filter(|p| p.name == "spin" && p.kernel == kernel)
        .collect()
}

#[test]
fn a_kernel_that_runs_out_of_work_takes_some_from_a_busy_one() {
    let node = node_balancing(2, true);
    let (k0, k1) = (KernelId::new(0, 0), KernelId::new(0, 1));
    let mut spin = job("spin", &[]);
    spin.kernel = Some(k0);
    let jobs: Vec<_> = (0..4).map(|_| start(&node, &spin)).collect();
    // The balancer evens them out: two go to kernel 0.1.
    let t = Instant::now();
    while spinners_on(&node, k1).len() != 2 || spinners_on(&node, k0).len() != 2 {
        assert!(t.elapsed() < HANG, "never even: {:#?}", node.ps().unwrap());
        std::thread::sleep(Duration::from_millis(2));
    }
    let to_idle = |node: &Node, k: KernelId| {
        let reports = node.ps().unwrap();
        reports
            .iter()
            .find(|r| r.kernel == k)
            .unwrap()
            .balancer_moves_to_idle
    };
    let before = to_idle(&node, k1);
    // Kernel 0.0 runs out of work: it takes one of the two that were just
    // moved to 0.1, and leaves 0.1 the other. The balancer's periodic
    // decisions, for a kernel with work, would have left both there for
    // 500 ms; this move is one to an idle kernel.
    for p in spinners_on(&node, k0) {
        node.kill(p.pid, 9).unwrap();
    }
    let back = wait_until(&node, "a spinner moved back to 0.0", |p| {
        p.name == "spin" && p.kernel == k0
    });
    assert!(back.balanced >= 2, "{back:#?}");
    assert_eq!(spinners_on(&node, k1).len(), 1);
    assert_eq!(to_idle(&node, k1), before + 1);
    for (pid, _, _) in &jobs {
        let _ = node.kill(*pid, 9);
    }
}

#[test]
fn pinned_processes_and_a_node_without_balancer_stay_where_they_start() {
    let node = node_balancing(2, true);
    let all_on_0 = BTreeMap::from([("0.0".to_string(), 6)]);
    assert_eq!(balance(&node, 6, "0", true, 0), all_on_0);
    assert_eq!(balancer_moves(&node), 0);
    let node = node_balancing(2, false);
    assert_eq!(balance(&node, 6, "0", false, 0), all_on_0);
    assert_eq!(balancer_moves(&node), 0);
}

#[test]
fn children_forked_anywhere_are_placed_on_every_kernel() {
    let node = node_balancing(3, false);
    // Once the kernels have told each other their loads.
    std::thread::sleep(Duration::from_millis(100));
    let on = balance(&node, 9, "any", false, 0);
    // The parent, runnable on kernel 0 while it forks, counts there.
    assert_eq!(on.len(), 3, "{on:?}");
    let (least, most) = (on.values().min().unwrap(), on.values().max().unwrap());
    assert!(most - least <= 2, "{on:?}");
}

#[test]
fn the_tree_sums_what_its_leaves_report() {
    let node = node_balancing(2, false);
    let mut spin = job("spin", &[]);
    spin.kernel = Some(KernelId::new(0, 1));
    let (pid, _out, _rx) = start(&node, &spin);
    wait_until(&node, "spin", |p| p.pid == pid);
    let t = Instant::now();
    loop {
        let reports = node.ps().unwrap();
        let root = reports
            .iter()
            .flat_map(|r| &r.tree)
            .find(|e| e.load.kernels == 2)
            .map(|e| e.load);
        if root.is_some_and(|l| l.processes == 1 && l.runnable == 1 && l.busy > 0.5) {
            break;
        }
        assert!(
            t.elapsed() < HANG,
            "the root never summed kernel 0.1: {reports:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    node.kill(pid, 9).unwrap();
}

#[test]
fn placements_by_load_spread_and_mpi_ranks_use_them() {
    let node = node_balancing(2, false);
    std::thread::sleep(Duration::from_millis(100));
    // Jobs started without a kernel, as `atoll run` without --on.
    let spinners: Vec<_> = (0..4).map(|_| start(&node, &job("spin", &[])).0).collect();
    let mut count: BTreeMap<KernelId, usize> = BTreeMap::new();
    for r in node.ps().unwrap() {
        count.insert(r.kernel, r.processes.len());
    }
    assert_eq!(count.into_values().collect::<Vec<_>>(), [2, 2]);
    for pid in spinners {
        node.kill(pid, 9).unwrap();
    }
    let mut spec = job("pt2pt", &[]);
    spec.ranks = Some(Ranks {
        count: 4,
        map_by: MapBy::Load,
        tag_output: false,
    });
    let (code, out) = run(&node, &spec);
    assert_eq!(code, 0, "{}{}", out.stdout(), out.stderr());
}

/// Two nodes of one kernel each, their balancers on (the directory holds
/// their certificates).
fn balancing_pair() -> (tempfile::TempDir, Node, Node) {
    let dir = tempfile::tempdir().unwrap();
    let mut both = config(1);
    both.balance = true;
    let (a, b) = cluster_pair_of(dir.path(), both);
    (dir, a, b)
}

#[test]
fn between_nodes_the_balancer_moves_processes_by_copy() {
    let (_dir, a, _b) = balancing_pair();
    let on = balance(&a, 6, "0", false, 0);
    assert!(balancer_moves(&a) > 0, "nothing moved: {on:?}");
    assert!(on.contains_key("1.0"), "no child ended on node 1: {on:?}");
}

#[test]
fn between_nodes_the_balancer_leaves_processes_too_dear_to_copy() {
    let (_dir, a, _b) = balancing_pair();
    // Two children of 256 MiB each from their fork, rewritten before each
    // unit of work: one would be moved to the idle node 1 (the test
    // above), but a copy of 256 MiB is expected to take about 0.27 s, and a
    // child has to have been on its kernel ten times that before it is.
    let on = balance(&a, 2, "0", false, 256);
    assert_eq!(on, BTreeMap::from([("0.0".to_string(), 2)]));
    assert_eq!(balancer_moves(&a), 0);
}

#[test]
fn between_nodes_the_balancer_calls_off_a_copy_the_link_cannot_keep_up_with() {
    // A link slower than the processes' writes: pre-copy sends one piece
    // of 64 KiB at a time, each once the one before is in.
    let dir = tempfile::tempdir().unwrap();
    let mut both = config(1);
    both.balance = true;
    both.migration.policy.chunk_bytes = 64 << 10;
    both.migration.policy.window = 1;
    let (a, _b) = cluster_pair_of(dir.path(), both);
    let k0 = KernelId::new(0, 0);
    // Node 1 busy, and two processes on node 0's one kernel, each rewriting
    // all of its 16 MiB over and over: nothing to even out.
    let mut spin = job("spin", &[]);
    spin.kernel = Some(KernelId::new(1, 0));
    let (spinner, _spun, _rx) = start(&a, &spin);
    let dirty = on(job("dirty", &["16", "16384", "0"]), 0);
    let writers: Vec<_> = (0..2).map(|_| start(&a, &dirty)).collect();
    for (_, out, _) in &writers {
        wait_for_lines(out, 1);
    }
    // Once their size alone makes a copy worth it (ten times 17 ms), node
    // 1 runs out of work: its kernel takes one of them, and the rounds of
    // the copy find most of what they sent written again.
    std::thread::sleep(Duration::from_millis(300));
    a.kill(spinner, 9).unwrap();
    let called_off = |node: &Node| -> u64 {
        node.ps()
            .unwrap()
            .iter()
            .map(|r| r.balancer_called_off)
            .sum()
    };
    let t = Instant::now();
    while called_off(&a) == 0 {
        assert!(
            t.elapsed() < HANG,
            "never called off: {:#?}",
            a.ps().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both stayed, and never stopped to move.
    for (pid, _, _) in &writers {
        let p = wait_until(&a, "a writer", |p| p.pid == *pid);
        assert_eq!((p.kernel, p.moves), (k0, 0), "{p:#?}");
        a.kill(*pid, 9).unwrap();
    }
}
