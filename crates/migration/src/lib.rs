//! Live migration of processes between kernels: the parts that are not the
//! kernel's own flow (that is `atoll-kernel`'s `migration/` module).
//!
//! - [`Mode`]: hand a container over without copying (kernels of one node)
//!   or copy it through the portal (the path between NUMA domains and,
//!   later, machines).
//! - [`RoundPolicy`]: when pre-copy stops iterating and the process is
//!   frozen, as Xen does with the writable working set (seed 002).
//! - [`DirtyTracker`]: which pages of a linear memory were written since the
//!   last round, by write-protecting them (`mprotect`) and catching the
//!   first write to each.
//! - [`MigrationReport`]: downtime, total time, bytes and rounds of one
//!   migration, for the log, `atoll ps` and `--json`.

mod dirty;
mod precopy;
mod report;

pub use dirty::{DirtyTracker, BLOCK};
pub use precopy::{Next, RoundPolicy};
pub use report::{MigrationReport, Mode, RoundReport};
