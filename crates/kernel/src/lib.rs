//! One atoll kernel: a pinned OS thread that owns its processes.
//!
//! Each kernel has its own run queue, timers, process table, home table and
//! memory accounting, and shares none of them (DESIGN.md, invariant 1). It
//! runs processes cooperatively, one slice at a time (Toro); a quantum makes
//! a spinning process yield at its next safepoint. Between slices it handles
//! what arrived on the NoC and from the node. With nothing to run it sleeps
//! on its doorbell until a message or a timer wakes it.
//!
//! Reading order: [`msg`] (what kernels say), `kernel.rs` (the loop and the
//! dispatchers), `serve.rs` (system calls that need the kernel),
//! `homes.rs` (PIDs and where their processes are), `migration/` (a process
//! leaving this kernel, `source.rs`, or arriving, `destination.rs`),
//! `nodes.rs` (when another node is lost), `placement.rs` (where new
//! processes go, and the balancer), `files.rs` (files of one node
//! used from another), `dormancy.rs` (which processes keep an instance),
//! `loader.rs` (modules prepared and compiled off the kernel's thread),
//! `runqueue.rs` (which process runs next).

mod dormancy;
mod files;
mod homes;
mod ipc;
mod kernel;
mod loader;
mod migration;
pub mod msg;
mod nodes;
mod placement;
mod quota;
mod runqueue;
mod serve;
mod talk;

pub use dormancy::MIN_INSTANCES_PER_KERNEL;
pub use homes::Kin;
pub use ipc::IpcMsg;
pub use kernel::MigrationConfig;
pub use kernel::{start, KernelParams};
pub use msg::{
    ConsoleEvent, Control, Handover, IpcCounters, KernelReport, MigrationMsg, NocMsg, NodeEvent,
    Packet, ProcInfo, ProcessSpec, ReplyTo, ThreadInfo, Times,
};
