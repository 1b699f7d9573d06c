//! The `fd_*` calls on open descriptors: I/O, positioning, descriptor and
//! file status (preopens and listings are in `dir.rs`).
//!
//! Each function decodes first — every pointer through [`GuestMemory`]
//! (`EFAULT`), the descriptor through the table (`EBADF`) — and only then
//! touches a file or the UArea.

use std::fs::File;
use std::os::unix::fs::FileExt;

use atoll_abi::Errno;

use super::stat::{self, filetype};
use super::times::Times;
use super::{fdflags, host_errno, host_file, rights, MAX_IO, MAX_IOVS};
use crate::ctx::{ProcCtx, Stream};
use crate::fd::{Fd, FdTable, FileFd, Rights};
use crate::memory::GuestMemory;

/// Decodes an iovec array, checking every buffer, and trims it to
/// [`MAX_IO`] bytes in all: the rest is left for the guest's next call.
fn iovecs(mem: &GuestMemory<'_>, iovs: u32, len: u32) -> Result<Vec<(u32, u32)>, Errno> {
    if len > MAX_IOVS {
        return Err(Errno::Inval);
    }
    let mut iovs = mem.iovecs(iovs, len)?;
    let mut left = MAX_IO as u32;
    for iov in &mut iovs {
        iov.1 = iov.1.min(left);
        left -= iov.1;
    }
    Ok(iovs)
}

/// Checks that `len` bytes at `ptr` can receive a result.
pub(super) fn out(mem: &GuestMemory<'_>, ptr: u32, len: u32) -> Result<(), Errno> {
    mem.slice(ptr, len).map(drop)
}

/// Reads into `iovs` from `offset`; short at end of file.
fn read_at(
    mem: &mut GuestMemory<'_>,
    iovs: &[(u32, u32)],
    file: &File,
    offset: u64,
) -> Result<usize, Errno> {
    let mut total = 0;
    for &(buf, len) in iovs {
        let dst = mem.slice_mut(buf, len)?;
        let n = match retry(|| file.read_at(dst, offset.saturating_add(total as u64))) {
            Ok(n) => n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(host_errno(&e)),
        };
        total += n;
        if n < len as usize {
            break;
        }
    }
    Ok(total)
}

/// Writes `iovs` at `offset`; short on an error after some bytes were
/// written (the guest sees the error on its next call).
fn write_at(
    mem: &GuestMemory<'_>,
    iovs: &[(u32, u32)],
    file: &File,
    offset: u64,
) -> Result<usize, Errno> {
    let mut total = 0;
    for &(buf, len) in iovs {
        let mut src = mem.slice(buf, len)?;
        while !src.is_empty() {
            match retry(|| file.write_at(src, offset.saturating_add(total as u64))) {
                Ok(n) if n > 0 => {
                    total += n;
                    src = &src[n..];
                }
                Ok(_) | Err(_) if total > 0 => return Ok(total),
                Ok(_) => return Err(Errno::Io),
                Err(e) => return Err(host_errno(&e)),
            }
        }
    }
    Ok(total)
}

fn retry<T>(mut f: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

fn file_size(file: &File) -> Result<u64, Errno> {
    Ok(file.metadata().map_err(|e| host_errno(&e))?.len())
}

/// `fd_read`: stdin is at end of file (atoll forwards no input yet).
pub(crate) fn fd_read(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    nread: u32,
) -> Result<(), Errno> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nread, 4)?;
    let ProcCtx { uarea, files, .. } = ctx;
    let n = match uarea.fds.get_mut(fd)? {
        Fd::Stdin => 0,
        Fd::File(f) if f.read => {
            let n = read_at(mem, &iovs, host_file(files, fd, f)?, f.offset)?;
            f.offset += n as u64;
            n
        }
        Fd::Dir(_) => return Err(Errno::IsDir),
        _ => return Err(Errno::Badf),
    };
    mem.write_u32(nread, n as u32)
}

/// `fd_write`: stdout and stderr go to the process's console.
pub(crate) fn fd_write(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    nwritten: u32,
) -> Result<(), Errno> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nwritten, 4)?;
    let ProcCtx {
        uarea, files, host, ..
    } = ctx;
    let n = match uarea.fds.get_mut(fd)? {
        entry @ (Fd::Stdout | Fd::Stderr) => {
            let stream = if matches!(entry, Fd::Stdout) {
                Stream::Stdout
            } else {
                Stream::Stderr
            };
            let bytes = mem.gather(&iovs)?;
            if !bytes.is_empty() {
                host.console.write(uarea.console, stream, &bytes);
            }
            bytes.len()
        }
        Fd::File(f) if f.write => {
            let file = host_file(files, fd, f)?;
            let at = if f.flags & fdflags::APPEND != 0 {
                file_size(file)?
            } else {
                f.offset
            };
            let n = write_at(mem, &iovs, file, at)?;
            f.offset = at + n as u64;
            n
        }
        _ => return Err(Errno::Badf),
    };
    mem.write_u32(nwritten, n as u32)
}

