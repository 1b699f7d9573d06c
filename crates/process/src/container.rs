//! A container: one process's wasmtime store and instance, run slice by slice.
//!
//! The kernel owns containers and drives them with [`Container::run`]: the
//! guest runs until it exits, traps, or enters the kernel (a blocking system
//! call, or a safepoint after its quantum ran out). Between slices the
//! guest's stack is unwound into its linear memory, so a container that is
//! not running can be captured as a [`ProcessImage`] and restored — on this
//! kernel or any other — with [`Container::restore`].
//!
//! The same capture lets a container that is not running go *dormant*
//! ([`Container::hibernate`]): its instance is given back to the pool and
//! the process is kept as its image, the non-zero blocks of its memory
//! only. Its UArea stays readable and writable (a reply can be posted to
//! it); its memory is reachable again after [`Container::wake`]. This is
//! what lets a node hold far more processes than it has instances.

use std::borrow::Cow;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use atoll_abi::KernelId;
use quanta::Instant;
use smallvec::SmallVec;

use wasmtime::{Global, Store, StoreLimits, StoreLimitsBuilder, TypedFunc, Val};

use crate::call::{CallState, IpcCaller, KernelCall, KernelLink, Reply, Yielding};
use crate::clock::monotonic_ns;
use crate::ctx::{Asyncify, Exports, Host, ProcCtx};
use crate::fd::Fd;
use crate::fs::held::HeldFiles;
use crate::fs::{ghost, HostFiles};
use crate::image::{
    GlobalValue, ImageParts, ImageView, MemoryView, ProcessImage, BLOCK, PAGE_SIZE,
};
use crate::loan::Instance;
use crate::runtime::{Program, Runtime};
use crate::spare::Spares;
use crate::syscall::ProcExit;
use crate::threads::{Context, Entry, Saved, ThreadStop, Tid, Wait, MAX_LOCALS};
use crate::uarea::{StackArea, UArea};
use crate::yield_flags::YieldFlags;

/// A stopped process, encoded ([`Container::encode`]).
#[derive(Debug)]
pub struct EncodedImage {
    pub bytes: Vec<u8>,
    /// Memory blocks in it.
    pub blocks: usize,
}

/// How a slice ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Slice {
    /// The process ended with this status.
    Exited(i32),
    /// The guest trapped; the message names the trap and where it happened.
    Trapped(String),
    /// The process entered the kernel with this call and is unwound. (In a
    /// process with threads, one of them did; the others may still be
    /// ready: [`crate::threads::Threads::runnable`].)
    Call(KernelCall),
    /// Its threads are ready but its time is up (the quantum ran out, or
    /// the kernel has messages): it goes back in the run queue.
    Preempted(Yielding),
    /// None of its threads can run: they wait within the process (the
    /// kernel runs it again at `until_ns`, the earliest deadline one waits
    /// for) or for the kernel call of the one in the kernel.
    Idle { until_ns: Option<u64> },
}

/// Why a container could not be created, restored or captured.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("cannot instantiate: {0:#}")]
    Instantiate(wasmtime::Error),
    #[error("module {0} is not loaded on this node")]
    UnknownModule(String),
    #[error("process is not stopped at a safepoint")]
    NotStopped,
    #[error("module was run without preparation: its stack and globals cannot be captured")]
    NotPrepared,
    #[error("process image does not fit this module: {0}")]
    BadImage(String),
    /// An open file with no name that a checkpoint cannot keep, or a
    /// restore cannot make again (`fs/ghost.rs`).
    #[error("{0}")]
    Ghost(String),
    /// A memory arriving after its process never came whole
    /// ([`crate::postcopy`]).
    #[error("{0}")]
    MemoryLost(String),
}

/// One process: the program it runs, and its state, live in an instance
/// or dormant as an image.
pub struct Container {
    state: State,
    program: Arc<Program>,
    runtime: Arc<Runtime>,
}

enum State {
    /// In a wasmtime instance: it can run, and its memory is mapped. Counted
    /// in its kernel's [`Host::instances`].
    Live(Instance),
    /// Out of any instance.
    Dormant(Box<Dormant>),
}

/// A process out of any instance: the image it would be captured as, the
/// kernel it is on, and the host files it keeps open meanwhile.
struct Dormant {
    image: ProcessImage,
    host: Host,
    files: HostFiles,
}

/// A dormant container's live-only parts were used: the kernel must wake a
/// process before it runs it or touches its memory.
const DORMANT: &str = "internal error: a dormant process was used as a live one";

impl Container {
    /// Instantiates `program` for a process that has not run yet.
    ///
    /// # Errors
    /// [`ContainerError::Instantiate`] when the instance cannot be created
    /// (its memory exceeds the limit, its start function traps).
    pub fn new(
        runtime: &Arc<Runtime>,
        program: Arc<Program>,
        uarea: UArea,
        host: Host,
    ) -> Result<Self, ContainerError> {
        let store = Container::instantiate(runtime, &program, uarea, host)?;
        Ok(Container {
            state: State::Live(Instance::new(store)),
            program,
            runtime: runtime.clone(),
        })
    }

    /// Rebuilds a stopped process from a complete image, on whatever kernel
    /// `host` names.
    ///
    /// # Errors
    /// [`ContainerError::UnknownModule`] if the image's code is not loaded
    /// here; [`ContainerError::BadImage`] if the image is a delta or does
    /// not match the module.
    pub fn restore(
        runtime: &Arc<Runtime>,
        image: ProcessImage,
        host: Host,
    ) -> Result<Self, ContainerError> {
        let ProcessImage {
            uarea,
            globals,
            memory,
        } = image;
        let image = ImageView {
            uarea,
            globals,
            memory: memory.view(),
        };
        Container::restore_view(runtime, image, host)
    }

    /// [`restore`](Self::restore) from an image whose memory is still in
    /// the bytes it was decoded from ([`ProcessImage::decode_view`]).
    ///
    /// # Errors
    /// As [`restore`](Self::restore).
    pub fn restore_view(
        runtime: &Arc<Runtime>,
        image: ImageView<'_>,
        host: Host,
    ) -> Result<Self, ContainerError> {
        if !image.memory.complete || image.uarea.threads.needs_earlier_frame() {
            return Err(ContainerError::BadImage(
                "a delta image cannot start a process".into(),
            ));
        }
        Container::rebuild(runtime, image, host, None)
    }

    /// A new instance with `image` written into it: over the memory as
    /// instantiation left it if the image is a delta. Or `spare`, reused
    /// ([`crate::spare`]), if the image is not complete and its memory is
    /// given back before it is run ([`restore_late`](Self::restore_late)).
    fn rebuild(
        runtime: &Arc<Runtime>,
        image: ImageView<'_>,
        host: Host,
        spare: Option<Container>,
    ) -> Result<Self, ContainerError> {
        let ImageView {
            uarea,
            globals,
            memory,
        } = image;
        let (mut c, fresh) = match spare {
            Some(mut spare) => {
                spare.reuse(uarea, host)?;
                (spare, false)
            }
            None => {
                let program = runtime
                    .program(&uarea.module)
                    .ok_or_else(|| ContainerError::UnknownModule(uarea.module.to_string()))?;
                let store = Container::instantiate(runtime, &program, uarea, host)?;
                let c = Container {
                    state: State::Live(Instance::new(store)),
                    program,
                    runtime: runtime.clone(),
                };
                (c, true)
            }
        };
        c.load(&globals, &memory, fresh)?;
        Ok(c)
    }

