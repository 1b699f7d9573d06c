//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test binary uses its own subset

pub mod runtime;
pub mod wasi;

use std::process::Command;

use atoll_prepare::{prepare, Options};

/// Options for tests that need binaryen. Fails (never skips) with a clear
/// message when `wasm-opt` is not installed: a green run must mean that the
/// Asyncify contract was actually checked.
pub fn options() -> Options {
    let options = Options::default();
    let found = Command::new(&options.wasm_opt).arg("--version").output();
    match found {
        Ok(out) if out.status.success() => options,
        _ => panic!(
            "these tests need binaryen's wasm-opt, not found at `{}`: install binaryen \
             (`apt-get install binaryen`) or set ATOLL_WASM_OPT",
            options.wasm_opt.display()
        ),
    }
}

/// Compiles WAT text and prepares it.
pub fn prepare_wat(wat: &str) -> Vec<u8> {
    let wasm = wat::parse_str(wat).expect("test WAT parses");
    prepare(&wasm, &options()).expect("prepare succeeds")
}

/// A command with a loop that touches memory and a global, a recursive
/// function with a shadow stack (through a mutable `$sp` global, like clang's
/// `__stack_pointer`), and a memory that grows. Calls `env.tick` once per loop
/// iteration and once per call of `$fib`, so the host can raise the yield flag
/// at any point.
///
/// Globals (input indices): 0 `$sp`, 1 `$k` (immutable), 2 `$acc`.
pub const LOOPY_WAT: &str = r#"
(module
  (import "env" "tick" (func $tick))
  (memory (export "memory") 1)
  (global $sp (mut i32) (i32.const 65536))
  (global $k i32 (i32.const 31))
  (global $acc (mut i64) (i64.const 0))

  ;; Naive fib. Each call pushes a 16-byte frame holding n on the shadow stack
  ;; and checks on the way out that it is still there.
  (func $fib (export "fib") (param $n i32) (result i64)
    (local $r i64)
    (call $tick)
    (global.set $sp (i32.sub (global.get $sp) (i32.const 16)))
    (i32.store (global.get $sp) (local.get $n))
    (local.set $r
      (if (result i64) (i32.lt_u (local.get $n) (i32.const 2))
        (then (i64.extend_i32_u (local.get $n)))
        (else
          (i64.add
            (call $fib (i32.sub (local.get $n) (i32.const 1)))
            (call $fib (i32.sub (local.get $n) (i32.const 2)))))))
    (if (i32.ne (i32.load (global.get $sp)) (local.get $n)) (then unreachable))
    (global.set $sp (i32.add (global.get $sp) (i32.const 16)))
    (local.get $r))

  ;; sum over i < n of fib(i % 12) + mem[i / 2], where mem[i] = i * i is stored
  ;; in the second page; xor'ed with acc = acc * k + i.
  (func $run (export "run") (param $n i32) (result i64)
    (local $i i32) (local $sum i64)
    (if (i32.lt_u (memory.size) (i32.const 2))
      (then (drop (memory.grow (i32.const 1)))))
    (loop $l
      (call $tick)
      (i32.store
        (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2)))
        (i32.mul (local.get $i) (local.get $i)))
      (local.set $sum
        (i64.add
          (i64.add (local.get $sum) (call $fib (i32.rem_u (local.get $i) (i32.const 12))))
          (i64.extend_i32_u
            (i32.load
              (i32.add (i32.const 65536)
                (i32.shl (i32.shr_u (local.get $i) (i32.const 1)) (i32.const 2)))))))
      (global.set $acc
        (i64.add
          (i64.mul (global.get $acc) (i64.extend_i32_u (global.get $k)))
          (i64.extend_i32_u (local.get $i))))
      (br_if $l (i32.lt_u (local.tee $i (i32.add (local.get $i) (i32.const 1)))
                          (local.get $n))))
    (i64.xor (local.get $sum) (global.get $acc)))

  (func (export "_start") (drop (call $run (i32.const 100)))))
"#;
