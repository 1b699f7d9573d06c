//! File descriptors: the part of an open file that belongs to the process.
//!
//! As in ALMOS-MK, a file is split in two. The local part — descriptor
//! number, offset, access mode, flags — lives here in the UArea and moves
//! with the process. The remote part, the host file itself, stays on the
//! node that owns it (`owner`): on any kernel of that node a descriptor is
//! reopened from its host path on first use; from another node its
//! operations are sent to the owner (`crate::fs::op`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use atoll_abi::{Errno, KernelId};
use serde::{Deserialize, Serialize};

/// A host directory made visible to the guest under a guest path
/// (`--dir HOST::GUEST`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preopen {
    pub host: PathBuf,
    pub guest: String,
}

impl std::str::FromStr for Preopen {
    type Err = String;

    /// Parses `HOST::GUEST`, or `DIR` (same path on both sides).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, guest) = s.split_once("::").unwrap_or((s, s));
        if host.is_empty() || guest.is_empty() {
            return Err(format!("`{s}`: expected HOST::GUEST or DIR"));
        }
        Ok(Preopen {
            host: host.into(),
            guest: guest.into(),
        })
    }
}

/// One open descriptor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Fd {
    Stdin,
    Stdout,
    Stderr,
    Dir(DirFd),
    File(FileFd),
}

/// An open directory: a capability for what lies beneath it (paths
/// relative to it never resolve outside it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DirFd {
    /// The directory on the owner's host.
    pub host: PathBuf,
    /// The guest path, for preopened directories (reported by `fd_prestat_*`).
    pub preopen: Option<String>,
    /// The kernel that serves it to processes of other nodes: the one that
    /// opened it, or that started the job that preopened it.
    pub owner: KernelId,
}

/// An open regular file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileFd {
    /// The file on the owner's host.
    pub host: PathBuf,
    /// What was opened: a reopen that finds another file at `host` (it was
    /// renamed over or deleted and made again) fails with `ESTALE`.
    pub id: FileId,
    /// As for [`DirFd::owner`]: the directory's owner, beneath which it was
    /// opened; or, once the process has left that node, the kernel of that
    /// node which holds the file open for it (`HeldFiles`).
    pub owner: KernelId,
    /// Which open this is, among those of its owner's node (one per
    /// `path_open`; a forked child's descriptor shares its parent's): the
    /// key of the host handle its owner holds for a process of another node.
    pub open: u64,
    /// Its owner holds its host file for the process, which left the node
    /// with it open: back on that node, the process still has the owner
    /// serve it, unless it has a handle of its own.
    pub held: bool,
    pub offset: u64,
    pub read: bool,
    pub write: bool,
    /// WASI `fdflags`: `APPEND`, the sync flags (the host file is opened
    /// with them) and `NONBLOCK` (kept and reported; files never block).
    pub flags: u16,
    /// Only in a checkpoint: the file's bytes, where it had no name left
    /// that a restore could reopen it by (`fs/ghost.rs`).
    pub ghost: Option<Vec<u8>>,
}

/// A host file's device and inode numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// WASI rights a descriptor has kept: a mask over what its kind and access
/// mode allow, which `fd_fdstat_set_rights` can only narrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rights {
    pub base: u64,
    pub inheriting: u64,
}

impl Rights {
    /// Nothing taken away.
    pub const ALL: Rights = Rights {
        base: u64::MAX,
        inheriting: u64::MAX,
    };
}

/// One slot of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Entry {
    fd: Fd,
    kept: Rights,
}

/// The descriptor table of a process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FdTable {
    entries: BTreeMap<u32, Entry>,
}

/// Descriptors a process may hold at once.
pub const MAX_FDS: u32 = 1024;

impl FdTable {
    /// stdin, stdout, stderr, then the preopened directories from fd 3 on,
    /// served by `owner` to other nodes.
    pub fn new(preopens: &[Preopen], owner: KernelId) -> Self {
        let mut table = FdTable::default();
        table.put(0, Fd::Stdin);
        table.put(1, Fd::Stdout);
        table.put(2, Fd::Stderr);
        for (i, p) in preopens.iter().enumerate() {
            let dir = DirFd {
                host: p.host.clone(),
                preopen: Some(p.guest.clone()),
                owner,
            };
            table.put(3 + i as u32, Fd::Dir(dir));
        }
        table
    }

