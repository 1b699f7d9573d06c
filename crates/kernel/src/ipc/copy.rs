//! Copies between processes' memories (vcopy, safecopy), checked against
//! the grants of each side's owner.

use atoll_abi::{Errno, Pid};
use atoll_ipc::{Access, CopyAddr, CopyRequest, CopySide, DomainId, IpcCall, IpcState};
use atoll_process::{IpcCaller, IpcOutcome};
use serde::{Deserialize, Serialize};

use super::IpcMsg;
use crate::kernel::Kernel;
use crate::msg::{NocMsg, Packet};

/// A copy in progress: who asked, and what.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct CopyOrder {
    pub requester: Pid,
    pub domain: Option<DomainId>,
    pub seq: u64,
    pub req: CopyRequest,
}

impl Kernel {
    pub(super) fn copy(
        &mut self,
        me: &mut IpcCaller<'_>,
        call: IpcCall,
        req: CopyRequest,
    ) -> IpcOutcome {
        let CopyRequest { src, dst, len } = req;
        let copy = CopyOrder {
            requester: me.pid,
            domain: me.ipc.domain,
            seq: me.ipc.seq,
            req,
        };
        let mine = |side: CopySide| match side.at {
            // The host function checked the caller's own ranges.
            CopyAddr::Direct(a) => a as usize..a as usize + len as usize,
            CopyAddr::Grant { .. } => unreachable!("a grant names another process's memory"),
        };
        let result = match (src.pid == me.pid, dst.pid == me.pid) {
            (true, true) => {
                me.memory.copy_within(mine(src), mine(dst).start);
                Some(Ok(()))
            }
            (true, false) if self.procs.contains_key(&dst.pid) => {
                Some(self.copy_write(&copy, &me.memory[mine(src)]))
            }
            (true, false) => {
                let msg = NocMsg::Ipc(IpcMsg::CopyWrite { to: dst.pid, copy });
                // SAFETY: the caller waits in this copy until it is
                // answered, and the destination's kernel answers once it
                // has read the bytes (`on_ipc`), or a kernel on the way has
                // given up the packet.
                match unsafe { me.lend(mine(src)) } {
                    Some(loan) => self.forward(
                        dst.pid,
                        Packet {
                            lent: Some(loan),
                            ..Packet::new(msg)
                        },
                    ),
                    None => self.route_bulk(dst.pid, msg, me.memory[mine(src)].to_vec()),
                }
                None
            }
            (false, true) if self.live(src.pid, &[]) => {
                Some(self.resolve(&copy, src, Access::READ).map(|a| {
                    let from = &self.procs[&src.pid].container.memory()
                        [a as usize..a as usize + len as usize];
                    me.memory[mine(dst)].copy_from_slice(from);
                    self.counted(len);
                }))
            }
            (false, _) if self.procs.contains_key(&src.pid) => self.copy_read(copy),
            (false, _) => {
                self.route(src.pid, NocMsg::Ipc(IpcMsg::CopyRead { to: src.pid, copy }));
                None
            }
        };
        match result {
            Some(r) => {
                if r.is_ok() {
                    me.ipc.stats.copied_bytes += u64::from(len);
                }
                IpcOutcome::Done(r)
            }
            None => IpcOutcome::Block(call),
        }
    }

    /// Reads the source side, which is here, and writes it to the
    /// destination: directly if that is here too (one copy), else through
    /// the portal. The result, if the copy is finished here.
    pub(super) fn copy_read(&mut self, copy: CopyOrder) -> Option<Result<(), Errno>> {
        let CopyRequest { src, dst, len } = copy.req;
        let from = match self.resolve(&copy, src, Access::READ) {
            Ok(a) => a as usize..a as usize + len as usize,
            Err(e) => return Some(Err(e)),
        };
        if !self.live(src.pid, &[dst.pid]) {
            return Some(Err(Errno::DeadSrcDst));
        }
        if !self.live(dst.pid, &[src.pid]) {
            let bytes = self.procs[&src.pid].container.memory()[from].to_vec();
            self.route_bulk(
                dst.pid,
                NocMsg::Ipc(IpcMsg::CopyWrite { to: dst.pid, copy }),
                bytes,
            );
            return None;
        }
        Some(self.resolve(&copy, dst, Access::WRITE).map(|to| {
            let to = to as usize;
            if src.pid == dst.pid {
                self.procs
                    .get_mut(&src.pid)
                    .expect("resolved")
                    .container
                    .memory_mut()
                    .copy_within(from, to);
            } else if let [Some(s), Some(d)] = self.procs.get_disjoint_mut([&src.pid, &dst.pid]) {
                d.container.memory_mut()[to..to + len as usize]
                    .copy_from_slice(&s.container.memory()[from]);
            }
            self.copied(&copy);
        }))
    }

    pub(super) fn copy_write(&mut self, copy: &CopyOrder, bytes: &[u8]) -> Result<(), Errno> {
        check_length(copy, bytes)?;
        let dst = copy.req.dst;
        let to = self.resolve(copy, dst, Access::WRITE)? as usize;
        if !self.live(dst.pid, &[]) {
            return Err(Errno::DeadSrcDst);
        }
        let p = self.procs.get_mut(&dst.pid).expect("live");
        p.container.memory_mut()[to..to + bytes.len()].copy_from_slice(bytes);
        self.copied(copy);
        Ok(())
    }

