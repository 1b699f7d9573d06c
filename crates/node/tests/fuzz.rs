//! System calls with random arguments from guests, on a real node. The
//! other fuzz targets need no node and live in crates/fuzz.
//!
//! Each case is a module that imports some of the system calls the runtime
//! provides (`Runtime::system_calls`: all of WASI preview1 and atoll's own)
//! and calls them in a random order with arguments chosen to hit edges: 0,
//! -1, the last bytes of memory, pointers past it, huge lengths, any value.
//! It runs prepared (so that calls can block) as a job of its own domain,
//! whose quota bounds what forks and spawns make. Each must end by itself
//! (exit or trap) or be ended by the node, and the node must go on serving:
//! `ps` after each case, a program at the end. A failure is shrunk to the
//! shortest sequence of calls that shows it.
//!
//! `ATOLL_FUZZ_CASES` sets the number of cases (default 24, a few seconds),
//! and `ATOLL_FUZZ_SECONDS` a time after which no case starts, for long
//! runs; `bench/results/fuzz.md` records them.

mod common;

use std::time::{Duration, Instant};

use atoll_process::SystemCall;
use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Calls left out: `proc_exit` would end every case at its first call, and
/// `atoll.safepoint` is the import preparation adds (a module may not name it).
const LEFT_OUT: &[&str] = &["proc_exit", "safepoint"];

/// How long a case may run before the node is asked to end it (a guest
/// may legitimately sleep or wait for a message forever).
const PATIENCE: Duration = Duration::from_secs(1);

fn cases() -> u32 {
    std::env::var("ATOLL_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(24)
}

fn deadline() -> Option<Instant> {
    let seconds = std::env::var("ATOLL_FUZZ_SECONDS").ok()?.parse().ok()?;
    Some(Instant::now() + Duration::from_secs(seconds))
}

/// An argument: mostly what a program would pass (a small number, a
/// descriptor, an aligned pointer into memory), else an edge (0, -1, the
/// last bytes of memory, past it) or any value.
fn value(ty: &str) -> BoxedStrategy<i64> {
    let edges = prop_oneof![
        Just(-1i64),
        Just(65_532),
        Just(65_536),
        Just(0x7fff_ffff),
        Just(0xffff_fff0),
    ];
    let any = match ty {
        "i64" => any::<i64>().boxed(),
        _ => any::<u32>().prop_map(i64::from).boxed(),
    };
    prop_oneof![
        3 => 0i64..8,
        3 => (0i64..8192).prop_map(|p| p * 8),
        1 => edges,
        1 => any,
    ]
    .boxed()
}

/// One call: which, and its arguments.
fn call(calls: &[SystemCall]) -> impl Strategy<Value = (usize, Vec<i64>)> {
    let calls = calls.to_vec();
    (0..calls.len()).prop_flat_map(move |i| {
        let args: Vec<_> = calls[i].params.iter().map(|t| value(t)).collect();
        (Just(i), args)
    })
}

/// The text of a module making `seq`'s calls from `_start`.
fn module(calls: &[SystemCall], seq: &[(usize, Vec<i64>)]) -> String {
    let mut used: Vec<usize> = seq.iter().map(|(i, _)| *i).collect();
    used.sort_unstable();
    used.dedup();
    let mut wat = String::from("(module\n");
    for &i in &used {
        let c = &calls[i];
        let sig = |kind: &str, types: &[String]| {
            if types.is_empty() {
                String::new()
            } else {
                format!(" ({kind} {})", types.join(" "))
            }
        };
        wat += &format!(
            "  (import \"{}\" \"{}\" (func $c{i}{}{}))\n",
            c.module,
            c.name,
            sig("param", &c.params),
            sig("result", &c.results)
        );
    }
    wat += "  (memory (export \"memory\") 1)\n  (func (export \"_start\")\n";
    for (i, args) in seq {
        let c = &calls[*i];
        let args: String = c
            .params
            .iter()
            .zip(args)
            .map(|(t, v)| match t.as_str() {
                "i64" => format!(" (i64.const {v})"),
                _ => format!(" (i32.const {})", *v as i32),
            })
            .collect();
        let call = format!("(call $c{i}{args})");
        wat += &match c.results.len() {
            0 => format!("    {call}\n"),
            _ => format!("    (drop {call})\n"),
        };
    }
    wat + "  ))\n"
}

#[test]
fn random_system_calls_end_cleanly_and_the_node_carries_on() {
    let node = node(2);
    let calls: Vec<SystemCall> = node
        .runtime()
        .system_calls()
        .iter()
        .filter(|c| !LEFT_OUT.contains(&c.name.as_str()))
        .cloned()
        .collect();
    assert!(calls.len() > 60, "every system call is offered: {calls:?}");
    let dir = tempfile::tempdir().unwrap();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU32::new(0);
    let tally = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let strategy = proptest::collection::vec(call(&calls), 1..24);
    let (began, deadline) = (Instant::now(), deadline());
    runner
        .run(&strategy, |seq| {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Ok(());
            }
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = dir.path().join(format!("case{case}.wat"));
            std::fs::write(&path, module(&calls, &seq)).unwrap();
            let domain = format!("fuzz{case}");
            node.domain_create(&domain, Some(8)).unwrap();
            let mut spec = job("hello", &[]);
            spec.args = vec![format!("case{case}")];
            spec.program = path;
            spec.domain = Some(domain.clone());
            let (pid, _out, ended) = start(&node, &spec);
            let how = match ended.recv_timeout(PATIENCE) {
                Ok(0) => "exited",
                Ok(134) => "trapped",
                Ok(_) => "ended otherwise",
                Err(_) => {
                    // Waiting (for a message, a child, a clock): the node
                    // ends it.
                    let _ = node.kill(pid, 9);
                    ended
                        .recv_timeout(HANG)
                        .expect("the node ends a waiting guest");
                    "ended by the node"
                }
            };
            *tally.lock().unwrap().entry(how).or_insert(0) += 1;
            // Its children and what they made go with the domain.
            node.domain_end(&domain).unwrap();
            prop_assert!(node.ps().is_ok(), "the node no longer answers");
            Ok(())
        })
        .unwrap();
    // For the record (bench/results/fuzz.md): how the guests ended.
    let tally = tally.into_inner().unwrap();
    let guests: u32 = tally.values().sum();
    eprintln!(
        "fuzz: {guests} guests in {:.0} s: {tally:?}",
        began.elapsed().as_secs_f64()
    );
    let (status, out) = run(&node, &job("hello", &[]));
    assert_eq!(status, 0, "{}", out.stderr());
    node.shutdown();
}
