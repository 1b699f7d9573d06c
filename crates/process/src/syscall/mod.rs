//! The system calls: WASI preview1 (`wasi_snapshot_preview1`) and atoll's
//! own (`atoll`), registered into one linker shared by every kernel.
//!
//! Each host function first *decodes*: it checks every pointer and value it
//! was given and returns a precise errno (`EFAULT` for a pointer outside
//! linear memory) before touching anything. Only then does it act.
//!
//! Calls answered locally (clocks, args, files, output) return at once.
//! Calls the kernel must serve go through [`enter_kernel`]: the call is
//! recorded in the UArea and the guest's stack is unwound; when the kernel
//! has replied and the process runs again, the stack is rewound into the same
//! host function, which picks up the reply with [`take_reply`] and returns it
//! to the guest.

mod atoll;
mod ipc;
mod threads;
mod wasi;
mod wasi_fs;

use atoll_abi::{Errno, KernelId};
use wasmtime::{Caller, Linker};

use crate::call::{CallState, KernelCall, Reply};
use crate::ctx::ProcCtx;
use crate::memory::GuestMemory;
use crate::threads::{ThreadStop, Wait};
use crate::uarea::StackArea;

/// Registers every host function into `linker`.
pub(crate) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    wasi::register(linker)?;
    wasi_fs::register(linker)?;
    atoll::register(linker)?;
    ipc::register(linker)?;
    threads::register(linker)?;
    Ok(())
}

/// The error a host function returns to end the process (`proc_exit`).
#[derive(Debug, thiserror::Error)]
#[error("process exited with status {0}")]
pub struct ProcExit(pub i32);