    /// Counts a finished copy, for the requester if it is not running.
    fn copied(&mut self, copy: &CopyOrder) {
        self.counted(copy.req.len);
        if let Some(s) = self.ipc_state(copy.requester) {
            s.stats.copied_bytes += u64::from(copy.req.len);
        }
    }

    fn counted(&mut self, len: u32) {
        self.ipc.copies += 1;
        self.ipc.copied_bytes += u64::from(len);
    }

    /// The address of one side of a copy in its owner's memory (the owner
    /// runs here), if the requester may access it ([`locate`]).
    fn resolve(&mut self, copy: &CopyOrder, side: CopySide, need: Access) -> Result<u32, Errno> {
        let p = self.procs.get(&side.pid).ok_or(Errno::DeadSrcDst)?;
        let at = locate(
            copy,
            side,
            need,
            &p.container.uarea().ipc,
            p.container.memory_bytes(),
        );
        if at == Err(Errno::CallDenied) {
            self.ipc.denied += 1;
        }
        at
    }

    /// As [`copy_read`](Self::copy_read), for a copy out of the memory of
    /// the caller waiting in place (its IPC state lent to the kernel).
    pub(super) fn copy_read_caller(&mut self, copy: CopyOrder, memory: &[u8]) {
        debug_assert!(self.lent_to.is_some(), "lent while waiting in place");
        let lent = &self.lent_ipc;
        let len = copy.req.len as usize;
        let result = match locate(&copy, copy.req.src, Access::READ, lent, memory.len()) {
            Ok(a) => {
                let bytes = memory[a as usize..a as usize + len].to_vec();
                let dst = copy.req.dst.pid;
                if !self.procs.contains_key(&dst) {
                    return self.route_bulk(
                        dst,
                        NocMsg::Ipc(IpcMsg::CopyWrite { to: dst, copy }),
                        bytes,
                    );
                }
                self.copy_write(&copy, &bytes)
            }
            Err(e) => {
                if e == Errno::CallDenied {
                    self.ipc.denied += 1;
                }
                Err(e)
            }
        };
        self.answer(copy.requester, copy.seq, result);
    }

    /// The bytes of the copy the caller waiting in place asked for, into
    /// its memory: the end of its call.
    pub(super) fn copy_write_caller(
        &mut self,
        copy: &CopyOrder,
        bytes: &[u8],
        memory: &mut [u8],
    ) -> Result<(), Errno> {
        check_length(copy, bytes)?;
        debug_assert!(self.lent_to.is_some(), "lent while waiting in place");
        let lent = &self.lent_ipc;
        let to = locate(copy, copy.req.dst, Access::WRITE, lent, memory.len())? as usize;
        memory[to..to + bytes.len()].copy_from_slice(bytes);
        self.copied(copy);
        Ok(())
    }
}

/// Refuses bytes that are not as many as the copy asked for: the grants
/// were checked for the copy's length, so a node that sent more would
/// write past them (and fewer would leave a hole). Kernels never do; a
/// frame from a faulty node might.
fn check_length(copy: &CopyOrder, bytes: &[u8]) -> Result<(), Errno> {
    if bytes.len() == copy.req.len as usize {
        return Ok(());
    }
    tracing::warn!(
        requester = %copy.requester,
        "a copy of {} bytes came with {}: refused",
        copy.req.len,
        bytes.len()
    );
    Err(Errno::Io)
}

/// Where one side of a copy lies in the memory of its owner (whose IPC
/// state is `owner`, its memory `memory_bytes` long), if the requester may
/// access it: its own memory, or memory the owner granted it.
fn locate(
    copy: &CopyOrder,
    side: CopySide,
    need: Access,
    owner: &IpcState,
    memory_bytes: usize,
) -> Result<u32, Errno> {
    let len = copy.req.len;
    let addr = match side.at {
        CopyAddr::Direct(a) if side.pid == copy.requester => a,
        _ if owner.domain.is_none() || owner.domain != copy.domain => {
            return Err(Errno::CallDenied);
        }
        CopyAddr::Direct(a) => owner
            .grants
            .covers(copy.requester, a, len, need)
            .map(|()| a)?,
        CopyAddr::Grant { id, offset } => {
            owner
                .grants
                .resolve(id, copy.requester, offset, len, need)?
        }
    };
    match (addr as usize).checked_add(len as usize) {
        Some(end) if end <= memory_bytes => Ok(addr),
        _ => Err(Errno::Fault),
    }
}

#[cfg(test)]
impl CopyOrder {
    /// A copy of `len` bytes within the memory of `pid`, which asks it.
    pub(crate) fn within(pid: Pid, len: u32) -> CopyOrder {
        let side = CopySide {
            pid,
            at: CopyAddr::Direct(0),
        };
        CopyOrder {
            requester: pid,
            domain: None,
            seq: 1,
            req: CopyRequest {
                src: side,
                dst: side,
                len,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use atoll_abi::KernelId;

    use super::*;

    #[test]
    fn bytes_that_do_not_match_the_copy_are_refused() {
        let pid = Pid {
            home: KernelId::new(0, 0),
            slot: 1,
            generation: 1,
        };
        let copy = CopyOrder::within(pid, 8);
        assert_eq!(check_length(&copy, &[0; 8]), Ok(()));
        assert_eq!(check_length(&copy, &[0; 9]), Err(Errno::Io));
        assert_eq!(check_length(&copy, &[]), Err(Errno::Io));
    }
}
