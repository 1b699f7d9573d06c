//! Measures what preparation costs on a real program: size, time to prepare,
//! compile time and run time in wasmtime, and the cost of being preempted.
//!
//! ```text
//! cargo run --release -p atoll-prepare --example overhead -- \
//!     crates/prepare/tests/fixtures/mergesort.wasm 1000000 5
//! ```
//!
//! With `--run FILE.wasm [ARGS...]` it only times a run of the module as it
//! is; `--prepare IN OUT` only prepares. The program gets only a few stub WASI calls (args, stdout, exit):
//! enough for small C benchmarks.

#[path = "../tests/common/runtime.rs"]
mod runtime;
#[path = "../tests/common/wasi.rs"]
mod wasi;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_prepare::conventions::START_EXPORT;
use atoll_prepare::{prepare, Options};
use wasmtime::{Engine, Linker, Module, Store};

use runtime::{add_safepoint, engine, run_migrating, Flags, Process};
use wasi::Wasi;

const RUNS: usize = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.next_if_eq("--prepare").is_some() {
        // Prepare only, like `atoll prepare IN OUT`.
        let (from, to) = argv
            .next()
            .zip(argv.next())
            .ok_or("usage: overhead --prepare IN OUT")?;
        std::fs::write(to, prepare(&std::fs::read(from)?, &Options::default())?)?;
        return Ok(());
    }
    let run_only = argv.next_if_eq("--run").is_some();
    let path = argv
        .next()
        .ok_or("usage: overhead [--run] FILE.wasm [ARGS...]")?;
    let args: Vec<String> = std::iter::once(path.clone()).chain(argv).collect();
    let input = std::fs::read(&path)?;
    if run_only {
        // Just time the module as it is (e.g. a variant made by hand).
        let engine = engine();
        let module = Module::new(&engine, &input)?;
        println!("run: {:?}", median(|| run(&engine, &module, &args)));
        return Ok(());
    }

    let options = Options::default();
    let (prepared, prepare_time) = best_of(3, || prepare(&input, &options).unwrap());
    let unoptimised = prepare(
        &input,
        &Options {
            optimize: false,
            ..options.clone()
        },
    )?;
    println!(
        "size: input {} B, prepared {} B ({:+.1}%), prepared without optimisation {} B",
        input.len(),
        prepared.len(),
        percent(prepared.len(), input.len()),
        unoptimised.len()
    );
    println!("prepare: {prepare_time:?}");

    let engine = engine();
    let (plain, plain_compile) = best_of(3, || Module::new(&engine, &input).unwrap());
    let (migratable, prepared_compile) = best_of(3, || Module::new(&engine, &prepared).unwrap());
    println!("wasmtime compile: plain {plain_compile:?}, prepared {prepared_compile:?}");

    let plain_run = median(|| run(&engine, &plain, &args));
    let prepared_run = median(|| run(&engine, &migratable, &args));
    println!(
        "run: plain {plain_run:?}, prepared {prepared_run:?} ({:+.1}%)",
        percent(
            prepared_run.as_nanos() as usize,
            plain_run.as_nanos() as usize
        )
    );

    for quantum in [Duration::from_millis(10), Duration::from_millis(1)] {
        let (time, stops) = run_stopped_in_place(&engine, &migratable, &args, quantum);
        let per_stop = time.saturating_sub(prepared_run) / stops.max(1);
        println!(
            "stopped every {quantum:?} (unwind, rewind in the same instance): \
                  {time:?}, {stops} stops, ~{per_stop:?} per stop"
        );
    }
    // A migration copies the whole memory twice here, so it takes longer
    // than a short quantum: migrate less often, or the process only migrates.
    let quantum = Duration::from_millis(50);
    let (time, stops, saved) = run_preempted(&engine, &migratable, &args, quantum);
    let per_stop = time.saturating_sub(prepared_run) / stops.max(1);
    println!(
        "stopped every {quantum:?} and migrated to a fresh instance each time: \
              {time:?}, {stops} stops, ~{per_stop:?} per stop, <= {saved} B of saved stack"
    );
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

