//! WASI preview1 calls that touch neither files nor the outside world: args,
//! environment, clocks, randomness, sleeping (`poll_oneoff`), yielding and
//! exiting. Files and descriptors are in `wasi_fs`.

use atoll_abi::Errno;
use wasmtime::{Caller, Linker, ValType};

use super::{enter_kernel, exit_process, local_call, take_reply, with_memory};
use crate::call::{KernelCall, Reply, Yielding};
use crate::clock::{monotonic_ns, realtime_ns};
use crate::ctx::ProcCtx;
use crate::fd::Fd;
use crate::memory::GuestMemory;

const M: &str = "wasi_snapshot_preview1";

const CLOCK_REALTIME: u32 = 0;
const CLOCK_MONOTONIC: u32 = 1;
const CLOCK_PROCESS_CPUTIME: u32 = 2;
const CLOCK_THREAD_CPUTIME: u32 = 3;

pub(super) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    linker.func_wrap(
        M,
        "args_sizes_get",
        |mut c: Caller<'_, ProcCtx>, argc: u32, size: u32| {
            local_call(&mut c, |mem, ctx| sizes(mem, &ctx.uarea.args, argc, size))
        },
    )?;
    linker.func_wrap(
        M,
        "args_get",
        |mut c: Caller<'_, ProcCtx>, argv: u32, buf: u32| {
            local_call(&mut c, |mem, ctx| {
                mem.write_string_table(argv, buf, &ctx.uarea.args)
            })
        },
    )?;
    linker.func_wrap(
        M,
        "environ_sizes_get",
        |mut c: Caller<'_, ProcCtx>, n: u32, size: u32| {
            local_call(&mut c, |mem, ctx| sizes(mem, &ctx.uarea.env, n, size))
        },
    )?;
    linker.func_wrap(
        M,
        "environ_get",
        |mut c: Caller<'_, ProcCtx>, env: u32, buf: u32| {
            local_call(&mut c, |mem, ctx| {
                mem.write_string_table(env, buf, &ctx.uarea.env)
            })
        },
    )?;
    linker.func_wrap(
        M,
        "clock_res_get",
        |mut c: Caller<'_, ProcCtx>, id: u32, out: u32| {
            local_call(&mut c, |mem, _| {
                let res = match id {
                    CLOCK_REALTIME | CLOCK_MONOTONIC => 1,
                    CLOCK_PROCESS_CPUTIME | CLOCK_THREAD_CPUTIME => 1_000,
                    _ => return Err(Errno::Inval),
                };
                mem.write_u64(out, res)
            })
        },
    )?;
    linker.func_wrap(
        M,
        "clock_time_get",
        |mut c: Caller<'_, ProcCtx>, id: u32, _precision: u64, out: u32| {
            local_call(&mut c, |mem, ctx| {
                let now = match id {
                    CLOCK_REALTIME => realtime_ns(),
                    CLOCK_MONOTONIC => monotonic_ns(),
                    CLOCK_PROCESS_CPUTIME | CLOCK_THREAD_CPUTIME => ctx.cpu_time_ns(),
                    _ => return Err(Errno::Inval),
                };
                mem.write_u64(out, now)
            })
        },
    )?;
    linker.func_wrap(
        M,
        "random_get",
        |mut c: Caller<'_, ProcCtx>, buf: u32, len: u32| {
            local_call(&mut c, |mem, _| {
                getrandom::fill(mem.slice_mut(buf, len)?).map_err(|_| Errno::Io)
            })
        },
    )?;
    linker.func_wrap(
        M,
        "sched_yield",
        |mut c: Caller<'_, ProcCtx>| -> wasmtime::Result<i32> {
            if take_reply(&mut c)?.is_some() {
                return Ok(0);
            }
            c.data_mut().uarea.accounting.syscalls += 1;
            // A module that cannot unwind just carries on: yielding is advice.
            let _ = enter_kernel(&mut c, KernelCall::Yield(Yielding::Asked));
            Ok(0)
        },
    )?;
    linker.func_wrap(M, "poll_oneoff", poll_oneoff)?;
    linker.func_wrap(M, "proc_exit", |mut c: Caller<'_, ProcCtx>, code: u32| {
        exit_process(&mut c, code as i32)
    })?;

    // atoll creates no sockets, so every descriptor that exists is not one
    // (`ENOTSOCK`; `EBADF` for one that does not exist), as in wasmtime.
    use ValType::I32;
    let socket_calls: &[(&str, &[ValType])] = &[
        ("sock_accept", &[I32, I32, I32]),
        ("sock_recv", &[I32, I32, I32, I32, I32, I32]),
        ("sock_send", &[I32, I32, I32, I32, I32]),
        ("sock_shutdown", &[I32, I32]),
    ];
    for (name, params) in socket_calls {
        let ty = wasmtime::FuncType::new(linker.engine(), params.iter().cloned(), [I32]);
        linker.func_new(M, name, ty, |c, args, results| {
            let fd = args[0].unwrap_i32() as u32;
            let errno = match c.data().uarea.fds.get(fd) {
                Ok(_) => Errno::NotSock,
                Err(e) => e,
            };
            results[0] = wasmtime::Val::I32(errno.raw() as i32);
            Ok(())
        })?;
    }
    // Signals are not part of atoll's WASI (wasmtime answers the same).
    linker.func_wrap(M, "proc_raise", |_: Caller<'_, ProcCtx>, _sig: i32| {
        Errno::NotSup.raw() as i32
    })?;
    Ok(())
}

