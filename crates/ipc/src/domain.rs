//! Domains: isolation compartments (M3-IPC's "VMs"). Processes exchange
//! messages and memory only with processes of their own domain; a domain
//! spans kernels, and ending it ends its processes.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A domain's number, carried in every process's UArea.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
pub struct DomainId(pub u32);

impl DomainId {
    /// The domain of jobs started without `--domain`.
    pub const DEFAULT: DomainId = DomainId(0);
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One domain, as `atoll domain list` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DomainInfo {
    pub id: DomainId,
    pub name: String,
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
}

/// The node's domains by name. The node owns the table; each kernel keeps a
/// copy to resolve `bind` by name, updated whenever the table changes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DomainTable {
    by_name: BTreeMap<String, DomainId>,
    next: u32,
}

impl Default for DomainTable {
    fn default() -> Self {
        DomainTable {
            by_name: BTreeMap::from([("default".to_string(), DomainId::DEFAULT)]),
            next: 1,
        }
    }
}

impl DomainTable {
    /// Creates a domain.
    ///
    /// # Errors
    /// [`DomainError::Exists`] or [`DomainError::BadName`].
    pub fn create(&mut self, name: &str) -> Result<DomainId, DomainError> {
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
        let id = DomainId(self.next);
        self.next += 1;
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// Removes a domain (its processes are ended by the kernels).
    ///
    /// # Errors
    /// [`DomainError::Unknown`], or [`DomainError::Default`] for the default domain.
    pub fn end(&mut self, name: &str) -> Result<DomainId, DomainError> {
        match self.by_name.get(name) {
            Some(&DomainId::DEFAULT) => Err(DomainError::Default),
            Some(_) => Ok(self.by_name.remove(name).expect("present")),
            None => Err(DomainError::Unknown(name.to_string())),
        }
    }

    pub fn lookup(&self, name: &str) -> Option<DomainId> {
        self.by_name.get(name).copied()
    }

    pub fn contains(&self, id: DomainId) -> bool {
        self.by_name.values().any(|&d| d == id)
    }

    /// The domains, by name.
    pub fn list(&self) -> Vec<DomainInfo> {
        self.by_name
            .iter()
            .map(|(name, &id)| DomainInfo {
                id,
                name: name.clone(),
            })
            .collect()
    }

    pub fn name(&self, id: DomainId) -> Option<&str> {
        self.by_name
            .iter()
            .find(|(_, &d)| d == id)
            .map(|(n, _)| n.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifecycle() {
        let mut t = DomainTable::default();
        assert_eq!(t.lookup("default"), Some(DomainId::DEFAULT));
        let a = t.create("web").unwrap();
        assert_eq!(t.create("web"), Err(DomainError::Exists("web".into())));
        assert!(matches!(t.create("a b"), Err(DomainError::BadName(_))));
        assert!(matches!(t.create(""), Err(DomainError::BadName(_))));
        assert_eq!(t.end("default"), Err(DomainError::Default));
        assert_eq!(t.end("web"), Ok(a));
        assert!(!t.contains(a));
        assert_eq!(t.end("web"), Err(DomainError::Unknown("web".into())));
        // Ids are never reused, so a stale id never names a new domain.
        assert_ne!(t.create("web").unwrap(), a);
    }
}
