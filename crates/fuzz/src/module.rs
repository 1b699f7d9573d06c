//! Modules to prepare: `atoll prepare` on damaged commands and on valid
//! generated ones. Preparing never panics: a module is refused with a
//! reason, or prepared into one that wasmtime compiles and that keeps a
//! command's exports.

use std::process::Command;
use std::sync::OnceLock;

use arbitrary::Unstructured;
use atoll_prepare::{prepare, Options, PrepareError};
use wasmtime::{Engine, Module};

use crate::{Outcome, Target};

pub fn damaged(data: &[u8]) -> Outcome {
    match prepare(data, options()) {
        Ok(out) => {
            check_prepared(&out);
            // One byte short, its last section is cut: never a module.
            let cut = prepare(&data[..data.len() - 1], options());
            assert!(
                matches!(
                    cut,
                    Err(PrepareError::Malformed(_) | PrepareError::NotACommand(_))
                ),
                "a module cut short was not refused as malformed: {cut:?}"
            );
            Outcome::Accepted
        }
        Err(_) => Outcome::Refused,
    }
}

pub fn generated(data: &[u8]) -> Outcome {
    let mut bytes = Unstructured::new(data);
    let Ok(module) = wasm_smith::Module::new(smith(), &mut bytes) else {
        return Outcome::Skipped;
    };
    let wasm = module.to_bytes();
    // Only what wasmtime itself runs is a command to prepare.
    if Module::validate(engine(), &wasm).is_err() {
        return Outcome::Skipped;
    }
    match prepare(&wasm, options()) {
        Ok(out) => {
            check_prepared(&out);
            Outcome::Accepted
        }
        // What binaryen 108 cannot handle (Asyncify over reference locals,
        // some bulk-memory encodings): refused, with its reason.
        Err(_) => Outcome::Refused,
    }
}

fn check_prepared(out: &[u8]) {
    let module = Module::new(engine(), out)
        .unwrap_or_else(|e| panic!("a prepared module does not compile: {e:?}"));
    assert!(
        module.get_export("_start").is_some() && module.get_export("memory").is_some(),
        "a prepared module lost a command's exports"
    );
}

/// What wasm-smith makes: the features wasmtime runs and binaryen 108
/// prepares (no threads, exceptions, GC, 64-bit memory, extended
/// constants), a command's exports, and no memory but the exported one.
fn smith() -> wasm_smith::Config {
    let exports =
        wat::parse_str(r#"(module (func (export "_start")) (memory (export "memory") 1))"#)
            .expect("the exports' WAT parses");
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

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(Engine::default)
}

/// Preparation's options. A module target without binaryen would refuse
/// everything and find nothing, so a missing `wasm-opt` is a failure.
fn options() -> &'static Options {
    static OPTIONS: OnceLock<Options> = OnceLock::new();
    OPTIONS.get_or_init(|| {
        let options = Options::default();
        match Command::new(&options.wasm_opt).arg("--version").output() {
            Ok(out) if out.status.success() => options,
            _ => panic!(
                "the module targets need binaryen's wasm-opt, not found at `{}`: install \
                 binaryen or set ATOLL_WASM_OPT",
                options.wasm_opt.display()
            ),
        }
    })
}

/// Fails at once, before a fuzzer starts, if `target` cannot run here.
pub fn check_tools(target: Target) {
    if matches!(target, Target::Module | Target::Generated) {
        options();
    }
}

/// Commands as compilers make them, each reaching other parts of
/// preparation: a safepoint loop over an import, WASI calls with a data
/// segment, globals of every type, an indirect call through a table,
/// recursion, and memory growth.
const SEEDS: &[&str] = &[
    r#"(module
  (import "env" "tick" (func))
  (memory (export "memory") 1)
  (global (mut i32) (i32.const 0))
  (func (export "_start")
    (loop (call 0) (br_if 0 (global.get 0)))))"#,
    r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $exit (i32.const 0))))"#,
    r#"(module
  (import "wasi_snapshot_preview1" "sched_yield" (func $yield (result i32)))
  (memory (export "memory") 1 4)
  (global $a (mut i64) (i64.const -1))
  (global $b (mut f32) (f32.const 1.5))
  (global $c (mut f64) (f64.const 2.5))
  (table 2 funcref)
  (elem (i32.const 0) $fib $grow)
  (type $unary (func (param i32) (result i32)))
  (func $fib (type $unary)
    (if (result i32) (i32.lt_u (local.get 0) (i32.const 2))
      (then (drop (call $yield)) (local.get 0))
      (else (i32.add
        (call $fib (i32.sub (local.get 0) (i32.const 1)))
        (call $fib (i32.sub (local.get 0) (i32.const 2)))))))
  (func $grow (type $unary) (memory.grow (local.get 0)))
  (func (export "_start")
    (global.set $a (i64.extend_i32_u
      (call_indirect (type $unary) (i32.const 10) (i32.const 0))))
    (global.set $b (f32.add (global.get $b) (f32.const 1)))
    (global.set $c (f64.mul (global.get $c) (f64.const 2)))
    (drop (call_indirect (type $unary) (i32.const 1) (i32.const 1)))))"#,
];

pub fn seeds() -> Vec<Vec<u8>> {
    SEEDS
        .iter()
        .map(|wat| wat::parse_str(wat).expect("the seeds' WAT parses"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_prepares() {
        for seed in seeds() {
            assert_eq!(damaged(&seed), Outcome::Accepted);
        }
    }
}
