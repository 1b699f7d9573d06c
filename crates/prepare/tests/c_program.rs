//! A real wasm32-wasi command compiled from C by clang (libc, malloc,
//! `__stack_pointer`, a deep recursion), prepared and run in wasmtime: plain,
//! prepared, and prepared while being preempted by a timer and migrated to a
//! fresh instance at every stop, as the runtime will do it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use atoll_prepare::conventions::START_EXPORT;
use atoll_prepare::prepare;
use wasmtime::{Linker, Module, Store};

use common::runtime::{add_safepoint, engine, run_migrating, Flags, Process};
use common::wasi::{self, Wasi};

/// `tests/fixtures/mergesort.c`, built by `tests/fixtures/build.sh`.
const MERGESORT: &[u8] = include_bytes!("fixtures/mergesort.wasm");
const ARGS: [&str; 3] = ["mergesort", "200000", "3"];

fn args() -> Vec<String> {
    ARGS.iter().map(|a| a.to_string()).collect()
}

/// Runs `_start` once, without preemption: (exit code, output).
fn run_once(wasm: &[u8]) -> (i32, String) {
    let engine = engine();
    let module = Module::new(&engine, wasm).unwrap();
    let mut linker = Linker::new(&engine);
    wasi::add_to_linker(&mut linker).unwrap();
    // Never called: the flag stays down.
    add_safepoint(&mut linker, &Flags::new(&engine));
    let mut store = Store::new(
        &engine,
        Wasi {
            args: args(),
            ..Wasi::default()
        },
    );
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let start = instance
        .get_typed_func::<(), ()>(&mut store, START_EXPORT)
        .unwrap();
    let code = wasi::exit_code(start.call(&mut store, ())).unwrap();
    (code, String::from_utf8(store.into_data().output).unwrap())
}

/// Runs `_start` with a timer raising the yield flag every `period`,
/// migrating at every stop: (exit code, output, migrations).
fn run_preempted(wasm: &[u8], period: Duration) -> (i32, String, u32) {
    let engine = engine();
    let module = Module::new(&engine, wasm).unwrap();
    let flags = Flags::new(&engine);
    let mut linker = Linker::new(&engine);
    wasi::add_to_linker(&mut linker).unwrap();
    add_safepoint(&mut linker, &flags);

    // The quantum timer: the runtime's scheduler tick.
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (flags, done) = (flags.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                flags.raise();
            }
        })
    };

    let outcome = run_migrating(Process {
        engine: &engine,
        module: &module,
        linker: &linker,
        state: &mut |previous: Option<Wasi>| {
            previous.unwrap_or_else(|| Wasi {
                args: args(),
                ..Wasi::default()
            })
        },
        setup: &mut |_, _| {},
        call: &mut |store, instance| {
            let start = instance.get_typed_func::<(), ()>(&mut *store, START_EXPORT)?;
            wasi::exit_code(start.call(&mut *store, ()))
        },
    });
    done.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
    let code = outcome.result.unwrap();
    println!(
        "{} migrations, at most {} bytes of saved stack",
        outcome.migrations, outcome.max_saved
    );
    (
        code,
        String::from_utf8(outcome.state.output).unwrap(),
        outcome.migrations,
    )
}

#[test]
fn mergesort_survives_preemption_and_migration() {
    let prepared = prepare(MERGESORT, &common::options()).unwrap();
    let (code, output) = run_once(MERGESORT);
    assert_eq!(code, 0, "{output}");
    assert!(
        output.starts_with("n=200000 rounds=3 checksum="),
        "{output}"
    );
    assert_eq!(
        run_once(&prepared),
        (code, output.clone()),
        "prepared, never stopped"
    );

    let (p_code, p_output, migrations) = run_preempted(&prepared, Duration::from_millis(1));
    assert_eq!(
        (p_code, p_output),
        (code, output),
        "prepared, migrated {migrations} times"
    );
    assert!(migrations > 0, "the timer never stopped the process");
}
