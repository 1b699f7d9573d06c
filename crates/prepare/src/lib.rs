//! `atoll prepare`: turns any `wasm32-wasi` command into a *migratable* module.
//!
//! atoll runs programs as processes that can be stopped at any moment, hold no
//! OS thread while blocked, and move to another kernel or machine. Plain wasm
//! cannot do that: its call stack lives inside the engine, out of reach. This
//! crate rewrites a module, ahead of time and once, so that its whole state can
//! be taken out of the engine and put back into a fresh instance anywhere.
//!
//! # The transformation
//!
//! [`prepare`] applies these steps, in order:
//!
//! 1. **Parse and validate** with walrus. Anything that is not a valid module
//!    is [`PrepareError::Malformed`]; a valid module that is not a wasm32
//!    command (no `_start`, no single 32-bit memory exported as `memory`) is
//!    [`PrepareError::NotACommand`]. DWARF sections are dropped: they could
//!    not stay correct through the rewriting.
//! 2. **Add the yield flag's address and the safepoint import**: a mutable
//!    `i32` global initialised to 0 and exported as `atoll_flag_at`, and an
//!    import `atoll.safepoint : [] -> []`. The host raises the flag when the
//!    process must stop; the import is where it stops.
//! 3. **Insert safepoint checks**, a read of the flag and a branch
//!    to `call $atoll.safepoint`, at the start of every loop body and at
//!    the entry of every function that may recurse (in a cycle of the call
//!    graph, or calling through a table). Every cycle of control then passes
//!    a check, which bounds the time between two, so a spinning process can
//!    always be preempted. A loop's check branches *out* of the loop to the
//!    call and re-enters it at its header, and functions that cannot recurse
//!    get none: Asyncify then leaves alone every loop and function that
//!    calls nothing that may stop, and a tight loop pays two loads (the flag's address, the flag)
//!    and a well-predicted branch per iteration.
//! 4. **Reserve the top of memory** for Asyncify's buffer: the memory is
//!    declared [`conventions::ASYNCIFY_RESERVED_PAGES`] larger and the program's
//!    `memory.size` / `memory.grow` are rewritten to hide those top pages.
//!    Asyncify saves the stack *into linear memory*, and a C program owns all
//!    of the memory it can see (wasi-libc's malloc claims everything up to
//!    `memory.size`), so without this there is no safe place for it.
//! 5. **Export every mutable global** (`__stack_pointer` included) as
//!    `atoll_global_<N>`, `N` being its index in the input's global index
//!    space. Together with linear memory these are the whole data state of a
//!    stopped process, and the runtime saves and restores them by these names.
//! 6. **Apply binaryen's Asyncify** (`wasm-opt --optimize-level 2
//!    --asyncify`): every function that may reach an import learns to save
//!    its locals and position into linear memory (unwind) and to come back
//!    to the same point (rewind). Every import may unwind, so every system
//!    call is a safepoint too. Asyncify optimises the functions it
//!    instruments (see [`Options::optimize`]); the others are left as clang
//!    made them. Asyncify's state and data globals, which binaryen keeps
//!    internal, are then exported ([`conventions::ASYNCIFY_STATE_GLOBAL`]),
//!    so that the runtime can stop and resume a process without calling
//!    into it. Last, each check's read becomes a load from the node's flag
//!    memory, which the module now imports (`atoll.yield_flags`, see
//!    [`conventions`]): other threads can raise a flag there while the
//!    process runs, so the engine needs no epoch checks. In the same pass
//!    every call of an import is preceded by a write of Asyncify's state
//!    back to normal, which ends a rewind there without the runtime's help.
//! 7. **Mark the result** with a custom section `atoll.prepared` whose payload
//!    is `v1 <sha256 of the input>`, so that preparing twice is a no-op and a
//!    prepared module names its source.
//!
//! The names and the unwind/rewind protocol the runtime must follow are in
//! [`conventions`]; they are a contract with `atoll-process`.
//!
//! # Example
//!
//! ```no_run
//! use atoll_prepare::{content_hash, is_prepared, prepare, Options};
//!
//! let input = std::fs::read("prog.wasm")?;
//! let output = prepare(&input, &Options::default())?;
//! assert!(is_prepared(&output));
//! println!("{} -> {}", content_hash(&input), content_hash(&output));
//! std::fs::write("prog.atoll.wasm", output)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Requirements
//!
//! Step 6 runs binaryen's `wasm-opt` (version 108 or later), found as
//! `$ATOLL_WASM_OPT` or `wasm-opt` on `PATH` ([`Options::default`]).

