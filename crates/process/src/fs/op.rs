//! The remote part of a file: each change to or question about the host
//! filesystem that a file call makes, as a value ([`FileOp`]).
//!
//! A file call decodes its arguments (guest memory, the UArea's descriptor)
//! into one `FileOp`, has it executed, and applies the [`FileAnswer`] (to
//! guest memory, the descriptor's offset). Where the op executes depends on
//! who owns the file: the node whose kernel opened it, or whose job
//! preopened its directory. On that node every kernel sees the same host
//! files, so the op runs at once, with the host handle the process keeps. On
//! another node the process enters the kernel with the op, which travels to
//! the owner over the NoC (`KernelCall::File`) and is executed there with
//! [`FileOp::serve`]; its answer comes back to wherever the process runs, and
//! the call, rewound, applies it. A process that moved to a machine without
//! the file keeps using it (ALMOS-MK's split).
//!
//! One call makes at most one op, and makes it after it has decoded
//! everything and before it changes anything, so the call can be run again
//! with the answer when the process is rewound into it.

use std::collections::hash_map::Entry;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

use atoll_abi::{Errno, KernelId, Pid};
use serde::{Deserialize, Serialize};

use super::dir::list_dir;
use super::held::HeldFiles;
use super::stat::{self, DirEntry, FILESTAT_LEN};
use super::times::Times;
use super::{
    host_errno, module_file, open_host, reopen, resolve, resolve_entry, Follow, HostFiles,
    OpenRequest, MAX_MODULE,
};
use crate::fd::{DirFd, Fd, FileFd};

/// An open file as an op names it: the descriptor (a key into the calling
/// process's kept host handles) and its local part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileRef {
    pub fd: u32,
    pub file: FileFd,
}

/// What a directory-or-file op (sync, stat, times) applies to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Target {
    File(FileRef),
    Dir(DirFd),
}

/// A path beneath a directory descriptor, not yet resolved: it is resolved
/// by the owner, against the owner's filesystem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Beneath {
    pub dir: DirFd,
    pub path: String,
}

/// One operation on the host filesystem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FileOp {
    /// Up to `len` bytes from `at`.
    Read {
        file: FileRef,
        at: u64,
        len: u32,
    },
    /// `data` at `at`, or at the end of the file (`None`: append mode).
    Write {
        file: FileRef,
        at: Option<u64>,
        #[serde(with = "serde_bytes")]
        data: Vec<u8>,
    },
    /// The file's size.
    Size {
        file: FileRef,
    },
    Sync {
        target: Target,
        data_only: bool,
    },
    /// A `filestat` record.
    Stat {
        target: Target,
    },
    SetSize {
        file: FileRef,
        size: u64,
    },
    /// Grows the file to `end` if it is shorter.
    Allocate {
        file: FileRef,
        end: u64,
    },
    SetTimes {
        target: Target,
        times: Times,
    },
    /// The entries of a directory, in `fd_readdir`'s order.
    List {
        dir: DirFd,
    },
    /// Opens (perhaps creates) a file or directory: a new descriptor.
    Open {
        at: Beneath,
        follow: Follow,
        req: OpenRequest,
    },
    PathStat {
        at: Beneath,
        follow: Follow,
    },
    PathSetTimes {
        at: Beneath,
        follow: Follow,
        times: Times,
    },
    CreateDir {
        at: Beneath,
    },
    RemoveDir {
        at: Beneath,
    },
    Unlink {
        at: Beneath,
    },
    Rename {
        from: Beneath,
        to: Beneath,
    },
    /// A symbolic link's text.
    ReadLink {
        at: Beneath,
    },
    Symlink {
        text: String,
        at: Beneath,
    },
    Link {
        from: Beneath,
        follow: Follow,
        to: Beneath,
    },
    /// A whole module file, for a process of another node that spawns or
    /// execs it (`SpawnModule::OtherNode`).
    ReadModule {
        at: Beneath,
    },
}

/// The result of a [`FileOp`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FileAnswer {
    Done,
    /// What `Read` read, `ReadLink`'s text.
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    /// `Write`: where the bytes went, and how many.
    Written {
        at: u64,
        n: u64,
    },
    Size(u64),
    /// A `filestat` record.
    Stat(#[serde(with = "serde_bytes")] Vec<u8>),
    Entries(Vec<DirEntry>),
    Opened(Fd),
}

