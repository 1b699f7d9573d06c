//! A miniature of what the atoll runtime does with a prepared module: the
//! host side of `atoll.safepoint`, and a driver that, every time the process
//! stops, carries its memory and `atoll_global_*` to a brand-new store and
//! instance and rewinds it there.

#![allow(dead_code)] // shared by several test binaries and an example, each using a subset

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

use atoll_prepare::conventions::*;
use wasmtime::{
    Caller, Config, Engine, Instance, Linker, MemoryType, Module, SharedMemory, Store, Val,
};

/// An engine that can make the flag page (a shared memory) and runs
/// without epoch checks, as the runtime's.
pub fn engine() -> Engine {
    let mut config = Config::new();
    config.shared_memory(true);
    Engine::new(&config).unwrap()
}

/// The flag page, as the runtime keeps it for a node, with one kernel:
/// its flag is at offset 0, where `atoll_flag_at` points until the host
/// moves it.
#[derive(Clone)]
pub struct Flags(SharedMemory);

impl Flags {
    pub fn new(engine: &Engine) -> Self {
        Flags(SharedMemory::new(engine, MemoryType::shared(1, 1)).unwrap())
    }

    fn flag(&self) -> &AtomicU32 {
        // SAFETY: offset 0 of a live, 4-aligned page; every host access is
        // atomic, and the guest only reads it.
        unsafe { AtomicU32::from_ptr(self.0.data()[0].get().cast()) }
    }

    /// Makes the process stop at its next safepoint check (from any thread).
    pub fn raise(&self) {
        self.flag().store(1, Ordering::Relaxed);
    }

    pub fn is_raised(&self) -> bool {
        self.flag().load(Ordering::Relaxed) != 0
    }

    fn lower(&self) {
        self.flag().store(0, Ordering::Relaxed);
    }
}

/// What survives a migration: the memory and the exported mutable globals.
pub struct Snapshot {
    /// The memory's size in bytes.
    pub memory_size: usize,
    /// Its bytes up to the end of the saved stack: the rest of the reserved
    /// pages is meaningless once the unwind has stopped.
    pub memory: Vec<u8>,
    pub globals: Vec<(String, Val)>,
    /// Bytes of Asyncify buffer used.
    pub saved: u32,
}

fn call<T>(caller: &mut Caller<'_, T>, name: &str, args: &[Val]) -> wasmtime::Result<i32> {
    let func = caller
        .get_export(name)
        .and_then(|e| e.into_func())
        .expect(name);
    let mut results = [Val::I32(0)];
    let results = &mut results[..func.ty(&*caller).results().len()];
    func.call(&mut *caller, args, results)?;
    Ok(results.first().and_then(Val::i32).unwrap_or(0))
}

/// Defines `atoll.yield_flags` as `flags`.
pub fn define_flags<T: Default + 'static>(linker: &mut Linker<T>, flags: &Flags) {
    let store = Store::new(linker.engine(), T::default());
    linker
        .define(&store, FLAGS_MODULE, FLAGS_MEMORY, flags.0.clone())
        .unwrap();
}

thread_local! {
    /// Set by the driver when it starts a rewind, taken by the import the
    /// rewind reaches: a prepared module sets Asyncify's state back to
    /// normal itself before it calls an import, so the import cannot tell
    /// a rewind from the state.
    static REWINDING: Cell<bool> = const { Cell::new(false) };
}

/// Starts rewinding the stack saved at `addr`: the next call of the export
/// that unwound comes back into the import that unwound it.
pub fn start_rewind<T>(store: &mut Store<T>, instance: &Instance, addr: u32) {
    instance
        .get_typed_func::<i32, ()>(&mut *store, ASYNCIFY_START_REWIND)
        .unwrap()
        .call(&mut *store, addr as i32)
        .unwrap();
    REWINDING.set(true);
}

/// Defines `atoll.yield_flags` as `flags`, and `atoll.safepoint` as the
/// runtime would: when rewound into, carry on (the module ended the rewind
/// before the call); otherwise lower the flag and start unwinding.
pub fn add_safepoint<T: Default + 'static>(linker: &mut Linker<T>, flags: &Flags) {
    define_flags(linker, flags);
    let flags = flags.clone();
    linker
        .func_wrap(
            SAFEPOINT_MODULE,
            SAFEPOINT_NAME,
            move |mut caller: Caller<'_, T>| {
                if REWINDING.replace(false) {
                    let state = call(&mut caller, ASYNCIFY_GET_STATE, &[])?;
                    assert_eq!(
                        state, ASYNCIFY_STATE_NORMAL,
                        "a rewind ends before the import"
                    );
                    return Ok(());
                }
                assert!(flags.is_raised(), "safepoint called without a yield");
                flags.lower();
                let memory = caller
                    .get_export(MEMORY_EXPORT)
                    .unwrap()
                    .into_memory()
                    .unwrap();
                let end = memory.data_size(&caller) as u64;
                let addr = asyncify_data_addr(end).expect("a prepared memory");
                let start = addr + ASYNCIFY_DATA_HEADER;
                let header = [start.to_le_bytes(), (end as u32).to_le_bytes()].concat();
                memory.write(&mut caller, addr as usize, &header)?;
                call(&mut caller, ASYNCIFY_START_UNWIND, &[Val::I32(addr as i32)])?;
                Ok(())
            },
        )
        .unwrap();
}

