//! What the `atoll` command's tests share: running the binary, and finding
//! a process in what a node's `atoll ps` lists.

#![allow(dead_code)]

#[path = "../../../../tests/support.rs"]
pub mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `atoll` binary with the tests' module cache, talking to no node
/// unless the caller sets `ATOLL_SOCKET`.
pub fn atoll(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_atoll"));
    c.args(["--cache", support::cache_dir().to_str().unwrap()]);
    // Never talk to a node some other process left running.
    c.env("ATOLL_SOCKET", "/nonexistent/atoll.sock");
    c.args(args);
    c
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn guest(name: &str) -> String {
    support::guest(name).display().to_string()
}

/// An `atoll node` process of a test, with its own control socket; killed
/// when dropped.
#[derive(Debug)]
pub struct NodeProcess {
    pub child: Child,
    pub socket: PathBuf,
}

impl NodeProcess {
    /// Waits until the node serves its socket.
    pub fn started(child: Child, socket: PathBuf) -> NodeProcess {
        let node = NodeProcess { child, socket };
        let t = Instant::now();
        while std::os::unix::net::UnixStream::connect(&node.socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the node at {} did not start",
                node.socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        node
    }

    /// `atoll ARGS`, talking to this node.
    pub fn atoll(&self, args: &[&str]) -> Command {
        let mut c = atoll(args);
        c.env("ATOLL_SOCKET", &self.socket);
        c
    }

    /// The PID of the process named `name`, once this node's `ps` lists it.
    pub fn wait_for(&self, name: &str) -> String {
        wait_for(&self.socket, name)
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asserts that a command said `needle` on its stderr (and shows it if not).
pub fn assert_stderr(out: &Output, needle: &str) {
    let said = text(&out.stderr);
    assert!(said.contains(needle), "no `{needle}` in: {said}");
}

/// A directory with `hello.wasm` and `junk.wasm` (not a module), as
/// `launch` spawns them.
pub fn module_dir() -> tempfile::TempDir {
    let bin = tempfile::tempdir().unwrap();
    std::fs::copy(guest("hello"), bin.path().join("hello.wasm")).unwrap();
    std::fs::write(bin.path().join("junk.wasm"), b"not a module").unwrap();
    bin
}

/// Checks what `launch MODULE x` does, run by `launch`, with
/// [`module_dir`] preopened as `/bin`: hello runs, a missing module and a
/// file that is not one are refused; returns the latter's output.
pub fn check_launch(launch: impl Fn(&str) -> Output) -> Output {
    let out = launch("/bin/hello.wasm");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("argv[0] = /bin/hello.wasm\nargv[1] = x\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("launch: /bin/hello.wasm exited with status 0\n"),
        "{stdout}"
    );
    let out = launch("/bin/nope.wasm");
    assert_eq!(
        text(&out.stdout),
        "launch: /bin/nope.wasm: spawn failed: No such file or directory\n"
    );
    let out = launch("/bin/junk.wasm");
    assert!(
        text(&out.stdout).contains("spawn failed: Exec format error"),
        "{}",
        text(&out.stdout)
    );
    out
}

/// The PID of the process named `name` in `atoll ps` output.
pub fn pid_of(ps: &str, name: &str) -> Option<String> {
    ps.lines()
        .find(|l| l.contains(name))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
}

/// The PID of the process named `name`, once the node at `socket` lists it.
pub fn wait_for(socket: &Path, name: &str) -> String {
    let t = Instant::now();
    loop {
        let ps = atoll(&["ps"]).env("ATOLL_SOCKET", socket).output().unwrap();
        if let Some(pid) = pid_of(&text(&ps.stdout), name) {
            return pid;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{name} never showed in ps"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An `atoll node` of `kernels` kernels for one test, on a socket of its
/// own in a temporary directory.
pub struct Daemon {
    node: NodeProcess,
    _dir: tempfile::TempDir,
}

impl Daemon {
    pub fn start(kernels: u16) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("node.sock");
        let child = atoll(&["node", "--kernels", &kernels.to_string()])
            .env("ATOLL_SOCKET", &socket)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Daemon {
            node: NodeProcess::started(child, socket),
            _dir: dir,
        }
    }
}

impl std::ops::Deref for Daemon {
    type Target = NodeProcess;
    fn deref(&self) -> &NodeProcess {
        &self.node
    }
}
