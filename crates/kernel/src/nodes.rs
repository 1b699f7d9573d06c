//! When another node is lost: a kernel ends whatever waits on it, so that
//! no call and no migration hangs on a machine that is gone (DESIGN.md,
//! "Nodes"). Two things bring the news:
//!
//! - a message that cannot be sent (its node is down, or the kernel does
//!   not exist) is answered the way its sender expects an answer from a
//!   process that is gone ([`Kernel::unsendable`]);
//! - `NodeDown`, which every kernel hears when the links give a node up,
//!   ends what was already waiting on it ([`Kernel::on_node_down`]).
//!
//! A process on a lost node is lost with it. Its home kernel tells its
//! parent (or its job's console) that it ended with SIGKILL's status; a
//! process homed on the lost node is reported lost by its parent's kernel.

use atoll_abi::{status, Errno, KernelId, Pid};
use atoll_process::{CallState, KernelCall, Reply, SpawnModule};

use crate::files::{is_file, reading_module};
use crate::homes::Kin;
use crate::ipc::IpcMsg;
use crate::kernel::{Awaits, Kernel, Pending};
use crate::msg::{MigrationMsg, NocMsg, Packet};

/// The status of a process lost with its node.
fn lost() -> i32 {
    status::killed(status::SIGKILL)
}

impl Kernel {
    /// A packet for kernel `to` could not be sent: answer it as if what it
    /// was for were gone.
    pub(crate) fn unsendable(&mut self, to: KernelId, packet: Packet, why: String) {
        tracing::warn!(kernel = %self.id, "cannot send to kernel {to} ({why}): {:?}", packet.msg);
        if packet.msg.target().is_some() {
            return self.undeliverable(packet.msg);
        }
        match packet.msg {
            NocMsg::Spawn { parent, spec } => {
                self.release(spec.counted);
                let result = Err(Errno::Again);
                self.route(parent, NocMsg::Spawned { parent, result });
            }
            NocMsg::Commit { pid, .. } => {
                self.on_committed(pid, Err(format!("its home kernel: {why}")))
            }
            NocMsg::Migration(
                MigrationMsg::Round { pid, req, .. } | MigrationMsg::Final { pid, req, .. },
            ) => self.on_migration_done(pid, req, Err(why), None),
            NocMsg::NeedModule { hash } => self.on_module(hash, Err(why)),
            NocMsg::Start { req, .. } | NocMsg::Restore { req, .. } => {
                self.on_started(req, Err(why))
            }
            NocMsg::Report { req, .. } => drop(self.unpark(req)),
            NocMsg::Locate { req, lost, .. } => self.fail_request(req, lost),
            NocMsg::Reclaim { pid, req, .. } => self.on_reclaimed(pid, req, false),
            NocMsg::File { pid } => self.answer_file_op(pid, &Err(Errno::Io)),
            // The placement ends here instead.
            NocMsg::Place { asker, token, .. } => {
                let here = self.id;
                self.answer_place(asker, token, here)
            }
            // Answers and news for a kernel that is gone.
            _ => {}
        }
    }

    /// Node `node` is down (`stopped`: in order): end every wait on it.
    pub(crate) fn on_node_down(&mut self, node: u16, incarnation: u64, stopped: bool) {
        if stopped {
            tracing::info!(kernel = %self.id, node, incarnation, "node stopped: ending what waits on it");
        } else {
            tracing::warn!(kernel = %self.id, node, incarnation, "node down: ending what waits on it");
        }
        // Placement leaves the node out now, not at the next tick.
        let nodes = self.noc_nodes().into_iter().filter(|&(n, _)| n != node);
        self.placement
            .dqdt
            .reshape(atoll_placement::Shape::new(nodes));
        // Processes homed here that ran there.
        for (pid, kin) in self.homes.lost_on(node) {
            self.mourn(pid, kin);
        }
        self.fence(node);
        let here: Vec<Pid> = self.procs.keys().copied().collect();
        for pid in here {
            self.unwait(pid, node);
        }
        self.departures_to_lost_node(node);
        self.lends_to_lost_node(node);
        self.arrivals_from_lost_node(node);
        // Processes whose memory was still coming from there (the node's
        // links have let it go already). A forked child is homed on the
        // kernel it came from, so `fence` ended it above; this holds for
        // any process that arrives before its memory, whatever its home.
        self.runtime.late_memories().lost(node);
        let memoryless: Vec<Pid> = self
            .procs
            .iter()
            .filter(|(_, p)| p.container.late_from() == Some(node))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in memoryless {
            tracing::warn!(kernel = %self.id, %pid, "killed: its memory was still coming from node {node}");
            // Said at once: what it wrote on that node is lost with it.
            let what = format!(
                "killed: node {node} was lost while its memory was still coming from there"
            );
            self.end_saying(pid, lost(), &what);
        }
        self.requests_to_lost_node(node);
        // Files held open for processes last heard from there.
        self.held.node_lost(node);
        let modules: Vec<_> = self
            .awaiting_modules
            .iter()
            .filter(|(_, w)| w.first().is_some_and(|(from, _)| from.node == node))
            .map(|(&hash, _)| hash)
            .collect();
        for hash in modules {
            self.on_module(hash, Err(format!("node {node} is down")));
        }
    }