fn sizes(mem: &mut GuestMemory<'_>, items: &[String], count: u32, size: u32) -> Result<(), Errno> {
    mem.write_u32(count, items.len() as u32)?;
    mem.write_u32(size, items.iter().map(|s| s.len() as u32 + 1).sum())
}

const SUBSCRIPTION_SIZE: u32 = 48;
const EVENT_SIZE: u32 = 32;
const EVENTTYPE_CLOCK: u8 = 0;
const EVENTTYPE_FD_READ: u8 = 1;
const EVENTTYPE_FD_WRITE: u8 = 2;
const SUBCLOCKFLAG_ABSTIME: u16 = 1;

/// One decoded subscription.
enum Sub {
    /// Wakes at this monotonic time.
    Clock { userdata: u64, deadline_ns: u64 },
    Fd {
        userdata: u64,
        kind: u8,
        error: Option<Errno>,
        /// A read of stdin: ready once input (or its end) came.
        stdin: bool,
    },
}

/// `poll_oneoff`: files and the console's outputs are always ready (they
/// never block). Stdin is ready once input (or its end) came: the first
/// poll asks the console service for it without reading it, and what
/// comes is kept for the next read ([`crate::StdinAhead`]). The call waits
/// for stdin or the earliest clock, in the kernel, holding no thread.
fn poll_oneoff(
    mut c: Caller<'_, ProcCtx>,
    subs_ptr: u32,
    events_ptr: u32,
    nsubs: u32,
    nevents_ptr: u32,
) -> wasmtime::Result<i32> {
    // After a wait, whether it ended with the earliest clock.
    let timed_out = match take_reply(&mut c)? {
        Some(Reply::Woken { timed_out }) => timed_out,
        Some(_) => true,
        None => false,
    };
    let mut wait = None;
    let rc = with_memory(&mut c, |mem, ctx| {
        if nsubs == 0 {
            return Err(Errno::Inval);
        }
        mem.slice_mut(
            events_ptr,
            nsubs.checked_mul(EVENT_SIZE).ok_or(Errno::Fault)?,
        )?;
        mem.slice(nevents_ptr, 4)?;
        let subs = (0..nsubs)
            .map(|i| decode_subscription(mem, ctx, subs_ptr + i * SUBSCRIPTION_SIZE))
            .collect::<Result<Vec<_>, _>>()?;
        let now = monotonic_ns();
        let earliest = subs
            .iter()
            .filter_map(|s| match s {
                Sub::Clock { deadline_ns, .. } => Some(*deadline_ns),
                Sub::Fd { .. } => None,
            })
            .min();
        let stdin_ready = ctx.uarea.stdin.ready();
        let ready = |s: &Sub| matches!(s, Sub::Fd { stdin, .. } if !stdin || stdin_ready);
        let fd_ready = subs.iter().any(ready);
        // After a wait for it, the earliest clock has fired even if the
        // rounding of relative timeouts puts it a hair in the future.
        let fired = |deadline: u64| deadline <= now || (timed_out && Some(deadline) == earliest);
        let mut n = 0;
        for s in &subs {
            let (userdata, kind, error) = match *s {
                Sub::Clock {
                    userdata,
                    deadline_ns,
                } if !fd_ready && fired(deadline_ns) => (userdata, EVENTTYPE_CLOCK, None),
                Sub::Fd {
                    userdata,
                    kind,
                    error,
                    ..
                } if ready(s) => (userdata, kind, error),
                Sub::Clock { .. } | Sub::Fd { .. } => continue,
            };
            let at = events_ptr + n * EVENT_SIZE;
            mem.slice_mut(at, EVENT_SIZE)?.fill(0);
            mem.write_u64(at, userdata)?;
            mem.write_u16(at + 8, error.map_or(0, Errno::raw))?;
            mem.write_u8(at + 10, kind)?;
            n += 1;
        }
        if n == 0 {
            let stdin = subs
                .iter()
                .any(|s| matches!(s, Sub::Fd { stdin: true, .. }));
            wait = match earliest {
                _ if stdin => Some(KernelCall::PollInput {
                    max: crate::fs::MAX_INPUT,
                    until_ns: earliest,
                }),
                Some(until_ns) => Some(KernelCall::Sleep { until_ns }),
                None => None,
            };
        }
        mem.write_u32(nevents_ptr, n)
    });
    if let Some(call) = wait {
        if let Err(e) = enter_kernel(&mut c, call) {
            return Ok(e.raw() as i32);
        }
    }
    Ok(rc)
}

