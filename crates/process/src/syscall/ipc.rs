//! The IPC system calls (import module `atoll`): Minix 3 message passing,
//! grants and copies, domains.
//!
//! Each host function decodes and checks its arguments (endpoints, the
//! message's address, the caller's domain), then hands the call to the
//! kernel through its [`KernelLink`](crate::KernelLink), without leaving
//! the slice: matching a sender with a receiver needs the other process,
//! which may run on this kernel or another. A call that completes returns at
//! once; one that must wait unwinds as a [`KernelCall::Ipc`], and the kernel
//! later copies the message into the caller's memory and answers with
//! [`Reply::Ipc`]. Grants touch only the caller's UArea and are answered here.
//!
//! The guest-side declarations are in `sdk/include/atoll.h`.

use atoll_abi::{Errno, Pid};
use atoll_ipc::{
    body_fits, Access, BodyAt, CallKind, CopyAddr, CopyRequest, CopySide, Grant, IpcCall, Phase,
    MESSAGE_SIZE,
};
use wasmtime::{Caller, Linker};

use super::{enter_kernel, take_reply, wait_in_process, with_memory};
use crate::call::{IpcCaller, IpcOutcome, KernelCall, Reply};
use crate::ctx::ProcCtx;
use crate::memory::GuestMemory;
use crate::threads::Wait;

const M: &str = "atoll";

/// Longest domain name `bind` accepts.
const MAX_DOMAIN_NAME: u32 = 64;

pub(super) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    linker.func_wrap(
        M,
        "ipc_send",
        |mut c: Caller<'_, ProcCtx>, to: i64, msg: u32| send(&mut c, to, msg, CallKind::Send),
    )?;
    linker.func_wrap(
        M,
        "ipc_sendnb",
        |mut c: Caller<'_, ProcCtx>, to: i64, msg: u32| send(&mut c, to, msg, CallKind::SendNb),
    )?;
    linker.func_wrap(
        M,
        "ipc_senda",
        |c: Caller<'_, ProcCtx>, to: i64, msg: u32| senda(c, to, msg, false, None),
    )?;
    linker.func_wrap(
        M,
        "ipc_senda_more",
        |c: Caller<'_, ProcCtx>, to: i64, msg: u32| senda(c, to, msg, true, None),
    )?;
    linker.func_wrap(
        M,
        "ipc_senda_body",
        |c: Caller<'_, ProcCtx>, to: i64, msg: u32, body: u32, len: u32| {
            senda(c, to, msg, false, Some((body, len)))
        },
    )?;
    linker.func_wrap(
        M,
        "ipc_body",
        |mut c: Caller<'_, ProcCtx>, at: u32, len: u32| {
            with_memory(&mut c, |mem, ctx| {
                let body = ctx.uarea.ipc.body.as_deref().ok_or(Errno::NoMsg)?;
                let n = body.len().min(len as usize);
                mem.write(at, &body[..n])
            })
        },
    )?;
    linker.func_wrap(
        M,
        "ipc_sendrec",
        |mut c: Caller<'_, ProcCtx>, to: i64, msg: u32| send(&mut c, to, msg, CallKind::SendRec),
    )?;
    linker.func_wrap(
        M,
        "ipc_receive",
        |mut c: Caller<'_, ProcCtx>, from: i64, msg: u32, status: u32| {
            receive(&mut c, from, msg, status, true)
        },
    )?;
    linker.func_wrap(
        M,
        "ipc_receivenb",
        |mut c: Caller<'_, ProcCtx>, from: i64, msg: u32, status: u32| {
            receive(&mut c, from, msg, status, false)
        },
    )?;
    linker.func_wrap(M, "ipc_notify", notify)?;
    linker.func_wrap(M, "grant", grant)?;
    linker.func_wrap(M, "revoke", |mut c: Caller<'_, ProcCtx>, id: u32| {
        Ok(with_memory(&mut c, |_, ctx| {
            ctx.uarea.ipc.grants.revoke(id)
        }))
    })?;
    linker.func_wrap(M, "vcopy", vcopy)?;
    linker.func_wrap(
        M,
        "safecopy_from",
        |mut c: Caller<'_, ProcCtx>, owner: i64, grant: u32, offset: u32, addr: u32, len: u32| {
            safecopy(&mut c, owner, grant, offset, addr, len, Direction::From)
        },
    )?;
    linker.func_wrap(
        M,
        "safecopy_to",
        |mut c: Caller<'_, ProcCtx>, owner: i64, grant: u32, offset: u32, addr: u32, len: u32| {
            safecopy(&mut c, owner, grant, offset, addr, len, Direction::To)
        },
    )?;
    linker.func_wrap(M, "bind", bind)?;
    linker.func_wrap(M, "unbind", |mut c: Caller<'_, ProcCtx>| {
        kernel_call(&mut c, |_, _| Ok(KernelCall::Bind { domain: None }))
    })?;
    linker.func_wrap(M, "domain", |c: Caller<'_, ProcCtx>| {
        // Ids a node makes have 56 bits; a restored image may claim any.
        let id = c.data().uarea.ipc.domain.map(|d| i64::try_from(d.0));
        id.map_or(-1, |d| d.unwrap_or(-1))
    })?;
    Ok(())
}

