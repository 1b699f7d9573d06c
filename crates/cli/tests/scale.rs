//! Many processes on one node: more than its pool has instances, so most of
//! them are dormant (kept as images) while they wait, and each can still be
//! messaged, killed and migrated.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::{atoll, guest, text, NodeProcess};

/// A node on a private socket, with a pool of `instances`.
fn node(dir: &std::path::Path, instances: u32) -> NodeProcess {
    let socket = dir.join("node.sock");
    let child = atoll(&[
        "node",
        "--kernels",
        "2",
        "--instances",
        &instances.to_string(),
    ])
    .env("ATOLL_SOCKET", &socket)
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    NodeProcess::started(child, socket)
}

#[test]
fn twenty_thousand_waiting_processes_are_answered_killed_and_migrated() {
    const N: usize = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), 256);
    let hold = format!("{}::/hold", dir.path().display());
    let mut job = node
        .atoll(&[
            "run",
            "--dir",
            &hold,
            &guest("swarm"),
            &N.to_string(),
            "/hold/go",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(job.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.starts_with(&format!("swarm ready n={N}")), "{line}");

    let ps = node.atoll(&["ps", "--json"]).output().unwrap();
    let reports: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
    let children: Vec<&serde_json::Value> = reports
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["processes"].as_array().unwrap())
        .filter(|p| p["name"] == "swarm")
        .collect();
    assert_eq!(children.len(), N);
    assert!(children.iter().all(|p| p["state"] == "RECEIVING from ANY"));
    // The pool holds 256; every other child waits out of any instance, in
    // less memory than it has.
    let dormant: Vec<u64> = children
        .iter()
        .filter_map(|p| p["dormant_bytes"].as_u64())
        .collect();
    assert!(dormant.len() > N - 256, "{} dormant", dormant.len());
    let memory = children[0]["memory_bytes"].as_u64().unwrap();
    assert!(dormant.iter().all(|&b| b < memory));
    let dormant_pid = |kernel: &str| {
        children
            .iter()
            .find(|p| p["kernel"] == kernel && p["dormant_bytes"].is_u64())
            .map(|p| p["pid"].as_str().unwrap().to_owned())
            .unwrap()
    };

    let killed = dormant_pid("0.0");
    let out = node.atoll(&["kill", &killed]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let copied = dormant_pid("0.1");
    let out = node
        .atoll(&["migrate", &copied, "--to", "0.0", "--mode", "copy"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let handed = dormant_pid("0.1");
    let out = node
        .atoll(&["migrate", &handed, "--to", "0.0", "--mode", "handover"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    std::fs::write(dir.path().join("go"), b"").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(job.wait().unwrap().success(), "{rest}");
    assert!(
        rest.contains(&format!(
            "swarm done answered={} gone=1 clean={}",
            N - 1,
            N - 1
        )),
        "{rest}"
    );
}

/// With the smallest pool (eight instances per kernel, six live), every
/// message, copy and migration of the IPC scenarios meets processes that
/// are dormant or have never run.
#[test]
fn ipc_scenarios_pass_with_the_smallest_pool() {
    for args in [
        &["stress", "same", "8", "50"][..],
        &["stress", "other", "8", "50"],
        &["grants", "same"],
        &["grants", "other"],
        &["moved", "same"],
        &["dead", "other"],
        &["notify", "same"],
    ] {
        let mut cmd = vec!["run", "--instances", "16", "--kernels", "2"];
        let ipc = guest("ipc");
        cmd.push(&ipc);
        cmd.extend_from_slice(args);
        let out = atoll(&cmd).output().unwrap();
        assert!(
            out.status.success() && text(&out.stdout).contains(&format!("ok {}", args[0])),
            "{args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    let out = atoll(&["run", "--instances", "15", "--kernels", "2", &guest("true")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    common::assert_stderr(&out, "at least 16 (8 per kernel)");
}
