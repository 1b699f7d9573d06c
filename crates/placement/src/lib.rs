//! Where processes go (DESIGN.md, "Placement").
//!
//! ALMOS-MK places every new process with its DQDT, a quaternary tree of
//! load over all clusters: each leaf reports its load, each inner node holds
//! the aggregate of its four children, and a placement descends from the
//! root into the least loaded child until it reaches a leaf. Here the leaves
//! are kernels, the lower levels group the kernels of one node by four and
//! the upper levels group nodes by four, so a placement prefers this node's
//! kernels only when they are as idle as the others.
//!
//! ALMOS-MK keeps the tree in memory every core can read. atoll's kernels
//! share nothing, so each subtree is *hosted* by its first kernel, which
//! hears its children's loads in messages up the tree ([`DqdtMsg::Up`]) and
//! tells its children's hosts what it knows in messages down
//! ([`DqdtMsg::Down`]). A kernel therefore knows the loads of the children
//! of every subtree it lies in, and no more: a descent that leaves its own
//! path continues at the host of the subtree it chose ([`Step::Ask`]),
//! which knows that subtree's children. Every host a descent passes counts
//! the process in the child it chose until that child's next report, so a
//! burst of placements spreads.
//!
//! - [`tree`]: the tree's shape over the nodes and kernels of the moment.
//! - [`Load`]: what a leaf reports and an inner node sums.
//! - [`Dqdt`]: one kernel's part of the tree, the messages it sends, and
//!   the decisions made from it: placement ([`Dqdt::descend`]) and the
//!   balancer's ([`Dqdt::imbalances`]).

mod dqdt;
mod load;
pub mod tree;

pub use dqdt::{Dqdt, DqdtMsg, Imbalance, Step, Toward, TreeEntry, PERIOD, QUIET_PERIOD};
pub use load::Load;
pub use tree::{Shape, Subtree};
