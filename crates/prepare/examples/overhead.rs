//! Measures what preparation costs on a real program: size, time to prepare,
//! compile time and run time in wasmtime, and the cost of being preempted.
//!
//! ```text
//! cargo run --release -p atoll-prepare --example overhead -- \
//!     crates/prepare/tests/fixtures/mergesort.wasm 1000000 5
//! ```
//!
//! The program gets only a few stub WASI calls (args, stdout, exit): enough
//! for small C benchmarks.

#[path = "../tests/common/runtime.rs"]
mod runtime;
#[path = "../tests/common/wasi.rs"]
mod wasi;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_prepare::conventions::{START_EXPORT, YIELD_GLOBAL};
use atoll_prepare::{prepare, Options};
use wasmtime::{Config, Engine, Linker, Module, Store, UpdateDeadline};

use runtime::{add_safepoint, run_migrating, Process};
use wasi::Wasi;

const RUNS: usize = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let path = argv.next().ok_or("usage: overhead FILE.wasm [ARGS...]")?;
    let args: Vec<String> = std::iter::once(path.clone()).chain(argv).collect();
    let input = std::fs::read(&path)?;

    let options = Options::default();
    let (prepared, prepare_time) = best_of(3, || prepare(&input, &options).unwrap());
    let unoptimised = prepare(&input, &Options { optimize: false, ..options.clone() })?;
    println!("size: input {} B, prepared {} B ({:+.1}%), prepared without -O2 {} B",
        input.len(), prepared.len(), percent(prepared.len(), input.len()), unoptimised.len());
    println!("prepare: {prepare_time:?}");

    let engine = Engine::default();
    let (plain, plain_compile) = best_of(3, || Module::new(&engine, &input).unwrap());
    let (migratable, prepared_compile) = best_of(3, || Module::new(&engine, &prepared).unwrap());
    println!("wasmtime compile: plain {plain_compile:?}, prepared {prepared_compile:?}");

    let plain_run = median(|| run(&engine, &plain, &args));
    let prepared_run = median(|| run(&engine, &migratable, &args));
    println!("run: plain {plain_run:?}, prepared {prepared_run:?} ({:+.1}%)",
        percent(prepared_run.as_nanos() as usize, plain_run.as_nanos() as usize));

    // The timer raises atoll_yield through wasmtime's epoch callback, which
    // needs an engine compiled with epoch checks.
    let mut config = Config::new();
    config.epoch_interruption(true);
    let engine = Engine::new(&config)?;
    let migratable = Module::new(&engine, &prepared)?;
    let epoch_run = median(|| run(&engine, &migratable, &args));
    println!("run, prepared, with epoch checks but never stopped: {epoch_run:?}");
    for quantum in [Duration::from_millis(10), Duration::from_millis(1)] {
        let (time, stops, saved) = run_preempted(&engine, &migratable, &args, quantum);
        let prepared_run = epoch_run;
        let per_stop = time.saturating_sub(prepared_run) / stops.max(1);
        println!("preempted every {quantum:?} and migrated to a fresh instance each time: \
                  {time:?}, {stops} stops, ~{per_stop:?} per stop, <= {saved} B of saved stack");
    }
    Ok(())
}

fn percent(new: usize, old: usize) -> f64 {
    (new as f64 / old as f64 - 1.0) * 100.0
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = None;
    for _ in 0..n {
        let start = Instant::now();
        let value = f();
        let elapsed = start.elapsed();
        if best.as_ref().is_none_or(|(_, b)| elapsed < *b) {
            best = Some((value, elapsed));
        }
    }
    best.unwrap()
}

fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS).map(|_| f()).collect();
    times.sort();
    times[RUNS / 2]
}

fn linker(engine: &Engine) -> Linker<Wasi> {
    let mut linker = Linker::new(engine);
    wasi::add_to_linker(&mut linker).unwrap();
    add_safepoint(&mut linker);
    linker
}

/// Instantiates and runs `_start` once, never preempted; returns the time.
fn run(engine: &Engine, module: &Module, args: &[String]) -> Duration {
    let linker = linker(engine);
    let start = Instant::now();
    let mut store = Store::new(engine, Wasi { args: args.to_vec(), ..Wasi::default() });
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker.instantiate(&mut store, module).unwrap();
    let main = instance.get_typed_func::<(), ()>(&mut store, START_EXPORT).unwrap();
    let code = wasi::exit_code(main.call(&mut store, ())).unwrap();
    let elapsed = start.elapsed();
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&store.data().output));
    elapsed
}

/// Runs with a timer raising `atoll_yield` every `quantum`, moving the
/// process to a new instance at every stop: (time, stops, max saved bytes).
fn run_preempted(engine: &Engine, module: &Module, args: &[String], quantum: Duration) -> (Duration, u32, u32) {
    let linker = linker(engine);
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (engine, done) = (engine.clone(), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(quantum);
                engine.increment_epoch();
            }
        })
    };
    let start = Instant::now();
    let outcome = run_migrating(Process {
        engine,
        module,
        linker: &linker,
        state: &mut |previous: Option<Wasi>| match previous {
            Some(p) => Wasi { yield_flag: None, ..p },
            None => Wasi { args: args.to_vec(), ..Wasi::default() },
        },
        setup: &mut |store, instance| {
            store.data_mut().yield_flag = instance.get_global(&mut *store, YIELD_GLOBAL);
            store.set_epoch_deadline(1);
            store.epoch_deadline_callback(|ctx| {
                wasi::raise_yield(ctx)?;
                Ok(UpdateDeadline::Continue(1))
            });
        },
        call: &mut |store, instance| {
            let main = instance.get_typed_func::<(), ()>(&mut *store, START_EXPORT)?;
            wasi::exit_code(main.call(&mut *store, ()))
        },
    });
    let elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    ticker.join().unwrap();
    assert_eq!(outcome.result.unwrap(), 0);
    (elapsed, outcome.migrations, outcome.max_saved)
}
