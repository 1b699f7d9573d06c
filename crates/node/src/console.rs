//! The console service: processes' output and jobs' ends, in order.
//!
//! Kernels send output and exit events on one channel; a single node thread
//! hands them to the sink of the job they belong to. Because everything goes
//! through one FIFO channel, output a process wrote before it ended (or
//! before a parent learned that it ended) reaches the job before the job's
//! end: output written is output shown.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

use atoll_abi::{status, KernelId, Pid};
use atoll_kernel::{NocMsg, NodeEvent, Packet};
use atoll_noc::net::Links;
use atoll_noc::Uplink;
use atoll_process::{Console, ConsoleId, Stream};

/// Where a job's output and end go: a terminal, a client connection.
pub trait JobSink: Send {
    fn output(&mut self, stream: Stream, bytes: &[u8]);
    /// The job's first process ended; nothing more is sent to this sink.
    fn exited(&mut self, pid: Pid, status: i32);
}

/// A job this node's console serves.
pub(crate) struct Job {
    pub sink: Box<dyn JobSink>,
    /// Its first process, once started.
    pub first: Option<Pid>,
}

pub(crate) type Sinks = Arc<Mutex<HashMap<ConsoleId, Job>>>;

/// The kernels' side of the console service. Output for a job of another
/// node goes to that node's console service on the control link, the one
/// its job's end will take too (so it arrives first).
pub(crate) struct ChannelConsole {
    pub tx: Sender<NodeEvent>,
    pub node: u16,
    pub links: Option<Arc<Links<Packet>>>,
}

impl Console for ChannelConsole {
    fn write(&self, console: ConsoleId, stream: Stream, bytes: &[u8]) {
        let bytes = bytes.to_vec();
        match &self.links {
            Some(links) if console.node() != self.node => {
                let msg = NocMsg::Output {
                    console,
                    stream,
                    bytes,
                };
                let (from, to) = (
                    KernelId::new(self.node, 0),
                    KernelId::new(console.node(), 0),
                );
                if let Err(e) = links.send(from, to, Packet::new(msg), None) {
                    tracing::warn!("output for console {console:?} is lost: {e}");
                }
            }
            _ => {
                let _ = self.tx.send(NodeEvent::Output {
                    console,
                    stream,
                    bytes,
                });
            }
        }
    }
}

/// Runs the console service until every sender is gone.
pub(crate) fn serve(events: Receiver<NodeEvent>, sinks: Sinks) {
    for event in events {
        match event {
            NodeEvent::Output {
                console,
                stream,
                bytes,
            } => {
                if let Some(job) = sinks.lock().expect("sinks").get_mut(&console) {
                    job.sink.output(stream, &bytes);
                }
            }
            NodeEvent::Exited {
                pid,
                console,
                status,
            } => {
                if let Some(mut job) = sinks.lock().expect("sinks").remove(&console) {
                    job.sink.exited(pid, status);
                }
            }
            NodeEvent::Lost { node } => {
                let mut sinks = sinks.lock().expect("sinks");
                let lost: Vec<(ConsoleId, Pid)> = sinks
                    .iter()
                    .filter_map(|(&c, j)| j.first.filter(|p| p.home.node == node).map(|p| (c, p)))
                    .collect();
                for (console, pid) in lost {
                    let mut job = sinks.remove(&console).expect("listed");
                    let line = format!("atoll: process {pid} ended: its node {node} was lost\n");
                    job.sink.output(Stream::Stderr, line.as_bytes());
                    job.sink.exited(pid, status::killed(status::SIGKILL));
                }
            }
        }
    }
}
