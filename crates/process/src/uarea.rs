//! The UArea: every piece of kernel-side state of one process.
//!
//! DESIGN.md, invariant 2: a process can be serialized at any safepoint from
//! its UArea, its linear memory, its globals and its saved stack — nothing
//! else. So anything a system call remembers between calls lives here, as
//! plain data: no host handles, no pointers, no thread ids. Host resources
//! that mirror it (open `std::fs::File`s) are caches that can be rebuilt
//! from the UArea on any kernel.

use std::collections::{BTreeSet, VecDeque};

use atoll_abi::{KernelId, Pid};
use atoll_ipc::{DomainId, IpcState};
use atoll_prepare::ContentHash;
use serde::{Deserialize, Serialize};

use crate::call::{CallState, KernelCall};
use crate::fd::FdTable;
use crate::threads::Threads;

/// Identifies the console (job output stream) a process writes to. It stays
/// the same wherever the process runs, so its output keeps going to the
/// terminal of the job that started it. Its top 16 bits are the node that
/// owns that terminal.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ConsoleId(pub u64);

impl ConsoleId {
    /// The `seq`-th console of node `node`.
    pub fn new(node: u16, seq: u64) -> Self {
        ConsoleId(u64::from(node) << 48 | (seq & ((1 << 48) - 1)))
    }

    /// The node whose terminal (or client) shows this console.
    pub fn node(self) -> u16 {
        (self.0 >> 48) as u16
    }
}

/// Kernel-side state of one process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UArea {
    pub pid: Pid,
    /// Who receives the exit status; `None` for a job's first process, whose
    /// status goes to the job's console.
    pub parent: Option<Pid>,
    /// Content hash of the (prepared) module: the code is the same on every
    /// kernel, so only its name travels.
    pub module: ContentHash,
    /// argv, argv[0] included.
    pub args: Vec<String>,
    /// `KEY=VALUE` strings.
    pub env: Vec<String>,
    pub console: ConsoleId,
    pub fds: FdTable,
    pub children: Children,
    /// Domain, pending notifications, blocked senders, grants. Boxed: a
    /// kernel borrows it for a while in the middle of the process's call
    /// (`ipc/in_place.rs` of the kernel), and swapping a pointer costs
    /// nothing where moving the state was a `memmove` each way.
    pub ipc: Box<IpcState>,
    /// What the process is doing with respect to the kernel: running,
    /// blocked in a call, or about to return from one.
    pub call: CallState,
    /// Whether `_start` has been entered; a process restored before its first
    /// slice starts from the beginning.
    pub started: bool,
    /// Where in linear memory the stack was saved at the last unwind: the
    /// top pages, hidden from the program by `atoll prepare`.
    pub stack_area: Option<StackArea>,
    /// Its threads, once it has more than one ([`crate::threads`]).
    pub threads: Threads,
    pub accounting: Accounting,
    /// Whether the process moves after every system call (`atoll run
    /// --wander`), and the result of the call it is moving after.
    pub wander: Wander,
    /// What the process may use. Kept here so that the limits go wherever
    /// the process goes; children inherit them.
    pub limits: Limits,
    /// Whether the balancer leaves the process where it is (`atoll run
    /// --pin`); children inherit it. Explicit moves still work.
    pub pinned: bool,
    /// How far its output to the console has gone: a job cannot outrun its
    /// terminal by more than [`crate::CONSOLE_WINDOW`].
    pub console_flow: ConsoleFlow,
    /// How it ended, while its end waits for its output to go ahead of
    /// it ([`UArea::end_step`]).
    pub ending: Option<Ending>,
    /// Standard input read ahead for `poll_oneoff`.
    pub stdin: StdinAhead,
    /// The process quotas it counts in, and those granted for the child it
    /// is making.
    pub quotas: Quotas,
}

/// How a process ended, kept while its end waits for its output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    /// Its exit status.
    pub status: i32,
    /// Its node's line about its end (a trap's, say), for its stderr, not
    /// yet written: it waits for the output the process wrote on another
    /// node.
    pub words: Option<String>,
}

