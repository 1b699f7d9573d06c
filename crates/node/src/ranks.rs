//! MPI jobs (`atoll run -n N`): mpirun's part.
//!
//! The node starts N processes of one program, rank 0 first, and tells each
//! its place in the environment (`ATOLL_MPI_SIZE`, `ATOLL_MPI_RANK`, and
//! rank 0's pid as `ATOLL_MPI_ROOT`); the guest library
//! (`sdk/mpi`, `libatollmpi.a`) does the rest inside the processes. Every
//! rank has its own console, so its output can be tagged with its rank and
//! its end is seen. As with mpirun, the first rank to fail (a status other
//! than 0) ends the others, and its status is the job's.

use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use atoll_abi::{KernelId, Pid};
use atoll_kernel::Control;
use atoll_process::Stream;
use serde::{Deserialize, Serialize};

use crate::console::{InputAnswer, JobSink};
use crate::node::{JobSpec, JobStart, KernelDoors, Node};

/// The shape of an MPI job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranks {
    /// How many processes (ranks) to start.
    pub count: u32,
    pub map_by: MapBy,
    /// Prefix every line of output with its rank, as mpirun
    /// `--tag-output` does: `[1,RANK]<stdout>:`.
    pub tag_output: bool,
}

/// How ranks are laid over the kernels of the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MapBy {
    /// Each rank where the DQDT places it when it starts: the least loaded
    /// kernel, counting the ranks placed before it.
    #[default]
    Load,
    /// Rank r on the r-th kernel, the kernels of each node in turn (node 0's
    /// first), cycling.
    Kernel,
    /// Rank r on node r mod nodes, its kernels taken in turn.
    Node,
}

impl std::str::FromStr for MapBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "load" => Ok(MapBy::Load),
            "kernel" => Ok(MapBy::Kernel),
            "node" => Ok(MapBy::Node),
            _ => Err(format!("`{s}`: expected `load`, `kernel` or `node`")),
        }
    }
}

/// SIGKILL: what the ranks that did not fail are ended with.
const SIGKILL: i32 = 9;

impl Ranks {
    /// The kernel of each rank, over `nodes` (node id, kernel count) in
    /// node order; `None` for ranks placed by load, one by one as they
    /// start.
    pub fn placement(&self, nodes: &[(u16, u16)]) -> Vec<Option<KernelId>> {
        let count = self.count as usize;
        let fixed = |kernels: Vec<KernelId>| kernels.into_iter().map(Some).collect();
        match self.map_by {
            MapBy::Load => vec![None; count],
            MapBy::Kernel => {
                let all: Vec<KernelId> = nodes
                    .iter()
                    .flat_map(|&(node, kernels)| (0..kernels).map(move |i| KernelId::new(node, i)))
                    .collect();
                fixed((0..count).map(|r| all[r % all.len()]).collect())
            }
            MapBy::Node => fixed(
                (0..count)
                    .map(|r| {
                        let (node, kernels) = nodes[r % nodes.len()];
                        KernelId::new(node, ((r / nodes.len()) % kernels as usize) as u16)
                    })
                    .collect(),
            ),
        }
    }
}

/// Ends processes when no request is waiting for the answer: the console
/// service ending a failed job's other ranks.
pub(crate) struct Killer {
    pub node: u16,
    pub doors: KernelDoors,
}

impl Killer {
    fn kill(&self, pid: Pid) {
        // A process of another node is asked through kernel 0 of this one.
        let i = if pid.home.node == self.node {
            pid.home.index as usize
        } else {
            0
        };
        // Nobody waits for the answer: the job's end shows the result.
        let (reply, _) = std::sync::mpsc::channel();
        if i < self.doors.len() {
            self.doors.hand(
                i,
                Control::Kill {
                    pid,
                    signal: SIGKILL,
                    reply,
                },
            );
        }
    }
}

/// The ranks of one job, as the console service sees them end.
struct Group {
    sink: Box<dyn JobSink>,
    killer: Killer,
    /// Each rank's pid, once started, and whether it has ended.
    pids: Vec<Option<Pid>>,
    ended: Vec<bool>,
    /// The status of the first rank that failed.
    failed: Option<i32>,
    tag_output: bool,
    /// Each rank's unfinished line per stream, when tagging.
    partial: Vec<[Vec<u8>; 2]>,
}

impl Group {
    fn started(&mut self, rank: usize, pid: Pid) {
        self.pids[rank] = Some(pid);
        if self.failed.is_some() {
            self.killer.kill(pid);
        }
    }

