//! Process quotas: how many processes a job (`atoll run --max-processes`)
//! or a domain (`atoll domain create --max-processes`) may have alive at
//! once, so that a fork bomb stops where it started and the node and the
//! other domains carry on.
//!
//! A quota is counted by one kernel, its *keeper*: kernel 0 of the node
//! that started the job (its console's node), or of the node that made the
//! domain. Nothing is shared. Before a process under a quota spawns or
//! forks, its kernel asks the keeper for a place (`Admit`); the answer
//! (`Admitted`) reaches the process wherever it runs by then, and the spawn
//! or fork goes on, or fails with `EAGAIN`. The child counts in the places
//! granted for it (`Quotas::counted`, in its UArea, so they move with it),
//! and its end frees them (`Release`), as does a spawn that fails after
//! its places were granted. A process under no quota pays nothing.
//!
//! What is counted: a job's processes but its first (a job's limit of N
//! leaves room for N - 1 more), and the processes a domain's processes
//! make (not the jobs an operator starts in it). A restored checkpoint
//! starts counted in nothing. Places held by processes of a node that is
//! lost are not freed: the keeper cannot tell them from live ones.

use std::collections::HashMap;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_process::{CallState, KernelCall, Quota, Reply, UArea};

use crate::kernel::Kernel;
use crate::msg::NocMsg;

/// A keeper's count of one quota.
#[derive(Debug, Default)]
pub(crate) struct Count {
    live: u32,
    /// Whether a refusal has been reported on the terminal since the count
    /// was last empty: once is enough (a fork bomb would fill it).
    reported: bool,
}

/// The quotas this kernel keeps.
pub(crate) type Counts = HashMap<Quota, Count>;

/// The kernel that counts `quota`.
fn keeper(quota: Quota) -> KernelId {
    match quota {
        Quota::Job(console) => KernelId::new(console.node(), 0),
        Quota::Domain(domain) => KernelId::new(domain.node(), 0),
    }
}

impl Kernel {
    /// The quotas a child of the process `u` describes would count in,
    /// with how many places each has.
    fn quotas_of(&self, u: &UArea) -> Vec<(Quota, u32)> {
        let job = u
            .limits
            .processes
            .map(|n| (Quota::Job(u.console), n.saturating_sub(1)));
        let domain = u.ipc.domain.and_then(|d| {
            let max = self.domains.get(d)?.max_processes?;
            Some((Quota::Domain(d), max))
        });
        job.into_iter().chain(domain).collect()
    }

    /// Whether `pid` may make a child now: true when every quota it is
    /// under has granted it a place; else the next is asked, and the call
    /// is served again when it answers ([`on_admitted`](Self::on_admitted)).
    pub(crate) fn admitted(&mut self, pid: Pid) -> bool {
        let Some(p) = self.procs.get(&pid) else {
            return false;
        };
        let u = p.container.uarea();
        let missing = self
            .quotas_of(u)
            .into_iter()
            .find(|(q, _)| !u.quotas.granted.contains(q));
        match missing {
            None => true,
            Some((quota, max)) => {
                self.send(keeper(quota), NocMsg::Admit { quota, max, pid });
                false
            }
        }
    }

    /// At the keeper: a place for a child of `pid`, if `quota` has one.
    pub(crate) fn on_admit(&mut self, quota: Quota, max: u32, pid: Pid) {
        let count = self.quotas.entry(quota).or_default();
        let granted = count.live < max;
        if granted {
            count.live += 1;
        }
        let report = !granted && !std::mem::replace(&mut count.reported, true);
        self.route(
            pid,
            NocMsg::Admitted {
                pid,
                quota,
                max,
                granted,
                report,
            },
        );
    }

    /// At the keeper: a process counted in `quota` ended, or a place
    /// granted went unused.
    pub(crate) fn on_release(&mut self, quota: Quota) {
        if let Some(count) = self.quotas.get_mut(&quota) {
            count.live = count.live.saturating_sub(1);
            if count.live == 0 {
                self.quotas.remove(&quota);
            }
        }
    }

    /// Frees the places `quotas` hold.
    pub(crate) fn release(&mut self, quotas: Vec<Quota>) {
        for quota in quotas {
            self.send(keeper(quota), NocMsg::Release { quota });
        }
    }

    /// Where `pid` runs: the keeper's answer. A spawn or fork granted its
    /// place is served again (it asks the next quota, or goes on); one
    /// refused fails with `EAGAIN`, its other places freed. A place nobody
    /// waits for any more (the process ended or moved on) is freed.
    pub(crate) fn on_admitted(
        &mut self,
        pid: Pid,
        quota: Quota,
        max: u32,
        granted: bool,
        report: bool,
    ) {
        let call = self
            .procs
            .get(&pid)
            .and_then(|p| match &p.container.uarea().call {
                CallState::Blocked(c @ (KernelCall::Spawn(_) | KernelCall::Fork { .. })) => {
                    Some(c.clone())
                }
                _ => None,
            });
        let Some(call) = call else {
            if granted {
                self.release(vec![quota]);
            }
            return;
        };
        let quotas = &mut self
            .procs
            .get_mut(&pid)
            .expect("found")
            .container
            .uarea_mut()
            .quotas;
        if granted {
            quotas.granted.push(quota);
            return self.serve(pid, call);
        }
        let held = std::mem::take(&mut quotas.granted);
        self.release(held);
        if report {
            // A job's count leaves out its first process.
            let (whose, limit) = match quota {
                Quota::Job(_) => ("its job".to_string(), max + 1),
                Quota::Domain(d) => {
                    let name = self.domains.name(d).unwrap_or("?");
                    (format!("its domain {name}"), max)
                }
            };
            self.diagnose(
                pid,
                &format!(
                    "cannot make a process: {whose} has reached --max-processes {limit} \
                     (not reported again until its processes have all ended)"
                ),
            );
        }
        self.reply_if_blocked(
            pid,
            |c| matches!(c, KernelCall::Spawn(_) | KernelCall::Fork { .. }),
            Reply::Spawned(Err(Errno::Again)),
        );
    }
}
