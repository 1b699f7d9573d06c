//! The `atoll` command as a user runs it: exit codes, output, errors, and
//! the node daemon.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    assert_stderr, atoll, check_launch, guest, module_dir, pid_of, support, text, Daemon,
};

fn run(args: &[&str]) -> Output {
    atoll(args).output().expect("atoll runs")
}

#[test]
fn run_prints_and_exits_with_the_programs_status() {
    let out = run(&["run", "--kernels", "3", "--on", "1", &guest("hello"), "x"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("on kernel 1 of 3"), "{stdout}");
    assert!(stdout.contains("argv[1] = x"), "{stdout}");
    assert_eq!(run(&["run", &guest("exit"), "7"]).status.code(), Some(7));
}

#[test]
fn a_program_spawns_a_module_by_path_beneath_its_preopens() {
    let bin = module_dir();
    let dir = format!("{}::/bin", bin.path().display());
    // Loaded off the kernel's thread while the parent waits in its spawn.
    let junk = check_launch(|module| run(&["run", "--dir", &dir, &guest("launch"), module, "x"]));
    assert_stderr(&junk, "cannot spawn /");
}

#[test]
fn mergesort_example_prints_the_native_checksum() {
    let native = Command::new(support::built("native/mergesort"))
        .args(["200000", "3", "2"])
        .output()
        .unwrap();
    assert!(native.status.success());
    // A 1 ms quantum preempts the sort many times: each preemption unwinds
    // the stack into memory and rewinds it.
    let out = run(&[
        "run",
        "--quantum-ms",
        "1",
        &guest("mergesort"),
        "200000",
        "3",
        "2",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&native.stdout));
    let plain = run(&[
        "run",
        "--no-prepare",
        &guest("mergesort"),
        "200000",
        "3",
        "2",
    ]);
    assert_eq!(text(&plain.stdout), text(&native.stdout));
}

#[test]
fn everything_after_the_program_is_the_programs_even_atolls_options() {
    let out = run(&[
        "run",
        "--kernels",
        "2",
        &guest("hello"),
        "-e",
        "print(1)",
        "--kernels",
        "5",
        "--",
        "-v",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("of 2 (node 0)"), "{stdout}");
    for (i, arg) in ["-e", "print(1)", "--kernels", "5", "--", "-v"]
        .iter()
        .enumerate()
    {
        assert!(
            stdout.contains(&format!("argv[{}] = {arg}\n", i + 1)),
            "{stdout}"
        );
    }
    assert_eq!(run(&["run"]).status.code(), Some(2));
}

#[test]
fn wander_moves_the_program_after_every_system_call_in_either_mode() {
    let dir = tempfile::tempdir().unwrap();
    let data = format!("{}::/data", dir.path().display());
    for mode in ["handover", "copy"] {
        let out = run(&[
            "-v",
            "run",
            "--kernels",
            "3",
            "--wander",
            "--migrate-mode",
            mode,
            "--dir",
            &data,
            &guest("wasi_conformance"),
            "/data",
        ]);
        assert!(
            out.status.success(),
            "{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(text(&out.stdout).ends_with("sockets: ok\n"));
        let moves = text(&out.stderr)
            .lines()
            .filter(|l| l.contains(&format!("({mode}): downtime")))
            .count();
        assert!(moves > 50, "{mode}: {moves} migrations");
    }
    let out = run(&["run", "--migrate-mode", "teleport", &guest("hello")]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn a_trap_exits_134_with_the_reason() {
    let out = run(&["run", &guest("trap"), "unreachable"]);
    assert_eq!(out.status.code(), Some(134));
    let err = text(&out.stderr);
    assert!(
        err.contains("trapped: wasm trap: wasm `unreachable` instruction executed"),
        "{err}"
    );
}

#[test]
fn memory_cpu_time_and_process_limits_from_the_command_line() {
    let out = run(&["run", "--memory", "16MiB", &guest("hog"), "40"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).ends_with("hog: malloc returned NULL\n"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["run", "--cpu-time", "100ms", &guest("spin")]);
    assert_eq!(out.status.code(), Some(152), "{}", text(&out.stderr));
    assert_stderr(&out, "used up its CPU time limit (0.100 s)");
    let out = run(&["run", "--max-processes", "4", &guest("bomb"), "500"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("bomb: made 3;"),
        "{}",
        text(&out.stdout)
    );
    assert_stderr(&out, "its job has reached --max-processes 4");
    for (flag, value) in [
        ("--memory", "lots"),
        ("--cpu-time", "soon"),
        ("--max-processes", "0"),
    ] {
        let out = run(&["run", flag, value, &guest("hog"), "1"]);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        assert_stderr(&out, &format!("invalid value '{value}' for '{flag}"));
    }
}

#[test]
fn trap_reports_demangle_rust_and_cpp_symbols() {
    // Prepared too: preparation inlines nothing, so every frame is kept.
    for prepare in [&["--no-prepare"][..], &[]] {
        let trap = guest("trap");
        let args: Vec<&str> = ["run"]
            .iter()
            .chain(prepare)
            .chain(&[trap.as_str(), "mangled"])
            .copied()
            .collect();
        let out = run(&args);
        assert_eq!(out.status.code(), Some(134));
        let err = text(&out.stderr);
        assert!(
            err.contains("    in std::process::abort\n    in app::crash(int)\n    in main\n"),
            "{prepare:?}: {err}"
        );
    }
}

#[test]
fn bad_modules_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x01\0\0\0\x99garbage").unwrap();
    let out = run(&["run", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(&out, "not a valid wasm module: section 153");

    let out = run(&["run", dir.path().join("missing.wasm").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(&out, "cannot read");

    let unknown = dir.path().join("unknown.wat");
    std::fs::write(
        &unknown,
        r#"(module (import "atoll" "teleport" (func)) (memory (export "memory") 1) (func (export "_start") call 0))"#,
    )
    .unwrap();
    let out = run(&["run", unknown.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(
        &out,
        "imports `atoll.teleport`, which atoll does not provide",
    );

    let not_command = dir.path().join("lib.wat");
    std::fs::write(&not_command, r#"(module (memory (export "memory") 1))"#).unwrap();
    for extra in [&[][..], &["--no-prepare"][..]] {
        let out = run(&[&["run"], extra, &[not_command.to_str().unwrap()]].concat());
        assert_eq!(out.status.code(), Some(1));
        assert_stderr(&out, "`_start`");
    }
}

#[test]
fn prepare_writes_a_module_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("hello.prepared.wasm");
    let out = run(&["prepare", &guest("hello"), out_path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&["run", out_path.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("hello from"));
}

#[test]
fn ps_and_kill_without_a_node_say_so() {
    let out = run(&["ps"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no node is running"));
    let out = run(&["kill", "0.0:1:0"]);
    assert!(text(&out.stderr).contains("no node is running"));
    let out = run(&["kill", "nonsense"]);
    assert_stderr(&out, "not a PID");
}

/// A node daemon on a private socket, stopped when dropped.
#[test]
fn run_ps_and_kill_talk_to_a_running_node() {
    let node = Daemon::start(2);
    let out = node.atoll(&["run", &guest("hello")]).output().unwrap();
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("of 2 (node 0)"),
        "{}",
        text(&out.stdout)
    );

    let mut spinner = node
        .atoll(&["run", &guest("spin")])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = node.wait_for("spin");
    let out = node.atoll(&["kill", &pid]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(spinner.wait().unwrap().code(), Some(137));
    let out = node.atoll(&["kill", &pid]).output().unwrap();
    assert_stderr(&out, "no such process");
    let json = node.atoll(&["ps", "--json"]).output().unwrap();
    let reports: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(reports.as_array().unwrap().len(), 2);
}

#[test]
fn ps_threads_lists_each_thread_of_a_process() {
    let node = Daemon::start(1);
    let mut job = node
        .atoll(&["run", &guest("threadmix"), "3000", "alone"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = node.wait_for("threadmix");
    // Until the end of its 3 s sleep, the threads waiting on a condition,
    // a mutex and a semaphore are there (the others may have ended).
    let t = Instant::now();
    let ps = loop {
        let ps = text(&node.atoll(&["ps", "--threads"]).output().unwrap().stdout);
        if ps.matches("waiting on a futex").count() == 3 {
            break ps;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{ps}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let after = ps.split(&pid).nth(1).unwrap();
    assert!(after.contains("\n  thread 1      sleeping\n"), "{ps}");
    assert!(after.contains("waiting on a futex"), "{ps}");
    let json = node.atoll(&["ps", "--json"]).output().unwrap();
    let reports: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let threads = &reports[0]["processes"][0]["threads"];
    assert!(threads.as_array().unwrap().len() >= 4, "{reports:#}");
    assert_eq!(threads[0]["tid"], 1);
    node.atoll(&["kill", &pid]).output().unwrap();
    job.wait().unwrap();
}

#[test]
fn top_shows_the_load_tree_and_ps_the_pinned_processes() {
    let node = Daemon::start(2);
    let mut spinners: Vec<_> = (0..2)
        .map(|_| {
            node.atoll(&["run", "--on", "0", "--pin", &guest("spin")])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let pid = node.wait_for("spin");
    // Both runnable on kernel 0, and the root's sum has them.
    let t = Instant::now();
    let rows = loop {
        let out = node.atoll(&["top", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if rows[0]["load"]["runnable"] == 2 {
            break rows;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{rows:#}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["subtree"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kernels 0.0-0.3", "kernel 0.0", "kernel 0.1"]);
    assert_eq!(rows[1]["load"]["runnable"], 2);
    let table = text(&node.atoll(&["top", "--once"]).output().unwrap().stdout);
    assert!(table.contains("\n  kernel 0.1 "), "{table}");
    // Pinned: two runnable on one kernel and one idle, and still nothing moved.
    std::thread::sleep(Duration::from_millis(300));
    let ps = text(&node.atoll(&["ps"]).output().unwrap().stdout);
    let line = ps.lines().find(|l| l.starts_with(&pid)).unwrap();
    assert!(line.ends_with("ready, pinned"), "{ps}");
    assert!(line.contains(" 0.0 "), "{ps}");
    for s in &mut spinners {
        s.kill().unwrap();
        s.wait().unwrap();
    }
}

#[test]
fn a_client_that_hangs_up_ends_its_job() {
    let node = Daemon::start(1);
    let mut client = node.atoll(&["run", &guest("spin")]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    client.kill().unwrap();
    client.wait().unwrap();
    let t = Instant::now();
    loop {
        let ps = node.atoll(&["ps"]).output().unwrap();
        if pid_of(&text(&ps.stdout), "spin").is_none() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "orphaned job still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn domains_are_made_listed_and_ended_on_a_running_node() {
    let node = Daemon::start(2);
    let ok = |args: &[&str]| {
        let out = node.atoll(args).output().unwrap();
        assert!(
            out.status.success(),
            "atoll {args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    };
    ok(&["domain", "create", "lab", "--max-processes", "3"]);
    let err = node.atoll(&["domain", "create", "lab"]).output().unwrap();
    assert_stderr(&err, "domain `lab` already exists");
    let list: serde_json::Value = serde_json::from_str(&ok(&["domain", "list", "--json"])).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "lab"]);
    assert_eq!(list[1]["max_processes"], 3);

    // IPC runs in the new domain; `atoll ipc` counts it.
    let out = node
        .atoll(&[
            "run",
            "--domain",
            "lab",
            &guest("ipc"),
            "pingpong",
            "other",
            "100",
        ])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout), "ok pingpong\n", "{}", text(&out.stderr));
    let ipc = ok(&["ipc"]);
    assert!(ipc.lines().next().unwrap().contains("REMOTE-OUT"), "{ipc}");
    assert_eq!(ipc.lines().count(), 3, "{ipc}");

    let mut sleeper = node
        .atoll(&["run", "--domain", "lab", &guest("ipc"), "sleeper", "same"])
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !ok(&["ps"]).lines().any(|l| l.contains(" lab ")) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the lab job never showed in ps"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = ok(&["domain", "list"]);
    let lab = listed.lines().find(|l| l.contains(" lab ")).unwrap();
    assert_eq!(
        lab.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["lab", "1", "3"],
        "{listed}"
    );
    ok(&["domain", "end", "lab"]);
    assert_eq!(sleeper.wait().unwrap().code(), Some(137));
    let out = node
        .atoll(&["run", "--domain", "lab", &guest("hello")])
        .output()
        .unwrap();
    assert_stderr(&out, "no domain `lab`");
    let out = node.atoll(&["domain", "end", "default"]).output().unwrap();
    assert_stderr(&out, "cannot be ended");
    let out = run(&["domain", "list"]);
    assert_stderr(&out, "no node is running");
}

#[test]
fn pids_and_kernels_from_ps_json_go_back_to_migrate_and_kill() {
    let node = Daemon::start(2);
    let mut job = node
        .atoll(&["run", "--on", "0", &guest("progress"), "400", "20000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    node.wait_for("progress");
    let ps = node.atoll(&["ps", "--json"]).output().unwrap();
    let reports: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
    let kernels: Vec<&str> = reports
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(kernels, ["0.0", "0.1"]);
    let process = reports[0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().starts_with("progress"))
        .unwrap();
    let pid = process["pid"].as_str().unwrap();
    assert_eq!(process["kernel"], "0.0");
    let out = node
        .atoll(&["migrate", pid, "--to", kernels[1], "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (report["pid"].as_str(), report["to"].as_str()),
        (Some(pid), Some("0.1"))
    );
    let out = node.atoll(&["kill", pid]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(job.wait().unwrap().code(), Some(128 + 9));
}

#[test]
fn only_the_nodes_user_may_use_its_socket() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    let node = Daemon::start(1);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&node.socket), 0o600);
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return; // the rest needs another user to connect as
    }
    // Open the way on purpose: the node still checks who connects.
    let dir = node.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&node.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = Command::new("perl")
        .args([
            "-MIO::Socket::UNIX",
            "-e",
            "my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die \"connect: $!\"; \
             local $/; print scalar <$s>;",
        ])
        .arg(&node.socket)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let answer = text(&out.stdout);
    assert!(
        answer.contains("uid 65534 may not use this node: it runs as uid 0"),
        "{answer:?} {}",
        text(&out.stderr)
    );
    assert!(node.atoll(&["ps"]).output().unwrap().status.success());
}

#[test]
fn migrate_checkpoint_and_restore_on_a_running_node() {
    let node = Daemon::start(2);
    let dir = tempfile::tempdir().unwrap();
    let args = ["40", "20000000"];
    let reference = run(&["run", "--embedded", &guest("progress"), args[0], args[1]]);
    let job = node
        .atoll(&["run", "--on", "0", &guest("progress"), args[0], args[1]])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = node.wait_for("progress");
    for (to, mode) in [("1", "copy"), ("0", "handover")] {
        let out = node
            .atoll(&["migrate", &pid, "--to", to, "--mode", mode, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["mode"], mode);
        assert_eq!(report["to"], format!("0.{to}"));
        let (us, ns) = (
            report["downtime_us"].as_u64(),
            report["downtime_ns"].as_u64(),
        );
        assert!(
            matches!((us, ns), (Some(us), Some(ns)) if ns > 0 && ns / 1000 == us),
            "{report}"
        );
    }
    let ps = text(&node.atoll(&["ps"]).output().unwrap().stdout);
    assert!(ps.contains("last migration of"), "{ps}");
    assert!(ps.contains("(handover): downtime"), "{ps}");

    // A relative path is the client's, not the node's.
    let out = node
        .atoll(&["checkpoint", &pid, "-o", "p.img"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = job.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(128 + 19),
        "{}",
        text(&first.stderr)
    );
    assert!(text(&first.stderr).contains("checkpointed"));
    let rest = node
        .atoll(&["restore", "p.img", "--on", "1"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(rest.status.success(), "{}", text(&rest.stderr));
    assert_eq!(
        text(&first.stdout) + &text(&rest.stdout),
        text(&reference.stdout)
    );

    std::fs::write(dir.path().join("bad.img"), b"garbage").unwrap();
    let bad = node
        .atoll(&["restore", "bad.img"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert_stderr(&bad, "not an atoll process image");
}

#[test]
fn ca_init_and_issue_make_a_cluster_identity_and_refuse_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca");
    let ca = ca.to_str().unwrap();
    let out = run(&["ca", "init", ca]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{ca}/ca.pem\n{ca}/ca.key\n"));
    let out = run(&["ca", "issue", ca, "node-1"]);
    assert_eq!(
        text(&out.stdout),
        format!("{ca}/node-1.pem\n{ca}/node-1.key\n")
    );
    for (args, why) in [
        (vec!["ca", "init", ca], "ca.pem already exists"),
        (
            vec!["ca", "issue", ca, "node-1"],
            "node-1.pem already exists",
        ),
        (
            vec!["ca", "issue", ca, "Node_1"],
            "`Node_1` is not a node name",
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
    }
}

#[test]
fn the_dashboard_url_is_printed_and_told_to_the_nodes_users() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("node.sock");
    let log = dir.path().join("node.log");
    let child = atoll(&["node", "--kernels", "1", "--http", "127.0.0.1:0"])
        .env("ATOLL_SOCKET", &socket)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let node = common::NodeProcess::started(child, socket);
    let printed = std::fs::read_to_string(&log).unwrap();
    let url = printed
        .lines()
        .find_map(|l| l.strip_prefix("atoll: dashboard at "))
        .unwrap_or_else(|| panic!("no dashboard line in: {printed}"))
        .to_string();
    let out = node.atoll(&["dashboard"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), url);

    // The URL works: its token opens the API.
    let (addr, token) = url
        .strip_prefix("http://")
        .and_then(|u| u.split_once("/?token="))
        .unwrap();
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    write!(
        http,
        "GET /api/snapshot?token={token} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"kernel\":\"0.0\""), "{answer}");

    // Its port is taken: a second node says so and does not start.
    let other = dir.path().join("other.sock");
    let out = atoll(&["node", "--kernels", "1", "--http", addr])
        .env("ATOLL_SOCKET", &other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(&out, &format!("binding the dashboard to {addr}"));

    // A node started without --http has none to tell.
    let plain = Daemon::start(1);
    let out = plain.atoll(&["dashboard"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_stderr(&out, "serves no dashboard");
}
