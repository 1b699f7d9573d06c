//! atoll's own system calls (import module `atoll`): identity, processes,
//! and the safepoint that prepared modules call when asked to stop.
//!
//! The guest-side declarations are in `sdk/include/atoll.h`.

use std::path::Path;

use atoll_abi::{status, Errno, Pid};
use wasmtime::{AsContextMut, Caller, Linker};

use super::{enter_kernel, exit_process, lower_yield_flag, take_reply, with_memory};
use crate::call::{KernelCall, Reply, SpawnModule, SpawnRequest, Yielding};
use crate::container::kernel_needs_the_core;
use crate::ctx::ProcCtx;
use crate::fd::FdTable;
use crate::fs::op::Beneath;
use crate::memory::GuestMemory;

const M: &str = "atoll";

/// Most arguments a spawned process may be given, in bytes.
const MAX_ARGV_BYTES: u32 = 1 << 20;

pub(super) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    linker.func_wrap(M, "getpid", |c: Caller<'_, ProcCtx>| {
        c.data().uarea.pid.to_abi()
    })?;
    linker.func_wrap(M, "kernel", |c: Caller<'_, ProcCtx>| {
        c.data().host.kernel.to_abi()
    })?;
    linker.func_wrap(M, "kernel_count", |c: Caller<'_, ProcCtx>| {
        c.data().host.kernel_count as i32
    })?;
    linker.func_wrap(M, "safepoint", safepoint)?;
    linker.func_wrap(M, "spawn", spawn)?;
    linker.func_wrap(M, "fork", fork)?;
    linker.func_wrap(M, "exec", exec)?;
    linker.func_wrap(M, "wait", wait)?;
    linker.func_wrap(M, "kill", kill)?;
    linker.func_wrap(M, "migrate_to", migrate_to)?;
    Ok(())
}

/// Called by a prepared module at a loop's back edge or a function's entry
/// when its kernel's yield flag is raised: the slice is over if the quantum
/// is, or if the kernel has messages it must leave the process for (those
/// that only join its queues are taken in now, and it goes on).
fn safepoint(mut c: Caller<'_, ProcCtx>) -> wasmtime::Result<()> {
    if take_reply(&mut c)?.is_some() {
        return Ok(());
    }
    // Lowered first: a raise from now on is seen at the next check.
    lower_yield_flag(&c);
    let why = if quanta::Instant::now() >= c.data().deadline {
        Yielding::Quantum
    } else if (c.data().host.wake)() && kernel_needs_the_core(&mut c.as_context_mut()) {
        Yielding::Messages
    } else {
        return Ok(());
    };
    // Only prepared modules call this, and they can always unwind.
    enter_kernel(&mut c, KernelCall::Yield(why))
        .map_err(|e| wasmtime::format_err!("safepoint: {e}"))?;
    Ok(())
}

fn spawn(
    mut c: Caller<'_, ProcCtx>,
    module_ptr: u32,
    module_len: u32,
    argv_ptr: u32,
    argv_len: u32,
    kernel: i32,
    pid_out: u32,
) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(with_memory(&mut c, |mem, _| match reply {
            Reply::Spawned(Ok(pid)) => mem.write_u64(pid_out, pid.to_abi() as u64),
            Reply::Spawned(Err(e)) => Err(e),
            other => unreachable_reply("spawn", &other),
        }));
    }
    Ok(decode_and_enter(&mut c, |mem, ctx| {
        mem.slice_mut(pid_out, 8)?;
        let r = program_request(mem, ctx, module_ptr, module_len, argv_ptr, argv_len, kernel)?;
        Ok(KernelCall::Spawn(r))
    }))
}

/// Replaces the program; returns only when that failed.
fn exec(
    mut c: Caller<'_, ProcCtx>,
    module_ptr: u32,
    module_len: u32,
    argv_ptr: u32,
    argv_len: u32,
    kernel: i32,
) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(match reply {
            Reply::ExecFailed(e) => e.raw() as i32,
            other => unreachable_reply("exec", &other).map_or_else(|e| e.raw() as i32, |()| 0),
        });
    }
    Ok(decode_and_enter(&mut c, |mem, ctx| {
        let r = program_request(mem, ctx, module_ptr, module_len, argv_ptr, argv_len, kernel)?;
        Ok(KernelCall::Exec(r))
    }))
}

