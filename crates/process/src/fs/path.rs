//! The `path_*` calls: opening, status, and changes to directory entries,
//! every path resolved beneath its directory descriptor's root.

use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use atoll_abi::Errno;

use super::stat;
use super::times::Times;
use super::{fdflags, host_errno, open_host, resolve, resolve_entry, rights, Follow};
use crate::ctx::ProcCtx;
use crate::fd::{DirFd, Fd, FdTable, FileFd};
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

/// Resolves guest path `path` beneath directory descriptor `fd`.
fn lookup(ctx: &ProcCtx, fd: u32, path: &str, follow: Follow) -> Result<PathBuf, Errno> {
    resolve(&dir_of(&ctx.uarea.fds, fd)?.host, path, follow)
}

/// Resolves a directory entry to create, remove or rename.
fn lookup_entry(ctx: &ProcCtx, fd: u32, path: &str) -> Result<PathBuf, Errno> {
    resolve_entry(&dir_of(&ctx.uarea.fds, fd)?.host, path)
}

/// What `path_open` was asked for, decoded.
struct OpenRequest {
    create: bool,
    directory: bool,
    exclusive: bool,
    truncate: bool,
    read: bool,
    write: bool,
    /// WASI `fdflags`, kept by the new descriptor.
    flags: u16,
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

/// Opens what `host` names as `req` asks, returning the new descriptor and,
/// for a file, its host handle.
fn open(host: PathBuf, req: &OpenRequest) -> Result<(Fd, Option<File>), Errno> {
    let existing = std::fs::symlink_metadata(&host);
    match &existing {
        Ok(m) if m.is_dir() => {
            if req.create && req.exclusive {
                return Err(Errno::Exist);
            }
            if req.create || req.write || req.truncate {
                return Err(Errno::IsDir);
            }
            let dir = DirFd {
                host,
                preopen: None,
            };
            return Ok((Fd::Dir(dir), None));
        }
        // Only a final link that was not to be followed is still here.
        Ok(m) if m.file_type().is_symlink() => return Err(Errno::Loop),
        Ok(_) if req.directory => return Err(Errno::NotDir),
        Err(e) if req.directory || !req.create => return Err(host_errno(e)),
        _ => {}
    }
    // O_CREAT on an existing file creates nothing, and needs no write access.
    let create = req.create && (req.exclusive || existing.is_err());
    let mut options = OpenOptions::new();
    options
        .read(req.read || !req.write)
        .write(req.write || req.truncate || create)
        .truncate(req.truncate)
        .create(create)
        .create_new(create && req.exclusive);
    let file = open_host(&mut options, &host, req.flags)?;
    let entry = FileFd {
        host,
        offset: 0,
        read: req.read,
        write: req.write,
        flags: req.flags,
    };
    Ok((Fd::File(entry), Some(file)))
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
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(fd_out, 4)?;
    let req = OpenRequest::decode(oflags, rights_base, fdflags)?;
    let host = lookup(ctx, fd, &path, Follow::from_lookupflags(dirflags))?;
    let (entry, file) = open(host, &req)?;
    let new = ctx.uarea.fds.insert(entry)?;
    match file {
        Some(file) => ctx.files.insert(new, file),
        None => ctx.files.remove(&new),
    };
    mem.write_u32(fd_out, new)
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
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(buf, stat::FILESTAT_LEN)?;
    let host = lookup(ctx, fd, &path, Follow::from_lookupflags(flags))?;
    // A followed link is already replaced by its target.
    let meta = std::fs::symlink_metadata(host).map_err(|e| host_errno(&e))?;
    mem.write(buf, &stat::filestat(&meta))
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
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    let times = Times::decode(atim, mtim, fst_flags)?;
    // A followed link is already replaced by its target.
    let host = lookup(ctx, fd, &path, Follow::from_lookupflags(flags))?;
    times.set_path(&host, false).map_err(|e| host_errno(&e))
}

/// `path_create_directory`.
pub(crate) fn path_create_directory(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    // `.` and `..` name directories that exist.
    let host =
        lookup_entry(ctx, fd, &path)
            .map_err(|e| if e == Errno::Inval { Errno::Exist } else { e })?;
    std::fs::create_dir(host).map_err(|e| host_errno(&e))
}

/// `path_remove_directory`.
pub(crate) fn path_remove_directory(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    let host = lookup_entry(ctx, fd, &path)?;
    std::fs::remove_dir(host).map_err(|e| host_errno(&e))
}

/// `path_unlink_file`.
pub(crate) fn path_unlink_file(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    let host = lookup_entry(ctx, fd, &path)?;
    std::fs::remove_file(host).map_err(|e| host_errno(&e))
}

/// `path_rename`: both ends resolved beneath their own descriptors' roots.
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
) -> Result<(), Errno> {
    let old_path = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    let old = lookup_entry(ctx, fd, &old_path)?;
    let new = lookup_entry(ctx, new_fd, &new_path)?;
    std::fs::rename(old, new).map_err(|e| host_errno(&e))
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
) -> Result<(), Errno> {
    let path = guest_path(mem, path, path_len)?;
    mem.slice(buf, buf_len)?;
    mem.slice(bufused, 4)?;
    let host = lookup_entry(ctx, fd, &path)?;
    let text = std::fs::read_link(host).map_err(|e| host_errno(&e))?;
    let bytes = text.as_os_str().as_bytes();
    let n = bytes.len().min(buf_len as usize);
    mem.write(buf, &bytes[..n])?;
    mem.write_u32(bufused, n as u32)
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
) -> Result<(), Errno> {
    let text = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    if text.is_empty() {
        return Err(Errno::NoEnt);
    }
    if text.starts_with('/') {
        return Err(Errno::NotCapable);
    }
    let host = lookup_entry(ctx, fd, &new_path)?;
    std::os::unix::fs::symlink(text, host).map_err(|e| host_errno(&e))
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
) -> Result<(), Errno> {
    let old_path = guest_path(mem, old_path, old_len)?;
    let new_path = guest_path(mem, new_path, new_len)?;
    let old = lookup(ctx, old_fd, &old_path, Follow::from_lookupflags(old_flags))?;
    let new = lookup_entry(ctx, new_fd, &new_path)?;
    std::fs::hard_link(old, new).map_err(|e| host_errno(&e))
}
