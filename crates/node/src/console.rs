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

use atoll_abi::Pid;
use atoll_kernel::NodeEvent;
use atoll_process::{Console, ConsoleId, Stream};

/// Where a job's output and end go: a terminal, a client connection.
pub trait JobSink: Send {
    fn output(&mut self, stream: Stream, bytes: &[u8]);
    /// The job's first process ended; nothing more is sent to this sink.
    fn exited(&mut self, pid: Pid, status: i32);
}

pub(crate) type Sinks = Arc<Mutex<HashMap<ConsoleId, Box<dyn JobSink>>>>;

/// The kernels' side of the console service.
pub(crate) struct ChannelConsole {
    pub tx: Sender<NodeEvent>,
}

impl Console for ChannelConsole {
    fn write(&self, console: ConsoleId, stream: Stream, bytes: &[u8]) {
        let _ = self.tx.send(NodeEvent::Output {
            console,
            stream,
            bytes: bytes.to_vec(),
        });
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
                if let Some(sink) = sinks.lock().expect("sinks").get_mut(&console) {
                    sink.output(stream, &bytes);
                }
            }
            NodeEvent::Exited {
                pid,
                console,
                status,
            } => {
                if let Some(mut sink) = sinks.lock().expect("sinks").remove(&console) {
                    sink.exited(pid, status);
                }
            }
        }
    }
}
