//! One kernel's part of the DQDT.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use atoll_abi::KernelId;
use serde::{Deserialize, Serialize};

use crate::load::Load;
use crate::tree::{Shape, Subtree};

/// How often a kernel measures its load and tells the tree.
pub const PERIOD: Duration = Duration::from_millis(10);
/// A load that has not changed is told again this often, so that a host
/// can tell a quiet child from a lost one, and one that missed a message
/// (it came before the host knew its sender's node) hears it again soon.
const HEARTBEAT: Duration = Duration::from_millis(250);
/// How often a kernel ticks while it has no process and knows of no
/// runnable one ([`Dqdt::quiet`]): then its load cannot change until a
/// message comes, and its kernel ticks again at once when one does, so a
/// tick has nothing to send but the heartbeat. Ticking every [`PERIOD`]
/// anyway woke each kernel of an idle node 100 times a second: with 64
/// kernels on 2 cores, half a core spent on nothing.
pub const QUIET_PERIOD: Duration = HEARTBEAT;
/// A child not heard from for this long is left out of its parent's sum.
const STALE: Duration = Duration::from_secs(1);
/// After the balancer moves processes out of a subtree's child, it waits
/// this long for the moves to show in the reports before it judges that
/// subtree again.
const SETTLE: Duration = Duration::from_millis(60);
/// A process placed in a subtree is counted there until a report of the
/// subtree's load has it (its [`Load::arrivals`] have passed the
/// placement's), and at most for `PLACED_FOR`, in case it never arrives
/// (its spawn failed).
const PLACED_FOR: Duration = Duration::from_millis(250);
/// The most processes one decision of the balancer moves.
const MOST_MOVES: u32 = 16;

/// What kernels tell each other about load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DqdtMsg {
    /// From the host of `subtree` to the host of its parent: its load.
    Up { subtree: Subtree, load: Load },
    /// From the host of a subtree to the hosts of its children: the loads
    /// of the children of that subtree and of each subtree above it.
    Down {
        views: Vec<(Subtree, Vec<(Subtree, Load)>)>,
    },
}

/// Where a descent of the tree got to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// It ended at this kernel.
    At(KernelId),
    /// It goes on within `within`, whose children's loads `host` knows.
    Ask { host: KernelId, within: Subtree },
}

/// Which child a descent takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Toward {
    /// The least loaded: where a new process goes.
    Lightest,
    /// The most loaded: where the balancer takes processes from.
    Heaviest,
}

/// A decision of the balancer: move `count` runnable processes from child
/// `from` of `subtree` to its child `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imbalance {
    pub subtree: Subtree,
    pub from: Subtree,
    pub to: Subtree,
    pub count: u32,
    /// `to` is one kernel with nothing to run (it steals, or the balancer
    /// saw it so): the giver may move processes to it sooner.
    pub idle: bool,
}

/// A subtree and its load, as the kernel that hosts it last summed it (for
/// `atoll top`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TreeEntry {
    pub subtree: Subtree,
    pub load: Load,
}

/// One kernel's part of the tree: the loads of the children of every
/// subtree it lies in, summed by itself for those it hosts and told by their
/// hosts for the others.
#[derive(Debug)]
pub struct Dqdt {
    me: KernelId,
    shape: Shape,
    /// This kernel's own load at the last tick.
    own: Load,
    /// What the children of the subtrees this kernel hosts last said.
    heard: HashMap<Subtree, (Load, Instant)>,
    /// For each subtree above this kernel's leaf: its children and their
    /// loads, with the processes placed there since counted in.
    view: BTreeMap<Subtree, Vec<(Subtree, Load)>>,
    /// The sums of the subtrees this kernel hosts, at the last tick.
    sums: BTreeMap<Subtree, Load>,
    /// What was last sent to each kernel, and when.
    sent: HashMap<KernelId, (DqdtMsg, Instant)>,
    /// Subtrees the balancer leaves alone until then.
    settling: HashMap<Subtree, Instant>,
    /// Processes placed and not yet in their subtree's reports: counted
    /// in its loads meanwhile.
    placed: OnTheWay,
}

/// The processes placed and not yet arrived, and how many go to each
/// subtree: a placement asks that at once, and a node spawning 100,000
/// processes a second has thousands on their way between two reports.
#[derive(Default, Debug)]
struct OnTheWay {
    placed: Vec<Placed>,
    per_subtree: HashMap<Subtree, u64>,
}

impl OnTheWay {
    fn push(&mut self, p: Placed) {
        *self.per_subtree.entry(p.subtree).or_default() += 1;
        self.placed.push(p);
    }

