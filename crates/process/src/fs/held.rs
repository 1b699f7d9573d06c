//! The remote part of open files, held open by their node for processes
//! that run on another (ALMOS-MK's split, with the remote part kept).
//!
//! A process away from its files' node sends each file op to the kernel
//! that owns them (`FileOp::serve`). That kernel keeps the host handle of
//! every file it serves in its [`HeldFiles`], from the open on (or from the
//! first op, for a file opened before the process left, or from the moment
//! the process left its node with the handle: `Container::hold_files`), so
//! a file unlinked or renamed over while open stays usable from anywhere.
//! Entries are keyed by the open ([`FileFd::open`]) and the process: a
//! forked child shares its parent's open, and gets a duplicate of the
//! parent's handle when its kernel hears of the fork (`share`), or at its
//! first op if that comes first. An entry goes when its process closes
//! the descriptor, when the process ends, or when the node it last asked
//! from is lost.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};

use atoll_abi::{Errno, Pid};

use super::{fdflags, host_errno, reopen, reopen_handle};
use crate::fd::{FileFd, FileId};

/// A new open's number: unique in this node (one OS process), which alone
/// holds its files. An open number met again after a restart names
/// another file, which the file's identity tells apart.
pub(crate) fn next_open() -> u64 {
    static OPENS: AtomicU64 = AtomicU64::new(1);
    OPENS.fetch_add(1, Ordering::Relaxed)
}

/// The host files one kernel holds open for processes of other nodes.
#[derive(Debug, Default)]
pub struct HeldFiles {
    /// By open, then by process.
    opens: HashMap<u64, HashMap<Pid, Held>>,
}

#[derive(Debug)]
struct Held {
    file: File,
    id: FileId,
    /// The host sync flags it is open with (`fdflags::host_sync`).
    sync: i32,
    /// The node its process last asked from.
    node: u16,
}

impl HeldFiles {
    /// The handle of `file` for `pid`, which asks from `node`: the one held
    /// for it, else a duplicate of one held for the same open (a fork's),
    /// else the file reopened by its path.
    ///
    /// # Errors
    /// Those of reopening (`ENOENT` for a file unlinked while nobody held
    /// it, `ESTALE` if another file took its name) or duplicating.
    pub(crate) fn get(&mut self, pid: Pid, file: &FileFd, node: u16) -> Result<&File, Errno> {
        let users = self.opens.entry(file.open).or_default();
        // Held for another file under the same number (before a restart).
        users.retain(|_, h| h.id == file.id);
        if !users.contains_key(&pid) {
            let handle = match users.values().next() {
                Some(shared) => shared.file.try_clone().map_err(|e| host_errno(&e)),
                None => reopen(file),
            };
            match handle {
                Ok(handle) => {
                    let held = Held {
                        file: handle,
                        id: file.id,
                        sync: fdflags::host_sync(file.flags),
                        node,
                    };
                    users.insert(pid, held);
                }
                Err(e) => {
                    if users.is_empty() {
                        self.opens.remove(&file.open);
                    }
                    return Err(e);
                }
            }
        }
        let held = self
            .opens
            .get_mut(&file.open)
            .and_then(|users| users.get_mut(&pid))
            .expect("held just above");
        held.node = node;
        // Its process changed the descriptor's sync flags.
        let sync = fdflags::host_sync(file.flags);
        if held.sync != sync {
            held.file = reopen_handle(&held.file, file)?;
            held.sync = sync;
        }
        Ok(&held.file)
    }

    /// Holds `handle`, the host file of `file`, for `pid` on `node`.
    pub fn hold(&mut self, pid: Pid, file: &FileFd, handle: File, node: u16) {
        let held = Held {
            file: handle,
            id: file.id,
            sync: fdflags::host_sync(file.flags),
            node,
        };
        self.opens.entry(file.open).or_default().insert(pid, held);
    }

    /// `child` is a fork of `parent`: it gets a duplicate of every handle
    /// held for `parent`, so that either may close its descriptor first.
    /// One that cannot be duplicated (no descriptors left) is left to the
    /// child's first op, as before a fork was heard of.
    pub fn share(&mut self, parent: Pid, child: Pid) {
        for users in self.opens.values_mut() {
            let Some(held) = users.get(&parent) else {
                continue;
            };
            if let Ok(file) = held.file.try_clone() {
                let copy = Held {
                    file,
                    id: held.id,
                    sync: held.sync,
                    node: held.node,
                };
                users.insert(child, copy);
            }
        }
    }

    /// `pid` closed its descriptor of open `open`.
    pub fn close(&mut self, pid: Pid, open: u64) {
        if let Some(users) = self.opens.get_mut(&open) {
            users.remove(&pid);
            if users.is_empty() {
                self.opens.remove(&open);
            }
        }
    }

    /// `pid` ended: everything held for it goes.
    pub fn release(&mut self, pid: Pid) {
        self.keep(|p, _| p != pid);
    }

    /// Node `node` was lost: what was held for processes last heard from
    /// there goes (they ended with it, or left it unheard, and then reopen
    /// the file by its path).
    pub fn node_lost(&mut self, node: u16) {
        self.keep(|_, h| h.node != node);
    }

