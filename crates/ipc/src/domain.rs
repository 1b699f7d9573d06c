//! Domains: isolation compartments (M3-IPC's "VMs"). Processes exchange
//! messages and memory only with processes of their own domain; a domain
//! spans kernels and nodes, and ending it ends its processes.
//!
//! Every node keeps the table and tells the others of each change
//! ([`DomainOp`]). A domain's id carries the node that made it, so ids are
//! unique in the cluster; two nodes that make a domain of the same name at
//! once both end up with the smaller id.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A domain's number, carried in every process's UArea: the node that made
/// it (16 bits) above its number there (40 bits).
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Debug,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub struct DomainId(pub u64);

/// Bits of a domain id that number the domains one node made; the node's
/// id is above them. 40 bits never wrap (a domain a microsecond would take
/// twelve days), and ids stay within a guest's `i64` (`atoll_domain`).
const SEQ_BITS: u32 = 40;

impl DomainId {
    /// The domain of jobs started without `--domain`.
    pub const DEFAULT: DomainId = DomainId(0);

    /// The node that made it.
    pub fn node(self) -> u16 {
        (self.0 >> SEQ_BITS) as u16
    }
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One domain, as `atoll domain list` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DomainInfo {
    pub id: DomainId,
    pub name: String,
    /// Processes its processes may make and have alive at once
    /// (`atoll domain create --max-processes`).
    pub max_processes: Option<u32>,
}

/// Why a domain request was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DomainError {
    #[error("domain `{0}` already exists")]
    Exists(String),
    #[error("no domain `{0}`")]
    Unknown(String),
    #[error("the default domain cannot be ended")]
    Default,
    #[error("a domain name is 1 to 64 characters of [A-Za-z0-9_.-]: `{0}`")]
    BadName(String),
    /// An id is never given twice, even after its domain ended: the node
    /// has given all of its own.
    #[error("this node has made all the domains it can number")]
    Exhausted,
}

/// A change to the domains, which a node tells the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum DomainOp {
    Created(DomainInfo),
    Ended(DomainInfo),
    /// A node that joined asks for the table.
    Want,
    /// The answer to `Want`: every domain.
    Table(Vec<DomainInfo>),
}

/// The node's domains by name. The node owns the table; each kernel keeps a
/// copy to resolve `bind` by name, updated whenever the table changes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DomainTable {
    by_name: BTreeMap<String, DomainInfo>,
    /// The number of the next domain this node makes: never reused, so that
    /// a process or message of an ended domain never passes for another.
    next: u64,
}

impl Default for DomainTable {
    fn default() -> Self {
        let default = DomainInfo {
            id: DomainId::DEFAULT,
            name: "default".into(),
            max_processes: None,
        };
        DomainTable {
            by_name: BTreeMap::from([(default.name.clone(), default)]),
            next: 1,
        }
    }
}

impl DomainTable {
    /// Creates a domain, made by node `node`, whose processes may make
    /// `max_processes` processes.
    ///
    /// # Errors
    /// [`DomainError::Exists`] or [`DomainError::BadName`].
    pub fn create(
        &mut self,
        name: &str,
        node: u16,
        max_processes: Option<u32>,
    ) -> Result<DomainInfo, DomainError> {
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !valid {
            return Err(DomainError::BadName(name.to_string()));
        }
        if self.by_name.contains_key(name) {
            return Err(DomainError::Exists(name.to_string()));
        }
        if self.next >> SEQ_BITS != 0 {
            return Err(DomainError::Exhausted);
        }
        let info = DomainInfo {
            id: DomainId(u64::from(node) << SEQ_BITS | self.next),
            name: name.to_string(),
            max_processes,
        };
        self.next += 1;
        self.by_name.insert(info.name.clone(), info.clone());
        Ok(info)
    }

    /// Takes in a domain another node made; returns whether the table
    /// changed. Of two domains of one name, the smaller id stays (the
    /// other's processes are then ended, as for an ended domain).
    pub fn merge(&mut self, d: &DomainInfo) -> bool {
        match self.by_name.get(&d.name) {
            Some(kept) if kept.id <= d.id => false,
            _ => {
                self.by_name.insert(d.name.clone(), d.clone());
                true
            }
        }
    }

