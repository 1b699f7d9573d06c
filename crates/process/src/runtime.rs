//! The runtime shared by all kernels of a node: one wasmtime engine, one
//! linker with every system call, and the cache of loaded programs.
//!
//! These are the node's read-only things (DESIGN.md, "node"): a program is
//! prepared and compiled once, then instantiated by any kernel. Programs are
//! named by the content hash of their prepared module, which is also what a
//! process's UArea records. Prepared modules and compiled code are kept on
//! disk under the cache directory, keyed by content hash, so a node that
//! restarts does not prepare or compile again.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use atoll_prepare::conventions::{FLAGS_MEMORY, FLAGS_MODULE};
use atoll_prepare::{content_hash, ContentHash, PrepareError};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, ProfilingStrategy,
};

use crate::ctx::ProcCtx;
use crate::postcopy::LateMemories;
use crate::yield_flags::{YieldFlags, SLOTS};

/// How the runtime is set up.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Where prepared modules and compiled code are kept; `None` keeps them
    /// in memory only.
    pub cache_dir: Option<PathBuf>,
    /// How to run binaryen.
    pub prepare: atoll_prepare::Options,
    /// Largest linear memory a process may have, in bytes.
    pub max_memory: usize,
    /// Instances the node's pool holds: processes that can be live at once
    /// (more are kept dormant, see [`Container::hibernate`]). The pool is
    /// reserved up front (4 GiB of address space each, not memory), so
    /// creating a process maps nothing: this is what makes spawning cheap.
    ///
    /// [`Container::hibernate`]: crate::Container::hibernate
    pub instances: u32,
    /// How often running guests are checked for the end of their quantum.
    pub tick: Duration,
    /// Whether a process that arrives before its memory may run while the
    /// memory arrives, waiting in page faults for the blocks it touches
    /// (`userfaultfd`, where the system allows it); else it waits for all
    /// of it ([`crate::postcopy`]).
    pub postcopy_faults: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            prepare: atoll_prepare::Options::default(),
            max_memory: 4 << 30,
            instances: 1024,
            tick: Duration::from_millis(1),
            postcopy_faults: true,
        }
    }
}

/// Why a program could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a WebAssembly module: {0}")]
    Malformed(String),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("cannot compile: {0:#}")]
    Compile(wasmtime::Error),
    #[error("{0}")]
    Link(String),
}

/// A program ready to be instantiated by any kernel.
pub struct Program {
    hash: ContentHash,
    prepared: bool,
    /// The module that runs, as bytes: what is sent to another node that
    /// needs the program.
    module: Arc<[u8]>,
    pre: InstancePre<ProcCtx>,
    /// Where a new instance's memory is not zero (its active data
    /// segments); `None` if that cannot be known without running it.
    initialized: Option<Vec<Range<usize>>>,
    /// No instruction of it writes a table, and it imports none: its
    /// tables stay as instantiation made them, so an instance it ran in
    /// can serve another of its processes ([`crate::spare`]).
    tables_fixed: bool,
    /// When it was last loaded, in [`Runtime::load`]s: of the programs no
    /// process holds, the most recently loaded stay.
    loaded: AtomicU64,
}

impl Program {
    /// Content hash of the module that runs (the prepared one, if prepared).
    pub fn hash(&self) -> ContentHash {
        self.hash
    }

    /// Whether the module was prepared (has safepoints and can be captured).
    pub fn prepared(&self) -> bool {
        self.prepared
    }

    /// The module that runs (its content hash is [`hash`](Self::hash)).
    pub fn module_bytes(&self) -> &[u8] {
        &self.module
    }

    pub(crate) fn pre(&self) -> &InstancePre<ProcCtx> {
        &self.pre
    }

    /// Where a new instance's memory is not zero, if known.
    pub(crate) fn initialized(&self) -> Option<&[Range<usize>]> {
        self.initialized.as_deref()
    }

    /// Whether its tables never change once instantiated.
    pub(crate) fn tables_fixed(&self) -> bool {
        self.tables_fixed
    }
}

