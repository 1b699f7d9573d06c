//! Minix 3 IPC between atoll processes: the data half.
//!
//! Rendezvous message passing as in Minix 3 (and M3-IPC, seed 003): a
//! process sends a fixed-size [`Message`] to an endpoint (a global PID) and
//! blocks until the receiver takes it; `receive` blocks until a message from
//! the named endpoint (or ANY) arrives; `sendrec` sends and then waits for the
//! reply; `notify` never blocks and coalesces per source. Messages travel
//! only inside a [`Domain`](DomainId). Memory is shared only through
//! [`Grant`]s, checked on every copy.
//!
//! This crate holds what a process carries ([`IpcState`], part of the UArea,
//! so it migrates with the process) and the rules that need no kernel
//! (grant checks, message layout). The rendezvous itself — matching senders
//! with receivers, on one kernel or across the NoC — is `atoll-kernel`'s
//! `ipc` module; the guest API is `sdk/include/atoll.h`.

mod call;
mod domain;
mod grant;
mod message;
mod state;

pub use call::{CopyAddr, CopyRequest, CopySide, IpcCall, Phase};
pub use domain::{DomainError, DomainId, DomainInfo, DomainOp, DomainTable};
pub use grant::{Access, Grant, GrantTable, MAX_GRANTS};
pub use message::{CallKind, Message, MESSAGE_SIZE, NOTIFY_MESSAGE, PAYLOAD_OFFSET, PAYLOAD_SIZE};
pub use state::{
    body_fits, AsyncIn, AsyncOut, BodyAt, EarlyLetter, IpcState, IpcStats, PidSet, WaitingSender,
    ASYNC_BODY_WINDOW, ASYNC_WINDOW, BODY_MAX,
};
