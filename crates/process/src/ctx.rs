//! What a running process's wasmtime store carries besides the guest.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use std::ptr::NonNull;

use atoll_abi::{KernelId, Pid};
use atoll_prepare::conventions as c;
use wasmtime::{AsContextMut, Global, Memory, StoreLimits, TypedFunc, Val};

use crate::call::{KernelLink, Reply};
use crate::uarea::{ConsoleId, UArea};
use crate::yield_flags::YieldFlags;

/// Which output stream of a console.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where processes' output goes and their input comes from. The node
/// implements it; a process only knows its [`ConsoleId`], so its output
/// reaches the same terminal from any kernel.
///
/// The console service answers `read` and `drain` by routing
/// [`Reply::Input`](crate::Reply::Input) and
/// [`Reply::Drained`](crate::Reply::Drained) to the process, wherever it runs
/// by then. What one kernel hands to a console is handled in the order it
/// was handed: a `drain` is answered after the writes before it.
pub trait Console: Send + Sync {
    fn write(&self, console: ConsoleId, stream: Stream, bytes: &[u8]);
    /// `pid` reads at most `max` bytes of its job's standard input.
    fn read(&self, console: ConsoleId, pid: Pid, max: u32);
    /// `pid` asks to be told (`Reply::Drained` when it waits, else its
    /// UArea updated) once its first `upto` bytes have been passed on.
    fn drain(&self, console: ConsoleId, pid: Pid, upto: u64);
}

/// Bytes a process may have written to its console that the console
/// service has not passed on yet; past them, a write waits (at a safepoint,
/// holding no thread) until they are ([`crate::ConsoleFlow`]). The node's
/// memory for output is so bounded by this much per writing process,
/// whatever its terminal does.
pub const CONSOLE_WINDOW: u64 = 64 << 10;

/// The kernel a process currently runs on, as its system calls see it.
#[derive(Clone)]
pub struct Host {
    pub kernel: KernelId,
    pub kernel_count: u16,
    pub console: Arc<dyn Console>,
    /// Returns true when the kernel has work waiting (NoC messages), so a
    /// running guest should yield at its next safepoint.
    pub wake: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Live containers on this kernel (each holds an instance of the
    /// node's pool), kept by the containers themselves: the kernel reads it
    /// to decide when processes go dormant.
    pub instances: Arc<AtomicUsize>,
}

impl Host {
    /// Decodes a guest's kernel argument ([`KernelId::from_arg`]). A kernel
    /// of this node must exist; one of another node is checked by the kernel.
    pub(crate) fn kernel_arg(&self, v: i32) -> Result<KernelId, atoll_abi::Errno> {
        match KernelId::from_arg(v, self.kernel) {
            Some(k) if k.node != self.kernel.node || k.index < self.kernel_count => Ok(k),
            _ => Err(atoll_abi::Errno::Inval),
        }
    }

