//! The atoll process, or *container*: code + data + UArea.
//!
//! - **Code** is a WebAssembly module, prepared by `atoll-prepare` so that
//!   it has safepoints and can unwind its stack, compiled once per node and
//!   named by content hash ([`Runtime`], [`Program`]).
//! - **Data** is the instance's linear memory and globals.
//! - The **[`UArea`]** is every piece of kernel-side state of the process, as
//!   one serializable struct.
//!
//! A kernel drives a [`Container`] slice by slice. The guest's system calls
//! are implemented here ([WASI preview1] and atoll's own). Those that need
//! the kernel return a [`KernelCall`] and leave the guest unwound: a blocked
//! process holds no OS thread and no native stack, and can be captured as a
//! [`ProcessImage`] and restored on any kernel.
//!
//! [WASI preview1]: https://github.com/WebAssembly/WASI/blob/main/legacy/preview1/docs.md

mod call;
pub mod clock;
mod container;
mod ctx;
mod fd;
mod fs;
mod image;
mod loan;
mod memory;
pub mod postcopy;
mod resident;
mod runtime;
mod spare;
mod syscall;
pub mod threads;
mod uarea;
mod yield_flags;

pub use call::{
    CallState, IpcCaller, IpcOutcome, KernelCall, KernelLink, Reply, SpawnModule, SpawnRequest,
    Yielding,
};
pub use container::{Container, ContainerError, EncodedImage, Slice};
pub use ctx::{Console, Host, Stream, CONSOLE_WINDOW};
pub use fd::{DirFd, Fd, FdTable, FileFd, FileId, Preopen, Rights};
pub use fs::held::HeldFiles;
pub use fs::op::{Beneath, FileAnswer, FileOp};
pub use fs::HostFiles;
pub use image::{
    mapped_ranges, GlobalValue, ImageError, ImageView, MemoryImage, MemoryView, ProcessImage, Run,
    RunView, BLOCK, PAGE_SIZE,
};
pub use loan::Loan;
pub use postcopy::{LateMemories, LateMemory};
pub use runtime::{LoadError, Program, Runtime, RuntimeConfig, SystemCall};
pub use spare::Spares;
pub use uarea::{
    Accounting, Children, ConsoleFlow, ConsoleId, EndStep, Ending, Limits, Quota, Quotas,
    StackArea, StdinAhead, UArea, Wander,
};
