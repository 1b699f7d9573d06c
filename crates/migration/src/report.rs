//! What one migration did, measured.

use atoll_abi::{KernelId, Pid};
use serde::{Deserialize, Serialize};

/// How a container crosses from one kernel to another.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The container itself (wasmtime store, memory and all) is handed to
    /// the destination kernel through the NoC: nothing is copied. Only
    /// between kernels that share memory (one node).
    #[default]
    Handover,
    /// The container is serialized, sent through the portal and rebuilt,
    /// with optional pre-copy rounds while it still runs.
    Copy,
    /// Between nodes only: without pre-copy rounds, the process is stopped
    /// (once the destination has made its container) and sent with the
    /// few blocks it reads on resuming; it runs at the destination
    /// while the rest of its memory follows, faulted in or streamed. One
    /// copy of the memory whatever the process writes, where pre-copy may
    /// never catch up with it; but until the memory is in, the process
    /// needs both nodes, and dies if its source is lost.
    PostCopy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Handover => "handover",
            Mode::Copy => "copy",
            Mode::PostCopy => "postcopy",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "handover" => Ok(Mode::Handover),
            "copy" => Ok(Mode::Copy),
            "postcopy" => Ok(Mode::PostCopy),
            _ => Err(format!("`{s}`: expected `handover`, `copy` or `postcopy`")),
        }
    }
}

/// One pre-copy round, or the final stop-and-copy (the last entry).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoundReport {
    /// Memory blocks ([`crate::BLOCK`] bytes) sent in the round.
    pub blocks: u64,
    /// Bytes sent through the portal (the encoded frame).
    pub bytes: u64,
    /// Time the source kernel spent collecting and sending the round.
    pub us: u64,
}

/// How one migration went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MigrationReport {
    pub pid: Pid,
    pub from: KernelId,
    pub to: KernelId,
    pub mode: Mode,
    /// Pre-copy rounds, then the stop-and-copy; empty for a hand-over.
    pub rounds: Vec<RoundReport>,
    /// From the freeze at a safepoint on the source until the process is
    /// back in a run queue (or waiting in its call) on the destination,
    /// in whole microseconds.
    pub downtime_us: u64,
    /// The same in nanoseconds: within a node a downtime is a few
    /// microseconds, too few for whole ones to compare two of them.
    /// Absent (0) from the results recorded before it was.
    #[serde(default)]
    pub downtime_ns: u64,
    /// From the request until the destination confirmed.
    pub total_us: u64,
}

impl MigrationReport {
    /// Bytes moved through the portal, all rounds together.
    pub fn bytes(&self) -> u64 {
        self.rounds.iter().map(|r| r.bytes).sum()
    }

    /// Pre-copy rounds (the stop-and-copy is not counted).
    pub fn precopy_rounds(&self) -> usize {
        self.rounds.len().saturating_sub(1)
    }

    /// One line for the log and the command line.
    pub fn summary(&self) -> String {
        format!(
            "{} {} -> {} ({}): downtime {} us, total {} us, {} bytes, {} pre-copy rounds",
            self.pid,
            self.from,
            self.to,
            self.mode,
            self.downtime_us,
            self.total_us,
            self.bytes(),
            self.precopy_rounds()
        )
    }
}