/// What a process that ended does next ([`UArea::end_step`]).
#[derive(Debug, PartialEq)]
pub enum EndStep {
    /// Its node writes these words on its stderr now (they are counted as
    /// its output), then asks again.
    Say(String),
    /// It waits in this call (a drain) for its output to be passed on.
    Wait(KernelCall),
    /// It ends now, with this status.
    End(i32),
}

/// A process's output to its console, in bytes since it started. At each
/// half window written it asks the console service to say when its output
/// has been passed on (`Console::drain`), without waiting; it waits
/// (`KernelCall::Drain`) only when a whole window is still on its way, so
/// writer and console overlap.
///
/// **Order across nodes.** Output goes to the console's node on the link
/// from the node it was written on, so output written on two nodes may
/// arrive in either order, and so may output and the news of the end that
/// follows it. A drain asked on the node the output was written from is
/// answered after that output, wherever it comes from. So a process that
/// leaves a node with output from there still out asks a drain as it
/// leaves; elsewhere it writes again, and ends, only once that output has
/// been passed on. Output written on the console's own node needs none of
/// this: it is with the console before the process can be anywhere else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleFlow {
    pub written: u64,
    /// What the console service has said it passed on.
    pub passed: u64,
    /// Up to where a drain was last asked.
    pub asked: u64,
    /// The node the last output was written on.
    pub from: u16,
}

impl ConsoleFlow {
    /// Bytes the next write may send.
    pub fn room(&self) -> u64 {
        crate::CONSOLE_WINDOW.saturating_sub(self.written - self.passed)
    }

    /// Takes in the console service's word that it passed on `upto`.
    pub fn passed(&mut self, upto: u64) {
        self.passed = self.passed.max(upto.min(self.written));
    }

    /// Whether its output up to `upto` has been passed on: a process
    /// blocked in `KernelCall::Drain { upto }` goes on.
    pub fn drained(&self, upto: u64) -> bool {
        self.passed >= upto
    }

    /// What a write on node `here` must wait for (`KernelCall::Drain`'s
    /// `upto`) before it sends anything, for a console of node `console`:
    /// the output still out from another node, or room in the window.
    pub fn before_write(&self, here: u16, console: u16) -> Option<u64> {
        if self.out_elsewhere(here, console) {
            Some(self.written)
        } else if self.room() == 0 {
            Some(self.written - crate::CONSOLE_WINDOW + 1)
        } else {
            None
        }
    }

    /// Counts `bytes` written on node `here`; returns the drain to ask
    /// (`upto`) at each half window.
    pub fn wrote(&mut self, bytes: u64, here: u16) -> Option<u64> {
        self.written += bytes;
        self.from = here;
        let ask = self.written - self.asked >= crate::CONSOLE_WINDOW / 2;
        ask.then(|| self.ask())
    }

    /// What a process that ended on node `here` waits for before anyone
    /// learns that it did: the output it wrote on a node other than the
    /// console's. Output written here goes first by itself when the news
    /// is for the console, on the same link (a job's first process).
    pub fn before_end(&self, here: u16, console: u16, has_parent: bool) -> Option<u64> {
        let news_follows = self.from == here && !has_parent;
        (self.passed < self.written && self.from != console && !news_follows)
            .then_some(self.written)
    }

    /// Whether a drain asked on node `here` is answered after all the
    /// output written so far.
    pub fn may_ask_from(&self, here: u16, console: u16) -> bool {
        self.from == here || self.from == console
    }

    /// A drain of everything written, to ask the console now.
    pub fn ask(&mut self) -> u64 {
        self.asked = self.written;
        self.written
    }

    /// The process leaves node `here` for another: the drain to ask now,
    /// if its output from here is not all passed on or asked for, as
    /// nothing asked elsewhere would come after that output.
    pub fn leaving(&mut self, here: u16, console: u16) -> Option<u64> {
        (self.from == here && here != console && self.asked < self.written).then(|| self.ask())
    }

