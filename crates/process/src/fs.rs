//! Files under preopened directories: the host side of WASI's `fd_*` and
//! `path_*` calls (registered by `syscall::wasi_fs`).
//!
//! **Local part, remote part.** As in ALMOS-MK, an open file is split. The
//! local part — descriptor number, host path, offset, access mode, append
//! flag — is a [`FileFd`] in the UArea and moves with the process. The
//! remote part is the host file, on the node that owns it: each call turns
//! what it asks of the host into one [`FileOp`](op::FileOp), which runs at
//! once on the owner's node and is sent to it from any other (`op.rs`),
//! where it is held open for the process (`held.rs`).
//! On the owner's node the host `File` is kept in [`ProcCtx::files`]
//! ([`HostFiles`]) from the open on, by descriptor: it stays with the
//! process while it runs there (a hand-over between kernels moves it, a
//! copy-mode move takes a duplicate along, a dormant process keeps it, a
//! forked child gets a duplicate, an exec keeps it). A process that left
//! the node and came back has the kernel holding the file for it serve it
//! (`FileFd::held`). Where the handle was lost (a restored checkpoint), the
//! first call that needs it reopens it from the host path with the same access
//! mode, never creating or truncating, so a process that moved between two
//! calls sees the same file at the same offset; a file with no name left
//! travels in the checkpoint instead (`ghost.rs`). That is also why all I/O
//! is positional (at the UArea's offset): the host descriptor's own offset
//! means nothing.
//!
//! **Sandbox.** A directory descriptor is a capability for what lies beneath
//! it: [`resolve`] maps a guest path to a host path beneath the directory or
//! fails with `ENOTCAPABLE`: absolute paths, `..` above the directory and
//! symbolic links that lead out of it are refused. Files are
//! opened with `O_NOFOLLOW` on the resolved path, and only regular files and
//! directories can be opened (`O_NONBLOCK`, so a FIFO cannot block a kernel).
//!
//! **Standard streams.** stdin is the job's: a read asks the console service
//! of the node that started the job for at most as many bytes as the call
//! can take, and waits for them at a safepoint (`KernelCall::Input`);
//! nothing is read from the terminal before a process asks, which is the
//! backpressure. stdout and stderr go to the console; a process may have
//! [`CONSOLE_WINDOW`](crate::CONSOLE_WINDOW) bytes on their way, then its
//! write waits until the console has passed enough on (`KernelCall::Drain`,
//! [`ConsoleFlow`](crate::ConsoleFlow)).
//! A module run unprepared cannot wait: its stdin reads fail with `ENOTSUP`
//! and its writes are not held back.
//!
//! **Limits.** One call moves at most [`MAX_IO`] bytes (a short
//! read or write, which wasi-libc retries), so that a guest cannot make a
//! kernel copy gigabytes in one system call. Where a file must be reopened
//! by path, one that was unlinked or replaced while open cannot be used
//! (`ENOENT`, or `ESTALE` when another file took its name). The sync
//! fdflags (`DSYNC`, `RSYNC`, `SYNC`) open the host file with the same
//! flags; a change of them opens the same file again through
//! `/proc/self/fd` ([`reopen_handle`]), so it needs no name.
//! `NONBLOCK` is kept and reported (a file never blocks). Rights are reported as wasmtime reports them and can be narrowed
//! (`rights.rs`).

mod descriptor;
mod dir;
pub(crate) mod ghost;
pub(crate) mod held;
pub(crate) mod op;
mod path;
mod resolve;
pub(crate) mod rights;
mod stat;
mod times;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;

use atoll_abi::{Errno, KernelId};

use crate::call::{KernelCall, Reply};
use crate::ctx::ProcCtx;
use crate::fd::{Fd, FileFd, FileId};
use op::{FileAnswer, FileOp, Handles};

pub(crate) use descriptor::*;
pub(crate) use dir::*;
pub(crate) use path::*;
pub(crate) use resolve::{resolve, resolve_entry, Follow};

/// Why a file call did not finish here.
#[derive(Debug)]
pub(crate) enum Fail {
    /// It failed, with this errno for the guest.
    Errno(Errno),
    /// It must wait for the kernel (a file op for the node of another
    /// kernel, stdin, the console): the call enters the kernel with this,
    /// and runs again with the answer ([`ProcCtx::answer`]).
    Wait(KernelCall),
}

impl From<Errno> for Fail {
    fn from(e: Errno) -> Self {
        Fail::Errno(e)
    }
}

impl ProcCtx {
    /// Has `op` executed: here, if this node owns its files, else by the
    /// owner (`Fail::Wait`). When the call is being run again with the
    /// owner's answer, that answer is the result.
    pub(crate) fn file(&mut self, op: FileOp) -> Result<FileAnswer, Fail> {
        if let Some(Reply::File(answer)) = self.answer.take() {
            return Ok(answer?);
        }
        let owner = op.owner()?;
        // A file its owner holds for this process, which has no handle of
        // its own: the owner serves it, also on this node.
        let held = op
            .open_file()
            .is_some_and(|r| r.file.held && !self.files.by_fd.contains_key(&r.fd));
        if owner.node == self.host.kernel.node && !held {
            Ok(op.execute(Handles::Kept(&mut self.files))?)
        } else {
            Err(Fail::Wait(KernelCall::File {
                owner,
                op: Box::new(op),
            }))
        }
    }
}