    /// [`restore_view`](Self::restore_view) from an image that carries only
    /// some of the memory's blocks ([`resume_blocks`](Self::resume_blocks)):
    /// the blocks `coming` follow from kernel `from` ([`crate::postcopy`]).
    /// With `userfaultfd` the process may run at once; without, its kernel
    /// must [`settle`](Self::settle) it first.
    ///
    /// # Errors
    /// As [`restore_view`](Self::restore_view); [`ContainerError::BadImage`]
    /// when `coming` does not fit the memory or names blocks the image
    /// carries.
    pub fn restore_late(
        runtime: &Arc<Runtime>,
        mut image: ImageView<'_>,
        host: Host,
        coming: &[Range<u32>],
        from: KernelId,
        spares: &mut Spares,
    ) -> Result<Self, ContainerError> {
        if image.uarea.threads.needs_earlier_frame() {
            return Err(ContainerError::BadImage(
                "a delta image cannot start a process".into(),
            ));
        }
        let carried = take_runs(&mut image);
        let spare = spares.take(&image.uarea.module, image.memory.pages as u64);
        let mut c = Container::rebuild(runtime, image, host, spare)?;
        c.await_memory(runtime, carried, coming, from)?;
        Ok(c)
    }

    /// As [`restore_late`](Self::restore_late), into this container, made
    /// from a frame without memory while the process still ran at its
    /// source, its pages given back since
    /// ([`give_back_memory`](Self::give_back_memory)): `image` is the
    /// stop-and-copy.
    ///
    /// # Errors
    /// As [`apply`](Self::apply) and [`restore_late`](Self::restore_late).
    pub fn apply_late(
        &mut self,
        runtime: &Arc<Runtime>,
        mut image: ImageView<'_>,
        coming: &[Range<u32>],
        from: KernelId,
    ) -> Result<(), ContainerError> {
        let carried = take_runs(&mut image);
        self.apply(image)?;
        self.await_memory(runtime, carried, coming, from)
    }

    /// Gives back every page of the memory, which then reads zero: a
    /// container made ahead of a post-copy, whose blocks must have no page
    /// when they are registered with `userfaultfd`. Done before the freeze,
    /// it spares the process's downtime the pages a pool slot keeps
    /// resident (16 MiB to give back took 1.0-1.3 ms on the 2-core VM).
    ///
    /// # Errors
    /// [`ContainerError::BadImage`] if the system refuses (`madvise`).
    pub fn give_back_memory(&mut self) -> Result<(), ContainerError> {
        crate::postcopy::give_back_all(self.memory_mut()).map_err(ContainerError::BadImage)
    }

    /// Registers the blocks `coming` from kernel `from` as arriving
    /// ([`crate::postcopy`]), then writes the blocks the image `carried`.
    fn await_memory(
        &mut self,
        runtime: &Arc<Runtime>,
        carried: MemoryView<'_>,
        coming: &[Range<u32>],
        from: KernelId,
    ) -> Result<(), ContainerError> {
        let pid = self.uarea().pid;
        let late = runtime
            .late_memories()
            .expect(pid, from, self.memory_mut(), coming)
            .map_err(ContainerError::BadImage)?;
        self.store_mut().data_mut().late = Some(late);
        // Written after the registration, which leaves a zero page behind
        // every block not coming: these are written as any page is.
        for run in &carried.runs {
            let (at, end) = (
                run.at as usize / BLOCK,
                (run.at as usize + run.bytes.len()).div_ceil(BLOCK),
            );
            if coming
                .iter()
                .any(|r| (r.start as usize) < end && at < r.end as usize)
            {
                return Err(ContainerError::BadImage(format!(
                    "the image carries blocks {at}..{end}, which follow it too"
                )));
            }
        }
        carried
            .write_into(self.memory_mut(), &[])
            .map_err(ContainerError::BadImage)
    }

    /// The blocks a stopped process reads first when it resumes, ascending:
    /// its saved stack (Asyncify's data) in use, and the blocks its
    /// globals point at and the next (the stack pointer's: the frames it
    /// returns to). What a post-copy sends with the image rather than
    /// after it. None for a dormant process.
    pub fn resume_blocks(&mut self) -> Vec<u32> {
        let State::Live(store) = &mut self.state else {
            return Vec::new();
        };
        let memory = store.data().exports().memory.data(&**store);
        let blocks = memory.len().div_ceil(BLOCK);
        let mut first: Vec<u32> = Vec::new();
        if let Some(area) = store.data().uarea.stack_area {
            let at = area.addr as usize;
            if let Some(current) = memory.get(at..at + 4) {
                let end = u32::from_le_bytes(current.try_into().expect("4 bytes")) as usize;
                let end = end.clamp(at, memory.len());
                first.extend((at / BLOCK) as u32..end.div_ceil(BLOCK) as u32);
            }
        }
        for (_, v) in stopped_globals(store).unwrap_or_default() {
            if let GlobalValue::I32(v) = v {
                let b = v as u32 as usize / BLOCK;
                first.extend((b..(b + 2).min(blocks)).map(|b| b as u32));
            }
        }
        first.sort_unstable();
        first.dedup();
        first
    }

    /// Waits until every block of a memory arriving after its process is
    /// in (at once if none is awaited).
    ///
    /// # Errors
    /// [`ContainerError::MemoryLost`]: its source's node was lost first;
    /// the process must end.
    pub fn settle(&mut self) -> Result<(), ContainerError> {
        let State::Live(store) = &mut self.state else {
            return Ok(());
        };
        match store.data_mut().late.take() {
            Some(late) => late.wait().map_err(ContainerError::MemoryLost),
            None => Ok(()),
        }
    }

    /// The process has ended: a memory still arriving is let go, here and
    /// at its source (`postcopy`), before the container itself goes.
    pub fn let_late_go(&mut self) {
        if let State::Live(store) = &mut self.state {
            drop(store.data_mut().late.take());
        }
    }

    /// The node a memory arriving after its process comes from, while
    /// blocks are still to come or if they never came.
    pub fn late_from(&self) -> Option<u16> {
        match &self.state {
            State::Live(store) => store.data().late.as_ref().and_then(|l| l.from_node()),
            State::Dormant(_) => None,
        }
    }

    /// Gives the instance back and keeps the process as its image: the
    /// non-zero blocks of its memory, its globals and its UArea.
    ///
    /// # Errors
    /// As [`capture`](Self::capture): only a prepared process stopped at a
    /// safepoint (or never run) can go dormant. It then stays live.
    pub fn hibernate(&mut self) -> Result<(), ContainerError> {
        if self.is_dormant() {
            return Ok(());
        }
        let image = self.capture()?;
        let ctx = self.store_mut().data_mut();
        let (host, files) = (ctx.host.clone(), std::mem::take(&mut ctx.files));
        host.instances.fetch_sub(1, Ordering::Relaxed);
        self.state = State::Dormant(Box::new(Dormant { image, host, files }));
        Ok(())
    }

    /// Puts a dormant process back into an instance, as it was.
    ///
    /// # Errors
    /// [`ContainerError::Instantiate`] if no instance can be had (the pool
    /// is exhausted); the process then stays dormant.
    pub fn wake(&mut self) -> Result<(), ContainerError> {
        let State::Dormant(dormant) = &self.state else {
            return Ok(());
        };
        let store = Container::instantiate(
            &self.runtime,
            &self.program,
            dormant.image.uarea.clone(),
            dormant.host.clone(),
        )?;
        let State::Dormant(mut dormant) =
            std::mem::replace(&mut self.state, State::Live(Instance::new(store)))
        else {
            unreachable!("checked above")
        };
        if let Err(e) = self.load(&dormant.image.globals, &dormant.image.memory.view(), true) {
            dormant.host.instances.fetch_sub(1, Ordering::Relaxed);
            self.state = State::Dormant(dormant);
            return Err(e);
        }
        self.adopt_files(std::mem::take(&mut dormant.files));
        Ok(())
    }

    /// Whether the process is out of any instance (see [`hibernate`](Self::hibernate)).
    pub fn is_dormant(&self) -> bool {
        matches!(self.state, State::Dormant(_))
    }

