//! Grants: a process's permission for another to read or write a range of
//! its memory (Minix 3's safecopy grants). Every copy between two processes
//! is checked against the grants of the process whose memory it touches;
//! M3-IPC had no such protection.

use std::collections::BTreeMap;

use atoll_abi::{Errno, Pid};
use serde::{Deserialize, Serialize};

/// Most grants a process may hold at once.
pub const MAX_GRANTS: usize = 1024;

/// What a grant allows (Minix's `CPF_READ`, `CPF_WRITE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

impl Access {
    pub const READ: Access = Access {
        read: true,
        write: false,
    };
    pub const WRITE: Access = Access {
        read: false,
        write: true,
    };

    /// From the guest's bits: 1 = read, 2 = write.
    pub fn from_bits(bits: u32) -> Option<Access> {
        match bits {
            1..=3 => Some(Access {
                read: bits & 1 != 0,
                write: bits & 2 != 0,
            }),
            _ => None,
        }
    }

    fn allows(self, need: Access) -> bool {
        (self.read || !need.read) && (self.write || !need.write)
    }
}

/// Permission for `grantee` (or any process of the owner's domain, when
/// `None`) to access `len` bytes at `addr` of the owner's memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Grant {
    pub grantee: Option<Pid>,
    pub addr: u32,
    pub len: u32,
    pub access: Access,
}

impl Grant {
    fn admits(&self, who: Pid, need: Access) -> bool {
        self.grantee.is_none_or(|g| g == who) && self.access.allows(need)
    }
}

/// The grants a process has made, by id.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GrantTable {
    grants: BTreeMap<u32, Grant>,
    next: u32,
}

impl GrantTable {
    /// Records a grant and returns its id. The caller has checked that the
    /// range lies in its memory.
    ///
    /// # Errors
    /// `ENOSPC` when the process already holds [`MAX_GRANTS`].
    pub fn create(&mut self, grant: Grant) -> Result<u32, Errno> {
        if self.grants.len() >= MAX_GRANTS {
            return Err(Errno::NoSpc);
        }
        // Ids are not reused while the process lives: a revoked id stays invalid.
        let id = self.next;
        self.next = self.next.checked_add(1).ok_or(Errno::NoSpc)?;
        self.grants.insert(id, grant);
        Ok(id)
    }

    /// # Errors
    /// `EINVAL` for an id that names no grant.
    pub fn revoke(&mut self, id: u32) -> Result<(), Errno> {
        self.grants.remove(&id).map(|_| ()).ok_or(Errno::Inval)
    }

    /// The owner's address of `len` bytes at `offset` into grant `id`, if
    /// the grant lets `who` access them as `need` says (safecopy).
    ///
    /// # Errors
    /// `EPERM` if the grant does not exist, is for another process, or does
    /// not allow the access; `EFAULT` if the range leaves the grant.
    pub fn resolve(
        &self,
        id: u32,
        who: Pid,
        offset: u32,
        len: u32,
        need: Access,
    ) -> Result<u32, Errno> {
        let g = self
            .grants
            .get(&id)
            .filter(|g| g.admits(who, need))
            .ok_or(Errno::Perm)?;
        match offset.checked_add(len) {
            Some(end) if end <= g.len => Ok(g.addr + offset),
            _ => Err(Errno::Fault),
        }
    }

    /// Whether some grant lets `who` access `[addr, addr + len)` as `need`
    /// says (vcopy by address).
    ///
    /// # Errors
    /// `EPERM` if none does.
    pub fn covers(&self, who: Pid, addr: u32, len: u32, need: Access) -> Result<(), Errno> {
        let end = u64::from(addr) + u64::from(len);
        self.grants
            .values()
            .any(|g| {
                g.admits(who, need) && g.addr <= addr && end <= u64::from(g.addr) + u64::from(g.len)
            })
            .then_some(())
            .ok_or(Errno::Perm)
    }

    /// Whether some grant lets another process write any of the `len`
    /// bytes at `addr`: while none does, only their owner can change them.
    pub fn writable(&self, addr: u32, len: u32) -> bool {
        let end = u64::from(addr) + u64::from(len);
        // Empty ranges share no byte with anything.
        len > 0
            && self.grants.values().any(|g| {
                g.access.write
                    && g.len > 0
                    && u64::from(g.addr) < end
                    && u64::from(addr) < u64::from(g.addr) + u64::from(g.len)
            })
    }