/// Where an op finds the host handles of open files.
pub(crate) enum Handles<'a> {
    /// The calling process's, on its files' node: an open keeps its handle.
    Kept(&'a mut HostFiles),
    /// Those its files' kernel holds for a process of another node, which
    /// asks from `node`.
    Held {
        files: &'a mut HeldFiles,
        pid: Pid,
        node: u16,
    },
}

impl Handles<'_> {
    /// The host handle for `r`.
    fn get(&mut self, r: &FileRef) -> Result<&File, Errno> {
        match self {
            Handles::Kept(files) => match files.by_fd.entry(r.fd) {
                Entry::Occupied(e) => Ok(e.into_mut()),
                Entry::Vacant(v) => Ok(v.insert(reopen(&r.file)?)),
            },
            Handles::Held { files, pid, node } => files.get(*pid, &r.file, *node),
        }
    }
}

/// What a [`FileOp`] works on.
enum Subject<'a> {
    File(&'a FileRef),
    Dir(&'a DirFd),
    Path(&'a Beneath),
    /// A rename's or a link's two paths.
    Paths(&'a Beneath, &'a Beneath),
}

impl FileOp {
    /// The kernel whose node holds the files this op touches.
    ///
    /// # Errors
    /// `EXDEV` for a rename or link between directories of two nodes.
    pub fn owner(&self) -> Result<KernelId, Errno> {
        match self.subject() {
            Subject::File(r) => Ok(r.file.owner),
            Subject::Dir(d) => Ok(d.owner),
            Subject::Path(at) => Ok(at.dir.owner),
            Subject::Paths(from, to) if from.dir.owner.node != to.dir.owner.node => {
                Err(Errno::Xdev)
            }
            Subject::Paths(from, _) => Ok(from.dir.owner),
        }
    }

    /// The open file the op works on, if it works on one.
    pub(crate) fn open_file(&self) -> Option<&FileRef> {
        match self.subject() {
            Subject::File(r) => Some(r),
            _ => None,
        }
    }

    fn subject(&self) -> Subject<'_> {
        match self {
            FileOp::Read { file, .. }
            | FileOp::Write { file, .. }
            | FileOp::Size { file }
            | FileOp::SetSize { file, .. }
            | FileOp::Allocate { file, .. } => Subject::File(file),
            FileOp::Sync { target, .. }
            | FileOp::Stat { target }
            | FileOp::SetTimes { target, .. } => match target {
                Target::File(r) => Subject::File(r),
                Target::Dir(d) => Subject::Dir(d),
            },
            FileOp::List { dir } => Subject::Dir(dir),
            FileOp::Open { at, .. }
            | FileOp::PathStat { at, .. }
            | FileOp::PathSetTimes { at, .. }
            | FileOp::CreateDir { at }
            | FileOp::RemoveDir { at }
            | FileOp::Unlink { at }
            | FileOp::ReadLink { at }
            | FileOp::Symlink { at, .. }
            | FileOp::ReadModule { at } => Subject::Path(at),
            FileOp::Rename { from, to } | FileOp::Link { from, to, .. } => Subject::Paths(from, to),
        }
    }

    /// Executes the op for `pid`, a process of another node which asks from
    /// `node`, on the node that owns its files, with the files `held` for
    /// such processes (an open adds to them).
    pub fn serve(&self, held: &mut HeldFiles, pid: Pid, node: u16) -> Result<FileAnswer, Errno> {
        self.execute(Handles::Held {
            files: held,
            pid,
            node,
        })
    }

    /// Executes the op on this node's filesystem.
    pub(crate) fn execute(&self, mut handles: Handles<'_>) -> Result<FileAnswer, Errno> {
        let io = |r: std::io::Result<()>| r.map(|()| FileAnswer::Done).map_err(|e| host_errno(&e));
        match self {
            FileOp::Read { file, at, len } => {
                let mut buf = vec![0u8; *len as usize];
                let n = read_at(handles.get(file)?, &mut buf, *at)?;
                buf.truncate(n);
                Ok(FileAnswer::Bytes(buf))
            }
            FileOp::Write { file, at, data } => {
                let f = handles.get(file)?;
                let at = match at {
                    Some(at) => *at,
                    None => size(f)?,
                };
                let n = write_at(f, data, at)?;
                Ok(FileAnswer::Written { at, n: n as u64 })
            }
            FileOp::Size { file } => Ok(FileAnswer::Size(size(handles.get(file)?)?)),
            FileOp::Sync { target, data_only } => io(match target {
                Target::File(r) => {
                    let f = handles.get(r)?;
                    if *data_only {
                        f.sync_data()
                    } else {
                        f.sync_all()
                    }
                }
                Target::Dir(d) => File::open(&d.host).and_then(|dir| dir.sync_all()),
            }),
            FileOp::Stat { target } => {
                let meta = match target {
                    Target::File(r) => handles.get(r)?.metadata(),
                    Target::Dir(d) => std::fs::metadata(&d.host),
                };
                let meta = meta.map_err(|e| host_errno(&e))?;
                Ok(FileAnswer::Stat(stat::filestat(&meta).to_vec()))
            }
            FileOp::SetSize { file, size } => io(handles.get(file)?.set_len(*size)),
            FileOp::Allocate { file, end } => {
                let f = handles.get(file)?;
                if size(f)? < *end {
                    f.set_len(*end).map_err(|e| host_errno(&e))?;
                }
                Ok(FileAnswer::Done)
            }
            FileOp::SetTimes { target, times } => io(match target {
                Target::File(r) => times.set_fd(handles.get(r)?),
                Target::Dir(d) => File::open(&d.host).and_then(|dir| times.set_fd(&dir)),
            }),
            FileOp::List { dir } => Ok(FileAnswer::Entries(list_dir(&dir.host)?)),
            FileOp::Open { at, follow, req } => {
                let host = resolve(&at.dir.host, &at.path, *follow)?;
                let (mut fd, handle) = open(host, req, at.dir.owner)?;
                match (&mut handles, &mut fd, handle) {
                    (Handles::Kept(files), _, handle) => files.opened = handle,
                    (Handles::Held { files, pid, node }, Fd::File(f), Some(handle)) => {
                        files.hold(*pid, f, handle, *node);
                        f.held = true;
                    }
                    _ => {}
                }
                Ok(FileAnswer::Opened(fd))
            }
            FileOp::PathStat { at, follow } => {
                let host = resolve(&at.dir.host, &at.path, *follow)?;
                // A followed link is already replaced by its target.
                let meta = std::fs::symlink_metadata(host).map_err(|e| host_errno(&e))?;
                Ok(FileAnswer::Stat(stat::filestat(&meta).to_vec()))
            }
            FileOp::PathSetTimes { at, follow, times } => {
                // A followed link is already replaced by its target.
                let host = resolve(&at.dir.host, &at.path, *follow)?;
                io(times.set_path(&host, false))
            }
            FileOp::CreateDir { at } => {
                // `.` and `..` name directories that exist.
                let host = resolve_entry(&at.dir.host, &at.path).map_err(|e| {
                    if e == Errno::Inval {
                        Errno::Exist
                    } else {
                        e
                    }
                })?;
                io(std::fs::create_dir(host))
            }
            FileOp::RemoveDir { at } => io(std::fs::remove_dir(entry(at)?)),
            FileOp::Unlink { at } => io(std::fs::remove_file(entry(at)?)),
            FileOp::Rename { from, to } => io(std::fs::rename(entry(from)?, entry(to)?)),
            FileOp::ReadLink { at } => {
                let text = std::fs::read_link(entry(at)?).map_err(|e| host_errno(&e))?;
                Ok(FileAnswer::Bytes(text.as_os_str().as_bytes().to_vec()))
            }
            FileOp::Symlink { text, at } => io(std::os::unix::fs::symlink(text, entry(at)?)),
            FileOp::ReadModule { at } => {
                let host = module_file(&at.dir.host, &at.path)?;
                let file = File::open(host).map_err(|e| host_errno(&e))?;
                let mut bytes = Vec::new();
                // One byte past the bound tells a file that is too large.
                file.take(MAX_MODULE + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| host_errno(&e))?;
                if bytes.len() as u64 > MAX_MODULE {
                    return Err(Errno::Fbig);
                }
                Ok(FileAnswer::Bytes(bytes))
            }
            FileOp::Link { from, follow, to } => {
                let old = resolve(&from.dir.host, &from.path, *follow)?;
                io(std::fs::hard_link(old, entry(to)?))
            }
        }
    }
}

/// Resolves a directory entry to create, remove or rename.
fn entry(at: &Beneath) -> Result<std::path::PathBuf, Errno> {
    resolve_entry(&at.dir.host, &at.path)
}

fn size(file: &File) -> Result<u64, Errno> {
    Ok(file.metadata().map_err(|e| host_errno(&e))?.len())
}

/// Fills `buf` from `offset`, short only at end of file (or after an error
/// that came after some bytes).
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> Result<usize, Errno> {
    let mut total = 0;
    while total < buf.len() {
        match retry(|| file.read_at(&mut buf[total..], offset.saturating_add(total as u64))) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(_) if total > 0 => break,
            Err(e) => return Err(host_errno(&e)),
        }
    }
    Ok(total)
}

