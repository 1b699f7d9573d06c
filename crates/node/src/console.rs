//! The console service: processes' output, input and jobs' ends, in order.
//!
//! Kernels send output, stdin reads, drains and exit events on one channel;
//! a single node thread hands each to the job it belongs to. Each job has a
//! thread of its own that passes them to the job's sink (a terminal, a
//! client connection) in the order they came, so a slow terminal holds up
//! its own job and no other. Because everything goes through FIFO channels,
//! output a process wrote before it ended (or before a parent learned that
//! it ended) reaches the job before the job's end: output written is output
//! shown. Output from other nodes comes on their links, which nothing
//! orders; a process that moves between nodes keeps its output in order,
//! and ahead of its end, with drains ([`ConsoleFlow`]).
//!
//! **Backpressure.** A process may have [`CONSOLE_WINDOW`] bytes of output
//! on their way. At each half window it asks (`Drain { upto }`) to be told
//! when its job's thread has passed that much to the sink, and goes on
//! writing; it waits only when a whole window is still out. So the memory
//! output takes is bounded per process whatever the terminal does, and
//! writer and terminal overlap. Input is pulled: the sink reads its source
//! only when a process asks, at most the bytes asked.
//! A job's reads reach its sink in order with its output, so a read waits
//! while the terminal has yet to take the output before it, as a filter
//! whose reader stalls would wait in a pipeline.
//!
//! [`CONSOLE_WINDOW`]: atoll_process::CONSOLE_WINDOW
//! [`ConsoleFlow`]: atoll_process::ConsoleFlow

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use atoll_abi::{status, KernelId, Pid};
use atoll_kernel::{ConsoleEvent, Control, NocMsg, NodeEvent, Packet};
use atoll_noc::net::Links;
use atoll_noc::Uplink;
use atoll_process::{Console, ConsoleId, Stream};

use crate::node::KernelDoors;

/// Where a job's output and end go, and its input comes from: a terminal,
/// a client connection.
pub trait JobSink: Send {
    /// Passes output on. It may block (a terminal that does not keep up):
    /// that holds up this job's processes once their windows are full.
    fn output(&mut self, stream: Stream, bytes: &[u8]);
    /// The job's first process ended; nothing more is sent to this sink.
    fn exited(&mut self, pid: Pid, status: i32);
    /// A process of the job reads its standard input: `answer` it, now or
    /// later and from any thread, without blocking here (output goes on
    /// meanwhile). The default is a job without input: end of file.
    fn input(&mut self, answer: InputAnswer) {
        answer.send(Vec::new());
    }
}

/// The answer to one read of a job's standard input, for the process that
/// asked, wherever it runs when it is sent.
pub struct InputAnswer {
    pid: Pid,
    max: u32,
    router: Router,
}

impl InputAnswer {
    /// The most bytes the process asked for.
    pub fn max(&self) -> usize {
        self.max as usize
    }

    /// Sends `bytes` (at most [`max`](Self::max); the rest is dropped) to
    /// the process; none means end of file.
    pub fn send(self, mut bytes: Vec<u8>) {
        bytes.truncate(self.max());
        self.router.route(NocMsg::Input {
            pid: self.pid,
            bytes,
        });
    }
}

/// The console service's way to answer a process: through its home kernel
/// (or kernel 0, for a process homed on another node), which routes the
/// answer to wherever the process runs.
#[derive(Clone)]
pub(crate) struct Router {
    pub doors: KernelDoors,
    pub node: u16,
}

impl Router {
    fn route(&self, msg: NocMsg) {
        let Some(pid) = msg.target() else {
            return tracing::error!("the console answers only processes: {msg:?}");
        };
        let kernel = if pid.home.node == self.node {
            pid.home.index as usize
        } else {
            0
        };
        self.doors.tell(kernel, Control::Route(msg));
    }
}

/// What a job's thread is given, in order.
enum JobEvent {
    Output(Stream, Vec<u8>),
    Input { pid: Pid, max: u32 },
    Drain { pid: Pid, upto: u64 },
    Exited { pid: Pid, status: i32 },
}

/// A job this node's console serves.
pub(crate) struct Job {
    events: Sender<JobEvent>,
    /// Its first process, once started.
    pub first: Option<Pid>,
}

impl Job {
    /// Starts the thread that serves `sink`.
    pub fn open(console: ConsoleId, sink: Box<dyn JobSink>, router: Router) -> Job {
        let (events, rx) = mpsc::channel();
        let name = format!("atoll-job-{}", console.0 & ((1 << 48) - 1));
        let serve = move || serve_job(sink, rx, router);
        if let Err(e) = std::thread::Builder::new().name(name).spawn(serve) {
            // Its events then find no receiver, and are answered as for a
            // job that ended: output dropped, end of file, drained.
            tracing::error!("no thread for the job of console {console:?}: {e}");
        }
        Job {
            events,
            first: None,
        }
    }
}

