//! Why a module could not be prepared.

use std::path::PathBuf;
use std::process::ExitStatus;

/// Why [`prepare`](crate::prepare) failed.
///
/// The first four variants are about the input and will not go away on a
/// retry; the others are about the machine (binaryen, temporary files).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The bytes are not a valid WebAssembly module; the message says why.
    #[error("not a valid wasm module: {0}")]
    Malformed(String),

    /// A valid module that atoll cannot run as a process: it has no `_start`
    /// export, or its linear memory is missing, not exported as `memory`,
    /// 64-bit, or not the only one. The message says which.
    #[error("not a wasm32 command: {0}")]
    NotACommand(String),

    /// The module already uses a name that preparation adds (an export
    /// `atoll_flag_at`, `atoll_global_*`, `atoll_asyncify_*` or `asyncify_*`, or the
    /// imports `atoll.safepoint` and `atoll.yield_flags`) but lacks the
    /// `atoll.prepared` section: it was made
    /// by some other tool, and preparing it again would produce a clash.
    #[error("module already uses the reserved name `{0}`")]
    ReservedName(String),

    /// A valid command that binaryen cannot prepare into a module that
    /// still runs; it can run unprepared (`atoll run --no-prepare`), without
    /// migration. The message says why.
    #[error("atoll cannot prepare this module ({0}); run it unprepared (--no-prepare)")]
    Unsupported(String),

    /// The `wasm-opt` executable could not be found.
    #[error(
        "wasm-opt not found at `{}` (install binaryen, e.g. `apt-get install binaryen`, \
         or set ATOLL_WASM_OPT)",
        path.display()
    )]
    WasmOptMissing {
        /// The path or command name that was tried.
        path: PathBuf,
    },

    /// `wasm-opt` ran and failed.
    #[error("wasm-opt failed ({status}): {stderr}")]
    WasmOptFailed {
        /// Its exit status.
        status: ExitStatus,
        /// What it printed on standard error.
        stderr: String,
    },

    /// Temporary files for `wasm-opt` could not be written or read back, or
    /// `wasm-opt` could not be started for a reason other than being missing.
    #[error("i/o error while running wasm-opt: {0}")]
    Io(#[from] std::io::Error),
}
