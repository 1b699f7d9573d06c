//! What the dashboard shows, made from the kernels' `ps` reports: each
//! [`Snapshot`] is one sample, and the [`Watcher`] keeps what it needs from
//! the previous one to turn counters into rates and to see migrations.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use atoll_abi::{KernelId, Pid};
use atoll_ipc::{DomainId, DomainInfo};
use atoll_kernel::{KernelReport, ProcInfo};
use atoll_migration::MigrationReport;
use atoll_node::NodeStatus;
use schemars::JsonSchema;
use serde::Serialize;

/// Most processes a snapshot lists (the busiest first); a node may hold
/// 100,000, and the page needs the ones worth looking at.
pub const MAX_PROCESSES: usize = 500;

/// Migrations a snapshot recalls, the newest first.
pub const MAX_MIGRATIONS: usize = 50;

/// One sample of the node and its cluster, as `GET /api/snapshot` answers
/// and `GET /api/events` streams it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Snapshot {
    /// When the kernels answered, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// The span the rates are over, in milliseconds; 0 in the first
    /// sample, whose rates are all 0.
    pub window_ms: u64,
    /// The node serving the dashboard.
    pub node: u16,
    /// The nodes of the cluster (empty for a node alone).
    pub nodes: Vec<NodeStatus>,
    pub kernels: Vec<KernelView>,
    /// Messages per second from one kernel to another, where any flowed.
    pub flows: Vec<Flow>,
    /// The busiest processes, at most [`MAX_PROCESSES`].
    pub processes: Vec<ProcessView>,
    /// Processes of every kernel, listed or not.
    pub processes_total: usize,
    /// The last migrations the dashboard saw, the newest first.
    pub migrations: Vec<MigrationEvent>,
    pub domains: Vec<DomainView>,
}

/// One kernel.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct KernelView {
    pub kernel: KernelId,
    /// Share of the window its processes ran: 1.0 is busy all the time.
    pub busy: f64,
    pub runnable: usize,
    pub processes: usize,
    /// Of `processes`, those kept as images, out of any instance.
    pub dormant: usize,
    pub memory_bytes: usize,
    /// Messages per second handed between its own processes.
    pub local_per_s: f64,
    /// Messages per second its processes sent to, and received from,
    /// processes of other kernels.
    pub out_per_s: f64,
    pub in_per_s: f64,
}

/// Messages per second that kernel `to` received from kernel `from`.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Flow {
    pub from: KernelId,
    pub to: KernelId,
    pub per_s: f64,
}

/// One process.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ProcessView {
    pub pid: Pid,
    pub parent: Option<Pid>,
    pub name: String,
    pub kernel: KernelId,
    pub state: String,
    /// Its domain's name; `None` outside any domain.
    pub domain: Option<String>,
    /// Share of one kernel it used over the window.
    pub cpu: f64,
    pub memory_bytes: usize,
    pub dormant: bool,
    pub moves: u32,
    /// Of its moves, those the balancer decided.
    pub balanced: u32,
    pub pinned: bool,
    pub threads: usize,
}

/// A migration the dashboard saw: a process whose move count grew.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct MigrationEvent {
    /// Numbers the events in the order they were seen.
    pub seq: u64,
    /// When the dashboard saw it, in milliseconds since the Unix epoch.
    pub seen_ms: u64,
    pub name: String,
    /// Whether the balancer decided it (else a process or a user asked).
    pub balanced: bool,
    /// Moves since the previous sample: when more than 1, `report` is the
    /// last of them.
    pub moves: u32,
    pub report: MigrationReport,
}

/// One domain and how many processes it has now.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct DomainView {
    #[serde(flatten)]
    pub info: DomainInfo,
    pub processes: usize,
}

/// What one sample leaves for the next: where each process stood.
#[derive(Default)]
pub struct Watcher {
    last: Option<Sample>,
    migrations: VecDeque<MigrationEvent>,
    seq: u64,
}

struct Sample {
    at: Duration,
    /// Per process: CPU time, moves and balanced moves.
    procs: HashMap<Pid, (u64, u32, u32)>,
    /// Per kernel: its IPC counters.
    ipc: HashMap<KernelId, atoll_kernel::IpcCounters>,
}