    fn store(&self) -> &Store<ProcCtx> {
        match &self.state {
            State::Live(store) => store,
            State::Dormant(_) => panic!("{DORMANT}"),
        }
    }

    fn store_mut(&mut self) -> &mut Store<ProcCtx> {
        match &mut self.state {
            State::Live(store) => store,
            State::Dormant(_) => panic!("{DORMANT}"),
        }
    }

    /// Brings a restored process up to date with a later image of it (the
    /// next frame of its migration stream): memory blocks, globals and UArea.
    ///
    /// # Errors
    /// [`ContainerError::BadImage`] if the image is of another program or
    /// does not fit. The container may then be partly updated; a migration
    /// drops it.
    pub fn apply(&mut self, image: ImageView<'_>) -> Result<(), ContainerError> {
        if image.uarea.module != self.uarea().module || image.uarea.pid != self.uarea().pid {
            return Err(ContainerError::BadImage(format!(
                "image of {} does not continue process {}",
                image.uarea.pid,
                self.uarea().pid
            )));
        }
        let mut uarea = image.uarea;
        uarea
            .threads
            .resolve_sent(&mut self.uarea_mut().threads)
            .map_err(ContainerError::BadImage)?;
        self.load(&image.globals, &image.memory, false)?;
        *self.uarea_mut() = uarea;
        Ok(())
    }

    /// Writes an image's memory and globals into the instance (`fresh`:
    /// just instantiated).
    fn load(
        &mut self,
        globals: &[(String, GlobalValue)],
        memory: &MemoryView<'_>,
        fresh: bool,
    ) -> Result<(), ContainerError> {
        if self.store().data().exports().asyncify.is_none() {
            return Err(ContainerError::NotPrepared);
        }
        self.write_memory(memory, fresh)?;
        self.set_globals(globals)
    }

