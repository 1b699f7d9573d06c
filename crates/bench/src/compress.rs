//! bzip2 1.0.8, Debian's source unmodified, native, as plain wasm and
//! prepared: a large real C program (8,000 lines), where the mergesort is
//! one loop. Each run compresses a file with `bzip2 -9` and decompresses
//! it again, as SPEC CPU's bzip2 does; the compressed bytes must equal the
//! native ones and the decompressed file the input.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use atoll_process::Preopen;

use super::three_ways::{self, Way};
use super::{artifact, atoll_job, job_on_kernel0, native, Report};
use crate::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Size of the input, in MiB: HPCC's C sources (fetched by `make guests`)
    /// end to end, repeated
    #[arg(long, default_value_t = 16)]
    mib: usize,
    /// Runs of each; the median is reported
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// Where the program sees its directory.
const GUEST_DIR: &str = "/data";

pub fn run(ctx: &Context, build: &Path, a: Args) -> anyhow::Result<Report> {
    let exe = artifact(build, "native/bzip2")?;
    let wasm = std::path::absolute(artifact(build, "wasm/bzip2.wasm")?)?;
    let input = corpus(&build.join("hpcc-1.5.0"), a.mib << 20)?;
    let dir = tempfile::Builder::new()
        .prefix("atoll-bench-compress")
        .tempdir()?;
    let file = dir.path().join("input");
    let node = atoll_node::Node::start(super::bench_node(ctx, Some(1)))?;
    node.runtime().load_file(&wasm, false)?;
    node.runtime().load_file(&wasm, true)?;
    let once = |way: Way, args: [&str; 2]| -> anyhow::Result<Duration> {
        let (_, time) = match way {
            Way::Native => native(&exe, &args.map(|a| host_path(dir.path(), a)))?,
            _ => {
                let mut job = job_on_kernel0(
                    wasm.clone(),
                    ["bzip2", args[0], args[1]].map(String::from).to_vec(),
                );
                job.prepare = way == Way::Prepared;
                job.preopens = vec![Preopen {
                    host: dir.path().to_path_buf(),
                    guest: GUEST_DIR.into(),
                }];
                atoll_job(&node, &job)?
            }
        };
        Ok(time)
    };
    let report = three_ways::compare(
        "compress",
        a.runs,
        format!(
            "bzip2 -9 of {} MiB of C source, then bzip2 -d of the result; the compressed bytes are native's, the decompressed file the input",
            a.mib
        ),
        |way| {
            std::fs::write(&file, &input)?;
            let packing = once(way, ["-9f", "/data/input"])?;
            let packed = std::fs::read(dir.path().join("input.bz2"))?;
            let unpacking = once(way, ["-df", "/data/input.bz2"])?;
            anyhow::ensure!(
                std::fs::read(&file)? == input,
                "bzip2 -d did not give the input back ({way:?})"
            );
            Ok((packing + unpacking, packed))
        },
    );
    node.shutdown();
    report
}

/// `arg` with the guest directory replaced by `dir`, for the native run.
fn host_path(dir: &Path, arg: &str) -> String {
    match arg.strip_prefix(GUEST_DIR) {
        Some(rest) => format!("{}{rest}", dir.display()),
        None => arg.to_owned(),
    }
}

/// `size` bytes of real text: the `.c` and `.h` files under `root`, in
/// path order, end to end, repeated.
fn corpus(root: &Path, size: usize) -> anyhow::Result<Vec<u8>> {
    let mut files = Vec::new();
    collect_sources(root, &mut files)
        .with_context(|| format!("reading {} (run `make guests`)", root.display()))?;
    files.sort();
    let mut text = Vec::new();
    for f in &files {
        text.extend(std::fs::read(f)?);
    }
    anyhow::ensure!(!text.is_empty(), "no C sources under {}", root.display());
    Ok(text.iter().copied().cycle().take(size).collect())
}

fn collect_sources(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_sources(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "c" || e == "h") {
            into.push(path);
        }
    }
    Ok(())
}