pub mod conventions;
mod error;
mod flags;
mod hash;
mod instrument;
mod reserve;
mod rewind;
mod sections;
mod wasm_opt;

use std::path::PathBuf;

pub use error::PrepareError;
pub use hash::{content_hash, ContentHash, ParseContentHashError};

use conventions::{PREPARED_SECTION, PREPARED_VERSION};

/// Environment variable naming the `wasm-opt` executable to use.
pub const WASM_OPT_ENV: &str = "ATOLL_WASM_OPT";

/// How to prepare a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// The binaryen `wasm-opt` executable: a path, or a name looked up on
    /// `PATH`. Default: `$ATOLL_WASM_OPT` if set, else `wasm-opt`.
    pub wasm_opt: PathBuf,
    /// Let Asyncify optimise the functions it instruments (binaryen's
    /// optimize level 2). Default: true. Turning it off only makes sense to
    /// debug the transformation: the output is much larger and slower.
    pub optimize: bool,
}

impl Default for Options {
    fn default() -> Self {
        let wasm_opt = std::env::var_os(WASM_OPT_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from("wasm-opt"), PathBuf::from);
        Options {
            wasm_opt,
            optimize: true,
        }
    }
}

/// Makes `module` migratable (see the [crate] documentation for the steps).
///
/// A module that [`is_prepared`] already is returned unchanged, if this
/// version of atoll prepared it and it only reads the flag memory.
///
/// # Errors
///
/// - [`PrepareError::Malformed`] if `module` is not a valid wasm module,
/// - [`PrepareError::NotACommand`] if it is not a wasm32 command,
/// - [`PrepareError::ReservedName`] if it already uses one of the names
///   preparation adds,
/// - [`PrepareError::WasmOptMissing`], [`PrepareError::WasmOptFailed`] or
///   [`PrepareError::Io`] if binaryen could not do its part.
pub fn prepare(module: &[u8], options: &Options) -> Result<Vec<u8>, PrepareError> {
    if is_prepared(module) {
        if prepared_source(module).is_none() {
            return Err(PrepareError::Unsupported(format!(
                "prepared by another version of atoll (this one writes {PREPARED_VERSION}): \
                 give it the module as it was before preparation"
            )));
        }
        flags::check_reads_only(module)?;
        return Ok(module.to_vec());
    }
    let source = content_hash(module);
    let started = std::time::Instant::now();
    let without_dwarf = sections::strip_debug(module).map_err(PrepareError::Malformed)?;
    let instrumented = instrument::instrument(&without_dwarf)?;
    let asyncified = wasm_opt::asyncify(&instrumented, options)?;
    wasm_opt::check_output(&asyncified)?;
    let exported = wasm_opt::export_asyncify_globals(&asyncified)?;
    let mut prepared = flags::finish(&exported)?;
    let mark = format!("{PREPARED_VERSION} {source}");
    sections::append_custom(&mut prepared, PREPARED_SECTION, mark.as_bytes());
    tracing::info!(
        %source,
        input_bytes = module.len(),
        output_bytes = prepared.len(),
        elapsed = ?started.elapsed(),
        "prepared module"
    );
    Ok(prepared)
}

/// Whether `module` carries the `atoll.prepared` custom section, i.e. came
/// out of [`prepare`]. Only the section framing is looked at, so this is
/// cheap and never fails: garbage is simply not prepared. It is a marker, not
/// a proof: a runtime still has to find the exports it needs.
pub fn is_prepared(module: &[u8]) -> bool {
    sections::find_custom(module, PREPARED_SECTION).is_some()
}

/// The hash of the module a prepared `module` was made from, read from its
/// `atoll.prepared` section; `None` if it is not prepared or the section is
/// not of a version this crate knows.
pub fn prepared_source(module: &[u8]) -> Option<ContentHash> {
    let payload = sections::find_custom(module, PREPARED_SECTION)?;
    let text = std::str::from_utf8(payload).ok()?;
    let (version, hash) = text.split_once(' ')?;
    if version != PREPARED_VERSION {
        return None;
    }
    hash.parse().ok()
}