    /// Sets the globals Asyncify and the module keep the process's state in.
    fn set_globals(&mut self, globals: &[(String, GlobalValue)]) -> Result<(), ContainerError> {
        let asyncify = self
            .store()
            .data()
            .exports()
            .asyncify
            .clone()
            .ok_or(ContainerError::NotPrepared)?;
        for (name, value) in globals {
            let global = asyncify
                .globals
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, g)| *g)
                .ok_or_else(|| ContainerError::BadImage(format!("no global `{name}`")))?;
            global
                .set(self.store_mut(), val(*value))
                .map_err(|e| ContainerError::BadImage(format!("global `{name}`: {e}")))?;
        }
        // The memory written came from elsewhere, its stack area with it:
        // the whole area may hold saved stacks.
        let reserved = atoll_prepare::conventions::ASYNCIFY_RESERVED_PAGES
            * atoll_prepare::conventions::WASM_PAGE_SIZE;
        asyncify
            .area_dirty
            .set(self.store_mut(), Val::I32(reserved as i32))
            .map_err(|e| ContainerError::BadImage(format!("stack area: {e}")))?;
        self.store_mut().data_mut().area_dirty = None;
        Ok(())
    }

    /// A store with a new instance of `program`, counted in `host`'s
    /// instances.
    fn instantiate(
        runtime: &Arc<Runtime>,
        program: &Program,
        uarea: UArea,
        host: Host,
    ) -> Result<Store<ProcCtx>, ContainerError> {
        let limits = store_limits(runtime, &uarea);
        let mut store = Store::new(runtime.engine(), ProcCtx::new(uarea, host, limits));
        store.limiter(|ctx| &mut ctx.limits);
        store.data_mut().flags = Some(runtime.ticker().flags().clone());
        let instance = program
            .pre()
            .instantiate(&mut store)
            .map_err(ContainerError::Instantiate)?;
        let exports = bind_exports(&mut store, &instance, program.prepared())
            .map_err(ContainerError::Instantiate)?;
        store.data_mut().exports = Some(Arc::new(exports));
        store.data().host.instances.fetch_add(1, Ordering::Relaxed);
        Ok(store)
    }

    /// Runs the process for at most about `quantum` (the next safepoint after
    /// it), or until it exits or enters the kernel. A zero quantum stops a
    /// prepared module at its very next safepoint: each slice then advances
    /// exactly one safepoint.
    ///
    /// A process with threads ([`crate::threads`]) runs its ready threads
    /// in turn within the slice, until one enters the kernel, none is
    /// ready, or the quantum is used up.
    ///
    /// `link` is the kernel, which the process's IPC calls use during the
    /// slice; without one they fail with `ENOSYS`.
    ///
    /// A dormant process is woken first; if it cannot be, the slice ends
    /// as a trap that says why.
    pub fn run(&mut self, quantum: Duration, link: Option<&mut dyn KernelLink>) -> Slice {
        // It ended, and waited for its output (`UArea::end_step`): none of
        // its code runs again.
        if let Some(ending) = &self.uarea().ending {
            return Slice::Exited(ending.status);
        }
        if let Err(e) = self.wake() {
            return Slice::Trapped(format!("cannot wake the dormant process: {e}"));
        }
        let State::Live(store) = &mut self.state else {
            unreachable!("woken above")
        };
        let exports = store.data().exports().clone();
        let lane = store.data().host.kernel.index;
        if let Some(a) = &exports.asyncify {
            let at = YieldFlags::offset(lane);
            if store.data().flag_at != Some(at) {
                if let Err(e) = a.flag_at.set(&mut **store, Val::I32(at as i32)) {
                    return Slice::Trapped(format!("cannot point at the yield flag: {e:#}"));
                }
                store.data_mut().flag_at = Some(at);
            }
        }
        // Raised by a tick or a message of the slice before: not this one's.
        let flags = self.runtime.ticker().flags();
        if quantum.is_zero() {
            flags.raise(lane);
        } else {
            flags.lower(lane);
        }
        let now = Instant::now();
        let ctx = store.data_mut();
        ctx.slice_start = now;
        ctx.deadline = now + quantum;
        ctx.uarea.accounting.slices += 1;
        ctx.uarea.accounting.last_kernel = Some(ctx.host.kernel);
        // SAFETY: only the lifetime is erased. The pointer is used by host
        // functions, which run only inside the calls below, and is cleared
        // right after them, while `link` is still borrowed.
        store.data_mut().link = link.map(|l| unsafe {
            NonNull::new_unchecked(std::mem::transmute::<
                *mut (dyn KernelLink + '_),
                *mut (dyn KernelLink + 'static),
            >(l))
        });
        self.runtime.ticker().enter(lane);
        let slice = if store.data().uarea.threads.active() {
            run_threads(store, &exports, None)
        } else {
            run_alone(store, &exports)
        };
        self.runtime.ticker().leave(lane);
        let ctx = store.data_mut();
        ctx.link = None;
        ctx.slice_end = Instant::now();
        ctx.uarea.accounting.cpu_ns += (ctx.slice_end - now).as_nanos() as u64;
        // Past its first slice, a process that went ahead of its memory
        // will want the rest: it streams now (unless the process ended or
        // replaces its program).
        if let Some(late) = &ctx.late {
            if !matches!(
                slice,
                Slice::Exited(_) | Slice::Trapped(_) | Slice::Call(KernelCall::Exec(_))
            ) {
                late.stream();
            }
        }
        slice
    }

    /// When its last slice ended ([`run`](Self::run)); `None` if it is
    /// dormant. A kernel that has just run it can read the clock here
    /// rather than again: IPC on one kernel is a slice a message.
    pub fn slice_end(&self) -> Option<Instant> {
        match &self.state {
            State::Live(store) => Some(store.data().slice_end),
            State::Dormant(_) => None,
        }
    }

    /// Answers the kernel call the process is blocked in; it returns the
    /// reply when it next runs.
    pub fn reply(&mut self, reply: Reply) {
        let call = &mut self.uarea_mut().call;
        debug_assert!(
            matches!(call, CallState::Blocked(_)),
            "reply to a process not in a call"
        );
        *call = CallState::Replied(reply);
    }

    /// Captures the whole process. It must be stopped: not yet started, or
    /// unwound in a kernel call.
    ///
    /// # Errors
    /// [`ContainerError::NotPrepared`] for modules run without preparation;
    /// [`ContainerError::NotStopped`] if the process is not at a safepoint.
    pub fn capture(&mut self) -> Result<ProcessImage, ContainerError> {
        Ok(self.stopped(|b| MemoryView::whole(b))?.into_image())
    }

    /// Captures the whole process for a checkpoint file: as
    /// [`capture`](Self::capture), with the bytes of every file it holds
    /// open on this node that has no name left, which a restore could not
    /// reopen (`fs/ghost.rs`).
    ///
    /// # Errors
    /// As [`capture`](Self::capture); [`ContainerError::Ghost`] for such a
    /// file that is too large to keep, or cannot be read.
    pub fn checkpoint(&mut self) -> Result<ProcessImage, ContainerError> {
        let mut image = self.capture()?;
        let files = match &self.state {
            State::Live(store) => &store.data().files,
            State::Dormant(dormant) => &dormant.files,
        };
        for (fd, handle) in files.kept() {
            if let Ok(Fd::File(f)) = image.uarea.fds.get_mut(fd) {
                f.ghost = ghost::keep(handle, f).map_err(ContainerError::Ghost)?;
            }
        }
        Ok(image)
    }

    /// After a restore on node `node`: the files its checkpoint kept for
    /// having no name are made again, nameless, and their descriptors get
    /// their handles.
    ///
    /// # Errors
    /// [`ContainerError::Ghost`] if one cannot be made, or its directory
    /// is another node's (it must be restored there).
    pub fn revive_ghosts(&mut self, node: u16) -> Result<(), ContainerError> {
        let (uarea, files) = self.uarea_and_files();
        let ghosts: Vec<u32> = uarea
            .fds
            .files()
            .filter(|(_, f)| f.ghost.is_some())
            .map(|(fd, _)| fd)
            .collect();
        for fd in ghosts {
            let Ok(Fd::File(f)) = uarea.fds.get_mut(fd) else {
                continue;
            };
            if f.owner.node != node {
                return Err(ContainerError::Ghost(format!(
                    "descriptor {fd} is the unlinked file {}, kept in the checkpoint; its directory is node {}'s: restore it there",
                    f.host.display(),
                    f.owner.node
                )));
            }
            let file = ghost::revive(f).map_err(|e| {
                ContainerError::Ghost(format!(
                    "cannot make the unlinked file {} again: {e}",
                    f.host.display()
                ))
            })?;
            files.keep(fd, file);
        }
        Ok(())
    }

    fn uarea_and_files(&mut self) -> (&mut UArea, &mut HostFiles) {
        match &mut self.state {
            State::Live(store) => {
                let ctx = store.data_mut();
                (&mut ctx.uarea, &mut ctx.files)
            }
            State::Dormant(d) => (&mut d.image.uarea, &mut d.files),
        }
    }

    /// Encodes the process for another kernel, as an image without a
    /// checksum ([`ProcessImage::decode_in_transit`] reads it), with the
    /// part of its memory `memory` takes from its bytes (all of it, the
    /// blocks written since a pre-copy round, a piece of a first round),
    /// straight from the process: a migration sends each round as soon as
    /// it is taken, and copying the UArea or the memory into an image first
    /// cost time that is downtime in the last round. A dormant process is
    /// encoded whole.
    ///
    /// # Errors
    /// As [`capture`](Self::capture).
    pub fn encode(
        &mut self,
        memory: impl for<'m> FnOnce(&'m [u8]) -> MemoryView<'m>,
    ) -> Result<EncodedImage, ContainerError> {
        let parts = self.stopped(memory)?;
        Ok(EncodedImage {
            bytes: parts.encode_in_transit(),
            blocks: parts.memory.blocks(),
        })
    }

    /// A stopped process's UArea, globals and the memory `memory` takes
    /// (all of it, if dormant: its image).
    fn stopped(
        &mut self,
        memory: impl for<'m> FnOnce(&'m [u8]) -> MemoryView<'m>,
    ) -> Result<ImageParts<'_>, ContainerError> {
        // What is read below must all be there.
        self.settle()?;
        let store = match &mut self.state {
            State::Live(store) => store,
            // Stopped, since it went dormant.
            State::Dormant(dormant) => return Ok(dormant.image.parts()),
        };
        let globals = stopped_globals(store)?;
        let memory = memory(store.data().exports().memory.data(&**store));
        Ok(ImageParts {
            uarea: &store.data().uarea,
            globals: Cow::Owned(globals),
            memory,
        })
    }

    /// The opens of other nodes this process closed since last asked: the
    /// kernels that hold them for it are to be told ([`HeldFiles::close`]).
    pub fn take_closed_files(&mut self) -> Vec<(KernelId, u64)> {
        self.files_mut().take_closed_away()
    }

    /// Takes over the host files that `old`, the container this one
    /// replaces (`atoll_exec`), kept open: the descriptors stay open.
    pub fn take_files_of(&mut self, old: &mut Container) {
        self.adopt_files(std::mem::take(old.files_mut()));
    }

    /// Duplicates of the host files this process keeps open, for its copy
    /// on another kernel of this node ([`adopt_files`](Self::adopt_files)):
    /// one OS process, so they are valid there.
    pub fn duplicate_files(&mut self) -> HostFiles {
        self.files_mut().duplicate()
    }

    /// Keeps `files` open for this process, which was copied here from a
    /// kernel of the same node ([`duplicate_files`](Self::duplicate_files)).
    pub fn adopt_files(&mut self, files: HostFiles) {
        *self.files_mut() = files;
    }

    fn files_mut(&mut self) -> &mut HostFiles {
        match &mut self.state {
            State::Live(store) => &mut store.data_mut().files,
            State::Dormant(dormant) => &mut dormant.files,
        }
    }

    /// Before the process leaves its node for another: output it wrote
    /// here that the console has not passed on yet must reach it before
    /// what the process writes elsewhere, and before its end, so the drain
    /// that follows that output is asked now, from here
    /// ([`ConsoleFlow`](crate::ConsoleFlow)).
    pub fn leave_node(&mut self) {
        let (uarea, host) = match &mut self.state {
            State::Live(store) => {
                let ctx = store.data_mut();
                (&mut ctx.uarea, &ctx.host)
            }
            State::Dormant(dormant) => (&mut dormant.image.uarea, &dormant.host),
        };
        let console = uarea.console;
        if let Some(upto) = uarea.console_flow.leaving(host.kernel.node, console.node()) {
            host.console.drain(console, uarea.pid, upto);
        }
    }

    /// Before the process leaves its node for node `node`: the files of
    /// this node it keeps open go to `held` (duplicates of its handles),
    /// from which `kernel` serves them to it from afar, and its descriptors
    /// name `kernel` as their owner. A file whose handle it lost (to be
    /// reopened by path) is left as it is.
    pub fn hold_files(&mut self, held: &mut HeldFiles, kernel: KernelId, node: u16) {
        let (uarea, files) = self.uarea_and_files();
        let pid = uarea.pid;
        for (fd, handle) in files.kept() {
            let Ok(Fd::File(f)) = uarea.fds.get_mut(fd) else {
                continue;
            };
            if f.owner.node != kernel.node {
                continue;
            }
            if let Ok(dup) = handle.try_clone() {
                held.hold(pid, f, dup, node);
                f.owner = kernel;
                f.held = true;
            }
        }
    }

    /// A copy of this stopped process as a new process with `uarea`, on
    /// `host`: what fork makes. Memory goes straight from this instance to
    /// the new one, non-zero blocks only, without an image between them;
    /// the child's host files are duplicates of this process's. The new
    /// one is a spare instance of this program if `spares` has one.
    ///
    /// # Errors
    /// As [`capture`](Self::capture), and [`ContainerError::Instantiate`]
    /// when no instance is free.
    pub fn duplicate(
        &mut self,
        uarea: UArea,
        host: Host,
        spares: &mut Spares,
    ) -> Result<Container, ContainerError> {
        self.settle()?;
        let store = match &mut self.state {
            State::Live(store) => store,
            State::Dormant(dormant) => {
                let image = ProcessImage {
                    uarea,
                    ..dormant.image.clone()
                };
                let mut child = Container::restore(&self.runtime, image, host)?;
                child.adopt_files(dormant.files.duplicate());
                return Ok(child);
            }
        };
        let globals = stopped_globals(store)?;
        let from = store.data().exports().memory;
        let pages = from.size(&**store);
        let mut child = match spares.take(&self.program.hash(), pages) {
            Some(mut spare) => {
                spare.reuse(uarea, host)?;
                spare.grow_to(pages, false)?;
                let into = spare.store().data().exports().memory;
                crate::image::overwrite(from.data(&**store), into.data_mut(spare.store_mut()));
                spare
            }
            None => {
                let child = Container::instantiate(&self.runtime, &self.program, uarea, host)?;
                let mut child = Container {
                    state: State::Live(Instance::new(child)),
                    program: self.program.clone(),
                    runtime: self.runtime.clone(),
                };
                let dirty = child.grow_to(pages, true)?;
                let into = child.store().data().exports().memory;
                crate::image::copy_nonzero(
                    from.data(&**store),
                    into.data_mut(child.store_mut()),
                    &dirty,
                );
                child
            }
        };
        child.set_globals(&globals)?;
        child.adopt_files(store.data().files.duplicate());
        Ok(child)
    }

    /// Makes the container of a process that ended a spare for a fork of
    /// the same program ([`crate::spare`]): its host files are closed now.
    /// Whether it can serve: it is live, prepared (a fork sets every
    /// global it has), its program's tables never change, none of its
    /// memory is lent or still arriving, and that memory is no larger
    /// than what the pool keeps of it anyway.
    pub fn retire(&mut self) -> bool {
        let program = self.program.clone();
        let State::Live(store) = &mut self.state else {
            return false;
        };
        let memory_bytes = store.data().exports().memory.data_size(&**store);
        let ctx = store.data_mut();
        drop(std::mem::take(&mut ctx.files));
        program.prepared()
            && program.tables_fixed()
            && ctx.late.is_none()
            && !ctx.lender.lent()
            && memory_bytes <= crate::spare::MOST_BYTES
    }

    /// A spare ([`retire`](Self::retire)) made ready for a process with
    /// `uarea` on `host`: a new context, Asyncify at rest, the yield flag
    /// down. The caller writes its memory and globals.
    fn reuse(&mut self, uarea: UArea, host: Host) -> Result<(), ContainerError> {
        let limits = store_limits(&self.runtime, &uarea);
        let store = self.store_mut();
        let old = std::mem::replace(store.data_mut(), ProcCtx::new(uarea, host, limits));
        old.host.instances.fetch_sub(1, Ordering::Relaxed);
        let ctx = store.data_mut();
        ctx.host.instances.fetch_add(1, Ordering::Relaxed);
        ctx.exports = old.exports;
        ctx.flags = old.flags;
        ctx.thread_function = old.thread_function;
        ctx.spare_stack = old.spare_stack;
        let asyncify = ctx
            .exports()
            .asyncify
            .clone()
            .ok_or(ContainerError::NotPrepared)?;
        let at_rest = |g: &Global, store: &mut Store<ProcCtx>| {
            g.set(&mut *store, Val::I32(0))
                .map_err(|e| ContainerError::BadImage(format!("cannot reset a spare: {e}")))
        };
        at_rest(&asyncify.state, store)
    }

    /// Pages of its memory (64 KiB each); 0 if dormant.
    pub(crate) fn memory_pages(&self) -> u64 {
        match &self.state {
            State::Live(store) => store.data().exports().memory.size(&**store),
            State::Dormant(_) => 0,
        }
    }

    /// Writes `image` into memory; `fresh`: the instance is new, its memory
    /// as instantiation left it.
    fn write_memory(&mut self, image: &MemoryView<'_>, fresh: bool) -> Result<(), ContainerError> {
        let dirty = self.grow_to(image.pages as u64, fresh)?;
        let store = self.store_mut();
        let memory = store.data().exports().memory;
        let bytes = memory.data_mut(store);
        image
            .write_into(bytes, &dirty)
            .map_err(ContainerError::BadImage)
    }

    /// Grows memory to `pages` (an image's size; memory never shrinks) and
    /// says which bytes may not be zero: pages just grown are zero, and a
    /// `fresh` instance is zero but for its data segments when the module
    /// says where they are; otherwise, everything it had.
    fn grow_to(&mut self, pages: u64, fresh: bool) -> Result<Vec<Range<usize>>, ContainerError> {
        let program = self.program.clone();
        let store = self.store_mut();
        let memory = store.data().exports().memory;
        let have = memory.size(&*store);
        if pages < have {
            return Err(ContainerError::BadImage(format!(
                "image has {pages} pages, the process has {have}"
            )));
        }
        memory
            .grow(&mut *store, pages - have)
            .map_err(|e| ContainerError::BadImage(format!("cannot grow memory: {e}")))?;
        let had = 0..have as usize * PAGE_SIZE;
        Ok(match (fresh, program.initialized()) {
            (true, Some(ranges)) => ranges.to_vec(),
            _ => vec![had],
        })
    }

    /// Points the process at the kernel it now runs on (after a move); a
    /// live one is counted in that kernel's instances from now on.
    pub fn set_host(&mut self, host: Host) {
        match &mut self.state {
            State::Live(store) => {
                let old = std::mem::replace(&mut store.data_mut().host, host);
                old.instances.fetch_sub(1, Ordering::Relaxed);
                store.data().host.instances.fetch_add(1, Ordering::Relaxed);
            }
            State::Dormant(dormant) => dormant.host = host,
        }
    }

    pub fn uarea(&self) -> &UArea {
        match &self.state {
            State::Live(store) => &store.data().uarea,
            State::Dormant(dormant) => &dormant.image.uarea,
        }
    }

    pub fn uarea_mut(&mut self) -> &mut UArea {
        match &mut self.state {
            State::Live(store) => &mut store.data_mut().uarea,
            State::Dormant(dormant) => &mut dormant.image.uarea,
        }
    }

    pub fn program(&self) -> &Arc<Program> {
        &self.program
    }

    /// The process's linear memory, for the kernel to copy messages and
    /// blocks into or out of while the process is stopped.
    ///
    /// # Panics
    /// If the process is dormant: the kernel wakes it first.
    pub fn memory(&self) -> &[u8] {
        let store = self.store();
        store.data().exports().memory.data(store)
    }

    /// Reads `out.len()` bytes of memory at `at`, live or dormant (a message
    /// a dormant sender is sending is read without waking it).
    ///
    /// # Panics
    /// If the range is outside memory: callers check it when the process
    /// names it.
    pub fn read_memory(&self, at: usize, out: &mut [u8]) {
        match &self.state {
            State::Live(_) => out.copy_from_slice(&self.memory()[at..at + out.len()]),
            State::Dormant(dormant) => dormant.image.memory.read(at, out),
        }
    }

    /// As [`memory`](Self::memory), writable.
    ///
    /// # Panics
    /// If the process is dormant.
    pub fn memory_mut(&mut self) -> &mut [u8] {
        let store = self.store_mut();
        let memory = store.data().exports().memory;
        memory.data_mut(store)
    }

    /// Bytes of linear memory (live or dormant).
    pub fn memory_bytes(&self) -> usize {
        match &self.state {
            State::Live(store) => store.data().exports().memory.data_size(&**store),
            State::Dormant(dormant) => dormant.image.memory.pages as usize * PAGE_SIZE,
        }
    }

    /// Bytes the process holds while dormant (its image's memory blocks);
    /// `None` while it is live.
    pub fn dormant_bytes(&self) -> Option<usize> {
        match &self.state {
            State::Live(_) => None,
            State::Dormant(dormant) => Some(dormant.image.memory.data_bytes()),
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if let State::Live(store) = &self.state {
            store.data().host.instances.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What a process with `uarea` may grow its memory to.
/// Takes the blocks out of `image`, which then only updates the memory's
/// size, for a post-copy: they are written once the blocks that follow
/// are registered ([`Container::await_memory`]).
fn take_runs<'a>(image: &mut ImageView<'a>) -> MemoryView<'a> {
    let carried = MemoryView {
        complete: false,
        runs: std::mem::take(&mut image.memory.runs),
        ..image.memory
    };
    // Not cleared: `LateMemories::expect` gives every page of the memory
    // back.
    image.memory.complete = false;
    carried
}

fn store_limits(runtime: &Runtime, uarea: &UArea) -> StoreLimits {
    let ceiling = uarea.limits.memory.map_or(runtime.max_memory(), |m| {
        usize::try_from(m)
            .unwrap_or(usize::MAX)
            .min(runtime.max_memory())
    });
    StoreLimitsBuilder::new().memory_size(ceiling).build()
}

/// The doorbell rang while the process runs: the kernel takes in what came
/// and serves what it can without stopping it ([`KernelLink::take_in`]),
/// and says whether it needs its loop now. A process with threads, one in
/// the middle of a kernel call, or one run without a kernel, yields as ever.
pub(crate) fn kernel_needs_the_core(cx: &mut wasmtime::StoreContextMut<'_, ProcCtx>) -> bool {
    let ctx = cx.data();
    let (Some(mut link), Some(exports)) = (ctx.link, ctx.exports.clone()) else {
        return true;
    };
    // Unwinding out of a call or rewinding into one, it is the kernel's to
    // hand messages to (a letter queued now would not wake it).
    if ctx.uarea.threads.active() || !matches!(ctx.uarea.call, CallState::Running) {
        return true;
    }
    let (memory, ctx) = exports.memory.data_and_store_mut(&mut *cx);
    let me = IpcCaller {
        pid: ctx.uarea.pid,
        alone: true,
        ipc: &mut ctx.uarea.ipc,
        memory,
        lender: &ctx.lender,
    };
    // SAFETY: as in the IPC host functions: the kernel lent itself for
    // this slice (`Container::run`), and the guest is stopped at a check.
    unsafe { link.as_mut() }.take_in(me)
}

/// A slice of a process without threads: it resumes where it stopped, or
/// starts. If it makes threads meanwhile, the slice goes on with them.
fn run_alone(store: &mut Store<ProcCtx>, exports: &Exports) -> Slice {
    let ctx = store.data_mut();
    if ctx.uarea.started {
        let (Some(asyncify), Some(area), CallState::Replied(_)) = (
            exports.asyncify.as_ref(),
            ctx.uarea.stack_area,
            &ctx.uarea.call,
        ) else {
            return Slice::Trapped(
                "internal error: resumed a process that is not stopped with a reply".into(),
            );
        };
        ctx.rewinding = true;
        if let Err(e) = asyncify.start_rewind(&mut *store, area.addr) {
            return Slice::Trapped(format!("cannot rewind the saved stack: {e:#}"));
        }
    } else {
        ctx.uarea.started = true;
    }
    let stop = enter(store, exports, None);
    if store.data().uarea.threads.active() {
        // It made its first thread: from now on its call is in `stop`
        // until the scheduler decides where it goes.
        store.data_mut().uarea.call = CallState::Running;
        return run_threads(store, exports, Some(stop));
    }
    match stop {
        Stop::Exited(code) => Slice::Exited(code),
        Stop::Trapped(why) => Slice::Trapped(why),
        Stop::Returned | Stop::ThreadExit => Slice::Exited(0),
        Stop::Kernel(call) => Slice::Call(call),
        Stop::Thread(wait) => Slice::Trapped(format!(
            "internal error: a process without threads waits for {wait:?}"
        )),
    }
}

/// The function at `index` of the module's table, if it is one a thread
/// can start in: `(i32) -> ()`. The last one found is remembered, shared:
/// checking a function's type at each thread switch cost a sixth of a
/// thread's create and join, and cloning a typed function (its type's
/// registration) a tenth.
pub(crate) fn thread_function(
    mut store: impl wasmtime::AsContextMut<Data = ProcCtx>,
    exports: &Exports,
    index: u32,
) -> Option<Arc<TypedFunc<i32, ()>>> {
    if let Some((i, f)) = &store.as_context().data().thread_function {
        if *i == index {
            return Some(Arc::clone(f));
        }
    }
    let func = exports
        .table?
        .get(&mut store, u64::from(index))?
        .as_func()
        .flatten()
        .copied()?;
    let f = Arc::new(func.typed::<i32, ()>(&store).ok()?);
    store.as_context_mut().data_mut().thread_function = Some((index, Arc::clone(&f)));
    Some(f)
}

/// How a thread's turn (or a process's only thread's) ended.
enum Stop {
    Exited(i32),
    Trapped(String),
    /// Its entry returned.
    Returned,
    /// `atoll_thread_exit`.
    ThreadExit,
    /// Unwound in a kernel call.
    Kernel(KernelCall),
    /// Unwound to wait within its process.
    Thread(Wait),
}

/// Calls the entry of a thread (`None`: `_start`), rewinding it first if
/// the caller started a rewind, and says how it stopped.
fn enter(store: &mut Store<ProcCtx>, exports: &Exports, entry: Option<Entry>) -> Stop {
    if let Some(asyncify) = &exports.asyncify {
        if let Err(e) = asyncify.before_entry(&mut *store) {
            return Stop::Trapped(format!("cannot finish unwinding: {e:#}"));
        }
    }
    let result = match entry {
        None => exports.start.call(&mut *store, ()),
        Some(entry) => match thread_function(&mut *store, exports, entry.func) {
            Some(f) => f.call(&mut *store, entry.arg as i32),
            None => return Stop::Trapped(format!("thread entry {} is gone", entry.func)),
        },
    };
    match result {
        Ok(()) => {
            let ctx = store.data_mut();
            let stop = match (ctx.thread_stop.take(), &ctx.uarea.call) {
                (Some(ThreadStop::Wait(wait)), _) => Stop::Thread(wait),
                (Some(ThreadStop::Exit), _) => Stop::ThreadExit,
                (Some(ThreadStop::ProcessExit(status)), _) => Stop::Exited(status),
                (None, CallState::Blocked(call)) => Stop::Kernel(call.clone()),
                (None, _) => return Stop::Returned,
            };
            let asyncify = exports
                .asyncify
                .as_ref()
                .expect("only prepared modules unwind");
            asyncify.unwound(&mut *store);
            if let Stop::Exited(_) = stop {
                return stop;
            }
            match mark_area_dirty(store, exports, asyncify) {
                Ok(()) => stop,
                Err(why) => Stop::Trapped(why),
            }
        }
        Err(e) => {
            if let Some(ProcExit(code)) = e.downcast_ref::<ProcExit>() {
                Stop::Exited(*code)
            } else {
                Stop::Trapped(describe_trap(&e))
            }
        }
    }
}

/// The scheduler of a process's threads, for one slice. `stopped`: the
/// thread that was running, and how it stopped, when the slice began
/// without threads.
///
/// Between turns [`UArea::call`] is the call of the thread in the kernel
/// (the seat), if any; during a turn it is the running thread's.
fn run_threads(store: &mut Store<ProcCtx>, exports: &Exports, mut stopped: Option<Stop>) -> Slice {
    loop {
        if let Some(stop) = stopped.take() {
            let tid = store.data().uarea.threads.current();
            if let Some(slice) = after_turn(store, exports, tid, stop) {
                return slice;
            }
        }
        let ctx = store.data_mut();
        let threads = &mut ctx.uarea.threads;
        // Sleepers whose time came, while the others kept the process busy.
        if let Some(now_ns) = threads.due(monotonic_ns) {
            threads.wake_due(now_ns);
        }
        if threads.withdraw_receive(&ctx.uarea.call) {
            ctx.uarea.call = CallState::Running;
        }
        if let Some((tid, call)) = threads.next_in_line() {
            match call {
                Some(call) => {
                    threads.take_seat(tid);
                    ctx.uarea.call = CallState::Blocked(call.clone());
                    return Slice::Call(call);
                }
                None => threads.make_ready(tid, Some(Reply::Retry)),
            }
        }
        let seat_answered = matches!(ctx.uarea.call, CallState::Replied(_));
        let (tid, outside) = match threads.seat() {
            // The kernel answered the thread in it: it goes first, with
            // its answer, and leaves the seat.
            Some(seat) if seat_answered => {
                threads.resume_seat();
                (seat, CallState::Running)
            }
            _ => {
                if Instant::now() >= ctx.deadline && threads.runnable() {
                    return Slice::Preempted(Yielding::Quantum);
                }
                let Some((tid, reply)) = threads.next_ready() else {
                    return Slice::Idle {
                        until_ns: threads.next_deadline(),
                    };
                };
                let resume = reply.map_or(CallState::Running, CallState::Replied);
                (tid, std::mem::replace(&mut ctx.uarea.call, resume))
            }
        };
        let stop = match switch_in(store, exports, tid) {
            Ok(entry) => enter(store, exports, entry),
            Err(why) => Stop::Trapped(why),
        };
        // The thread's call (if it made one) is in `stop`; the seat's
        // call goes back where the kernel looks for it.
        store.data_mut().uarea.call = outside;
        stopped = Some(stop);
    }
}

/// What follows a thread's turn: its own state saved, and where it
/// waits; `Some` when the slice ends there.
fn after_turn(
    store: &mut Store<ProcCtx>,
    exports: &Exports,
    tid: Tid,
    stop: Stop,
) -> Option<Slice> {
    let call = match stop {
        Stop::Exited(code) => return Some(Slice::Exited(code)),
        Stop::Trapped(why) => return Some(Slice::Trapped(why)),
        // `_start` returned: the program's main is over, and so is the
        // process, as in C.
        Stop::Returned if tid == 1 => return Some(Slice::Exited(0)),
        Stop::Returned | Stop::ThreadExit => {
            let threads = &mut store.data_mut().uarea.threads;
            return (!threads.end(tid)).then_some(Slice::Exited(0));
        }
        Stop::Thread(wait) => {
            if let Err(why) = save_context(store, exports, tid) {
                return Some(Slice::Trapped(why));
            }
            store.data_mut().uarea.threads.wait(tid, wait);
            return None;
        }
        Stop::Kernel(call) => call,
    };
    if let Err(why) = save_context(store, exports, tid) {
        return Some(Slice::Trapped(why));
    }
    let ctx = store.data_mut();
    let threads = &mut ctx.uarea.threads;
    match call {
        // Waits that are the process's own business.
        KernelCall::Yield(why) => {
            threads.make_ready(tid, Some(Reply::Done));
            let over = why != Yielding::Asked || Instant::now() >= ctx.deadline;
            over.then_some(Slice::Preempted(why))
        }
        KernelCall::Sleep { until_ns } if until_ns <= monotonic_ns() => {
            threads.make_ready(tid, Some(Reply::Done));
            None
        }
        KernelCall::Sleep { until_ns } => {
            threads.wait(tid, Wait::Sleep { until_ns });
            None
        }
        // An IPC call waits in the kernel already (it went through the
        // link, which a thread uses only when no other is in the kernel).
        call if threads.seat_taken() && !matches!(call, KernelCall::Ipc(_)) => {
            threads.wait(tid, Wait::Seat(Some(call)));
            None
        }
        call => {
            threads.take_seat(tid);
            ctx.uarea.call = CallState::Blocked(call.clone());
            Some(Slice::Call(call))
        }
    }
}

/// Saves what is thread `tid`'s own, just after it unwound: the globals,
/// its saved stack, its per-thread words.
fn save_context(store: &mut Store<ProcCtx>, exports: &Exports, tid: Tid) -> Result<(), String> {
    let asyncify = exports
        .asyncify
        .as_ref()
        .ok_or("a thread of an unprepared module")?;
    let globals = asyncify
        .globals
        .iter()
        .map(|(name, g)| {
            global_value(g.get(&mut *store))
                .ok_or_else(|| format!("global `{name}`: unsupported type"))
        })
        .collect::<Result<_, _>>()?;
    let mut stack = std::mem::take(&mut store.data_mut().spare_stack);
    let ctx = store.data();
    let area = ctx
        .uarea
        .stack_area
        .ok_or("a thread stopped without a stack area")?;
    let memory = exports.memory.data(&*store);
    let data = (area.addr + atoll_prepare::conventions::ASYNCIFY_DATA_HEADER) as usize;
    let current = read_word(memory, area.addr)? as usize;
    stack.clear();
    stack.extend_from_slice(
        memory
            .get(data..current)
            .ok_or("the saved stack's header is corrupt")?,
    );
    let locals = ctx
        .uarea
        .threads
        .locals()
        .iter()
        .map(|&at| read_word(memory, at))
        .collect::<Result<_, _>>()?;
    let saved = Context {
        seq: 0,
        globals,
        stack,
        locals,
    };
    if !store.data_mut().uarea.threads.save(tid, saved) {
        return Err("internal error: saving a thread that does not exist".into());
    }
    Ok(())
}

/// Writes back what is thread `tid`'s own and starts rewinding it (a thread
/// that has not run yet starts afresh). Returns its entry.
fn switch_in(
    store: &mut Store<ProcCtx>,
    exports: &Exports,
    tid: Tid,
) -> Result<Option<Entry>, String> {
    let asyncify = exports
        .asyncify
        .as_ref()
        .ok_or("a thread of an unprepared module")?;
    let threads = &mut store.data_mut().uarea.threads;
    let locals: SmallVec<[u32; MAX_LOCALS]> = threads.locals().iter().copied().collect();
    let thread = threads
        .thread_mut(tid)
        .ok_or("internal error: running a thread that does not exist")?;
    let entry = thread.entry;
    let saved = match thread.saved.take() {
        Some(Saved::Context(saved)) => saved,
        Some(Saved::AsSent { seq }) => {
            return Err(format!("thread {tid}: context {seq} was never received"))
        }
        None => {
            // A new thread: its per-thread words start at zero.
            let memory = exports.memory.data_mut(&mut *store);
            for at in locals {
                write_word(memory, at, 0)?;
            }
            store.data_mut().rewinding = false;
            return Ok(entry);
        }
    };
    for ((name, g), v) in asyncify.globals.iter().zip(&saved.globals) {
        g.set(&mut *store, val(*v))
            .map_err(|e| format!("global `{name}`: {e}"))?;
    }
    let area = StackArea::at_top(exports.memory.data_size(&*store));
    let memory = exports.memory.data_mut(&mut *store);
    for (&at, &v) in locals.iter().zip(&saved.locals) {
        write_word(memory, at, v)?;
    }
    let used = u32::try_from(saved.stack.len()).map_err(|_| "saved stack too large")?;
    if used + atoll_prepare::conventions::ASYNCIFY_DATA_HEADER > area.len {
        return Err("saved stack too large for the stack area".into());
    }
    let at = area.addr as usize;
    memory[at..at + 8].copy_from_slice(&area.header(used));
    memory[at + 8..at + 8 + saved.stack.len()].copy_from_slice(&saved.stack);
    mark_area_dirty(store, exports, asyncify)?;
    let ctx = store.data_mut();
    ctx.spare_stack = saved.stack;
    ctx.uarea.stack_area = Some(area);
    ctx.rewinding = true;
    asyncify
        .start_rewind(&mut *store, area.addr)
        .map_err(|e| format!("cannot rewind thread {tid}: {e:#}"))?;
    Ok(entry)
}

/// Raises the stack area's dirty length to the end of the saved stack its
/// header says is there, so that a later grow zeroes it before the program
/// gets those pages.
fn mark_area_dirty(
    store: &mut Store<ProcCtx>,
    exports: &Exports,
    asyncify: &Asyncify,
) -> Result<(), String> {
    let area = store
        .data()
        .uarea
        .stack_area
        .ok_or("a stop without a stack area")?;
    let memory = exports.memory.data(&*store);
    let size = memory.len();
    let used = read_word(memory, area.addr)?.saturating_sub(area.addr);
    if matches!(store.data().area_dirty, Some((dirty, at_size)) if at_size == size && used <= dirty)
    {
        return Ok(());
    }
    let dirty = asyncify.area_dirty.get(&mut *store).i32().unwrap_or(0) as u32;
    if used > dirty {
        asyncify
            .area_dirty
            .set(&mut *store, Val::I32(used as i32))
            .map_err(|e| format!("cannot mark the stack area: {e:#}"))?;
    }
    store.data_mut().area_dirty = Some((used.max(dirty), size));
    Ok(())
}

fn read_word(memory: &[u8], at: u32) -> Result<u32, String> {
    let at = at as usize;
    memory
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| format!("word {at:#x} is outside memory"))
}

