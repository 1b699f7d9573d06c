//! A job's standard streams as a user meets them: a pipe into `atoll run`,
//! an interactive program on a terminal, a program that polls its input
//! with a timeout, and a reader that goes away.

mod common;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{atoll, guest, pid_of, text, Daemon};

/// `atoll ARGS`, embedded or through `node`.
fn atoll_on(node: Option<&Daemon>, args: &[&str]) -> Command {
    match node {
        Some(node) => node.atoll(args),
        None => {
            let mut all = vec!["run", "--embedded"];
            all.extend_from_slice(&args[1..]);
            atoll(&all)
        }
    }
}

#[test]
fn a_pipe_into_atoll_run_is_the_programs_stdin() {
    let input: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let node = Daemon::start(2);
    for node in [None, Some(&node)] {
        let mut cat = atoll_on(node, &["run", &guest("cat"), "1000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = cat.stdin.take().unwrap();
        let feed = input.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&feed).unwrap());
        let out = cat.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(out.stdout == input, "stdout differs from stdin");
        let said = format!("cat: {} bytes", input.len());
        assert!(text(&out.stderr).contains(&said), "{}", text(&out.stderr));
    }
}

/// A pseudo-terminal: the test holds the master, the program the slave.
fn pty() -> (File, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    let (name, termios, size) = (std::ptr::null_mut(), std::ptr::null(), std::ptr::null());
    // SAFETY: the pointers are to two ints, or null where openpty allows it.
    let rc = unsafe { libc::openpty(&mut master, &mut slave, name, termios, size) };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty opened both descriptors, owned by nothing else.
    unsafe { (File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Reads the terminal until `needle` shows.
fn expect(master: &mut File, seen: &mut String, needle: &str) {
    let t = Instant::now();
    let mut buf = [0u8; 256];
    while !seen.contains(needle) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never saw {needle:?} in {seen:?}"
        );
        let n = master.read(&mut buf).expect("the terminal reads");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[test]
fn an_interactive_program_answers_on_a_terminal() {
    let node = Daemon::start(1);
    for node in [None, Some(&node)] {
        let (mut master, slave) = pty();
        let mut repl = atoll_on(node, &["run", &guest("repl")])
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .unwrap();
        let mut seen = String::new();
        expect(&mut master, &mut seen, "> ");
        // Typed a line at a time, each answered before the next is typed.
        master.write_all(b"1 2 3\n").unwrap();
        expect(&mut master, &mut seen, "6\r\n> ");
        master.write_all(b"40 2\n").unwrap();
        expect(&mut master, &mut seen, "42\r\n> ");
        master.write_all(b"quit\n").unwrap();
        expect(&mut master, &mut seen, "bye");
        assert!(repl.wait().unwrap().success(), "{seen}");
    }
}

/// Reads `out` a line at a time until one is `line`; returns those before.
fn until_line(out: &mut impl BufRead, line: &str) -> Vec<String> {
    let mut before = Vec::new();
    loop {
        let mut l = String::new();
        let n = out.read_line(&mut l).expect("the job's stdout reads");
        assert!(n > 0, "the job ended before {line:?}, after {before:?}");
        if l.trim_end() == line {
            return before;
        }
        before.push(l.trim_end().to_owned());
    }
}

#[test]
fn a_program_polls_its_stdin_with_a_timeout_and_moves_while_it_polls() {
    let node = Daemon::start(2);
    for (node, moves) in [(None, ["", ""]), (Some(&node), ["0.1", "0.0"])] {
        let mut pollin = atoll_on(node, &["run", "--on", "0.0", &guest("pollin"), "30"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A poll that never returns would leave the reads below waiting:
        // the job is killed after a minute, and they fail.
        let id = pollin.id() as libc::pid_t;
        let done = Arc::new(AtomicBool::new(false));
        let watchdog = std::thread::spawn({
            let done = done.clone();
            move || {
                std::thread::park_timeout(Duration::from_secs(60));
                if !done.load(Ordering::SeqCst) {
                    // SAFETY: a signal to the child this test started,
                    // which has not been waited for.
                    unsafe { libc::kill(id, libc::SIGKILL) };
                }
            }
        });
        let mut stdin = pollin.stdin.take().unwrap();
        let mut out = BufReader::new(pollin.stdout.take().unwrap());
        // Nothing typed: the poll times out, again and again.
        until_line(&mut out, "timeout");
        until_line(&mut out, "timeout");
        for (to, line) in moves.iter().zip(["hello", "two words"]) {
            if let Some(node) = node {
                // Moved while it polls, with its read ahead asked: the
                // answer finds it on the other kernel.
                let pid = pid_of(
                    &text(&node.atoll(&["ps"]).output().unwrap().stdout),
                    "pollin",
                )
                .expect("pollin is listed");
                let moved = node.atoll(&["migrate", &pid, "--to", to]).output().unwrap();
                assert!(moved.status.success(), "{}", text(&moved.stderr));
                until_line(&mut out, "timeout");
            }
            stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
            let before = until_line(&mut out, &format!("got: {line}"));
            assert!(before.iter().all(|l| l == "timeout"), "{before:?}");
        }
        stdin.write_all(b"quit\n").unwrap();
        until_line(&mut out, "bye");
        done.store(true, Ordering::SeqCst);
        watchdog.thread().unpark();
        watchdog.join().unwrap();
        let status = pollin.wait().unwrap();
        let mut err = String::new();
        pollin
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(status.success(), "{err}");
    }
}

#[test]
fn a_reader_that_goes_away_ends_the_job_as_sigpipe_would() {
    let node = Daemon::start(1);
    for node in [None, Some(&node)] {
        let mut flood = atoll_on(node, &["run", &guest("flood"), "100000000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut first = [0u8; 7];
        flood.stdout.take().unwrap().read_exact(&mut first).unwrap();
        assert_eq!(&first, b"line 1\n");
        // The pipe's reader is gone now: atoll ends with 128 + SIGPIPE.
        assert_eq!(flood.wait().unwrap().code(), Some(141));
    }
    // And the node ended the job when its client hung up.
    let t = Instant::now();
    while pid_of(
        &text(&node.atoll(&["ps"]).output().unwrap().stdout),
        "flood",
    )
    .is_some()
    {
        assert!(t.elapsed() < Duration::from_secs(60), "the job still runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_long_operation_shows_a_spinner_on_a_terminal_and_nothing_on_a_pipe() {
    // Preparing HPL takes seconds: long enough for the spinner to show.
    let hpl = guest("hpl");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("hpl.wasm");
    let out = out.to_str().unwrap();
    let (mut master, slave) = pty();
    let mut prepare = atoll(&["prepare", &hpl, out])
        .stdout(Stdio::null())
        .stderr(slave)
        .spawn()
        .unwrap();
    let mut seen = String::new();
    expect(&mut master, &mut seen, "atoll: prepared");
    assert!(prepare.wait().unwrap().success(), "{seen}");
    assert!(seen.contains(&format!("preparing {hpl} (")), "{seen:?}");
    // On a pipe: the result, and nothing drawn.
    let piped = atoll(&["prepare", &hpl, out]).output().unwrap();
    assert!(piped.status.success());
    assert!(
        text(&piped.stderr).starts_with("atoll: prepared"),
        "{}",
        text(&piped.stderr)
    );
}
