//! Step 5 of preparation: binaryen's Asyncify (and optimisation), run as the
//! `wasm-opt` program over temporary files.

use std::io::ErrorKind;
use std::process::Command;

use wasmparser::{Validator, WasmFeatures};

use crate::{Options, PrepareError};

/// Features enabled on top of those the module's `target_features` section
/// declares (binaryen reads that section itself). clang and rustc emit the
/// section, but hand-written or re-encoded modules may lack it, and binaryen
/// 108 defaults to the MVP, so it would reject e.g. `i32.extend8_s` or
/// `ref.null` (the generated-module tests found the latter). These are
/// features wasmtime has enabled by default for years: binaryen may now also
/// use them in its output, which is fine for every engine atoll runs on.
const BASELINE_FEATURES: &[&str] = &[
    "--enable-mutable-globals",
    "--enable-sign-ext",
    "--enable-nontrapping-float-to-int",
    "--enable-bulk-memory",
    "--enable-reference-types",
    "--enable-multivalue",
    "--enable-simd",
];

/// Runs `wasm-opt [--optimize-level 2] --asyncify` over `wasm` and returns
/// its output.
pub(crate) fn asyncify(wasm: &[u8], options: &Options) -> Result<Vec<u8>, PrepareError> {
    let dir = tempfile::Builder::new().prefix("atoll-prepare").tempdir()?;
    let input = dir.path().join("in.wasm");
    let output = dir.path().join("out.wasm");
    std::fs::write(&input, wasm)?;

    let mut command = Command::new(&options.wasm_opt);
    command.arg(&input).args(BASELINE_FEATURES);
    if options.optimize {
        // The level Asyncify optimises the functions it instruments at, and
        // nothing else: the others come out of clang already optimised,
        // and binaryen's whole -O2 pipeline over every function took more
        // than half of the time and made the code slower (bzip2 by 8 %, an
        // insertion sort by 25 %; a mergesort 6 % faster).
        command.args(["--optimize-level", "2"]);
    }
    // Asyncify with its default import list: every import may unwind, so
    // every system call (and atoll.safepoint) is a place the process can stop.
    command.arg("--asyncify");
    // Keep the name section: traps in a process should name their functions.
    command.arg("--debuginfo");
    command.arg("-o").arg(&output);
    tracing::debug!(?command, "running binaryen");

    let result = command.output().map_err(|e| match e.kind() {
        ErrorKind::NotFound => PrepareError::WasmOptMissing {
            path: options.wasm_opt.clone(),
        },
        _ => PrepareError::Io(e),
    })?;
    if !result.status.success() {
        return Err(PrepareError::WasmOptFailed {
            status: result.status,
            stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
        });
    }
    let out = std::fs::read(&output)?;
    // On a full disk wasm-opt has been seen to exit 0 having written
    // nothing: that is not a module to mark prepared and cache.
    if !out.starts_with(b"\0asm") {
        return Err(PrepareError::Io(std::io::Error::other(format!(
            "wasm-opt succeeded but wrote no module ({} bytes; is the disk full?)",
            out.len()
        ))));
    }
    Ok(out)
}

/// What binaryen writes must validate without GC, as an engine that runs
/// atoll's processes has it (wasmtime without its `gc` feature). binaryen
/// 108 may write a typed function reference in the encoding of a draft of
/// that proposal (`0x6c`), which today reads as a GC type (the prepare
/// fuzzer found a `funcref` local turned into one): such a module is
/// refused here, with the reason, rather than prepared into one that
/// cannot run.
pub(crate) fn check_output(wasm: &[u8]) -> Result<(), PrepareError> {
    let features = WasmFeatures::default() - WasmFeatures::GC - WasmFeatures::GC_TYPES;
    Validator::new_with_features(features)
        .validate_all(wasm)
        .map(drop)
        .map_err(|e| {
            PrepareError::Unsupported(format!(
                "binaryen wrote a module that does not validate: {e}"
            ))
        })
}