    pub fn len(&self) -> usize {
        self.grants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_abi::KernelId;
    use proptest::prelude::*;

    fn pid(slot: u16) -> Pid {
        Pid::new(KernelId::new(0, 0), slot, 0)
    }

    #[test]
    fn safecopy_rules() {
        let mut t = GrantTable::default();
        let id = t
            .create(Grant {
                grantee: Some(pid(1)),
                addr: 4096,
                len: 100,
                access: Access::READ,
            })
            .unwrap();
        assert_eq!(t.resolve(id, pid(1), 10, 90, Access::READ), Ok(4106));
        assert_eq!(
            t.resolve(id, pid(1), 10, 91, Access::READ),
            Err(Errno::Fault)
        );
        assert_eq!(
            t.resolve(id, pid(1), u32::MAX, 2, Access::READ),
            Err(Errno::Fault)
        );
        assert_eq!(t.resolve(id, pid(1), 0, 1, Access::WRITE), Err(Errno::Perm));
        assert_eq!(t.resolve(id, pid(2), 0, 1, Access::READ), Err(Errno::Perm));
        assert_eq!(
            t.resolve(id + 1, pid(1), 0, 1, Access::READ),
            Err(Errno::Perm)
        );
        t.revoke(id).unwrap();
        assert_eq!(t.resolve(id, pid(1), 0, 1, Access::READ), Err(Errno::Perm));
        assert_eq!(t.revoke(id), Err(Errno::Inval));
        // A revoked id is not handed out again.
        let again = t
            .create(Grant {
                grantee: None,
                addr: 0,
                len: 1,
                access: Access::READ,
            })
            .unwrap();
        assert_ne!(again, id);
        assert_eq!(t.resolve(again, pid(9), 0, 1, Access::READ), Ok(0));
    }

    #[test]
    fn table_is_bounded() {
        let mut t = GrantTable::default();
        for _ in 0..MAX_GRANTS {
            t.create(Grant {
                grantee: None,
                addr: 0,
                len: 1,
                access: Access::READ,
            })
            .unwrap();
        }
        assert_eq!(
            t.create(Grant {
                grantee: None,
                addr: 0,
                len: 1,
                access: Access::READ
            }),
            Err(Errno::NoSpc)
        );
    }

    #[test]
    fn an_empty_grant_or_range_is_never_writable() {
        let mut t = GrantTable::default();
        let grant = |addr, len| Grant {
            grantee: Some(pid(1)),
            addr,
            len,
            access: Access::from_bits(3).unwrap(),
        };
        // Found by `writable_is_overlap`: an empty grant inside the range.
        t.create(grant(252, 0)).unwrap();
        assert!(!t.writable(0, 253));
        t.create(grant(10, 5)).unwrap();
        assert!(!t.writable(12, 0));
        assert!(t.writable(12, 1));
        assert!(!t.writable(15, 100));
    }

    proptest! {
        /// `covers` agrees with a byte-by-byte reading of one grant.
        #[test]
        fn covers_is_containment(ga in 0u32..1000, gl in 0u32..1000, a in 0u32..2100, l in 0u32..1100, rw in 1u32..4, need in 1u32..4) {
            let mut t = GrantTable::default();
            let access = Access::from_bits(rw).unwrap();
            let need = Access::from_bits(need).unwrap();
            t.create(Grant { grantee: Some(pid(1)), addr: ga, len: gl, access }).unwrap();
            let inside = ga <= a && a + l <= ga + gl;
            prop_assert_eq!(t.covers(pid(1), a, l, need).is_ok(), inside && access.allows(need));
            prop_assert!(t.covers(pid(2), a, l, need).is_err());
        }

        /// `writable` agrees with a byte-by-byte reading of one grant.
        #[test]
        fn writable_is_overlap(ga in 0u32..1000, gl in 0u32..1000, a in 0u32..2100, l in 0u32..1100, rw in 1u32..4) {
            let mut t = GrantTable::default();
            let access = Access::from_bits(rw).unwrap();
            t.create(Grant { grantee: Some(pid(1)), addr: ga, len: gl, access }).unwrap();
            let shared = (a..a + l).any(|b| ga <= b && b < ga + gl);
            prop_assert_eq!(t.writable(a, l), shared && access.write);
        }
    }
}
