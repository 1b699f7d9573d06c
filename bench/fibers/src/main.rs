//! One process switch on one thread, three ways, with the same prepared
//! guest: Asyncify driven through binaryen's exported functions (atoll's
//! kernels before 2026-11-27), Asyncify driven through its globals (atoll's
//! kernels since), and wasmtime fibers (each process suspended on its own
//! stack inside an async host function, the design docs/process-model.md
//! weighs for issue 10). Two processes pass a counter back and forth; each
//! `switch` hands the thread to the other one. Prints nanoseconds per
//! switch, five rounds of the three in turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use atoll_prepare::conventions as c;
use wasmtime::{Caller, Engine, Global, Linker, Memory, Module, Result, Store, TypedFunc, Val};

/// The value in flight between the two processes.
static MAILBOX: AtomicI32 = AtomicI32::new(0);

/// Each process calls `switch` from a frame with live locals, one call
/// below its loop, so that an unwind and a rewind cross two frames, as a
/// small C program's blocking call does.
const GUEST: &str = r#"(module
  (import "host" "switch" (func $switch (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start"))
  (func $step (param $x i32) (result i32)
    (local $a i32) (local $b i32) (local $r i32)
    (local.set $a (i32.mul (local.get $x) (i32.const 3)))
    (local.set $b (i32.add (local.get $a) (i32.const 7)))
    (local.set $r (call $switch (i32.add (local.get $x) (i32.const 1))))
    (i32.add (local.get $r) (i32.sub (local.get $b) (local.get $a))))
  (func (export "run") (param $n i32)
    (local $x i32)
    (loop $l
      (local.set $x (i32.sub (call $step (local.get $x)) (i32.const 7)))
      (br_if $l (i32.lt_s (local.get $x) (local.get $n))))))"#;

/// Switches per measurement (the counter's final value).
const SWITCHES: i32 = 1_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Drive {
    Functions,
    Globals,
}

/// A process's Asyncify handles, and whether it is being rewound.
#[derive(Clone)]
struct Hooks {
    drive: Drive,
    rewinding: bool,
    area: u32,
    start_unwind: TypedFunc<i32, ()>,
    stop_unwind: TypedFunc<(), ()>,
    start_rewind: TypedFunc<i32, ()>,
    stop_rewind: TypedFunc<(), ()>,
    state: Global,
    memory: Memory,
}

impl Hooks {
    fn start_unwind(&self, mut cx: impl wasmtime::AsContextMut) -> Result<()> {
        match self.drive {
            Drive::Functions => self.start_unwind.call(cx, self.area as i32),
            Drive::Globals => self
                .state
                .set(&mut cx, Val::I32(c::ASYNCIFY_STATE_UNWINDING)),
        }
    }

    fn start_rewind(&self, mut cx: impl wasmtime::AsContextMut) -> Result<()> {
        match self.drive {
            Drive::Functions => self.start_rewind.call(cx, self.area as i32),
            Drive::Globals => self
                .state
                .set(&mut cx, Val::I32(c::ASYNCIFY_STATE_REWINDING)),
        }
    }

    fn stop(&self, mut cx: impl wasmtime::AsContextMut, rewind: bool) -> Result<()> {
        match (self.drive, rewind) {
            (Drive::Functions, false) => self.stop_unwind.call(cx, ()),
            (Drive::Functions, true) => self.stop_rewind.call(cx, ()),
            (Drive::Globals, _) => self.state.set(&mut cx, Val::I32(c::ASYNCIFY_STATE_NORMAL)),
        }
    }
}

/// Asyncify as atoll's kernels use it: a process unwinds out of `switch`,
/// and the scheduler stops the unwind and rewinds the other into its own.
fn asyncify(engine: &Engine, module: &Module, drive: Drive) -> f64 {
    let mut linker: Linker<Option<Hooks>> = Linker::new(engine);
    linker
        .func_wrap(c::SAFEPOINT_MODULE, c::SAFEPOINT_NAME, || {})
        .unwrap();
    linker
        .func_wrap(
            "host",
            "switch",
            |mut cx: Caller<'_, Option<Hooks>>, x: i32| -> Result<i32> {
                let hooks = cx.data().clone().expect("hooks set");
                if hooks.rewinding {
                    cx.data_mut().as_mut().expect("hooks set").rewinding = false;
                    hooks.stop(&mut cx, true)?;
                    return Ok(MAILBOX.load(Ordering::Relaxed));
                }
                MAILBOX.store(x, Ordering::Relaxed);
                let end = hooks.memory.data_size(&cx) as u32;
                let mut header = (hooks.area + c::ASYNCIFY_DATA_HEADER)
                    .to_le_bytes()
                    .to_vec();
                header.extend_from_slice(&end.to_le_bytes());
                hooks.memory.write(&mut cx, hooks.area as usize, &header)?;
                hooks.start_unwind(&mut cx)?;
                Ok(0)
            },
        )
        .unwrap();
    let mut procs = Vec::new();
    for _ in 0..2 {
        let mut store = Store::new(engine, None);
        let instance = linker.instantiate(&mut store, module).unwrap();
        let memory = instance.get_memory(&mut store, c::MEMORY_EXPORT).unwrap();
        let area = c::asyncify_data_addr(memory.data_size(&store) as u64).unwrap();
        let data = instance
            .get_global(&mut store, c::ASYNCIFY_DATA_GLOBAL)
            .unwrap();
        data.set(&mut store, Val::I32(area as i32)).unwrap();
        let hooks = Hooks {
            drive,
            rewinding: false,
            area,
            start_unwind: instance
                .get_typed_func(&mut store, c::ASYNCIFY_START_UNWIND)
                .unwrap(),
            stop_unwind: instance
                .get_typed_func(&mut store, c::ASYNCIFY_STOP_UNWIND)
                .unwrap(),
            start_rewind: instance
                .get_typed_func(&mut store, c::ASYNCIFY_START_REWIND)
                .unwrap(),
            stop_rewind: instance
                .get_typed_func(&mut store, c::ASYNCIFY_STOP_REWIND)
                .unwrap(),
            state: instance
                .get_global(&mut store, c::ASYNCIFY_STATE_GLOBAL)
                .unwrap(),
            memory,
        };
        *store.data_mut() = Some(hooks.clone());
        let run = instance
            .get_typed_func::<i32, ()>(&mut store, "run")
            .unwrap();
        procs.push((store, run, hooks, false));
    }
    let mut switches = 0u64;
    let t = Instant::now();
    'run: loop {
        for (store, run, hooks, started) in &mut procs {
            if *started {
                store.data_mut().as_mut().expect("hooks set").rewinding = true;
                hooks.start_rewind(&mut *store).unwrap();
            }
            *started = true;
            run.call(&mut *store, SWITCHES).unwrap();
            if hooks.state.get(&mut *store).unwrap_i32() != c::ASYNCIFY_STATE_UNWINDING {
                break 'run;
            }
            hooks.stop(&mut *store, false).unwrap();
            switches += 1;
        }
    }
    t.elapsed().as_nanos() as f64 / switches as f64
}

