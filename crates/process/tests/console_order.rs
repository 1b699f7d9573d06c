//! A process's output keeps its order, and comes before its end, however it
//! moves between nodes, when each node's output takes its own link to the
//! console and links deliver in any order.
//!
//! `tests/guests/roam.c` writes lines on every node it visits and moves
//! itself with `kmigrate_to`; here each move is made as the kernels make
//! it (`Container::leave_node`, then the image to a container on the other
//! node), and the console's node is reached over links this test delivers
//! as late as it can, and in the worst order: only when the process waits
//! for its output, newest link first. What is still on a link when the
//! process ends is lost, as when the news of a job's end outruns it. The
//! end of a process is made as the kernel makes it (`UArea::end_step`),
//! and so is the line a trap makes a node write on the job's stderr.

#[path = "../../../tests/support.rs"]
mod support;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atoll_abi::status::TRAPPED;
use atoll_abi::{KernelId, Pid};
use atoll_process::{
    Console, ConsoleId, Container, EndStep, FdTable, Host, KernelCall, ProcessImage, Reply,
    Runtime, RuntimeConfig, Slice, Stream, UArea,
};

/// The console is on node 0.
const CONSOLE: ConsoleId = ConsoleId(7);

/// What travels on a link to the console's node.
enum Carried {
    Output(Vec<u8>),
    Drained(u64),
}

/// The console's node and the links to it from nodes 1 and 2.
#[derive(Default)]
struct World {
    shown: Vec<u8>,
    links: [VecDeque<Carried>; 3],
    /// How far the console has said the output got, as the process's
    /// kernel would learn it.
    drained: u64,
}

impl World {
    /// Delivers what is on node `node`'s link.
    fn deliver(&mut self, node: usize) {
        while let Some(c) = self.links[node].pop_front() {
            match c {
                Carried::Output(bytes) => self.shown.extend(bytes),
                Carried::Drained(upto) => self.drained = self.drained.max(upto),
            }
        }
    }
}

/// The console as kernels of node `node` reach it: at once on node 0, on
/// that node's link from elsewhere.
struct NodeConsole {
    node: usize,
    world: Arc<Mutex<World>>,
}

impl NodeConsole {
    fn carry(&self, c: Carried) {
        let mut world = self.world.lock().unwrap();
        world.links[self.node].push_back(c);
        if self.node == 0 {
            world.deliver(0);
        }
    }
}

impl Console for NodeConsole {
    /// Stdout and stderr both: a terminal shows them in one stream.
    fn write(&self, console: ConsoleId, _: Stream, bytes: &[u8]) {
        assert_eq!(console, CONSOLE);
        self.carry(Carried::Output(bytes.to_vec()));
    }
    fn read(&self, _: ConsoleId, _: Pid, _: u32) {
        panic!("roam reads no input");
    }
    fn drain(&self, console: ConsoleId, _: Pid, upto: u64) {
        assert_eq!(console, CONSOLE);
        self.carry(Carried::Drained(upto));
    }
}

fn host(to: KernelId, world: &Arc<Mutex<World>>) -> Host {
    Host {
        kernel: to,
        kernel_count: 1,
        console: Arc::new(NodeConsole {
            node: usize::from(to.node),
            world: world.clone(),
        }),
        wake: Arc::new(|| false),
        instances: Default::default(),
    }
}

/// How a run of `roam -w 300 ... 3 4` went.
struct Run {
    shown: String,
    /// Times it waited for its output to be passed on.
    waits: u32,
    /// Whether it ended waiting for its output.
    held_end: bool,
    /// Its status.
    status: i32,
}

/// The line the test's node writes about a trap.
const TRAP_LINE: &str = "roam trapped\n";