    fn output(&mut self, rank: usize, stream: Stream, bytes: &[u8]) {
        if !self.tag_output {
            return self.sink.output(stream, bytes);
        }
        let s = match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        };
        self.partial[rank][s].extend_from_slice(bytes);
        let buf = std::mem::take(&mut self.partial[rank][s]);
        let mut lines = buf.split_inclusive(|&b| b == b'\n').peekable();
        let mut out = Vec::new();
        while let Some(line) = lines.next() {
            if lines.peek().is_none() && !line.ends_with(b"\n") {
                self.partial[rank][s] = line.to_vec();
                break;
            }
            out.extend_from_slice(tag(rank, stream).as_bytes());
            out.extend_from_slice(line);
        }
        if !out.is_empty() {
            self.sink.output(stream, &out);
        }
    }

    /// Rank `rank` (process `pid`) ended. Its end may come before the
    /// node's start of it returned (`started`): its pid is taken here too.
    fn exited(&mut self, rank: usize, pid: Pid, status: i32) {
        self.pids[rank] = Some(pid);
        if self.tag_output {
            for (s, stream) in [(0, Stream::Stdout), (1, Stream::Stderr)] {
                let rest = std::mem::take(&mut self.partial[rank][s]);
                if !rest.is_empty() {
                    let mut out = tag(rank, stream).into_bytes();
                    out.extend_from_slice(&rest);
                    out.push(b'\n');
                    self.sink.output(stream, &out);
                }
            }
        }
        self.ended[rank] = true;
        if status != 0 && self.failed.is_none() {
            self.failed = Some(status);
            let msg = format!(
                "atoll: rank {rank} ended with status {status}; ending the job's other ranks\n"
            );
            self.sink.output(Stream::Stderr, msg.as_bytes());
            for (r, pid) in self.pids.iter().enumerate() {
                if let (Some(pid), false) = (pid, self.ended[r]) {
                    self.killer.kill(*pid);
                }
            }
        }
        if self.ended.iter().all(|&e| e) {
            let first = self.pids[0].expect("rank 0 started first");
            self.sink.exited(first, self.failed.unwrap_or(0));
        }
    }
}

fn tag(rank: usize, stream: Stream) -> String {
    let name = match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    };
    format!("[1,{rank}]<{name}>:")
}

/// One rank's share of its group's sink.
struct RankSink {
    group: Arc<Mutex<Group>>,
    rank: usize,
}

impl JobSink for RankSink {
    fn output(&mut self, stream: Stream, bytes: &[u8]) {
        self.group
            .lock()
            .expect("group")
            .output(self.rank, stream, bytes);
    }

    fn exited(&mut self, pid: Pid, status: i32) {
        self.group
            .lock()
            .expect("group")
            .exited(self.rank, pid, status);
    }

    /// The job's input goes to rank 0, as mpirun's does; the other ranks'
    /// reads find end of file.
    fn input(&mut self, answer: InputAnswer) {
        match self.rank {
            0 => self.group.lock().expect("group").sink.input(answer),
            _ => answer.send(Vec::new()),
        }
    }
}

impl Node {
    /// Starts the ranks of an MPI job; returns rank 0's pid. The job's end
    /// (`sink.exited`) comes when every rank has ended.
    pub(crate) fn run_ranks(
        &self,
        job: &JobSpec,
        start: &JobStart,
        ranks: &Ranks,
        sink: Box<dyn JobSink>,
    ) -> anyhow::Result<Pid> {
        if ranks.count == 0 {
            bail!("-n 0: an MPI job needs at least one rank");
        }
        if job.kernel.is_some() {
            bail!("--on places one process; an MPI job is placed with --map-by");
        }
        let members = self.members();
        let nodes: Vec<(u16, u16)> = if members.is_empty() {
            vec![(self.id(), self.kernel_count())]
        } else {
            members.iter().map(|m| (m.node, m.kernels)).collect()
        };
        let kernels = ranks.placement(&nodes);
        let count = ranks.count as usize;
        let group = Arc::new(Mutex::new(Group {
            sink,
            killer: self.killer(),
            pids: vec![None; count],
            ended: vec![false; count],
            failed: None,
            tag_output: ranks.tag_output,
            partial: (0..count).map(|_| [Vec::new(), Vec::new()]).collect(),
        }));
        let mut root = None;
        for (rank, &kernel) in kernels.iter().enumerate() {
            let mut env = job.env.clone();
            env.push(format!("ATOLL_MPI_SIZE={count}"));
            env.push(format!("ATOLL_MPI_RANK={rank}"));
            if let Some(root) = root {
                env.push(format!("ATOLL_MPI_ROOT={root}"));
            }
            let sink = Box::new(RankSink {
                group: group.clone(),
                rank,
            });
            let started = match kernel {
                Some(k) => Ok(k),
                None => self.place(),
            }
            .and_then(|kernel| {
                self.start_process(job, start, kernel, env, sink)
                    .with_context(|| format!("starting rank {rank} on {kernel}"))
            });
            match started {
                Ok(pid) => {
                    root.get_or_insert(pid);
                    group.lock().expect("group").started(rank, pid);
                }
                Err(e) => {
                    // The ranks already started end with the job.
                    let g = group.lock().expect("group");
                    for pid in g.pids.iter().flatten() {
                        g.killer.kill(*pid);
                    }
                    return Err(e);
                }
            }
        }
        Ok(root.expect("at least one rank"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_go_round_kernels_or_nodes() {
        let by = |map_by, count| {
            Ranks {
                count,
                map_by,
                tag_output: false,
            }
            .placement(&[(0, 2), (1, 3)])
            .into_iter()
            .map(|k| k.map_or("load".to_string(), |k| k.to_string()))
            .collect::<Vec<_>>()
        };
        assert_eq!(
            by(MapBy::Kernel, 6),
            ["0.0", "0.1", "1.0", "1.1", "1.2", "0.0"]
        );
        assert_eq!(
            by(MapBy::Node, 6),
            ["0.0", "1.0", "0.1", "1.1", "0.0", "1.2"]
        );
        assert_eq!(by(MapBy::Load, 2), ["load", "load"]);
    }
}
