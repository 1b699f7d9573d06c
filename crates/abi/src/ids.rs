//! Kernel ids and global PIDs.

use std::fmt;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The name of one kernel: the node it runs on and its index there.
///
/// Shown as `node.index`, e.g. `0.3`, which is also its form in JSON; binary
/// encodings (postcard) carry the two numbers. In the guest ABI it is the
/// `i32` `(node << 16) | index`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelId {
    pub node: u16,
    pub index: u16,
}

impl KernelId {
    pub const fn new(node: u16, index: u16) -> Self {
        KernelId { node, index }
    }

    /// The guest ABI form: `(node << 16) | index`.
    pub fn to_abi(self) -> i32 {
        ((self.node as i32) << 16) | self.index as i32
    }

    /// Marks a guest's kernel argument as naming a node too (`ATOLL_KERNEL`
    /// in atoll.h); without it, the argument is an index on the caller's node.
    pub const ON_NODE_ABI: i32 = 0x4000_0000;

    /// Decodes a guest's kernel argument, as seen from kernel `here`: an
    /// index on `here`'s node (0 to 0xFFFF), or `ON_NODE_ABI | node << 16 |
    /// index` for nodes 0 to 0x3FFF. `None` for anything else.
    pub fn from_arg(v: i32, here: KernelId) -> Option<KernelId> {
        match v {
            0..=0xFFFF => Some(KernelId::new(here.node, v as u16)),
            _ if v & !0x3FFF_FFFF == Self::ON_NODE_ABI => Some(KernelId::new(
                ((v >> 16) & 0x3FFF) as u16,
                (v & 0xFFFF) as u16,
            )),
            _ => None,
        }
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.node, self.index)
    }
}

impl fmt::Debug for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for KernelId {
    type Err = ParseIdError;

    /// Accepts `node.index` or a bare index (node 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            ParseIdError(format!(
                "`{s}` is not a kernel id (expected NODE.INDEX or INDEX)"
            ))
        };
        match s.split_once('.') {
            Some((node, index)) => Ok(KernelId::new(
                node.parse().map_err(|_| err())?,
                index.parse().map_err(|_| err())?,
            )),
            None => Ok(KernelId::new(0, s.parse().map_err(|_| err())?)),
        }
    }
}

/// A global process identifier, stable for the life of the process.
///
/// It packs the process's home kernel, its slot in the home kernel's process
/// table and the slot's generation, so that a reused slot is a different
/// PID (and a different IPC endpoint). The home kernel is where a PID was
/// allocated and where its current location is always known, wherever the
/// process has moved since.
///
/// Shown as `node.kernel:slot:generation`, e.g. `0.1:5:0`, which is also
/// its form in JSON, so that a script can hand a PID from `atoll ps --json`
/// back to `atoll kill`; binary encodings (postcard) carry the numbers. In
/// the guest ABI it is an `i64` packing the four fields as 16 bits each,
/// high to low.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid {
    pub home: KernelId,
    pub slot: u16,
    pub generation: u16,
}

impl Pid {
    /// The guest ABI value for "any process" in `wait` and `receive`.
    pub const ANY_ABI: i64 = -1;

    /// The guest ABI value for "the caller itself" in IPC and copies.
    pub const SELF_ABI: i64 = -2;

    /// The guest ABI value `fork` returns in the child. It packs the PID
    /// `0.0:0:0`, which is therefore never a process's: its home kernel
    /// skips that generation of its slot 0.
    pub const CHILD_ABI: i64 = 0;

    pub const fn new(home: KernelId, slot: u16, generation: u16) -> Self {
        Pid {
            home,
            slot,
            generation,
        }
    }

    pub fn to_abi(self) -> i64 {
        ((self.home.node as i64) << 48)
            | ((self.home.index as i64) << 32)
            | ((self.slot as i64) << 16)
            | self.generation as i64
    }

    /// Decodes a guest value; `None` for negative values (ANY and the like),
    /// which are not PIDs.
    pub fn from_abi(v: i64) -> Option<Self> {
        if v < 0 {
            return None;
        }
        Some(Pid::new(
            KernelId::new((v >> 48) as u16, (v >> 32) as u16),
            (v >> 16) as u16,
            v as u16,
        ))
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.home, self.slot, self.generation)
    }
}

impl fmt::Debug for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Pid {
    type Err = ParseIdError;

