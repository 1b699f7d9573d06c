//! The `path_*` calls: opening, status, and changes to directory entries,
//! every path resolved beneath its directory descriptor's root.

use atoll_abi::Errno;

use super::op::{Beneath, FileOp};
use super::stat;
use super::times::Times;
use super::{fdflags, rights, Fail, Follow};
use crate::ctx::ProcCtx;
use crate::fd::{DirFd, Fd, FdTable};
use crate::memory::GuestMemory;

/// Longest guest path accepted (Linux's `PATH_MAX`).
const PATH_MAX: u32 = 4096;

/// WASI `oflags`.
mod oflags {
    pub const CREAT: u32 = 1 << 0;
    pub const DIRECTORY: u32 = 1 << 1;
    pub const EXCL: u32 = 1 << 2;
    pub const TRUNC: u32 = 1 << 3;
    pub const ALL: u32 = CREAT | DIRECTORY | EXCL | TRUNC;
}

/// Copies a guest path out of memory.
fn guest_path(mem: &GuestMemory<'_>, ptr: u32, len: u32) -> Result<String, Errno> {
    let bytes = mem.slice(ptr, len)?;
    if len > PATH_MAX {
        return Err(Errno::NameTooLong);
    }
    let path = std::str::from_utf8(bytes).map_err(|_| Errno::Ilseq)?;
    if path.contains('\0') {
        return Err(Errno::Inval);
    }
    Ok(path.to_owned())
}

/// The directory descriptor `fd`; a path relative to anything else is
/// `ENOTDIR`.
fn dir_of(fds: &FdTable, fd: u32) -> Result<&DirFd, Errno> {
    match fds.get(fd)? {
        Fd::Dir(d) => Ok(d),
        _ => Err(Errno::NotDir),
    }
}

/// Guest path `path` beneath directory descriptor `fd`, for an op.
fn beneath(ctx: &ProcCtx, fd: u32, path: String) -> Result<Beneath, Errno> {
    let dir = dir_of(&ctx.uarea.fds, fd)?.clone();
    Ok(Beneath { dir, path })
}

/// What `path_open` was asked for, decoded.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OpenRequest {
    pub(crate) create: bool,
    pub(crate) directory: bool,
    pub(crate) exclusive: bool,
    pub(crate) truncate: bool,
    pub(crate) read: bool,
    pub(crate) write: bool,
    /// WASI `fdflags`, kept by the new descriptor.
    pub(crate) flags: u16,
}

impl OpenRequest {
    fn decode(oflags: u32, rights_base: u64, fdflags: u32) -> Result<Self, Errno> {
        if oflags & !oflags::ALL != 0 || fdflags & !u32::from(fdflags::ALL) != 0 {
            return Err(Errno::Inval);
        }
        let req = OpenRequest {
            create: oflags & oflags::CREAT != 0,
            directory: oflags & oflags::DIRECTORY != 0,
            exclusive: oflags & oflags::EXCL != 0,
            truncate: oflags & oflags::TRUNC != 0,
            read: rights_base & rights::FD_READ != 0,
            write: rights_base & rights::FD_WRITE != 0,
            flags: fdflags as u16,
        };
        if req.directory && (req.create || req.truncate) {
            return Err(Errno::Inval);
        }
        Ok(req)
    }
}

/// `path_open`. Rights decide the access mode (`FD_READ`, `FD_WRITE`); a
/// directory needs neither. Inheriting rights are not tracked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn path_open(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    dirflags: u32,
    path: u32,
    path_len: u32,
    oflags: u32,
    rights_base: u64,
    _rights_inheriting: u64,
    fdflags: u32,
    fd_out: u32,
) -> Result<(), Fail> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(fd_out, 4)?;
    let req = OpenRequest::decode(oflags, rights_base, fdflags)?;
    let at = beneath(ctx, fd, path)?;
    let follow = Follow::from_lookupflags(dirflags);
    let entry = ctx.file(FileOp::Open { at, follow, req })?.opened()?;
    let new = ctx.files.adopt(ctx.uarea.fds.insert(entry))?;
    Ok(mem.write_u32(fd_out, new)?)
}

