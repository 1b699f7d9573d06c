//! Shared by the integration tests of several crates (included with
//! `#[path]`): the guest programs, built once with `make`, and a module
//! cache shared by all tests so each program is prepared and compiled once.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// The path of a built guest (`build/wasm/NAME.wasm`) or native program
/// (`build/native/NAME`), running `make all` the first time.
pub fn built(rel: &str) -> PathBuf {
    static MAKE: Once = Once::new();
    MAKE.call_once(|| {
        let status = Command::new("make")
            .args(["-s", "all"])
            .current_dir(repo())
            .status()
            .expect("running make (is it installed? see scripts/setup.sh)");
        assert!(
            status.success(),
            "`make all` failed: the C toolchain is missing (scripts/setup.sh installs it)"
        );
    });
    let p = repo().join("build").join(rel);
    assert!(p.exists(), "{} was not built", p.display());
    p
}

pub fn guest(name: &str) -> PathBuf {
    built(&format!("wasm/{name}.wasm"))
}

/// A cache directory shared by the tests of one build.
pub fn cache_dir() -> PathBuf {
    repo().join("target/test-cache")
}

/// What `roam -w FILL NODES ROUNDS` (`tests/guests/roam.c`) prints before
/// its last line, wherever it runs: its output is checked against this.
pub fn roam_output(fill: usize, nodes: usize, rounds: usize) -> String {
    let mut out = String::new();
    for r in 0..rounds {
        for n in 0..nodes {
            let mut written = 0;
            for i in 0.. {
                if written >= fill {
                    break;
                }
                let line = format!("roam {r}.{n}: line {i}\n");
                written += line.len();
                out += &line;
            }
            out += &format!("roam {r}.{n}: moved\n");
        }
    }
    out
}