impl Watcher {
    /// The snapshot of `reports`, taken `now` (since the Unix epoch).
    pub fn update(
        &mut self,
        node: u16,
        now: Duration,
        reports: Vec<KernelReport>,
        domains: Vec<DomainInfo>,
        nodes: Vec<NodeStatus>,
    ) -> Snapshot {
        let last = self.last.take();
        let window = last
            .as_ref()
            .map_or(Duration::ZERO, |l| now.saturating_sub(l.at));
        let per_s = |n: u64| {
            if window.is_zero() {
                0.0
            } else {
                n as f64 / window.as_secs_f64()
            }
        };
        let cpu_share = |ns: u64| per_s(ns) / 1e9;
        let domain_name: BTreeMap<DomainId, &str> =
            domains.iter().map(|d| (d.id, d.name.as_str())).collect();

        let mut kernels = Vec::with_capacity(reports.len());
        let mut flows = Vec::new();
        let mut processes = Vec::new();
        let mut per_domain: BTreeMap<DomainId, usize> = BTreeMap::new();
        let mut next = Sample {
            at: now,
            procs: HashMap::new(),
            ipc: HashMap::new(),
        };
        for r in reports {
            let before = last.as_ref().and_then(|l| l.ipc.get(&r.kernel));
            let delta = |f: fn(&atoll_kernel::IpcCounters) -> u64| {
                before.map_or(0, |b| f(&r.ipc).saturating_sub(f(b)))
            };
            for (&from, &n) in &r.ipc.from_kernels {
                let was = before.map_or(n, |b| b.from_kernels.get(&from).copied().unwrap_or(0));
                let rate = per_s(n.saturating_sub(was));
                if rate > 0.0 {
                    flows.push(Flow {
                        from,
                        to: r.kernel,
                        per_s: rate,
                    });
                }
            }
            let mut kernel = KernelView {
                kernel: r.kernel,
                busy: 0.0,
                runnable: r.runnable,
                processes: r.processes.len(),
                dormant: r
                    .processes
                    .iter()
                    .filter(|p| p.dormant_bytes.is_some())
                    .count(),
                memory_bytes: r.memory_bytes,
                local_per_s: per_s(delta(|c| c.local)),
                out_per_s: per_s(delta(|c| c.remote_out)),
                in_per_s: per_s(delta(|c| c.remote_in)),
            };
            for p in r.processes {
                let seen = last.as_ref().and_then(|l| l.procs.get(&p.pid)).copied();
                // A process new since the last sample ran all its time in
                // the window; in the first sample nothing has a rate.
                let ran = match (seen, &last) {
                    (Some((cpu, _, _)), _) => p.cpu_ns.saturating_sub(cpu),
                    (None, Some(_)) => p.cpu_ns,
                    (None, None) => 0,
                };
                kernel.busy += cpu_share(ran);
                self.see_moves(&p, seen, last.is_some(), now);
                next.procs.insert(p.pid, (p.cpu_ns, p.moves, p.balanced));
                if let Some(d) = p.domain {
                    *per_domain.entry(d).or_default() += 1;
                }
                processes.push(ProcessView {
                    pid: p.pid,
                    parent: p.parent,
                    kernel: p.kernel,
                    domain: p.domain.map(|d| {
                        domain_name
                            .get(&d)
                            .map_or(format!("#{d}"), |n| n.to_string())
                    }),
                    cpu: cpu_share(ran),
                    memory_bytes: p.memory_bytes,
                    dormant: p.dormant_bytes.is_some(),
                    moves: p.moves,
                    balanced: p.balanced,
                    pinned: p.pinned,
                    threads: p.threads.len().max(1),
                    state: p.state,
                    name: p.name,
                });
            }
            next.ipc.insert(r.kernel, r.ipc);
            kernels.push(kernel);
        }
        kernels.sort_by_key(|k| k.kernel);
        flows.sort_by_key(|f| (f.from, f.to));
        let processes_total = processes.len();
        processes.sort_by(|a, b| b.cpu.total_cmp(&a.cpu).then(a.pid.cmp(&b.pid)));
        processes.truncate(MAX_PROCESSES);
        self.last = Some(next);
        Snapshot {
            time_ms: now.as_millis() as u64,
            window_ms: window.as_millis() as u64,
            node,
            nodes,
            kernels,
            flows,
            processes,
            processes_total,
            migrations: self.migrations.iter().cloned().collect(),
            domains: domains
                .into_iter()
                .map(|info| DomainView {
                    processes: per_domain.get(&info.id).copied().unwrap_or(0),
                    info,
                })
                .collect(),
        }
    }

    /// Records a migration of `p` if it moved since it was `seen` (or, new
    /// since a previous sample, moved at all).
    fn see_moves(
        &mut self,
        p: &ProcInfo,
        seen: Option<(u64, u32, u32)>,
        sampled: bool,
        now: Duration,
    ) {
        let (moves, balanced) = match seen {
            Some((_, m, b)) => (p.moves.saturating_sub(m), p.balanced.saturating_sub(b)),
            None if sampled => (p.moves, p.balanced),
            None => return,
        };
        let Some(report) = p.last_migration.clone().filter(|_| moves > 0) else {
            return;
        };
        self.seq += 1;
        self.migrations.push_front(MigrationEvent {
            seq: self.seq,
            seen_ms: now.as_millis() as u64,
            name: p.name.clone(),
            balanced: balanced > 0,
            moves,
            report,
        });
        self.migrations.truncate(MAX_MIGRATIONS);
    }
}