/// The shape of every kernel-served call here: on the way back (rewind),
/// return the kernel's answer; on the way in, decode with `decide` and
/// enter the kernel with the call it makes, or return its error at once.
fn kernel_call(
    c: &mut Caller<'_, ProcCtx>,
    decide: impl FnOnce(&mut GuestMemory<'_>, &mut ProcCtx) -> Result<KernelCall, Errno>,
) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(c)? {
        return Ok(match reply {
            Reply::Ipc(Ok(())) => 0,
            Reply::Ipc(Err(e)) => e.raw() as i32,
            other => {
                tracing::error!(
                    ?other,
                    "kernel answered an IPC call with the wrong kind of reply"
                );
                Errno::Io.raw() as i32
            }
        });
    }
    // Another thread of the process is in the kernel: this one waits for
    // its turn, then makes the call afresh (nothing is done yet). Once
    // past here, a call that must wait takes the seat at once: the kernel
    // has recorded it already.
    if c.data().uarea.threads.seat().is_some() {
        return Ok(wait_in_process(c, Wait::Seat(None)).map_or_else(|e| e.raw() as i32, |()| 0));
    }
    let mut block = None;
    let rc = with_memory(c, |mem, ctx| {
        let call = decide(mem, ctx)?;
        let KernelCall::Ipc(call) = call else {
            block = Some(call);
            return Ok(());
        };
        ctx.uarea.ipc.seq += 1;
        let Some(mut link) = ctx.link else {
            return Err(Errno::NoSys);
        };
        let me = IpcCaller {
            pid: ctx.uarea.pid,
            alone: !ctx.uarea.threads.active(),
            ipc: &mut ctx.uarea.ipc,
            memory: mem.bytes_mut(),
            lender: &ctx.lender,
        };
        // SAFETY: the kernel lent itself for this slice (`Container::run`),
        // and nothing else holds it while the guest runs.
        match unsafe { link.as_mut() }.ipc(me, call) {
            IpcOutcome::Done(result) => result,
            IpcOutcome::Block(call) => {
                block = Some(KernelCall::Ipc(call));
                Ok(())
            }
        }
    });
    let Some(call) = block else { return Ok(rc) };
    Ok(enter_kernel(c, call).map_or_else(|e| e.raw() as i32, |()| 0))
}

/// An endpoint the guest named: SELF is the caller, ANY is refused (callers
/// that accept it check first), and a PID of this node must name a kernel
/// that exists. One of another node is checked there: a node or kernel the
/// cluster does not have makes the call fail with EDEADSRCDST.
fn endpoint(ctx: &ProcCtx, v: i64) -> Result<Pid, Errno> {
    if v == Pid::SELF_ABI {
        return Ok(ctx.uarea.pid);
    }
    let pid = Pid::from_abi(v).ok_or(Errno::BadSrcDst)?;
    if pid.home.node == ctx.host.kernel.node && pid.home.index >= ctx.host.kernel_count {
        return Err(Errno::BadSrcDst);
    }
    Ok(pid)
}

