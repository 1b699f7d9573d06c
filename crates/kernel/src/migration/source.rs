//! The source side of a migration: pre-copy rounds while the process runs,
//! the freeze, the stop-and-copy or hand-over, and the rollback.

use std::ops::Range;
use std::time::Duration;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_migration::{DirtyTracker, MigrationReport, Mode, Next, RoundReport, BLOCK};
use atoll_process::threads::Context;
use atoll_process::{mapped_ranges, CallState, KernelCall, MemoryView, Reply};
use quanta::Instant;

use crate::homes::Kin;
use crate::kernel::Process;
use crate::kernel::{monotonic_ns, Kernel};
use crate::msg::{Handover, MigrationMsg, NocMsg, Packet, ReplyTo, Times};

/// Memory that goes with a process moved before it has run (`Started::No`),
/// rather than after it: one 64 KiB frame.
const EAGER_MOST: usize = 64 << 10;

/// A process on its way out. While pre-copy runs it is still in `procs`
/// and runs; once frozen, it waits here for the destination's answer.
pub(crate) struct Departure {
    req: u64,
    to: KernelId,
    mode: Mode,
    /// Who asked: a node request, or the process itself (answered where it
    /// ends up).
    reply: ReplyTo,
    requested_ns: u64,
    /// When it froze (0 before), on this kernel's clock.
    frozen_ns: u64,
    rounds: Vec<RoundReport>,
    /// Where the next piece of round 0 starts (bytes), while it goes out.
    round0_at: Option<usize>,
    /// Pre-copy frames (pieces of round 0, later rounds) sent, and applied
    /// by the destination; the next step waits until all are applied.
    frames_sent: u32,
    frames_applied: u32,
    /// The process's [`saves`](atoll_process::threads::Threads::saves)
    /// when its last frame was encoded: the destination has every thread
    /// context numbered below it that the process still has, so the
    /// stop-and-copy leaves them out (a downtime that does not grow with
    /// the threads that did not run).
    contexts_sent: u64,
    /// The contexts the stop-and-copy gave as numbers: put back only if
    /// the process resumes here.
    left_out: Vec<Context>,
    phase: Phase,
    /// Its memory follows it (post-copy): the blocks that will, once
    /// frozen (empty before); `None` if its memory goes with it.
    late: Option<Vec<Range<u32>>>,
    /// It has not run and this kernel is its home (a forked child, a
    /// program exec'd here): the move is committed as it is sent, and the
    /// process runs at the destination once restored, without a commit's
    /// round trip. A failed move undoes it; a destination lost before it
    /// answers loses the process, which had done nothing yet.
    commit_here: bool,
    /// Messages for the process that arrived after it froze; they follow it
    /// to its destination, or are delivered here if it stays.
    pub held: Vec<Packet>,
    /// Frames of the process's next move here (from where this one took
    /// it), which overtook this move's answer on another connection:
    /// handled once that answer has ended this move.
    pub overtaken: Vec<(KernelId, MigrationMsg, Option<Vec<u8>>)>,
    /// The balancer asked for it: a copy to another node a round of which
    /// finds the process rewriting its memory faster than the link carries
    /// it is called off ([`Kernel::precopy_step`]) rather than made at any
    /// cost. A move someone asked for is always made.
    by_balancer: bool,
}

enum Phase {
    /// Memory goes out in rounds while the process runs.
    PreCopy { tracker: DirtyTracker },
    /// Post-copy of a running process: a first frame without memory makes
    /// its container at the destination while it still runs, so that the
    /// freeze, once that frame is applied, waits for neither the instance
    /// nor the giving back of its pages (about 2 ms of the downtime).
    Announced,
    /// Frozen and sent. The process is kept for a rollback; during a
    /// hand-over it is in flight, and comes back in `Done` if it fails.
    /// The tracker is kept too: unprotecting a large memory takes
    /// milliseconds, which the destination (or the home kernel, if it is
    /// this one) should not wait for. It must go before the memory does.
    Frozen {
        tracker: Option<DirtyTracker>,
        process: Option<Process>,
    },
}

