//! Step 6 of preparation: binaryen's Asyncify (and optimisation), run as the
//! `wasm-opt` program over temporary files, and its globals exported.

use std::io::ErrorKind;
use std::process::Command;

use wasmparser::{ExternalKind, Operator, Parser, Payload, TypeRef, Validator, WasmFeatures};

use crate::conventions::{
    ASYNCIFY_DATA_GLOBAL, ASYNCIFY_GET_STATE, ASYNCIFY_START_UNWIND, ASYNCIFY_STATE_GLOBAL,
};
use crate::sections::add_global_exports;
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

/// Exports Asyncify's two globals, its state and the address of its data,
/// as [`ASYNCIFY_STATE_GLOBAL`] and [`ASYNCIFY_DATA_GLOBAL`]: the runtime
/// starts and stops unwinds and rewinds by setting them, as binaryen's
/// `asyncify_*` functions do, without a call into the guest for each.
///
/// binaryen keeps them internal, so they are found in its functions:
/// `asyncify_get_state` is `global.get $state`, and
/// `asyncify_start_unwind` sets `$data` from its parameter.
pub(crate) fn export_asyncify_globals(wasm: &[u8]) -> Result<Vec<u8>, PrepareError> {
    let unexpected =
        |what: &str| PrepareError::Unsupported(format!("binaryen's Asyncify output: {what}"));
    let malformed = |e: wasmparser::BinaryReaderError| PrepareError::Malformed(e.to_string());
    let (mut imported_funcs, mut get_state, mut start_unwind) = (0, None, None);
    let (mut state, mut data) = (None, None);
    let mut body_index = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(malformed)? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if matches!(import.map_err(malformed)?.ty, TypeRef::Func(_)) {
                        imported_funcs += 1;
                    }
                }
            }
            Payload::ExportSection(exports) => {
                for export in exports {
                    let export = export.map_err(malformed)?;
                    match (export.name, export.kind) {
                        (ASYNCIFY_GET_STATE, ExternalKind::Func) => get_state = Some(export.index),
                        (ASYNCIFY_START_UNWIND, ExternalKind::Func) => {
                            start_unwind = Some(export.index)
                        }
                        _ => {}
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let index = imported_funcs + body_index;
                body_index += 1;
                if Some(index) != get_state && Some(index) != start_unwind {
                    continue;
                }
                let mut previous = None;
                for op in body.get_operators_reader().map_err(malformed)? {
                    let op = op.map_err(malformed)?;
                    match (&previous, &op) {
                        (_, Operator::GlobalGet { global_index }) if Some(index) == get_state => {
                            state = Some(*global_index)
                        }
                        (
                            Some(Operator::LocalGet { local_index: 0 }),
                            Operator::GlobalSet { global_index },
                        ) if Some(index) == start_unwind => data = Some(*global_index),
                        _ => {}
                    }
                    previous = Some(op);
                }
            }
            _ => {}
        }
    }
    let state = state.ok_or_else(|| unexpected("no state global in `asyncify_get_state`"))?;
    let data = data.ok_or_else(|| unexpected("no data global in `asyncify_start_unwind`"))?;
    if state == data {
        return Err(unexpected("state and data are one global"));
    }
    add_global_exports(
        wasm,
        &[(ASYNCIFY_STATE_GLOBAL, state), (ASYNCIFY_DATA_GLOBAL, data)],
    )
    .map_err(PrepareError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// binaryen's functions, as binaryen 108 writes them, with the state
    /// global at index 1 and the data global at index 2.
    const ASYNCIFIED: &str = r#"(module
      (memory (export "memory") 1)
      (global (mut i32) (i32.const 65536))
      (global (mut i32) (i32.const 0))
      (global (mut i32) (i32.const 0))
      (func (export "asyncify_start_unwind") (param i32)
        (global.set 1 (i32.const 1))
        (global.set 2 (local.get 0)))
      (func (export "asyncify_get_state") (result i32) (global.get 1)))"#;

    fn exported_globals(wasm: &[u8]) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::ExportSection(r) = payload.unwrap() {
                for e in r {
                    let e = e.unwrap();
                    if e.kind == ExternalKind::Global {
                        out.push((e.name.to_owned(), e.index));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn finds_the_state_and_data_globals() {
        let out = export_asyncify_globals(&wat::parse_str(ASYNCIFIED).unwrap()).unwrap();
        assert_eq!(
            exported_globals(&out),
            [
                (ASYNCIFY_STATE_GLOBAL.to_owned(), 1),
                (ASYNCIFY_DATA_GLOBAL.to_owned(), 2)
            ]
        );
    }

    #[test]
    fn a_module_without_asyncify_is_refused() {
        let plain = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
        let err = export_asyncify_globals(&plain).unwrap_err();
        assert!(matches!(err, PrepareError::Unsupported(_)), "{err}");
    }
}