/// Decodes a call's arguments in guest memory (`decode`), then enters the
/// kernel with the call they make; returns 0, or the errno of either step.
fn decode_and_enter(
    c: &mut Caller<'_, ProcCtx>,
    decode: impl FnOnce(&mut GuestMemory<'_>, &mut ProcCtx) -> Result<KernelCall, Errno>,
) -> i32 {
    let mut call = None;
    let rc = with_memory(c, |mem, ctx| {
        call = Some(decode(mem, ctx)?);
        Ok(())
    });
    match call {
        Some(call) => enter_kernel(c, call).map_or_else(|e| e.raw() as i32, |()| 0),
        None => rc,
    }
}

/// The module (none: the caller's own, else a path beneath its preopened
/// directories), argv and kernel of a spawn or exec.
fn program_request(
    mem: &mut GuestMemory<'_>,
    ctx: &ProcCtx,
    module_ptr: u32,
    module_len: u32,
    argv_ptr: u32,
    argv_len: u32,
    kernel: i32,
) -> Result<SpawnRequest, Errno> {
    let module = match module_len {
        0 => SpawnModule::Same,
        _ => resolve_module(
            &ctx.uarea.fds,
            mem.str(module_ptr, module_len)?,
            ctx.host.kernel.node,
        )?,
    };
    if argv_len > MAX_ARGV_BYTES {
        return Err(Errno::TooBig);
    }
    let mut args = decode_argv(mem, argv_ptr, argv_len)?;
    // Every program expects an argv[0].
    if args.is_empty() {
        args.push(String::new());
    }
    Ok(SpawnRequest {
        module,
        args,
        kernel: ctx.host.kernel_choice(kernel)?,
    })
}

/// The parent learns its child's PID (`Spawned`), the child 0 (`Forked`):
/// both return from this one call, each in its own process.
fn fork(mut c: Caller<'_, ProcCtx>, kernel: i32, pid_out: u32) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(with_memory(&mut c, |mem, _| match reply {
            Reply::Spawned(Ok(child)) => mem.write_u64(pid_out, child.to_abi() as u64),
            Reply::Spawned(Err(e)) => Err(e),
            Reply::Forked => mem.write_u64(pid_out, 0),
            other => unreachable_reply("fork", &other),
        }));
    }
    Ok(decode_and_enter(&mut c, |mem, ctx| {
        mem.slice_mut(pid_out, 8)?;
        Ok(KernelCall::Fork {
            kernel: ctx.host.kernel_choice(kernel)?,
        })
    }))
}

fn wait(
    mut c: Caller<'_, ProcCtx>,
    pid: i64,
    status_out: u32,
    pid_out: u32,
) -> wasmtime::Result<i32> {
    let write = |mem: &mut GuestMemory<'_>, (child, st): (Pid, i32)| {
        mem.write_u32(status_out, st as u32)?;
        mem.write_u64(pid_out, child.to_abi() as u64)
    };
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(with_memory(&mut c, |mem, _| match reply {
            Reply::Waited(r) => write(mem, r?),
            other => unreachable_reply("wait", &other),
        }));
    }
    let mut block_on = None;
    let rc = with_memory(&mut c, |mem, ctx| {
        mem.slice_mut(status_out, 4)?;
        mem.slice_mut(pid_out, 8)?;
        let which = decode_pid_or_any(pid)?;
        // A child that already ended is reaped without entering the kernel.
        match ctx.uarea.children.reap(which)? {
            Some(done) => write(mem, done),
            None => {
                block_on = Some(which);
                Ok(())
            }
        }
    });
    match block_on {
        Some(pid) => {
            Ok(enter_kernel(&mut c, KernelCall::Wait { pid })
                .map_or_else(|e| e.raw() as i32, |()| 0))
        }
        None => Ok(rc),
    }
}

fn kill(mut c: Caller<'_, ProcCtx>, pid: i64, signal: i32) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(match reply {
            Reply::Killed(Ok(())) => 0,
            Reply::Killed(Err(e)) => e.raw() as i32,
            other => unreachable_reply("kill", &other).map_or_else(|e| e.raw() as i32, |()| 0),
        });
    }
    c.data_mut().uarea.accounting.syscalls += 1;
    let Some(target) = Pid::from_abi(pid) else {
        return Ok(Errno::Srch.raw() as i32);
    };
    if !(1..=64).contains(&signal) {
        return Ok(Errno::Inval.raw() as i32);
    }
    if target == c.data().uarea.pid {
        return exit_process(&mut c, status::killed(signal)).map(|()| 0);
    }
    Ok(enter_kernel(
        &mut c,
        KernelCall::Kill {
            pid: target,
            signal,
        },
    )
    .map_or_else(|e| e.raw() as i32, |()| 0))
}

/// Moves the calling process to kernel `kernel` (of its node, or another);
/// it returns there (or, if the destination could not take it, here with
/// `EAGAIN`).
fn migrate_to(mut c: Caller<'_, ProcCtx>, kernel: i32) -> wasmtime::Result<i32> {
    if let Some(reply) = take_reply(&mut c)? {
        return Ok(match reply {
            Reply::Migrated(Ok(())) => 0,
            Reply::Migrated(Err(e)) => e.raw() as i32,
            other => {
                unreachable_reply("migrate_to", &other).map_or_else(|e| e.raw() as i32, |()| 0)
            }
        });
    }
    c.data_mut().uarea.accounting.syscalls += 1;
    let host = &c.data().host;
    let to = match host.kernel_arg(kernel) {
        Ok(to) => to,
        Err(e) => return Ok(e.raw() as i32),
    };
    if to == host.kernel {
        return Ok(0);
    }
    let call = KernelCall::Migrate { to };
    Ok(enter_kernel(&mut c, call).map_or_else(|e| e.raw() as i32, |()| 0))
}