    fn retain(&mut self, mut keep: impl FnMut(&Placed) -> bool) {
        let per_subtree = &mut self.per_subtree;
        self.placed.retain(|p| {
            let kept = keep(p);
            if !kept {
                if let Some(n) = per_subtree.get_mut(&p.subtree) {
                    *n -= 1;
                    if *n == 0 {
                        per_subtree.remove(&p.subtree);
                    }
                }
            }
            kept
        });
    }

    /// How many are on their way to `subtree`.
    fn to(&self, subtree: Subtree) -> u64 {
        self.per_subtree.get(&subtree).copied().unwrap_or(0)
    }
}

/// A process placed in a subtree, on its way there.
#[derive(Clone, Copy, Debug)]
struct Placed {
    subtree: Subtree,
    at: Instant,
    /// The subtree's arrivals once it has arrived: those last reported,
    /// plus the placements there still on their way, this one included.
    arrived_at: u64,
}

impl Placed {
    /// Whether `load`, reported by `subtree`, still lacks this process.
    fn pending_in(&self, subtree: Subtree, load: &Load) -> bool {
        self.subtree != subtree || load.arrivals < self.arrived_at
    }
}

impl Dqdt {
    /// The part of kernel `me` in a tree of `shape`, knowing nothing yet.
    pub fn new(me: KernelId, shape: Shape) -> Dqdt {
        Dqdt {
            me,
            shape,
            own: Load::default(),
            heard: HashMap::new(),
            view: BTreeMap::new(),
            sums: BTreeMap::new(),
            sent: HashMap::new(),
            settling: HashMap::new(),
            placed: OnTheWay::default(),
        }
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The tree's new shape, after a node joined or was lost: what this
    /// kernel knew of subtrees no longer its own, or no longer there, is
    /// dropped, so no placement goes to a lost node.
    pub fn reshape(&mut self, shape: Shape) {
        if shape == self.shape {
            return;
        }
        let path = shape.path(self.me);
        self.view.retain(|s, _| path.contains(s));
        for children in self.view.values_mut() {
            children.retain(|(c, _)| shape.exists(*c));
        }
        self.placed.retain(|p| shape.exists(p.subtree));
        let hosted = shape.hosted(self.me);
        self.sums.retain(|s, _| hosted.contains(s));
        self.sent.clear();
        self.shape = shape;
    }

    /// Takes this kernel's load of the moment, sums the subtrees it hosts,
    /// and returns what to tell whom: its top subtree's load to the host
    /// above, and the loads it knows to the hosts below.
    pub fn tick(&mut self, own: Load, now: Instant) -> Vec<(KernelId, DqdtMsg)> {
        self.own = own;
        self.heard
            .retain(|_, (_, at)| now.duration_since(*at) < STALE);
        // This kernel's own load has what was placed on it: it is made here.
        let leaf = Shape::leaf(self.me);
        self.placed
            .retain(|p| p.pending_in(leaf, &own) && now.duration_since(p.at) < PLACED_FOR);
        let hosted = self.shape.hosted(self.me);
        let mut top = (leaf, own);
        for &s in &hosted {
            // Its children: this kernel's leaf, the subtrees below that it
            // hosts too (summed just before, lowest first), and the others
            // as their hosts last said.
            let mut children: Vec<(Subtree, Load)> = self
                .shape
                .children(s)
                .into_iter()
                .filter_map(|c| {
                    let load = if c == leaf {
                        Some(own)
                    } else {
                        self.sums
                            .get(&c)
                            .copied()
                            .or_else(|| self.heard.get(&c).map(|(l, _)| *l))
                    };
                    load.map(|l| (c, l))
                })
                .collect();
            for (c, load) in &children {
                self.placed.retain(|p| p.pending_in(*c, load));
            }
            self.count_placed(&mut children);
            let mut sum = Load::default();
            for (_, l) in &children {
                sum.add(l);
            }
            self.sums.insert(s, sum);
            self.view.insert(s, children);
            top = (s, sum);
        }
        let mut out = Vec::new();
        if let Some(parent) = self.shape.parent(top.0) {
            let msg = DqdtMsg::Up {
                subtree: top.0,
                load: top.1,
            };
            out.extend(self.if_news(self.shape.host(parent), msg, now));
        }
        for &s in &hosted {
            let views: Vec<_> = self
                .view
                .iter()
                .filter(|(v, _)| **v == s || self.is_above(**v, s))
                .map(|(v, c)| (*v, c.clone()))
                .collect();
            for c in self.shape.children(s) {
                let host = self.shape.host(c);
                if host != self.me {
                    let msg = DqdtMsg::Down {
                        views: views.clone(),
                    };
                    out.extend(self.if_news(host, msg, now));
                }
            }
        }
        out
    }

    /// Whether `above` holds `below`.
    fn is_above(&self, above: Subtree, below: Subtree) -> bool {
        let mut s = below;
        while let Some(p) = self.shape.parent(s) {
            if p == above {
                return true;
            }
            s = p;
        }
        false
    }

    /// `msg` for `to`, unless it says nearly what was sent last and the
    /// heartbeat is not due.
    fn if_news(&mut self, to: KernelId, msg: DqdtMsg, now: Instant) -> Option<(KernelId, DqdtMsg)> {
        if let Some((last, at)) = self.sent.get(&to) {
            if now.duration_since(*at) < HEARTBEAT && !differs(last, &msg) {
                return None;
            }
        }
        self.sent.insert(to, (msg.clone(), now));
        Some((to, msg))
    }

    /// What another kernel told this one.
    pub fn on_msg(&mut self, msg: DqdtMsg, now: Instant) {
        match msg {
            // Kept even if this kernel's tree does not have that subtree
            // yet (its node has just joined): `tick` sums only the children
            // the tree has, and what is not heard again goes stale.
            DqdtMsg::Up { subtree, load } => {
                self.heard.insert(subtree, (load, now));
                self.placed.retain(|p| p.pending_in(subtree, &load));
            }
            DqdtMsg::Down { views } => {
                for (s, mut children) in views {
                    // The sender's tree may not be this kernel's yet (a
                    // node joined or was lost): what it names that this
                    // kernel does not know is left out.
                    children.retain(|(c, _)| self.shape.exists(*c));
                    for (c, load) in &children {
                        self.placed.retain(|p| p.pending_in(*c, load));
                    }
                    if self.shape.exists(s)
                        && Shape::contains(s, self.me)
                        && self.shape.host(s) != self.me
                    {
                        self.count_placed(&mut children);
                        self.view.insert(s, children);
                    }
                }
            }
        }
    }

    /// Adds the processes placed lately to the loads of `children`.
    fn count_placed(&self, children: &mut [(Subtree, Load)]) {
        for (subtree, load) in children {
            let n = self.placed.to(*subtree);
            load.expect(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Descends the tree from `within` toward the lightest or heaviest
    /// child, as far as this kernel knows it. A lightest descent counts the
    /// new process in each child it takes, until that child's reports can
    /// have it.
    pub fn descend(&mut self, within: Subtree, toward: Toward, now: Instant) -> Step {
        let within = if self.shape.exists(within) {
            within
        } else {
            self.shape.root()
        };
        let mut s = within;
        loop {
            let children = self.shape.children(s);
            if children.is_empty() {
                return Step::At(self.shape.host(s));
            }
            let mine = children
                .iter()
                .copied()
                .find(|&c| Shape::contains(c, self.me));
            let chosen = match self.view.get_mut(&s) {
                Some(known) => {
                    let c = pick(known, toward, self.me);
                    if let (Some(c), Toward::Lightest) = (c, toward) {
                        let reported = known.iter().find(|k| k.0 == c).map(|k| k.1.arrivals);
                        let arrived_at = reported.unwrap_or(0) + self.placed.to(c) + 1;
                        self.placed.push(Placed {
                            subtree: c,
                            at: now,
                            arrived_at,
                        });
                    }
                    c
                }
                // Not heard of yet: the host of `s` knows, or if this
                // kernel is on the way down, its own branch will do.
                None if mine.is_none() => {
                    return Step::Ask {
                        host: self.shape.host(s),
                        within: s,
                    }
                }
                None => None,
            };
            let c = match chosen.or(mine) {
                Some(c) => c,
                None => return Step::At(self.shape.host(s)),
            };
            if Shape::contains(c, self.me) {
                s = c;
            } else if self.shape.children(c).is_empty() {
                return Step::At(self.shape.host(c));
            } else {
                return Step::Ask {
                    host: self.shape.host(c),
                    within: c,
                };
            }
        }
    }

    /// Where a new process goes, starting from the root.
    pub fn place(&mut self, now: Instant) -> Step {
        self.descend(self.shape.root(), Toward::Lightest, now)
    }

    /// The balancer's decisions at this kernel: in each subtree it hosts,
    /// runnable processes to move from the most loaded children to the
    /// least loaded, at most [`MOST_MOVES`] at a time, so that they are
    /// even. A subtree just balanced is left to settle.
    pub fn imbalances(&mut self, now: Instant) -> Vec<Imbalance> {
        self.settling.retain(|_, until| *until > now);
        let mut out = Vec::new();
        for s in self.shape.hosted(self.me) {
            if self.settling.contains_key(&s) {
                continue;
            }
            let Some(children) = self.view.get_mut(&s) else {
                continue;
            };
            // Pair off the heaviest child with the lightest until they are
            // even, each move counted in the loads, so one decision evens
            // all the children. A child that takes does not give in the
            // same decision: what it takes has not arrived yet.
            let mut took = vec![false; children.len()];
            let mut moved = 0;
            // Runnable processes per kernel, were they spread evenly.
            let (runnable, kernels) = children.iter().fold((0.0, 0.0), |(r, k), (_, l)| {
                (r + f64::from(l.runnable), k + f64::from(l.kernels.max(1)))
            });
            let even = runnable / kernels;
            let beyond = |l: &Load| f64::from(l.runnable) - even * f64::from(l.kernels.max(1));
            while moved < MOST_MOVES {
                let giver = (0..children.len()).filter(|&i| !took[i]).max_by(|&a, &b| {
                    let (ka, kb) = (children[a].1.order_key(), children[b].1.order_key());
                    ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal)
                });
                let (Some(from), Some(to)) = (giver, extreme(children, Toward::Lightest, self.me))
                else {
                    break;
                };
                // No more than the giver has beyond its even share, nor
                // than the taker lacks of its own.
                let (give, lack) = (beyond(&children[from].1), -beyond(&children[to].1));
                let count = children[from]
                    .1
                    .excess_over(&children[to].1)
                    .min(give.max(0.0).floor() as u32)
                    .min(lack.max(0.0).floor() as u32)
                    .min(MOST_MOVES - moved);
                if from == to || count == 0 {
                    break;
                }
                let idle =
                    self.shape.children(children[to].0).is_empty() && children[to].1.runnable == 0;
                for _ in 0..count {
                    children[from].1.lose_one();
                    children[to].1.expect(1);
                }
                took[to] = true;
                moved += count;
                out.push(Imbalance {
                    subtree: s,
                    from: children[from].0,
                    to: children[to].0,
                    count,
                    idle,
                });
            }
            if moved > 0 {
                self.settling.insert(s, now + SETTLE);
            }
        }
        out
    }

    /// Processes are on their way from this kernel to kernel `to`, which had
    /// nothing to run (it stole them, or another host's decision sent
    /// them): the subtrees this kernel hosts that hold `to` settle, as after
    /// one of their own decisions, so that the balancer here does not move
    /// processes again on loads reported before.
    pub fn moving_to_idle(&mut self, to: KernelId, now: Instant) {
        for s in self.shape.hosted(self.me) {
            if Shape::contains(s, to) {
                self.settling.insert(s, now + SETTLE);
            }
        }
    }

    /// Work stealing: what this kernel, which has nothing to run, asks for.
    /// The lowest subtree on its path whose most loaded other child has
    /// runnable processes beyond an even share with this kernel's branch
    /// gives them, at most one kernel's even share of that subtree (rounded
    /// up), so a kernel takes work from its own node before it asks another.
    ///
    /// The periodic balancer ([`imbalances`](Dqdt::imbalances)) waits for
    /// the next tick and then for its moves to settle; a kernel that has just
    /// run out of work would idle meanwhile, which at the end of a parallel
    /// job is most of what keeps its makespan from the ideal (Linux pulls
    /// work at once too: `newidle_balance`).
    pub fn steal(&self) -> Option<Imbalance> {
        let leaf = Shape::leaf(self.me);
        for s in self.shape.path(self.me).into_iter().skip(1) {
            let Some(known) = self.view.get(&s) else {
                continue;
            };
            // This kernel's own leaf is idle now, whatever it last said.
            let children: Vec<(Subtree, Load)> = known
                .iter()
                .map(|&(c, l)| {
                    let runnable = if c == leaf { 0 } else { l.runnable };
                    (c, Load { runnable, ..l })
                })
                .collect();
            let Some(mine) = children.iter().find(|(c, _)| Shape::contains(*c, self.me)) else {
                continue;
            };
            let others: Vec<(Subtree, Load)> = children
                .iter()
                .copied()
                .filter(|(c, _)| !Shape::contains(*c, self.me))
                .collect();
            let Some((from, from_load)) =
                extreme(&others, Toward::Heaviest, self.me).map(|i| others[i])
            else {
                continue;
            };
            let (runnable, kernels) = children.iter().fold((0, 0), |(r, k), (_, l)| {
                (r + l.runnable, k + l.kernels.max(1))
            });
            let count = from_load
                .excess_over(&mine.1)
                .min(runnable.div_ceil(kernels))
                .min(MOST_MOVES);
            if count > 0 {
                return Some(Imbalance {
                    subtree: s,
                    from,
                    to: leaf,
                    count,
                    idle: true,
                });
            }
        }
        None
    }

    /// This kernel's leaf and the subtrees it hosts, with their loads.
    pub fn entries(&self) -> Vec<TreeEntry> {
        let leaf = TreeEntry {
            subtree: Shape::leaf(self.me),
            load: self.own,
        };
        // `sums` holds exactly the subtrees this kernel hosts (`reshape`).
        std::iter::once(leaf)
            .chain(self.sums.iter().map(|(s, l)| TreeEntry {
                subtree: *s,
                load: *l,
            }))
            .collect()
    }

    /// Whether no load this kernel knows has a process ready to run (its
    /// own at the last tick, its children's, the views from above) and no
    /// placement is on its way: nothing for the balancer to move, nothing
    /// for this kernel to steal.
    pub fn quiet(&self) -> bool {
        self.own.runnable == 0
            && self.placed.placed.is_empty()
            && self.heard.values().all(|(l, _)| l.runnable == 0)
            && self.view.values().flatten().all(|(_, l)| l.runnable == 0)
    }

    /// Whether this kernel knows the load of every child of every subtree
    /// it lies in, as a placement from it needs.
    pub fn knows(&self) -> bool {
        self.shape.path(self.me).into_iter().skip(1).all(|s| {
            self.view
                .get(&s)
                .is_some_and(|c| c.len() == self.shape.children(s).len())
        })
    }
}

/// The child a descent takes among `known`; a lightest descent counts the
/// new process in.
fn pick(known: &mut [(Subtree, Load)], toward: Toward, me: KernelId) -> Option<Subtree> {
    let i = extreme(known, toward, me)?;
    if toward == Toward::Lightest {
        known[i].1.expect(1);
    }
    Some(known[i].0)
}

/// The index of the least or most loaded of `known`; ties go to the child
/// holding `me`, then to the first.
fn extreme(known: &[(Subtree, Load)], toward: Toward, me: KernelId) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, (c, l)) in known.iter().enumerate() {
        let better = match best {
            None => true,
            Some(b) => {
                let (bk, k) = (known[b].1.order_key(), l.order_key());
                let strictly = match toward {
                    Toward::Lightest => k < bk,
                    Toward::Heaviest => k > bk,
                };
                strictly || (k == bk && Shape::contains(*c, me))
            }
        };
        if better {
            best = Some(i);
        }
    }
    best
}

/// Whether two messages differ by more than the noise of a busy fraction.
fn differs(a: &DqdtMsg, b: &DqdtMsg) -> bool {
    let close = |x: &Load, y: &Load| {
        x.kernels == y.kernels
            && x.arrivals == y.arrivals
            && x.runnable == y.runnable
            && x.processes == y.processes
            && (x.busy - y.busy).abs() < 0.05 * x.kernels.max(1) as f32
            && x.memory.abs_diff(y.memory) <= x.memory / 16
    };
    let close_all = |x: &[(Subtree, Load)], y: &[(Subtree, Load)]| {
        x.len() == y.len()
            && x.iter()
                .zip(y)
                .all(|(p, q)| p.0 == q.0 && close(&p.1, &q.1))
    };
    match (a, b) {
        (
            DqdtMsg::Up {
                subtree: s,
                load: l,
            },
            DqdtMsg::Up {
                subtree: t,
                load: m,
            },
        ) => s != t || !close(l, m),
        (DqdtMsg::Down { views: v }, DqdtMsg::Down { views: w }) => {
            v.len() != w.len()
                || v.iter()
                    .zip(w)
                    .any(|(p, q)| p.0 != q.0 || !close_all(&p.1, &q.1))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel of a shape with its part of the tree, and the messages
    /// between them delivered at once.
    struct Sim {
        parts: BTreeMap<KernelId, Dqdt>,
        loads: BTreeMap<KernelId, Load>,
        now: Instant,
    }

    impl Sim {
        fn new(nodes: &[(u16, u16)]) -> Sim {
            let shape = Shape::new(nodes.iter().copied());
            let parts = shape
                .kernels()
                .map(|k| (k, Dqdt::new(k, shape.clone())))
                .collect();
            let loads = shape
                .kernels()
                .map(|k| {
                    let idle = Load {
                        kernels: 1,
                        ..Load::default()
                    };
                    (k, idle)
                })
                .collect();
            Sim {
                parts,
                loads,
                now: Instant::now(),
            }
        }

        fn set(&mut self, k: KernelId, runnable: u32) {
            let l = self.loads.get_mut(&k).unwrap();
            l.runnable = runnable;
            l.processes = runnable;
        }

        /// Ticks every kernel `rounds` times, delivering what each says.
        fn settle(&mut self, rounds: usize) {
            for _ in 0..rounds {
                self.now += PERIOD;
                let kernels: Vec<KernelId> = self.parts.keys().copied().collect();
                for k in kernels {
                    let load = self.loads[&k];
                    let out = self.parts.get_mut(&k).unwrap().tick(load, self.now);
                    for (to, msg) in out {
                        self.parts.get_mut(&to).unwrap().on_msg(msg, self.now);
                    }
                }
            }
        }

        /// Places a process from `from`, following asks; returns the kernel
        /// and how many kernels were asked on the way.
        fn place(&mut self, from: KernelId) -> (KernelId, usize) {
            let now = self.now;
            let mut step = self.parts.get_mut(&from).unwrap().place(now);
            let mut asked = 0;
            loop {
                match step {
                    Step::At(k) => return (k, asked),
                    Step::Ask { host, within } => {
                        asked += 1;
                        assert!(asked < 10, "a descent that does not end");
                        step = self.parts.get_mut(&host).unwrap().descend(
                            within,
                            Toward::Lightest,
                            now,
                        );
                    }
                }
            }
        }
    }

    fn k(node: u16, index: u16) -> KernelId {
        KernelId::new(node, index)
    }

    #[test]
    fn a_lost_node_gets_no_placement_once_the_tree_is_reshaped() {
        let mut sim = Sim::new(&[(0, 2), (1, 2), (2, 2)]);
        // Node 2 idle, the others busy: placements would go there.
        for k in [k(0, 0), k(0, 1), k(1, 0), k(1, 1)] {
            sim.set(k, 4);
        }
        sim.settle(6);
        assert_eq!(sim.place(k(0, 0)).0.node, 2);
        // Node 2 is lost: kernel 0.0 reshapes at once, before any tick.
        let part = sim.parts.get_mut(&k(0, 0)).unwrap();
        part.reshape(Shape::new([(0, 2), (1, 2)]));
        for _ in 0..8 {
            let to = match part.place(sim.now) {
                Step::At(to) => to,
                Step::Ask { host, .. } => host,
            };
            assert_ne!(to.node, 2, "placed on the lost node");
        }
    }

    #[test]
    fn the_root_sums_every_kernel() {
        let mut sim = Sim::new(&[(0, 16), (1, 3), (2, 1)]);
        for (i, kernel) in sim
            .parts
            .keys()
            .copied()
            .collect::<Vec<_>>()
            .into_iter()
            .enumerate()
        {
            sim.set(kernel, i as u32 % 3);
        }
        sim.settle(8);
        let total: u32 = sim.loads.values().map(|l| l.runnable).sum();
        let root = sim.parts[&k(0, 0)].shape().root();
        let entries = sim.parts[&k(0, 0)].entries();
        let sum = entries.iter().find(|e| e.subtree == root).unwrap().load;
        assert_eq!(sum.runnable, total);
        assert_eq!(sum.kernels, 20);
    }

    #[test]
    fn a_placement_goes_to_the_idle_kernel_wherever_it_starts() {
        let mut sim = Sim::new(&[(0, 16), (1, 4)]);
        for kernel in sim.parts.keys().copied().collect::<Vec<_>>() {
            sim.set(kernel, 2);
        }
        sim.set(k(0, 13), 0);
        sim.settle(8);
        for from in [k(0, 0), k(0, 13), k(1, 2)] {
            let (to, asked) = sim.place(from);
            assert_eq!(to, k(0, 13), "from {from}");
            assert!(asked <= 2);
            // It arrives (and ends at once): once reported, it is not
            // counted any more.
            sim.loads.get_mut(&to).unwrap().arrivals += 1;
            sim.settle(4);
        }
    }

    #[test]
    fn a_placement_is_counted_until_a_report_has_it_however_late_it_arrives() {
        let mut sim = Sim::new(&[(0, 2)]);
        sim.settle(3);
        let (first, _) = sim.place(k(0, 0));
        sim.settle(10); // 100 ms, and it has not arrived yet
        let (second, _) = sim.place(k(0, 0));
        assert_ne!(first, second, "the first is still counted where it goes");
        // Both arrive and run: the reports have them, and the counts go.
        for to in [first, second] {
            let l = sim.loads.get_mut(&to).unwrap();
            (l.runnable, l.processes, l.arrivals) = (1, 1, 1);
        }
        sim.settle(3);
        let root = sim.parts[&k(0, 0)].shape().root();
        let entries = sim.parts[&k(0, 0)].entries();
        let sum = entries.iter().find(|e| e.subtree == root).unwrap().load;
        assert_eq!((sum.runnable, sum.arrivals), (2, 2));
    }

    #[test]
    fn a_burst_of_placements_spreads_over_idle_kernels() {
        let mut sim = Sim::new(&[(0, 16)]);
        sim.settle(6);
        let mut count: BTreeMap<KernelId, u32> = BTreeMap::new();
        for _ in 0..32 {
            let (to, _) = sim.place(k(0, 5));
            *count.entry(to).or_default() += 1;
        }
        assert_eq!(count.len(), 16, "{count:?}");
        assert!(count.values().all(|&n| n == 2), "{count:?}");
    }

    #[test]
    fn the_balancer_evens_two_kernels_and_leaves_even_ones_alone() {
        let mut sim = Sim::new(&[(0, 2)]);
        sim.set(k(0, 0), 32);
        sim.settle(3);
        let now = sim.now;
        let host = sim.parts.get_mut(&k(0, 0)).unwrap();
        assert_eq!(
            host.imbalances(now),
            vec![Imbalance {
                subtree: host.shape().root(),
                from: Shape::leaf(k(0, 0)),
                to: Shape::leaf(k(0, 1)),
                count: 16,
                idle: true
            }]
        );
        // Settling: nothing more until the moves show.
        assert!(host.imbalances(now).is_empty());
        sim.set(k(0, 0), 17);
        sim.set(k(0, 1), 16);
        sim.settle(10);
        let now = sim.now;
        assert!(sim
            .parts
            .get_mut(&k(0, 0))
            .unwrap()
            .imbalances(now)
            .is_empty());
        // A taker with work of its own is not idle.
        sim.set(k(0, 0), 20);
        sim.set(k(0, 1), 2);
        sim.settle(10);
        let now = sim.now;
        let moves = sim.parts.get_mut(&k(0, 0)).unwrap().imbalances(now);
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!((moves[0].count, moves[0].idle), (9, false));
    }

    #[test]
    fn an_idle_kernel_steals_up_to_an_even_share_and_never_the_last_process() {
        let mut sim = Sim::new(&[(0, 2)]);
        sim.set(k(0, 0), 5);
        sim.set(k(0, 1), 3); // its last report: it has run out since
        sim.settle(3);
        let steal = sim.parts[&k(0, 1)].steal();
        assert_eq!(
            steal,
            Some(Imbalance {
                subtree: sim.parts[&k(0, 1)].shape().root(),
                from: Shape::leaf(k(0, 0)),
                to: Shape::leaf(k(0, 1)),
                count: 2,
                idle: true
            })
        );
        // One process on the other kernel: moving it would only idle that one.
        sim.set(k(0, 0), 1);
        sim.settle(3);
        assert_eq!(sim.parts[&k(0, 1)].steal(), None);
        sim.set(k(0, 0), 2);
        sim.settle(3);
        assert_eq!(sim.parts[&k(0, 1)].steal().map(|s| s.count), Some(1));
        // The host of the root steals too, from what it summed.
        sim.set(k(0, 0), 0);
        sim.set(k(0, 1), 9);
        sim.settle(3);
        let steal = sim.parts[&k(0, 0)].steal().unwrap();
        assert_eq!((steal.from, steal.count), (Shape::leaf(k(0, 1)), 4));
    }

    #[test]
    fn an_idle_kernel_steals_within_its_node_before_it_asks_another() {
        let mut sim = Sim::new(&[(0, 4), (1, 4)]);
        for i in 0..4 {
            sim.set(k(1, i), 6);
        }
        sim.set(k(0, 3), 3);
        sim.settle(6);
        let steal = sim.parts[&k(0, 2)].steal().unwrap();
        assert_eq!(steal.from, Shape::leaf(k(0, 3)));
        assert_eq!(steal.count, 1);
        // Nothing to spare on its own node: the other node gives, at most
        // one kernel's even share of the whole tree (25 over 8 kernels,
        // rounded up).
        sim.set(k(0, 3), 1);
        sim.settle(6);
        let steal = sim.parts[&k(0, 2)].steal().unwrap();
        assert_eq!(
            steal.from,
            sim.parts[&k(0, 2)].shape().node_root(1).unwrap()
        );
        assert_eq!(steal.to, Shape::leaf(k(0, 2)));
        assert_eq!(steal.count, 4);
    }

    #[test]
    fn between_nodes_the_heavier_node_gives_to_the_lighter() {
        let mut sim = Sim::new(&[(0, 2), (1, 2)]);
        sim.set(k(0, 0), 6);
        sim.set(k(0, 1), 6);
        sim.settle(6);
        let now = sim.now;
        let moves = sim.parts.get_mut(&k(0, 0)).unwrap().imbalances(now);
        let between = moves
            .iter()
            .find(|m| matches!(m.subtree, Subtree::Nodes { .. }))
            .expect("a move between nodes");
        assert_eq!(
            between.to,
            sim.parts[&k(0, 0)].shape().node_root(1).unwrap()
        );
        assert_eq!(between.count, 6);
        // A node is not one idle kernel, even with nothing to run.
        assert!(!between.idle);
        // The balancer takes from the heaviest leaf of the node that gives.
        let step =
            sim.parts
                .get_mut(&k(0, 0))
                .unwrap()
                .descend(between.from, Toward::Heaviest, now);
        assert!(matches!(step, Step::At(kernel) if kernel.node == 0));
    }

    #[test]
    fn one_decision_evens_four_kernels() {
        let mut sim = Sim::new(&[(0, 4)]);
        sim.set(k(0, 0), 16);
        sim.settle(3);
        let now = sim.now;
        let moves = sim.parts.get_mut(&k(0, 0)).unwrap().imbalances(now);
        let mut to: BTreeMap<Subtree, u32> = BTreeMap::new();
        for m in &moves {
            assert_eq!(m.from, Shape::leaf(k(0, 0)), "{moves:?}");
            *to.entry(m.to).or_default() += m.count;
        }
        assert_eq!(to.into_values().collect::<Vec<_>>(), [4, 4, 4], "{moves:?}");
    }

    #[test]
    fn two_nodes_of_one_kernel_balance_too() {
        let mut sim = Sim::new(&[(0, 1), (1, 1)]);
        sim.set(k(0, 0), 6);
        sim.settle(4);
        let now = sim.now;
        let moves = sim.parts.get_mut(&k(0, 0)).unwrap().imbalances(now);
        assert_eq!(moves.len(), 1, "{moves:?}");
        assert_eq!(moves[0].count, 3);
    }

    #[test]
    fn a_report_that_comes_before_its_node_is_known_counts_once_it_is() {
        let now = Instant::now();
        let mut host = Dqdt::new(k(0, 0), Shape::new([(0, 1)]));
        let busy = Load {
            kernels: 1,
            runnable: 3,
            ..Load::default()
        };
        let up = DqdtMsg::Up {
            subtree: Shape::leaf(k(1, 0)),
            load: busy,
        };
        host.on_msg(up, now);
        host.reshape(Shape::new([(0, 1), (1, 1)]));
        let idle = Load {
            kernels: 1,
            ..Load::default()
        };
        host.tick(idle, now + PERIOD);
        let root = host.shape().root();
        let sum = host
            .entries()
            .into_iter()
            .find(|e| e.subtree == root)
            .unwrap();
        assert_eq!((sum.load.kernels, sum.load.runnable), (2, 3));
        assert!(host.knows());
    }

    #[test]
    fn a_lost_node_leaves_the_tree() {
        let mut sim = Sim::new(&[(0, 2), (1, 2)]);
        sim.set(k(1, 1), 5);
        sim.settle(6);
        let shape = Shape::new([(0, 2)]);
        let part = sim.parts.get_mut(&k(0, 0)).unwrap();
        part.reshape(shape.clone());
        let now = sim.now + PERIOD;
        part.tick(
            Load {
                kernels: 1,
                ..Load::default()
            },
            now,
        );
        let root = part
            .entries()
            .into_iter()
            .find(|e| e.subtree == shape.root())
            .unwrap();
        assert_eq!(root.load.runnable, 0);
        assert!(matches!(part.place(now), Step::At(kernel) if kernel.node == 0));
    }

    #[test]
    fn a_kernel_knows_the_tree_once_every_child_on_its_path_reported() {
        let mut sim = Sim::new(&[(0, 4), (1, 2)]);
        let now = sim.now;
        let idle = Load {
            kernels: 1,
            ..Load::default()
        };
        // Its own tick alone: the other kernels have not reported yet.
        sim.parts.get_mut(&k(0, 0)).unwrap().tick(idle, now);
        assert!(!sim.parts[&k(0, 0)].knows());
        sim.settle(4);
        assert!(sim.parts.values().all(Dqdt::knows));
    }

    #[test]
    fn quiet_kernels_send_only_heartbeats() {
        let mut sim = Sim::new(&[(0, 4)]);
        sim.settle(3);
        let now = sim.now + PERIOD;
        let idle = Load {
            kernels: 1,
            ..Load::default()
        };
        assert!(sim
            .parts
            .get_mut(&k(0, 2))
            .unwrap()
            .tick(idle, now)
            .is_empty());
        let later = now + HEARTBEAT;
        assert_eq!(
            sim.parts.get_mut(&k(0, 2)).unwrap().tick(idle, later).len(),
            1
        );
    }

    #[test]
    fn a_kernel_is_quiet_only_while_nothing_it_knows_is_runnable() {
        let mut sim = Sim::new(&[(0, 16)]);
        sim.settle(4);
        assert!(sim.parts.values().all(Dqdt::quiet), "an idle node");
        // Kernel 13 gets work: its host (12) hears it, and the views
        // passed down tell every kernel of the node.
        sim.set(k(0, 13), 3);
        sim.settle(4);
        for (kernel, part) in &sim.parts {
            assert!(!part.quiet(), "{kernel} knows of kernel 13's work");
        }
        sim.set(k(0, 13), 0);
        sim.settle(4);
        assert!(sim.parts.values().all(Dqdt::quiet), "idle again");
        // A placement on its way is work too, until a report has it.
        let (to, _) = sim.place(k(0, 0));
        assert!(!sim.parts[&k(0, 0)].quiet(), "placed on {to}");
    }
}
