//! Directories as descriptors: the preopens a guest discovers at start
//! (`fd_prestat_*`) and directory listings (`fd_readdir`).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;

use atoll_abi::Errno;

use super::descriptor::out;
use super::op::FileOp;
use super::stat::{self, filetype, DirEntry};
use super::{host_errno, Fail};
use crate::ctx::ProcCtx;
use crate::fd::Fd;
use crate::memory::GuestMemory;

/// The guest name of preopened directory `fd`.
fn preopen_name(ctx: &ProcCtx, fd: u32) -> Result<&str, Errno> {
    match ctx.uarea.fds.get(fd)? {
        Fd::Dir(d) => d.preopen.as_deref().ok_or(Errno::Badf),
        _ => Err(Errno::Badf),
    }
}

/// `fd_prestat_get`: tag 0 (a directory) and the name's length at 4.
pub(crate) fn fd_prestat_get(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    buf: u32,
) -> Result<(), Errno> {
    out(mem, buf, 8)?;
    let len = preopen_name(ctx, fd)?.len() as u32;
    let mut record = [0u8; 8];
    record[4..].copy_from_slice(&len.to_le_bytes());
    mem.write(buf, &record)
}

/// `fd_prestat_dir_name`: the name, without a NUL.
pub(crate) fn fd_prestat_dir_name(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    path: u32,
    path_len: u32,
) -> Result<(), Errno> {
    out(mem, path, path_len)?;
    let name = preopen_name(ctx, fd)?;
    if (path_len as usize) < name.len() {
        return Err(Errno::NameTooLong);
    }
    mem.write(path, name.as_bytes())
}

/// The entries of a directory as `fd_readdir` lists them: `.` and `..`
/// first, then the others sorted by name, so a cookie (an index) means the
/// same thing from one call to the next and on any kernel.
pub(super) fn list_dir(host: &Path) -> Result<Vec<DirEntry>, Errno> {
    let ino = |p: &Path| std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0);
    let dot = |name: &[u8], ino| DirEntry {
        name: name.to_vec(),
        ino,
        filetype: filetype::DIRECTORY,
    };
    let mut rest = Vec::new();
    for entry in std::fs::read_dir(host).map_err(|e| host_errno(&e))? {
        let entry = entry.map_err(|e| host_errno(&e))?;
        rest.push(DirEntry {
            name: entry.file_name().as_bytes().to_vec(),
            ino: entry.ino(),
            filetype: entry
                .file_type()
                .map(stat::filetype_of)
                .unwrap_or(filetype::UNKNOWN),
        });
    }
    rest.sort_by(|a, b| a.name.cmp(&b.name));
    let mut all = vec![dot(b".", ino(host)), dot(b"..", ino(&host.join("..")))];
    all.extend(rest);
    Ok(all)
}

/// `fd_readdir`: entries from `cookie` on; a full buffer means there may be
/// more.
pub(crate) fn fd_readdir(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    buf: u32,
    buf_len: u32,
    cookie: u64,
    bufused: u32,
) -> Result<(), Fail> {
    out(mem, buf, buf_len)?;
    out(mem, bufused, 4)?;
    let Fd::Dir(d) = ctx.uarea.fds.get(fd)? else {
        return Err(Errno::NotDir.into());
    };
    let dir = d.clone();
    let entries = ctx.file(FileOp::List { dir })?.entries()?;
    let used = stat::fill_dirents(&entries, cookie, mem.slice_mut(buf, buf_len)?);
    Ok(mem.write_u32(bufused, used as u32)?)
}