/// Why a descriptor that is not a file cannot do file I/O.
fn not_a_file(entry: &Fd) -> Errno {
    match entry {
        Fd::File(_) => Errno::Badf,
        Fd::Dir(_) => Errno::IsDir,
        Fd::Stdin | Fd::Stdout | Fd::Stderr => Errno::Spipe,
    }
}

/// The file behind a descriptor, for a call that has an offset.
fn positional(entry: &Fd) -> Result<&FileFd, Errno> {
    match entry {
        Fd::File(f) => Ok(f),
        other => Err(not_a_file(other)),
    }
}

/// `fd_pread`: reads at `offset`, leaving the descriptor's offset alone.
pub(crate) fn fd_pread(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    offset: u64,
    nread: u32,
) -> Result<(), Errno> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nread, 4)?;
    let f = positional(ctx.uarea.fds.get(fd)?)?;
    if !f.read {
        return Err(Errno::Badf);
    }
    let n = read_at(mem, &iovs, host_file(&mut ctx.files, fd, f)?, offset)?;
    mem.write_u32(nread, n as u32)
}

/// `fd_pwrite`: writes at `offset` (even in append mode), leaving the
/// descriptor's offset alone.
pub(crate) fn fd_pwrite(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    offset: u64,
    nwritten: u32,
) -> Result<(), Errno> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nwritten, 4)?;
    let f = positional(ctx.uarea.fds.get(fd)?)?;
    if !f.write {
        return Err(Errno::Badf);
    }
    let n = write_at(mem, &iovs, host_file(&mut ctx.files, fd, f)?, offset)?;
    mem.write_u32(nwritten, n as u32)
}

/// `fd_seek`: whence SET 0, CUR 1, END 2.
pub(crate) fn fd_seek(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: i64,
    whence: u32,
    newoffset: u32,
) -> Result<(), Errno> {
    out(mem, newoffset, 8)?;
    let ProcCtx { uarea, files, .. } = ctx;
    let f = match uarea.fds.get_mut(fd)? {
        Fd::File(f) => f,
        other => return Err(not_a_file(other)),
    };
    let base = match whence {
        0 => 0,
        1 => f.offset,
        2 => file_size(host_file(files, fd, f)?)?,
        _ => return Err(Errno::Inval),
    };
    let new = i128::from(base) + i128::from(offset);
    if !(0..=i128::from(i64::MAX)).contains(&new) {
        return Err(Errno::Inval);
    }
    f.offset = new as u64;
    mem.write_u64(newoffset, f.offset)
}

/// `fd_tell`.
pub(crate) fn fd_tell(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: u32,
) -> Result<(), Errno> {
    out(mem, offset, 8)?;
    let f = positional(ctx.uarea.fds.get(fd)?)?;
    mem.write_u64(offset, f.offset)
}

/// `fd_close`: drops the descriptor and this kernel's host handle.
pub(crate) fn fd_close(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
) -> Result<(), Errno> {
    ctx.uarea.fds.remove(fd)?;
    ctx.files.remove(&fd);
    Ok(())
}

/// `fd_renumber`: `from` moves onto `to`, closing what `to` held.
pub(crate) fn fd_renumber(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    from: u32,
    to: u32,
) -> Result<(), Errno> {
    ctx.uarea.fds.renumber(from, to)?;
    if from != to {
        ctx.files.remove(&to);
        if let Some(file) = ctx.files.remove(&from) {
            ctx.files.insert(to, file);
        }
    }
    Ok(())
}

fn sync(ctx: &mut ProcCtx, fd: u32, data_only: bool) -> Result<(), Errno> {
    let result = match ctx.uarea.fds.get(fd)? {
        Fd::File(f) => {
            let file = host_file(&mut ctx.files, fd, f)?;
            if data_only {
                file.sync_data()
            } else {
                file.sync_all()
            }
        }
        Fd::Dir(d) => File::open(&d.host).and_then(|dir| dir.sync_all()),
        Fd::Stdin | Fd::Stdout | Fd::Stderr => return Err(Errno::Inval),
    };
    result.map_err(|e| host_errno(&e))
}

/// `fd_sync`.
pub(crate) fn fd_sync(_mem: &mut GuestMemory<'_>, ctx: &mut ProcCtx, fd: u32) -> Result<(), Errno> {
    sync(ctx, fd, false)
}

/// `fd_datasync`.
pub(crate) fn fd_datasync(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
) -> Result<(), Errno> {
    sync(ctx, fd, true)
}

/// `fd_fdstat_get`.
pub(crate) fn fd_fdstat_get(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    buf: u32,
) -> Result<(), Errno> {
    out(mem, buf, stat::FDSTAT_LEN)?;
    let (base, inheriting) = rights_of(&ctx.uarea.fds, fd)?;
    let (filetype, flags) = match ctx.uarea.fds.get(fd)? {
        Fd::Stdin | Fd::Stdout | Fd::Stderr => (filetype::CHARACTER_DEVICE, 0),
        Fd::Dir(_) => (filetype::DIRECTORY, 0),
        Fd::File(f) => (filetype::REGULAR_FILE, f.flags),
    };
    mem.write(buf, &stat::fdstat(filetype, flags, base, inheriting))
}