    /// Node `node` was lost: the console will never say how far the
    /// output written there got. Returns how far to take it as passed on.
    pub fn lost(&self, node: u16) -> Option<u64> {
        (self.from == node && self.passed < self.written).then_some(self.written)
    }

    /// Restored from a checkpoint, into another job: whatever became of
    /// the output before, nothing waits for it.
    pub fn restored(&mut self) {
        self.passed = self.written;
        self.asked = self.written;
    }

    fn out_elsewhere(&self, here: u16, console: u16) -> bool {
        self.passed < self.written && self.from != here && self.from != console
    }
}

/// Standard input read ahead. Input is pulled: the console service reads
/// the job's terminal or pipe only when a process asks. A process that
/// polls stdin (`poll_oneoff`) asks without reading, and the answer is
/// kept here, whatever the process does meanwhile (a poll that timed out
/// goes on), for the next read to take. It lives in the UArea so that it
/// follows the process, and the answer finds it wherever it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StdinAhead {
    /// A read of the job's input is out for a poll, not answered yet.
    pub asked: bool,
    /// What came and no read has taken yet; empty: the end of the input.
    pub bytes: Option<Vec<u8>>,
}

impl StdinAhead {
    /// Whether a read would return at once.
    pub fn ready(&self) -> bool {
        self.bytes.is_some()
    }

    /// Takes what came, at most `max` bytes (the rest stays for the next
    /// read); `None` if nothing did.
    pub fn take(&mut self, max: usize) -> Option<Vec<u8>> {
        let mut bytes = self.bytes.take()?;
        if bytes.len() > max {
            self.bytes = Some(bytes.split_off(max));
        }
        Some(bytes)
    }
}

/// A count of live processes with a ceiling (`--max-processes`), kept by
/// one kernel: that of a job, or of a domain.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum Quota {
    Job(ConsoleId),
    Domain(DomainId),
}

/// A process's part in the quotas.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quotas {
    /// Those it counts in: its end frees its place in each.
    pub counted: Vec<Quota>,
    /// Places granted for the child it is making (a spawn or fork waiting
    /// for every quota to admit it): the child counts in them.
    pub granted: Vec<Quota>,
}

/// Resource limits of one process (`atoll run --memory`, `--cpu-time`), and
/// of its job (`--max-processes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of linear memory: a `memory.grow` past it fails (malloc returns
    /// NULL). `None`: the runtime's own ceiling (4 GiB).
    pub memory: Option<u64>,
    /// Nanoseconds of CPU time: past it the process ends with
    /// 128 + SIGXCPU, as under `ulimit -t`.
    pub cpu_ns: Option<u64>,
    /// Processes its job may have alive at once, the first included: a
    /// spawn or fork past it fails with `EAGAIN`.
    #[serde(default)]
    pub processes: Option<u32>,
}

impl UArea {
    /// The UArea of a process that has not run yet.
    #[allow(clippy::too_many_arguments)] // one per field a new process is given
    pub fn new(
        pid: Pid,
        parent: Option<Pid>,
        module: ContentHash,
        args: Vec<String>,
        env: Vec<String>,
        console: ConsoleId,
        fds: FdTable,
        domain: Option<DomainId>,
    ) -> Self {
        UArea {
            pid,
            parent,
            module,
            args,
            env,
            console,
            fds,
            children: Children::default(),
            ipc: Box::new(IpcState::new(domain)),
            call: CallState::Running,
            started: false,
            stack_area: None,
            threads: Threads::default(),
            accounting: Accounting::default(),
            wander: Wander::default(),
            limits: Limits::default(),
            pinned: false,
            console_flow: ConsoleFlow::default(),
            ending: None,
            stdin: StdinAhead::default(),
            quotas: Quotas::default(),
        }
    }

    /// The process ended with `status`, and its node has `words` to show
    /// about it on its stderr (a trap's line), if any. What it does until
    /// its end is told is [`UArea::end_step`]'s; one that had already
    /// ended keeps its status and words.
    pub fn ended(&mut self, status: i32, words: Option<String>) {
        self.ending.get_or_insert(Ending { status, words });
    }

