//! The `fd_*` calls on open descriptors: I/O, positioning, descriptor and
//! file status (preopens and listings are in `dir.rs`).
//!
//! Each function decodes first — every pointer through [`GuestMemory`]
//! (`EFAULT`), the descriptor through the table (`EBADF`) — then has its
//! one file op executed ([`ProcCtx::file`]), and only then changes guest
//! memory or the UArea.

use atoll_abi::Errno;

use super::op::{FileOp, FileRef, Target};
use super::stat::{self, filetype};
use super::times::Times;
use super::{fdflags, rights, Fail, MAX_IO, MAX_IOVS};
use crate::call::{KernelCall, Reply};
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

/// Copies `data` into the buffers of `iovs`, in order.
fn scatter(mem: &mut GuestMemory<'_>, iovs: &[(u32, u32)], mut data: &[u8]) -> Result<(), Errno> {
    for &(buf, len) in iovs {
        let n = data.len().min(len as usize);
        mem.write(buf, &data[..n])?;
        data = &data[n..];
    }
    Ok(())
}

/// Reads into `iovs` from `at`; short at end of file.
fn read(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    iovs: &[(u32, u32)],
    file: FileRef,
    at: u64,
) -> Result<usize, Fail> {
    let len = iovs.iter().map(|i| i.1).sum();
    let data = ctx.file(FileOp::Read { file, at, len })?.bytes()?;
    scatter(mem, iovs, &data)?;
    Ok(data.len())
}

/// Bytes one read of stdin asks for at most: they travel inside a NoC
/// message (and a daemon frame), not through a portal.
pub(crate) const MAX_INPUT: u32 = 64 << 10;

/// Reads the job's standard input into `iovs`: what a poll read ahead, or
/// the answer of the console service when the call runs again with it,
/// else the call waits for one.
fn read_stdin(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    iovs: &[(u32, u32)],
) -> Result<usize, Fail> {
    let max = iovs.iter().map(|i| i.1).sum::<u32>().min(MAX_INPUT);
    if max == 0 {
        return Ok(0);
    }
    let answer = match ctx.answer.take() {
        Some(Reply::Input(bytes)) => Some(bytes),
        _ => None,
    };
    match answer.or_else(|| ctx.uarea.stdin.take(max as usize)) {
        Some(mut bytes) => {
            // The service sends at most `max`, which the call asked for
            // from the same memory; more would be a bug there, not data.
            bytes.truncate(max as usize);
            scatter(mem, iovs, &bytes)?;
            Ok(bytes.len())
        }
        None => Err(Fail::Wait(KernelCall::Input { max })),
    }
}

/// Writes `iovs` to the console: as much as the process's window takes
/// (a short write, which wasi-libc completes), or, with the window full,
/// nothing until the console service has passed enough on. Past each half
/// window it asks the service to say how far it got, without waiting.
/// Output it wrote on another node goes first ([`crate::ConsoleFlow`]).
fn write_console(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    iovs: &[(u32, u32)],
    stream: Stream,
) -> Result<usize, Fail> {
    let mut data = mem.gather(iovs)?;
    if data.is_empty() {
        return Ok(0);
    }
    let (console, pid) = (ctx.uarea.console, ctx.uarea.pid);
    if !ctx.can_wait() {
        ctx.host.console.write(console, stream, &data);
        return Ok(data.len());
    }
    let here = ctx.host.kernel.node;
    let flow = &mut ctx.uarea.console_flow;
    if let Some(upto) = flow.before_write(here, console.node()) {
        return Err(Fail::Wait(KernelCall::Drain { upto }));
    }
    data.truncate(flow.room().min(data.len() as u64) as usize);
    let ask = flow.wrote(data.len() as u64, here);
    ctx.host.console.write(console, stream, &data);
    if let Some(upto) = ask {
        ctx.host.console.drain(console, pid, upto);
    }
    Ok(data.len())
}

/// The file behind descriptor `fd`, if it is open for `access`.
fn open_for(fds: &FdTable, fd: u32, access: fn(&FileFd) -> bool) -> Result<FileRef, Errno> {
    match fds.get(fd)? {
        Fd::File(f) if access(f) => Ok(FileRef {
            fd,
            file: f.clone(),
        }),
        Fd::File(_) => Err(Errno::Badf),
        other => Err(not_a_file(other)),
    }
}