fn write_word(memory: &mut [u8], at: u32, v: u32) -> Result<(), String> {
    let at = at as usize;
    memory
        .get_mut(at..at + 4)
        .ok_or_else(|| format!("word {at:#x} is outside memory"))?
        .copy_from_slice(&v.to_le_bytes());
    Ok(())
}

fn global_value(v: Val) -> Option<GlobalValue> {
    Some(match v {
        Val::I32(v) => GlobalValue::I32(v),
        Val::I64(v) => GlobalValue::I64(v),
        Val::F32(v) => GlobalValue::F32(v),
        Val::F64(v) => GlobalValue::F64(v),
        _ => return None,
    })
}

fn val(v: GlobalValue) -> Val {
    match v {
        GlobalValue::I32(v) => Val::I32(v),
        GlobalValue::I64(v) => Val::I64(v),
        GlobalValue::F32(v) => Val::F32(v),
        GlobalValue::F64(v) => Val::F64(v),
    }
}

fn bind_exports(
    store: &mut Store<ProcCtx>,
    instance: &wasmtime::Instance,
    prepared: bool,
) -> wasmtime::Result<Exports> {
    use atoll_prepare::conventions as c;
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| wasmtime::format_err!("module does not export `memory`"))?;
    let start = instance
        .get_func(&mut *store, "_start")
        .ok_or_else(|| {
            wasmtime::format_err!("module does not export `_start` (not a WASI command)")
        })?
        .typed(&*store)
        .map_err(|_| wasmtime::format_err!("`_start` must take and return nothing"))?;
    let asyncify = if prepared {
        let flag_at = exported_global(store, instance, c::FLAG_AT_GLOBAL)?;
        let globals = instance
            .exports(&mut *store)
            .filter(|e| e.name().starts_with(c::GLOBAL_EXPORT_PREFIX))
            .filter_map(|e| Some((e.name().to_owned(), e.into_global()?)))
            .collect::<Vec<_>>();
        let area_dirty = exported_global(store, instance, c::AREA_DIRTY_GLOBAL)?;
        Some(Arc::new(Asyncify {
            flag_at,
            area_dirty,
            state: exported_global(store, instance, c::ASYNCIFY_STATE_GLOBAL)?,
            data: exported_global(store, instance, c::ASYNCIFY_DATA_GLOBAL)?,
            globals,
        }))
    } else {
        None
    };
    let table = instance.get_table(&mut *store, c::TABLE_EXPORT);
    Ok(Exports {
        memory,
        start,
        table,
        asyncify,
    })
}

