//! The destination side of a migration: rebuild the process from its
//! rounds and final frame (or take the handed-over container), have the
//! home kernel commit its new location, then run it.

use std::ops::Range;

use atoll_abi::{status, KernelId, Pid};
use atoll_migration::MigrationReport;
use atoll_process::{Container, HostFiles, ProcessImage};

use crate::homes::Kin;
use crate::kernel::{monotonic_ns, Kernel};
use crate::kernel::{JobAsker, Process};
use crate::msg::{Handover, MigrationMsg, NocMsg, Packet, Times};

/// A process whose pre-copy rounds are arriving: rebuilt as they come, not
/// yet a process of this kernel.
pub(crate) struct Incoming {
    from: KernelId,
    req: u64,
    container: Container,
    /// Its memory follows the freeze (post-copy): frame 0 carried none.
    memory_follows: bool,
}

/// A process restored here and waiting for its home kernel to commit its
/// new location before it runs (unless its home was its source, which
/// committed it as it sent it).
pub(crate) struct Arriving {
    process: Process,
    arrival: Arrival,
    /// Messages for it that came before the commit.
    pub held: Vec<Packet>,
}

impl Arriving {
    /// Its memory is still coming from another node.
    pub(crate) fn awaits_memory(&self) -> bool {
        self.process.container.late_from().is_some()
    }
}

impl Incoming {
    /// Its memory will follow it (post-copy).
    pub(crate) fn awaits_memory(&self) -> bool {
        self.memory_follows
    }
}

/// Who is answered when an arrival is committed.
pub(crate) enum Arrival {
    /// The source kernel of a migration.
    Migrated {
        from: KernelId,
        req: u64,
        report: Box<MigrationReport>,
        times: Times,
        handed_over: bool,
        /// Its home recorded the move already (`MigrationMsg::Final`).
        committed: bool,
    },
    /// A node request to restore a checkpoint here.
    Restored(JobAsker),
}

impl Kernel {
    /// The migration protocol's dispatcher.
    pub(crate) fn on_migration(
        &mut self,
        from: KernelId,
        msg: MigrationMsg,
        bulk: Option<Vec<u8>>,
        handover: Option<Handover>,
        files: Option<Box<HostFiles>>,
    ) {
        // The process comes back from another node before the answer to
        // its move from here (that answer travels the control connection,
        // this the bulk one): it may only arrive once that move has ended.
        if let MigrationMsg::Round { pid, .. }
        | MigrationMsg::Final { pid, .. }
        | MigrationMsg::Abort { pid, .. } = &msg
        {
            if let Some(d) = self
                .departures
                .get_mut(pid)
                .filter(|_| from.node != self.id.node)
            {
                tracing::debug!(kernel = %self.id, %pid, "its next move overtook the answer to its last one: held until that answer");
                d.overtaken.push((from, msg, bulk));
                return;
            }
        }
        match msg {
            MigrationMsg::Round {
                pid,
                req,
                frame,
                memory_follows,
                ..
            } => match self.on_round(from, pid, req, frame, memory_follows, bulk) {
                Ok(()) => self.send(
                    from,
                    NocMsg::Migration(MigrationMsg::Applied { pid, req, frame }),
                ),
                Err(why) => {
                    self.incoming.remove(&pid);
                    self.refuse(from, pid, req, why, None);
                }
            },
            MigrationMsg::Applied { pid, req, frame } => self.on_round_applied(pid, req, frame),
            MigrationMsg::Final {
                pid,
                req,
                report,
                times,
                late,
                committed,
                ..
            } => {
                let times = match from.node == self.id.node {
                    true => times,
                    false => times.rebased(monotonic_ns()),
                };
                let arrival = Arrival::Migrated {
                    from,
                    req,
                    report,
                    times,
                    handed_over: false,
                    committed,
                };
                // Copied, so there is no container to give back; from a
                // kernel of this node, with the host files it keeps.
                let arrived = self.on_final(from, pid, req, bulk, late).and_then(|mut c| {
                    if let Some(files) = files {
                        c.adopt_files(*files);
                    }
                    self.arrive(c, arrival).map_err(|(why, _)| why)
                });
                if let Err(why) = arrived {
                    self.refuse(from, pid, req, why, None);
                }
            }
            MigrationMsg::Handover {
                pid,
                req,
                report,
                times,
                committed,
            } => {
                let Some(Handover(mut container)) = handover else {
                    return self.refuse(
                        from,
                        pid,
                        req,
                        "hand-over without a container".into(),
                        None,
                    );
                };
                container.set_host(self.host.clone());
                self.make_room(&[]);
                let arrival = Arrival::Migrated {
                    from,
                    req,
                    report,
                    times,
                    handed_over: true,
                    committed,
                };
                if let Err((why, back)) = self.arrive(*container, arrival) {
                    self.refuse(from, pid, req, why, back);
                }
            }
            MigrationMsg::Abort { pid, req } => {
                if self.incoming.get(&pid).is_some_and(|i| i.req == req) {
                    self.incoming.remove(&pid);
                }
            }
            MigrationMsg::Done { pid, req, result } => {
                self.on_migration_done(pid, req, result, handover)
            }
            MigrationMsg::Ask { pid, ask } => self.on_ask(pid, ask),
            // The node's links write these where they arrive; one that
            // reaches a kernel is written here the same way.
            MigrationMsg::Fill { pid, streamed } => {
                let fill = bulk.unwrap_or_default();
                let late = self.runtime.late_memories();
                if let Err(why) = late.fill(from, pid, &fill, streamed) {
                    tracing::warn!(kernel = %self.id, "dropped blocks from {from}: {why}");
                }
            }
        }
    }

