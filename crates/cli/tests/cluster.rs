//! Several nodes, one atoll: real `atoll node` processes joined over
//! loopback with mutual TLS, used from any of them, and processes moving
//! live between them.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use atoll_bench::netns::Veth;
use common::{assert_stderr, atoll, check_launch, guest, module_dir, text, NodeProcess};

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// One `atoll node` process of a test cluster, where it is linked, and
/// what it has said on its stderr so far.
#[derive(Debug)]
struct Member {
    node: NodeProcess,
    addr: String,
    said: Arc<Mutex<String>>,
}

impl std::ops::Deref for Member {
    type Target = NodeProcess;
    fn deref(&self) -> &NodeProcess {
        &self.node
    }
}

impl std::ops::DerefMut for Member {
    fn deref_mut(&mut self) -> &mut NodeProcess {
        &mut self.node
    }
}

/// Nodes `n0`..`nN-1`, each a separate process with its own certificate
/// from one CA, `n0` started first and the others joining through it.
struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Member>,
}

impl Cluster {
    fn start(nodes: usize, kernels: u16) -> Cluster {
        Cluster::start_with(nodes, kernels, &[])
    }

    /// As [`start`](Self::start), each node with the options `extra`.
    fn start_with(nodes: usize, kernels: u16, extra: &[&str]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca");
        ok(atoll(&["ca", "init", ca.to_str().unwrap()])
            .output()
            .unwrap());
        let mut cluster = Cluster {
            dir,
            nodes: Vec::new(),
        };
        for i in 0..nodes {
            let name = format!("n{i}");
            ok(atoll(&["ca", "issue", ca.to_str().unwrap(), &name])
                .output()
                .unwrap());
            let join = cluster.nodes.first().map(|m| m.addr.clone());
            let member = cluster
                .spawn(&ca, &name, kernels, join.as_deref(), extra)
                .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
            cluster.nodes.push(member);
        }
        cluster
    }

    /// Starts node `name` with certificates from `ca`, joining through
    /// `join`, with `extra` options; returns its error output if it exits
    /// instead.
    fn spawn(
        &self,
        ca: &Path,
        name: &str,
        kernels: u16,
        join: Option<&str>,
        extra: &[&str],
    ) -> Result<Member, String> {
        self.spawn_at(&Host::loopback(), ca, name, kernels, join, extra)
    }

    /// As [`spawn`](Self::spawn), on `host`.
    fn spawn_at(
        &self,
        host: &Host,
        ca: &Path,
        name: &str,
        kernels: u16,
        join: Option<&str>,
        extra: &[&str],
    ) -> Result<Member, String> {
        let socket = self.dir.path().join(format!("{name}.sock"));
        let mut args = vec![
            "node".to_string(),
            "--kernels".into(),
            kernels.to_string(),
            "--listen".into(),
            host.listen.clone(),
            "--certs".into(),
            ca.to_str().unwrap().into(),
            "--name".into(),
            name.into(),
            // Several nodes on one machine: pinned, their kernels 0 would
            // share the first core.
            "--no-pin".into(),
        ];
        if let Some(j) = join {
            args.extend(["--join".into(), j.into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cache = common::support::cache_dir();
        let mut command = match (&host.netns, &host.hide) {
            // A unix socket's path is the same in every network namespace:
            // the test's commands reach the node from here.
            (Some(ns), _) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_atoll")]);
                c.args(["--cache", cache.to_str().unwrap()]);
                c.args(&args);
                c
            }
            // The node's own mount namespace, where an empty file system
            // covers the directory.
            (None, Some(dir)) => {
                let mut c = Command::new("unshare");
                c.args(["--mount", "--propagation", "private", "--", "sh", "-c"]);
                c.arg(r#"mount -t tmpfs atoll-test "$0" && exec "$@""#);
                c.args([dir.to_str().unwrap(), env!("CARGO_BIN_EXE_atoll")]);
                c.args(["--cache", cache.to_str().unwrap()]);
                c.args(&args);
                c
            }
            (None, None) => atoll(&args),
        };
        let mut child = command
            .env("ATOLL_SOCKET", &socket)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The node says where it is linked; its stderr is drained after.
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let said = Arc::new(Mutex::new(String::new()));
        let heard = said.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split_once("linked at ").map(|(_, r)| r) {
                    let _ = tx.send(Ok(rest.split_whitespace().next().unwrap().to_owned()));
                }
                let mut said = heard.lock().unwrap();
                said.push_str(&line);
                said.push('\n');
            }
            let _ = tx.send(Err(heard.lock().unwrap().clone()));
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(addr)) => addr,
            failed => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(match failed {
                    Ok(Err(said)) => said,
                    _ => format!("{name} said nothing in time"),
                });
            }
        };
        Ok(Member {
            node: NodeProcess::started(child, socket),
            addr,
            said,
        })
    }
}

