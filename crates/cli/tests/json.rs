//! The `--json` outputs against their schemas (docs/json/, docs/json.md):
//! the schemas there are those the types give, and what the commands print
//! fits them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{atoll, guest, support, text, Daemon};
use serde_json::Value;

fn docs() -> PathBuf {
    support::repo().join("docs/json")
}

/// What does not fit the schema of the output `name` in `output`.
fn misfits(name: &str, output: &[u8]) -> Vec<String> {
    let path = docs().join(format!("{name}.schema.json"));
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let value: Value = serde_json::from_slice(output)
        .unwrap_or_else(|e| panic!("{name}: not JSON ({e}): {}", text(output)));
    validator
        .iter_errors(&value)
        .map(|e| format!("{e} (at {})", e.instance_path))
        .collect()
}

/// Checks `output` against the schema of the output `name`.
fn check(name: &str, output: &[u8]) {
    let errors = misfits(name, output);
    assert!(
        errors.is_empty(),
        "{name} does not fit its schema: {errors:#?}"
    );
}

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    all.sort();
    all
}

#[test]
fn the_schemas_in_docs_are_those_the_types_give() {
    let tmp = tempfile::tempdir().unwrap();
    let out = atoll(&["schema", "--write", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (made, kept) = (files(tmp.path()), files(&docs()));
    let names = |f: &[(String, String)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&made),
        names(&kept),
        "run `atoll schema --write docs/json`"
    );
    for ((name, made), (_, kept)) in made.iter().zip(&kept) {
        assert!(
            made == kept,
            "{name} is stale: run `atoll schema --write docs/json`"
        );
    }
    // One by name, as a script would ask.
    let ps = atoll(&["schema", "ps"]).output().unwrap();
    let ps: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(ps["$id"], "urn:atoll:json:v1:ps");
    let none = atoll(&["schema", "nope"]).output().unwrap();
    assert!(text(&none.stderr).contains("no output named nope"));
}

#[test]
fn recorded_benchmark_results_fit_their_schemas() {
    let results = support::repo().join("bench/results");
    for bench in [
        "spawn",
        "mergesort",
        "compress",
        "js",
        "prepare",
        "ipc",
        "migrate",
        "cluster",
        "scale",
        "mpi",
        "placement",
        "balance",
        "console",
        "threads",
    ] {
        let recorded = std::fs::read(results.join(format!("{bench}.json"))).unwrap();
        check(&format!("bench-{bench}"), &recorded);
    }
}

#[test]
fn what_a_node_prints_fits_the_schemas() {
    let node = Daemon::start(2);
    let mut spin = node
        .atoll(&["run", "--on", "0", &guest("spin")])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = node.wait_for("spin");
    let json = |args: &[&str]| {
        let out = node.atoll(args).output().unwrap();
        assert!(
            out.status.success(),
            "atoll {args:?}: {}",
            text(&out.stderr)
        );
        out.stdout
    };
    let ps = json(&["ps", "--json"]);
    check("ps", &ps);
    // What the schemas hold a script to: a PID as an object, as atoll once
    // printed it, or a count as a string, does not fit.
    let mut wrong: Value = serde_json::from_slice(&ps).unwrap();
    wrong[0]["processes"][0]["pid"] = serde_json::json!({"home": {"node": 0, "index": 0}});
    wrong[1]["slices"] = "many".into();
    let errors = misfits("ps", &serde_json::to_vec(&wrong).unwrap());
    assert_eq!(errors.len(), 2, "{errors:#?}");
    check("top", &json(&["top", "--json"]));
    check("ipc", &json(&["ipc", "--json"]));
    check("domain-list", &json(&["domain", "list", "--json"]));
    for mode in ["handover", "copy"] {
        let to = if mode == "copy" { "0.0" } else { "0.1" };
        check(
            "migrate",
            &json(&["migrate", &pid, "--to", to, "--mode", mode, "--json"]),
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("spin.ckpt");
    let file = file.to_str().unwrap();
    let args = ["checkpoint", &pid, "-o", file, "--leave-running", "--json"];
    let done = json(&args);
    check("checkpoint", &done);
    let done: Value = serde_json::from_slice(&done).unwrap();
    assert_eq!(
        (done["pid"].as_str(), done["file"].as_str()),
        (Some(&*pid), Some(file))
    );
    spin.kill().unwrap();
    spin.wait().unwrap();
}