impl Departure {
    pub(crate) fn is_frozen(&self) -> bool {
        matches!(self.phase, Phase::Frozen { .. })
    }

    /// The kernel the process is moving to.
    pub(crate) fn to(&self) -> KernelId {
        self.to
    }

    /// Its memory follows it (post-copy).
    pub(crate) fn memory_follows(&self) -> bool {
        self.late.is_some()
    }
}

/// Whether a process's memory may change while it is being moved.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Started {
    /// It has run, and may run again until it is frozen: copy mode copies
    /// its memory in pre-copy rounds while it does.
    Yes,
    /// Made or remade here (fork, exec) and not yet scheduled: nothing
    /// writes its memory before it arrives, so copy mode sends it at once,
    /// as it sends a dormant process (no pre-copy round to wait for).
    No,
}

impl Kernel {
    /// Starts moving `pid`, which runs here, to kernel `to`, of this node
    /// or another. `reply` hears how it went, unless this fails at once.
    /// Between machines only copy mode exists: it is the default there, and
    /// a hand-over is refused.
    pub(crate) fn migrate(
        &mut self,
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
        reply: ReplyTo,
    ) -> Result<(), String> {
        self.depart(pid, to, mode, reply, Started::Yes)
    }

    /// As [`migrate`](Self::migrate), for a process that may not have run
    /// yet ([`Started`]).
    pub(crate) fn depart(
        &mut self,
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
        reply: ReplyTo,
        started: Started,
    ) -> Result<(), String> {
        let remote = to.node != self.id.node;
        let mode = match mode {
            Some(Mode::Handover) if remote => {
                return Err(format!(
                    "kernel {to} is on another node: a hand-over never leaves its machine (use copy mode)"
                ))
            }
            Some(Mode::PostCopy) if !remote => {
                return Err(format!(
                    "kernel {to} is on this node: post-copy moves a process between nodes (within one, a hand-over copies nothing)"
                ))
            }
            Some(m) => m,
            None if remote => Mode::Copy,
            None => self.migration.mode,
        };
        if !self.procs.contains_key(&pid) {
            return Err(self.not_here(pid));
        }
        if self.departures.contains_key(&pid) {
            return Err(format!("process {pid} is already migrating"));
        }
        if self.in_exec(pid) {
            return Err(format!("process {pid} is replacing its program (exec)"));
        }
        if to == self.id {
            let report = MigrationReport {
                pid,
                from: to,
                to,
                mode,
                rounds: Vec::new(),
                downtime_us: 0,
                downtime_ns: 0,
                total_us: 0,
            };
            self.answer_migration(reply, Ok(report));
            return Ok(());
        }
        if !self.noc_reaches(to) {
            return Err(format!("kernel {to} does not exist or cannot be reached"));
        }
        // Pre-copy also serves a blocked process: it stays able to take
        // messages (and run) while its memory is copied, and its freeze
        // then sends only what it wrote. A dormant process is its image
        // already, and one not started yet cannot write: each is sent at
        // once.
        let container = &mut self.procs.get_mut(&pid).expect("checked").container;
        // Its memory must be whole before it is read.
        if let Err(e) = container.settle() {
            return Err(format!("cannot move {pid}: {e}"));
        }
        if mode == Mode::PostCopy && self.awaits_memory() {
            return Err(format!(
                "kernel {} awaits the memory of a process from another node: it lends none until that is in (post-copy)",
                self.id
            ));
        }
        let container = &mut self.procs.get_mut(&pid).expect("checked").container;

        // Its memory follows it when asked to (post-copy), and when it has
        // not run (a fork, an exec), which no pre-copy round could spare.
        // A program that has not started (exec) has only its data
        // segments, which it reads at once: they go with it.
        let late = remote
            && (mode == Mode::PostCopy || (mode == Mode::Copy && started == Started::No))
            && !container.is_dormant()
            && container.uarea().started;
        let tracker = if mode == Mode::Copy
            && self.migration.policy.max_rounds > 0
            && started == Started::Yes
            && !container.is_dormant()
        {
            let memory = container.memory_mut();
            DirtyTracker::start(memory)
                .inspect_err(|e| {
                    tracing::warn!(kernel = %self.id, %pid,
                        "no dirty-page tracking ({e}); migrating by stop-and-copy only")
                })
                .ok()
        } else {
            None
        };
        let precopy = tracker.is_some();
        // A running process's container is made there before it stops; a
        // forked child's or an exec'd program's needs no such head start:
        // it is committed as it leaves, and has not run.
        let announce = late && mode == Mode::PostCopy && started == Started::Yes;
        let req = self.next_request();
        let departure = Departure {
            req,
            to,
            mode,
            reply,
            requested_ns: monotonic_ns(),
            frozen_ns: 0,
            rounds: Vec::new(),
            round0_at: precopy.then_some(0),
            frames_sent: 0,
            frames_applied: 0,
            contexts_sent: 0,
            left_out: Vec::new(),
            late: late.then(Vec::new),
            commit_here: started == Started::No && pid.home == self.id,
            phase: match tracker {
                Some(tracker) => Phase::PreCopy { tracker },
                None if announce => Phase::Announced,
                // Frozen right below.
                None => Phase::Frozen {
                    tracker: None,
                    process: None,
                },
            },
            held: Vec::new(),
            overtaken: Vec::new(),
            by_balancer: false,
        };
        self.departures.insert(pid, departure);
        if announce {
            // Frozen once this frame is applied (`precopy_step`).
            return self.send_round(pid, Vec::new());
        }
        if precopy {
            // The first piece starts the process at the destination; the
            // rest of the window follows it, and each piece applied there
            // lets another go (`on_round_applied`).
            self.send_round(pid, Vec::new())?;
            self.precopy_step(pid);
            return Ok(());
        }
        self.freeze(pid, Vec::new()).inspect_err(|_| {
            self.departures.remove(&pid);
        })
    }

