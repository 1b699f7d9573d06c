//! Live migration: a process leaves this kernel (`source.rs`) or arrives
//! here (`destination.rs`). Seed 000's migration daemon, as a flow of steps
//! driven by the kernel loop and by `MigrationMsg`s:
//!
//! 1. **request** — `atoll migrate`, `kmigrate_to` or the balancer names a
//!    process and a destination (`Kernel::migrate`);
//! 2. **pre-copy** (copy mode, running process) — rounds of memory go
//!    through the portal while the process keeps running here; writes are
//!    tracked by write protection ([`atoll_migration::DirtyTracker`]) and
//!    [`atoll_migration::RoundPolicy`] decides when to stop;
//! 3. **freeze** — between two slices, which is always at a safepoint;
//! 4. **stop-and-copy** — the blocks still dirty, globals and UArea (with the
//!    saved stack, which lives in linear memory) in one delta image; or, in
//!    hand-over mode, the container itself;
//! 5. **restore** on the destination, then **commit** at the home kernel
//!    (a process that has not run, leaving its home, is committed as it
//!    leaves, and runs once restored);
//! 6. **resume** there, and `Done` tells the source.
//!
//! Between nodes, a process that has not run yet (a forked child, an exec'd
//! program) goes without its memory's bytes and starts at once; the source
//! streams them once the destination asks (the process runs on, faults,
//! or is to be captured), and sends ahead any block the process waits for
//! (`lend.rs`, post-copy).
//!
//! Until `Done` says it runs there, the source keeps the process (frozen)
//! and holds the messages for it; any failure before the commit rolls back
//! and the process resumes at the source. It never runs twice and is never
//! lost (DESIGN.md, invariant 3).

mod destination;
mod lend;
mod source;

pub(crate) use destination::{Arriving, Incoming};
pub(crate) use lend::Lend;
pub(crate) use source::{Departure, Started};