    fn keep(&mut self, keep: impl Fn(Pid, &Held) -> bool) {
        self.opens.retain(|_, users| {
            users.retain(|&p, h| keep(p, h));
            !users.is_empty()
        });
    }

    /// Handles held, over all processes.
    pub fn len(&self) -> usize {
        self.opens.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.opens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use atoll_abi::KernelId;

    use super::*;

    fn pid(slot: u16) -> Pid {
        Pid::new(KernelId::new(1, 0), slot, 0)
    }

    /// A file of `dir` with `text`, open, as a descriptor names it.
    fn file(dir: &std::path::Path, name: &str, text: &str) -> (FileFd, File) {
        let host = dir.join(name);
        std::fs::write(&host, text).unwrap();
        let handle = File::open(&host).unwrap();
        let fd = FileFd {
            host,
            id: FileId::of(&handle.metadata().unwrap()),
            owner: KernelId::new(0, 0),
            open: next_open(),
            held: false,
            offset: 0,
            read: true,
            write: false,
            flags: 0,
            ghost: None,
        };
        (fd, handle)
    }

    fn read(held: &mut HeldFiles, pid: Pid, fd: &FileFd) -> Result<String, Errno> {
        let mut text = String::new();
        let mut f = held.get(pid, fd, 1)?;
        std::io::Seek::rewind(&mut f).unwrap();
        f.read_to_string(&mut text).unwrap();
        Ok(text)
    }

    #[test]
    fn a_held_file_outlives_its_name_for_its_process_and_a_fork() {
        let dir = tempfile::tempdir().unwrap();
        let (fd, handle) = file(dir.path(), "a", "held");
        let mut held = HeldFiles::default();
        held.hold(pid(1), &fd, handle, 1);
        std::fs::remove_file(&fd.host).unwrap();
        assert_eq!(read(&mut held, pid(1), &fd).as_deref(), Ok("held"));
        // A forked child shares the open: a duplicate of its parent's.
        assert_eq!(read(&mut held, pid(2), &fd).as_deref(), Ok("held"));
        assert_eq!(held.len(), 2);
        held.close(pid(1), fd.open);
        assert_eq!(read(&mut held, pid(2), &fd).as_deref(), Ok("held"));
        held.release(pid(2));
        assert!(held.is_empty());
        // Nobody holds it any more, and it has no name to be reopened by.
        assert_eq!(read(&mut held, pid(2), &fd), Err(Errno::NoEnt));
        assert!(held.is_empty());
    }

    #[test]
    fn a_fork_heard_of_holds_for_the_child_what_its_parent_closes_first() {
        let dir = tempfile::tempdir().unwrap();
        let (fd, handle) = file(dir.path(), "a", "shared");
        let (other, other_handle) = file(dir.path(), "b", "not the parent's");
        let mut held = HeldFiles::default();
        held.hold(pid(1), &fd, handle, 1);
        held.hold(pid(3), &other, other_handle, 1);
        std::fs::remove_file(&fd.host).unwrap();
        held.share(pid(1), pid(2));
        assert_eq!(held.len(), 3, "only the parent's files are shared");
        held.close(pid(1), fd.open);
        assert_eq!(read(&mut held, pid(2), &fd).as_deref(), Ok("shared"));
        held.release(pid(2));
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn new_sync_flags_open_the_same_held_file_again_without_its_name() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let (mut fd, handle) = file(dir.path(), "a", "synced");
        let mut held = HeldFiles::default();
        held.hold(pid(1), &fd, handle, 1);
        std::fs::remove_file(&fd.host).unwrap();
        fd.flags = fdflags::DSYNC;
        assert_eq!(read(&mut held, pid(1), &fd).as_deref(), Ok("synced"));
        let f = held.get(pid(1), &fd, 1).unwrap();
        // SAFETY: F_GETFL on a descriptor `f` keeps open reads its flags.
        let host = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(host & libc::O_DSYNC, libc::O_DSYNC);
    }

    #[test]
    fn an_unheld_file_is_reopened_by_path_and_then_held() {
        let dir = tempfile::tempdir().unwrap();
        let (fd, _) = file(dir.path(), "b", "by path");
        let mut held = HeldFiles::default();
        assert_eq!(read(&mut held, pid(1), &fd).as_deref(), Ok("by path"));
        std::fs::remove_file(&fd.host).unwrap();
        assert_eq!(read(&mut held, pid(1), &fd).as_deref(), Ok("by path"));
        // Another file under the same open number is not this one.
        let (mut other, _) = file(dir.path(), "c", "other");
        other.open = fd.open;
        assert_eq!(read(&mut held, pid(1), &other).as_deref(), Ok("other"));
        assert_eq!(held.len(), 1);
    }

    #[test]
    fn a_lost_node_takes_what_was_held_for_its_processes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, ha) = file(dir.path(), "a", "a");
        let (b, hb) = file(dir.path(), "b", "b");
        let mut held = HeldFiles::default();
        held.hold(pid(1), &a, ha, 1);
        held.hold(pid(2), &b, hb, 2);
        held.node_lost(1);
        assert_eq!(held.len(), 1);
        assert_eq!(read(&mut held, pid(2), &b).as_deref(), Ok("b"));
        // Asking from another node moves the entry there.
        held.get(pid(2), &b, 3).unwrap();
        held.node_lost(2);
        assert_eq!(held.len(), 1);
    }
}