/// Where a test node runs: its listening address, its network namespace
/// (`None`: this one), and a directory it does not see (its mount
/// namespace covers it with an empty one).
struct Host {
    listen: String,
    netns: Option<String>,
    hide: Option<std::path::PathBuf>,
}

impl Host {
    fn loopback() -> Host {
        Host {
            listen: "127.0.0.1:0".into(),
            netns: None,
            hide: None,
        }
    }

    /// On loopback, without `dir`: `None` where mount namespaces cannot be
    /// made (not root).
    fn without(dir: &Path) -> Option<Host> {
        // SAFETY: getuid has no preconditions.
        (unsafe { libc::getuid() } == 0).then(|| Host {
            hide: Some(dir.to_path_buf()),
            ..Host::loopback()
        })
    }
}

/// Host `i` of two joined by a veth pair, listening on its own address.
fn host(hosts: &Veth, i: usize) -> Host {
    Host {
        listen: format!("{}:7700", hosts.addr(i)),
        netns: Some(hosts.namespace(i).to_string()),
        hide: None,
    }
}

/// What an unmoved run of `progress` prints.
fn unmoved(args: &[&str]) -> String {
    let mut all = vec!["run", "--embedded"];
    let program = guest("progress");
    all.push(&program);
    all.extend(args);
    ok(atoll(&all).output().unwrap())
}

#[test]
fn a_running_process_moves_between_nodes_and_prints_what_an_unmoved_run_prints() {
    let c = Cluster::start(3, 2);
    let (a, b) = (&c.nodes[0], &c.nodes[2]);
    let job = a
        .atoll(&["run", "--on", "0.1", &guest("progress"), "100", "20000000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = a.wait_for("progress");
    // Every node lists it, wherever it runs.
    assert_eq!(b.wait_for("progress"), pid);
    // 50 moves from 0.1 over every node and back, asked from different
    // nodes: the same path serves a process here and one on another machine.
    let path = ["1.0", "2.1", "0.0", "1.1", "0.1"];
    for (i, to) in path.iter().cycle().take(50).enumerate() {
        let asker = &c.nodes[i % 3];
        let out = ok(asker
            .atoll(&["migrate", &pid, "--to", to, "--json"])
            .output()
            .unwrap());
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["to"], *to, "{out}");
        assert_eq!(report["mode"], "copy", "{out}");
        let ps = ok(c.nodes[(i + 1) % 3].atoll(&["ps"]).output().unwrap());
        let line = ps.lines().find(|l| l.starts_with(&pid)).unwrap();
        assert_eq!(line.split_whitespace().nth(1), Some(*to), "{ps}");
    }
    let out = job.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), unmoved(&["100", "20000000"]));
}