/// The host handles behind a process's file descriptors, while it runs on
/// the node that owns their files. Each is kept from the open on, so a
/// file unlinked or renamed while open stays usable; one is reopened by
/// its path only where its handle was lost (a restored checkpoint).
#[derive(Debug, Default)]
pub struct HostFiles {
    by_fd: HashMap<u32, File>,
    /// The handle `path_open` has just opened, until its descriptor has a
    /// number ([`HostFiles::adopt`]).
    opened: Option<File>,
    /// Opens of another node, held there for this process ([`held::HeldFiles`]),
    /// that it closed: its kernel tells their holders after the slice.
    closed_away: Vec<(KernelId, u64)>,
}

impl HostFiles {
    /// Gives the descriptor the open was given (`fd`) the handle just
    /// opened, or no handle if the open ran on another node; if the open
    /// got no descriptor, the handle is closed.
    pub(crate) fn adopt(&mut self, fd: Result<u32, Errno>) -> Result<u32, Errno> {
        let file = self.opened.take();
        let fd = fd?;
        match file {
            Some(file) => self.by_fd.insert(fd, file),
            None => self.by_fd.remove(&fd),
        };
        Ok(fd)
    }

    pub(crate) fn close(&mut self, fd: u32) {
        self.by_fd.remove(&fd);
    }

    /// Keeps `file` as the handle of descriptor `fd`.
    pub(crate) fn keep(&mut self, fd: u32, file: File) {
        self.by_fd.insert(fd, file);
    }

    /// Descriptor `fd` (of `f`) has new sync flags: its handle is opened
    /// again with them. One that cannot be is dropped, to be reopened by
    /// path at the next call.
    pub(crate) fn resync(&mut self, fd: u32, f: &FileFd) {
        if let Some(file) = self.by_fd.get_mut(&fd) {
            match reopen_handle(file, f) {
                Ok(again) => *file = again,
                Err(_) => drop(self.by_fd.remove(&fd)),
            }
        }
    }

    /// Notes that a descriptor was closed, on node `here`: a file of another
    /// node, or one held for the process, is held by its owner, which must
    /// hear of it.
    pub(crate) fn closed(&mut self, fd: &Fd, here: u16) {
        if let Fd::File(f) = fd {
            if f.owner.node != here || f.held {
                self.closed_away.push((f.owner, f.open));
            }
        }
    }

    /// The opens of other nodes closed since last asked (see `closed`).
    pub(crate) fn take_closed_away(&mut self) -> Vec<(KernelId, u64)> {
        std::mem::take(&mut self.closed_away)
    }

    /// The handles kept, by descriptor.
    pub(crate) fn kept(&self) -> impl Iterator<Item = (u32, &File)> {
        self.by_fd.iter().map(|(&fd, f)| (fd, f))
    }

    /// `from`'s handle moves to `to`, closing `to`'s.
    pub(crate) fn renumber(&mut self, from: u32, to: u32) {
        if from != to {
            self.by_fd.remove(&to);
            if let Some(file) = self.by_fd.remove(&from) {
                self.by_fd.insert(to, file);
            }
        }
    }

    /// The handles a forked child gets: duplicates of these (`dup`), as
    /// POSIX's fork gives. One that cannot be duplicated (no descriptors
    /// left) is reopened by path when the child needs it.
    pub(crate) fn duplicate(&self) -> HostFiles {
        let by_fd = self
            .by_fd
            .iter()
            .filter_map(|(&fd, f)| Some((fd, f.try_clone().ok()?)))
            .collect();
        HostFiles {
            by_fd,
            ..HostFiles::default()
        }
    }
}

/// Bytes one `fd_read`/`fd_write` (and their positional twins) moves at most.
pub(crate) const MAX_IO: usize = 16 << 20;

/// iovecs one call may pass at most (POSIX `IOV_MAX`).
pub(crate) const MAX_IOVS: u32 = 1024;

/// WASI `fdflags`.
pub(crate) mod fdflags {
    pub const APPEND: u16 = 1 << 0;
    pub const DSYNC: u16 = 1 << 1;
    pub const NONBLOCK: u16 = 1 << 2;
    pub const RSYNC: u16 = 1 << 3;
    pub const SYNC: u16 = 1 << 4;
    pub const ALL: u16 = APPEND | DSYNC | NONBLOCK | RSYNC | SYNC;

