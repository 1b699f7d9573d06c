//! WASI conformance on a real node: `tests/guests/wasi_conformance.c` (one
//! section per class of difference the official wasi-testsuite found) on
//! every kernel, and programs that move to another kernel after every
//! system call (`--wander`) in both transfer modes, whose output and files
//! must be exactly those of an unmoved run: the file state is in the UArea.

mod common;

use std::path::Path;

use atoll_abi::KernelId;

use atoll_migration::Mode;
use atoll_node::JobSpec;
use atoll_process::Preopen;
use common::*;

const SECTIONS: &str =
    "rights: ok\nsandbox: ok\nslashes: ok\nfdflags: ok\ntimes: ok\nsockets: ok\n";

fn with_dir(mut spec: JobSpec, dir: &Path) -> JobSpec {
    spec.preopens = vec![Preopen {
        host: dir.into(),
        guest: "/data".into(),
    }];
    spec
}

/// The names and contents of the files beneath `dir`, sorted.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            out.extend(
                tree(&path)
                    .into_iter()
                    .map(|(n, c)| (format!("{name}/{n}"), c)),
            );
        } else {
            out.push((name, std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn conformance_regressions_pass_on_every_kernel() {
    let node = node(3);
    for kernel in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = with_dir(job("wasi_conformance", &["/data"]), dir.path());
        spec.kernel = Some(KernelId::new(0, kernel));
        let (status, out) = run(&node, &spec);
        assert_eq!(
            status,
            0,
            "kernel {kernel}: {}{}",
            out.stdout(),
            out.stderr()
        );
        assert_eq!(out.stdout(), SECTIONS);
        assert!(
            tree(dir.path()).is_empty(),
            "left behind: {:?}",
            tree(dir.path())
        );
    }
}

#[test]
fn a_process_moved_after_every_system_call_sees_the_same_files() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 3);
        for (guest, expected) in [("wasi_conformance", Some(SECTIONS)), ("files", None)] {
            let still = tempfile::tempdir().unwrap();
            let (status, unmoved) = run(&node, &with_dir(job(guest, &["/data"]), still.path()));
            assert_eq!(status, 0, "{}{}", unmoved.stdout(), unmoved.stderr());
            let moving = tempfile::tempdir().unwrap();
            let mut spec = with_dir(job(guest, &["/data"]), moving.path());
            spec.wander = true;
            let (status, moved) = run(&node, &spec);
            assert_eq!(
                status,
                0,
                "{mode:?} {guest}: {}{}",
                moved.stdout(),
                moved.stderr()
            );
            assert_eq!(moved.stdout(), unmoved.stdout(), "{mode:?} {guest}");
            if let Some(expected) = expected {
                assert_eq!(moved.stdout(), expected);
            }
            assert_eq!(tree(moving.path()), tree(still.path()), "{mode:?} {guest}");
        }
    }
}

#[test]
fn a_wandering_writer_really_moves_and_its_file_is_identical() {
    for mode in [Mode::Handover, Mode::Copy] {
        let node = node_in(mode, 3);
        let dir = tempfile::tempdir().unwrap();
        let mut spec = with_dir(job("logger", &["/data/still", "4000", "50000"]), dir.path());
        let (status, _) = run(&node, &spec);
        assert_eq!(status, 0);
        spec.args[1] = "/data/moving".into();
        spec.wander = true;
        let (_, out, done) = start(&node, &spec);
        let seen = wait_until(&node, "a logger that moved 20 times", |p| {
            p.name == "logger" && p.moves >= 20
        });
        assert_eq!(done.recv_timeout(HANG).unwrap(), 0, "{}", out.stderr());
        assert_eq!(out.stdout(), "logger: wrote 4000 lines\n");
        let still = std::fs::read(dir.path().join("still")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("moving")).unwrap(), still);
        assert!(seen.moves >= 20, "{mode:?}: {seen:?}");
    }
}
