//! The node's domains, kept alike on every node of the cluster.
//!
//! A node changes its table (`atoll domain create`, `end`), gives every
//! kernel the new table, and tells every other node (`NocMsg::Domain`, on
//! the control link to its kernel 0). What another node says is applied
//! the same way, by the links as it arrives ([`Domains::apply`]). A node
//! that joins asks every member for its table and takes in each, and so
//! do both ends of a mended link.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use atoll_abi::KernelId;
use atoll_ipc::{DomainError, DomainId, DomainInfo, DomainOp, DomainTable};
use atoll_kernel::{Control, NocMsg, Packet};
use atoll_noc::net::Links;
use atoll_noc::Uplink;

use crate::node::KernelDoors;

pub(crate) struct Domains {
    table: Mutex<DomainTable>,
    /// This node's id, once known (a joining node learns it from the
    /// cluster).
    node: OnceLock<u16>,
    kernels: KernelDoors,
    /// Weak: the links hold this (to apply what other nodes say), and the
    /// node's shutdown drops the links.
    links: OnceLock<Weak<Links<Packet>>>,
}

impl Domains {
    pub(crate) fn new(kernels: KernelDoors) -> Self {
        Domains {
            table: Mutex::new(DomainTable::default()),
            node: OnceLock::new(),
            kernels,
            links: OnceLock::new(),
        }
    }

    /// Once the node knows who it is: with links, it asks the other nodes
    /// for their domains, and asks again a node it was cut off from when
    /// the link is mended.
    pub(crate) fn started(self: &Arc<Self>, node: u16, links: Option<Arc<Links<Packet>>>) {
        let _ = self.node.set(node);
        if let Some(links) = links {
            let _ = self.links.set(Arc::downgrade(&links));
            let domains = Arc::downgrade(self);
            links.on_mended(Box::new(move |m| {
                if let Some(d) = domains.upgrade() {
                    d.tell(m.node, DomainOp::Want);
                }
            }));
            self.tell_all(DomainOp::Want);
        }
    }

    fn node(&self) -> u16 {
        self.node.get().copied().unwrap_or(0)
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<DomainId> {
        self.table.lock().expect("domains").lookup(name)
    }

    pub(crate) fn list(&self) -> Vec<DomainInfo> {
        self.table.lock().expect("domains").list()
    }

    pub(crate) fn create(
        &self,
        name: &str,
        max_processes: Option<u32>,
    ) -> Result<DomainId, DomainError> {
        let mut table = self.table.lock().expect("domains");
        let made = table.create(name, self.node(), max_processes)?;
        self.publish(&table);
        drop(table);
        let id = made.id;
        self.tell_all(DomainOp::Created(made));
        Ok(id)
    }

    pub(crate) fn end(&self, name: &str) -> Result<DomainId, DomainError> {
        let mut table = self.table.lock().expect("domains");
        let ended = table.end(name)?;
        self.publish(&table);
        drop(table);
        let id = ended.id;
        self.tell_all(DomainOp::Ended(ended));
        Ok(id)
    }

    /// What node `from` said.
    pub(crate) fn apply(&self, op: DomainOp, from: u16) {
        let mut table = self.table.lock().expect("domains");
        let changed = match op {
            DomainOp::Created(d) => table.merge(&d),
            DomainOp::Ended(d) => table.remove(&d),
            DomainOp::Table(all) => all.iter().fold(false, |c, d| table.merge(d) | c),
            DomainOp::Want => {
                let all = DomainOp::Table(table.list());
                drop(table);
                return self.tell(from, all);
            }
        };
        if changed {
            self.publish(&table);
        }
    }

    /// Gives every kernel the new table. Kernels take control requests in
    /// order, so a request sent after this one sees the new table.
    fn publish(&self, table: &DomainTable) {
        let table = Arc::new(table.clone());
        self.kernels.tell_all(|| Control::Domains(table.clone()));
    }

    fn tell_all(&self, op: DomainOp) {
        let Some(links) = self.links.get().and_then(Weak::upgrade) else {
            return;
        };
        for m in links.members() {
            self.tell(m.node, op.clone());
        }
    }

    fn tell(&self, node: u16, op: DomainOp) {
        let Some(links) = self.links.get().and_then(Weak::upgrade) else {
            return;
        };
        let (from, to) = (KernelId::new(self.node(), 0), KernelId::new(node, 0));
        if let Err(e) = links.send(from, to, Packet::new(NocMsg::Domain(op)), None) {
            tracing::warn!("node {node} does not hear of a domain change: {e}");
        }
    }
}