/// Whether no instruction of `module` writes a table (`table.set`,
/// `.grow`, `.fill`, `.copy`, `.init`) and it imports no table (which
/// another could write). `false` if the module cannot be read through.
fn tables_never_written(module: &[u8]) -> bool {
    use wasmparser::{Operator, Parser, Payload, TypeRef};
    for payload in Parser::new(0).parse_all(module) {
        match payload {
            Ok(Payload::ImportSection(reader)) => {
                for import in reader.into_imports() {
                    match import {
                        Ok(i) if !matches!(i.ty, TypeRef::Table(_)) => {}
                        _ => return false,
                    }
                }
            }
            Ok(Payload::CodeSectionEntry(body)) => {
                let Ok(mut ops) = body.get_operators_reader() else {
                    return false;
                };
                while !ops.eof() {
                    match ops.read() {
                        Ok(
                            Operator::TableSet { .. }
                            | Operator::TableGrow { .. }
                            | Operator::TableFill { .. }
                            | Operator::TableCopy { .. }
                            | Operator::TableInit { .. },
                        )
                        | Err(_) => return false,
                        Ok(_) => {}
                    }
                }
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The ranges of its own memory (its first defined one: a prepared
/// module imports the flag memory) that instantiating `module` writes: its
/// active data segments at constant offsets. `None` if one is placed by a
/// global, or if the module has a start function (which may write
/// anywhere).
fn initialized_ranges(module: &[u8]) -> Option<Vec<Range<usize>>> {
    use wasmparser::{DataKind, Operator, Parser, Payload, TypeRef};
    let mut ranges = Vec::new();
    let mut own = 0;
    for payload in Parser::new(0).parse_all(module) {
        match payload.ok()? {
            Payload::StartSection { .. } => return None,
            Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if matches!(import.ok()?.ty, TypeRef::Memory(_)) {
                        own += 1;
                    }
                }
            }
            Payload::DataSection(reader) => {
                for data in reader {
                    let data = data.ok()?;
                    let DataKind::Active {
                        memory_index,
                        offset_expr,
                    } = data.kind
                    else {
                        continue;
                    };
                    if memory_index != own {
                        continue;
                    }
                    let at = match offset_expr.get_operators_reader().read().ok()? {
                        Operator::I32Const { value } => value as u32 as usize,
                        Operator::I64Const { value } => usize::try_from(value).ok()?,
                        _ => return None,
                    };
                    ranges.push(at..at + data.data.len());
                }
            }
            _ => {}
        }
    }
    Some(ranges)
}

/// The node's engine, linker and programs.
pub struct Runtime {
    engine: Engine,
    linker: Linker<ProcCtx>,
    /// Every host function, to name a missing import.
    provided: Vec<SystemCall>,
    config: RuntimeConfig,
    /// Programs by the hash of what runs.
    programs: RwLock<HashMap<ContentHash, Arc<Program>>>,
    /// (hash of the input file, prepare?) → hash of what runs.
    inputs: RwLock<HashMap<(ContentHash, bool), ContentHash>>,
    /// Loads so far: the clock of [`Program::loaded`].
    loads: AtomicU64,
    ticker: Ticker,
    /// Memories of processes that arrived before them ([`crate::postcopy`]).
    late: Arc<LateMemories>,
}

/// Programs no process holds that stay loaded, the most recently loaded:
/// one run again soon is neither prepared nor compiled again, and a node
/// that keeps running new modules does not keep them all (each holds its
/// code's memory, and two of the 65,530 mappings a Linux process may have:
/// the system-call fuzzer ran a node out of them after 32,000 modules).
const UNUSED_KEPT: usize = 256;

impl Runtime {
    /// Creates the engine and linker and starts the quantum ticker.
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Arc<Self>> {
        let engine = engine(&config)?;
        let flags = YieldFlags::new(&engine)?;
        let mut linker = Linker::new(&engine);
        crate::syscall::register(&mut linker)?;
        linker.define(
            throwaway_store(&engine),
            FLAGS_MODULE,
            FLAGS_MEMORY,
            flags.memory().clone(),
        )?;
        let provided = system_calls(&engine, &linker);
        let ticker = Ticker::start(flags, config.tick);
        let late = LateMemories::new(config.postcopy_faults);
        Ok(Arc::new(Runtime {
            engine,
            linker,
            provided,
            config,
            programs: RwLock::default(),
            inputs: RwLock::default(),
            loads: AtomicU64::new(0),
            ticker,
            late,
        }))
    }

    /// The system calls a module may import, by module and name.
    pub fn system_calls(&self) -> &[SystemCall] {
        &self.provided
    }

    /// The node's memories still arriving after their processes.
    pub fn late_memories(&self) -> &Arc<LateMemories> {
        &self.late
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Instances the pool holds, for all kernels of the node.
    pub fn instances(&self) -> u32 {
        self.config.instances
    }

    pub(crate) fn max_memory(&self) -> usize {
        self.config.max_memory
    }

    pub(crate) fn ticker(&self) -> &Ticker {
        &self.ticker
    }

    /// Runs `f` at every tick of the quantum ticker while a guest runs
    /// (every [`RuntimeConfig::tick`]), on the ticker's thread: the node's
    /// links hand back the connections no kernel polls then. Set once;
    /// later calls are ignored.
    pub fn on_tick(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.ticker.shared.on_tick.set(Box::new(f));
    }

    /// Kernel `index` has just been sent something: if it is running a
    /// guest, the guest yields at its next safepoint (where it sees the
    /// doorbell) rather than up to a tick later. Every running guest pays
    /// one deadline check for it.
    pub fn interrupt(&self, index: u16) {
        self.ticker.interrupt(index);
    }

    /// A loaded program, by the hash a UArea records.
    pub fn program(&self, hash: &ContentHash) -> Option<Arc<Program>> {
        self.programs
            .read()
            .expect("program table")
            .get(hash)
            .cloned()
    }

    /// Loads a module file (binary or text), preparing it unless `prepare`
    /// is false.
    ///
    /// # Errors
    /// [`LoadError`] says whether the file is unreadable, not WebAssembly,
    /// cannot be prepared or compiled, or imports what atoll does not provide.
    pub fn load_file(&self, path: &Path, prepare: bool) -> Result<Arc<Program>, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.into(),
            source,
        })?;
        self.load(&bytes, prepare)
    }

    /// Loads a module from bytes (binary or text).
    pub fn load(&self, bytes: &[u8], prepare: bool) -> Result<Arc<Program>, LoadError> {
        let input = content_hash(bytes);
        if let Some(hash) = self
            .inputs
            .read()
            .expect("input table")
            .get(&(input, prepare))
        {
            if let Some(p) = self.program(hash) {
                p.loaded.store(self.tick(), Ordering::Relaxed);
                return Ok(p);
            }
        }
        let binary = to_binary(bytes)?;
        let module = if atoll_prepare::is_prepared(&binary) {
            // Run as it is, once checked: prepared by this version, and
            // reading the node's flags only.
            atoll_prepare::prepare(&binary, &self.config.prepare)?
        } else if prepare {
            self.prepared_module(input, &binary)?
        } else {
            binary
        };
        let prepared = atoll_prepare::is_prepared(&module);
        let hash = content_hash(&module);
        let program = match self.program(&hash) {
            Some(p) => p,
            None => {
                let compiled = self.compile(hash, &module)?;
                let pre = self.link(&compiled, prepared)?;
                let p = Arc::new(Program {
                    initialized: initialized_ranges(&module),
                    tables_fixed: tables_never_written(&module),
                    hash,
                    prepared,
                    module: module.into(),
                    pre,
                    loaded: AtomicU64::new(0),
                });
                let p = self
                    .programs
                    .write()
                    .expect("program table")
                    .entry(hash)
                    .or_insert(p)
                    .clone();
                self.evict_unused();
                p
            }
        };
        program.loaded.store(self.tick(), Ordering::Relaxed);
        self.inputs
            .write()
            .expect("input table")
            .insert((input, prepare), hash);
        Ok(program)
    }

    fn tick(&self) -> u64 {
        self.loads.fetch_add(1, Ordering::Relaxed)
    }

    /// Unloads the programs no process holds, beyond the [`UNUSED_KEPT`]
    /// most recently loaded. Under the table's write lock nobody can take a
    /// new reference, so a program held only by the table is unused.
    fn evict_unused(&self) {
        let mut programs = self.programs.write().expect("program table");
        let mut unused: Vec<(u64, ContentHash)> = programs
            .values()
            .filter(|p| Arc::strong_count(p) == 1)
            .map(|p| (p.loaded.load(Ordering::Relaxed), p.hash))
            .collect();
        let Some(excess) = unused.len().checked_sub(UNUSED_KEPT).filter(|&n| n > 0) else {
            return;
        };
        unused.sort_unstable();
        let gone: HashSet<ContentHash> = unused[..excess].iter().map(|&(_, h)| h).collect();
        programs.retain(|h, _| !gone.contains(h));
        drop(programs);
        self.inputs
            .write()
            .expect("input table")
            .retain(|_, h| !gone.contains(h));
    }

    fn prepared_module(&self, input: ContentHash, binary: &[u8]) -> Result<Vec<u8>, LoadError> {
        let cached = self.cache_path("prepared", &input, "wasm");
        if let Some(bytes) = cached.as_ref().and_then(|p| std::fs::read(p).ok()) {
            // A module prepared by another version of atoll is prepared
            // again, and so is anything that is not a module: its sections
            // (and so its `atoll.prepared` mark) are read only after the
            // wasm header.
            if atoll_prepare::prepared_source(&bytes) == Some(input) {
                return Ok(bytes);
            }
        }
        let out = atoll_prepare::prepare(binary, &self.config.prepare)?;
        if let Some(path) = cached {
            store_atomically(&path, &out);
        }
        Ok(out)
    }

    fn compile(&self, hash: ContentHash, module: &[u8]) -> Result<Module, LoadError> {
        let cached = self.cache_path("compiled", &hash, "cwasm");
        if let Some(path) = &cached {
            if path.exists() {
                // SAFETY: the file was written by `Module::serialize` of this
                // runtime into our own cache directory, and wasmtime checks
                // that it matches this engine's version and configuration.
                match unsafe { Module::deserialize_file(&self.engine, path) } {
                    Ok(m) => return Ok(m),
                    Err(e) => tracing::debug!(?path, "stale compiled module, recompiling: {e:#}"),
                }
            }
        }
        let compiled = Module::new(&self.engine, module).map_err(LoadError::Compile)?;
        if let (Some(path), Ok(bytes)) = (cached, compiled.serialize()) {
            store_atomically(&path, &bytes);
        }
        Ok(compiled)
    }

    /// Links `module` with the system calls, and, if `prepared`, the
    /// node's yield flags: a module that did not come out of preparation
    /// could write them.
    fn link(&self, module: &Module, prepared: bool) -> Result<InstancePre<ProcCtx>, LoadError> {
        for import in module.imports() {
            if (import.module(), import.name()) == (FLAGS_MODULE, FLAGS_MEMORY) {
                if !prepared {
                    return Err(LoadError::Link(format!(
                        "module imports `{FLAGS_MODULE}.{FLAGS_MEMORY}`, which only \
                         modules prepared by atoll may"
                    )));
                }
                continue;
            }
            if !self
                .provided
                .iter()
                .any(|c| c.module == import.module() && c.name == import.name())
            {
                return Err(LoadError::Link(format!(
                    "module imports `{}.{}`, which atoll does not provide",
                    import.module(),
                    import.name()
                )));
            }
        }
        let pre = self
            .linker
            .instantiate_pre(module)
            .map_err(|e| LoadError::Link(format!("{e:#}")))?;
        if module.get_export("_start").is_none() {
            return Err(LoadError::Link(
                "module does not export `_start` (not a WASI command)".into(),
            ));
        }
        if module.get_export("memory").is_none() {
            return Err(LoadError::Link("module does not export `memory`".into()));
        }
        Ok(pre)
    }

    fn cache_path(&self, kind: &str, hash: &ContentHash, ext: &str) -> Option<PathBuf> {
        let dir = self.config.cache_dir.as_ref()?.join(kind);
        std::fs::create_dir_all(&dir).ok()?;
        Some(dir.join(format!("{hash}.{ext}")))
    }
}

/// Set (to anything) in a node's environment, it writes a perf map of the
/// guests' code.
const PERF_MAP_ENV: &str = "ATOLL_PERF_MAP";

/// Bytes of an ended process's memory its pool slot keeps mapped.
pub(crate) const KEEP_RESIDENT: usize = 16 << 20;

/// The engine: a pooling allocator so that instantiating a process reuses
/// a warm slot instead of mapping and unmapping memory (whose TLB
/// shootdowns dominate otherwise). If the address space for the pool cannot
/// be reserved, instances are allocated on demand.
///
/// No epoch interruption: prepared code checks the node's yield flags
/// ([`YieldFlags`]), a shared memory, hence `shared_memory` (wasm threads
/// are a tier-2 feature of wasmtime; atoll uses one page of them, which
/// guests only read). Code run without preparation has no check at all:
/// it cannot be stopped anyway, and its kernel serves its messages when it
/// ends.
fn engine(config: &RuntimeConfig) -> anyhow::Result<Engine> {
    let mut wasm = Config::new();
    wasm.shared_memory(true);
    // Copy data segments at instantiation rather than map a copy-on-write
    // image: for the small modules atoll runs, a memcpy into a warm slot is
    // cheaper than the mmap/munmap pair and the TLB shootdowns it causes on
    // every other core.
    wasm.memory_init_cow(false);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(config.instances)
        .total_memories(config.instances)
        .total_tables(config.instances)
        .max_memory_size(config.max_memory)
        // An ended process's first 16 MiB stay mapped in its slot and are
        // reset by zeroing what it wrote (found with the pagemap scan); the
        // rest is given back. So a process of up to 16 MiB that starts in
        // a used slot (a fork, an arrival) writes into pages that exist: on
        // this VM each new page is a host fault too, and a fork of a
        // process holding 4 MiB took 1,049 us with 2 MiB kept, 283 with
        // 16. A node keeps at most what its processes once used, up to
        // 16 MiB a slot.
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(16 << 10)
        // What an ended process held past what is kept resident is given
        // back at once, and its slot is free again at once. Batched, a slot
        // waits for the batch with all of that memory still resident: a
        // node kept the memory of the last 64 processes of more than 2 MiB
        // (4.5 GiB after 18 moves of a 256 MiB process) and each newcomer
        // faulted in a fresh slot; fork+wait of a process holding 1 MiB
        // took 88 us batched against 67 us not, in one run.
        .decommit_batch_size(1)
        .pagemap_scan(Enabled::Auto);
    wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    // For `perf record`: the node writes /tmp/perf-PID.map, naming the
    // guests' compiled functions (README.md, "Using atoll").
    if std::env::var_os(PERF_MAP_ENV).is_some() {
        wasm.profiler(ProfilingStrategy::PerfMap);
    }
    match Engine::new(&wasm) {
        Ok(engine) => Ok(engine),
        Err(e) => {
            tracing::warn!("no instance pool ({e:#}); allocating instances on demand");
            wasm.allocation_strategy(InstanceAllocationStrategy::OnDemand);
            Ok(Engine::new(&wasm)?)
        }
    }
}

/// A system call: an import the runtime provides, with its signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemCall {
    /// `wasi_snapshot_preview1` or `atoll`.
    pub module: String,
    pub name: String,
    /// Parameter and result types as the text format names them (`i32`).
    pub params: Vec<String>,
    pub results: Vec<String>,
}

