//! This kernel's part in placement (DESIGN.md, "Placement"): its share of
//! the DQDT ([`atoll_placement::Dqdt`]), told its load every
//! [`PERIOD`](atoll_placement::PERIOD) (every
//! [`QUIET_PERIOD`](atoll_placement::QUIET_PERIOD) while it has nothing to
//! do and knows of nothing to take); new processes placed by descending
//! the tree, asking the host of a subtree off this kernel's path
//! (`NocMsg::Place`) to go on; and the balancer, which moves runnable
//! processes from the most to the least loaded child of each subtree this
//! kernel hosts, and work stealing, by which a kernel that runs out of work
//! asks at once for some. A move to another node copies the process: the
//! balancer weighs what that costs ([`far_move_cost`]).

use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use atoll_abi::{KernelId, Pid};
use atoll_migration::{MigrationReport, Mode};
use atoll_placement::{Dqdt, Load, Shape, Step, Subtree, Toward, PERIOD, QUIET_PERIOD};

use crate::kernel::Kernel;
use crate::msg::{NocMsg, ProcessSpec};

/// A placement asked of another kernel is given up after this long (that
/// kernel's node may have been lost), and made here instead.
const ASK_LIMIT: Duration = Duration::from_secs(2);
/// The balancer moves a process only once it has been on its kernel this
/// long: a process that has just started, and may be about to end, stays.
const SETTLED: Duration = Duration::from_millis(20);
/// And a process the balancer has moved before only after this long on
/// its kernel: a process moves at most this often, whatever the loads do,
/// except to an idle kernel of its node, which may take it after
/// [`SETTLED`] (a hand-over costs tens of microseconds).
const RESIDENCE: Duration = Duration::from_millis(500);
/// A move to another node copies the process over the link while it runs
/// (pre-copy): the balancer makes one only once the process has been on
/// its kernel this many times what the move is expected to take, so that a
/// process spends at most about a tenth of its time being moved between
/// nodes, however large it is and however fast it rewrites its memory.
const COST_FACTOR: u32 = 10;
/// What a copy to another node carries, in bytes per second, until this
/// kernel has measured its own: a 10 Gbit/s link's worth, and about what
/// the TLS links carry over loopback on the test machine
/// (bench/results/cluster.md).
const COPY_RATE: f64 = 1e9;
/// A copy smaller than this tells the link's latency more than its rate:
/// it does not change the estimate.
const RATE_FROM_BYTES: u64 = 1 << 20;
/// An idle kernel asks for work at most this often (its request may find
/// nothing to move: it asks again, no sooner than this).
const STEAL_EVERY: Duration = Duration::from_millis(2);
/// A kernel ignores a request to give to a kernel it gave processes to this
/// recently: the request was made before they arrived (a steal and a
/// decision of the balancer can cross).
const GAVE_LATELY: Duration = STEAL_EVERY;
/// The balancer moves only processes whose slices last this long on
/// average: CPU-bound ones. One in IPC ping-pong runs for microseconds at a
/// time; moving it would part it from its partner and even nothing out.
const CPU_BOUND_SLICE_NS: u64 = 1_000_000;
/// The memory of a kernel's processes is summed every this many ticks (it
/// walks every process).
const MEMORY_EVERY: u32 = 10;

/// What to do once a placement has found its kernel.
pub(crate) enum AfterPlace {
    /// Create a spawned child there.
    Spawn { parent: Pid, spec: ProcessSpec },
    /// Run a process made or remade here (fork's child, exec) there; `told`
    /// hears if it cannot move.
    Run { pid: Pid, told: Pid },
    /// Move a runnable process there (the balancer); `idle`: a kernel that
    /// had nothing to run.
    Move { pid: Pid, idle: bool },
    /// Tell the node (`Control::Place`).
    Answer(Sender<KernelId>),
}