/// Runs `f` with the guest's memory and the process context, and turns its
/// result into the errno the guest sees (0 for success).
pub(crate) fn with_memory(
    caller: &mut Caller<'_, ProcCtx>,
    f: impl FnOnce(&mut GuestMemory<'_>, &mut ProcCtx) -> Result<(), Errno>,
) -> i32 {
    let memory = caller.data().exports().memory;
    let (bytes, ctx) = memory.data_and_store_mut(caller);
    ctx.uarea.accounting.syscalls += 1;
    match f(&mut GuestMemory::new(bytes), ctx) {
        Ok(()) => 0,
        Err(e) => e.raw() as i32,
    }
}

/// Serves a system call answered in place, like [`with_memory`]. In wander
/// mode ([`crate::Wander`]) the process then moves to the next kernel of its
/// node, and the call returns its result there.
pub(crate) fn local_call(
    caller: &mut Caller<'_, ProcCtx>,
    f: impl FnOnce(&mut GuestMemory<'_>, &mut ProcCtx) -> Result<(), Errno>,
) -> wasmtime::Result<i32> {
    if take_reply(caller)?.is_some() {
        return wandered(caller);
    }
    let rc = with_memory(caller, f);
    wander(caller, rc);
    Ok(rc)
}

/// Rewound on the kernel a wandering process moved to (or stayed on): the
/// result of the call it made before the move.
pub(crate) fn wandered(caller: &mut Caller<'_, ProcCtx>) -> wasmtime::Result<i32> {
    caller
        .data_mut()
        .uarea
        .wander
        .result
        .take()
        .ok_or_else(|| wasmtime::format_err!("rewound into a call that did not wander"))
}

/// In wander mode, moves the process to the next kernel after a call that
/// returned `rc`.
pub(crate) fn wander(caller: &mut Caller<'_, ProcCtx>, rc: i32) {
    let host = &caller.data().host;
    // Moving is the whole process's business: no thread wanders alone.
    let u = &caller.data().uarea;
    if !u.wander.enabled || u.threads.active() || host.kernel_count < 2 {
        return;
    }
    let to = KernelId::new(
        host.kernel.node,
        (host.kernel.index + 1) % host.kernel_count,
    );
    // A module that cannot unwind (run unprepared) stays where it is.
    if enter_kernel(caller, KernelCall::Migrate { to }).is_ok() {
        caller.data_mut().uarea.wander.result = Some(rc);
    }
}

/// Enters the kernel with `call`: records it and starts unwinding the
/// guest's stack into its stack area. The host function must then return at
/// once (its return value is ignored); the process's slice ends (or, in a
/// process with threads, perhaps only this thread's turn).
///
/// # Errors
/// `ENOTSUP` for a module run without preparation, which cannot unwind.
pub(crate) fn enter_kernel(
    caller: &mut Caller<'_, ProcCtx>,
    call: KernelCall,
) -> Result<(), Errno> {
    // Recorded first: starting the unwind runs guest code, where the kernel
    // may look in (`KernelLink::take_in`) and must see the process in a call.
    caller.data_mut().uarea.call = CallState::Blocked(call);
    unwind(caller).inspect_err(|_| caller.data_mut().uarea.call = CallState::Running)
}

/// Stops the running thread until `wait` is over, within its process: it
/// unwinds as for a kernel call, but the kernel never sees the call.
///
/// # Errors
/// As [`enter_kernel`].
pub(crate) fn wait_in_process(caller: &mut Caller<'_, ProcCtx>, wait: Wait) -> Result<(), Errno> {
    stop_thread(caller, ThreadStop::Wait(wait))
}

/// Unwinds the running thread for `why`, which its process handles.
///
/// # Errors
/// As [`enter_kernel`].
pub(crate) fn stop_thread(caller: &mut Caller<'_, ProcCtx>, why: ThreadStop) -> Result<(), Errno> {
    unwind(caller)?;
    caller.data_mut().thread_stop = Some(why);
    Ok(())
}

/// Ends the calling process with `status`. A prepared module unwinds out
/// of the guest; one that cannot traps out with [`ProcExit`]. The trap
/// costs about 2 us more: it captures the guest's backtrace.
pub(crate) fn exit_process(caller: &mut Caller<'_, ProcCtx>, status: i32) -> wasmtime::Result<()> {
    stop_thread(caller, ThreadStop::ProcessExit(status)).map_err(|_| ProcExit(status).into())
}

/// Starts unwinding the guest's stack into its stack area.
fn unwind(caller: &mut Caller<'_, ProcCtx>) -> Result<(), Errno> {
    let ctx = caller.data();
    let Some(asyncify) = ctx.exports().asyncify.clone() else {
        return Err(Errno::NotSup);
    };
    // The saved stack goes to the top pages of memory, which `atoll prepare`
    // hides from the program (wasi-libc's malloc would take any other page).
    let memory = ctx.exports().memory;
    let area = StackArea::at_top(memory.data_size(&*caller));
    caller.data_mut().uarea.stack_area = Some(area);
    // Asyncify's data header: {current, end}; unwinding fills from current.
    memory
        .write(&mut *caller, area.addr as usize, &area.header(0))
        .map_err(|_| Errno::Fault)?;
    asyncify
        .start_unwind(&mut *caller, area.addr)
        .map_err(|_| Errno::Fault)
}

/// If the guest's stack is being rewound into this host function, finishes
/// the rewind and returns the kernel's reply; `None` on a fresh call.
pub(crate) fn take_reply(caller: &mut Caller<'_, ProcCtx>) -> wasmtime::Result<Option<Reply>> {
    if !caller.data().rewinding {
        return Ok(None);
    }
    let ctx = caller.data_mut();
    ctx.rewinding = false;
    // The module itself set Asyncify's state back to normal before it
    // called (`atoll_prepare::conventions`: the end of a rewind).
    let reply = match std::mem::take(&mut ctx.uarea.call) {
        CallState::Replied(r) => r,
        other => wasmtime::bail!("rewound into a system call without a reply ({other:?})"),
    };
    // A thread whose turn in the kernel came makes its call now, afresh.
    Ok(Some(reply).filter(|r| *r != Reply::Retry))
}

/// Lowers the yield flag of the caller's kernel.
pub(crate) fn lower_yield_flag(caller: &Caller<'_, ProcCtx>) {
    let ctx = caller.data();
    if let Some(flags) = &ctx.flags {
        flags.lower(ctx.host.kernel.index);
    }
}