fn readable(f: &FileFd) -> bool {
    f.read
}

fn writable(f: &FileFd) -> bool {
    f.write
}

fn any(_: &FileFd) -> bool {
    true
}

/// Moves descriptor `fd`'s offset to `to`.
fn set_offset(ctx: &mut ProcCtx, fd: u32, to: u64) -> Result<(), Errno> {
    match ctx.uarea.fds.get_mut(fd)? {
        Fd::File(f) => {
            f.offset = to;
            Ok(())
        }
        _ => Err(Errno::Badf),
    }
}

/// `fd_read`: stdin waits for the job's input (`crate::fs`, "Standard
/// streams").
pub(crate) fn fd_read(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    nread: u32,
) -> Result<(), Fail> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nread, 4)?;
    let n = match ctx.uarea.fds.get(fd)? {
        Fd::Stdin => read_stdin(mem, ctx, &iovs)?,
        Fd::Dir(_) => return Err(Errno::IsDir.into()),
        _ => {
            let file = open_for(&ctx.uarea.fds, fd, readable).map_err(|e| match e {
                Errno::Spipe => Errno::Badf,
                e => e,
            })?;
            let at = file.file.offset;
            let n = read(mem, ctx, &iovs, file, at)?;
            set_offset(ctx, fd, at + n as u64)?;
            n
        }
    };
    Ok(mem.write_u32(nread, n as u32)?)
}

/// `fd_write`: stdout and stderr go to the process's console.
pub(crate) fn fd_write(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    iovs: u32,
    iovs_len: u32,
    nwritten: u32,
) -> Result<(), Fail> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nwritten, 4)?;
    let stream = match ctx.uarea.fds.get(fd)? {
        Fd::Stdout => Some(Stream::Stdout),
        Fd::Stderr => Some(Stream::Stderr),
        _ => None,
    };
    let n = match stream {
        Some(stream) => write_console(mem, ctx, &iovs, stream)?,
        None => {
            let file = open_for(&ctx.uarea.fds, fd, writable).map_err(|e| match e {
                Errno::Spipe | Errno::IsDir => Errno::Badf,
                e => e,
            })?;
            let data = mem.gather(&iovs)?;
            let append = file.file.flags & fdflags::APPEND != 0;
            let at = (!append).then_some(file.file.offset);
            let (at, n) = ctx.file(FileOp::Write { file, at, data })?.written()?;
            set_offset(ctx, fd, at + n)?;
            n as usize
        }
    };
    Ok(mem.write_u32(nwritten, n as u32)?)
}

/// Why a descriptor that is not a file cannot do file I/O.
fn not_a_file(entry: &Fd) -> Errno {
    match entry {
        Fd::File(_) => Errno::Badf,
        Fd::Dir(_) => Errno::IsDir,
        Fd::Stdin | Fd::Stdout | Fd::Stderr => Errno::Spipe,
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
) -> Result<(), Fail> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nread, 4)?;
    let file = open_for(&ctx.uarea.fds, fd, readable)?;
    let n = read(mem, ctx, &iovs, file, offset)?;
    Ok(mem.write_u32(nread, n as u32)?)
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
) -> Result<(), Fail> {
    let iovs = iovecs(mem, iovs, iovs_len)?;
    out(mem, nwritten, 4)?;
    let file = open_for(&ctx.uarea.fds, fd, writable)?;
    let data = mem.gather(&iovs)?;
    let at = Some(offset);
    let (_, n) = ctx.file(FileOp::Write { file, at, data })?.written()?;
    Ok(mem.write_u32(nwritten, n as u32)?)
}

/// `fd_seek`: whence SET 0, CUR 1, END 2.
pub(crate) fn fd_seek(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: i64,
    whence: u32,
    newoffset: u32,
) -> Result<(), Fail> {
    out(mem, newoffset, 8)?;
    let file = open_for(&ctx.uarea.fds, fd, any)?;
    let base = match whence {
        0 => 0,
        1 => file.file.offset,
        2 => ctx.file(FileOp::Size { file })?.size()?,
        _ => return Err(Errno::Inval.into()),
    };
    let new = i128::from(base) + i128::from(offset);
    if !(0..=i128::from(i64::MAX)).contains(&new) {
        return Err(Errno::Inval.into());
    }
    set_offset(ctx, fd, new as u64)?;
    Ok(mem.write_u64(newoffset, new as u64)?)
}