    /// As [`migrate`](Self::migrate), for the balancer: a copy to another
    /// node may be called off during its pre-copy.
    pub(crate) fn migrate_for_balancer(
        &mut self,
        pid: Pid,
        to: KernelId,
        mode: Option<Mode>,
    ) -> Result<(), String> {
        self.migrate(pid, to, mode, ReplyTo::Process(pid))?;
        if let Some(d) = self.departures.get_mut(&pid) {
            d.by_balancer = true;
        }
        Ok(())
    }

    fn departure(&mut self, pid: Pid) -> &mut Departure {
        self.departures.get_mut(&pid).expect("a departure")
    }

    /// Sends the next pre-copy frame: the next piece of round 0 while it
    /// lasts (the first piece starts the process at the destination), else
    /// a round of the `dirty` blocks.
    fn send_round(&mut self, pid: Pid, dirty: Vec<u32>) -> Result<(), String> {
        let t = Instant::now();
        let chunk = self.migration.policy.chunk_bytes as usize;
        let d = self.departures.get_mut(&pid).expect("a departure");
        let container = &mut self.procs.get_mut(&pid).expect("pre-copy").container;
        let piece = d.round0_at.map(|at| {
            let len = container.memory_bytes();
            let end = (at + chunk.max(BLOCK)).min(len);
            d.round0_at = (end < len).then_some(end);
            (at, end)
        });
        let module = container.uarea().module;
        let announced = matches!(d.phase, Phase::Announced);
        let image = match piece {
            Some((at, end)) => container.encode(|bytes| MemoryView {
                // The memory the destination starts from is zero but for
                // this piece; later pieces fill in the rest.
                complete: at == 0,
                ..MemoryView::nonzero(bytes, (at / BLOCK) as u32..end.div_ceil(BLOCK) as u32)
            }),
            // Its memory follows after the freeze.
            None if announced => container.encode(|bytes| MemoryView {
                complete: true,
                ..MemoryView::blocks_of(bytes, [])
            }),
            None => container.encode(|bytes| MemoryView::blocks_of(bytes, dirty)),
        };
        let image = match image {
            Ok(i) => i,
            Err(e) => {
                self.departures.remove(&pid);
                return Err(format!("cannot capture {pid}: {e}"));
            }
        };
        let (req, to, frame) = (d.req, d.to, d.frames_sent);
        d.frames_sent += 1;
        d.contexts_sent = container.uarea().threads.saves();
        let round = MigrationMsg::Round {
            pid,
            req,
            frame,
            module,
            memory_follows: announced,
        };
        let blocks = image.blocks as u64;
        let bytes = self.send_image(to, round, image.bytes);
        let d = self.departure(pid);
        if announced {
            // Not a round of memory: the report's rounds are those.
            return Ok(());
        }
        let us = t.elapsed().as_micros() as u64;
        match (piece, d.rounds.last_mut()) {
            (Some((at, _)), Some(r)) if at > 0 => {
                r.blocks += blocks;
                r.bytes += bytes;
                r.us += us;
            }
            _ => d.rounds.push(RoundReport { blocks, bytes, us }),
        }
        Ok(())
    }

