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

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use quanta::Instant;

use wasmtime::{Store, StoreLimitsBuilder, UpdateDeadline, Val};

use crate::call::{CallState, KernelCall, KernelLink, Reply};
use crate::ctx::{Asyncify, Exports, Host, ProcCtx};
use crate::image::{GlobalValue, MemoryImage, ProcessImage, PAGE_SIZE};
use crate::runtime::{Program, Runtime};
use crate::syscall::ProcExit;
use crate::uarea::UArea;

/// How a slice ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Slice {
    /// The process ended with this status.
    Exited(i32),
    /// The guest trapped; the message names the trap and where it happened.
    Trapped(String),
    /// The process entered the kernel with this call and is unwound.
    Call(KernelCall),
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
    Live(Store<ProcCtx>),
    /// Out of any instance: the image it would be captured as, and the
    /// kernel it is on.
    Dormant(Box<(ProcessImage, Host)>),
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
            state: State::Live(store),
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
        if !image.memory.complete {
            return Err(ContainerError::BadImage(
                "a delta image cannot start a process".into(),
            ));
        }
        let program = runtime
            .program(&image.uarea.module)
            .ok_or_else(|| ContainerError::UnknownModule(image.uarea.module.to_string()))?;
        let ProcessImage {
            uarea,
            globals,
            memory,
        } = image;
        let store = Container::instantiate(runtime, &program, uarea, host)?;
        let mut c = Container {
            state: State::Live(store),
            program,
            runtime: runtime.clone(),
        };
        c.load(&globals, &memory, true)?;
        Ok(c)
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
        let host = self.store().data().host.clone();
        host.instances.fetch_sub(1, Ordering::Relaxed);
        self.state = State::Dormant(Box::new((image, host)));
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
        let (image, host) = &**dormant;
        let store = Container::instantiate(
            &self.runtime,
            &self.program,
            image.uarea.clone(),
            host.clone(),
        )?;
        let State::Dormant(dormant) = std::mem::replace(&mut self.state, State::Live(store)) else {
            unreachable!("checked above")
        };
        if let Err(e) = self.load(&dormant.0.globals, &dormant.0.memory, true) {
            dormant.1.instances.fetch_sub(1, Ordering::Relaxed);
            self.state = State::Dormant(dormant);
            return Err(e);
        }
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
    pub fn apply(&mut self, image: ProcessImage) -> Result<(), ContainerError> {
        if image.uarea.module != self.uarea().module || image.uarea.pid != self.uarea().pid {
            return Err(ContainerError::BadImage(format!(
                "image of {} does not continue process {}",
                image.uarea.pid,
                self.uarea().pid
            )));
        }
        self.load(&image.globals, &image.memory, false)?;
        *self.uarea_mut() = image.uarea;
        Ok(())
    }

    /// Writes an image's memory and globals into the instance (`fresh`:
    /// just instantiated).
    fn load(
        &mut self,
        globals: &[(String, GlobalValue)],
        memory: &MemoryImage,
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
            let value = match *value {
                GlobalValue::I32(v) => Val::I32(v),
                GlobalValue::I64(v) => Val::I64(v),
                GlobalValue::F32(v) => Val::F32(v),
                GlobalValue::F64(v) => Val::F64(v),
            };
            global
                .set(self.store_mut(), value)
                .map_err(|e| ContainerError::BadImage(format!("global `{name}`: {e}")))?;
        }
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
        let ceiling = uarea.limits.memory.map_or(runtime.max_memory(), |m| {
            usize::try_from(m)
                .unwrap_or(usize::MAX)
                .min(runtime.max_memory())
        });
        let limits = StoreLimitsBuilder::new().memory_size(ceiling).build();
        let mut store = Store::new(runtime.engine(), ProcCtx::new(uarea, host, limits));
        store.limiter(|ctx| &mut ctx.limits);
        store.epoch_deadline_callback(|mut cx| {
            let ctx = cx.data();
            if Instant::now() >= ctx.deadline || (ctx.host.wake)() {
                if let Some(a) = ctx.exports.as_ref().and_then(|e| e.asyncify.clone()) {
                    a.yield_flag.set(&mut cx, Val::I32(1))?;
                }
            }
            Ok(UpdateDeadline::Continue(1))
        });
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
    /// `link` is the kernel, which the process's IPC calls use during the
    /// slice; without one they fail with `ENOSYS`.
    ///
    /// A dormant process is woken first; if it cannot be, the slice ends
    /// as a trap that says why.
    pub fn run(&mut self, quantum: Duration, link: Option<&mut dyn KernelLink>) -> Slice {
        if let Err(e) = self.wake() {
            return Slice::Trapped(format!("cannot wake the dormant process: {e}"));
        }
        let State::Live(store) = &mut self.state else {
            unreachable!("woken above")
        };
        let exports = store.data().exports().clone();
        if let (true, Some(a)) = (quantum.is_zero(), &exports.asyncify) {
            if let Err(e) = a.yield_flag.set(&mut *store, Val::I32(1)) {
                return Slice::Trapped(format!("cannot set the yield flag: {e:#}"));
            }
        }
        let now = Instant::now();
        let ctx = store.data_mut();
        ctx.slice_start = now;
        ctx.deadline = now + quantum;
        ctx.uarea.accounting.slices += 1;
        ctx.uarea.accounting.last_kernel = Some(ctx.host.kernel);
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
            if let Err(e) = asyncify.start_rewind.call(&mut *store, area.addr as i32) {
                return Slice::Trapped(format!("cannot rewind the saved stack: {e:#}"));
            }
        } else {
            ctx.uarea.started = true;
        }
        store.set_epoch_deadline(1);
        // SAFETY: only the lifetime is erased. The pointer is used by host
        // functions, which run only inside the call below, and is cleared
        // right after it, while `link` is still borrowed.
        store.data_mut().link = link.map(|l| unsafe {
            NonNull::new_unchecked(std::mem::transmute::<
                *mut (dyn KernelLink + '_),
                *mut (dyn KernelLink + 'static),
            >(l))
        });
        let lane = store.data().host.kernel.index;
        self.runtime.ticker().enter(lane);
        let result = exports.start.call(&mut *store, ());
        self.runtime.ticker().leave(lane);
        let ctx = store.data_mut();
        ctx.link = None;
        ctx.uarea.accounting.cpu_ns += now.elapsed().as_nanos() as u64;
        match result {
            Ok(()) => match &ctx.uarea.call {
                CallState::Blocked(call) => {
                    let call = call.clone();
                    let asyncify = exports
                        .asyncify
                        .as_ref()
                        .expect("only prepared modules unwind");
                    match asyncify.stop_unwind.call(&mut *store, ()) {
                        Ok(()) => Slice::Call(call),
                        Err(e) => Slice::Trapped(format!("cannot finish unwinding: {e:#}")),
                    }
                }
                _ => Slice::Exited(0),
            },
            Err(e) => match e.downcast_ref::<ProcExit>() {
                Some(ProcExit(code)) => Slice::Exited(*code),
                None => Slice::Trapped(describe_trap(&e)),
            },
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
        self.capture_with(MemoryImage::capture)
    }

    /// Captures the process with only the given memory blocks (ascending):
    /// the delta on top of an earlier image, for migration.
    ///
    /// # Errors
    /// As [`capture`](Self::capture).
    pub fn capture_delta(&mut self, blocks: &[u32]) -> Result<ProcessImage, ContainerError> {
        self.capture_with(|bytes| MemoryImage::capture_blocks(bytes, blocks.iter().copied()))
    }

    /// Captures the process with the non-zero blocks of `range` only: a
    /// piece of a first migration round that goes out in pieces.
    ///
    /// # Errors
    /// As [`capture`](Self::capture).
    pub fn capture_nonzero(
        &mut self,
        range: std::ops::Range<u32>,
    ) -> Result<ProcessImage, ContainerError> {
        self.capture_with(|bytes| MemoryImage::capture_nonzero(bytes, range))
    }

    fn capture_with(
        &mut self,
        memory: impl FnOnce(&[u8]) -> MemoryImage,
    ) -> Result<ProcessImage, ContainerError> {
        let store = match &mut self.state {
            State::Live(store) => store,
            // Stopped, since it went dormant.
            State::Dormant(dormant) => return Ok(dormant.0.clone()),
        };
        let globals = stopped_globals(store)?;
        let memory = memory(store.data().exports().memory.data(&*store));
        Ok(ProcessImage {
            uarea: store.data().uarea.clone(),
            globals,
            memory,
        })
    }

    /// A copy of this stopped process as a new process with `uarea`, on
    /// `host`: what fork makes. Memory goes straight from this instance to
    /// the new one, non-zero blocks only, without an image between them.
    ///
    /// # Errors
    /// As [`capture`](Self::capture), and [`ContainerError::Instantiate`]
    /// when no instance is free.
    pub fn duplicate(&mut self, uarea: UArea, host: Host) -> Result<Container, ContainerError> {
        let store = match &mut self.state {
            State::Live(store) => store,
            State::Dormant(dormant) => {
                let image = ProcessImage {
                    uarea,
                    ..dormant.0.clone()
                };
                return Container::restore(&self.runtime, image, host);
            }
        };
        let globals = stopped_globals(store)?;
        let child = Container::instantiate(&self.runtime, &self.program, uarea, host)?;
        let mut child = Container {
            state: State::Live(child),
            program: self.program.clone(),
            runtime: self.runtime.clone(),
        };
        let from = store.data().exports().memory;
        let dirty = child.grow_to(from.size(&*store), true)?;
        let into = child.store().data().exports().memory;
        crate::image::copy_nonzero(from.data(&*store), into.data_mut(child.store_mut()), &dirty);
        child.set_globals(&globals)?;
        Ok(child)
    }

    /// Writes `image` into memory; `fresh`: the instance is new, its memory
    /// as instantiation left it.
    fn write_memory(&mut self, image: &MemoryImage, fresh: bool) -> Result<(), ContainerError> {
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
            State::Dormant(dormant) => dormant.1 = host,
        }
    }

    pub fn uarea(&self) -> &UArea {
        match &self.state {
            State::Live(store) => &store.data().uarea,
            State::Dormant(dormant) => &dormant.0.uarea,
        }
    }

    pub fn uarea_mut(&mut self) -> &mut UArea {
        match &mut self.state {
            State::Live(store) => &mut store.data_mut().uarea,
            State::Dormant(dormant) => &mut dormant.0.uarea,
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
            State::Dormant(dormant) => dormant.0.memory.read(at, out),
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
            State::Live(store) => store.data().exports().memory.data_size(store),
            State::Dormant(dormant) => dormant.0.memory.pages as usize * PAGE_SIZE,
        }
    }

    /// Bytes the process holds while dormant (its image's memory blocks);
    /// `None` while it is live.
    pub fn dormant_bytes(&self) -> Option<usize> {
        match &self.state {
            State::Live(_) => None,
            State::Dormant(dormant) => Some(dormant.0.memory.data_bytes()),
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
        let yield_flag = instance
            .get_global(&mut *store, c::YIELD_GLOBAL)
            .ok_or_else(|| wasmtime::format_err!("prepared module lacks `{}`", c::YIELD_GLOBAL))?;
        let globals = instance
            .exports(&mut *store)
            .filter(|e| e.name().starts_with(c::GLOBAL_EXPORT_PREFIX))
            .filter_map(|e| Some((e.name().to_owned(), e.into_global()?)))
            .collect::<Vec<_>>();
        Some(Arc::new(Asyncify {
            yield_flag,
            start_unwind: instance.get_typed_func(&mut *store, c::ASYNCIFY_START_UNWIND)?,
            stop_unwind: instance.get_typed_func(&mut *store, c::ASYNCIFY_STOP_UNWIND)?,
            start_rewind: instance.get_typed_func(&mut *store, c::ASYNCIFY_START_REWIND)?,
            stop_rewind: instance.get_typed_func(&mut *store, c::ASYNCIFY_STOP_REWIND)?,
            globals,
        }))
    } else {
        None
    };
    Ok(Exports {
        memory,
        start,
        asyncify,
    })
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
    if uarea.started && uarea.call == CallState::Running {
        return Err(ContainerError::NotStopped);
    }
    asyncify
        .globals
        .iter()
        .map(|(name, g)| {
            let v = match g.get(&mut *store) {
                Val::I32(v) => GlobalValue::I32(v),
                Val::I64(v) => GlobalValue::I64(v),
                Val::F32(v) => GlobalValue::F32(v),
                Val::F64(v) => GlobalValue::F64(v),
                other => {
                    return Err(ContainerError::BadImage(format!(
                        "global `{name}` holds {other:?}"
                    )))
                }
            };
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