/// A job's thread: its events to its sink, until the job ends.
fn serve_job(mut sink: Box<dyn JobSink>, events: Receiver<JobEvent>, router: Router) {
    for event in events {
        match event {
            JobEvent::Output(stream, bytes) => sink.output(stream, &bytes),
            JobEvent::Input { pid, max } => sink.input(InputAnswer {
                pid,
                max,
                router: router.clone(),
            }),
            JobEvent::Drain { pid, upto } => router.route(NocMsg::Drained { pid, upto }),
            JobEvent::Exited { pid, status } => return sink.exited(pid, status),
        }
    }
}

pub(crate) type Sinks = Arc<Mutex<HashMap<ConsoleId, Job>>>;

/// The kernels' side of the console service. What is for a job of another
/// node goes to that node's console service on the control link, the one
/// its job's end will take too (so it arrives first).
pub(crate) struct ChannelConsole {
    pub tx: Sender<NodeEvent>,
    pub node: u16,
    pub links: Option<Arc<Links<Packet>>>,
}

impl ChannelConsole {
    fn send(&self, event: ConsoleEvent) {
        let console = event.console();
        match &self.links {
            Some(links) if console.node() != self.node => {
                let (from, to) = (
                    KernelId::new(self.node, 0),
                    KernelId::new(console.node(), 0),
                );
                let msg = Packet::new(NocMsg::Console(event));
                if let Err(e) = links.send(from, to, msg, None) {
                    tracing::warn!("console {console:?} is out of reach: {e}");
                }
            }
            _ => {
                let _ = self.tx.send(NodeEvent::Console(event));
            }
        }
    }
}

impl Console for ChannelConsole {
    fn write(&self, console: ConsoleId, stream: Stream, bytes: &[u8]) {
        let bytes = bytes.to_vec();
        self.send(ConsoleEvent::Output {
            console,
            stream,
            bytes,
        });
    }

    fn read(&self, console: ConsoleId, pid: Pid, max: u32) {
        self.send(ConsoleEvent::ReadInput { console, pid, max });
    }

    fn drain(&self, console: ConsoleId, pid: Pid, upto: u64) {
        self.send(ConsoleEvent::Drain { console, pid, upto });
    }
}

/// Runs the console service until every sender is gone. What comes for a
/// job that has ended (a child still running after it) is answered here:
/// its output is dropped, its reads find end of file, its drains are done.
pub(crate) fn serve(events: Receiver<NodeEvent>, sinks: Sinks, router: Router) {
    let to_job = |console: &ConsoleId, event: JobEvent| -> Option<JobEvent> {
        let sinks = sinks.lock().expect("sinks");
        match sinks.get(console) {
            Some(job) => job.events.send(event).err().map(|e| e.0),
            None => Some(event),
        }
    };
    for event in events {
        let unserved = match event {
            NodeEvent::Console(event) => {
                let console = event.console();
                let event = match event {
                    ConsoleEvent::Output { stream, bytes, .. } => JobEvent::Output(stream, bytes),
                    ConsoleEvent::ReadInput { pid, max, .. } => JobEvent::Input { pid, max },
                    ConsoleEvent::Drain { pid, upto, .. } => JobEvent::Drain { pid, upto },
                };
                to_job(&console, event)
            }
            NodeEvent::Exited {
                pid,
                console,
                status,
            } => {
                let job = sinks.lock().expect("sinks").remove(&console);
                job.and_then(|j| j.events.send(JobEvent::Exited { pid, status }).err())
                    .map(|e| e.0)
            }
            NodeEvent::Lost { node } => {
                let mut sinks = sinks.lock().expect("sinks");
                let lost: Vec<(ConsoleId, Pid)> = sinks
                    .iter()
                    .filter_map(|(&c, j)| j.first.filter(|p| p.home.node == node).map(|p| (c, p)))
                    .collect();
                for (console, pid) in lost {
                    let job = sinks.remove(&console).expect("listed");
                    let line = format!("atoll: process {pid} ended: its node {node} was lost\n");
                    let _ = job
                        .events
                        .send(JobEvent::Output(Stream::Stderr, line.into()));
                    let status = status::killed(status::SIGKILL);
                    let _ = job.events.send(JobEvent::Exited { pid, status });
                }
                None
            }
        };
        match unserved {
            Some(JobEvent::Input { pid, .. }) => router.route(NocMsg::Input { pid, bytes: vec![] }),
            Some(JobEvent::Drain { pid, upto }) => router.route(NocMsg::Drained { pid, upto }),
            _ => {}
        }
    }
}