/// An endpoint, or `None` for ANY (receive from, or grant to, any process).
fn endpoint_or_any(ctx: &ProcCtx, v: i64) -> Result<Option<Pid>, Errno> {
    match v {
        Pid::ANY_ABI => Ok(None),
        v => endpoint(ctx, v).map(Some),
    }
}

/// IPC needs a domain (M3-IPC: only processes bound to a VM take part).
fn check_bound(ctx: &ProcCtx) -> Result<(), Errno> {
    ctx.uarea.ipc.domain.map(|_| ()).ok_or(Errno::CallDenied)
}

fn message_at(mem: &mut GuestMemory<'_>, msg: u32) -> Result<(), Errno> {
    mem.slice_mut(msg, MESSAGE_SIZE as u32).map(|_| ())
}

fn send(c: &mut Caller<'_, ProcCtx>, to: i64, msg: u32, kind: CallKind) -> wasmtime::Result<i32> {
    kernel_call(c, |mem, ctx| {
        check_bound(ctx)?;
        let to = endpoint(ctx, to)?;
        message_at(mem, msg)?;
        // Sending to oneself would wait for ever: a cycle of one.
        if to == ctx.uarea.pid {
            return Err(if kind == CallKind::SendNb {
                Errno::NotReady
            } else {
                Errno::Locked
            });
        }
        Ok(KernelCall::Ipc(match kind {
            CallKind::SendRec => IpcCall::SendRec {
                to,
                msg,
                phase: Phase::Sending,
            },
            kind => IpcCall::Send { to, msg, kind },
        }))
    })
}

/// `senda`: queues the message for `to` and returns. A letter the kernel
/// cannot deliver is reported by the next `senda` to the same process.
/// `more`: more letters follow at once. `body`: the address and length of
/// bytes that travel with it.
fn senda(
    mut c: Caller<'_, ProcCtx>,
    to: i64,
    msg: u32,
    more: bool,
    body: Option<(u32, u32)>,
) -> wasmtime::Result<i32> {
    kernel_call(&mut c, |mem, ctx| {
        check_bound(ctx)?;
        let to = endpoint(ctx, to)?;
        message_at(mem, msg)?;
        let body: Option<BodyAt> = match body {
            Some((at, len)) => {
                body_fits(len as usize)?;
                mem.slice(at, len)?;
                Some(at..at + len)
            }
            None => None,
        };
        // It would be one's own to take; a process that wants to tell
        // itself something can notify itself.
        if to == ctx.uarea.pid {
            return Err(Errno::Inval);
        }
        Ok(KernelCall::Ipc(IpcCall::SendA {
            to,
            msg,
            more,
            body,
        }))
    })
}

/// `receive`, or `receivenb` unless `wait`.
fn receive(
    c: &mut Caller<'_, ProcCtx>,
    from: i64,
    msg: u32,
    status: u32,
    wait: bool,
) -> wasmtime::Result<i32> {
    kernel_call(c, |mem, ctx| {
        check_bound(ctx)?;
        let from = endpoint_or_any(ctx, from)?;
        message_at(mem, msg)?;
        mem.slice_mut(status, 4)?;
        if from == Some(ctx.uarea.pid) {
            return Err(if wait { Errno::Locked } else { Errno::NotReady });
        }
        Ok(KernelCall::Ipc(if wait {
            IpcCall::Receive { from, msg, status }
        } else {
            IpcCall::ReceiveNb { from, msg, status }
        }))
    })
}