    /// Ends what `pid` (which runs here) waits for on node `node`: its
    /// children homed there, its output written there, and the call it is
    /// blocked in.
    fn unwait(&mut self, pid: Pid, node: u16) {
        let u = self.procs[&pid].container.uarea();
        let orphaned: Vec<Pid> = u
            .children
            .live
            .iter()
            .copied()
            .filter(|c| c.home.node == node)
            .collect();
        for child in orphaned {
            self.child_exited(pid, child, lost());
        }
        let u = self.procs[&pid].container.uarea();
        if let Some(upto) = u.console_flow.lost(node) {
            self.on_drained(pid, upto);
        }
        let u = self.procs[&pid].container.uarea();
        if let Some((exec, ..)) =
            reading_module(&u.call).filter(|(.., at)| at.dir.owner.node == node)
        {
            return self.module_unread(pid, exec, Errno::Io);
        }
        let CallState::Blocked(call) = &u.call else {
            return;
        };
        match call {
            KernelCall::Ipc(c) => {
                let Some(peer) = c.blocked_on().filter(|p| !self.procs.contains_key(p)) else {
                    return;
                };
                if peer.home.node == node {
                    self.ipc.dead += 1;
                    self.reply_if_blocked(pid, is_ipc, Reply::Ipc(Err(Errno::DeadSrcDst)));
                } else {
                    // It may have run there: ask its home. A peer that is
                    // gone answers `PeerDead`, which ends the call.
                    let probe = IpcMsg::Watch {
                        to: peer,
                        watcher: pid,
                    };
                    self.route(peer, NocMsg::Ipc(probe));
                }
            }
            KernelCall::Kill { pid: target, .. } if target.home.node == node => {
                self.reply_if_blocked(pid, is_kill, Reply::Killed(Err(Errno::Srch)));
            }
            // A spawn by path sends its request there once its module is
            // loaded here, and learns then that the node is gone.
            KernelCall::Spawn(req)
                if req.kernel.is_some_and(|k| k.node == node)
                    && req.module == SpawnModule::Same =>
            {
                self.reply_if_blocked(pid, is_spawn, Reply::Spawned(Err(Errno::Again)));
            }
            KernelCall::File { owner, .. } if owner.node == node => {
                self.reply_if_blocked(pid, is_file, Reply::File(Err(Errno::Io)));
            }
            _ => {}
        }
    }

    /// Ends the processes here that the lost node's side has declared
    /// dead: those homed there (their PIDs name a home that is gone, and it
    /// told their parents they ended) and those of jobs started there (their
    /// terminal ended the job, as a hangup ends a terminal's processes). So
    /// both sides agree on what is dead when the node was only cut off and
    /// the link is mended.
    fn fence(&mut self, node: u16) {
        let fenced: Vec<Pid> = self
            .procs
            .iter()
            .filter(|(pid, p)| pid.home.node == node || p.container.uarea().console.node() == node)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in fenced {
            let line = format!("atoll: process {pid} ended: its node {node} was lost\n");
            let console = self.procs[&pid].container.uarea().console;
            self.host
                .console
                .write(console, atoll_process::Stream::Stderr, line.as_bytes());
            self.end(pid, lost());
        }
    }

    /// Ends the node requests parked here that node `node` held: those sent
    /// to its kernels, and those for processes homed there. A request for a
    /// process homed elsewhere was held there only if the process ran
    /// there: its home is asked (`Locate`).
    fn requests_to_lost_node(&mut self, node: u16) {
        let parked: Vec<(u64, Awaits)> = self.pending.iter().map(|(&r, &(_, a))| (r, a)).collect();
        for (req, awaits) in parked {
            match awaits {
                Awaits::Kernel(k) if k.node == node => self.fail_request(req, node),
                Awaits::Process(pid) if pid.home.node == node => self.fail_request(req, node),
                Awaits::Process(pid) => {
                    let kernel = self.id;
                    let locate = NocMsg::Locate {
                        pid,
                        lost: node,
                        kernel,
                        req,
                    };
                    if pid.home == kernel {
                        if self.lost_with(pid, node) {
                            self.fail_request(req, node);
                        }
                    } else {
                        self.send(pid.home, locate);
                    }
                }
                Awaits::Kernel(_) => {}
            }
        }
    }

    /// At `pid`'s home: whether it is gone, or ran on lost node `node`.
    pub(crate) fn lost_with(&mut self, pid: Pid, node: u16) -> bool {
        if self.procs.contains_key(&pid) {
            return false;
        }
        self.homes.locate(pid).is_none_or(|at| at.node == node)
    }

    /// Answers parked request `req`, which lost node `node` held and will
    /// never answer.
    pub(crate) fn fail_request(&mut self, req: u64, node: u16) {
        let why = format!("node {node} was lost");
        match self.unpark(req) {
            Some(Pending::Kill(tx)) => drop(tx.send(Err(Errno::Srch))),
            Some(Pending::Migrate(tx)) => {
                drop(tx.send(Err(format!("the process or its home was lost: {why}"))))
            }
            Some(Pending::Start(tx)) => drop(tx.send(Err(why))),
            // The node lists that node as down.
            Some(Pending::Report(_)) | None => {}
        }
    }

    /// At the home kernel: `at` holds `pid` frozen for a migration whose
    /// destination is lost. It may resume it only if the move was not
    /// committed; if it was, `pid` ran there and is lost with that node.
    pub(crate) fn reclaim(&mut self, pid: Pid, at: KernelId) -> bool {
        match self.homes.locate(pid) {
            Some(l) if l == at => true,
            Some(_) => {
                if let Some(kin) = self.homes.release(pid) {
                    self.mourn(pid, kin);
                }
                false
            }
            None => false,
        }
    }

    /// Tells whom a process lost here concerns that it ended.
    pub(crate) fn mourn(&mut self, pid: Pid, kin: Kin) {
        self.announce_end(pid, kin, lost());
    }
}

fn is_ipc(c: &KernelCall) -> bool {
    matches!(c, KernelCall::Ipc(_))
}

fn is_kill(c: &KernelCall) -> bool {
    matches!(c, KernelCall::Kill { .. })
}

fn is_spawn(c: &KernelCall) -> bool {
    matches!(c, KernelCall::Spawn(_))
}
