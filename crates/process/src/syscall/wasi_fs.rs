//! WASI preview1's file calls (`fd_*`, `path_*`): stdio to the process's
//! console, files and directories beneath preopened directories.
//!
//! This file binds the imports to their implementations in [`crate::fs`],
//! which documents the model: the local part of each open file lives in the
//! UArea, the remote part on the node that owns the file, and paths never
//! resolve outside their preopen. [`file_call`] is where a call whose file
//! is on another node enters the kernel, and is run again with the answer.
//! Clocks, args, environ, random, poll, sched, proc and sock calls are in
//! `wasi.rs`.

use wasmtime::{Caller, Linker};

use super::{enter_kernel, take_reply, wander, wandered, with_memory};
use crate::call::Reply;
use crate::ctx::ProcCtx;
use crate::fs::{self, Fail};
use crate::memory::GuestMemory;

const WASI: &str = "wasi_snapshot_preview1";

/// Registers one import: its preview1 parameters (`i32`/`i64` as the core
/// ABI passes them) are handed, reinterpreted as the implementation's
/// unsigned types, to `fs::$name(mem, ctx, ...)`; it returns the errno
/// (through [`file_call`]).
macro_rules! bind {
    ($linker:ident, $($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $linker.func_wrap(
                WASI,
                stringify!($name),
                |mut caller: Caller<'_, ProcCtx>, $($arg: $ty),*| {
                    file_call(&mut caller, |mem, ctx| {
                        fs::$name(mem, ctx, $($arg as _),*).map_err(Fail::from)
                    })
                },
            )?;
        )*
    };
}

/// Registers the file calls into `linker`.
pub(crate) fn register(linker: &mut Linker<ProcCtx>) -> anyhow::Result<()> {
    bind! { linker,
        fd_read(fd: i32, iovs: i32, iovs_len: i32, nread: i32);
        fd_write(fd: i32, iovs: i32, iovs_len: i32, nwritten: i32);
        fd_pread(fd: i32, iovs: i32, iovs_len: i32, offset: i64, nread: i32);
        fd_pwrite(fd: i32, iovs: i32, iovs_len: i32, offset: i64, nwritten: i32);
        fd_seek(fd: i32, offset: i64, whence: i32, newoffset: i32);
        fd_tell(fd: i32, offset: i32);
        fd_close(fd: i32);
        fd_sync(fd: i32);
        fd_datasync(fd: i32);
        fd_fdstat_get(fd: i32, buf: i32);
        fd_fdstat_set_flags(fd: i32, flags: i32);
        fd_fdstat_set_rights(fd: i32, base: i64, inheriting: i64);
        fd_filestat_get(fd: i32, buf: i32);
        fd_filestat_set_size(fd: i32, size: i64);
        fd_filestat_set_times(fd: i32, atim: i64, mtim: i64, fst_flags: i32);
        fd_prestat_get(fd: i32, buf: i32);
        fd_prestat_dir_name(fd: i32, path: i32, path_len: i32);
        fd_readdir(fd: i32, buf: i32, buf_len: i32, cookie: i64, bufused: i32);
        fd_renumber(from: i32, to: i32);
        fd_advise(fd: i32, offset: i64, len: i64, advice: i32);
        fd_allocate(fd: i32, offset: i64, len: i64);
        path_open(
            fd: i32, dirflags: i32, path: i32, path_len: i32, oflags: i32,
            rights_base: i64, rights_inheriting: i64, fdflags: i32, fd_out: i32
        );
        path_filestat_get(fd: i32, flags: i32, path: i32, path_len: i32, buf: i32);
        path_filestat_set_times(
            fd: i32, flags: i32, path: i32, path_len: i32, atim: i64, mtim: i64, fst_flags: i32
        );
        path_create_directory(fd: i32, path: i32, path_len: i32);
        path_remove_directory(fd: i32, path: i32, path_len: i32);
        path_unlink_file(fd: i32, path: i32, path_len: i32);
        path_rename(fd: i32, old_path: i32, old_len: i32, new_fd: i32, new_path: i32, new_len: i32);
        path_readlink(fd: i32, path: i32, path_len: i32, buf: i32, buf_len: i32, bufused: i32);
        path_symlink(old_path: i32, old_len: i32, fd: i32, new_path: i32, new_len: i32);
        path_link(
            old_fd: i32, old_flags: i32, old_path: i32, old_len: i32,
            new_fd: i32, new_path: i32, new_len: i32
        );
    }
    Ok(())
}

/// Serves a file call: at once if it can be (its file is on this node),
/// else by entering the kernel with what it waits for (another node's
/// answer to its op, stdin, the console's drain; the process blocks until
/// the answer comes back), then, rewound with the answer, by running `f`
/// again to apply it. Wander mode then moves the process, as after any call
/// answered in place.
fn file_call(
    caller: &mut Caller<'_, ProcCtx>,
    f: impl Fn(&mut GuestMemory<'_>, &mut ProcCtx) -> Result<(), Fail>,
) -> wasmtime::Result<i32> {
    match take_reply(caller)? {
        Some(answer @ (Reply::File(_) | Reply::Input(_))) => {
            caller.data_mut().answer = Some(answer)
        }
        // The window has room again (the kernel took in how far the
        // console got): the write goes on.
        Some(Reply::Drained) => {}
        Some(_) => return wandered(caller),
        None => {}
    }
    let mut wait = None;
    let rc = with_memory(caller, |mem, ctx| match f(mem, ctx) {
        Ok(()) => Ok(()),
        Err(Fail::Errno(e)) => Err(e),
        Err(Fail::Wait(call)) => {
            wait = Some(call);
            Ok(())
        }
    });
    // An answer the call did not reach its op to take is not the next
    // call's (it cannot happen: the call decodes the same memory again).
    caller.data_mut().answer = None;
    if let Some(call) = wait {
        // A module that cannot unwind (run unprepared) cannot wait.
        return Ok(enter_kernel(caller, call).map_or_else(|e| e.raw() as i32, |()| 0));
    }
    wander(caller, rc);
    Ok(rc)
}