/// Now, since the Unix epoch.
pub fn now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_kernel::IpcCounters;
    use atoll_migration::Mode;

    fn kernel(i: u16) -> KernelId {
        KernelId::new(0, i)
    }

    fn process(k: u16, slot: u16, cpu_ns: u64, moves: u32) -> ProcInfo {
        let pid = Pid::new(kernel(0), slot, 0);
        ProcInfo {
            pid,
            parent: None,
            name: format!("p{slot}"),
            kernel: kernel(k),
            domain: None,
            state: "ready".into(),
            cpu_ns,
            memory_bytes: 1 << 16,
            dormant_bytes: None,
            syscalls: 0,
            moves,
            balanced: 0,
            pinned: false,
            ipc: Default::default(),
            last_migration: (moves > 0).then(|| MigrationReport {
                pid,
                from: kernel(0),
                to: kernel(k),
                mode: Mode::Handover,
                rounds: vec![],
                downtime_us: 7,
                downtime_ns: 7_250,
                total_us: 20,
            }),
            threads: vec![],
        }
    }

    fn report(k: u16, processes: Vec<ProcInfo>, local: u64, from: &[(u16, u64)]) -> KernelReport {
        KernelReport {
            kernel: kernel(k),
            runnable: 0,
            live: processes.len(),
            memory_bytes: 0,
            slices: 0,
            messages: 0,
            ipc: IpcCounters {
                local,
                from_kernels: from.iter().map(|&(k, n)| (kernel(k), n)).collect(),
                ..Default::default()
            },
            processes,
            tree: vec![],
            balancer_moves: 0,
            balancer_moves_to_idle: 0,
            balancer_called_off: 0,
            held_files: 0,
            copy_rate_mbps: 1000.0,
        }
    }

    #[test]
    fn rates_come_from_the_difference_between_two_samples() {
        let mut w = Watcher::default();
        let t0 = Duration::from_secs(100);
        let first = w.update(
            0,
            t0,
            vec![
                report(0, vec![process(0, 1, 5_000_000_000, 0)], 1000, &[]),
                report(1, vec![], 0, &[(0, 40)]),
            ],
            vec![],
            vec![],
        );
        assert_eq!(first.window_ms, 0);
        assert_eq!(first.kernels[0].busy, 0.0);
        assert!(first.flows.is_empty(), "no rate without a window");

        let second = w.update(
            0,
            t0 + Duration::from_millis(500),
            vec![
                report(0, vec![process(0, 1, 5_250_000_000, 0)], 1500, &[]),
                report(1, vec![process(1, 2, 100_000_000, 0)], 0, &[(0, 90)]),
            ],
            vec![],
            vec![],
        );
        assert_eq!(second.window_ms, 500);
        assert!((second.kernels[0].busy - 0.5).abs() < 1e-9);
        assert!((second.kernels[0].local_per_s - 1000.0).abs() < 1e-9);
        // A process new since the last sample counts all its time.
        assert!((second.kernels[1].busy - 0.2).abs() < 1e-9);
        assert_eq!(
            second.flows,
            vec![Flow {
                from: kernel(0),
                to: kernel(1),
                per_s: 100.0
            }]
        );
        assert_eq!(
            second.processes[0].pid,
            Pid::new(kernel(0), 1, 0),
            "busiest first"
        );
    }

    #[test]
    fn a_process_that_moved_between_samples_is_a_migration_event() {
        let mut w = Watcher::default();
        let t = Duration::from_secs(1);
        // Moves made before the dashboard looked are not events.
        let s = w.update(
            0,
            t,
            vec![report(0, vec![process(0, 1, 0, 3)], 0, &[])],
            vec![],
            vec![],
        );
        assert!(s.migrations.is_empty());
        let s = w.update(
            0,
            t * 2,
            vec![report(1, vec![process(1, 1, 0, 4)], 0, &[])],
            vec![],
            vec![],
        );
        assert_eq!(s.migrations.len(), 1);
        let e = &s.migrations[0];
        assert_eq!((e.seq, e.moves, e.balanced), (1, 1, false));
        assert_eq!(e.report.to, kernel(1));
        assert_eq!(e.report.downtime_us, 7);
        // It stays listed, and is not counted again.
        let s = w.update(
            0,
            t * 3,
            vec![report(1, vec![process(1, 1, 0, 4)], 0, &[])],
            vec![],
            vec![],
        );
        assert_eq!(s.migrations.len(), 1);
        // A process born and moved between two samples is seen too.
        let s = w.update(
            0,
            t * 4,
            vec![report(
                1,
                vec![process(1, 1, 0, 4), process(1, 9, 0, 1)],
                0,
                &[],
            )],
            vec![],
            vec![],
        );
        assert_eq!(s.migrations.len(), 2);
        assert_eq!(
            (s.migrations[0].seq, s.migrations[0].name.as_str()),
            (2, "p9")
        );
    }

    #[test]
    fn domains_count_their_processes_and_name_them() {
        let mut w = Watcher::default();
        let mut p = process(0, 1, 0, 0);
        p.domain = Some(DomainId(3));
        let info = DomainInfo {
            id: DomainId(3),
            name: "web".into(),
            max_processes: Some(10),
        };
        let s = w.update(
            0,
            Duration::from_secs(1),
            vec![report(0, vec![p], 0, &[])],
            vec![info],
            vec![],
        );
        assert_eq!(s.domains[0].processes, 1);
        assert_eq!(s.processes[0].domain.as_deref(), Some("web"));
    }
}