    /// Removes a domain another node ended, if it is still that one.
    pub fn remove(&mut self, d: &DomainInfo) -> bool {
        if d.id != DomainId::DEFAULT && self.by_name.get(&d.name).map(|k| k.id) == Some(d.id) {
            self.by_name.remove(&d.name);
            return true;
        }
        false
    }

    /// Removes a domain (its processes are ended by the kernels).
    ///
    /// # Errors
    /// [`DomainError::Unknown`], or [`DomainError::Default`] for the default domain.
    pub fn end(&mut self, name: &str) -> Result<DomainInfo, DomainError> {
        match self.by_name.get(name).map(|d| d.id) {
            Some(DomainId::DEFAULT) => Err(DomainError::Default),
            Some(_) => Ok(self.by_name.remove(name).expect("present")),
            None => Err(DomainError::Unknown(name.to_string())),
        }
    }

    pub fn lookup(&self, name: &str) -> Option<DomainId> {
        self.by_name.get(name).map(|d| d.id)
    }

    /// The domain `id`, if it exists.
    pub fn get(&self, id: DomainId) -> Option<&DomainInfo> {
        self.by_name.values().find(|d| d.id == id)
    }

    pub fn contains(&self, id: DomainId) -> bool {
        self.get(id).is_some()
    }

    /// The domains, by name.
    pub fn list(&self) -> Vec<DomainInfo> {
        self.by_name.values().cloned().collect()
    }

    pub fn name(&self, id: DomainId) -> Option<&str> {
        self.get(id).map(|d| d.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle() {
        let mut t = DomainTable::default();
        assert_eq!(t.lookup("default"), Some(DomainId::DEFAULT));
        let a = t.create("web", 0, Some(8)).unwrap().id;
        assert_eq!(t.get(a).unwrap().max_processes, Some(8));
        assert_eq!(
            t.create("web", 0, None),
            Err(DomainError::Exists("web".into()))
        );
        assert!(matches!(
            t.create("a b", 0, None),
            Err(DomainError::BadName(_))
        ));
        assert!(matches!(
            t.create("", 0, None),
            Err(DomainError::BadName(_))
        ));
        assert_eq!(t.end("default"), Err(DomainError::Default));
        assert_eq!(t.end("web").map(|d| d.id), Ok(a));
        assert!(!t.contains(a));
        assert_eq!(t.end("web"), Err(DomainError::Unknown("web".into())));
        // Ids are never reused, so a stale id never names a new domain.
        assert_ne!(t.create("web", 0, None).unwrap().id, a);
    }

    #[test]
    fn nodes_agree_on_domains_made_at_once() {
        let (mut a, mut b) = (DomainTable::default(), DomainTable::default());
        let on_a = a.create("lab", 1, None).unwrap().id;
        let on_b = b.create("lab", 2, None).unwrap().id;
        assert_ne!(on_a, on_b, "ids carry their node");
        assert_eq!((on_a.node(), on_b.node()), (1, 2));
        let info = |name: &str, id| DomainInfo {
            id,
            name: name.into(),
            max_processes: None,
        };
        // Each hears of the other's: both keep the smaller id.
        assert!(!a.merge(&info("lab", on_b)));
        assert!(b.merge(&info("lab", on_a)));
        assert_eq!(a.list(), b.list());
        // An end of the losing id changes nothing; of the kept one, ends it.
        assert!(!a.remove(&info("lab", on_b)));
        assert!(a.remove(&info("lab", on_a)));
        assert_eq!(a.lookup("lab"), None);
        assert!(!a.remove(&info("default", DomainId::DEFAULT)));
    }

    /// Found by the system-call fuzzer: ids had 16 bits of sequence, so a
    /// node's 65,536th domain was given the default domain's id, and the
    /// ones after it the ids of domains that might still run.
    #[test]
    fn ids_are_never_reused_however_many_domains_a_node_makes() {
        let mut t = DomainTable::default();
        let mut seen = std::collections::HashSet::new();
        for i in 0..70_000 {
            let name = format!("d{i}");
            let id = t.create(&name, 3, None).unwrap().id;
            assert!(id != DomainId::DEFAULT && id.node() == 3 && seen.insert(id));
            t.end(&name).unwrap();
        }
        t.next = 1 << SEQ_BITS;
        assert_eq!(t.create("last", 3, None), Err(DomainError::Exhausted));
    }
}