/// A store of no process, for what `Linker` does only through a store.
fn throwaway_store(engine: &Engine) -> wasmtime::Store<ProcCtx> {
    struct Nowhere;
    impl crate::ctx::Console for Nowhere {
        fn write(&self, _: crate::uarea::ConsoleId, _: crate::ctx::Stream, _: &[u8]) {}
        fn read(&self, _: crate::uarea::ConsoleId, _: atoll_abi::Pid, _: u32) {}
        fn drain(&self, _: crate::uarea::ConsoleId, _: atoll_abi::Pid, _: u64) {}
    }
    let pid = atoll_abi::Pid::new(atoll_abi::KernelId::new(0, 0), 0, 0);
    let uarea = crate::uarea::UArea::new(
        pid,
        None,
        content_hash(b""),
        vec![],
        vec![],
        crate::uarea::ConsoleId(0),
        crate::fd::FdTable::default(),
        None,
    );
    let host = crate::ctx::Host {
        kernel: pid.home,
        kernel_count: 1,
        console: Arc::new(Nowhere),
        wake: Arc::new(|| false),
        instances: Default::default(),
    };
    wasmtime::Store::new(engine, ProcCtx::new(uarea, host, Default::default()))
}

/// The imports the linker defines. `Linker` lists them only through a
/// store, so a throwaway one is made here, once.
fn system_calls(engine: &Engine, linker: &Linker<ProcCtx>) -> Vec<SystemCall> {
    let mut store = throwaway_store(engine);
    let defined: Vec<_> = linker
        .iter(&mut store)
        .map(|(m, n, e)| (m.to_owned(), n.to_owned(), e))
        .collect();
    let text = |t: wasmtime::ValType| t.to_string();
    let mut calls: Vec<SystemCall> = defined
        .into_iter()
        .filter_map(|(module, name, e)| {
            let ty = e.into_func()?.ty(&store);
            Some(SystemCall {
                module,
                name,
                params: ty.params().map(text).collect(),
                results: ty.results().map(text).collect(),
            })
        })
        .collect();
    calls.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
    calls
}