/// A global that preparation exports as `name`.
fn exported_global(
    store: &mut Store<ProcCtx>,
    instance: &wasmtime::Instance,
    name: &str,
) -> wasmtime::Result<Global> {
    instance
        .get_global(&mut *store, name)
        .ok_or_else(|| wasmtime::format_err!("prepared module lacks `{name}`"))
}

/// The trap's reason, then the guest frames where it happened.
fn describe_trap(e: &wasmtime::Error) -> String {
    let reason = match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{:#}", e.root_cause()),
    };
    let Some(bt) = e.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return reason;
    };
    // Innermost first; a run of one function (deep recursion) is one line.
    let mut lines: Vec<(String, usize)> = Vec::new();
    for f in bt.frames() {
        let name = f.func_name().map_or_else(|| "?".to_owned(), demangle);
        match lines.last_mut() {
            Some((last, n)) if *last == name => *n += 1,
            _ => lines.push((name, 1)),
        }
    }
    let mut out = reason;
    for (name, n) in lines.iter().take(8) {
        out += &format!("\n    in {name}");
        if *n > 1 {
            out += &format!(" ({n} frames)");
        }
    }
    if lines.len() > 8 {
        out += &format!("\n    ... {} more", lines.len() - 8);
    }
    out
}

/// A symbol as its source language wrote it: Rust (legacy and v0 mangling)
/// and C++ (Itanium) names are demangled, others are left as they are.
fn demangle(name: &str) -> String {
    if let Ok(rust) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves out the hash suffix of legacy names.
        return format!("{rust:#}");
    }
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|cpp| cpp.demangle().ok())
        .unwrap_or_else(|| name.to_owned())
}