    /// The host `open` flags that carry out the sync flags of `flags`.
    pub fn host_sync(flags: u16) -> i32 {
        let mut host = 0;
        if flags & DSYNC != 0 {
            host |= libc::O_DSYNC;
        }
        if flags & RSYNC != 0 {
            host |= libc::O_RSYNC;
        }
        if flags & SYNC != 0 {
            host |= libc::O_SYNC;
        }
        host
    }
}

/// Maps a host error to the errno the guest sees, by its OS error number
/// first (several of these have no stable `io::ErrorKind`).
pub(crate) fn host_errno(e: &io::Error) -> Errno {
    match e.raw_os_error() {
        Some(libc::ELOOP) => Errno::Loop,
        Some(libc::ENAMETOOLONG) => Errno::NameTooLong,
        Some(libc::ENOTDIR) => Errno::NotDir,
        Some(libc::EISDIR) => Errno::IsDir,
        Some(libc::ENOTEMPTY) => Errno::NotEmpty,
        Some(libc::EEXIST) => Errno::Exist,
        Some(libc::ENOENT) => Errno::NoEnt,
        Some(libc::EACCES) => Errno::Acces,
        Some(libc::EPERM) => Errno::Perm,
        Some(libc::EXDEV) => Errno::Xdev,
        Some(libc::EMLINK) => Errno::Mlink,
        Some(libc::EBUSY) => Errno::Busy,
        Some(libc::EINVAL) => Errno::Inval,
        Some(libc::ENXIO) => Errno::Nxio,
        Some(libc::ENOSPC) => Errno::NoSpc,
        Some(libc::EFBIG) => Errno::Fbig,
        Some(libc::EROFS) => Errno::Rofs,
        Some(libc::ETXTBSY) => Errno::TxtBsy,
        Some(libc::EMFILE | libc::ENFILE) => Errno::Nfile,
        Some(libc::EAGAIN) => Errno::Again,
        _ => Errno::from_io(e),
    }
}

/// Opens a host file for a descriptor with WASI `fdflags` `flags`:
/// `O_NOFOLLOW` (the path is already resolved, so a symlink found here was
/// put there behind our back), `O_NONBLOCK` (a FIFO must not block the
/// kernel) and the sync flags; only regular files pass. Returns the file
/// and its identity.
pub(crate) fn open_host(
    options: &mut OpenOptions,
    host: &std::path::Path,
    flags: u16,
) -> Result<(File, FileId), Errno> {
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | fdflags::host_sync(flags))
        .open(host)
        .map_err(|e| host_errno(&e))?;
    let meta = file.metadata().map_err(|e| host_errno(&e))?;
    let kind = meta.file_type();
    if kind.is_dir() {
        Err(Errno::IsDir)
    } else if !kind.is_file() {
        Err(Errno::NotSup)
    } else {
        Ok((file, FileId::of(&meta)))
    }
}

/// `file`, the host handle of `f`, opened again with `f`'s access mode and
/// sync flags: the same file, reached through `/proc/self/fd` even if it
/// was unlinked or renamed over. What a change of sync flags needs, since
/// `fcntl(F_SETFL)` cannot change them on Linux.
///
/// # Errors
/// Those of the open; `ESTALE` if it did not reach the same file.
pub(crate) fn reopen_handle(file: &File, f: &FileFd) -> Result<File, Errno> {
    use std::os::fd::AsRawFd;
    let again = OpenOptions::new()
        .read(f.read || !f.write)
        .write(f.write)
        .custom_flags(libc::O_NONBLOCK | fdflags::host_sync(f.flags))
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|e| host_errno(&e))?;
    let meta = again.metadata().map_err(|e| host_errno(&e))?;
    if FileId::of(&meta) != f.id {
        return Err(Errno::Stale);
    }
    Ok(again)
}

/// Bytes a module file read for another node's process may have
/// (`FileOp::ReadModule`): it travels whole, in one bulk frame.
pub(crate) const MAX_MODULE: u64 = 1 << 30;

/// The module file that `path` names beneath the host directory `dir`, for
/// spawn and exec: resolved as `open` resolves it, following symbolic links
/// that stay beneath `dir`.
///
/// # Errors
/// Those of [`resolve`]; `ENOENT` if nothing is there, `ENOEXEC` if it is
/// not a regular file.
pub(crate) fn module_file(dir: &std::path::Path, path: &str) -> Result<std::path::PathBuf, Errno> {
    let host = resolve(dir, path, Follow::Yes)?;
    if host.is_file() {
        Ok(host)
    } else if host.exists() {
        Err(Errno::NoExec)
    } else {
        Err(Errno::NoEnt)
    }
}

/// Reopens the host file of `f` with its access mode, never creating or
/// truncating: what a process that moved needs to carry on.
///
/// # Errors
/// `ESTALE` if the path now names another file.
pub(crate) fn reopen(f: &FileFd) -> Result<File, Errno> {
    let (file, id) = open_host(
        OpenOptions::new().read(f.read || !f.write).write(f.write),
        &f.host,
        f.flags,
    )?;
    if id != f.id {
        return Err(Errno::Stale);
    }
    Ok(file)
}
