//! The NoC between nodes: what a link between two machines is made of.
//!
//! Inside a node the NoC is rings in shared memory; between nodes it is a
//! network link that must prove who is at the other end and must survive
//! whatever arrives on it (DESIGN.md, "Nodes", invariant 4):
//!
//! - [`identity`]: a cluster has its own certificate authority, made by
//!   `atoll ca init`; each node holds a certificate for its name issued by
//!   it (`atoll ca issue`). No other roots are ever trusted.
//! - [`tls`]: every link is mutual TLS 1.3 (rustls with the ring provider):
//!   both ends present a certificate from the cluster's CA, and a peer's
//!   claimed node name is checked against its certificate.
//! - [`frame`]: what travels on a link is frames of length, format version
//!   and a postcard-encoded message, bounded in size; a frame that does not
//!   decode is an error for its link alone.
//! - `conn`: one connection, which any kernel sends on directly and whose
//!   task reads what arrives;
//! - `watch`: when that task waits for bytes, and when the kernels poll
//!   for them instead;
//! - `work`: whether the links' thread has work, which polling kernels
//!   leave it the core for.
//! - [`link`]: membership (joining through any member, node ids and
//!   incarnations) and the control and bulk connections between each pair
//!   of nodes, which carry kernel messages for the kernels' [`Uplink`](crate::Uplink).

mod conn;
pub mod frame;
pub mod identity;
pub mod link;
pub mod tls;
mod watch;
mod work;

pub use link::{Down, Lane, LinkConfig, LinkError, Links, Member, Wire};