    /// A kernel argument that may also be `ATOLL_KERNEL_ANY` (-1: `None`,
    /// the kernel chooses).
    pub(crate) fn kernel_choice(&self, v: i32) -> Result<Option<KernelId>, atoll_abi::Errno> {
        match v {
            -1 => Ok(None),
            k => self.kernel_arg(k).map(Some),
        }
    }
}

/// The store data of one process: its UArea plus host-side handles that are
/// rebuilt wherever the process runs.
pub struct ProcCtx {
    pub uarea: UArea,
    pub host: Host,
    /// The host files behind the UArea's descriptors, kept from their open
    /// while the process stays on their node (`crate::fs`).
    pub(crate) files: crate::fs::HostFiles,
    /// The kernel's answer to a file call that had to wait for it (a remote
    /// file's op, stdin, the console's drain), while the call, rewound, runs
    /// again to apply it (`crate::fs`).
    pub(crate) answer: Option<Reply>,
    /// Shared, because every slice and kernel call needs them and cloning
    /// wasmtime handles (typed functions) is not free.
    pub(crate) exports: Option<Arc<Exports>>,
    /// When the current slice began and when its quantum ends, on the TSC
    /// clock: a vDSO `clock_gettime` per slice edge was 8% of an IPC round trip.
    pub(crate) slice_start: quanta::Instant,
    pub(crate) deadline: quanta::Instant,
    /// When the last slice ended, as read for its CPU time.
    pub(crate) slice_end: quanta::Instant,
    /// Set while the stack is being rewound into a blocked host function.
    pub(crate) rewinding: bool,
    /// Asyncify's state still says "unwinding" after the export that
    /// unwound returned: it is set back only when the guest is next entered
    /// afresh, since a rewind, the usual next entry, sets it anyway
    /// ([`Asyncify::unwound`]).
    pub(crate) unwound: bool,
    /// Why the running thread unwound, when it was for its process's
    /// own business rather than for a kernel call.
    pub(crate) thread_stop: Option<crate::threads::ThreadStop>,
    pub(crate) limits: StoreLimits,
    /// The stack area's dirty length as last set, and the memory's size
    /// then: only a grow changes the global, and a grow changes the size,
    /// so while the size is the same the global need not be read (an
    /// unwind on the IPC path paid 4 % for reading it).
    pub(crate) area_dirty: Option<(u32, usize)>,
    /// The node's yield flags (`None` in a store of no process), and the
    /// offset of the flag the instance's checks read, as last set: it
    /// changes only when the process changes kernels.
    pub(crate) flags: Option<YieldFlags>,
    pub(crate) flag_at: Option<u32>,
    /// The address last written to Asyncify's data global: it changes
    /// only when the memory grows, and a global's write is not free
    /// ([`Asyncify::start_unwind`]).
    pub(crate) asyncify_data: Option<u32>,
    /// The function threads last started in, typed
    /// ([`crate::container::thread_function`]).
    pub(crate) thread_function: Option<(u32, Arc<TypedFunc<i32, ()>>)>,
    /// The saved stack of the thread last switched in, its buffer kept for
    /// the next thread that stops: a switch then allocates nothing.
    pub(crate) spare_stack: Vec<u8>,
    /// The kernel, lent for the current slice (see [`KernelLink`]); `None`
    /// between slices.
    pub(crate) link: Option<NonNull<dyn KernelLink>>,
    /// What keeps this store alive while its memory is lent
    /// ([`crate::loan`]).
    pub(crate) lender: crate::loan::Lender,
    /// The memory's blocks still to come from another node
    /// ([`crate::postcopy`]). Here rather than in the container, so that a
    /// store kept by a loan keeps receiving them.
    pub(crate) late: Option<crate::postcopy::LateMemory>,
}

// SAFETY: `link` is the only field that is not `Send`. It is set only for
// the length of one slice, by the thread that runs the slice, and is `None`
// whenever a container can change threads (between slices, when a kernel
// hands it over to another kernel).
unsafe impl Send for ProcCtx {}

impl ProcCtx {
    pub(crate) fn new(uarea: UArea, host: Host, limits: StoreLimits) -> Self {
        ProcCtx {
            uarea,
            host,
            files: Default::default(),
            answer: None,
            exports: None,
            slice_start: quanta::Instant::now(),
            deadline: quanta::Instant::now(),
            slice_end: quanta::Instant::now(),
            rewinding: false,
            unwound: false,
            thread_stop: None,
            limits,
            thread_function: None,
            spare_stack: Vec::new(),
            area_dirty: None,
            flags: None,
            flag_at: None,
            asyncify_data: None,
            link: None,
            lender: Default::default(),
            late: None,
        }
    }

    /// CPU time of the process so far, the running slice included.
    pub(crate) fn cpu_time_ns(&self) -> u64 {
        self.uarea.accounting.cpu_ns + self.slice_start.elapsed().as_nanos() as u64
    }

    pub(crate) fn exports(&self) -> &Arc<Exports> {
        self.exports
            .as_ref()
            .expect("exports are bound at instantiation")
    }