    /// What comes next for a process that [ended](UArea::ended), on node
    /// `here`. Its node's words come after the output it wrote on another
    /// node, and its end after all of it, so that its parent or its job
    /// learns of its end last. Until then it waits in a drain, running no
    /// code.
    ///
    /// # Panics
    /// If the process has not ended.
    pub fn end_step(&mut self, here: u16) -> EndStep {
        let ending = self.ending.as_mut().expect("the process ended");
        let console = self.console.node();
        let flow = &mut self.console_flow;
        let upto = match ending.words.take() {
            Some(words) => match flow.before_write(here, console) {
                Some(upto) => {
                    ending.words = Some(words);
                    upto
                }
                None => {
                    flow.wrote(words.len() as u64, here);
                    return EndStep::Say(words);
                }
            },
            None => match flow.before_end(here, console, self.parent.is_some()) {
                Some(upto) => upto,
                None => return EndStep::End(ending.status),
            },
        };
        let call = KernelCall::Drain { upto };
        self.call = CallState::Blocked(call.clone());
        EndStep::Wait(call)
    }

    /// The program's name for listings: the file name of argv[0].
    pub fn name(&self) -> &str {
        let arg0 = self.args.first().map(String::as_str).unwrap_or("?");
        arg0.rsplit('/').next().unwrap_or(arg0)
    }
}

/// A testing aid that proves invariant 2 for every system call: with it on,
/// each call answered in place (files, clocks, args, random) moves the
/// process to the next kernel of its node before it returns, so the process
/// runs every call on a different kernel from the one before. Children
/// inherit it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wander {
    pub enabled: bool,
    /// The result of the call the process is moving after, returned to the
    /// guest once it has moved.
    pub result: Option<i32>,
}

/// A process's children: those still running, and the statuses of those that
/// ended and have not been waited for yet.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Children {
    pub live: BTreeSet<Pid>,
    pub exited: VecDeque<(Pid, i32)>,
}

impl Children {
    /// Records that `child` was started.
    pub fn born(&mut self, child: Pid) {
        // Its end may have overtaken the news of its birth: the two travel
        // by different routes when the parent moves between them.
        if !self.exited.iter().any(|&(p, _)| p == child) {
            self.live.insert(child);
        }
    }

    /// Records that `child` ended. Only a process's children send it their
    /// end (PIDs are never reused), so it counts even before `born`.
    pub fn exited(&mut self, child: Pid, status: i32) {
        self.live.remove(&child);
        self.exited.push_back((child, status));
    }

    /// Reaps a child that ended: `which` or any. `Err(Child)` when there is
    /// nothing to wait for at all; `Ok(None)` when the child still runs.
    pub fn reap(&mut self, which: Option<Pid>) -> Result<Option<(Pid, i32)>, atoll_abi::Errno> {
        let pos = match which {
            Some(pid) => self.exited.iter().position(|&(p, _)| p == pid),
            None => (!self.exited.is_empty()).then_some(0),
        };
        if let Some(i) = pos {
            return Ok(self.exited.remove(i));
        }
        let waiting_makes_sense = match which {
            Some(pid) => self.live.contains(&pid),
            None => !self.live.is_empty(),
        };
        if waiting_makes_sense {
            Ok(None)
        } else {
            Err(atoll_abi::Errno::Child)
        }
    }
}

/// The region of linear memory holding Asyncify's saved stack: an 8-byte
/// header `{current, end}` followed by the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackArea {
    pub addr: u32,
    pub len: u32,
}

impl StackArea {
    /// The area of a memory of `memory_bytes`: its reserved top pages.
    pub(crate) fn at_top(memory_bytes: usize) -> StackArea {
        let reserved = atoll_prepare::conventions::ASYNCIFY_RESERVED_PAGES as usize
            * atoll_prepare::conventions::WASM_PAGE_SIZE as usize;
        StackArea {
            addr: (memory_bytes - reserved) as u32,
            len: reserved as u32,
        }
    }