    fn on_round(
        &mut self,
        from: KernelId,
        pid: Pid,
        req: u64,
        frame: u32,
        memory_follows: bool,
        bulk: Option<Vec<u8>>,
    ) -> Result<(), String> {
        let bulk = bulk.unwrap_or_default();
        let image = ProcessImage::decode_in_transit(&bulk).map_err(|e| e.to_string())?;
        if image.uarea.pid != pid {
            return Err(format!("round for {pid} carries {}", image.uarea.pid));
        }
        if frame == 0 {
            self.make_room(&[]);
            let mut container = Container::restore_view(&self.runtime, image, self.host.clone())
                .map_err(|e| e.to_string())?;
            if memory_follows {
                container.give_back_memory().map_err(|e| e.to_string())?;
            }
            self.incoming.insert(
                pid,
                Incoming {
                    from,
                    req,
                    container,
                    memory_follows,
                },
            );
            return Ok(());
        }
        let i = self
            .incoming
            .get_mut(&pid)
            .filter(|i| i.req == req && i.from == from)
            .ok_or_else(|| format!("frame {frame} of {pid} without frame 0"))?;
        i.container.apply(image).map_err(|e| e.to_string())
    }

    /// The stop-and-copy frame: the container, brought up to date. With
    /// `late` blocks, its memory follows (post-copy) once it is committed.
    fn on_final(
        &mut self,
        from: KernelId,
        pid: Pid,
        req: u64,
        bulk: Option<Vec<u8>>,
        late: Option<Vec<Range<u32>>>,
    ) -> Result<Container, String> {
        let incoming = self
            .incoming
            .remove(&pid)
            .filter(|i| i.req == req && i.from == from);
        let bulk = bulk.unwrap_or_default();
        let image = ProcessImage::decode_in_transit(&bulk).map_err(|e| e.to_string())?;
        if image.uarea.pid != pid {
            return Err(format!("final frame for {pid} carries {}", image.uarea.pid));
        }
        match (incoming, late) {
            (Some(i), Some(_)) if !i.memory_follows => Err(format!(
                "{pid} was sent in rounds: its memory cannot follow"
            )),
            (Some(_), Some(_)) if self.lends_memory(pid) => Err(format!(
                "kernel {} lends memory to another node: it awaits none meanwhile (post-copy)",
                self.id
            )),
            // Announced by a frame without memory (post-copy).
            (Some(mut i), Some(coming)) => {
                i.container
                    .apply_late(&self.runtime, image, &coming, from)
                    .map_err(|e| e.to_string())?;
                Ok(i.container)
            }
            (None, Some(coming)) => {
                self.make_room(&[]);
                let host = self.host.clone();
                Container::restore_late(&self.runtime, image, host, &coming, from, &mut self.spares)
                    .map_err(|e| e.to_string())
            }
            (Some(mut i), None) => {
                i.container.apply(image).map_err(|e| e.to_string())?;
                Ok(i.container)
            }
            (None, None) => {
                self.make_room(&[]);
                Container::restore_view(&self.runtime, image, self.host.clone())
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Without `userfaultfd`, a process whose memory follows it waits here
    /// (this kernel with it) until the memory is in, the source told that
    /// it runs here: it must not run on a memory that is not all there.
    /// If the memory never comes, the process ends.
    fn await_memory(&mut self, pid: Pid) {
        if self.runtime.late_memories().faults() {
            return;
        }
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if let Err(why) = p.container.settle() {
            tracing::warn!(kernel = %self.id, %pid, "killed: {why}");
            self.end(pid, status::killed(status::SIGKILL));
        }
    }

    /// Answers a migration that failed here, with the container if it was
    /// handed over (the source resumes it).
    fn refuse(&mut self, to: KernelId, pid: Pid, req: u64, why: String, back: Option<Handover>) {
        tracing::warn!(kernel = %self.id, %pid, "refusing a migration: {why}");
        self.transmit(
            to,
            Packet {
                handover: back,
                ..Packet::new(NocMsg::Migration(MigrationMsg::Done {
                    pid,
                    req,
                    result: Err(why),
                }))
            },
        );
    }

    /// Migrations coming from node `node`, which is lost: pre-copy frames
    /// of a source that is gone are dropped. A process restored here whose
    /// home is on that node can never be committed, so it is dropped too
    /// (its source does not resume it either: `departures_to_lost_node`).
    pub(crate) fn arrivals_from_lost_node(&mut self, node: u16) {
        self.incoming.retain(|_, i| i.from.node != node);
        let orphans: Vec<Pid> = self
            .arrivals
            .keys()
            .copied()
            .filter(|p| p.home.node == node)
            .collect();
        for pid in orphans {
            self.on_committed(pid, Err(format!("its home node {node} is down")));
        }
    }

    /// Restores a checkpointed process here; it runs once its home commits.
    pub(crate) fn restore(&mut self, image: ProcessImage, asker: JobAsker) -> Result<(), String> {
        self.make_room(&[]);
        let mut container = Container::restore(&self.runtime, image, self.host.clone())
            .map_err(|e| e.to_string())?;
        container
            .revive_ghosts(self.id.node)
            .map_err(|e| e.to_string())?;
        let u = container.uarea_mut();
        u.ipc.restored();
        u.console_flow.restored();
        self.arrive(container, Arrival::Restored(asker))
            .map_err(|(why, _)| why)
    }

    /// Holds a rebuilt process until its home kernel records that it runs
    /// here; until then the source still holds it and messages for it wait
    /// here. An error gives back a handed-over container.
    fn arrive(
        &mut self,
        container: Container,
        arrival: Arrival,
    ) -> Result<(), (String, Option<Handover>)> {
        let pid = container.uarea().pid;
        let handed_over = matches!(
            arrival,
            Arrival::Migrated {
                handed_over: true,
                ..
            }
        );
        let refuse = |why: String, container: Container| {
            (why, handed_over.then(|| Handover(Box::new(container))))
        };
        if self.procs.contains_key(&pid) || self.arrivals.contains_key(&pid) {
            return Err(refuse(
                format!("process {pid} already runs on kernel {}", self.id),
                container,
            ));
        }
        if matches!(arrival, Arrival::Migrated { .. }) && self.faults > 0 {
            self.faults -= 1;
            return Err(refuse(
                "injected fault at the destination".into(),
                container,
            ));
        }
        let u = container.uarea();
        let kin = Kin {
            parent: u.parent,
            console: u.console,
        };
        let adopt = matches!(arrival, Arrival::Restored(_)).then_some(kin);
        let committed = matches!(
            arrival,
            Arrival::Migrated {
                committed: true,
                ..
            }
        );
        self.arrivals.insert(
            pid,
            Arriving {
                process: Process::new(container),
                arrival,
                held: Vec::new(),
            },
        );
        if committed {
            self.on_committed(pid, Ok(()));
        } else if pid.home == self.id {
            let result = self.commit(pid, self.id, adopt);
            self.on_committed(pid, result);
        } else {
            let at = self.id;
            self.send(pid.home, NocMsg::Commit { pid, at, adopt });
        }
        Ok(())
    }

    /// At the home kernel: records that `pid` runs on `at`. A restored
    /// checkpoint (`adopt`, with whom to tell if it is lost) takes its PID
    /// back only if its slot is free: a checkpoint of a process that still
    /// runs must not make it run twice.
    pub(crate) fn commit(
        &mut self,
        pid: Pid,
        at: KernelId,
        adopt: Option<Kin>,
    ) -> Result<(), String> {
        if let Some(kin) = adopt {
            self.homes.adopt(pid, at, kin)
        } else if self.homes.relocate(pid, at) {
            Ok(())
        } else {
            Err(format!("home kernel {} knows no process {pid}", self.id))
        }
    }

    /// The home committed (or refused) the arrival of `pid`: it runs here
    /// now, or is dropped (a handed-over container goes back); either way
    /// whoever asked is answered.
    pub(crate) fn on_committed(&mut self, pid: Pid, result: Result<(), String>) {
        let Some(Arriving {
            mut process,
            arrival,
            held,
        }) = self.arrivals.remove(&pid)
        else {
            return;
        };
        match (arrival, result) {
            (Arrival::Restored(asker), Ok(())) => {
                // A poll's read ahead was asked of the console it was
                // captured under, which will not answer here.
                process.container.uarea_mut().stdin.asked = false;
                self.procs.insert(pid, process);
                self.placement.arrivals += 1;
                self.schedule(pid);
                self.ask_console(pid);
                self.answer_start(asker, Ok(pid));
            }
            (Arrival::Restored(asker), Err(why)) => self.answer_start(asker, Err(why)),
            (
                Arrival::Migrated {
                    from,
                    req,
                    mut report,
                    times,
                    handed_over,
                    ..
                },
                Ok(()),
            ) => {
                if handed_over && process.container.uarea().accounting.slices == 0 {
                    process.spare_home = Some(from);
                }
                // A process whose memory follows it asks its source for
                // it, or ends, soon: the answer may share that write
                // (the source keeps the memory whatever the answer's pace).
                let lazy = process.container.late_from().is_some();
                let u = process.container.uarea_mut();
                u.accounting.moves += 1;
                self.procs.insert(pid, process);
                self.placement.arrivals += 1;
                self.schedule(pid);
                let now = monotonic_ns();
                report.downtime_ns = now.saturating_sub(times.frozen_ns);
                report.downtime_us = report.downtime_ns / 1000;
                report.total_us = now.saturating_sub(times.requested_ns) / 1000;
                self.procs
                    .get_mut(&pid)
                    .expect("just inserted")
                    .container
                    .uarea_mut()
                    .accounting
                    .last_migration = Some((*report).clone());
                let done = NocMsg::Migration(MigrationMsg::Done {
                    pid,
                    req,
                    result: Ok(report),
                });
                match lazy {
                    true => self.send_lazily(from, done),
                    false => self.send(from, done),
                }
                self.await_memory(pid);
            }
            (
                Arrival::Migrated {
                    from,
                    req,
                    handed_over,
                    ..
                },
                Err(why),
            ) => {
                let back = handed_over.then(|| Handover(Box::new(process.container)));
                self.refuse(from, pid, req, why, back);
            }
        }
        if !self.procs.contains_key(&pid) {
            // The process stays where it came from; so do its messages.
            for packet in held {
                self.forward(pid, packet);
            }
            return;
        }
        for packet in held {
            self.deliver(pid, packet);
        }
        // Its domain may have ended while it was between kernels.
        if self.in_ended_domain(pid) {
            self.end(pid, status::killed(status::SIGKILL));
        }
    }
}