/// Writes `data` at `offset`; short on an error after some bytes were
/// written (the guest sees the error on its next call).
fn write_at(file: &File, mut data: &[u8], offset: u64) -> Result<usize, Errno> {
    let mut total = 0;
    while !data.is_empty() {
        match retry(|| file.write_at(data, offset.saturating_add(total as u64))) {
            Ok(n) if n > 0 => {
                total += n;
                data = &data[n..];
            }
            Ok(_) | Err(_) if total > 0 => return Ok(total),
            Ok(_) => return Err(Errno::Io),
            Err(e) => return Err(host_errno(&e)),
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

/// Opens what `host` names as `req` asks: the new descriptor, owned by
/// `owner`'s node, and the host handle of a file.
fn open(
    host: std::path::PathBuf,
    req: &OpenRequest,
    owner: KernelId,
) -> Result<(Fd, Option<File>), Errno> {
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
                owner,
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
    let (file, id) = open_host(&mut options, &host, req.flags)?;
    let entry = FileFd {
        host,
        id,
        owner,
        open: super::held::next_open(),
        held: false,
        offset: 0,
        read: req.read,
        write: req.write,
        flags: req.flags,
        ghost: None,
    };
    Ok((Fd::File(entry), Some(file)))
}

impl FileAnswer {
    fn wrong(&self) -> Errno {
        tracing::error!("a file call was answered with {self:?}, for another op");
        Errno::Io
    }

    pub(crate) fn bytes(self) -> Result<Vec<u8>, Errno> {
        match self {
            FileAnswer::Bytes(b) => Ok(b),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn written(self) -> Result<(u64, u64), Errno> {
        match self {
            FileAnswer::Written { at, n } => Ok((at, n)),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn size(self) -> Result<u64, Errno> {
        match self {
            FileAnswer::Size(s) => Ok(s),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn stat(self) -> Result<[u8; FILESTAT_LEN as usize], Errno> {
        match self {
            FileAnswer::Stat(s) => s.try_into().map_err(|_| Errno::Io),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn entries(self) -> Result<Vec<DirEntry>, Errno> {
        match self {
            FileAnswer::Entries(e) => Ok(e),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn opened(self) -> Result<Fd, Errno> {
        match self {
            FileAnswer::Opened(fd) => Ok(fd),
            other => Err(other.wrong()),
        }
    }

    pub(crate) fn done(self) -> Result<(), Errno> {
        match self {
            FileAnswer::Done => Ok(()),
            other => Err(other.wrong()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_module(dir: &std::path::Path, path: &str) -> Result<FileAnswer, Errno> {
        let dir = DirFd {
            host: dir.into(),
            preopen: None,
            owner: KernelId::new(0, 0),
        };
        FileOp::ReadModule {
            at: Beneath {
                dir,
                path: path.into(),
            },
        }
        .serve(
            &mut HeldFiles::default(),
            Pid::new(KernelId::new(1, 0), 1, 0),
            1,
        )
    }

    #[test]
    fn the_owner_reads_a_module_whole_and_only_beneath_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let module = b"\0asm\x01\0\0\0".to_vec();
        std::fs::write(d.join("m.wasm"), &module).unwrap();
        std::os::unix::fs::symlink("m.wasm", d.join("link.wasm")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("out.wasm")).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        assert_eq!(
            read_module(d, "m.wasm"),
            Ok(FileAnswer::Bytes(module.clone()))
        );
        assert_eq!(read_module(d, "link.wasm"), Ok(FileAnswer::Bytes(module)));
        assert_eq!(read_module(d, "out.wasm"), Err(Errno::NotCapable));
        assert_eq!(read_module(d, "../m.wasm"), Err(Errno::NotCapable));
        assert_eq!(read_module(d, "sub"), Err(Errno::NoExec));
        assert_eq!(read_module(d, "none.wasm"), Err(Errno::NoEnt));
    }
}
