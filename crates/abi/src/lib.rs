//! Names and numbers that cross the boundary between atoll's crates, and
//! between atoll and the guest programs it runs.
//!
//! - [`KernelId`]: `node.index`, the name of one per-core kernel.
//! - [`Pid`]: a global process identifier (also an IPC endpoint). It names
//!   the process's *home kernel*, which always knows where the process runs.
//! - [`Errno`]: the one error enum at the guest ABI, numbered as WASI
//!   preview1 (and so as wasi-libc's `<errno.h>`).
//! - [`status`]: how a process's end is reported to whoever waits for it.
//!
//! The guest-side view of the same ABI is `sdk/include/atoll.h`.

mod errno;
mod ids;
pub mod status;

pub use errno::Errno;
pub use ids::{KernelId, ParseIdError, Pid};