    /// Installs `entry` at `fd`, with all its rights.
    fn put(&mut self, fd: u32, entry: Fd) {
        let kept = Rights::ALL;
        self.entries.insert(fd, Entry { fd: entry, kept });
    }

    pub fn get(&self, fd: u32) -> Result<&Fd, Errno> {
        self.entries.get(&fd).map(|e| &e.fd).ok_or(Errno::Badf)
    }

    pub fn get_mut(&mut self, fd: u32) -> Result<&mut Fd, Errno> {
        self.entries
            .get_mut(&fd)
            .map(|e| &mut e.fd)
            .ok_or(Errno::Badf)
    }

    /// The rights descriptor `fd` has kept.
    pub fn kept(&self, fd: u32) -> Result<Rights, Errno> {
        self.entries.get(&fd).map(|e| e.kept).ok_or(Errno::Badf)
    }

    /// Narrows what descriptor `fd` keeps to `rights`.
    pub fn keep(&mut self, fd: u32, rights: Rights) -> Result<(), Errno> {
        let entry = self.entries.get_mut(&fd).ok_or(Errno::Badf)?;
        entry.kept.base &= rights.base;
        entry.kept.inheriting &= rights.inheriting;
        Ok(())
    }

    /// Installs `entry` at the lowest free descriptor.
    pub fn insert(&mut self, entry: Fd) -> Result<u32, Errno> {
        let fd = (0..MAX_FDS)
            .find(|n| !self.entries.contains_key(n))
            .ok_or(Errno::Mfile)?;
        self.put(fd, entry);
        Ok(fd)
    }

    pub fn remove(&mut self, fd: u32) -> Result<Fd, Errno> {
        self.entries.remove(&fd).map(|e| e.fd).ok_or(Errno::Badf)
    }

    /// Moves `from` onto `to` (`fd_renumber`), closing what `to` held,
    /// which it returns (`None` when `from` is `to`).
    pub fn renumber(&mut self, from: u32, to: u32) -> Result<Option<Fd>, Errno> {
        if !self.entries.contains_key(&to) {
            return Err(Errno::Badf);
        }
        let entry = self.entries.remove(&from).ok_or(Errno::Badf)?;
        Ok(self.entries.insert(to, entry).map(|e| e.fd))
    }

    /// The open regular files, with their descriptors.
    pub fn files(&self) -> impl Iterator<Item = (u32, &FileFd)> {
        self.entries.iter().filter_map(|(&n, e)| match &e.fd {
            Fd::File(f) => Some((n, f)),
            _ => None,
        })
    }

    /// The preopened directories, with their descriptors.
    pub fn preopens(&self) -> impl Iterator<Item = (u32, &DirFd)> {
        self.entries.iter().filter_map(|(&n, e)| match &e.fd {
            Fd::Dir(d) if d.preopen.is_some() => Some((n, d)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_and_renumber() {
        let owner = KernelId::new(0, 0);
        let mut t = FdTable::new(&["/tmp::/data".parse().unwrap()], owner);
        assert!(matches!(t.get(3), Ok(Fd::Dir(d)) if d.preopen.as_deref() == Some("/data")));
        let f = || {
            Fd::File(FileFd {
                host: "/x".into(),
                id: FileId { dev: 1, ino: 2 },
                owner,
                open: 1,
                held: false,
                offset: 0,
                read: true,
                write: false,
                flags: 0,
                ghost: None,
            })
        };
        assert_eq!(t.insert(f()).unwrap(), 4);
        t.remove(1).unwrap();
        assert_eq!(t.insert(f()).unwrap(), 1);
        assert_eq!(t.renumber(4, 9), Err(Errno::Badf));
        t.renumber(4, 1).unwrap();
        assert_eq!(t.get(4), Err(Errno::Badf));
        assert_eq!(t.preopens().count(), 1);
    }

    #[test]
    fn preopen_syntax() {
        let p: Preopen = "a/b::/data".parse().unwrap();
        assert_eq!(
            (p.host.to_str().unwrap(), p.guest.as_str()),
            ("a/b", "/data")
        );
        let p: Preopen = "/srv".parse().unwrap();
        assert_eq!(p.guest, "/srv");
        assert!("::/x".parse::<Preopen>().is_err());
    }
}