fn notify(mut c: Caller<'_, ProcCtx>, to: i64) -> wasmtime::Result<i32> {
    kernel_call(&mut c, |_, ctx| {
        check_bound(ctx)?;
        let to = endpoint(ctx, to)?;
        ctx.uarea.ipc.stats.notified += 1;
        Ok(KernelCall::Ipc(IpcCall::Notify { to }))
    })
}

fn grant(
    mut c: Caller<'_, ProcCtx>,
    grantee: i64,
    addr: u32,
    len: u32,
    access: u32,
    id_out: u32,
) -> wasmtime::Result<i32> {
    Ok(with_memory(&mut c, |mem, ctx| {
        check_bound(ctx)?;
        let grantee = endpoint_or_any(ctx, grantee)?;
        let access = Access::from_bits(access).ok_or(Errno::Inval)?;
        mem.slice(addr, len)?;
        mem.slice_mut(id_out, 4)?;
        let id = ctx.uarea.ipc.grants.create(Grant {
            grantee,
            addr,
            len,
            access,
        })?;
        mem.write_u32(id_out, id)
    }))
}

/// One side of a copy the caller names by address: its own memory is
/// checked here, another process's by that process's kernel.
fn side(
    mem: &GuestMemory<'_>,
    ctx: &ProcCtx,
    ep: i64,
    addr: u32,
    len: u32,
) -> Result<CopySide, Errno> {
    let pid = endpoint(ctx, ep)?;
    if pid == ctx.uarea.pid {
        mem.slice(addr, len)?;
    }
    Ok(CopySide {
        pid,
        at: CopyAddr::Direct(addr),
    })
}

fn vcopy(
    mut c: Caller<'_, ProcCtx>,
    src: i64,
    src_addr: u32,
    dst: i64,
    dst_addr: u32,
    len: u32,
) -> wasmtime::Result<i32> {
    kernel_call(&mut c, |mem, ctx| {
        check_bound(ctx)?;
        let src = side(mem, ctx, src, src_addr, len)?;
        let dst = side(mem, ctx, dst, dst_addr, len)?;
        Ok(KernelCall::Ipc(IpcCall::Copy(CopyRequest {
            src,
            dst,
            len,
        })))
    })
}

enum Direction {
    /// From the owner's granted memory into the caller's.
    From,
    /// From the caller's memory into the owner's granted memory.
    To,
}

fn safecopy(
    c: &mut Caller<'_, ProcCtx>,
    owner: i64,
    grant: u32,
    offset: u32,
    addr: u32,
    len: u32,
    dir: Direction,
) -> wasmtime::Result<i32> {
    kernel_call(c, |mem, ctx| {
        check_bound(ctx)?;
        let owner = endpoint(ctx, owner)?;
        let mine = side(mem, ctx, Pid::SELF_ABI, addr, len)?;
        let theirs = match owner == ctx.uarea.pid {
            // Through a grant of its own: its grant table, here, says where,
            // as the owner's kernel would for another process. The kernel
            // then sees both sides in the caller's memory, by address.
            true => {
                let need = match dir {
                    Direction::From => Access::READ,
                    Direction::To => Access::WRITE,
                };
                let at = ctx
                    .uarea
                    .ipc
                    .grants
                    .resolve(grant, owner, offset, len, need)?;
                side(mem, ctx, Pid::SELF_ABI, at, len)?
            }
            false => CopySide {
                pid: owner,
                at: CopyAddr::Grant { id: grant, offset },
            },
        };
        let (src, dst) = match dir {
            Direction::From => (theirs, mine),
            Direction::To => (mine, theirs),
        };
        Ok(KernelCall::Ipc(IpcCall::Copy(CopyRequest {
            src,
            dst,
            len,
        })))
    })
}

fn bind(mut c: Caller<'_, ProcCtx>, name: u32, name_len: u32) -> wasmtime::Result<i32> {
    kernel_call(&mut c, |mem, _| {
        if name_len > MAX_DOMAIN_NAME {
            return Err(Errno::NameTooLong);
        }
        Ok(KernelCall::Bind {
            domain: Some(mem.str(name, name_len)?.to_owned()),
        })
    })
}