/// Runs `roam -w 300 [-t] 3 4` from node `start` (it visits the next
/// nodes in turn) to its end back there, as a job's first process or
/// (`parent`) as a child. With `held_moves_to`, a process whose end waits
/// is moved to that node first, as `atoll migrate` may move it.
fn roam_between_nodes(
    start: u16,
    trap: bool,
    parent: Option<Pid>,
    held_moves_to: Option<u16>,
) -> Run {
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(support::cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let program = runtime.load_file(&support::guest("roam"), true).unwrap();
    let world = Arc::new(Mutex::new(World::default()));
    let start = KernelId::new(start, 0);
    let trap = trap.then_some("-t");
    let args = ["roam", "-w", "300"]
        .into_iter()
        .chain(trap)
        .chain(["3", "4"]);
    let args = args.map(String::from).collect();
    let uarea = UArea::new(
        Pid::new(start, 1, 0),
        parent,
        program.hash(),
        args,
        vec![],
        CONSOLE,
        FdTable::new(&[], start),
        None,
    );
    let mut container = Container::new(&runtime, program, uarea, host(start, &world)).unwrap();
    let (mut here, mut moves, mut waits) = (start, 0, 0);
    let (mut ended, mut held_end) = (None, false);
    let status = loop {
        let slice = match &mut ended {
            // As the kernel does: its end waits for its output.
            Some((status, words)) => {
                let u = container.uarea_mut();
                u.ended(*status, Option::take(words));
                match u.end_step(here.node) {
                    EndStep::End(status) => break status,
                    EndStep::Say(words) => {
                        let console = host(here, &world).console;
                        console.write(CONSOLE, Stream::Stderr, words.as_bytes());
                        continue;
                    }
                    EndStep::Wait(call) => {
                        held_end = true;
                        if let Some(node) = held_moves_to.filter(|&n| n != here.node) {
                            here = KernelId::new(node, 0);
                            container = moved(&runtime, &mut container, host(here, &world));
                        }
                        Slice::Call(call)
                    }
                }
            }
            None => container.run(Duration::from_millis(50), None),
        };
        match slice {
            Slice::Exited(status) => ended = Some((status, None)),
            Slice::Trapped(_) => ended = Some((TRAPPED, Some(TRAP_LINE.to_string()))),
            Slice::Call(KernelCall::Yield(_)) => container.reply(Reply::Done),
            Slice::Call(KernelCall::Migrate { to }) => {
                assert_ne!(to.node, here.node);
                container = moved(&runtime, &mut container, host(to, &world));
                container.reply(Reply::Migrated(Ok(())));
                here = to;
                moves += 1;
            }
            // As the kernel does: asked from here when that comes after all
            // the output, else already asked where the output was written.
            Slice::Call(KernelCall::Drain { upto }) => {
                waits += 1;
                let flow = container.uarea().console_flow;
                if !flow.drained(upto) && flow.may_ask_from(here.node, CONSOLE.node()) {
                    let upto = container.uarea_mut().console_flow.ask();
                    let pid = container.uarea().pid;
                    host(here, &world).console.drain(CONSOLE, pid, upto);
                }
                let mut w = world.lock().unwrap();
                w.deliver(2);
                w.deliver(1);
                let flow = &mut container.uarea_mut().console_flow;
                flow.passed(w.drained);
                assert!(flow.drained(upto), "waits for a drain nobody asked");
                container.reply(Reply::Drained);
            }
            other => panic!("roam stopped with {other:?}"),
        }
    };
    assert_eq!(moves, 12);
    // The end: the news of a job's first process goes to the console on
    // the link its last output took; a child's goes to its parent, and
    // the console never hears of it. Anything else still on its way is
    // lost, as when the news outruns it.
    let mut w = world.lock().unwrap();
    if parent.is_none() {
        w.deliver(usize::from(here.node));
    }
    Run {
        shown: String::from_utf8(std::mem::take(&mut w.shown)).unwrap(),
        waits,
        held_end,
        status,
    }
}

/// `container` moved to the node of `to`, as the kernels move a process
/// between nodes.
fn moved(runtime: &Arc<Runtime>, container: &mut Container, to: Host) -> Container {
    container.leave_node();
    let bytes = container.capture().unwrap().encode();
    let image = ProcessImage::decode(&bytes).unwrap();
    Container::restore(runtime, image, to).unwrap()
}

/// The output of a run, checked against an unmoved run's.
fn check(run: &Run) {
    let (body, last_line) = run.shown.rsplit_once("roam: ok ").expect("the last line");
    assert_eq!(body, support::roam_output(300, 3, 4));
    assert!(last_line.ends_with('\n'));
    assert_eq!(run.status, 0);
}

#[test]
fn output_written_on_every_node_is_shown_in_order() {
    let run = roam_between_nodes(1, false, None, None);
    check(&run);
    // Each move to a node other than the console's waited once for the
    // output of the node before (node 1 to 2 and 2 to 0); the end, told
    // to the console after its output, waits for nothing.
    assert_eq!((run.waits, run.held_end), (8, false));
}

#[test]
fn a_child_ends_only_once_its_output_is_shown() {
    let run = roam_between_nodes(1, false, Some(parent()), None);
    check(&run);
    assert_eq!((run.waits, run.held_end), (9, true));
}

/// A trap right after a move from node 1 to node 2: the node's line about
/// it comes after the output written on node 1, and the end after both;
/// also when the process, waiting for its end, is moved to the console's
/// node (the line, not yet written, goes with it).
#[test]
fn a_trap_is_told_after_the_output_before_it() {
    let child = Some(parent());
    for (parent, held_moves_to) in [(None, None), (child, None), (child, Some(0))] {
        let run = roam_between_nodes(2, true, parent, held_moves_to);
        let all = support::roam_output(300, 3, 4);
        let before = all.strip_suffix("roam 3.2: moved\n").unwrap();
        assert_eq!(run.shown, format!("{before}{TRAP_LINE}"));
        assert_eq!(run.status, TRAPPED);
    }
}

fn parent() -> Pid {
    Pid::new(KernelId::new(2, 0), 9, 0)
}