/// `fd_tell`.
pub(crate) fn fd_tell(
    mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: u32,
) -> Result<(), Errno> {
    out(mem, offset, 8)?;
    let file = open_for(&ctx.uarea.fds, fd, any)?;
    mem.write_u64(offset, file.file.offset)
}

/// `fd_close`: drops the descriptor and this kernel's host handle (the
/// owner of a file keeps none for another node's process).
pub(crate) fn fd_close(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
) -> Result<(), Errno> {
    let closed = ctx.uarea.fds.remove(fd)?;
    ctx.files.close(fd);
    ctx.files.closed(&closed, ctx.host.kernel.node);
    Ok(())
}

/// `fd_renumber`: `from` moves onto `to`, closing what `to` held.
pub(crate) fn fd_renumber(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    from: u32,
    to: u32,
) -> Result<(), Errno> {
    if let Some(closed) = ctx.uarea.fds.renumber(from, to)? {
        ctx.files.closed(&closed, ctx.host.kernel.node);
    }
    ctx.files.renumber(from, to);
    Ok(())
}

/// What descriptor `fd` names for calls that take a file or a directory;
/// stdio gets `stdio`.
fn target(fds: &FdTable, fd: u32, stdio: Errno) -> Result<Target, Errno> {
    match fds.get(fd)? {
        Fd::File(f) => Ok(Target::File(FileRef {
            fd,
            file: f.clone(),
        })),
        Fd::Dir(d) => Ok(Target::Dir(d.clone())),
        Fd::Stdin | Fd::Stdout | Fd::Stderr => Err(stdio),
    }
}

fn sync(ctx: &mut ProcCtx, fd: u32, data_only: bool) -> Result<(), Fail> {
    let target = target(&ctx.uarea.fds, fd, Errno::Inval)?;
    Ok(ctx.file(FileOp::Sync { target, data_only })?.done()?)
}

/// `fd_sync`.
pub(crate) fn fd_sync(_mem: &mut GuestMemory<'_>, ctx: &mut ProcCtx, fd: u32) -> Result<(), Fail> {
    sync(ctx, fd, false)
}

/// `fd_datasync`.
pub(crate) fn fd_datasync(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
) -> Result<(), Fail> {
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
/// change, its host file is opened again with them (here, or by the
/// kernel that holds it, at the next call). On stdio
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
        let resync = fdflags::host_sync(flags) != fdflags::host_sync(f.flags);
        f.flags = flags;
        if resync {
            ctx.files.resync(fd, f);
        }
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
) -> Result<(), Fail> {
    out(mem, buf, stat::FILESTAT_LEN)?;
    let record = match target(&ctx.uarea.fds, fd, Errno::Spipe) {
        Err(Errno::Spipe) => stat::stdio_filestat(),
        target => ctx.file(FileOp::Stat { target: target? })?.stat()?,
    };
    Ok(mem.write(buf, &record)?)
}

/// `fd_filestat_set_size`.
pub(crate) fn fd_filestat_set_size(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    size: u64,
) -> Result<(), Fail> {
    if size > i64::MAX as u64 {
        return Err(Errno::Fbig.into());
    }
    let file = open_for(&ctx.uarea.fds, fd, writable)?;
    Ok(ctx.file(FileOp::SetSize { file, size })?.done()?)
}

/// `fd_allocate`: grows the file to `offset + len` if it is shorter.
pub(crate) fn fd_allocate(
    _mem: &mut GuestMemory<'_>,
    ctx: &mut ProcCtx,
    fd: u32,
    offset: u64,
    len: u64,
) -> Result<(), Fail> {
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= i64::MAX as u64)
        .ok_or(Errno::Fbig)?;
    let file = open_for(&ctx.uarea.fds, fd, writable)?;
    Ok(ctx.file(FileOp::Allocate { file, end })?.done()?)
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
) -> Result<(), Fail> {
    let times = Times::decode(atim, mtim, flags)?;
    let target = target(&ctx.uarea.fds, fd, Errno::Badf)?;
    Ok(ctx.file(FileOp::SetTimes { target, times })?.done()?)
}
