//! WASI rights: what `fd_fdstat_get` reports a descriptor may do.
//!
//! Preview1's rights are a capability mask per descriptor. The ecosystem
//! has retired them (preview2 has none, and wasmtime's preview1 ignores them
//! beyond the access mode), but programs still read them, and some compare
//! them. atoll reports what wasmtime reports: for a preopened directory the
//! fixed set that userlands expect, for anything else every right that its
//! kind and access mode allow. `fd_fdstat_set_rights` narrows that report
//! (the mask is kept in the UArea with the descriptor), and the access mode
//! narrowed with it: dropping `FD_READ` or `FD_WRITE` takes that access away
//! for good. The other rights are reported, not enforced.

use crate::fd::{Fd, FileFd};

pub const FD_DATASYNC: u64 = 1 << 0;
pub const FD_READ: u64 = 1 << 1;
pub const FD_SEEK: u64 = 1 << 2;
pub const FD_FDSTAT_SET_FLAGS: u64 = 1 << 3;
pub const FD_SYNC: u64 = 1 << 4;
pub const FD_TELL: u64 = 1 << 5;
pub const FD_WRITE: u64 = 1 << 6;
pub const FD_ADVISE: u64 = 1 << 7;
pub const FD_ALLOCATE: u64 = 1 << 8;
pub const PATH_CREATE_DIRECTORY: u64 = 1 << 9;
pub const PATH_CREATE_FILE: u64 = 1 << 10;
pub const PATH_LINK_SOURCE: u64 = 1 << 11;
pub const PATH_LINK_TARGET: u64 = 1 << 12;
pub const PATH_OPEN: u64 = 1 << 13;
pub const FD_READDIR: u64 = 1 << 14;
pub const PATH_READLINK: u64 = 1 << 15;
pub const PATH_RENAME_SOURCE: u64 = 1 << 16;
pub const PATH_RENAME_TARGET: u64 = 1 << 17;
pub const PATH_FILESTAT_GET: u64 = 1 << 18;
pub const PATH_FILESTAT_SET_SIZE: u64 = 1 << 19;
pub const PATH_FILESTAT_SET_TIMES: u64 = 1 << 20;
pub const FD_FILESTAT_GET: u64 = 1 << 21;
pub const FD_FILESTAT_SET_SIZE: u64 = 1 << 22;
pub const FD_FILESTAT_SET_TIMES: u64 = 1 << 23;
pub const PATH_SYMLINK: u64 = 1 << 24;
pub const PATH_REMOVE_DIRECTORY: u64 = 1 << 25;
pub const PATH_UNLINK_FILE: u64 = 1 << 26;
pub const POLL_FD_READWRITE: u64 = 1 << 27;
/// Every right preview1 defines (bits 0 to 29, the last two for sockets).
pub const ALL: u64 = (1 << 30) - 1;

/// A preopened directory's base rights: the set wasmtime hard-codes because
/// userlands (Rust's std, wasi-libc's tests) expect at least these.
const PREOPEN_BASE: u64 = PATH_CREATE_DIRECTORY
    | PATH_CREATE_FILE
    | PATH_LINK_SOURCE
    | PATH_LINK_TARGET
    | PATH_OPEN
    | FD_READDIR
    | PATH_READLINK
    | PATH_RENAME_SOURCE
    | PATH_RENAME_TARGET
    | PATH_SYMLINK
    | PATH_REMOVE_DIRECTORY
    | PATH_UNLINK_FILE
    | PATH_FILESTAT_GET
    | PATH_FILESTAT_SET_TIMES
    | FD_FILESTAT_GET
    | FD_FILESTAT_SET_TIMES;

/// What files opened beneath a preopen may do, on top of its base rights.
const PREOPEN_INHERITING: u64 = PREOPEN_BASE
    | FD_DATASYNC
    | FD_READ
    | FD_SEEK
    | FD_FDSTAT_SET_FLAGS
    | FD_SYNC
    | FD_TELL
    | FD_WRITE
    | FD_ADVISE
    | FD_ALLOCATE
    | FD_FILESTAT_GET
    | FD_FILESTAT_SET_SIZE
    | FD_FILESTAT_SET_TIMES
    | POLL_FD_READWRITE;

/// A directory cannot be sought in or resized, nor written as a file.
const NOT_FOR_DIRECTORIES: u64 = FD_SEEK | FD_FILESTAT_SET_SIZE | PATH_FILESTAT_SET_SIZE | FD_WRITE;

/// The (base, inheriting) rights of `entry` before any narrowing.
pub(crate) fn natural(entry: &Fd) -> (u64, u64) {
    match entry {
        // No seek or tell: that is how wasi-libc's `isatty` recognizes a
        // terminal, so stdout stays line-buffered.
        Fd::Stdin => (FD_READ | POLL_FD_READWRITE, FD_READ | POLL_FD_READWRITE),
        Fd::Stdout | Fd::Stderr => (FD_WRITE | POLL_FD_READWRITE, FD_WRITE | POLL_FD_READWRITE),
        Fd::Dir(d) if d.preopen.is_some() => (PREOPEN_BASE, PREOPEN_INHERITING),
        Fd::Dir(_) => (ALL & !NOT_FOR_DIRECTORIES, ALL & !NOT_FOR_DIRECTORIES),
        Fd::File(f) => (file(f), file(f)),
    }
}

/// A regular file's rights: all of them but reading or writing when its
/// access mode forbids it.
fn file(f: &FileFd) -> u64 {
    let mut r = ALL;
    if !f.read {
        r &= !(FD_READ | FD_READDIR);
    }
    if !f.write {
        r &= !FD_WRITE;
    }
    r
}
