//! Serving the system calls that need the kernel (the "invoke" half; the
//! host functions in atoll-process already validated the arguments).

use std::cmp::Reverse;

use atoll_abi::{Errno, KernelId, Pid};
use atoll_ipc::{GrantTable, IpcState};
use atoll_prepare::ContentHash;
use atoll_process::threads::Threads;
use atoll_process::{
    clock::monotonic_ns, Accounting, CallState, Children, ConsoleFlow, Container, ContainerError,
    FileOp, KernelCall, Quotas, Reply, SpawnModule, SpawnRequest, StdinAhead, Stream,
};

use crate::kernel::{Kernel, Process};
use crate::loader::{Load, Loaded, ModuleSource, ThenRun};
use crate::migration::Started;
use crate::msg::{NocMsg, ProcessSpec, ReplyTo};
use crate::placement::AfterPlace;
use crate::Kin;

impl Kernel {
    /// Serves `call`, made by `pid` (which runs here and is unwound).
    pub(crate) fn serve(&mut self, pid: Pid, call: KernelCall) {
        match call {
            KernelCall::Yield(why) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.container.reply(Reply::Done);
                    self.requeue(pid, why);
                }
            }
            KernelCall::Sleep { until_ns } if until_ns <= monotonic_ns() => {
                self.reply_now(pid, Reply::Done)
            }
            KernelCall::Sleep { until_ns } => self.timers.push(Reverse((until_ns, pid))),
            // Each waits first for a place in the quotas it is under.
            KernelCall::Spawn(req) => {
                if self.admitted(pid) {
                    self.spawn(pid, req)
                }
            }
            KernelCall::Fork { kernel } => {
                if self.admitted(pid) {
                    self.fork(pid, kernel)
                }
            }
            KernelCall::Exec(req) => self.exec(pid, req),
            // The host function reaped what it could, but a thread that
            // waited for its turn in the kernel may find its child gone
            // since; else wait for a ChildExited.
            KernelCall::Wait { pid: which } => {
                let reaped = self
                    .procs
                    .get_mut(&pid)
                    .and_then(|p| p.container.uarea_mut().children.reap(which).ok().flatten());
                if let Some(done) = reaped {
                    self.reply_now(pid, Reply::Waited(Ok(done)));
                }
            }
            KernelCall::Kill {
                pid: target,
                signal,
            } => {
                let reply_to = ReplyTo::Process(pid);
                let domain = self
                    .procs
                    .get(&pid)
                    .and_then(|p| p.container.uarea().ipc.domain);
                if self.procs.contains_key(&target) {
                    let result = self.kill_here(target, signal, reply_to, domain);
                    self.reply_now(pid, Reply::Killed(result));
                } else {
                    self.route(
                        target,
                        NocMsg::Kill {
                            target,
                            signal,
                            reply_to,
                            domain,
                        },
                    );
                }
            }
            // Served through the KernelLink before the process unwound: it
            // waits where the call left it (queued, watched, awaited).
            KernelCall::Ipc(_) => {}
            // While another move of it is in flight (the balancer's, an
            // operator's), the call waits: where that move leaves the
            // process, it makes the call again (`schedule`,
            // `resume_after_failed_move`).
            KernelCall::Migrate { .. } if self.departures.contains_key(&pid) => {}
            KernelCall::Migrate { to } => {
                if let Err(why) = self.migrate(pid, to, None, ReplyTo::Process(pid)) {
                    self.diagnose(pid, &format!("cannot migrate: {why}"));
                    self.reply_now(pid, Reply::Migrated(Err(Errno::Again)));
                }
            }
            // It holds the file for this process, which came back.
            KernelCall::File { owner, op } if owner == self.id => {
                let answer = op.serve(&mut self.held, pid, self.id.node);
                self.reply_now(pid, Reply::File(answer));
            }
            KernelCall::File { owner, op } => self.send_file_op(pid, owner, &op),
            KernelCall::Input { .. } | KernelCall::Drain { .. } => self.ask_console(pid),
            KernelCall::PollInput { until_ns, .. } => {
                if let Some(t) = until_ns {
                    self.timers.push(Reverse((t, pid)));
                }
                self.ask_console(pid);
            }
            KernelCall::Bind { domain } => {
                let result = self.bind(pid, domain.as_deref());
                self.reply_now(pid, Reply::Ipc(result));
            }
        }
    }

    /// Joins the named domain (a process belongs to at most one: it must
    /// leave its domain first), or leaves the current one; senders waiting
    /// for a process that leaves are refused.
    fn bind(&mut self, pid: Pid, domain: Option<&str>) -> Result<(), Errno> {
        let id = domain
            .map(|name| self.domains.lookup(name).ok_or(Errno::NoEnt))
            .transpose()?;
        let p = self.procs.get_mut(&pid).ok_or(Errno::Srch)?;
        let ipc = &mut p.container.uarea_mut().ipc;
        if id.is_some() && ipc.domain.is_some() {
            return Err(Errno::Busy);
        }
        ipc.domain = id;
        if id.is_none() {
            ipc.notifications.clear();
            let refused: Vec<_> = ipc.senders.drain(..).collect();
            // Letters still to come are refused in their turn: the count
            // of each sender's letters goes on.
            self.letters_refused(pid, &refused, &Default::default(), Errno::CallDenied);
            for w in refused.into_iter().filter(|w| !w.is_async()) {
                self.answer(w.from, w.seq, Err(Errno::CallDenied));
            }
        }
        Ok(())
    }

    /// Hands `pid`'s console call (a stdin read or poll, a drain) to its
    /// job's console service, which answers it wherever `pid` runs by then.
    /// Also for a restored process captured in one: the job it was restored
    /// into has another console, which has not been asked. A read or poll
    /// is not asked again while a poll's read is out: its answer is theirs.
    pub(crate) fn ask_console(&mut self, pid: Pid) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let u = p.container.uarea_mut();
        let console = u.console;
        match u.call {
            CallState::Blocked(KernelCall::Input { .. } | KernelCall::PollInput { .. })
                if u.stdin.asked => {}
            CallState::Blocked(KernelCall::PollInput { .. }) if u.stdin.ready() => {
                p.container.reply(Reply::Woken { timed_out: false });
                self.run_queue.wake(pid);
            }
            CallState::Blocked(KernelCall::PollInput { max, .. }) => {
                u.stdin.asked = true;
                self.console().read(console, pid, max)
            }
            CallState::Blocked(KernelCall::Input { max }) => self.console().read(console, pid, max),
            CallState::Blocked(KernelCall::Drain { upto }) if u.console_flow.drained(upto) => {
                p.container.reply(Reply::Drained);
                self.run_queue.wake(pid);
            }
            // Else its output from another node is on its way, and the
            // drain that follows it was asked there as the process left.
            CallState::Blocked(KernelCall::Drain { .. })
                if u.console_flow.may_ask_from(self.id.node, console.node()) =>
            {
                let upto = u.console_flow.ask();
                self.console().drain(console, pid, upto)
            }
            _ => {}
        }
    }

    /// Where `pid` runs: bytes of its job's standard input (none: the end)
    /// came, for its read, or for its poll's read ahead.
    pub(crate) fn on_input(&mut self, pid: Pid, bytes: Vec<u8>) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let u = p.container.uarea_mut();
        if !u.stdin.asked {
            return self.reply_if_blocked(
                pid,
                |c| matches!(c, KernelCall::Input { .. }),
                Reply::Input(bytes),
            );
        }
        u.stdin.asked = false;
        u.stdin.bytes = Some(bytes);
        let reply = match u.call {
            CallState::Blocked(KernelCall::PollInput { .. }) => Reply::Woken { timed_out: false },
            // A read that came after the poll, and waited for its answer.
            CallState::Blocked(KernelCall::Input { max }) => {
                Reply::Input(u.stdin.take(max as usize).unwrap_or_default())
            }
            _ => return,
        };
        p.container.reply(reply);
        self.run_queue.wake(pid);
    }

    /// Where `pid` runs: its console passed its output on up to `upto`. A
    /// process waiting for its output to get that far goes on.
    pub(crate) fn on_drained(&mut self, pid: Pid, upto: u64) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        let flow = &mut p.container.uarea_mut().console_flow;
        flow.passed(upto);
        let flow = *flow;
        self.reply_if_blocked(
            pid,
            |c| matches!(c, KernelCall::Drain { upto } if flow.drained(*upto)),
            Reply::Drained,
        );
    }

    /// Fails `parent`'s spawn or fork with `errno`, freeing the places its
    /// quotas granted for the child.
    pub(crate) fn refuse_child(&mut self, parent: Pid, errno: Errno) {
        if let Some(p) = self.procs.get_mut(&parent) {
            let granted = std::mem::take(&mut p.container.uarea_mut().quotas.granted);
            self.release(granted);
        }
        self.reply_now(parent, Reply::Spawned(Err(errno)));
    }

    pub(crate) fn reply_now(&mut self, pid: Pid, reply: Reply) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.container.reply(reply);
            self.run_queue.wake(pid);
        }
    }

    fn spawn(&mut self, parent: Pid, req: SpawnRequest) {
        if req.kernel.is_some_and(|k| !self.noc_reaches(k)) {
            return self.refuse_child(parent, Errno::Inval);
        }
        match req.module {
            SpawnModule::Same => match self.spawn_spec(parent, &req.args) {
                Ok(spec) => self.spawn_on(parent, spec, req.kernel),
                Err(errno) => self.reply_now(parent, Reply::Spawned(Err(errno))),
            },
            SpawnModule::File(path) => {
                self.spawn_module(parent, &req.args, req.kernel, ModuleSource::File(path));
            }
            // The parent waits for the bytes (`Kernel::on_file_done`).
            SpawnModule::OtherNode(at) => {
                self.send_file_op(parent, at.dir.owner, &FileOp::ReadModule { at });
            }
            // A state of the call, not a request a guest can make.
            SpawnModule::Fetched => self.refuse_child(parent, Errno::Inval),
        }
    }

    /// Spawns a child of `parent` running `source` with `args`, once the
    /// loader has prepared and compiled it off this thread; the parent
    /// waits.
    pub(crate) fn spawn_module(
        &mut self,
        parent: Pid,
        args: &[String],
        kernel: Option<KernelId>,
        source: ModuleSource,
    ) {
        let spec = match self.spawn_spec(parent, args) {
            Ok(spec) => spec,
            Err(errno) => return self.reply_now(parent, Reply::Spawned(Err(errno))),
        };
        let prepare = self.procs[&parent].container.program().prepared();
        self.loader.load(Load::Program {
            source,
            prepare,
            then: Box::new(ThenRun::Spawn {
                parent,
                spec,
                kernel,
            }),
        });
    }

    /// `atoll_fork`: the child is made here from a capture of the parent,
    /// which is unwound in this very call, so both resume from it; then it
    /// moves to `kernel` before it first runs (a migration like any, in the
    /// node's mode; copy mode between nodes). The parent is answered like a
    /// spawn, at once: messages to the child wait for it wherever it goes.
    fn fork(&mut self, parent: Pid, kernel: Option<KernelId>) {
        if kernel.is_some_and(|k| !self.noc_reaches(k)) {
            return self.refuse_child(parent, Errno::Inval);
        }
        let child = match self.fork_here(parent) {
            Ok(child) => child,
            Err((errno, why)) => {
                self.diagnose(parent, &format!("fork failed: {why}"));
                return self.refuse_child(parent, errno);
            }
        };
        // Until it is where it was asked to be, the child does not run.
        match kernel {
            Some(target) => self.run_on(child, target, parent),
            None => self.place(AfterPlace::Run {
                pid: child,
                told: parent,
            }),
        }
        self.route(
            parent,
            NocMsg::Spawned {
                parent,
                result: Ok(child),
            },
        );
    }

    /// A copy of `parent` as a new process of this kernel, not yet
    /// scheduled, with its own PID, no children, no grants or pending IPC,
    /// and the answer `Forked` to give when it resumes.
    fn fork_here(&mut self, parent: Pid) -> Result<Pid, (Errno, String)> {
        let p = self
            .procs
            .get(&parent)
            .ok_or((Errno::Srch, "no such process".into()))?;
        let mut u = p.container.uarea().clone();
        let kin = Kin {
            parent: Some(parent),
            console: u.console,
        };
        let child = self
            .homes
            .allocate(kin)
            .map_err(|e| (e, "process table is full".to_string()))?;
        u.pid = child;
        u.parent = Some(parent);
        u.children = Children::default();
        *u.ipc = IpcState::new(u.ipc.domain);
        u.call = CallState::Replied(Reply::Forked);
        // POSIX: the child has one thread, the one that forked (the one in
        // the kernel).
        if let Some(forking) = u.threads.seat() {
            u.threads.keep_only(forking);
        }
        u.accounting = Accounting::default();
        u.quotas = Quotas {
            counted: u.quotas.granted.clone(),
            granted: Vec::new(),
        };
        u.console_flow = ConsoleFlow::default();
        // Input the parent read ahead is the parent's to read.
        u.stdin = StdinAhead::default();
        self.make_room(&[parent]);
        let host = self.host.clone();
        let made = self
            .procs
            .get_mut(&parent)
            .expect("kept live")
            .container
            .duplicate(u, host, &mut self.spares);
        match made {
            Ok(container) => {
                self.share_held_files(parent, child, &container.uarea().fds);
                self.procs.insert(child, Process::new(container));
                self.placement.arrivals += 1;
                // Its places are the child's now.
                let p = self.procs.get_mut(&parent).expect("kept live");
                p.container.uarea_mut().quotas.granted.clear();
                Ok(child)
            }
            Err(e) => {
                self.homes.release(child);
                let errno = match e {
                    ContainerError::NotPrepared | ContainerError::NotStopped => Errno::NotSup,
                    _ => Errno::NoMem,
                };
                Err((errno, e.to_string()))
            }
        }
    }

    /// The loader is done with a module.
    pub(crate) fn on_loaded(&mut self, loaded: Loaded) {
        match loaded {
            Loaded::Program {
                then:
                    ThenRun::Spawn {
                        parent,
                        mut spec,
                        kernel,
                    },
                module,
            } => match module {
                Ok(hash) => {
                    spec.module = hash;
                    self.spawn_on(parent, spec, kernel);
                }
                Err(why) => {
                    self.diagnose(parent, &format!("cannot spawn {why}"));
                    self.release(spec.counted);
                    let result = Err(Errno::NoExec);
                    self.route(parent, NocMsg::Spawned { parent, result });
                }
            },
            Loaded::Program {
                then: ThenRun::Exec { pid, args, kernel },
                module,
            } => match module {
                Ok(hash) => self.exec_with(pid, hash, args, kernel),
                Err(why) => {
                    self.diagnose(pid, &format!("cannot exec {why}"));
                    self.reply_now(pid, Reply::ExecFailed(Errno::NoExec));
                }
            },
            Loaded::Module { hash, result } => self.on_module(hash, result),
        }
    }

    /// `atoll_exec`: a new program for `pid`, loaded off this thread if it
    /// is a file; the process waits in the call, and cannot be moved
    /// meanwhile (`migrate` refuses), so the answer finds it here.
    fn exec(&mut self, pid: Pid, req: SpawnRequest) {
        if req.kernel.is_some_and(|k| !self.noc_reaches(k)) {
            return self.reply_now(pid, Reply::ExecFailed(Errno::Inval));
        }
        match req.module {
            SpawnModule::Same => {
                let module = self.procs[&pid].container.program().hash();
                self.exec_with(pid, module, req.args, req.kernel);
            }
            SpawnModule::File(path) => {
                self.exec_module(pid, req.args, req.kernel, ModuleSource::File(path));
            }
            // It waits for the bytes (`Kernel::on_file_done`).
            SpawnModule::OtherNode(at) => {
                self.send_file_op(pid, at.dir.owner, &FileOp::ReadModule { at });
            }
            // A state of the call, not a request a guest can make.
            SpawnModule::Fetched => self.reply_now(pid, Reply::ExecFailed(Errno::Inval)),
        }
    }

    /// Replaces `pid`'s program by `source` run with `args`, once the
    /// loader has prepared and compiled it off this thread.
    pub(crate) fn exec_module(
        &mut self,
        pid: Pid,
        args: Vec<String>,
        kernel: Option<KernelId>,
        source: ModuleSource,
    ) {
        let prepare = self.procs[&pid].container.program().prepared();
        self.loader.load(Load::Program {
            source,
            prepare,
            then: Box::new(ThenRun::Exec { pid, args, kernel }),
        });
    }

    /// Replaces `pid`'s program by `module` run with `args`: a new container
    /// from its UArea, which keeps the PID, family, console, domain, pending
    /// IPC, descriptors, limits and accounting; memory, globals and grants
    /// (which named the old memory) start afresh. Then it runs on `kernel`
    /// if one was asked, else where the DQDT places it (ALMOS-MK moves a
    /// process at exec, when it is smallest). If the new program cannot be
    /// instantiated, the old one goes on, told why.
    fn exec_with(
        &mut self,
        pid: Pid,
        module: ContentHash,
        args: Vec<String>,
        kernel: Option<KernelId>,
    ) {
        let Some(p) = self.procs.get(&pid) else {
            return;
        };
        let Some(program) = self.runtime.program(&module) else {
            return self.reply_now(pid, Reply::ExecFailed(Errno::NoExec));
        };
        let mut u = p.container.uarea().clone();
        u.module = module;
        u.args = args;
        u.call = CallState::Running;
        u.started = false;
        u.stack_area = None;
        u.threads = Threads::default();
        u.ipc.grants = GrantTable::default();
        self.make_room(&[pid]);
        match Container::new(&self.runtime, program, u, self.host.clone()) {
            Ok(mut container) => {
                if let Some(p) = self.procs.get_mut(&pid) {
                    container.take_files_of(&mut p.container);
                    p.container = container;
                }
                match kernel {
                    Some(target) => self.run_on(pid, target, pid),
                    None => self.place(AfterPlace::Run { pid, told: pid }),
                }
            }
            Err(e) => {
                self.diagnose(pid, &format!("cannot exec: {e}"));
                self.reply_now(pid, Reply::ExecFailed(Errno::NoMem));
            }
        }
    }

    /// Runs `pid`, made or remade here and not yet scheduled, on `target`:
    /// a migration puts it there before its first instruction; if none can
    /// start, it runs here and `told` hears why.
    pub(crate) fn run_on(&mut self, pid: Pid, target: KernelId, told: Pid) {
        let moving = target != self.id
            && self
                .depart(pid, target, None, ReplyTo::Process(pid), Started::No)
                .map_err(|why| {
                    let here = self.id;
                    self.diagnose(told, &format!("{pid} stays on kernel {here}: {why}"))
                })
                .is_ok();
        if !moving {
            self.run_queue.push(pid);
        }
    }

    /// Creates `spec` as a child of `parent` on `kernel` (or where the
    /// kernel chooses); the answer goes to the parent wherever it is.
    pub(crate) fn spawn_on(&mut self, parent: Pid, spec: ProcessSpec, kernel: Option<KernelId>) {
        let Some(target) = kernel else {
            return self.place(AfterPlace::Spawn { parent, spec });
        };
        if target != self.id {
            let spec = Box::new(spec);
            return self.send(target, NocMsg::Spawn { parent, spec });
        }
        let result = self.create(spec, Some(parent)).map_err(|(errno, why)| {
            self.diagnose(parent, &format!("spawn failed: {why}"));
            errno
        });
        self.route(parent, NocMsg::Spawned { parent, result });
    }

    /// What the child inherits: environment, console and preopened
    /// directories (not open files: spawn is not fork), and the places its
    /// quotas granted it. Its module is the parent's until a spawn by path
    /// has loaded its own.
    fn spawn_spec(&mut self, parent: Pid, args: &[String]) -> Result<ProcessSpec, Errno> {
        let p = self.procs.get_mut(&parent).ok_or(Errno::Srch)?;
        // The places granted for the child are its own from here on.
        let counted = std::mem::take(&mut p.container.uarea_mut().quotas.granted);
        let program = p.container.program().clone();
        let u = p.container.uarea();
        let (env, console, domain, wander, limits, pinned) = (
            u.env.clone(),
            u.console,
            u.ipc.domain,
            u.wander.enabled,
            u.limits,
            u.pinned,
        );
        let preopens = u
            .fds
            .preopens()
            .map(|(_, d)| atoll_process::Preopen {
                host: d.host.clone(),
                guest: d.preopen.clone().unwrap_or_default(),
            })
            .collect();
        // The job's preopens all have the same owner.
        let files = u.fds.preopens().next().map_or(self.id, |(_, d)| d.owner);
        let args = args.to_vec();
        Ok(ProcessSpec {
            module: program.hash(),
            args,
            env,
            console,
            preopens,
            files,
            domain,
            wander,
            limits,
            pinned,
            counted,
        })
    }

    /// Writes a line about `pid` on its job's stderr, so the user sees why a
    /// call failed and not only its errno.
    pub(crate) fn diagnose(&self, pid: Pid, what: &str) {
        if let Some(p) = self.procs.get(&pid) {
            let u = p.container.uarea();
            let line = format!("atoll: {pid} ({}): {what}\n", u.name());
            self.console()
                .write(u.console, Stream::Stderr, line.as_bytes());
        }
    }
}
