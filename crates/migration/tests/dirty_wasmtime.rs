//! Dirty tracking of wasmtime linear memories: writes from wasm code (which
//! fault inside JIT code, where wasmtime's own handler would see a trap)
//! and from the host, growth from wasm, and wasm traps still reaching
//! wasmtime's handler while a memory is tracked.
//!
//! Every test creates its `Engine` before its first `DirtyTracker::start`,
//! so wasmtime's signal handlers are installed before ours (see the
//! `dirty` module docs).

use atoll_migration::{DirtyTracker, BLOCK};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Memory, Module, PoolingAllocationConfig, Store,
    Trap, TypedFunc,
};

const WAT: &str = r#"
(module
  (memory (export "memory") 2 16)
  (data (i32.const 0x5000) "initial data")
  (func (export "store") (param $addr i32) (param $val i32)
    (i32.store (local.get $addr) (local.get $val)))
  (func (export "load") (param $addr i32) (result i32)
    (i32.load (local.get $addr)))
  (func (export "store_oob") (param $val i32)
    (i32.store (i32.const 0x7fff0000) (local.get $val)))
  (func (export "fill") (param $addr i32) (param $val i32) (param $len i32)
    (memory.fill (local.get $addr) (local.get $val) (local.get $len)))
  (func (export "grow") (param $pages i32) (result i32)
    (memory.grow (local.get $pages)))
)
"#;

struct Guest {
    store: Store<()>,
    memory: Memory,
    store_fn: TypedFunc<(i32, i32), ()>,
    load: TypedFunc<i32, i32>,
    store_oob: TypedFunc<i32, ()>,
    fill: TypedFunc<(i32, i32, i32), ()>,
    grow: TypedFunc<i32, i32>,
}