/// The kernel's placement state.
pub(crate) struct Placement {
    pub dqdt: Dqdt,
    /// Whether this kernel's balancer moves processes (`atoll node
    /// --no-balance` turns it off).
    pub balance: bool,
    /// On quanta's clock, which the loop reads at every turn (cheaper than
    /// the system's).
    next_tick: quanta::Instant,
    last_tick: quanta::Instant,
    ticks: u32,
    /// Nanoseconds spent running processes since the last tick.
    pub busy_ns: u64,
    memory: u64,
    /// Placements asked of another kernel, by token.
    asked: HashMap<u64, (AfterPlace, Instant)>,
    next_token: u64,
    /// Next kernel for a placement made before the tree is known.
    next_target: u16,
    /// Moves this kernel's balancer started.
    pub moves: u64,
    /// Of those, the moves to a kernel that had nothing to run (work
    /// stealing).
    pub moves_to_idle: u64,
    /// Of those, moves to another node called off during their pre-copy
    /// (`call_off_dear_move`).
    pub called_off: u64,
    /// Whether the kernel had nothing to run when it last looked: running
    /// out of work is when it steals.
    idle: bool,
    /// When this kernel last asked for work (on quanta's clock: it is read
    /// each time the kernel runs out, which IPC between kernels makes
    /// frequent).
    stole_at: Option<quanta::Instant>,
    /// When this kernel last gave a process to each kernel.
    gave: HashMap<KernelId, Instant>,
    /// Processes created here or arrived (the DQDT's `Load::arrivals`).
    pub arrivals: u64,
    /// The rate, in bytes of a process's memory per second, at which this
    /// kernel's copies to other nodes moved processes, smoothed
    /// ([`COPY_RATE`] before the first). Blocks a process rewrote while it
    /// was copied are sent again, and lower it.
    copy_rate: f64,
}

impl Placement {
    pub(crate) fn new(me: KernelId, nodes: Vec<(u16, u16)>, balance: bool) -> Placement {
        let now = quanta::Instant::now();
        Placement {
            dqdt: Dqdt::new(me, Shape::new(nodes)),
            balance,
            next_tick: now,
            last_tick: now,
            ticks: 0,
            busy_ns: 0,
            memory: 0,
            asked: HashMap::new(),
            next_token: 0,
            next_target: me.index,
            moves: 0,
            moves_to_idle: 0,
            called_off: 0,
            idle: false,
            stole_at: None,
            gave: HashMap::new(),
            arrivals: 0,
            copy_rate: COPY_RATE,
        }
    }

    /// The rate, in bytes per second, at which a copy to another node is
    /// expected to move a process's memory.
    pub(crate) fn copy_rate(&self) -> f64 {
        self.copy_rate
    }

    /// A copy to another node of a process whose memory held `bytes` took
    /// `total_us`, from its request to the destination's answer.
    pub(crate) fn copied(&mut self, bytes: u64, total_us: u64) {
        if bytes >= RATE_FROM_BYTES && total_us > 0 {
            let rate = bytes as f64 * 1e6 / total_us as f64;
            self.copy_rate += (rate - self.copy_rate) / 4.0;
        }
    }

    /// How long until the next tick is due (zero: it is).
    pub(crate) fn until_tick(&self) -> Duration {
        self.next_tick
            .saturating_duration_since(quanta::Instant::now())
    }

    /// Whether the next tick is due at `now`.
    pub(crate) fn tick_due(&self, now: quanta::Instant) -> bool {
        now >= self.next_tick
    }

    /// Brings the next tick to at most a [`PERIOD`] after the last: a
    /// process came, or loads were heard, which a quiet kernel's long
    /// tick ([`QUIET_PERIOD`]) would tell the tree late.
    pub(crate) fn hurry(&mut self) {
        self.next_tick = self.next_tick.min(self.last_tick + PERIOD);
    }
}

