//! The thread system calls (import module `atoll`), on which the guest
//! thread library (`sdk/thread/`: `<pthread.h>`, `<semaphore.h>`) is built.
//!
//! - `thread_spawn(func, arg) -> tid`: a new thread that runs `func(arg)`
//!   (a function pointer: an index into the module's table, of a function
//!   `(i32) -> ()`) when its turn comes; the caller goes on. The thread
//!   ends when `func` returns (the cheap way: nothing to unwind) or it
//!   calls `thread_exit`.
//! - `thread_exit(clear)`: ends the calling thread. If `clear` is not 0,
//!   the word there is set to 0 and its futex waiters woken first, as
//!   Linux does with `CLONE_CHILD_CLEARTID`: a joiner waits on that word,
//!   and the thread's stack is no longer in use once it is 0.
//! - `thread_self() -> tid`: 1 for the thread a process starts with.
//! - `thread_locals(addrs, n)`: the words at these addresses are each
//!   thread's own (`errno`, the library's current thread).
//! - `futex_wait(addr, expected, timeout_ns) -> errno`: waits for a
//!   `futex_wake` on `addr` if the word there still holds `expected`
//!   (`EAGAIN` if not); `timeout_ns` < 0 waits for ever (`ETIMEDOUT`).
//! - `futex_wake(addr, count) -> woken`.
//!
//! None of these reaches the kernel: the process's threads are its own
//! business ([`crate::threads`]).

use atoll_abi::Errno;
use wasmtime::{Caller, Linker};

use super::{exit_process, stop_thread, take_reply, wait_in_process, with_memory};
use crate::call::Reply;
use crate::clock::monotonic_ns;
use crate::container::thread_function;
use crate::ctx::ProcCtx;
use crate::memory::GuestMemory;
use crate::threads::{Entry, ThreadStop, Wait};

const M: &str = "atoll";

pub(super) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    linker.func_wrap(M, "thread_spawn", thread_spawn)?;
    linker.func_wrap(M, "thread_exit", thread_exit)?;
    linker.func_wrap(M, "thread_self", |c: Caller<'_, ProcCtx>| {
        let threads = &c.data().uarea.threads;
        if threads.active() {
            threads.current() as i32
        } else {
            1
        }
    })?;
    linker.func_wrap(M, "thread_locals", thread_locals)?;
    linker.func_wrap(M, "futex_wait", futex_wait)?;
    linker.func_wrap(
        M,
        "futex_wake",
        |mut c: Caller<'_, ProcCtx>, addr: u32, count: u32| {
            let mut woken = 0;
            let rc = with_memory(&mut c, |mem, ctx| {
                futex_word(mem, addr)?;
                woken = ctx.uarea.threads.futex_wake(addr, count);
                Ok(())
            });
            count_or_errno(rc, woken)
        },
    )?;
    Ok(())
}

/// Returns the new thread's TID, or minus an errno: `ENOTSUP` for a module
/// run unprepared (its threads could not be switched), `EINVAL` if `func`
/// is not a function `(i32) -> ()` of its table, `EAGAIN` past the
/// process's limit.
fn thread_spawn(mut c: Caller<'_, ProcCtx>, func: u32, arg: u32) -> i32 {
    let exports = c.data().exports().clone();
    let prepared = c.data().can_wait();
    let mut tid = 0;
    let rc = if !prepared {
        Errno::NotSup.raw() as i32
    } else if thread_function(&mut c, &exports, func).is_none() {
        Errno::Inval.raw() as i32
    } else {
        with_memory(&mut c, |_, ctx| {
            tid = ctx.uarea.threads.spawn(Entry { func, arg })?;
            Ok(())
        })
    };
    count_or_errno(rc, tid)
}

/// What a call returning a number or minus an errno returns: `n` if the
/// call's errno `rc` is 0.
fn count_or_errno(rc: i32, n: u32) -> i32 {
    if rc == 0 {
        n as i32
    } else {
        -rc
    }
}

fn thread_exit(mut c: Caller<'_, ProcCtx>, clear: u32) -> wasmtime::Result<()> {
    let rc = with_memory(&mut c, |mem, ctx| {
        if clear != 0 {
            futex_word(mem, clear)?;
            mem.write_u32(clear, 0)?;
            ctx.uarea.threads.futex_wake(clear, u32::MAX);
        }
        Ok(())
    });
    if rc != 0 {
        wasmtime::bail!("thread_exit: bad address {clear:#x} (errno {rc})");
    }
    // The last thread's end is the process's (as after pthread_exit in
    // every thread), with status 0.
    if c.data().uarea.threads.len() <= 1 {
        return exit_process(&mut c, 0);
    }
    stop_thread(&mut c, ThreadStop::Exit)
        .map_err(|e| wasmtime::format_err!("thread_exit: cannot unwind: {e}"))
}

fn thread_locals(mut c: Caller<'_, ProcCtx>, addrs: u32, n: u32) -> i32 {
    with_memory(&mut c, |mem, ctx| {
        if n as usize > crate::threads::MAX_LOCALS {
            return Err(Errno::Inval);
        }
        let words = (0..n)
            .map(|i| {
                let at = mem.u32(addrs + 4 * i)?;
                futex_word(mem, at)?;
                Ok(at)
            })
            .collect::<Result<Vec<_>, Errno>>()?;
        ctx.uarea.threads.set_locals(words)
    })
}

fn futex_wait(
    mut c: Caller<'_, ProcCtx>,
    addr: u32,
    expected: u32,
    timeout_ns: i64,
) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(match reply {
            Reply::Woken { timed_out: false } => 0,
            Reply::Woken { timed_out: true } => Errno::TimedOut.raw() as i32,
            other => wasmtime::bail!("futex_wait resumed with {other:?}"),
        });
    }
    let mut wait = None;
    let rc = with_memory(&mut c, |mem, ctx| {
        if mem.u32(futex_word(mem, addr)?)? != expected {
            return Err(Errno::Again);
        }
        if timeout_ns == 0 {
            return Err(Errno::TimedOut);
        }
        if !ctx.can_wait() {
            return Err(Errno::NotSup);
        }
        let until_ns = u64::try_from(timeout_ns)
            .ok()
            .map(|t| monotonic_ns().saturating_add(t));
        ctx.uarea.threads.activate();
        wait = Some(Wait::Futex { addr, until_ns });
        Ok(())
    });
    if let Some(wait) = wait {
        if let Err(e) = wait_in_process(&mut c, wait) {
            return Ok(e.raw() as i32);
        }
    }
    Ok(rc)
}

/// A futex word: 4-byte aligned, inside memory.
fn futex_word(mem: &GuestMemory<'_>, addr: u32) -> Result<u32, Errno> {
    if !addr.is_multiple_of(4) {
        return Err(Errno::Inval);
    }
    mem.u32(addr)?;
    Ok(addr)
}