/// Accepts the binary format, or the text format (converted).
fn to_binary(bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
    if bytes.starts_with(b"\0asm") {
        return Ok(bytes.to_vec());
    }
    wat::parse_bytes(bytes)
        .map(|b| b.into_owned())
        .map_err(|e| {
            LoadError::Malformed(if std::str::from_utf8(bytes).is_ok() {
                format!("{e}")
            } else {
                "missing the \\0asm header".into()
            })
        })
}

/// Writes a cache entry so that readers never see half of it; a failure
/// only costs a later recompilation.
fn store_atomically(path: &Path, bytes: &[u8]) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
    if std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .is_err()
    {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(?path, "could not write cache entry");
    }
}

/// Raises the yield flag of every kernel running a guest, once a tick, so
/// that running guests check their quantum; sleeps when no guest runs, so
/// an idle node uses no CPU.
pub(crate) struct Ticker {
    shared: Arc<TickerShared>,
    thread: std::thread::Thread,
}

struct TickerShared {
    /// Guests running, counted per kernel (as its yield flag, kernel `i`
    /// in `i % SLOTS`) on separate cache lines: one shared counter bounced
    /// between cores on every slice of every kernel.
    running: Box<[Lane]>,
    /// One past the highest kernel that ever ran a guest: the ticker looks
    /// no further.
    lanes_used: AtomicUsize,
    flags: YieldFlags,
    /// Set while the ticker sleeps in `park`: only then does `enter` pay
    /// for an unpark (a futex wake and a task switch, ~1 µs). Kernels enter
    /// and leave guests thousands of times per millisecond under IPC.
    parked: AtomicBool,
    stop: AtomicBool,
    /// Run at each tick while a guest runs ([`Runtime::on_tick`]).
    on_tick: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// Idle ticks before the ticker parks: no guest ran for this many ticks.
const IDLE_TICKS: u32 = 10;

#[repr(align(128))]
#[derive(Default)]
struct Lane(AtomicUsize);

impl TickerShared {
    fn lane(&self, index: u16) -> &Lane {
        &self.running[index as usize % SLOTS]
    }

