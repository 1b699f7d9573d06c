//! The NoC: the only way atoll kernels talk to each other.
//!
//! Kernels share no mutable state (DESIGN.md, invariant 1). Everything one
//! kernel asks of another — spawn a process there, deliver an exit status,
//! hand over a process image — is a message through this crate, so that the
//! same kernel code serves a neighbour core today and a kernel on another
//! machine once the NoC grows a network link.
//!
//! Two lanes connect every ordered pair of kernels (seed 000's Nanvix NoC):
//!
//! - the **mailbox** carries small control messages of the kernel's message
//!   type `M` (a closed enum defined by the kernel);
//! - the **portal** carries bulk bytes (process images, copied memory). A
//!   bulk item always travels together with the mailbox message that
//!   describes it, and [`Endpoint::try_recv`] hands both over as one
//!   [`Incoming`]. Inside a node the bytes are moved, not copied.
//!
//! Inside a node each lane is an N×N grid of lock-free single-producer,
//! single-consumer rings (`rings[to][from]`, as Seastar does), so no two
//! kernels ever contend on one queue. A full ring never blocks the sender:
//! the message waits in the sender's own backlog, in order, until
//! [`Endpoint::flush`] moves it.
//!
//! Between nodes each pair of nodes has two TLS connections, one per lane
//! ([`net::Links`]). An endpoint hands what is meant for another node's
//! kernel to its [`Uplink`], and takes what the links delivered for it
//! after its rings: the kernel's code is the same for both.
//!
//! A kernel with nothing to do sleeps on its [`Doorbell`]; a sender rings the
//! doorbell after pushing, which wakes the receiver only if it sleeps (one
//! atomic load otherwise). Before it sleeps it polls for a while, and in a
//! cluster it reads its node's links meanwhile ([`Endpoint::poll_remote`]):
//! an answer from another node then reaches it without a wake-up. The
//! doorbell's pending flag also lets a kernel that is busy running a guest
//! notice that messages are waiting.
//!
//! ```
//! use atoll_noc::Noc;
//! let mut kernels = Noc::build::<&str>(0, 2, 8);
//! let mut k1 = kernels.pop().unwrap();
//! let mut k0 = kernels.pop().unwrap();
//! k0.send(k1.id(), "hello").unwrap();
//! let m = k1.try_recv().unwrap();
//! assert_eq!((m.from, m.msg), (k0.id(), "hello"));
//! ```

mod doorbell;
mod endpoint;
pub mod net;

pub use doorbell::{Awake, Doorbell};
pub use endpoint::{Endpoint, Incoming, Noc, Remote, SendError, Uplink, SMALL_BULK};
