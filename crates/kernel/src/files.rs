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

use atoll_abi::{Errno, KernelId, Pid};
use atoll_process::{FileAnswer, FileOp, KernelCall, Reply};

use crate::kernel::Kernel;
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
    pub(crate) fn on_file_op(&mut self, pid: Pid, bulk: Option<Vec<u8>>) {
        let answer = match bulk.as_deref().map(postcard::from_bytes::<FileOp>) {
            Some(Ok(op)) => op.serve(),
            _ => {
                tracing::warn!(kernel = %self.id, %pid, "a file op that does not decode");
                Err(Errno::Io)
            }
        };
        self.answer_file_op(pid, &answer);
    }

    /// Routes `answer` to `pid`, wherever it runs.
    pub(crate) fn answer_file_op(&mut self, pid: Pid, answer: &Answer) {
        let bulk = postcard::to_allocvec(answer).expect("a file answer encodes");
        self.route_bulk(pid, NocMsg::FileDone { pid }, bulk);
    }

    /// Where `pid` runs: the owner's answer, for its blocked file call.
    pub(crate) fn on_file_done(&mut self, pid: Pid, bulk: Option<Vec<u8>>) {
        let answer = bulk
            .as_deref()
            .and_then(|b| postcard::from_bytes::<Answer>(b).ok())
            .unwrap_or(Err(Errno::Io));
        self.reply_if_blocked(pid, is_file, Reply::File(answer));
    }
}

pub(crate) fn is_file(c: &KernelCall) -> bool {
    matches!(c, KernelCall::File { .. })
}