fn decode_subscription(mem: &GuestMemory<'_>, ctx: &ProcCtx, at: u32) -> Result<Sub, Errno> {
    let userdata = mem.u64(at)?;
    match mem.u8(at + 8)? {
        EVENTTYPE_CLOCK => {
            let id = mem.u32(at + 16)?;
            let timeout = mem.u64(at + 24)?;
            let flags = mem.u16(at + 40)?;
            let now = monotonic_ns();
            let deadline_ns = if flags & SUBCLOCKFLAG_ABSTIME == 0 {
                now.saturating_add(timeout)
            } else {
                match id {
                    CLOCK_MONOTONIC => timeout,
                    CLOCK_REALTIME => now.saturating_add(timeout.saturating_sub(realtime_ns())),
                    _ => return Err(Errno::Inval),
                }
            };
            if !matches!(id, CLOCK_MONOTONIC | CLOCK_REALTIME) {
                return Err(Errno::Inval);
            }
            Ok(Sub::Clock {
                userdata,
                deadline_ns,
            })
        }
        kind @ (EVENTTYPE_FD_READ | EVENTTYPE_FD_WRITE) => {
            let fd = mem.u32(at + 16)?;
            let (error, stdin) = match ctx.uarea.fds.get(fd) {
                Ok(Fd::Dir(_)) => (Some(Errno::IsDir), false),
                Ok(Fd::Stdin) => (None, kind == EVENTTYPE_FD_READ),
                Ok(_) => (None, false),
                Err(e) => (Some(e), false),
            };
            Ok(Sub::Fd {
                userdata,
                kind,
                error,
                stdin,
            })
        }
        _ => Err(Errno::Inval),
    }
}