impl Guest {
    fn new(engine: &Engine) -> Guest {
        let module = Module::new(engine, WAT).unwrap();
        let mut store = Store::new(engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        Guest {
            memory: instance.get_memory(&mut store, "memory").unwrap(),
            store_fn: instance.get_typed_func(&mut store, "store").unwrap(),
            load: instance.get_typed_func(&mut store, "load").unwrap(),
            store_oob: instance.get_typed_func(&mut store, "store_oob").unwrap(),
            fill: instance.get_typed_func(&mut store, "fill").unwrap(),
            grow: instance.get_typed_func(&mut store, "grow").unwrap(),
            store,
        }
    }

    fn data(&mut self) -> &mut [u8] {
        self.memory.data_mut(&mut self.store)
    }

    fn store(&mut self, addr: usize, val: i32) {
        self.store_fn
            .call(&mut self.store, (addr as i32, val))
            .unwrap();
    }

    fn load(&mut self, addr: usize) -> i32 {
        self.load.call(&mut self.store, addr as i32).unwrap()
    }
}

/// The whole scenario, for one engine configuration.
fn exercise(engine: &Engine) {
    let mut g = Guest::new(engine);
    // 2 wasm pages = 32 blocks; the data segment is in block 5.
    assert_eq!(g.data().len(), 32 * BLOCK);
    let mut tracker = DirtyTracker::start(g.data()).unwrap();

    // Stores from wasm code into three blocks.
    g.store(BLOCK + 8, 11);
    g.store(7 * BLOCK + 4, 22);
    g.store(30 * BLOCK, 33);
    g.store(30 * BLOCK + 100, 34);
    // Loads never mark, the data segment included.
    assert_eq!(g.load(0x5000), i32::from_le_bytes(*b"init"));
    assert_eq!(g.load(20 * BLOCK), 0);
    assert_eq!(tracker.dirty_count(), 3);
    assert_eq!(tracker.take(g.data()).unwrap(), vec![1, 7, 30]);
    // The stores happened.
    assert_eq!(g.load(BLOCK + 8), 11);
    assert_eq!(g.load(7 * BLOCK + 4), 22);
    assert_eq!(g.load(30 * BLOCK + 100), 34);

    // An out-of-bounds store is still a wasm trap: the fault is outside
    // every tracked range and reaches wasmtime's handler.
    let err = g.store_oob.call(&mut g.store, 1).unwrap_err();
    assert_eq!(
        err.downcast_ref::<Trap>(),
        Some(&Trap::MemoryOutOfBounds),
        "{err:?}"
    );
    // And the instance still works and is still tracked.
    g.store(0x5000, 44);
    assert_eq!(tracker.take(g.data()).unwrap(), vec![5]);

    // Writes by the host (wasmtime's memory.fill libcall, and the embedder
    // through `data_mut`) fault in host code and are recorded too.
    g.fill
        .call(&mut g.store, ((9 * BLOCK - 2) as i32, 0xab, 4))
        .unwrap();
    g.data()[25 * BLOCK + 3] = 7;
    assert_eq!(tracker.take(g.data()).unwrap(), vec![8, 9, 25]);
    assert_eq!(g.data()[9 * BLOCK + 1], 0xab);

    // Growth from wasm while tracked: the new blocks are all returned, and
    // tracked from then on.
    assert_eq!(g.grow.call(&mut g.store, 1).unwrap(), 2);
    g.store(2 * BLOCK, 55);
    g.store(40 * BLOCK, 66); // in the new wasm page
    assert_eq!(g.data().len(), 48 * BLOCK);
    let mut expected = vec![2];
    expected.extend(32..48);
    assert_eq!(tracker.take(g.data()).unwrap(), expected);
    g.store(40 * BLOCK + 4, 77);
    g.store(47 * BLOCK, 88);
    assert_eq!(tracker.take(g.data()).unwrap(), vec![40, 47]);
    assert_eq!(tracker.take(g.data()).unwrap(), Vec::<u32>::new());

    // Growth past the tracker's first bitmap (64 blocks) keeps the bits.
    assert_eq!(g.grow.call(&mut g.store, 10).unwrap(), 3);
    g.store(3 * BLOCK, 1);
    let mut expected = vec![3];
    expected.extend(48..13 * 16);
    assert_eq!(tracker.take(g.data()).unwrap(), expected);
    g.store(200 * BLOCK, 1);
    g.store(3 * BLOCK, 2);
    assert_eq!(tracker.take(g.data()).unwrap(), vec![3, 200]);

    // A memory passed back shorter than tracked is refused.
    let err = tracker.take(&mut g.data()[..16 * BLOCK]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);

    // Untracked: everything writable without faults being recorded.
    drop(tracker);
    for block in 0..13 * 16 {
        g.store(block * BLOCK, block as i32);
    }
    assert_eq!(g.load(100 * BLOCK), 100);
    assert!(g.store_oob.call(&mut g.store, 1).is_err());
}

#[test]
fn on_demand_allocator() {
    let engine = Engine::new(&Config::new()).unwrap();
    exercise(&engine);
}

#[test]
fn on_demand_allocator_without_cow_images() {
    let mut config = Config::new();
    config.memory_init_cow(false);
    let engine = Engine::new(&config).unwrap();
    exercise(&engine);
}

fn pooling(cow: bool) -> Engine {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(4)
        .total_memories(4)
        .total_tables(4)
        .max_memory_size(16 << 16)
        .linear_memory_keep_resident(64 << 10);
    let mut config = Config::new();
    config.memory_init_cow(cow);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).unwrap()
}

#[test]
fn pooling_allocator() {
    let engine = pooling(false);
    // Twice: the second instance reuses the first one's slot, which must
    // have been left writable.
    exercise(&engine);
    exercise(&engine);
}

#[test]
fn pooling_allocator_with_cow_images() {
    let engine = pooling(true);
    exercise(&engine);
    exercise(&engine);
}

#[test]
fn instances_on_threads_track_their_own_memories() {
    let engine = pooling(false);
    let threads: Vec<_> = (0..3usize)
        .map(|n| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut g = Guest::new(&engine);
                let mut tracker = DirtyTracker::start(g.data()).unwrap();
                for round in 0..40usize {
                    let expected: Vec<u32> = (0..32u32)
                        .filter(|b| (*b as usize + round).is_multiple_of(n + 2))
                        .collect();
                    for _ in 0..2 {
                        for &b in &expected {
                            g.store(b as usize * BLOCK + 4 * n, round as i32);
                        }
                    }
                    assert_eq!(tracker.take(g.data()).unwrap(), expected);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