    /// Whether the process can wait in the kernel: only a prepared module
    /// can unwind its stack.
    pub(crate) fn can_wait(&self) -> bool {
        self.exports().asyncify.is_some()
    }
}

/// Handles into the instance that the host uses.
#[derive(Clone)]
pub(crate) struct Exports {
    pub memory: Memory,
    pub start: TypedFunc<(), ()>,
    /// The function table, where threads start
    /// (`atoll_prepare::conventions::TABLE_EXPORT`); prepared modules with
    /// a table only.
    pub table: Option<wasmtime::Table>,
    /// Present in prepared modules only.
    pub asyncify: Option<Arc<Asyncify>>,
}

/// A prepared module's hooks for saving and restoring its stack.
#[derive(Clone)]
pub(crate) struct Asyncify {
    /// Where the yield flag the checks read is, in the node's flag memory
    /// (`atoll_prepare::conventions::FLAG_AT_GLOBAL`).
    pub flag_at: Global,
    /// How much of the stack area may not be zero
    /// (`atoll_prepare::conventions::AREA_DIRTY_GLOBAL`).
    pub area_dirty: Global,
    /// Asyncify's state and the address of its data
    /// (`atoll_prepare::conventions::ASYNCIFY_STATE_GLOBAL`): setting them
    /// is what binaryen's `asyncify_start_unwind` and the others do, without
    /// the entry into wasm and the exit that calling them costs.
    pub state: Global,
    pub data: Global,
    /// `atoll_global_N` exports: every mutable global of the original module.
    pub globals: Vec<(String, Global)>,
}

impl Asyncify {
    /// Starts unwinding the guest's stack into the stack area at `area`
    /// (its header written): the host function must then return.
    ///
    /// A write of a global costs about half a call into wasm in wasmtime
    /// 48 (it looks up the global's type each time), so the data address
    /// is written only when it changed.
    pub fn start_unwind(
        &self,
        store: impl AsContextMut<Data = ProcCtx>,
        area: u32,
    ) -> wasmtime::Result<()> {
        self.start(store, area, c::ASYNCIFY_STATE_UNWINDING)
    }

    /// Starts rewinding the stack saved at `area`: the next call of the
    /// export that unwound comes back into the host function that did.
    pub fn start_rewind(
        &self,
        store: impl AsContextMut<Data = ProcCtx>,
        area: u32,
    ) -> wasmtime::Result<()> {
        self.start(store, area, c::ASYNCIFY_STATE_REWINDING)
    }

    /// Sets the state back to normal after an unwind. (A rewind ends in
    /// the module: it sets the state itself before it calls an import.)
    fn stop(&self, mut store: impl AsContextMut<Data = ProcCtx>) -> wasmtime::Result<()> {
        let mut store = store.as_context_mut();
        store.data_mut().unwound = false;
        self.state
            .set(&mut store, Val::I32(c::ASYNCIFY_STATE_NORMAL))
    }

    /// The export that unwound has returned. The state is left as it is
    /// until the guest is entered afresh ([`Asyncify::before_entry`]): the
    /// next entry is most often a rewind, which writes it anyway, and each
    /// write of a global was 2 % of an IPC round trip on one kernel.
    pub fn unwound(&self, mut store: impl AsContextMut<Data = ProcCtx>) {
        store.as_context_mut().data_mut().unwound = true;
    }

    /// Before the guest is entered: one entered afresh (not rewound) after
    /// an unwind finds the state normal.
    pub fn before_entry(
        &self,
        mut store: impl AsContextMut<Data = ProcCtx>,
    ) -> wasmtime::Result<()> {
        let store = store.as_context_mut();
        if store.data().unwound && !store.data().rewinding {
            return self.stop(store);
        }
        Ok(())
    }

    fn start(
        &self,
        mut store: impl AsContextMut<Data = ProcCtx>,
        area: u32,
        state: i32,
    ) -> wasmtime::Result<()> {
        let mut store = store.as_context_mut();
        store.data_mut().unwound = false;
        if store.data().asyncify_data != Some(area) {
            self.data.set(&mut store, Val::I32(area as i32))?;
            store.data_mut().asyncify_data = Some(area);
        }
        self.state.set(&mut store, Val::I32(state))
    }
}
