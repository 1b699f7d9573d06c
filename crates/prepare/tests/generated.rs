//! `atoll prepare` on generated modules: valid commands of random shape
//! (wasm-smith), with the exports a command has. Preparing one never
//! panics: it is refused with a reason (a second memory, something binaryen
//! cannot handle) or prepared, and what is prepared validates and keeps
//! those exports.
//!
//! `ATOLL_FUZZ_CASES` sets the number of seeds (default 64; each valid
//! module runs wasm-opt); `bench/results/fuzz.md` records longer runs.

mod common;

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use arbitrary::Unstructured;
use atoll_prepare::prepare;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};
use wasmtime::{Engine, Module};

use common::options;

fn cases() -> u32 {
    std::env::var("ATOLL_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// What wasm-smith makes: the features wasmtime runs and binaryen 108
/// prepares (no threads, exceptions, GC, 64-bit memory, extended
/// constants), a command's exports, and no memory but the exported one.
fn smith() -> wasm_smith::Config {
    let exports =
        wat::parse_str(r#"(module (func (export "_start")) (memory (export "memory") 1))"#)
            .unwrap();
    wasm_smith::Config {
        exports: Some(exports),
        // The exported memory is the one: no other.
        max_memories: 0,
        // binaryen 108 does not know extended constant expressions.
        extended_const_enabled: false,
        memory64_enabled: false,
        threads_enabled: false,
        exceptions_enabled: false,
        gc_enabled: false,
        tail_call_enabled: false,
        simd_enabled: false,
        relaxed_simd_enabled: false,
        custom_page_sizes_enabled: false,
        max_imports: 0,
        ..wasm_smith::Config::default()
    }
}

#[test]
fn generated_commands_prepare_or_fail_cleanly() {
    let engine = Engine::default();
    // The same modules on every run, so that the count of prepared ones
    // is the same: most seeds make a module wasmtime refuses (GC types).
    let runs = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(runs.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(runs, rng);
    let seeds = proptest::collection::vec(any::<u8>(), 256..8192);
    let (prepared, refused) = (AtomicU32::new(0), AtomicU32::new(0));
    runner
        .run(&seeds, |seed| {
            let mut u = Unstructured::new(&seed);
            let Ok(module) = wasm_smith::Module::new(smith(), &mut u) else {
                return Ok(());
            };
            let wasm = module.to_bytes();
            // Only what wasmtime itself would run is a command to prepare.
            if Module::validate(&engine, &wasm).is_err() {
                return Ok(());
            }
            match prepare(&wasm, &options()) {
                Ok(out) => {
                    prepared.fetch_add(1, Relaxed);
                    let m = Module::new(&engine, &out);
                    prop_assert!(m.is_ok(), "a prepared module does not validate: {m:?}");
                    let m = m.unwrap();
                    prop_assert!(
                        m.get_export("_start").is_some() && m.get_export("memory").is_some()
                    );
                }
                // What binaryen 108 cannot handle (Asyncify over reference
                // locals, some bulk-memory encodings): refused, with its
                // reason.
                Err(_) => {
                    refused.fetch_add(1, Relaxed);
                }
            }
            Ok(())
        })
        .unwrap();
    let (prepared, refused) = (prepared.into_inner(), refused.into_inner());
    eprintln!("prepare: {prepared} generated commands prepared, {refused} refused");
    assert!(prepared > 0, "no generated module could be prepared");
}