#[test]
fn a_job_starts_on_another_nodes_kernel_and_stays_on_this_terminal() {
    let c = Cluster::start(2, 2);
    let out = ok(c.nodes[0]
        .atoll(&["run", "--on", "1.1", &guest("hello"), "far"])
        .output()
        .unwrap());
    assert!(out.contains("on kernel 1 of 2 (node 1)"), "{out}");
    assert!(out.contains("argv[1] = far"), "{out}");
    let out = c.nodes[1]
        .atoll(&["run", "--on", "0.0", &guest("exit"), "7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let out = c.nodes[0]
        .atoll(&["run", "--on", "4.0", &guest("hello")])
        .output()
        .unwrap();
    assert_stderr(&out, "kernel 4.0 does not exist");
}

#[test]
fn a_process_moves_itself_across_nodes_with_kmigrate_to() {
    let c = Cluster::start(2, 1);
    // Output written on both nodes, shown in order and before the end.
    let out = ok(c.nodes[0]
        .atoll(&["run", &guest("roam"), "-w", "1000", "2", "10"])
        .output()
        .unwrap());
    let (body, last) = out.rsplit_once("roam: ok ").expect("the last line");
    assert_eq!(body, common::support::roam_output(1000, 2, 10));
    assert!(last.ends_with('\n'));
    // A trap right after a move to the other node: what it wrote before on
    // stdout, the node's line about the trap on stderr, a trap's status.
    let out = c.nodes[0]
        .atoll(&[
            "run",
            "--on",
            "1.0",
            &guest("roam"),
            "-w",
            "1000",
            "-t",
            "2",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(134), "{}", text(&out.stderr));
    let all = common::support::roam_output(1000, 2, 2);
    assert_eq!(
        text(&out.stdout),
        all.strip_suffix("roam 1.1: moved\n").unwrap()
    );
    assert_stderr(&out, "(roam.wasm) trapped: wasm trap: wasm `unreachable`");
    // A node that does not exist: the move is refused and the process
    // carries on where it was (and reports the failure).
    let out = c.nodes[1]
        .atoll(&["run", &guest("roam"), "3", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(&out, "kmigrate_to(node 2) = ");
}

#[test]
fn kill_from_any_node_and_hand_over_refused_between_nodes() {
    let c = Cluster::start(2, 1);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let job = a.atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = b.wait_for("spin");
    let out = b
        .atoll(&["migrate", &pid, "--to", "1.0", "--mode", "handover"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_stderr(&out, "never leaves its machine");
    let out = b.atoll(&["migrate", &pid, "--to", "1.7"]).output().unwrap();
    assert!(text(&out.stderr).contains("1.7"), "{}", text(&out.stderr));
    ok(b.atoll(&["migrate", &pid, "--to", "1.0"]).output().unwrap());
    ok(b.atoll(&["kill", &pid]).output().unwrap());
    let status = job.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(137));
    let out = b.atoll(&["kill", &pid]).output().unwrap();
    assert_stderr(&out, "no such process");
}

#[test]
fn strangers_and_garbage_are_refused_and_the_cluster_carries_on() {
    let c = Cluster::start(2, 1);
    // A node whose certificate comes from another cluster's CA.
    let other = c.dir.path().join("other-ca");
    ok(atoll(&["ca", "init", other.to_str().unwrap()])
        .output()
        .unwrap());
    ok(atoll(&["ca", "issue", other.to_str().unwrap(), "n9"])
        .output()
        .unwrap());
    let stranger = c.spawn(&other, "n9", 1, Some(&c.nodes[0].addr), &[]);
    assert!(stranger.is_err(), "a stranger joined");
    // A member of this cluster may not take another's id, nor a second one.
    let ca = c.dir.path().join("ca");
    ok(atoll(&["ca", "issue", ca.to_str().unwrap(), "n2"])
        .output()
        .unwrap());
    let join = Some(c.nodes[0].addr.as_str());
    let taken = c.spawn(&ca, "n2", 1, join, &["--node-id", "1"]);
    assert!(taken.unwrap_err().contains("node id 1 is taken by `n1`"));
    let twice = c.spawn(&ca, "n1", 1, join, &["--node-id", "5"]);
    assert!(twice.unwrap_err().contains("`n1` is already node 1"));
    // Bytes that are not TLS, and TLS-less garbage after a valid length.
    for garbage in [&b"GET / HTTP/1.1\r\n\r\n"[..], &[0xff; 64][..]] {
        let mut s = TcpStream::connect(&c.nodes[0].addr).unwrap();
        let _ = s.write_all(garbage);
    }
    // The members still work together.
    let job = c.nodes[0].atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = c.nodes[1].wait_for("spin");
    ok(c.nodes[1]
        .atoll(&["migrate", &pid, "--to", "1.0"])
        .output()
        .unwrap());
    ok(c.nodes[0].atoll(&["kill", &pid]).output().unwrap());
    assert_eq!(job.wait_with_output().unwrap().status.code(), Some(137));
}

/// Reads `child`'s stdout up to `line`, then the rest on a thread of its
/// own (joined for what followed): a child that goes on printing must
/// not fill its pipe and block while the test waits for it.
fn read_until(child: &mut Child, line: &str) -> std::thread::JoinHandle<String> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut got = String::new();
    loop {
        got.clear();
        assert!(out.read_line(&mut got).unwrap() > 0, "no `{line}` line");
        if got.trim_end() == line {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        rest
    })
}

/// A job started on node 0 (homed there) and moved to run on node 1.
fn spin_on_node_1(c: &Cluster) -> Child {
    let spin = c.nodes[0].atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = c.nodes[0].wait_for("spin.wasm");
    ok(c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "1.0"])
        .output()
        .unwrap());
    spin
}

#[test]
fn a_node_killed_mid_conversation_ends_every_wait_on_it() {
    let mut c = Cluster::start(2, 1);
    // A parent on node 0 with two children on node 1, talking to one.
    let mut far = c.nodes[0]
        .atoll(&["run", &guest("far"), "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rest = read_until(&mut far, "far: ready");
    let spin = spin_on_node_1(&c);
    let mut lost = c.nodes.pop().unwrap();
    lost.child.kill().unwrap();
    let said = rest.join().unwrap();
    assert_eq!(
        said,
        "far: sendrec EDEADSRCDST\n\
         far: spinner ended with status 137\n\
         far: server ended with status 137\n",
    );
    assert_eq!(far.wait().unwrap().code(), Some(0));
    assert_eq!(spin.wait_with_output().unwrap().status.code(), Some(137));
    let ps = c.nodes[0].atoll(&["ps"]).output().unwrap();
    assert_stderr(&ps, "node 1 (n1");
    assert!(text(&ps.stderr).contains(": DOWN"), "{}", text(&ps.stderr));
    // What is sent to the lost node now fails at once.
    let job = c.nodes[0].atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = c.nodes[0].wait_for("spin.wasm");
    let out = c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "1.0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    ok(c.nodes[0].atoll(&["kill", &pid]).output().unwrap());
    assert_eq!(job.wait_with_output().unwrap().status.code(), Some(137));
    drop(lost);
}

/// `atoll node` stops in order on SIGTERM: it exits 0 and removes its
/// socket, and the other members hear that it stopped, not that its links
/// failed; what ran there is lost as with any lost node.
#[test]
fn a_node_stopped_with_sigterm_is_heard_as_stopped() {
    let mut c = Cluster::start_with(2, 1, &["-v"]);
    let spin = spin_on_node_1(&c);
    let mut stopped = c.nodes.pop().unwrap();
    // SAFETY: kill(2) on the node's own child process.
    let sent = unsafe { libc::kill(stopped.child.id() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0);
    assert_eq!(stopped.child.wait().unwrap().code(), Some(0));
    assert!(!stopped.socket.exists(), "the stopped node left its socket");
    assert_eq!(spin.wait_with_output().unwrap().status.code(), Some(137));
    // The links hear it first, then the kernel ends what waited on it.
    let t = Instant::now();
    while !c.nodes[0]
        .said
        .lock()
        .unwrap()
        .contains("node stopped: ending what waits on it")
    {
        let said = c.nodes[0].said.lock().unwrap().clone();
        assert!(t.elapsed() < Duration::from_secs(30), "node 0 said: {said}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let said = c.nodes[0].said.lock().unwrap().clone();
    assert!(
        !said.contains("link down"),
        "a stop heard as a failure: {said}"
    );
    assert!(said.contains("the member stopped"), "{said}");
    let ps = c.nodes[0].atoll(&["ps"]).output().unwrap();
    assert!(text(&ps.stderr).contains(": DOWN"), "{}", text(&ps.stderr));
}

#[test]
fn atoll_migrate_moves_a_process_by_post_copy_between_nodes_only() {
    let c = Cluster::start(2, 2);
    let dirty = guest("dirty");
    let run = ["run", "--on", "0.0", &dirty, "32", "256", "4000"];
    let reference = ok(c.nodes[0].atoll(&run).output().unwrap());
    assert!(reference.contains("dirty: checksum="), "{reference}");
    let mut job = c.nodes[0]
        .atoll(&run)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = read_until(&mut job, "dirty: ready");
    let pid = c.nodes[0].wait_for("dirty");
    let within = c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "0.1", "--mode", "postcopy"])
        .output()
        .unwrap();
    assert!(!within.status.success());
    assert_stderr(&within, "post-copy moves a process between nodes");
    let moved = ok(c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "1.0", "--mode", "postcopy"])
        .output()
        .unwrap());
    assert!(moved.contains("-> 1.0 (postcopy)"), "{moved}");
    assert!(job.wait().unwrap().success());
    assert_eq!(format!("dirty: ready\n{}", out.join().unwrap()), reference);
}

#[test]
fn a_destination_killed_mid_migration_commits_once_or_rolls_back() {
    let mut c = Cluster::start(3, 1);
    // 256 MiB: its pre-copy takes long enough to be cut.
    let job = c.nodes[0]
        .atoll(&["run", &guest("dirty"), "256", "64", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut job = job;
    let out = read_until(&mut job, "dirty: ready");
    let pid = c.nodes[0].wait_for("dirty");
    let migrate = c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "1.0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut lost = c.nodes.remove(1);
    lost.child.kill().unwrap();
    let migrated = migrate.wait_with_output().unwrap();
    let ps = ok(c.nodes[1].atoll(&["ps"]).output().unwrap());
    eprintln!("migrate: {}", text(&migrated.stderr).trim());
    if migrated.status.success() {
        // It moved before the kill: it was lost with node 1.
        assert!(!ps.contains(&pid), "{ps}");
        assert_eq!(job.wait().unwrap().code(), Some(137));
    } else {
        // Rolled back: it runs on at its source, and can move elsewhere.
        let line = ps.lines().find(|l| l.starts_with(&pid)).unwrap();
        assert_eq!(line.split_whitespace().nth(1), Some("0.0"), "{ps}");
        ok(c.nodes[1]
            .atoll(&["migrate", &pid, "--to", "2.0"])
            .output()
            .unwrap());
        ok(c.nodes[0].atoll(&["kill", &pid]).output().unwrap());
        assert_eq!(job.wait().unwrap().code(), Some(137));
    }
    out.join().unwrap();
    drop(lost);
}

#[test]
fn a_silent_node_is_given_up_and_a_restarted_one_is_a_new_node() {
    let mut c = Cluster::start(2, 1);
    let job = c.nodes[0].atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = c.nodes[0].wait_for("spin.wasm");
    ok(c.nodes[0]
        .atoll(&["migrate", &pid, "--to", "1.0"])
        .output()
        .unwrap());
    // Stopped, node 1 says nothing but its connections stay open (as when
    // a link is cut): its heartbeats stop, and it is given up.
    let stopped = c.nodes.pop().unwrap();
    let n1 = stopped.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &n1])
        .status()
        .unwrap()
        .success());
    // Requests that reach it now are never answered by it: they end when
    // it is given up, not when the asker's patience runs out.
    let piped = |args: &[&str]| {
        c.nodes[0]
            .atoll(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let kill = piped(&["kill", &pid]);
    let migrate = piped(&["migrate", &pid, "--to", "0.0"]);
    assert_eq!(job.wait_with_output().unwrap().status.code(), Some(137));
    let kill = kill.wait_with_output().unwrap();
    assert!(!kill.status.success());
    assert!(
        !text(&kill.stderr).contains("no answer"),
        "{}",
        text(&kill.stderr)
    );
    let migrate = migrate.wait_with_output().unwrap();
    assert!(!migrate.status.success());
    assert_stderr(&migrate, "node 1 was lost");
    let ps = c.nodes[0].atoll(&["ps"]).output().unwrap();
    assert!(text(&ps.stderr).contains(": DOWN"), "{}", text(&ps.stderr));
    let _ = Command::new("kill").args(["-CONT", &n1]).status();
    drop(stopped);
    // n1 again: a new node id, so no PID of its former life names anything.
    let ca = c.dir.path().join("ca");
    let again = c
        .spawn(&ca, "n1", 1, Some(c.nodes[0].addr.as_str()), &[])
        .unwrap();
    let out = ok(again.atoll(&["run", &guest("hello")]).output().unwrap());
    assert!(out.contains("(node 2)"), "{out}");
}

#[test]
fn minix_ipc_between_nodes_behaves_as_on_one_node() {
    let c = Cluster::start(3, 1);
    let ipc = guest("ipc");
    for scenario in [
        &["pingpong", "nodes3", "200"][..],
        &["senda", "nodes3", "500"],
        &["notify", "nodes3"],
        &["locked", "nodes3"],
        &["dead", "nodes3"],
        &["grants", "nodes3"],
    ] {
        let mut args = vec!["run", ipc.as_str()];
        args.extend(scenario);
        let out = ok(c.nodes[0].atoll(&args).output().unwrap());
        assert_eq!(out, format!("ok {}\n", scenario[0]));
    }
}

#[test]
fn ipc_stress_over_three_nodes_while_its_processes_migrate_between_them() {
    let c = Cluster::start(3, 1);
    // 6 client/server pairs, each call numbered and checked in order by its
    // server, every process on another node than its parent.
    let job = c.nodes[0]
        .atoll(&["run", &guest("ipc"), "stress", "nodes3", "6", "5000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The children (argv[0] `ipc`), not the parent (`ipc.wasm`).
    let children = |ps: &str| -> Vec<String> {
        ps.lines()
            .filter(|l| l.split_whitespace().nth(3) == Some("ipc"))
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect()
    };
    // Started once they are listed (another node may still be compiling
    // the module it was sent).
    let t = Instant::now();
    while children(&text(&c.nodes[0].atoll(&["ps"]).output().unwrap().stdout)).len() < 2 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the stress never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut moved = 0;
    for round in 0..20 {
        let ps = text(&c.nodes[round % 3].atoll(&["ps"]).output().unwrap().stdout);
        let pids = children(&ps);
        if pids.len() < 2 {
            break;
        }
        for (i, pid) in pids.iter().enumerate() {
            let to = format!("{}.0", (round + i) % 3);
            let out = c.nodes[i % 3]
                .atoll(&["migrate", pid, "--to", &to])
                .output()
                .unwrap();
            // A process may end between `ps` and its move.
            moved += usize::from(out.status.success());
        }
    }
    let out = job.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), "ok stress\n");
    assert!(out.status.success());
    eprintln!("moved {moved} times while it ran");
    assert!(moved > 0, "nothing was moved while it ran");
}

#[test]
fn nodes_joining_at_once_end_up_linked_each_to_each() {
    let mut c = Cluster::start(1, 1);
    let ca = c.dir.path().join("ca");
    for i in 1..=3 {
        let name = format!("n{i}");
        ok(atoll(&["ca", "issue", ca.to_str().unwrap(), &name])
            .output()
            .unwrap());
    }
    // As under Slurm: every other node at once, with the ids it is told.
    let seed = c.nodes[0].addr.clone();
    let joined: Vec<Member> = std::thread::scope(|s| {
        let starts: Vec<_> = (1..=3)
            .map(|i| {
                let (c, ca, seed) = (&c, &ca, &seed);
                s.spawn(move || {
                    let id = i.to_string();
                    let name = format!("n{i}");
                    c.spawn(ca, &name, 1, Some(seed), &["--node-id", &id])
                        .unwrap()
                })
            })
            .collect();
        starts.into_iter().map(|t| t.join().unwrap()).collect()
    });
    c.nodes.extend(joined);
    for m in &c.nodes {
        let t = Instant::now();
        loop {
            let ps = text(&m.atoll(&["ps"]).output().unwrap().stderr);
            if ps.lines().filter(|l| l.ends_with(": up")).count() == 4 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "not a full mesh:\n{ps}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Every pair carries a migration.
    let job = c.nodes[0].atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = c.nodes[0].wait_for("spin.wasm");
    for to in ["3.0", "1.0", "2.0", "3.0", "2.0", "1.0", "0.0"] {
        ok(c.nodes[3]
            .atoll(&["migrate", &pid, "--to", to])
            .output()
            .unwrap());
    }
    ok(c.nodes[2].atoll(&["kill", &pid]).output().unwrap());
    assert_eq!(job.wait_with_output().unwrap().status.code(), Some(137));
}

#[test]
fn a_domain_made_on_one_node_spans_every_node() {
    let mut c = Cluster::start(3, 1);
    ok(c.nodes[1]
        .atoll(&["domain", "create", "lab"])
        .output()
        .unwrap());
    let listed = |m: &Member| {
        let t = Instant::now();
        while !ok(m.atoll(&["domain", "list"]).output().unwrap()).contains("lab") {
            assert!(t.elapsed() < Duration::from_secs(10), "lab never listed");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    listed(&c.nodes[0]);
    // A node that joins later is told of it too.
    ok(atoll(&[
        "ca",
        "issue",
        c.dir.path().join("ca").to_str().unwrap(),
        "n3",
    ])
    .output()
    .unwrap());
    let late = c
        .spawn(
            &c.dir.path().join("ca"),
            "n3",
            1,
            Some(c.nodes[0].addr.as_str()),
            &[],
        )
        .unwrap();
    listed(&late);
    c.nodes.push(late);
    // IPC inside it, between nodes.
    let out = ok(c.nodes[0]
        .atoll(&[
            "run",
            "--domain",
            "lab",
            &guest("ipc"),
            "pingpong",
            "nodes3",
            "100",
        ])
        .output()
        .unwrap());
    assert_eq!(out, "ok pingpong\n");
    // Ended from a third node: its process on the first ends.
    let sleeper = c.nodes[0]
        .atoll(&["run", "--domain", "lab", &guest("ipc"), "sleeper", "same"])
        .spawn()
        .unwrap();
    c.nodes[0].wait_for("ipc.wasm");
    ok(c.nodes[2]
        .atoll(&["domain", "end", "lab"])
        .output()
        .unwrap());
    assert_eq!(sleeper.wait_with_output().unwrap().status.code(), Some(137));
}

#[test]
fn nodes_on_two_hosts_lose_each_other_when_the_link_is_cut_and_link_again_when_restored() {
    let hosts = match Veth::make() {
        Ok(hosts) => hosts,
        Err(e) => return eprintln!("skipped: {e:#}"),
    };
    let c = Cluster {
        dir: tempfile::tempdir().unwrap(),
        nodes: Vec::new(),
    };
    let ca = c.dir.path().join("ca");
    ok(atoll(&["ca", "init", ca.to_str().unwrap()])
        .output()
        .unwrap());
    for n in ["n0", "n1"] {
        ok(atoll(&["ca", "issue", ca.to_str().unwrap(), n])
            .output()
            .unwrap());
    }
    let a = c
        .spawn_at(&host(&hosts, 0), &ca, "n0", 1, None, &[])
        .unwrap();
    let join = host(&hosts, 0).listen;
    let b = c
        .spawn_at(&host(&hosts, 1), &ca, "n1", 1, Some(&join), &[])
        .unwrap();
    assert_eq!(a.addr, join);
    // Over the veth, there and back: the same output as an unmoved run.
    there_and_back(&a, &b);
    // Cut: a job that runs on the other host is lost with it, within the
    // links' silence limit, and each side sees the other down.
    let job = a.atoll(&["run", &guest("spin")]).spawn().unwrap();
    let pid = a.wait_for("spin.wasm");
    ok(a.atoll(&["migrate", &pid, "--to", "1.0"]).output().unwrap());
    hosts.link(1, false).unwrap();
    assert_eq!(job.wait_with_output().unwrap().status.code(), Some(137));
    for m in [&a, &b] {
        let ps = text(&m.atoll(&["ps"]).output().unwrap().stderr);
        assert!(ps.contains(": DOWN"), "{ps}");
    }
    // Each side ended what the other declared dead: the job's process is
    // gone from the host it ran on, not left running unseen.
    let t = Instant::now();
    while ok(b.atoll(&["ps"]).output().unwrap()).contains(&pid) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "{pid} still runs on n1"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A domain made while they are apart.
    ok(a.atoll(&["domain", "create", "apart"]).output().unwrap());
    // Restored, the link is mended: the same two nodes, linked again, that
    // tell each other what changed, and a process moves over it there and
    // back as before the cut.
    hosts.link(1, true).unwrap();
    let t = Instant::now();
    for m in [&a, &b] {
        loop {
            let ps = text(&m.atoll(&["ps"]).output().unwrap().stderr);
            if !ps.contains(": DOWN") {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "not mended: {ps}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    while !ok(b.atoll(&["domain", "list"]).output().unwrap()).contains("apart") {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "n1 never heard of `apart`"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    there_and_back(&a, &b);
}

/// A job started on `a` (node 0) moves to node 1 and back, asked from
/// either node, and prints what an unmoved run prints.
fn there_and_back(a: &NodeProcess, b: &NodeProcess) {
    let job = a
        .atoll(&["run", &guest("progress"), "20", "4000000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = a.wait_for("progress");
    ok(b.atoll(&["migrate", &pid, "--to", "1.0"]).output().unwrap());
    ok(a.atoll(&["migrate", &pid, "--to", "0.0"]).output().unwrap());
    let out = job.wait_with_output().unwrap();
    assert_eq!(text(&out.stdout), unmoved(&["20", "4000000"]));
}

#[test]
fn a_checkpoint_taken_on_one_node_is_restored_on_another() {
    let c = Cluster::start(2, 1);
    let job = c.nodes[0]
        .atoll(&["run", &guest("progress"), "40", "20000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = c.nodes[0].wait_for("progress");
    std::thread::sleep(Duration::from_millis(200));
    let file = c.dir.path().join("p.img");
    ok(c.nodes[0]
        .atoll(&["checkpoint", &pid, "-o", file.to_str().unwrap()])
        .output()
        .unwrap());
    let first = job.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(128 + 19));
    // Restored on node 1, asked on node 0 (which has the program and sends
    // it), attached to this terminal, with its PID back.
    let rest = c.nodes[0]
        .atoll(&["restore", file.to_str().unwrap(), "--on", "1.0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(c.nodes[1].wait_for("progress"), pid);
    let rest = rest.wait_with_output().unwrap();
    assert!(rest.status.success(), "{}", text(&rest.stderr));
    assert_eq!(
        text(&first.stdout) + &text(&rest.stdout),
        unmoved(&["40", "20000000"])
    );
}

/// Node 0 and node 1, where node 1 does not see `dir` (an empty file
/// system covers it there); `None` when not root.
fn cluster_without(dir: &Path) -> Option<Cluster> {
    let host = Host::without(dir)?;
    let mut c = Cluster::start(1, 2);
    let ca = c.dir.path().join("ca");
    ok(atoll(&["ca", "issue", ca.to_str().unwrap(), "n1"])
        .output()
        .unwrap());
    let join = c.nodes[0].addr.clone();
    let member = c
        .spawn_at(&host, &ca, "n1", 2, Some(&join), &[])
        .unwrap_or_else(|e| panic!("n1 did not start: {e}"));
    c.nodes.push(member);
    Some(c)
}

#[test]
fn a_file_is_used_from_a_node_that_does_not_have_it() {
    let data = tempfile::tempdir().unwrap();
    let Some(c) = cluster_without(data.path()) else {
        eprintln!("skipped: not root (mount namespaces)");
        return;
    };
    let dir = format!("{}::/data", data.path().display());
    // 10 moves between the nodes, the log file open throughout: written
    // from node 1 through node 0, which owns it.
    let out = ok(c.nodes[0]
        .atoll(&[
            "run",
            "--dir",
            &dir,
            &guest("roam"),
            "2",
            "5",
            "/data/roam.log",
        ])
        .output()
        .unwrap());
    let log: String = (0..5)
        .flat_map(|r| (0..2).map(move |n| format!("roam {r}.{n}: on node {}\n", 1 - n)))
        .collect();
    assert_eq!(
        std::fs::read_to_string(data.path().join("roam.log")).unwrap(),
        log
    );
    let sum = log
        .bytes()
        .fold(0u32, |s, b| s.wrapping_mul(31).wrapping_add(b.into()));
    assert!(
        out.contains(&format!("roam: /data/roam.log has 10 lines, {sum}\n")),
        "{out}"
    );
    // Every file call, each from node 1 and moving between its kernels
    // after each one, prints what it prints on one kernel.
    let here = ok(
        atoll(&["run", "--embedded", "--dir", &dir, &guest("files"), "/data"])
            .output()
            .unwrap(),
    );
    let away = ok(c.nodes[0]
        .atoll(&[
            "run",
            "--on",
            "1.0",
            "--wander",
            "--dir",
            &dir,
            &guest("files"),
            "/data",
        ])
        .output()
        .unwrap());
    assert_eq!(away, here);
    assert!(here.ends_with("files: ok\n"), "{here}");
    // So does the WASI conformance program, its files held by node 0.
    let conformance = guest("wasi_conformance");
    let here = ok(
        atoll(&["run", "--embedded", "--dir", &dir, &conformance, "/data"])
            .output()
            .unwrap(),
    );
    let away = ok(c.nodes[0]
        .atoll(&["run", "--on", "1.0", "--dir", &dir, &conformance, "/data"])
        .output()
        .unwrap());
    assert_eq!(away, here);
    assert!(!here.contains("FAIL"), "{here}");
}

#[test]
fn a_module_is_spawned_and_execed_from_a_directory_of_another_node() {
    let bin = module_dir();
    let Some(c) = cluster_without(bin.path()) else {
        eprintln!("skipped: not root (mount namespaces)");
        return;
    };
    let dir = format!("{}::/bin", bin.path().display());
    // On node 1, which does not see the directory: node 0 reads the
    // module for it, and node 1 prepares and compiles it.
    let on_node_1 = |args: &[&str]| {
        let mut all = vec!["run", "--on", "1.0", "--dir", &dir];
        all.extend_from_slice(args);
        c.nodes[0].atoll(&all).output().unwrap()
    };
    let launch = guest("launch");
    let junk = check_launch(|module| on_node_1(&[&launch, module, "x"]));
    assert_stderr(&junk, "junk.wasm on node 0");
    let out = on_node_1(&[&launch, "/bin/../../etc/passwd"]);
    assert!(
        text(&out.stdout).contains("spawn failed: Capabilities insufficient"),
        "{}",
        text(&out.stdout)
    );
    // exec: the same process becomes the module read from node 0.
    let stdout = ok(on_node_1(&[&guest("exec"), "module", "/bin/hello.wasm"]));
    assert!(stdout.contains("argv[1] = from-exec\n"), "{stdout}");
    assert!(!stdout.contains("module: "), "{stdout}");
}

#[test]
fn a_file_on_a_lost_node_fails_with_eio_and_never_hangs() {
    let mut c = Cluster::start(2, 1);
    let data = tempfile::tempdir().unwrap();
    let dir = format!("{}::/data", data.path().display());
    // Started from node 1, whose directory it is, to run on node 0; then
    // checkpointed and restored there from node 0's terminal: its files
    // are still node 1's, and nothing else of it is.
    let first = c.nodes[1]
        .atoll(&[
            "run",
            "--on",
            "0.0",
            "--dir",
            &dir,
            &guest("logger"),
            "/data/log",
            "100000000",
            "2000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = c.nodes[0].wait_for("logger");
    let image = c.dir.path().join("logger.img");
    // It spends most of its time in writes to node 1: a checkpoint waits
    // for the answer, and takes it along.
    ok(c.nodes[0]
        .atoll(&["checkpoint", &pid, "-o", image.to_str().unwrap()])
        .output()
        .unwrap());
    first.wait_with_output().unwrap();
    let rest = c.nodes[0]
        .atoll(&["restore", image.to_str().unwrap(), "--on", "0.0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = data.path().join("log");
    let written = || std::fs::read_to_string(&log).map_or(0, |l| l.lines().count());
    let before = written();
    let t = Instant::now();
    while written() < before + 3 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the restored logger never wrote"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    c.nodes[1].child.kill().unwrap();
    c.nodes[1].child.wait().unwrap();
    // Its next write fails (EIO): it ends, instead of waiting forever.
    let rest = rest.wait_with_output().unwrap();
    assert_eq!(rest.status.code(), Some(1));
    assert_stderr(&rest, "logger: write: I/O error");
    // Across the checkpoint, no line was written twice or lost.
    let text = std::fs::read_to_string(&log).unwrap();
    for (i, line) in text.lines().enumerate() {
        assert!(
            line.starts_with(&format!("line {} ", i + 1)),
            "line {}: {line}",
            i + 1
        );
    }
}
