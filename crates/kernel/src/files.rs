//! Files of one node used by processes on another (ALMOS-MK's remote part,
//! DESIGN.md "Files and output").
//!
//! A file call whose file is owned by another node enters the kernel with
//! its op (`KernelCall::File`). The kernel sends it to the owning kernel
//! (`NocMsg::File`), which executes it on its filesystem and routes the
//! answer (`NocMsg::FileDone`) to wherever the process runs by then; there
//! the process is answered and runs the call again to apply it. Ops and
//! answers travel in the portal, as postcard, since a read or a write
//! carries up to 16 MiB. If the owner's node is lost, the call fails with
//! `EIO`, as a file on a failed network mount does.
//!
//! The owner holds each file it serves open for its process
//! ([`HeldFiles`](atoll_process::HeldFiles), in `Kernel::held`), so that a
//! file unlinked or renamed over while open stays usable from anywhere; so
//! does the kernel a process leaves its files' node from, for the files it
//! kept open there (`Container::hold_files`, at the freeze of the move),
//! and the process's descriptors then name that kernel. A close tells the
//! holder (`FileClosed`, after the slice), the process's end tells every
//! kernel its descriptors name (`FilesReleased`), and a lost node takes
//! what was held for the processes last heard from there. A fork tells
//! them to hold the parent's files for the child too (`FilesShared`).

use atoll_abi::{Errno, KernelId, Pid};
use atoll_process::{
    Beneath, CallState, FdTable, FileAnswer, FileOp, KernelCall, Reply, SpawnModule, SpawnRequest,
};

use crate::kernel::Kernel;
use crate::loader::ModuleSource;
use crate::msg::{NocMsg, Packet};

type Answer = Result<FileAnswer, Errno>;

impl Kernel {
    /// Sends `pid`'s op to the kernel that owns its file.
    pub(crate) fn send_file_op(&mut self, pid: Pid, owner: KernelId, op: &FileOp) {
        let bulk = postcard::to_allocvec(op).expect("a file op encodes");
        self.transmit(
            owner,
            Packet {
                bulk: Some(bulk),
                ..Packet::new(NocMsg::File { pid })
            },
        );
    }

    /// At the owner: executes the op of `pid` (a process of another node)
    /// and sends the answer after it. An op that does not decode is
    /// answered `EIO`, and nothing is done.
    pub(crate) fn on_file_op(&mut self, pid: Pid, from: KernelId, bulk: Option<Vec<u8>>) {
        let answer = match bulk.as_deref().map(postcard::from_bytes::<FileOp>) {
            Some(Ok(op)) => op.serve(&mut self.held, pid, from.node),
            _ => {
                tracing::warn!(kernel = %self.id, %pid, "a file op that does not decode");
                Err(Errno::Io)
            }
        };
        self.answer_file_op(pid, &answer);
    }

    /// `pid` ended here: every kernel that may hold files open for it
    /// (the owners its descriptors name) lets them go.
    pub(crate) fn release_files(&mut self, pid: Pid, fds: &FdTable) {
        let mut holders: Vec<KernelId> = fds.files().map(|(_, f)| f.owner).collect();
        holders.sort_unstable();
        holders.dedup();
        for holder in holders {
            if holder == self.id {
                self.held.release(pid);
            } else {
                self.send(holder, NocMsg::FilesReleased { pid });
            }
        }
    }

    /// `child` was forked from `parent`, with `fds`: every kernel that
    /// holds files open for `parent` holds them for `child` too, so that
    /// either may close its descriptor first. (A child whose first op
    /// overtakes this still finds its parent's handle, if it is held yet.)
    pub(crate) fn share_held_files(&mut self, parent: Pid, child: Pid, fds: &FdTable) {
        let here = self.id.node;
        let mut holders: Vec<KernelId> = fds
            .files()
            .filter(|(_, f)| f.owner.node != here || f.held)
            .map(|(_, f)| f.owner)
            .collect();
        holders.sort_unstable();
        holders.dedup();
        for holder in holders {
            if holder == self.id {
                self.held.share(parent, child);
            } else {
                self.send(holder, NocMsg::FilesShared { parent, child });
            }
        }
    }

    /// Routes `answer` to `pid`, wherever it runs.
    pub(crate) fn answer_file_op(&mut self, pid: Pid, answer: &Answer) {
        let bulk = postcard::to_allocvec(answer).expect("a file answer encodes");
        self.route_bulk(pid, NocMsg::FileDone { pid }, bulk);
    }

    /// Where `pid` runs: the owner's answer, for its blocked file call, or
    /// the module file it spawns or execs from a directory of the owner's
    /// node.
    pub(crate) fn on_file_done(&mut self, pid: Pid, bulk: Option<Vec<u8>>) {
        let answer = bulk
            .as_deref()
            .and_then(|b| postcard::from_bytes::<Answer>(b).ok())
            .unwrap_or(Err(Errno::Io));
        let waiting = self.procs.get(&pid).and_then(|p| {
            let (exec, req, at) = reading_module(&p.container.uarea().call)?;
            let name = format!(
                "{} on node {}",
                at.dir.host.join(&at.path).display(),
                at.dir.owner.node
            );
            Some((exec, req.clone(), name))
        });
        let Some((exec, req, name)) = waiting else {
            return self.reply_if_blocked(pid, is_file, Reply::File(answer));
        };
        let bytes = match answer {
            Ok(FileAnswer::Bytes(bytes)) => bytes,
            Ok(_) => return self.module_unread(pid, exec, Errno::Io),
            Err(e) => return self.module_unread(pid, exec, e),
        };
        // From here the call waits for this node's loader, whose answer it
        // must get even if the file's node is lost meanwhile.
        if let Some(CallState::Blocked(KernelCall::Spawn(r) | KernelCall::Exec(r))) = self
            .procs
            .get_mut(&pid)
            .map(|p| &mut p.container.uarea_mut().call)
        {
            r.module = SpawnModule::Fetched;
        }
        let source = ModuleSource::Read { name, bytes };
        if exec {
            self.exec_module(pid, req.args, req.kernel, source);
        } else {
            self.spawn_module(pid, &req.args, req.kernel, source);
        }
    }

    /// Fails the spawn (`exec`: the exec) of `pid`, whose module file of
    /// another node could not be read.
    pub(crate) fn module_unread(&mut self, pid: Pid, exec: bool, errno: Errno) {
        if exec {
            self.reply_now(pid, Reply::ExecFailed(errno));
        } else {
            self.refuse_child(pid, errno);
        }
    }
}

/// If `call` is a spawn or exec waiting for its module file from another
/// node: whether it is an exec, the request, and where the file is.
pub(crate) fn reading_module(call: &CallState) -> Option<(bool, &SpawnRequest, &Beneath)> {
    let (exec, req) = match call {
        CallState::Blocked(KernelCall::Spawn(req)) => (false, req),
        CallState::Blocked(KernelCall::Exec(req)) => (true, req),
        _ => return None,
    };
    match &req.module {
        SpawnModule::OtherNode(at) => Some((exec, req, at)),
        SpawnModule::Same | SpawnModule::File(_) | SpawnModule::Fetched => None,
    }
}

pub(crate) fn is_file(c: &KernelCall) -> bool {
    matches!(c, KernelCall::File { .. })
}
