//! The dashboard of an atoll node, in a browser (`atoll node --http
//! ADDR:PORT`): its kernels and their load over time, the processes with
//! their state, the IPC flowing between kernels, migrations as they
//! happen with their downtime, and the domains; a process migrates or ends
//! with one click.
//!
//! - [`view`] turns the kernels' `ps` reports into what the page shows:
//!   counters into rates, growing move counts into migration events.
//! - [`server`] serves the page and its HTTP API (a JSON snapshot,
//!   server-sent events, migrate and kill), sampling the node while anyone
//!   watches.
//! - `assets/` is the page itself: one HTML file, a style sheet and a
//!   script, with no build step.
//!
//! Access: the dashboard can move and kill every process of the node, as
//! the control socket can. The socket admits only the node's user; over
//! HTTP, where the peer's user is unknown, every API request must carry the
//! random token the dashboard's URL holds (`?token=`, or `Authorization:
//! Bearer`). Whoever may read the node's log or ask it over its socket
//! (`atoll dashboard`) gets the URL.

pub mod server;
pub mod view;

pub use server::Dashboard;
pub use view::Snapshot;