impl Kernel {
    /// Measures this kernel's load, tells the tree, acts on the balancer's
    /// decisions, and gives up placements asked too long ago.
    pub(crate) fn placement_tick(&mut self) {
        let (now, tick) = (Instant::now(), quanta::Instant::now());
        let shape = Shape::new(self.noc_nodes());
        let p = &mut self.placement;
        p.dqdt.reshape(shape);
        let window = tick.duration_since(p.last_tick).as_nanos().max(1) as f64;
        if p.ticks.is_multiple_of(MEMORY_EVERY) {
            p.memory = self
                .procs
                .values()
                .map(|p| p.container.memory_bytes() as u64)
                .sum();
        }
        let own = Load {
            kernels: 1,
            runnable: self.run_queue.len() as u32,
            processes: self.procs.len() as u32,
            busy: (p.busy_ns as f64 / window).min(1.0) as f32,
            memory: p.memory,
            arrivals: p.arrivals,
        };
        p.busy_ns = 0;
        p.last_tick = tick;
        p.ticks = p.ticks.wrapping_add(1);
        for (to, msg) in p.dqdt.tick(own, now) {
            self.send(to, NocMsg::Dqdt(msg));
        }
        let quiet = !self.awaits_answers()
            && self.placement.asked.is_empty()
            && self.placement.dqdt.quiet();
        self.placement.next_tick = tick + if quiet { QUIET_PERIOD } else { PERIOD };
        if self.placement.balance {
            if own.runnable == 0 {
                self.steal();
            }
            for m in self.placement.dqdt.imbalances(now) {
                tracing::debug!(
                    kernel = %self.id,
                    "balancer: {} has {} runnable process(es) too many against {}, within {}",
                    m.from,
                    m.count,
                    m.to,
                    m.subtree
                );
                self.shed(m.from, m.to, m.count, m.idle);
            }
        }
        let late: Vec<u64> = self
            .placement
            .asked
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) > ASK_LIMIT)
            .map(|(&t, _)| t)
            .collect();
        for token in late {
            tracing::warn!(kernel = %self.id, "a placement asked of another kernel got no answer: made here");
            let here = self.id;
            self.on_placed(token, here);
        }
    }

    /// Places a new process anywhere: the DQDT's choice once this kernel
    /// has heard of the tree, round robin over its node's kernels before.
    pub(crate) fn place(&mut self, then: AfterPlace) {
        if !self.placement.dqdt.knows() {
            let count = self.host_kernel_count();
            let p = &mut self.placement;
            let k = KernelId::new(self.id.node, p.next_target);
            p.next_target = (p.next_target + 1) % count;
            return self.placed(k, then);
        }
        let root = self.placement.dqdt.shape().root();
        self.place_within(root, then);
    }

    /// Places a process within subtree `within`.
    fn place_within(&mut self, within: Subtree, then: AfterPlace) {
        match self
            .placement
            .dqdt
            .descend(within, Toward::Lightest, Instant::now())
        {
            Step::At(k) => self.placed(k, then),
            Step::Ask { host, within } => {
                let p = &mut self.placement;
                let token = p.next_token;
                p.next_token += 1;
                p.asked.insert(token, (then, Instant::now()));
                let asker = self.id;
                self.send(
                    host,
                    NocMsg::Place {
                        within,
                        asker,
                        token,
                    },
                );
            }
        }
    }

    /// Another kernel's placement goes on here.
    pub(crate) fn on_place(&mut self, within: Subtree, asker: KernelId, token: u64) {
        match self
            .placement
            .dqdt
            .descend(within, Toward::Lightest, Instant::now())
        {
            Step::Ask { host, within } if host != self.id => self.send(
                host,
                NocMsg::Place {
                    within,
                    asker,
                    token,
                },
            ),
            Step::At(k) => self.answer_place(asker, token, k),
            Step::Ask { .. } => self.answer_place(asker, token, self.id),
        }
    }

    /// Tells `asker` where its placement `token` ended.
    pub(crate) fn answer_place(&mut self, asker: KernelId, token: u64, kernel: KernelId) {
        if asker == self.id {
            self.on_placed(token, kernel);
        } else {
            self.send(asker, NocMsg::Placed { token, kernel });
        }
    }

    pub(crate) fn on_placed(&mut self, token: u64, kernel: KernelId) {
        if let Some((then, _)) = self.placement.asked.remove(&token) {
            self.placed(kernel, then);
        }
    }

    fn placed(&mut self, kernel: KernelId, then: AfterPlace) {
        match then {
            AfterPlace::Spawn { parent, spec } => self.spawn_on(parent, spec, Some(kernel)),
            AfterPlace::Run { pid, told } => self.run_on(pid, kernel, told),
            AfterPlace::Move { pid, idle } => self.balance_move(pid, kernel, idle),
            AfterPlace::Answer(reply) => drop(reply.send(kernel)),
        }
    }

    /// This kernel has nothing to run: it asks the most loaded kernel near
    /// it for work ([`Dqdt::steal`]). Called as it runs out, and while it
    /// stays idle at each tick and as fresh loads reach it.
    pub(crate) fn steal(&mut self) {
        let p = &mut self.placement;
        if !p.balance {
            return;
        }
        let now = quanta::Instant::now();
        if p.stole_at
            .is_some_and(|at| now.duration_since(at) < STEAL_EVERY)
        {
            return;
        }
        let Some(m) = p.dqdt.steal() else {
            return;
        };
        p.stole_at = Some(now);
        tracing::debug!(
            kernel = %self.id,
            "balancer: idle, asking {} for {} runnable process(es)",
            m.from,
            m.count
        );
        self.shed(m.from, m.to, m.count, m.idle);
    }

    /// Whether this kernel has just run out of work: true once each time
    /// it finds nothing to run after running something.
    pub(crate) fn ran_out(&mut self, idle: bool) -> bool {
        !std::mem::replace(&mut self.placement.idle, idle) && idle
    }

    /// The balancer's decision reached the subtree that gives: find its
    /// most loaded kernel, and have it send `count` processes to `to`.
    /// With `idle`, `to` is a kernel that had nothing to run (it stole, or
    /// the balancer saw it so): the decision counted on loads a tick old,
    /// so the giver keeps at least half of what it has waiting, and within
    /// a node the processes need not have settled (a hand-over costs tens
    /// of microseconds; the idle kernel, a core).
    pub(crate) fn shed(&mut self, from: Subtree, to: Subtree, count: u32, idle: bool) {
        let shape = self.placement.dqdt.shape();
        if !shape.exists(from) || !shape.exists(to) {
            return; // a decision made on another shape of the tree
        }
        // One kernel, which may be idle; the balancer's decisions between
        // nodes name subtrees.
        let taker = shape.children(to).is_empty().then(|| shape.host(to));
        // Subtrees are within one node or made of whole nodes; `to` is not
        // this kernel's.
        let far = shape.host(to).node != self.id.node;
        let idle_taker = taker.filter(|_| idle);
        let (at, from) = match self
            .placement
            .dqdt
            .descend(from, Toward::Heaviest, Instant::now())
        {
            Step::At(k) => (k, Shape::leaf(k)),
            Step::Ask { host, within } => (host, within),
        };
        if at != self.id {
            return self.send(
                at,
                NocMsg::Shed {
                    from,
                    to,
                    count,
                    idle,
                },
            );
        }
        if from != Shape::leaf(self.id) {
            return; // it does not know its own subtree yet
        }
        if !self.placement.balance {
            return; // its node's balancer is off: nothing leaves it
        }
        // Only CPU-bound processes waiting for the CPU (in the ready queue:
        // their quantum ran out, or they are new): moving one just woken
        // from IPC would part it from its partner without evening the CPUs.
        let now = Instant::now();
        if let Some(taker) = taker {
            let lately = self
                .placement
                .gave
                .get(&taker)
                .is_some_and(|at| now.duration_since(*at) < GAVE_LATELY);
            if lately || (idle && self.departures.values().any(|d| d.to() == taker)) {
                // Decided before what this kernel gave it arrived: a steal
                // and a decision of the balancer can cross.
                return;
            }
        }
        let count = match idle_taker {
            Some(_) => count.min(self.run_queue.len() as u32 / 2),
            None => count,
        };
        let nearby = idle_taker.is_some_and(|t| t.node == self.id.node);
        let rate = self.placement.copy_rate;
        let mut candidates: Vec<(u64, Instant, Pid, Duration)> = self
            .run_queue
            .ready()
            .filter_map(|pid| {
                let p = self.procs.get(&pid)?;
                let u = p.container.uarea();
                let a = &u.accounting;
                let stay = match (a.balanced, nearby) {
                    (0, true) => Duration::ZERO,
                    (_, true) | (0, false) => SETTLED,
                    (_, false) => RESIDENCE,
                };
                let cost = match far {
                    true => far_move_cost(p, rate),
                    false => Duration::ZERO,
                };
                let movable = !u.pinned
                    && a.cpu_ns >= a.slices.saturating_mul(CPU_BOUND_SLICE_NS)
                    && !u.wander.enabled
                    && !self.departures.contains_key(&pid)
                    && !self.in_exec(pid)
                    && now.duration_since(p.arrived) >= stay;
                movable.then_some((a.cpu_ns, p.arrived, pid, cost))
            })
            .collect();
        // The oldest first: a process that has run long is likely to run
        // long still (Harchol-Balter and Downey), so its move pays off. Of
        // those that have not run yet, and so are not known to be CPU-bound,
        // the last to arrive, which would wait longest here (a process forked
        // early is more likely one end of an IPC pair, which a move parts).
        candidates.sort_unstable_by(|a, b| b.cmp(a));
        candidates.dedup_by_key(|c| c.2);
        // To another node, each copy goes out after those ahead of it on
        // the link, and is made only if the process has been here
        // COST_FACTOR times as long as it will take to arrive.
        let mut queued = match far {
            true => self.copies_out(rate),
            false => Duration::ZERO,
        };
        let mut chosen = Vec::new();
        for (_, arrived, pid, cost) in candidates {
            if chosen.len() == count as usize {
                break;
            }
            let (here, arrival) = (now.duration_since(arrived), queued + cost);
            if here >= arrival * COST_FACTOR {
                queued += cost;
                chosen.push(pid);
            } else {
                tracing::debug!(
                    kernel = %self.id,
                    %pid,
                    "balancer: not moving it to {to}: it would arrive in {arrival:?}, and has \
                     been here {here:?}"
                );
            }
        }
        let candidates = chosen;
        if let (Some(taker), false) = (idle_taker, candidates.is_empty()) {
            self.placement.dqdt.moving_to_idle(taker, now);
        }
        let idle = idle_taker.is_some();
        for pid in candidates {
            self.place_within(to, AfterPlace::Move { pid, idle });
        }
    }

    /// What the copies this kernel is making to other nodes are expected to
    /// take still: those of processes still running here (pre-copy).
    fn copies_out(&self, rate: f64) -> Duration {
        self.departures
            .iter()
            .filter(|(_, d)| d.to().node != self.id.node && !d.is_frozen())
            .filter_map(|(pid, _)| self.procs.get(pid))
            .map(|p| far_move_cost(p, rate))
            .sum()
    }

    /// Moves `pid` for the balancer: by hand-over within this node, by copy
    /// to another; `idle`: `to` had nothing to run.
    fn balance_move(&mut self, pid: Pid, to: KernelId, idle: bool) {
        if to == self.id || !self.procs.contains_key(&pid) {
            return;
        }
        let mode = (to.node == self.id.node).then_some(Mode::Handover);
        if let Some(p) = self.procs.get_mut(&pid) {
            p.container.uarea_mut().accounting.balanced += 1;
        }
        match self.migrate_for_balancer(pid, to, mode) {
            Ok(()) => {
                self.placement.moves += 1;
                self.placement.moves_to_idle += u64::from(idle);
                self.placement.gave.insert(to, Instant::now());
                tracing::info!(kernel = %self.id, %pid, "balancer: moving it to {to}")
            }
            Err(why) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.container.uarea_mut().accounting.balanced -= 1;
                }
                tracing::debug!(kernel = %self.id, %pid, "balancer: not moving to {to}: {why}");
            }
        }
    }
}