/// The (base, inheriting) rights descriptor `fd` has now.
fn rights_of(fds: &FdTable, fd: u32) -> Result<(u64, u64), Errno> {
    let (base, inheriting) = rights::natural(fds.get(fd)?);
    let kept = fds.kept(fd)?;
    Ok((base & kept.base, inheriting & kept.inheriting))
}

/// `fd_fdstat_set_flags`: a file takes the new flags; when its sync flags
/// change, its host file is reopened with them at the next call. On stdio
/// and directories the flags have no effect (as `fcntl(F_SETFL)` there;
/// wasmtime answers `EBADF`).
pub(crate) fn fd_fdstat_set_flags(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    flags: u32,
) -> Result<(), Errno> {
    let flags = u16::try_from(flags)
        .ok()
        .filter(|f| f & !fdflags::ALL == 0)
        .ok_or(Errno::Inval)?;
    if let Fd::File(f) = ctx.uarea.fds.get_mut(fd)? {
        if fdflags::host_sync(flags) != fdflags::host_sync(f.flags) {
            ctx.files.remove(&fd);
        }
        f.flags = flags;
    }
    Ok(())
}

/// `fd_fdstat_set_rights`: only narrowing (`ENOTCAPABLE` for a right the
/// descriptor does not have); dropping `FD_READ`/`FD_WRITE` from a file
/// takes that access away for good.
pub(crate) fn fd_fdstat_set_rights(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    base: u64,
    inheriting: u64,
) -> Result<(), Errno> {
    let (has_base, has_inheriting) = rights_of(&ctx.uarea.fds, fd)?;
    if base & !has_base != 0 || inheriting & !has_inheriting != 0 {
        return Err(Errno::NotCapable);
    }
    ctx.uarea.fds.keep(fd, Rights { base, inheriting })?;
    if let Fd::File(f) = ctx.uarea.fds.get_mut(fd)? {
        f.read &= base & rights::FD_READ != 0;
        f.write &= base & rights::FD_WRITE != 0;
    }
    Ok(())
}

/// `fd_filestat_get`.
pub(crate) fn fd_filestat_get(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    buf: u32,
) -> Result<(), Errno> {
    out(mem, buf, stat::FILESTAT_LEN)?;
    let record = match ctx.uarea.fds.get(fd)? {
        Fd::Stdin | Fd::Stdout | Fd::Stderr => stat::stdio_filestat(),
        Fd::Dir(d) => stat::filestat(&std::fs::metadata(&d.host).map_err(|e| host_errno(&e))?),
        Fd::File(f) => {
            let file = host_file(&mut ctx.files, fd, f)?;
            stat::filestat(&file.metadata().map_err(|e| host_errno(&e))?)
        }
    };
    mem.write(buf, &record)
}

/// The writable file behind `fd`, for calls that change its size.
fn writable(ctx: &mut ProcCtx, fd: u32) -> Result<&File, Errno> {
    match ctx.uarea.fds.get(fd)? {
        Fd::File(f) if f.write => host_file(&mut ctx.files, fd, f),
        Fd::File(_) => Err(Errno::Badf),
        other => Err(not_a_file(other)),
    }
}

/// `fd_filestat_set_size`.
pub(crate) fn fd_filestat_set_size(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    size: u64,
) -> Result<(), Errno> {
    if size > i64::MAX as u64 {
        return Err(Errno::Fbig);
    }
    writable(ctx, fd)?.set_len(size).map_err(|e| host_errno(&e))
}

/// `fd_allocate`: grows the file to `offset + len` if it is shorter.
pub(crate) fn fd_allocate(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: u64,
    len: u64,
) -> Result<(), Errno> {
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= i64::MAX as u64)
        .ok_or(Errno::Fbig)?;
    let file = writable(ctx, fd)?;
    if file_size(file)? < end {
        file.set_len(end).map_err(|e| host_errno(&e))?;
    }
    Ok(())
}

/// `fd_advise`: advice is only a hint; a valid one is accepted.
pub(crate) fn fd_advise(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    _offset: u64,
    _len: u64,
    advice: u32,
) -> Result<(), Errno> {
    ctx.uarea.fds.get(fd)?;
    if advice > 5 {
        return Err(Errno::Inval);
    }
    Ok(())
}

/// `fd_filestat_set_times`.
pub(crate) fn fd_filestat_set_times(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    atim: u64,
    mtim: u64,
    flags: u32,
) -> Result<(), Errno> {
    let times = Times::decode(atim, mtim, flags)?;
    let result = match ctx.uarea.fds.get(fd)? {
        Fd::File(f) => times.set_fd(host_file(&mut ctx.files, fd, f)?),
        Fd::Dir(d) => File::open(&d.host).and_then(|dir| times.set_fd(&dir)),
        Fd::Stdin | Fd::Stdout | Fd::Stderr => return Err(Errno::Badf),
    };
    result.map_err(|e| host_errno(&e))
}