    /// The header for a buffer holding `used` bytes of saved stack.
    pub(crate) fn header(&self, used: u32) -> [u8; 8] {
        let mut header = [0u8; 8];
        let data = self.addr + atoll_prepare::conventions::ASYNCIFY_DATA_HEADER;
        header[..4].copy_from_slice(&(data + used).to_le_bytes());
        header[4..].copy_from_slice(&(self.addr + self.len).to_le_bytes());
        header
    }
}

/// What a process has consumed, for `atoll ps` and scheduling decisions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Accounting {
    /// Nanoseconds spent running guest code.
    pub cpu_ns: u64,
    /// Times the process was given the CPU.
    pub slices: u64,
    /// System calls made (each one is a safepoint).
    pub syscalls: u64,
    /// Times the process was moved to another kernel.
    pub moves: u32,
    /// Of those, the moves the balancer decided.
    pub balanced: u32,
    /// The kernel the process last ran on.
    pub last_kernel: Option<KernelId>,
    /// How its last migration went (written by the destination).
    pub last_migration: Option<atoll_migration::MigrationReport>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_abi::status::TRAPPED;
    use atoll_abi::{Errno, KernelId};

    fn pid(slot: u16) -> Pid {
        Pid::new(KernelId::new(0, 0), slot, 0)
    }

    #[test]
    fn reap_rules() {
        let mut c = Children::default();
        assert_eq!(c.reap(None), Err(Errno::Child));
        c.born(pid(1));
        c.born(pid(2));
        assert_eq!(c.reap(None), Ok(None));
        c.exited(pid(2), 7);
        assert_eq!(c.reap(Some(pid(1))), Ok(None));
        assert_eq!(c.reap(Some(pid(3))), Err(Errno::Child));
        assert_eq!(c.reap(None), Ok(Some((pid(2), 7))));
        c.exited(pid(1), 0);
        assert_eq!(c.reap(Some(pid(1))), Ok(Some((pid(1), 0))));
        assert_eq!(c.reap(None), Err(Errno::Child));
        // The end of a child may arrive before the news of its birth.
        c.exited(pid(4), 3);
        c.born(pid(4));
        assert!(c.live.is_empty());
        assert_eq!(c.reap(None), Ok(Some((pid(4), 3))));
    }

    /// Console on node 0; the process writes on node 1, moves to node 2
    /// and then to node 0.
    #[test]
    fn output_from_another_node_goes_before_what_follows_it() {
        const WINDOW: u64 = crate::CONSOLE_WINDOW;
        let mut flow = ConsoleFlow::default();
        assert_eq!(flow.before_write(1, 0), None);
        assert_eq!(flow.wrote(100, 1), None);
        // Its end, told to its job on the link its output took, needs no
        // wait; told to a parent, which may be anywhere, it does.
        assert_eq!(flow.before_end(1, 0, false), None);
        assert_eq!(flow.before_end(1, 0, true), Some(100));
        assert!(flow.may_ask_from(1, 0));
        // Leaving node 1, it asks there; elsewhere it writes and ends only
        // once all of it has been passed on, and does not ask again.
        assert_eq!(flow.leaving(1, 0), Some(100));
        assert_eq!(flow.leaving(1, 0), None);
        for here in [2, 0] {
            assert_eq!(flow.before_write(here, 0), Some(100));
            assert_eq!(flow.before_end(here, 0, false), Some(100));
            assert!(!flow.may_ask_from(here, 0));
        }
        // Node 1 lost: what it carried is as good as passed on.
        assert_eq!(flow.lost(2), None);
        assert_eq!(flow.lost(1), Some(100));
        flow.passed(100);
        assert!(flow.drained(100));
        assert_eq!(flow.before_write(2, 0), None);
        // Written on the console's node, output is there before the
        // process can be anywhere else.
        assert_eq!(flow.wrote(10, 0), None);
        assert_eq!(flow.leaving(0, 0), None);
        assert_eq!(flow.before_write(2, 0), None);
        assert_eq!(flow.before_end(2, 0, true), None);
        assert!(flow.may_ask_from(2, 0));
        // The window: a drain asked at each half, a wait once it is full.
        flow.passed(110);
        assert_eq!(flow.wrote(WINDOW / 2, 0), Some(110 + WINDOW / 2));
        assert_eq!(flow.wrote(WINDOW / 2, 0), Some(110 + WINDOW));
        assert_eq!(flow.room(), 0);
        assert_eq!(flow.before_write(0, 0), Some(111));
        flow.passed(111);
        assert_eq!(flow.room(), 1);
        assert_eq!(flow.before_write(0, 0), None);
    }

    #[test]
    fn an_end_waits_for_output_from_another_node_then_keeps_its_status() {
        let console = ConsoleId::new(0, 1);
        let fds = FdTable::default();
        let module = ContentHash([0; 32]);
        let mut u = UArea::new(pid(1), None, module, vec![], vec![], console, fds, None);
        u.ended(3, None);
        assert_eq!(u.end_step(1), EndStep::End(3));
        u.console_flow.wrote(5, 1);
        u.console_flow.leaving(1, 0);
        assert_eq!(u.end_step(0), EndStep::Wait(KernelCall::Drain { upto: 5 }));
        assert_eq!(u.call, CallState::Blocked(KernelCall::Drain { upto: 5 }));
        // Ended again meanwhile: the first status and words stay.
        u.ended(9, Some("late\n".into()));
        u.console_flow.passed(5);
        assert_eq!(u.end_step(0), EndStep::End(3));
    }

    #[test]
    fn a_nodes_words_about_an_end_follow_the_output_from_another_node() {
        let console = ConsoleId::new(0, 1);
        let fds = FdTable::default();
        let module = ContentHash([0; 32]);
        let parent = Some(pid(2));
        let mut u = UArea::new(pid(1), parent, module, vec![], vec![], console, fds, None);
        // Written on node 1, which it left for node 2, where it traps.
        u.console_flow.wrote(5, 1);
        u.console_flow.leaving(1, 0);
        u.ended(TRAPPED, Some("trapped\n".into()));
        assert_eq!(u.end_step(2), EndStep::Wait(KernelCall::Drain { upto: 5 }));
        assert_eq!(u.end_step(2), EndStep::Wait(KernelCall::Drain { upto: 5 }));
        u.console_flow.passed(5);
        // Then the words go, from node 2; the end, told to the parent on
        // another link than theirs, waits for them too.
        assert_eq!(u.end_step(2), EndStep::Say("trapped\n".into()));
        assert_eq!(u.end_step(2), EndStep::Wait(KernelCall::Drain { upto: 13 }));
        u.console_flow.passed(13);
        assert_eq!(u.end_step(2), EndStep::End(TRAPPED));
        // On the console's node they go at once, and the end after them.
        let mut u = UArea::new(
            pid(1),
            parent,
            module,
            vec![],
            vec![],
            console,
            FdTable::default(),
            None,
        );
        u.ended(TRAPPED, Some("trapped\n".into()));
        assert_eq!(u.end_step(0), EndStep::Say("trapped\n".into()));
        assert_eq!(u.end_step(0), EndStep::End(TRAPPED));
    }

    #[test]
    fn input_read_ahead_is_taken_in_reads_of_any_size() {
        let mut ahead = StdinAhead::default();
        assert!(!ahead.ready());
        assert_eq!(ahead.take(10), None);
        ahead.bytes = Some(b"hello world".to_vec());
        assert!(ahead.ready());
        assert_eq!(ahead.take(6).as_deref(), Some(&b"hello "[..]));
        assert_eq!(ahead.take(100).as_deref(), Some(&b"world"[..]));
        assert!(!ahead.ready());
        // The end of the input is ready too, and read as nothing.
        ahead.bytes = Some(Vec::new());
        assert!(ahead.ready());
        assert_eq!(ahead.take(4).as_deref(), Some(&b""[..]));
        assert!(!ahead.ready());
    }
}