    fn send_image(&mut self, to: KernelId, msg: MigrationMsg, bytes: Vec<u8>) -> u64 {
        let len = bytes.len() as u64;
        self.transmit(
            to,
            Packet {
                bulk: Some(bytes),
                ..Packet::new(NocMsg::Migration(msg))
            },
        );
        len
    }

    /// The destination applied a pre-copy frame: the next step is taken
    /// now (the process is between two slices, at a safepoint), so the
    /// link, not the process's quantum, paces every round. Waiting for the
    /// slice to end cost up to a quantum (10 ms) per round after the first;
    /// the process runs while each frame is on its way, which is what the
    /// next round's dirty set measures.
    pub(crate) fn on_round_applied(&mut self, pid: Pid, req: u64, frame: u32) {
        let Some(d) = self.departures.get_mut(&pid).filter(|d| d.req == req) else {
            return;
        };
        d.frames_applied = d.frames_applied.max(frame + 1);
        self.precopy_step(pid);
    }

    /// After a slice of a process in pre-copy, or a frame applied: pieces
    /// of round 0 until the policy's window is in flight (one within a
    /// node); then, once the destination has applied every frame sent,
    /// another round or the freeze.
    pub(crate) fn precopy_step(&mut self, pid: Pid) {
        if let Some(d) = self
            .departures
            .get(&pid)
            .filter(|d| matches!(d.phase, Phase::Announced))
        {
            if d.frames_applied == d.frames_sent {
                self.freeze_or_fail(pid, None);
            }
            return;
        }
        let window = match self.departures.get(&pid) {
            Some(d) if d.to.node == self.id.node => 1,
            Some(_) => self.migration.policy.window.max(1),
            None => return,
        };
        loop {
            let Some(d) = self.departures.get(&pid) else {
                return;
            };
            if !matches!(d.phase, Phase::PreCopy { .. }) {
                return;
            }
            let in_flight = d.frames_sent - d.frames_applied;
            if d.round0_at.is_none() {
                if in_flight > 0 {
                    return;
                }
                break;
            }
            if in_flight >= window {
                return;
            }
            if let Err(why) = self.send_round(pid, Vec::new()) {
                return self.fail_departure(pid, why);
            }
        }
        let Some(d) = self.departures.get_mut(&pid) else {
            return;
        };
        let Phase::PreCopy { tracker } = &mut d.phase else {
            return;
        };
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let dirty = match tracker.take(p.container.memory_mut()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(kernel = %self.id, %pid, "dirty tracking failed ({e}); sending all");
                return self.freeze_or_fail(pid, None);
            }
        };
        let rounds = d.rounds.len() as u32;
        let previous = d.rounds.last().map_or(0, |r| r.blocks) * BLOCK as u64;
        let bytes = dirty.len() as u64 * BLOCK as u64;
        // Round 0 sent the whole memory (but its zero blocks).
        let whole = d.rounds.first().map_or(0, |r| r.blocks) * BLOCK as u64;
        let dear = bytes > self.migration.policy.small_bytes && bytes * 4 >= whole;
        if d.by_balancer && d.to.node != self.id.node && dear {
            let took = Duration::from_nanos(monotonic_ns().saturating_sub(d.requested_ns));
            let (to, ratio) = (d.to, bytes as f64 / whole.max(1) as f64);
            return self.call_off_dear_move(pid, to, took, ratio);
        }
        let runnable = self.run_queue.contains(pid);
        match self.migration.policy.next(rounds, previous, bytes) {
            Next::Round if runnable => {
                if let Err(why) = self.send_round(pid, dirty) {
                    self.fail_departure(pid, why);
                }
            }
            next => {
                tracing::debug!(kernel = %self.id, %pid, ?next, rounds, "pre-copy done");
                self.freeze_or_fail(pid, Some(dirty));
            }
        }
    }

    /// A move the balancer started to node `to` found, after a round (the
    /// rounds so far took `took`), `ratio` times as many bytes rewritten as
    /// the first round sent: a quarter of its memory or more. The rest
    /// would send them again, a round at a time, and stop the process to
    /// send what the rounds do not shrink: at least `took` × (1 + 2 ×
    /// `ratio`), with the process stopped for up to a round, and far more
    /// when the rounds stall (`atoll migrate` of a process rewriting all of
    /// its 64 MiB, beside another on its kernel, took 815 ms, ten times its
    /// first round, 74 ms of it stopped). A process that rewrites less than
    /// that, however often, is worth its move: its rounds shrink to its
    /// working set.
    ///
    /// The move is called off instead: the process never stopped. The
    /// balancer counts its stay here from now and weighs its next move to
    /// another node at that projected cost, doubled at each move called off
    /// (`far_move_cost`): it is tried again only once the process has been
    /// here ten times as long, and moves that keep failing ever more rarely.
    fn call_off_dear_move(&mut self, pid: Pid, to: KernelId, took: Duration, ratio: f64) {
        let before = self.procs.get(&pid).and_then(|p| p.far_copy);
        let projected = took
            .mul_f64(1.0 + 2.0 * ratio)
            .max(before.unwrap_or_default() * 2);
        tracing::info!(kernel = %self.id, %pid,
            "balancer: move to {to} called off after {took:?}: the process rewrote {:.0} % of \
             its memory in a round; a copy is projected to take {projected:?}",
            ratio * 100.0);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.arrived = std::time::Instant::now();
            p.far_copy = Some(projected);
        }
        self.placement.called_off += 1;
        self.call_off_departure(
            pid,
            "called off: the process rewrites its memory faster than the link carries it".into(),
        );
    }

    fn freeze_or_fail(&mut self, pid: Pid, dirty: Option<Vec<u32>>) {
        if let Err(why) = self.freeze(pid, dirty.unwrap_or_default()) {
            self.fail_departure(pid, why);
        }
    }

    /// Stops `pid` (it is between slices: at a safepoint) and sends the rest
    /// of it: the container itself, or the blocks still dirty (`dirty`, plus
    /// what the tracker recorded since) with globals and UArea. Without
    /// pre-copy the image is complete.
    fn freeze(&mut self, pid: Pid, mut dirty: Vec<u32>) -> Result<(), String> {
        let frozen_ns = monotonic_ns();
        let t = Instant::now();
        // Messages its senders here still keep in their memories go into
        // its queue first: the queue is in the UArea and travels.
        self.ipc_detach(pid);
        let d = self.departures.get_mut(&pid).expect("a departure");
        let phase = std::mem::replace(
            &mut d.phase,
            Phase::Frozen {
                tracker: None,
                process: None,
            },
        );
        let container = &mut self
            .procs
            .get_mut(&pid)
            .expect("migrating from here")
            .container;
        let mut tracker = match phase {
            Phase::PreCopy { tracker } => Some(tracker),
            Phase::Announced | Phase::Frozen { .. } => None,
        };
        // Leaving this node, it keeps the files it has open here: this
        // kernel holds them, and serves them to it from afar. Its output
        // from here goes before what it writes there.
        if d.to.node != self.id.node {
            container.hold_files(&mut self.held, self.id, d.to.node);
            container.leave_node();
        }
        let image = match (d.mode, &mut tracker) {
            (Mode::Handover, _) => None,
            (_, Some(tracker)) => {
                let more = tracker
                    .finish(container.memory_mut())
                    .map_err(|e| format!("dirty tracking failed: {e}"))?;
                dirty.extend(more);
                dirty.sort_unstable();
                dirty.dedup();
                let threads = &mut container.uarea_mut().threads;
                d.left_out = threads.leave_out_sent(d.contexts_sent);
                Some(container.encode(|bytes| MemoryView::blocks_of(bytes, dirty)))
            }
            // What it reads on resuming goes with it, the rest after, unless
            // the rest is small: a fault's round trip costs more than its
            // bytes.
            (Mode::Copy | Mode::PostCopy, None) if d.late.is_some() => {
                let first = container.resume_blocks();
                let rest = without(mapped_ranges(container.memory()), &first);
                let bytes = rest.iter().map(|r| r.len()).sum::<usize>() * BLOCK;
                if bytes <= EAGER_MOST {
                    d.late = None;
                    Some(container.encode(|b| MemoryView::whole(b)))
                } else {
                    d.late = Some(rest);
                    Some(container.encode(|b| MemoryView {
                        complete: true,
                        ..MemoryView::blocks_of(b, first)
                    }))
                }
            }
            (Mode::Copy | Mode::PostCopy, None) => Some(container.encode(|b| MemoryView::whole(b))),
        };
        let image = image.transpose().map_err(|e| {
            let left_out = std::mem::take(&mut d.left_out);
            container.uarea_mut().threads.put_back(left_out);
            format!("cannot capture {pid}: {e}")
        })?;
        let mut p = self.procs.remove(&pid).expect("checked above");
        self.run_queue.remove(pid);
        let d = self.departures.get_mut(&pid).expect("a departure");
        d.frozen_ns = frozen_ns;
        let times = Times {
            requested_ns: d.requested_ns,
            frozen_ns,
            sent_ns: monotonic_ns(),
        };
        let (req, to, committed) = (d.req, d.to, d.commit_here);
        let alone = d.frames_sent == 0;
        if committed {
            self.homes.relocate(pid, to);
        }
        let mut report = Box::new(MigrationReport {
            pid,
            from: self.id,
            to,
            mode: d.mode,
            rounds: std::mem::take(&mut d.rounds),
            downtime_us: 0,
            downtime_ns: 0,
            total_us: 0,
        });
        let Some(image) = image else {
            let packet = Packet {
                handover: Some(Handover(Box::new(p.container))),
                ..Packet::new(NocMsg::Migration(MigrationMsg::Handover {
                    pid,
                    req,
                    report,
                    times,
                    committed,
                }))
            };
            self.transmit(to, packet);
            return Ok(());
        };
        report.rounds.push(RoundReport {
            blocks: image.blocks as u64,
            bytes: image.bytes.len() as u64,
            us: t.elapsed().as_micros() as u64,
        });
        let module = p.container.uarea().module;
        let late = d.late.clone();
        // Copied within the node, it keeps its host files open there too.
        let files = (to.node == self.id.node).then(|| Box::new(p.container.duplicate_files()));
        d.phase = Phase::Frozen {
            tracker,
            process: Some(p),
        };
        self.transmit(
            to,
            Packet {
                bulk: Some(image.bytes),
                files,
                ..Packet::new(NocMsg::Migration(MigrationMsg::Final {
                    pid,
                    req,
                    module,
                    report,
                    times,
                    late,
                    alone,
                    committed,
                }))
            },
        );
        Ok(())
    }

    /// A migration that failed before its process froze (or that could not
    /// freeze it): the process goes on running here.
    fn fail_departure(&mut self, pid: Pid, why: String) {
        if self.departures.contains_key(&pid) {
            tracing::warn!(kernel = %self.id, %pid, "migration failed, process stays: {why}");
        }
        self.call_off_departure(pid, why);
    }

    /// Tells the destination and the asker that `pid` is not coming, and
    /// lets it go on here.
    fn call_off_departure(&mut self, pid: Pid, why: String) {
        if let Some(d) = self.departures.remove(&pid) {
            let abort = NocMsg::Migration(MigrationMsg::Abort { pid, req: d.req });
            self.transmit(
                d.to,
                Packet {
                    bulk: Some(Vec::new()),
                    ..Packet::new(abort)
                },
            );
            self.answer_migration(d.reply, Err(why));
            self.resume_after_failed_move(pid, d.to);
        }
    }

    /// `pid` ends (exits, is killed) here while in pre-copy: the migration
    /// is abandoned. Not a failure: a program may end at any moment, and
    /// it ends here, whole.
    pub(crate) fn abandon_departure(&mut self, pid: Pid, status: i32) {
        if self.departures.get(&pid).is_some_and(|d| !d.is_frozen()) {
            tracing::info!(kernel = %self.id, %pid, status, "migration called off: the process ended");
            self.call_off_departure(
                pid,
                format!("process ended during the migration (status {status})"),
            );
        }
    }

    /// The destination answered: the process runs there, or it resumes here.
    pub(crate) fn on_migration_done(
        &mut self,
        pid: Pid,
        req: u64,
        result: Result<Box<MigrationReport>, String>,
        returned: Option<Handover>,
    ) {
        if self.departures.get(&pid).is_none_or(|d| d.req != req) {
            return;
        }
        let mut d = self.departures.remove(&pid).expect("checked above");
        let overtaken = std::mem::take(&mut d.overtaken);
        match result {
            Ok(mut report) => {
                if d.to.node != self.id.node {
                    // The destination's clock is another machine's: measure
                    // here, up to this answer (an upper bound by its trip).
                    let now = monotonic_ns();
                    report.downtime_ns = now.saturating_sub(d.frozen_ns);
                    report.downtime_us = report.downtime_ns / 1000;
                    report.total_us = now.saturating_sub(d.requested_ns) / 1000;
                    // Copied whole: a memory that follows later (post-copy)
                    // says nothing of what a copy takes.
                    if let (
                        Phase::Frozen {
                            process: Some(p), ..
                        },
                        None,
                    ) = (&d.phase, &d.late)
                    {
                        let memory = p.container.memory_bytes() as u64;
                        self.placement.copied(memory, report.total_us);
                    }
                }
                tracing::info!(kernel = %self.id, "migrated {}", report.summary());
                for packet in d.held {
                    self.transmit(d.to, packet);
                }
                self.answer_migration(d.reply, Ok(*report));
                if let Phase::Frozen { tracker, process } = d.phase {
                    drop(tracker);
                    // Its memory follows it from here (post-copy).
                    if let (Some(late), Some(p)) = (d.late, process) {
                        self.lend(pid, d.to, p, &late);
                    }
                }
            }
            Err(why) => {
                if d.commit_here {
                    self.homes.relocate(pid, self.id);
                }
                let process = match d.phase {
                    // Writable again before it runs.
                    Phase::Frozen {
                        tracker,
                        process: Some(mut p),
                    } => {
                        drop(tracker);
                        p.container.uarea_mut().threads.put_back(d.left_out);
                        Some(p)
                    }
                    Phase::Frozen { process: None, .. } => {
                        returned.map(|Handover(c)| Process::new(*c))
                    }
                    // Refused while still in pre-copy: it never stopped.
                    Phase::PreCopy { .. } | Phase::Announced => None,
                };
                tracing::warn!(kernel = %self.id, %pid, "migration failed, process resumes here: {why}");
                match process {
                    Some(mut p) => {
                        p.container.set_host(self.host.clone());
                        if let Some(reply) = answer_after_failed_move(&p, d.to) {
                            p.container.reply(reply);
                        }
                        self.procs.insert(pid, p);
                        self.schedule(pid);
                        for packet in d.held {
                            self.deliver(pid, packet);
                        }
                    }
                    None if self.procs.contains_key(&pid) => {
                        self.resume_after_failed_move(pid, d.to)
                    }
                    None => tracing::error!(kernel = %self.id, %pid,
                        "a handed-over process did not come back from a failed migration"),
                }
                self.answer_migration(d.reply, Err(why));
            }
        }
        for (from, msg, bulk) in overtaken {
            self.on_migration(from, msg, bulk, None, None);
        }
    }

    /// Migrations to node `node`, which is lost. One still in pre-copy fails
    /// (the process never stopped). A frozen one resumes here unless its
    /// home committed the move, in which case the process ran there and is
    /// lost with it; if its home is lost too, nobody can say, and the
    /// process is lost rather than risk running twice.
    pub(crate) fn departures_to_lost_node(&mut self, node: u16) {
        let lost: Vec<(Pid, u64, bool)> = self
            .departures
            .iter()
            .filter(|(_, d)| d.to.node == node)
            .map(|(&pid, d)| (pid, d.req, d.is_frozen()))
            .collect();
        for (pid, req, frozen) in lost {
            let why = format!("the destination's node {node} is down");
            if !frozen {
                self.fail_departure(pid, why);
            } else if pid.home.node == node {
                self.lose_departure(pid, why);
            } else {
                let at = self.id;
                self.send(pid.home, NocMsg::Reclaim { pid, at, req });
            }
        }
    }

    /// The home's answer to `Reclaim`: resume the frozen process here, or
    /// drop it (the home has told its parent or console that it was lost).
    pub(crate) fn on_reclaimed(&mut self, pid: Pid, req: u64, resume: bool) {
        if self.departures.get(&pid).is_none_or(|d| d.req != req) {
            return;
        }
        let why = "the destination's node is down".to_string();
        if resume {
            self.on_migration_done(pid, req, Err(why), None);
        } else if let Some(d) = self.departures.remove(&pid) {
            tracing::warn!(kernel = %self.id, %pid, "lost with the destination's node");
            self.answer_migration(d.reply, Err(format!("{why}: {pid} was lost with it")));
        }
    }

    /// Drops a frozen departure whose process is lost, and says so.
    fn lose_departure(&mut self, pid: Pid, why: String) {
        let Some(d) = self.departures.remove(&pid) else {
            return;
        };
        tracing::warn!(kernel = %self.id, %pid, "lost: {why}");
        if let Phase::Frozen {
            tracker,
            process: Some(p),
        } = d.phase
        {
            drop(tracker);
            let u = p.container.uarea();
            let kin = Kin {
                parent: u.parent,
                console: u.console,
            };
            self.mourn(pid, kin);
        }
        self.answer_migration(d.reply, Err(format!("{why}: {pid} was lost with it")));
    }

    /// A move to `to` that failed before the process left: a process in
    /// `kmigrate_to` is answered ([`answer_after_failed_move`]), and one
    /// held back to first run at the destination (a forked child) runs here.
    fn resume_after_failed_move(&mut self, pid: Pid, to: KernelId) {
        if let Some(reply) = self
            .procs
            .get(&pid)
            .and_then(|p| answer_after_failed_move(p, to))
        {
            self.reply_now(pid, reply);
        }
        // A forked child waits, unscheduled, to first run where it goes.
        let waiting = self
            .procs
            .get(&pid)
            .is_some_and(|p| matches!(p.container.uarea().call, CallState::Replied(_)));
        if waiting && !self.run_queue.contains(pid) {
            self.run_queue.push(pid);
        }
    }
}

/// `ranges` (ascending) without the blocks `cut` (ascending).
fn without(ranges: Vec<Range<u32>>, cut: &[u32]) -> Vec<Range<u32>> {
    let mut out = Vec::with_capacity(ranges.len() + cut.len());
    let mut cut = cut.iter().copied().peekable();
    for r in ranges {
        let mut start = r.start;
        while let Some(&c) = cut.peek() {
            if c >= r.end {
                break;
            }
            if c >= start {
                if c > start {
                    out.push(start..c);
                }
                start = c + 1;
            }
            cut.next();
        }
        if start < r.end {
            out.push(start..r.end);
        }
    }
    out
}

/// What a process waiting in `kmigrate_to` is told when a move of it to
/// `to` failed: if it asked for that move, that it stays (`EAGAIN`); if it
/// asked to go elsewhere while that move was in flight, to ask again.
fn answer_after_failed_move(p: &Process, to: KernelId) -> Option<Reply> {
    match p.container.uarea().call {
        CallState::Blocked(KernelCall::Migrate { to: asked }) if asked == to => {
            Some(Reply::Migrated(Err(Errno::Again)))
        }
        CallState::Blocked(KernelCall::Migrate { .. }) => Some(Reply::Retry),
        _ => None,
    }
}