fn linker(engine: &Engine, flags: &Flags) -> Linker<Wasi> {
    let mut linker = Linker::new(engine);
    wasi::add_to_linker(&mut linker).unwrap();
    add_safepoint(&mut linker, flags);
    linker
}

/// A store for one run of the program with `args`.
fn new_store(engine: &Engine, args: &[String]) -> Store<Wasi> {
    Store::new(
        engine,
        Wasi {
            args: args.to_vec(),
            ..Wasi::default()
        },
    )
}

/// Instantiates and runs `_start` once, never preempted; returns the time.
fn run(engine: &Engine, module: &Module, args: &[String]) -> Duration {
    let linker = linker(engine, &Flags::new(engine));
    let start = Instant::now();
    let mut store = new_store(engine, args);
    let instance = linker.instantiate(&mut store, module).unwrap();
    let main = instance
        .get_typed_func::<(), ()>(&mut store, START_EXPORT)
        .unwrap();
    let code = wasi::exit_code(main.call(&mut store, ())).unwrap();
    let elapsed = start.elapsed();
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&store.data().output));
    elapsed
}

/// A timer thread that raises the yield flag every `period` until
/// dropped.
struct Ticker(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Ticker {
    fn start(flags: &Flags, period: Duration) -> Ticker {
        let done = Arc::new(AtomicBool::new(false));
        let (flags, stop) = (flags.clone(), Arc::clone(&done));
        let thread = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                flags.raise();
            }
        });
        Ticker(done, Some(thread))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

/// Runs with a timer raising the yield flag every `quantum`; at each stop,
/// rewinds at once in the same instance (a scheduler with nothing else to
/// run): (time, stops).
fn run_stopped_in_place(
    engine: &Engine,
    module: &Module,
    args: &[String],
    quantum: Duration,
) -> (Duration, u32) {
    use atoll_prepare::conventions::*;
    let flags = Flags::new(engine);
    let linker = linker(engine, &flags);
    let _ticker = Ticker::start(&flags, quantum);
    let start = Instant::now();
    let mut store = new_store(engine, args);
    let instance = linker.instantiate(&mut store, module).unwrap();
    let main = instance
        .get_typed_func::<(), ()>(&mut store, START_EXPORT)
        .unwrap();
    let state = instance
        .get_typed_func::<(), i32>(&mut store, ASYNCIFY_GET_STATE)
        .unwrap();
    let stop = instance
        .get_typed_func::<(), ()>(&mut store, ASYNCIFY_STOP_UNWIND)
        .unwrap();
    let memory = instance.get_memory(&mut store, MEMORY_EXPORT).unwrap();
    let mut stops = 0;
    loop {
        let result = main.call(&mut store, ());
        if state.call(&mut store, ()).unwrap() != ASYNCIFY_STATE_UNWINDING {
            assert_eq!(wasi::exit_code(result).unwrap(), 0);
            return (start.elapsed(), stops);
        }
        stop.call(&mut store, ()).unwrap();
        stops += 1;
        let data = asyncify_data_addr(memory.data_size(&store) as u64).unwrap();
        runtime::start_rewind(&mut store, &instance, data);
    }
}

/// Runs with a timer raising the yield flag every `quantum`, moving the
/// process to a new instance at every stop: (time, stops, max saved bytes).
fn run_preempted(
    engine: &Engine,
    module: &Module,
    args: &[String],
    quantum: Duration,
) -> (Duration, u32, u32) {
    let flags = Flags::new(engine);
    let linker = linker(engine, &flags);
    let ticker = Ticker::start(&flags, quantum);
    let start = Instant::now();
    let outcome = run_migrating(Process {
        engine,
        module,
        linker: &linker,
        state: &mut |previous: Option<Wasi>| {
            previous.unwrap_or_else(|| Wasi {
                args: args.to_vec(),
                ..Wasi::default()
            })
        },
        setup: &mut |_, _| {},
        call: &mut |store, instance| {
            let main = instance.get_typed_func::<(), ()>(&mut *store, START_EXPORT)?;
            wasi::exit_code(main.call(&mut *store, ()))
        },
    });
    let elapsed = start.elapsed();
    drop(ticker);
    assert_eq!(outcome.result.unwrap(), 0);
    (elapsed, outcome.migrations, outcome.max_saved)
}