/// `path_filestat_get`.
pub(crate) fn path_filestat_get(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    flags: u32,
    path: u32,
    path_len: u32,
    buf: u32,
) -> Result<(), Fail> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(buf, stat::FILESTAT_LEN)?;
    let at = beneath(ctx, fd, path)?;
    let follow = Follow::from_lookupflags(flags);
    let record = ctx.file(FileOp::PathStat { at, follow })?.stat()?;
    Ok(mem.write(buf, &record)?)
}

/// `path_filestat_set_times`: of a symbolic link itself unless the
/// lookup follows it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn path_filestat_set_times(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    flags: u32,
    path: u32,
    path_len: u32,
    atim: u64,
    mtim: u64,
    fst_flags: u32,
) -> Result<(), Fail> {
    let path = guest_path(mem, path, path_len)?;
    let times = Times::decode(atim, mtim, fst_flags)?;
    let at = beneath(ctx, fd, path)?;
    let follow = Follow::from_lookupflags(flags);
    Ok(ctx
        .file(FileOp::PathSetTimes { at, follow, times })?
        .done()?)
}

/// A `path_*` call that changes the entry `path` names beneath `fd`.
fn change(
    mem: &GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
    op: fn(Beneath) -> FileOp,
) -> Result<(), Fail> {
    let path = guest_path(mem, path, path_len)?;
    let at = beneath(ctx, fd, path)?;
    Ok(ctx.file(op(at))?.done()?)
}

/// `path_create_directory`.
pub(crate) fn path_create_directory(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Fail> {
    change(mem, ctx, fd, path, path_len, |at| FileOp::CreateDir { at })
}

/// `path_remove_directory`.
pub(crate) fn path_remove_directory(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Fail> {
    change(mem, ctx, fd, path, path_len, |at| FileOp::RemoveDir { at })
}

/// `path_unlink_file`.
pub(crate) fn path_unlink_file(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Fail> {
    change(mem, ctx, fd, path, path_len, |at| FileOp::Unlink { at })
}

/// `path_rename`: both ends resolved beneath their own descriptors' roots
/// (`EXDEV` between directories of two nodes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn path_rename(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    old_path: u32,
    old_len: u32,
    new_fd: u32,
    new_path: u32,
    new_len: u32,
) -> Result<(), Fail> {
    let old_path = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    let from = beneath(ctx, fd, old_path)?;
    let to = beneath(ctx, new_fd, new_path)?;
    Ok(ctx.file(FileOp::Rename { from, to })?.done()?)
}

/// `path_readlink`: the link's text, cut to the buffer.
#[allow(clippy::too_many_arguments)]
pub(crate) fn path_readlink(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
    buf: u32,
    buf_len: u32,
    bufused: u32,
) -> Result<(), Fail> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(buf, buf_len)?;
    mem.slice(bufused, 4)?;
    let at = beneath(ctx, fd, path)?;
    let text = ctx.file(FileOp::ReadLink { at })?.bytes()?;
    let n = text.len().min(buf_len as usize);
    mem.write(buf, &text[..n])?;
    Ok(mem.write_u32(bufused, n as u32)?)
}

/// `path_symlink`: the link's text must be relative (an absolute one would
/// name a host path, meaningless to the guest: `ENOTCAPABLE`). A link that
/// leads outside the root can be made, but never followed.
pub(crate) fn path_symlink(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    old_path: u32,
    old_len: u32,
    fd: u32,
    new_path: u32,
    new_len: u32,
) -> Result<(), Fail> {
    let text = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    if text.is_empty() {
        return Err(Errno::NoEnt.into());
    }
    if text.starts_with('/') {
        return Err(Errno::NotCapable.into());
    }
    let at = beneath(ctx, fd, new_path)?;
    Ok(ctx.file(FileOp::Symlink { text, at })?.done()?)
}

/// `path_link`: a hard link; both ends beneath their roots.
#[allow(clippy::too_many_arguments)]
pub(crate) fn path_link(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    old_fd: u32,
    old_flags: u32,
    old_path: u32,
    old_len: u32,
    new_fd: u32,
    new_path: u32,
    new_len: u32,
) -> Result<(), Fail> {
    let old_path = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    let from = beneath(ctx, old_fd, old_path)?;
    let to = beneath(ctx, new_fd, new_path)?;
    let follow = Follow::from_lookupflags(old_flags);
    Ok(ctx.file(FileOp::Link { from, follow, to })?.done()?)
}
