//! atoll's fuzz targets: what it reads from bytes it did not make.
//!
//! Each [`Target`] takes any bytes and must never panic, hang or exhaust
//! memory; each also checks what a correct answer looks like (an image
//! decodes alike as a view and whole, a frame cut short is never taken
//! whole, a prepared module runs). The bodies are written once here and
//! driven two ways:
//!
//! - **libFuzzer**, coverage-guided, for long runs: one binary per target
//!   (`fuzz_targets/`), built with LLVM's coverage instrumentation by
//!   `scripts/fuzz.sh TARGET SECONDS` on stable Rust;
//! - **proptest**, for CI's brief runs (`tests/targets.rs`): random bytes
//!   and the target's seeds with bytes changed and cut short.
//!
//! `bench/results/fuzz.md` records the long runs and what they found. The
//! fourth kind of input, system calls with random arguments from guests,
//! needs a node and lives beside it (`crates/node/tests/fuzz.rs`).

mod frames;
mod image;
mod module;

use std::path::Path;

/// What one input did. The CI driver counts these, so that a run that
/// never reaches a target's deeper checks fails rather than passing idly;
/// libFuzzer keeps no `Skipped` input in its corpus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Refused with an error, as bad input must be.
    Refused,
    /// Taken, and what was made of it passed the target's checks.
    Accepted,
    /// Not an input this target is about (a generated module wasmtime
    /// itself would refuse).
    Skipped,
}

/// A fuzz target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A process image (a checkpoint file, a migration's payload): the
    /// bytes as a whole file, and as a payload behind a header and checksum
    /// that match it, which reaches the payload's decoder.
    Image,
    /// A frame off a link between nodes (a kernel message) and off the
    /// daemon's socket (a request).
    Frames,
    /// A module to prepare, damaged: a real command mutated.
    Module,
    /// A module to prepare, valid: the bytes choose a random command
    /// (wasm-smith) that wasmtime runs.
    Generated,
}

impl Target {
    pub const ALL: [Target; 4] = [
        Target::Image,
        Target::Frames,
        Target::Module,
        Target::Generated,
    ];

    /// The name `scripts/fuzz.sh` and the binaries (`fuzz-NAME`) use.
    pub fn name(self) -> &'static str {
        match self {
            Target::Image => "image",
            Target::Frames => "frames",
            Target::Module => "module",
            Target::Generated => "generated",
        }
    }

    /// Feeds `data` to the target.
    ///
    /// # Panics
    /// When atoll does something wrong with it: that is the finding.
    pub fn run(self, data: &[u8]) -> Outcome {
        match self {
            Target::Image => image::run(data),
            Target::Frames => frames::run(data),
            Target::Module => module::damaged(data),
            Target::Generated => module::generated(data),
        }
    }

    /// Valid inputs of today's formats to start from; mutating them reaches
    /// deeper than random bytes do. None for [`Target::Generated`], whose
    /// every input makes a valid module.
    pub fn seeds(self) -> Vec<Vec<u8>> {
        match self {
            Target::Image => image::seeds(),
            Target::Frames => frames::seeds(),
            Target::Module => module::seeds(),
            Target::Generated => Vec::new(),
        }
    }

    /// Writes the seeds into libFuzzer's corpus directory (its first
    /// argument that is not an option) when that directory is missing or
    /// empty: a first run starts from valid inputs of the current formats,
    /// and a later one from what earlier runs found. Seeds are made by the
    /// code rather than kept as files, so they follow format versions.
    ///
    /// # Panics
    /// When the directory cannot be written, or the target cannot run here
    /// (no `wasm-opt` for the module targets).
    pub fn plant_seeds(self) {
        module::check_tools(self);
        let corpus = std::env::args()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .map(std::path::PathBuf::from);
        let Some(dir) = corpus else { return };
        if dir.is_file() || dir.read_dir().is_ok_and(|mut d| d.next().is_some()) {
            return;
        }
        write_seeds(&dir, &self.seeds())
            .unwrap_or_else(|e| panic!("writing seeds into {}: {e}", dir.display()));
    }
}

fn write_seeds(dir: &Path, seeds: &[Vec<u8>]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i}")), seed)?;
    }
    Ok(())
}