pub fn take_snapshot<T: 'static>(store: &mut Store<T>, instance: &Instance) -> Snapshot {
    let memory = instance.get_memory(&mut *store, MEMORY_EXPORT).unwrap();
    let names: Vec<String> = instance
        .exports(&mut *store)
        .map(|e| e.name().to_owned())
        .filter(|n| n.starts_with(GLOBAL_EXPORT_PREFIX))
        .collect();
    let globals = names
        .into_iter()
        .map(|n| {
            let value = instance
                .get_global(&mut *store, &n)
                .unwrap()
                .get(&mut *store);
            (n, value)
        })
        .collect();
    let data = memory.data(&*store);
    let addr = asyncify_data_addr(data.len() as u64).unwrap() as usize;
    let current = u32::from_le_bytes(data[addr..addr + 4].try_into().unwrap()) as usize;
    let saved = (current - addr) as u32 - ASYNCIFY_DATA_HEADER;
    Snapshot {
        memory_size: data.len(),
        memory: data[..current].to_vec(),
        globals,
        saved,
    }
}

pub fn restore<T: 'static>(store: &mut Store<T>, instance: &Instance, snapshot: &Snapshot) {
    let memory = instance.get_memory(&mut *store, MEMORY_EXPORT).unwrap();
    let missing = snapshot.memory_size - memory.data_size(&*store);
    memory.grow(&mut *store, (missing / 65536) as u64).unwrap();
    memory.write(&mut *store, 0, &snapshot.memory).unwrap();
    for (name, value) in &snapshot.globals {
        instance
            .get_global(&mut *store, name)
            .unwrap()
            .set(&mut *store, *value)
            .unwrap();
    }
}

fn asyncify_state<T: 'static>(store: &mut Store<T>, instance: &Instance) -> i32 {
    let f = instance
        .get_typed_func::<(), i32>(&mut *store, ASYNCIFY_GET_STATE)
        .unwrap();
    f.call(&mut *store, ()).unwrap()
}

/// How to run one process under [`run_migrating`].
pub struct Process<'a, T: 'static, R> {
    pub engine: &'a Engine,
    pub module: &'a Module,
    pub linker: &'a Linker<T>,
    /// Host state for a new store, given the previous store's (`None` the
    /// first time).
    pub state: &'a mut dyn FnMut(Option<T>) -> T,
    /// Prepares each new store and instance.
    pub setup: &'a mut dyn FnMut(&mut Store<T>, &Instance),
    /// Calls the export; must pass the same arguments every time.
    pub call: &'a mut dyn FnMut(&mut Store<T>, &Instance) -> wasmtime::Result<R>,
}

/// How a [`run_migrating`] ended.
pub struct Outcome<T, R> {
    /// What the last call returned.
    pub result: wasmtime::Result<R>,
    /// The host state of the last store.
    pub state: T,
    /// How many times the process stopped and moved to a new instance.
    pub migrations: u32,
    /// The most bytes of Asyncify buffer one stop used.
    pub max_saved: u32,
}

/// Runs `process`, migrating it to a fresh store and instance every time it
/// stops at a safepoint.
pub fn run_migrating<T: 'static, R>(process: Process<'_, T, R>) -> Outcome<T, R> {
    let mut carried: Option<(Snapshot, T)> = None;
    let mut max_saved = 0;
    for migrations in 0..1_000_000 {
        let (snapshot, previous) = match carried.take() {
            Some((snapshot, state)) => (Some(snapshot), Some(state)),
            None => (None, None),
        };
        let mut store = Store::new(process.engine, (process.state)(previous));
        let instance = process
            .linker
            .instantiate(&mut store, process.module)
            .unwrap();
        (process.setup)(&mut store, &instance);
        if let Some(snapshot) = &snapshot {
            restore(&mut store, &instance, snapshot);
            let memory = instance.get_memory(&mut store, MEMORY_EXPORT).unwrap();
            let addr = asyncify_data_addr(memory.data_size(&store) as u64).unwrap();
            start_rewind(&mut store, &instance, addr);
        }
        let result = (process.call)(&mut store, &instance);
        match asyncify_state(&mut store, &instance) {
            ASYNCIFY_STATE_NORMAL => {
                return Outcome {
                    result,
                    state: store.into_data(),
                    migrations,
                    max_saved,
                }
            }
            ASYNCIFY_STATE_UNWINDING => {
                assert!(result.is_ok(), "unwinding ended in {:?}", result.err());
                let stop = instance.get_typed_func::<(), ()>(&mut store, ASYNCIFY_STOP_UNWIND);
                stop.unwrap().call(&mut store, ()).unwrap();
                let snapshot = take_snapshot(&mut store, &instance);
                max_saved = max_saved.max(snapshot.saved);
                carried = Some((snapshot, store.into_data()));
            }
            other => panic!("returned in asyncify state {other}"),
        }
    }
    panic!("no progress after a million migrations");
}
