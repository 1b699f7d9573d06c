//! Loading programs off the kernel's thread.
//!
//! Preparing a module (Asyncify) and compiling it takes from milliseconds
//! to seconds; a kernel that did it itself would stop every process it
//! runs meanwhile. Each kernel has a loader thread instead: the kernel
//! hands it a module (a file a process asked to spawn or exec, or bytes another
//! node sent), carries on, and picks up the result ([`Loaded`]) between two
//! slices, woken by its doorbell. A process that spawns or execs waits,
//! unwound, in that call; messages that need a module sent by another node wait
//! parked (`Kernel::await_module`).

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use atoll_abi::{KernelId, Pid};
use atoll_noc::Doorbell;
use atoll_prepare::ContentHash;
use atoll_process::Runtime;

use crate::msg::ProcessSpec;

/// What a kernel asks its loader for.
pub(crate) enum Load {
    /// A module file a process asked to run, and what to do with it then.
    Program {
        source: ModuleSource,
        prepare: bool,
        /// Boxed: a child's spec is most of the job's size.
        then: Box<ThenRun>,
    },
    /// Module `hash`, as another node sent it.
    Module { hash: ContentHash, bytes: Vec<u8> },
}

/// Where a program's module comes from.
pub(crate) enum ModuleSource {
    /// A file of this node.
    File(PathBuf),
    /// A file of another node, read there for this one (`FileOp::ReadModule`);
    /// `name` says which, in errors.
    Read { name: String, bytes: Vec<u8> },
}

/// What a loaded program is for.
pub(crate) enum ThenRun {
    /// A child of `parent` (`atoll_spawn`); `spec` is the child but for its
    /// module.
    Spawn {
        parent: Pid,
        spec: ProcessSpec,
        kernel: Option<KernelId>,
    },
    /// `pid`'s new program (`atoll_exec`), with these arguments.
    Exec {
        pid: Pid,
        args: Vec<String>,
        kernel: Option<KernelId>,
    },
}

/// What the loader did, for the kernel to carry on with.
pub(crate) enum Loaded {
    Program {
        then: ThenRun,
        /// The module's hash, or why it could not be loaded (its path first).
        module: Result<ContentHash, String>,
    },
    Module {
        hash: ContentHash,
        result: Result<(), String>,
    },
}

/// A kernel's end of its loader thread.
pub(crate) struct Loader {
    jobs: Sender<Load>,
    pub(crate) done: Receiver<Loaded>,
}

impl Loader {
    /// Starts the loader of kernel `id`, which rings `doorbells[id.index]`
    /// when a load is done. The thread ends with the kernel (its job queue
    /// closes).
    pub(crate) fn start(
        id: KernelId,
        runtime: Arc<Runtime>,
        doorbells: Arc<[Doorbell]>,
    ) -> std::io::Result<Loader> {
        let (jobs, todo) = channel::<Load>();
        let (results, done) = channel();
        std::thread::Builder::new()
            .name(format!("atoll-loader-{id}"))
            .spawn(move || {
                for job in todo {
                    if results.send(load(&runtime, job)).is_err() {
                        return;
                    }
                    doorbells[id.index as usize].ring();
                }
            })?;
        Ok(Loader { jobs, done })
    }

    pub(crate) fn load(&self, job: Load) {
        // The thread lives as long as this sender.
        let _ = self.jobs.send(job);
    }
}

fn load(runtime: &Runtime, job: Load) -> Loaded {
    match job {
        Load::Program {
            source,
            prepare,
            then,
        } => {
            let (name, program) = match source {
                ModuleSource::File(path) => (
                    path.display().to_string(),
                    runtime.load_file(&path, prepare),
                ),
                ModuleSource::Read { name, bytes } => (name, runtime.load(&bytes, prepare)),
            };
            Loaded::Program {
                then: *then,
                module: program
                    .map(|p| p.hash())
                    .map_err(|e| format!("{name}: {e}")),
            }
        }
        Load::Module { hash, bytes } => Loaded::Module {
            hash,
            result: match runtime.load(&bytes, false) {
                Ok(p) if p.hash() == hash => Ok(()),
                Ok(p) => Err(format!("its bytes hash to {}", p.hash())),
                Err(e) => Err(e.to_string()),
            },
        },
    }
}