    fn used(&self) -> &[Lane] {
        &self.running[..self.lanes_used.load(Ordering::SeqCst)]
    }

    fn any_running(&self) -> bool {
        self.used().iter().any(|l| l.0.load(Ordering::SeqCst) > 0)
    }

    /// Raises the flag of every kernel running a guest; whether any was.
    fn raise_running(&self) -> bool {
        let mut any = false;
        for (i, lane) in self.used().iter().enumerate() {
            if lane.0.load(Ordering::SeqCst) > 0 {
                self.flags.raise(i as u16);
                any = true;
            }
        }
        any
    }
}

impl Ticker {
    fn start(flags: YieldFlags, tick: Duration) -> Ticker {
        let shared = Arc::new(TickerShared {
            running: (0..SLOTS).map(|_| Lane::default()).collect(),
            lanes_used: AtomicUsize::new(0),
            flags,
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            on_tick: OnceLock::new(),
        });
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("atoll-ticker".into())
            .spawn(move || {
                let mut idle = 0;
                while !s.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    if s.raise_running() {
                        idle = 0;
                        if let Some(f) = s.on_tick.get() {
                            f();
                        }
                        continue;
                    }
                    idle += 1;
                    if idle >= IDLE_TICKS {
                        // Dekker with `enter`: either it sees `parked` and
                        // unparks, or this sees its guest and stays awake.
                        s.parked.store(true, Ordering::SeqCst);
                        if !s.any_running() && !s.stop.load(Ordering::Relaxed) {
                            std::thread::park();
                        }
                        s.parked.store(false, Ordering::SeqCst);
                        idle = 0;
                    }
                }
            })
            .expect("spawn ticker thread");
        Ticker {
            thread: handle.thread().clone(),
            shared,
        }
    }