/// The globals of a process stopped at a safepoint (or not yet started),
/// where Asyncify and the module keep its state.
fn stopped_globals(
    store: &mut Store<ProcCtx>,
) -> Result<Vec<(String, GlobalValue)>, ContainerError> {
    let exports = store.data().exports().clone();
    let asyncify = exports
        .asyncify
        .as_ref()
        .ok_or(ContainerError::NotPrepared)?;
    let uarea = &store.data().uarea;
    // Between slices a process with threads has each thread's state saved
    // in its UArea, even when none of them is in a kernel call.
    if uarea.started && uarea.call == CallState::Running && !uarea.threads.active() {
        return Err(ContainerError::NotStopped);
    }
    asyncify
        .globals
        .iter()
        .map(|(name, g)| {
            let v = g.get(&mut *store);
            let v = global_value(v).ok_or_else(|| {
                ContainerError::BadImage(format!("global `{name}` holds an unsupported value"))
            })?;
            Ok((name.clone(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn symbols_are_demangled() {
        assert_eq!(
            demangle("_RNvNtCs6TxCtTcuIIP_3std7process5abort"),
            "std::process::abort"
        );
        assert_eq!(
            demangle("_ZN3std7process5abort17h0123456789abcdefE"),
            "std::process::abort"
        );
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("__original_main"), "__original_main");
    }
}