fn unreachable_reply(call: &str, reply: &Reply) -> Result<(), Errno> {
    tracing::error!(call, ?reply, "kernel answered with the wrong kind of reply");
    Err(Errno::Io)
}

fn decode_pid_or_any(v: i64) -> Result<Option<Pid>, Errno> {
    match v {
        Pid::ANY_ABI => Ok(None),
        v => Pid::from_abi(v).map(Some).ok_or(Errno::Inval),
    }
}

/// argv as the guest passes it: NUL-terminated strings back to back.
fn decode_argv(mem: &GuestMemory<'_>, ptr: u32, len: u32) -> Result<Vec<String>, Errno> {
    let bytes = mem.slice(ptr, len)?;
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    bytes
        .split(|&b| b == 0)
        .map(|s| {
            std::str::from_utf8(s)
                .map(str::to_owned)
                .map_err(|_| Errno::Ilseq)
        })
        .collect()
}

/// Resolves a guest path to a module file through the preopened directories,
/// as `open` would: beneath the longest preopen that is a prefix of the path,
/// with the sandbox rules of every other path (`crate::fs`). A directory of
/// another node than `here` is resolved by its owner, which reads the file
/// for the caller: a module is always the file its path names where the
/// directory is.
///
/// # Errors
/// Those of `open`; for a directory of this node, also `ENOENT` and
/// `ENOEXEC` (not a regular file) at once.
fn resolve_module(fds: &FdTable, guest: &str, here: u16) -> Result<SpawnModule, Errno> {
    let guest = Path::new(guest);
    let (dir, rest) = fds
        .preopens()
        .filter_map(|(_, d)| {
            let prefix = Path::new(d.preopen.as_deref()?);
            let rest = guest.strip_prefix(prefix).ok()?;
            Some((d, rest, prefix.components().count()))
        })
        .max_by_key(|&(_, _, depth)| depth)
        .map(|(d, rest, _)| (d, rest))
        .ok_or(Errno::NotCapable)?;
    let rest = rest.to_str().ok_or(Errno::Ilseq)?;
    if dir.owner.node != here {
        return Ok(SpawnModule::OtherNode(Beneath {
            dir: dir.clone(),
            path: rest.to_owned(),
        }));
    }
    crate::fs::module_file(&dir.host, rest).map(SpawnModule::File)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd::Preopen;

    #[test]
    fn argv_decoding() {
        let mut buf = b"prog\0-x\0\xff\0".to_vec();
        let mem = GuestMemory::new(&mut buf);
        assert_eq!(decode_argv(&mem, 0, 8).unwrap(), vec!["prog", "-x"]);
        assert_eq!(decode_argv(&mem, 0, 10), Err(Errno::Ilseq));
        assert_eq!(decode_argv(&mem, 0, 0).unwrap(), Vec::<String>::new());
        assert_eq!(decode_argv(&mem, 8, 100), Err(Errno::Fault));
    }

    #[test]
    fn module_paths_stay_inside_preopens() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/a.wasm"), b"").unwrap();
        std::fs::write(dir.path().join("secret.wasm"), b"").unwrap();
        let bin = dir.path().join("bin");
        std::os::unix::fs::symlink(dir.path().join("secret.wasm"), bin.join("link.wasm")).unwrap();
        let preopens = [Preopen {
            host: bin.clone(),
            guest: "/bin".into(),
        }];
        let fds = FdTable::new(&preopens, atoll_abi::KernelId::new(0, 0));
        assert_eq!(
            resolve_module(&fds, "/bin/a.wasm", 0).unwrap(),
            SpawnModule::File(bin.canonicalize().unwrap().join("a.wasm"))
        );
        assert_eq!(
            resolve_module(&fds, "/bin/../secret.wasm", 0),
            Err(Errno::NotCapable)
        );
        assert_eq!(
            resolve_module(&fds, "/bin/link.wasm", 0),
            Err(Errno::NotCapable)
        );
        assert_eq!(
            resolve_module(&fds, "/etc/passwd", 0),
            Err(Errno::NotCapable)
        );
        // From another node than the directory's: its owner resolves it.
        let SpawnModule::OtherNode(at) = resolve_module(&fds, "/bin/a.wasm", 1).unwrap() else {
            panic!("a directory of another node is resolved there");
        };
        assert_eq!((at.dir.host, at.path.as_str()), (bin.clone(), "a.wasm"));
        assert_eq!(resolve_module(&fds, "/bin/none.wasm", 0), Err(Errno::NoEnt));
        std::fs::create_dir(bin.join("sub")).unwrap();
        assert_eq!(resolve_module(&fds, "/bin/sub", 0), Err(Errno::NoExec));
    }
}