/// What moving `p` to another node is expected to take ([`copy_cost`]),
/// or what a move of it that the balancer called off projected, if more.
fn far_move_cost(p: &crate::kernel::Process, rate: f64) -> Duration {
    let memory = p.container.memory_bytes() as u64;
    let cost = copy_cost(
        memory,
        p.container.uarea().accounting.last_migration.as_ref(),
        rate,
    );
    cost.max(p.far_copy.unwrap_or_default())
}

/// What copying a process that holds `memory` bytes to another node is
/// expected to take: its memory at `rate` bytes per second, or what its
/// last move between nodes took if that was longer. That move saw how fast
/// the process rewrites its memory (each rewritten block is sent again),
/// which its size alone does not tell.
fn copy_cost(memory: u64, last: Option<&MigrationReport>, rate: f64) -> Duration {
    let by_size = Duration::from_secs_f64(memory as f64 / rate);
    let measured = last
        .filter(|r| r.mode == Mode::Copy && r.from.node != r.to.node)
        .map_or(Duration::ZERO, |r| Duration::from_micros(r.total_us));
    by_size.max(measured)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(from: KernelId, to: KernelId, mode: Mode, total_us: u64) -> MigrationReport {
        MigrationReport {
            pid: Pid::new(from, 1, 0),
            from,
            to,
            mode,
            rounds: Vec::new(),
            downtime_us: 0,
            downtime_ns: 0,
            total_us,
        }
    }

    #[test]
    fn a_copy_costs_the_memory_at_the_rate_or_what_the_last_one_took() {
        let (a, b, a1) = (
            KernelId::new(0, 0),
            KernelId::new(1, 0),
            KernelId::new(0, 1),
        );
        let mib = 1 << 20;
        // 100 MiB at 1 GB/s.
        let by_size = copy_cost(100 * mib, None, 1e9);
        assert_eq!(by_size.as_micros(), 104_857);
        // A process that rewrote its memory as it was copied took longer.
        let slow = report(a, b, Mode::Copy, 1_500_000);
        assert_eq!(
            copy_cost(100 * mib, Some(&slow), 1e9),
            Duration::from_millis(1500)
        );
        // A quick last move does not make a larger process cheap.
        let quick = report(b, a, Mode::Copy, 1_000);
        assert_eq!(copy_cost(100 * mib, Some(&quick), 1e9), by_size);
        // Moves within a node say nothing of the link.
        let within = report(a, a1, Mode::Copy, 9_000_000);
        assert_eq!(copy_cost(mib, Some(&within), 1e9).as_micros(), 1_048);
        let handover = report(a, a1, Mode::Handover, 9_000_000);
        assert_eq!(copy_cost(0, Some(&handover), 1e9), Duration::ZERO);
    }

    #[test]
    fn the_copy_rate_follows_copies_that_are_large_enough() {
        let mut p = Placement::new(KernelId::new(0, 0), vec![(0, 1), (1, 1)], true);
        assert_eq!(p.copy_rate, COPY_RATE);
        p.copied(4096, 1);
        p.copied(1 << 30, 0);
        assert_eq!(p.copy_rate, COPY_RATE, "small or instant copies ignored");
        // 500 MB/s, again and again: the estimate comes down to it.
        for _ in 0..40 {
            p.copied(500_000_000, 1_000_000);
        }
        assert!((p.copy_rate / 5e8 - 1.0).abs() < 1e-4, "{}", p.copy_rate);
    }
}