    /// The node's yield flags.
    pub(crate) fn flags(&self) -> &YieldFlags {
        &self.shared.flags
    }

    /// Makes the guest running on kernel `index` (if any) check for
    /// pending messages at its next safepoint, instead of at the next tick.
    pub(crate) fn interrupt(&self, index: u16) {
        if self.shared.lane(index).0.load(Ordering::SeqCst) > 0 {
            self.shared.flags.raise(index);
        }
    }

    /// A guest starts running on kernel `index`; wakes the ticker if it sleeps.
    pub(crate) fn enter(&self, index: u16) {
        let s = &self.shared;
        let lanes = index as usize % SLOTS + 1;
        // Read first: the line stays shared between the kernels' cores.
        if s.lanes_used.load(Ordering::SeqCst) < lanes {
            s.lanes_used.fetch_max(lanes, Ordering::SeqCst);
        }
        s.lane(index).0.fetch_add(1, Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
    }

    pub(crate) fn leave(&self, index: u16) {
        self.shared.lane(index).0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_that_writes_or_imports_a_table_has_no_fixed_tables() {
        let fixed = |wat: &str| tables_never_written(&wat::parse_str(wat).unwrap());
        let table = r#"(table 2 funcref) (elem (i32.const 0) $f) (func $f)"#;
        assert!(fixed(&format!(
            "(module {table} (func (drop (table.get 0 (i32.const 0)))))"
        )));
        for writes in [
            "(table.set 0 (i32.const 1) (ref.null func))",
            "(drop (table.grow 0 (ref.null func) (i32.const 1)))",
            "(table.fill 0 (i32.const 0) (ref.null func) (i32.const 1))",
            "(table.copy (i32.const 0) (i32.const 1) (i32.const 1))",
            "(table.init 0 (i32.const 0) (i32.const 0) (i32.const 1))",
        ] {
            let wat = format!("(module {table} (func {writes}))");
            assert!(!fixed(&wat), "{writes}");
        }
        assert!(!fixed(r#"(module (import "env" "t" (table 1 funcref)))"#));
        assert!(!tables_never_written(b"\0asm\x01\0\0\0\x0a\x05garbage"));
    }

    /// A command that differs from the others by `n`.
    fn command(n: usize) -> String {
        format!(
            r#"(module (global i32 (i32.const {n})) (memory (export "memory") 1)
                 (func (export "_start")))"#
        )
    }

    #[test]
    fn the_tick_hook_runs_while_a_guest_runs_and_not_after() {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        runtime.on_tick(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let wait_for = |n: usize| {
            let t = std::time::Instant::now();
            while ticks.load(Ordering::SeqCst) < n && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            ticks.load(Ordering::SeqCst)
        };
        runtime.ticker().enter(0);
        assert!(wait_for(3) >= 3, "the hook runs at each tick");
        runtime.ticker().leave(0);
        // No guest runs: the ticks that follow call nothing.
        std::thread::sleep(Duration::from_millis(5));
        let after = ticks.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(ticks.load(Ordering::SeqCst), after);
    }

    #[test]
    fn only_a_prepared_module_reads_the_yield_flags_and_none_writes_them() {
        use atoll_prepare::conventions::PREPARED_VERSION;
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let hash = content_hash(b"source");
        let module = |body: &str, mark: &str| {
            format!(
                r#"(module (import "atoll" "yield_flags" (memory 1 1 shared))
                     (memory (export "memory") 1)
                     (func (export "_start") {body})
                     (@custom "atoll.prepared" "{mark}"))"#
            )
        };
        let read = "(drop (i32.load 0 (i32.const 0)))";
        let write = "(i32.store 0 (i32.const 0) (i32.const 0))";
        let error = |wat: String| runtime.load(wat.as_bytes(), false).err().unwrap();
        // Made by hand, unprepared: it may not even link them.
        let unmarked = module(read, "").replace(r#"(@custom "atoll.prepared" "")"#, "");
        let e = error(unmarked);
        assert!(
            matches!(&e, LoadError::Link(why) if why.contains("only modules prepared")),
            "{e}"
        );
        // Marked as prepared, it is run as it is only if it just reads them.
        runtime
            .load(
                module(read, &format!("{PREPARED_VERSION} {hash}")).as_bytes(),
                false,
            )
            .unwrap();
        let e = error(module(write, &format!("{PREPARED_VERSION} {hash}")));
        assert!(
            matches!(&e, LoadError::Prepare(PrepareError::Unsupported(_))),
            "{e}"
        );
        // Prepared by another version of atoll: its checks may differ.
        let e = error(module(read, &format!("v0 {hash}")));
        assert!(e.to_string().contains("another version of atoll"), "{e}");
    }

    #[test]
    fn programs_nobody_holds_are_unloaded_beyond_the_most_recent() {
        let runtime = Runtime::new(RuntimeConfig {
            instances: 4,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let load = |n: usize| runtime.load(command(n).as_bytes(), false).unwrap();
        let held = load(0);
        let hashes: Vec<ContentHash> = (1..UNUSED_KEPT + 10).map(|n| load(n).hash()).collect();
        // The newest was still its caller's when the table was trimmed.
        let loaded = runtime.programs.read().unwrap().len();
        assert_eq!(
            loaded,
            1 + UNUSED_KEPT + 1,
            "the held one, the kept ones, the newest"
        );
        assert_eq!(runtime.inputs.read().unwrap().len(), loaded);
        assert!(
            runtime.program(&held.hash()).is_some(),
            "a held program stays"
        );
        assert!(
            runtime.program(&hashes[0]).is_none(),
            "the oldest unused one went"
        );

        // Loaded again, it is compiled again, under the same hash.
        assert_eq!(load(1).hash(), hashes[0]);
        // Loading a kept one again makes it the most recent: it outlives
        // those loaded after it when new programs come.
        let oldest_kept = hashes
            .iter()
            .position(|h| runtime.program(h).is_some())
            .unwrap();
        load(oldest_kept + 1);
        for n in UNUSED_KEPT + 10..UNUSED_KEPT + 20 {
            load(n);
        }
        assert!(
            runtime.program(&hashes[oldest_kept]).is_some(),
            "used again, it stayed"
        );
        assert!(runtime.program(&hashes[oldest_kept + 1]).is_none());
    }
}