    /// Accepts `node.kernel:slot:generation` or the guest ABI integer.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || {
            ParseIdError(format!(
                "`{s}` is not a PID (expected NODE.KERNEL:SLOT:GENERATION)"
            ))
        };
        if let Ok(v) = s.parse::<i64>() {
            return Pid::from_abi(v).ok_or_else(err);
        }
        let mut parts = s.split(':');
        let (Some(home), Some(slot), Some(generation), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(err());
        };
        Ok(Pid::new(
            home.parse().map_err(|_| err())?,
            slot.parse().map_err(|_| err())?,
            generation.parse().map_err(|_| err())?,
        ))
    }
}

impl Serialize for KernelId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            (self.node, self.index).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for KernelId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            String::deserialize(d)?.parse().map_err(D::Error::custom)
        } else {
            let (node, index) = Deserialize::deserialize(d)?;
            Ok(KernelId::new(node, index))
        }
    }
}

impl Serialize for Pid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            (self.home, self.slot, self.generation).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Pid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            String::deserialize(d)?.parse().map_err(D::Error::custom)
        } else {
            let (home, slot, generation) = Deserialize::deserialize(d)?;
            Ok(Pid::new(home, slot, generation))
        }
    }
}

/// In JSON a kernel is the string the CLI takes: `NODE.INDEX`.
impl schemars::JsonSchema for KernelId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KernelId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A kernel, NODE.INDEX, as the commands take it: \"0.1\".",
            "type": "string",
            "pattern": r"^[0-9]+\.[0-9]+$"
        })
    }
}

/// In JSON a PID is the string the CLI takes: `NODE.INDEX:SLOT:GENERATION`.
impl schemars::JsonSchema for Pid {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Pid".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A process, NODE.INDEX:SLOT:GENERATION (its home kernel, then its \
                            slot there), as the commands take it: \"0.1:5:0\".",
            "type": "string",
            "pattern": r"^[0-9]+\.[0-9]+:[0-9]+:[0-9]+$"
        })
    }
}

/// A PID or kernel id that could not be parsed; the message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseIdError(String);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pid_abi_and_text_round_trip(node in 0u16..0x8000, index: u16, slot: u16, generation: u16) {
            let pid = Pid::new(KernelId::new(node, index), slot, generation);
            prop_assert!(pid.to_abi() >= 0);
            prop_assert_eq!(Pid::from_abi(pid.to_abi()), Some(pid));
            prop_assert_eq!(pid.to_string().parse::<Pid>().unwrap(), pid);
            prop_assert_eq!(pid.to_abi().to_string().parse::<Pid>().unwrap(), pid);
        }
    }

    #[test]
    fn text_forms() {
        let pid = Pid::new(KernelId::new(0, 1), 5, 2);
        assert_eq!(pid.to_string(), "0.1:5:2");
        assert_eq!("3".parse::<KernelId>().unwrap(), KernelId::new(0, 3));
        assert_eq!("1.3".parse::<KernelId>().unwrap(), KernelId::new(1, 3));
        assert!("0.1:5".parse::<Pid>().is_err());
        assert!("x".parse::<KernelId>().is_err());
        assert_eq!(Pid::from_abi(-1), None);
        assert_eq!(KernelId::new(2, 7).to_abi(), (2 << 16) | 7);
    }

    #[test]
    fn kernel_arguments_name_an_index_here_or_a_node_and_index() {
        let here = KernelId::new(3, 1);
        assert_eq!(KernelId::from_arg(2, here), Some(KernelId::new(3, 2)));
        let on = KernelId::ON_NODE_ABI | (5 << 16) | 9;
        assert_eq!(KernelId::from_arg(on, here), Some(KernelId::new(5, 9)));
        assert_eq!(KernelId::from_arg(-1, here), None);
        assert_eq!(KernelId::from_arg(0x10000, here), None);
        assert_eq!(KernelId::from_arg(i32::MIN | 5, here), None);
    }

    #[test]
    fn json_carries_the_text_form_and_postcard_the_numbers() {
        let pid = Pid::new(KernelId::new(1, 2), 3, 4);
        let json = serde_json::to_string(&(pid, pid.home)).unwrap();
        assert_eq!(json, r#"["1.2:3:4","1.2"]"#);
        assert_eq!(
            serde_json::from_str::<(Pid, KernelId)>(&json).unwrap(),
            (pid, pid.home)
        );
        assert!(serde_json::from_str::<Pid>(r#""1.2:3""#).is_err());
        // Postcard: four varints, the same bytes as the former derived form.
        let bytes = postcard::to_stdvec(&pid).unwrap();
        assert_eq!(bytes, [1, 2, 3, 4]);
        assert_eq!(postcard::from_bytes::<Pid>(&bytes).unwrap(), pid);
    }
}
