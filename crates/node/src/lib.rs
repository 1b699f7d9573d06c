//! An atoll node: the kernels of one machine and the things they share
//! read-only.
//!
//! [`Node::start`] builds the NoC between N kernels, starts one pinned thread
//! per kernel, and starts the console service that carries processes' output
//! to the terminal of the job that started them. Jobs are started with
//! [`Node::run_job`]; [`daemon`] serves the same operations on a Unix socket
//! so that `atoll run`, `ps` and `kill` can talk to a long-lived node.

mod console;
pub mod daemon;
mod domains;
mod node;
mod ranks;
mod report;

pub use console::{InputAnswer, JobSink};
pub use node::{JobSpec, Node, NodeConfig, NodeStatus};
pub use ranks::{MapBy, Ranks};
pub use report::report;
