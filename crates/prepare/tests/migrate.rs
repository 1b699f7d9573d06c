//! The contract the runtime relies on, checked end to end in wasmtime: stop a
//! prepared module at a safepoint, carry its memory and `atoll_global_*` to a
//! *fresh* instance, rewind there, and get the same result as a run that was
//! never interrupted.

mod common;

use wasmtime::{Caller, Engine, Linker, Module, Store};

use common::runtime::{add_safepoint, engine, run_migrating, Flags, Process};
use common::{prepare_wat, LOOPY_WAT};

/// Host state of one instance. `ticks` is the host's own bookkeeping, carried
/// from instance to instance like the runtime's per-process data would be.
#[derive(Default)]
struct Host {
    ticks: u64,
    /// Raise the yield flag every this many ticks (0: never).
    yield_every: u64,
}

/// `env.tick`, raising `flags` (if any) every `yield_every` ticks.
fn add_tick(linker: &mut Linker<Host>, flags: Option<Flags>) {
    linker
        .func_wrap("env", "tick", move |mut caller: Caller<'_, Host>| {
            caller.data_mut().ticks += 1;
            let Host { ticks, yield_every } = *caller.data();
            if let (Some(flags), true) = (&flags, yield_every > 0 && ticks % yield_every == 0) {
                flags.raise();
            }
        })
        .unwrap();
}

/// Calls `export(arg)` on the prepared module, raising the yield flag every
/// `yield_every` ticks and moving the process to a new instance at each stop.
/// Returns the result and the number of migrations.
fn run_prepared(wasm: &[u8], export: &str, arg: i32, yield_every: u64) -> (i64, u32) {
    let engine = engine();
    let module = Module::new(&engine, wasm).unwrap();
    let flags = Flags::new(&engine);
    let mut linker = Linker::new(&engine);
    add_tick(&mut linker, Some(flags.clone()));
    add_safepoint(&mut linker, &flags);
    let outcome = run_migrating(Process {
        engine: &engine,
        module: &module,
        linker: &linker,
        state: &mut |previous: Option<Host>| Host {
            ticks: previous.map_or(0, |p| p.ticks),
            yield_every,
        },
        setup: &mut |_, _| {},
        call: &mut |store, instance| {
            instance
                .get_typed_func::<i32, i64>(&mut *store, export)?
                .call(&mut *store, arg)
        },
    });
    (outcome.result.unwrap(), outcome.migrations)
}

/// The reference: the *unprepared* module, run straight through.
fn run_original(export: &str, arg: i32) -> i64 {
    let engine = Engine::default();
    let module = Module::new(&engine, wat::parse_str(LOOPY_WAT).unwrap()).unwrap();
    let mut linker = Linker::new(&engine);
    add_tick(&mut linker, None);
    let mut store = Store::new(
        &engine,
        Host {
            ticks: 0,
            yield_every: 0,
        },
    );
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let func = instance
        .get_typed_func::<i32, i64>(&mut store, export)
        .unwrap();
    func.call(&mut store, arg).unwrap()
}

#[test]
fn migrating_at_every_kind_of_safepoint_gives_the_same_result() {
    let prepared = prepare_wat(LOOPY_WAT);
    let expected = run_original("run", 200);
    assert_eq!(
        run_prepared(&prepared, "run", 200, 0),
        (expected, 0),
        "never interrupted"
    );
    // Different periods stop the process in the loop, deep in the recursion
    // and right after a rewind.
    for every in [1, 2, 3, 7, 61, 997] {
        let (result, migrations) = run_prepared(&prepared, "run", 200, every);
        assert_eq!(result, expected, "yield every {every} ticks");
        assert!(migrations > 0, "yield every {every} ticks never stopped");
    }
}

#[test]
fn recursion_without_loops_is_preemptible() {
    // `fib` has no loop: only the safepoint checks at function entries can
    // stop it.
    let prepared = prepare_wat(LOOPY_WAT);
    let expected = run_original("fib", 15);
    assert_eq!(expected, 610);
    let (result, migrations) = run_prepared(&prepared, "fib", 15, 5);
    assert_eq!(result, expected);
    assert!(migrations > 100, "only {migrations} migrations");
}