/// Pending once, then ready: the host function gives up the thread here.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Each process runs on its own fiber (`call_async`); `switch` is an async
/// host function that suspends it, and the scheduler polls the other.
fn fibers(engine: &Engine, module: &Module) -> f64 {
    let mut linker: Linker<()> = Linker::new(engine);
    linker
        .func_wrap(c::SAFEPOINT_MODULE, c::SAFEPOINT_NAME, || {})
        .unwrap();
    linker
        .func_wrap_async("host", "switch", |_: Caller<'_, ()>, (x,): (i32,)| {
            Box::new(async move {
                MAILBOX.store(x, Ordering::Relaxed);
                YieldOnce(false).await;
                Ok(MAILBOX.load(Ordering::Relaxed))
            })
        })
        .unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut ready = |f: Pin<&mut dyn Future<Output = Result<()>>>| f.poll(&mut cx).is_ready();
    let (mut s0, mut s1) = (Store::new(engine, ()), Store::new(engine, ()));
    let instantiate = |store: &mut Store<()>| {
        let mut f = Box::pin(linker.instantiate_async(store, module));
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(i) = f.as_mut().poll(&mut cx) {
                break i.unwrap();
            }
        }
    };
    let (i0, i1) = (instantiate(&mut s0), instantiate(&mut s1));
    let r0 = i0.get_typed_func::<i32, ()>(&mut s0, "run").unwrap();
    let r1 = i1.get_typed_func::<i32, ()>(&mut s1, "run").unwrap();
    let mut f0 = Box::pin(r0.call_async(&mut s0, SWITCHES));
    let mut f1 = Box::pin(r1.call_async(&mut s1, SWITCHES));
    let mut switches = 0u64;
    let t = Instant::now();
    loop {
        if ready(f0.as_mut()) {
            break;
        }
        switches += 1;
        if ready(f1.as_mut()) {
            break;
        }
        switches += 1;
    }
    t.elapsed().as_nanos() as f64 / switches as f64
}

fn main() {
    let engine = Engine::default();
    let guest = wat::parse_str(GUEST).expect("the guest parses");
    let prepared = atoll_prepare::prepare(&guest, &atoll_prepare::Options::default())
        .expect("prepare (binaryen's wasm-opt on PATH, or ATOLL_WASM_OPT)");
    let module = Module::new(&engine, &prepared).unwrap();
    println!("ns per switch: asyncify (functions), asyncify (globals), fiber");
    for _ in 0..5 {
        let calls = asyncify(&engine, &module, Drive::Functions);
        let globals = asyncify(&engine, &module, Drive::Globals);
        let fiber = fibers(&engine, &module);
        println!("{calls:.1} {globals:.1} {fiber:.1}");
    }
}
