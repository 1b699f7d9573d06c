//! WASI file calls end to end: guests run in a [`Container`] with one
//! preopened temporary directory (`/data`), their output captured by a test
//! console, and the results checked on the host.
//!
//! - `tests/guests/files.c`, the real C program (wasi-libc's stdio, POSIX
//!   calls, the sandbox), prepared and moved to a fresh container through an
//!   encoded image at every stop, or made dormant at every stop (and before
//!   it first runs) and woken by its next slice;
//! - small WAT guests for what C hides: open files that survive a move (the
//!   host handle is gone and must be reopened with the same mode, offset and
//!   no truncation), stdio, `EFAULT` without side effects, the sandbox's
//!   errors, and the binary layout of dirents and filestats.
//!
//! A WAT guest checks each step itself and exits with the step's number when
//! it fails, 0 when all pass.

#[path = "../../../tests/support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atoll_abi::{KernelId, Pid};
use atoll_process::{
    Console, ConsoleId, Container, FdTable, HeldFiles, Host, KernelCall, Preopen, ProcessImage,
    Program, Reply, Runtime, RuntimeConfig, Slice, Stream, UArea,
};

const CONSOLE: ConsoleId = ConsoleId(7);

/// What a guest wrote, by stream.
#[derive(Default)]
struct Capture {
    stdout: Mutex<Vec<u8>>,
    stderr: Mutex<Vec<u8>>,
}

impl Console for Capture {
    fn write(&self, console: ConsoleId, stream: Stream, bytes: &[u8]) {
        assert_eq!(console, CONSOLE, "output went to another console");
        match stream {
            Stream::Stdout => self.stdout.lock().unwrap().extend_from_slice(bytes),
            Stream::Stderr => self.stderr.lock().unwrap().extend_from_slice(bytes),
        }
    }
    // Served by `run` below, from the container's kernel calls.
    fn read(&self, _: ConsoleId, _: Pid, _: u32) {}
    fn drain(&self, _: ConsoleId, _: Pid, _: u64) {}
}

/// How a run ended.
struct Outcome {
    status: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Times the process was captured and restored in a fresh container.
    moves: u32,
    /// File ops it sent to the owner of its files.
    remote_ops: u32,
    /// Files the owner still held open for it when it ended.
    held_at_exit: usize,
}

fn runtime() -> Arc<Runtime> {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(support::cache_dir()),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// Kernel `kernel` of node `node`.
fn host(node: u16, kernel: u16, console: &Arc<Capture>) -> Host {
    Host {
        kernel: KernelId::new(node, kernel),
        kernel_count: 2,
        console: console.clone(),
        wake: Arc::new(|| false),
        instances: Default::default(),
    }
}

/// A temporary directory with `data/`, preopened as `/data`.
fn sandbox() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    (tmp, data)
}

/// What happens to the process at each of its stops.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Between {
    /// It stays in its container.
    Stay,
    /// It is captured, its image encoded and decoded, and restored in a new
    /// container on the other kernel: no host file handle survives, only
    /// the UArea.
    Move,
    /// It goes dormant (out of its instance, as an image) and is woken by
    /// its next slice; also before its very first slice.
    Sleep,
    /// It runs on node 1, away from its files (node 0 preopened them), and
    /// moves as in `Move`: every file op is a kernel call, served here as
    /// the owner's kernel serves it.
    Away,
}

/// Runs `program` to its end with `data` preopened as `/data`.
fn run(
    runtime: &Arc<Runtime>,
    program: Arc<Program>,
    args: &[&str],
    data: &Path,
    between: Between,
) -> Outcome {
    let console = Arc::new(Capture::default());
    let preopens = [Preopen {
        host: data.to_path_buf(),
        guest: "/data".into(),
    }];
    let pid = Pid::new(KernelId::new(0, 0), 1, 0);
    let uarea = UArea::new(
        pid,
        None,
        program.hash(),
        args.iter().map(|a| a.to_string()).collect(),
        vec![],
        CONSOLE,
        FdTable::new(&preopens, KernelId::new(0, 0)),
        None,
    );
    let node = u16::from(between == Between::Away);
    let mut kernel = 0;
    let mut container =
        Container::new(runtime, program, uarea, host(node, kernel, &console)).unwrap();
    let mut moves = 0;
    let mut remote_ops = 0;
    // What the owner's kernel holds open for the process (`Away`).
    let mut held = HeldFiles::default();
    let sleep = |container: &mut Container| {
        container.hibernate().unwrap();
        assert!(container.is_dormant() && container.dormant_bytes().is_some());
    };
    if between == Between::Sleep {
        sleep(&mut container);
    }
    let status = loop {
        assert!(moves < 100_000, "the guest does not end");
        let slice = container.run(Duration::ZERO, None);
        for (_, open) in container.take_closed_files() {
            held.close(pid, open);
        }
        match slice {
            Slice::Exited(status) => break status,
            Slice::Trapped(why) => panic!("guest trapped: {why}"),
            Slice::Call(KernelCall::Yield(_)) => {
                container.reply(Reply::Done);
                match between {
                    Between::Stay => {}
                    Between::Move | Between::Away => {
                        let bytes = container.capture().unwrap().encode();
                        kernel = 1 - kernel;
                        let image = ProcessImage::decode(&bytes).unwrap();
                        let host = host(node, kernel, &console);
                        container = Container::restore(runtime, image, host).unwrap();
                    }
                    Between::Sleep => sleep(&mut container),
                }
                moves += u32::from(between != Between::Stay);
            }
            Slice::Call(KernelCall::File { owner, op }) => {
                assert_eq!((between, owner), (Between::Away, KernelId::new(0, 0)));
                remote_ops += 1;
                container.reply(Reply::File(op.serve(&mut held, pid, node)));
            }
            // Everything written is captured at once; stdin is empty.
            Slice::Call(KernelCall::Drain { .. }) => {
                container.uarea_mut().console_flow.passed(u64::MAX);
                container.reply(Reply::Drained)
            }
            Slice::Call(KernelCall::Input { .. }) => container.reply(Reply::Input(vec![])),
            Slice::Call(other) => panic!("unexpected kernel call {other:?}"),
            other => panic!("a guest without threads stopped with {other:?}"),
        }
    };
    let stdout = std::mem::take(&mut *console.stdout.lock().unwrap());
    let stderr = std::mem::take(&mut *console.stderr.lock().unwrap());
    Outcome {
        status,
        stdout,
        stderr,
        moves,
        remote_ops,
        held_at_exit: held.len(),
    }
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

/// What `unlinked /data` prints when every step passes.
const UNLINKED: &str = "\
unlinked: tmp is gone, wrote 5 bytes
unlinked: tmp reads \"hello\"
unlinked: old reads \"old\" after new took its name
unlinked: ok
";

#[test]
fn a_file_unlinked_or_renamed_over_while_open_stays_usable() {
    let runtime = runtime();
    let program = runtime
        .load_file(&support::guest("unlinked"), true)
        .unwrap();
    // Kept in its instance, and dormant at every stop: the host handles
    // from the opens stay with the process either way. Away from its
    // files, the owner holds them for it from the opens on.
    for between in [Between::Stay, Between::Sleep, Between::Away] {
        let (_tmp, data) = sandbox();
        let out = run(
            &runtime,
            program.clone(),
            &["unlinked", "/data"],
            &data,
            between,
        );
        assert_eq!(
            (out.status, text(&out.stdout)),
            (0, UNLINKED),
            "{between:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0, "{between:?}");
        assert_eq!(out.held_at_exit, 0, "{between:?}");
    }
    // Restored from an image at every stop (as from a checkpoint), the
    // handle is gone and the file has no name to be reopened by: the
    // guest is told, and nothing else breaks.
    let (_tmp, data) = sandbox();
    let out = run(
        &runtime,
        program,
        &["unlinked", "/data"],
        &data,
        Between::Move,
    );
    assert_eq!(out.status, 1);
    assert!(
        text(&out.stdout).contains("No such file or directory"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn files_c_runs_in_its_sandbox_while_moving() {
    files_c_runs_in_its_sandbox(Between::Move);
}

#[test]
fn files_c_runs_in_its_sandbox_dormant_between_slices() {
    files_c_runs_in_its_sandbox(Between::Sleep);
}

#[test]
fn files_c_runs_in_its_sandbox_on_another_node_than_its_files() {
    files_c_runs_in_its_sandbox(Between::Away);
}

fn files_c_runs_in_its_sandbox(between: Between) {
    let runtime = runtime();
    let program = runtime.load_file(&support::guest("files"), true).unwrap();
    let (tmp, data) = sandbox();
    let out = run(&runtime, program, &["files", "/data"], &data, between);
    let expected = "\
files: base=/data/files-test
mkdir files-test: ok
create a.txt: wrote 6 bytes
append a.txt: wrote 6 bytes
read a.txt: \"hello\\nworld\\n\"
seek a.txt: ftell=6 rest=\"world\\n\" end=12
stat a.txt: size=12
create b.bin: wrote 3 bytes
lseek b.bin: pos=2 byte=3
create b.bin again with O_EXCL: EEXIST
mkdir sub: ok
readdir: a.txt b.bin sub
rename a.txt -> sub/moved.txt: ok
stat a.txt: ENOENT
stat sub/moved.txt: size=12
rmdir sub while not empty: ENOTEMPTY
unlink sub/moved.txt: ok
unlink b.bin: ok
rmdir sub: ok
escape /data/../escape.txt: ENOTCAPABLE
escape /etc/passwd: ENOTCAPABLE
escape through symlink: ENOTCAPABLE
rmdir files-test: ok
files: ok
";
    assert_eq!(text(&out.stdout), expected, "stderr: {}", text(&out.stderr));
    assert_eq!(out.status, 0);
    assert_eq!(text(&out.stderr), "");
    // The quantum is zero: it was stopped and moved at every safepoint.
    assert!(out.moves > 0, "the guest was never moved");
    // Away, every file call but those answered from the UArea went to the
    // files' owner.
    assert_eq!(
        out.remote_ops > 20,
        between == Between::Away,
        "{}",
        out.remote_ops
    );
    // Every file it opened it closed, and the owner let go of each.
    assert_eq!(out.held_at_exit, 0);
    // It cleaned up after itself, and nothing escaped next to the sandbox.
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}

/// Imports and helpers shared by the WAT guests. Memory: results at 0..64
/// (a new fd at 0, a count at 8, 8-byte values at 16), one iovec at 64,
/// strings from 1024, buffers from 4096.
const PRELUDE: &str = r#"
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_seek" (func $fd_seek (param i32 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_tell" (func $fd_tell (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_readdir" (func $fd_readdir (param i32 i32 i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name" (func $fd_prestat_dir_name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_filestat_get" (func $fd_filestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_filestat_get" (func $path_filestat_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sched_yield" (func $sched_yield (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 2)

  ;; Ends the process with status $step unless $got is $want.
  (func $expect (param $step i32) (param $got i32) (param $want i32)
    (if (i32.ne (local.get $got) (local.get $want)) (then (call $proc_exit (local.get $step)))))

  ;; fd_write / fd_read of one buffer: the errno; the count at 8.
  (func $write (param $fd i32) (param $buf i32) (param $len i32) (result i32)
    (i32.store (i32.const 64) (local.get $buf))
    (i32.store (i32.const 68) (local.get $len))
    (call $fd_write (local.get $fd) (i32.const 64) (i32.const 1) (i32.const 8)))
  (func $read (param $fd i32) (param $buf i32) (param $len i32) (result i32)
    (i32.store (i32.const 8) (i32.const 999))
    (i32.store (i32.const 64) (local.get $buf))
    (i32.store (i32.const 68) (local.get $len))
    (call $fd_read (local.get $fd) (i32.const 64) (i32.const 1) (i32.const 8)))

  ;; path_open beneath the preopen (fd 3), following links: the errno; the fd at 0.
  (func $open (param $path i32) (param $len i32) (param $oflags i32) (param $rights i64) (param $fdflags i32) (result i32)
    (call $path_open (i32.const 3) (i32.const 1) (local.get $path) (local.get $len)
      (local.get $oflags) (local.get $rights) (i64.const 0) (local.get $fdflags) (i32.const 0)))
"#;

// oflags CREAT 1, DIRECTORY 2, EXCL 4, TRUNC 8; rights FD_READ 2, FD_WRITE 64;
// errnos BADF 8, FAULT 21, INVAL 28, NAMETOOLONG 37, NOTDIR 54, SPIPE 70,
// NOTCAPABLE 76, NOTSUP 58.

fn wat(body: &str) -> String {
    format!("(module {PRELUDE} {body})")
}

/// Runs a WAT guest; it must exit 0 (it exits with the failing step).
fn run_wat(body: &str, prepare: bool, data: &Path) -> Outcome {
    let runtime = runtime();
    let program = runtime.load(wat(body).as_bytes(), prepare).unwrap();
    let between = if prepare {
        Between::Move
    } else {
        Between::Stay
    };
    let out = run(&runtime, program, &["guest"], data, between);
    assert_eq!(out.status, 0, "the guest failed at step {}", out.status);
    out
}

/// Every `sched_yield` below moves the process: the next call finds no host
/// handle and reopens the file from the UArea.
#[test]
fn open_files_survive_a_move() {
    let (_tmp, data) = sandbox();
    std::fs::write(data.join("trunc.txt"), b"0123456789").unwrap();
    let out = run_wat(
        r#"
  (data (i32.const 1024) "log.txt")
  (data (i32.const 1040) "abcdefxyz12")
  (data (i32.const 1056) "new.txt")
  (data (i32.const 1072) "trunc.txt")
  (func (export "_start") (local $rw i32) (local $ro i32) (local $app i32) (local $excl i32) (local $trunc i32)
    ;; Read-write, created: "abc", move, "def", move, read back from 0.
    (call $expect (i32.const 1) (call $open (i32.const 1024) (i32.const 7) (i32.const 9) (i64.const 66) (i32.const 0)) (i32.const 0))
    (local.set $rw (i32.load (i32.const 0)))
    (call $expect (i32.const 2) (call $write (local.get $rw) (i32.const 1040) (i32.const 3)) (i32.const 0))
    (drop (call $sched_yield))
    (call $expect (i32.const 3) (call $write (local.get $rw) (i32.const 1043) (i32.const 3)) (i32.const 0))
    (call $expect (i32.const 4) (i32.load (i32.const 8)) (i32.const 3))
    (drop (call $sched_yield))
    (call $expect (i32.const 5) (call $fd_seek (local.get $rw) (i64.const 0) (i32.const 0) (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 6) (call $read (local.get $rw) (i32.const 4096) (i32.const 100)) (i32.const 0))
    (call $expect (i32.const 7) (i32.load (i32.const 8)) (i32.const 6))
    (call $expect (i32.const 8) (i32.load (i32.const 4096)) (i32.load (i32.const 1040)))
    (call $expect (i32.const 9) (i32.load16_u (i32.const 4100)) (i32.load16_u (i32.const 1044)))

    ;; Read-only: the offset carries over a move, writing stays refused.
    (call $expect (i32.const 10) (call $open (i32.const 1024) (i32.const 7) (i32.const 0) (i64.const 2) (i32.const 0)) (i32.const 0))
    (local.set $ro (i32.load (i32.const 0)))
    (call $expect (i32.const 11) (call $write (local.get $ro) (i32.const 1040) (i32.const 3)) (i32.const 8))
    (call $expect (i32.const 12) (call $read (local.get $ro) (i32.const 4200) (i32.const 2)) (i32.const 0))
    (drop (call $sched_yield))
    (call $expect (i32.const 13) (call $write (local.get $ro) (i32.const 1040) (i32.const 3)) (i32.const 8))
    (call $expect (i32.const 14) (call $read (local.get $ro) (i32.const 4202) (i32.const 100)) (i32.const 0))
    (call $expect (i32.const 15) (i32.load (i32.const 8)) (i32.const 4))
    (call $expect (i32.const 16) (i32.load (i32.const 4200)) (i32.load (i32.const 1040)))

    ;; Write-only, append: lands at the end after a move; reading refused.
    (call $expect (i32.const 20) (call $open (i32.const 1024) (i32.const 7) (i32.const 0) (i64.const 64) (i32.const 1)) (i32.const 0))
    (local.set $app (i32.load (i32.const 0)))
    (drop (call $sched_yield))
    (call $expect (i32.const 21) (call $write (local.get $app) (i32.const 1046) (i32.const 3)) (i32.const 0))
    (call $expect (i32.const 22) (call $fd_tell (local.get $app) (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 23) (i32.wrap_i64 (i64.load (i32.const 16))) (i32.const 9))
    (drop (call $sched_yield))
    (call $expect (i32.const 24) (call $read (local.get $app) (i32.const 4096) (i32.const 1)) (i32.const 8))

    ;; O_CREAT|O_EXCL and O_TRUNC happen once, not again when reopened.
    (call $expect (i32.const 30) (call $open (i32.const 1056) (i32.const 7) (i32.const 5) (i64.const 64) (i32.const 0)) (i32.const 0))
    (local.set $excl (i32.load (i32.const 0)))
    (call $expect (i32.const 31) (call $write (local.get $excl) (i32.const 1049) (i32.const 1)) (i32.const 0))
    (drop (call $sched_yield))
    (call $expect (i32.const 32) (call $write (local.get $excl) (i32.const 1050) (i32.const 1)) (i32.const 0))
    (call $expect (i32.const 33) (call $open (i32.const 1072) (i32.const 9) (i32.const 8) (i64.const 64) (i32.const 0)) (i32.const 0))
    (local.set $trunc (i32.load (i32.const 0)))
    (call $expect (i32.const 34) (call $write (local.get $trunc) (i32.const 1040) (i32.const 2)) (i32.const 0))
    (drop (call $sched_yield))
    (call $expect (i32.const 35) (call $write (local.get $trunc) (i32.const 1042) (i32.const 2)) (i32.const 0))

    ;; Close drops the descriptor for good.
    (call $expect (i32.const 40) (call $fd_close (local.get $rw)) (i32.const 0))
    (call $expect (i32.const 41) (call $fd_close (local.get $ro)) (i32.const 0))
    (call $expect (i32.const 42) (call $fd_close (local.get $app)) (i32.const 0))
    (call $expect (i32.const 43) (call $fd_close (local.get $excl)) (i32.const 0))
    (call $expect (i32.const 44) (call $fd_close (local.get $trunc)) (i32.const 0))
    (call $expect (i32.const 45) (call $fd_close (local.get $rw)) (i32.const 8))
    (call $expect (i32.const 46) (call $write (local.get $rw) (i32.const 1040) (i32.const 1)) (i32.const 8)))
"#,
        true,
        &data,
    );
    // Each of the seven sched_yield calls moves it; timer ticks may add more.
    assert!(out.moves >= 7, "only {} moves", out.moves);
    assert_eq!(std::fs::read(data.join("log.txt")).unwrap(), b"abcdefxyz");
    assert_eq!(std::fs::read(data.join("new.txt")).unwrap(), b"12");
    assert_eq!(std::fs::read(data.join("trunc.txt")).unwrap(), b"abcd");
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn stdio_bad_arguments_and_the_sandbox() {
    let (tmp, data) = sandbox();
    let out = run_wat(
        r#"
  (data (i32.const 1024) "out\n")
  (data (i32.const 1032) "err\n")
  (data (i32.const 1040) "../x")
  (data (i32.const 1048) "/etc/passwd")
  (data (i32.const 1064) "ghost.txt")
  (data (i32.const 1080) "/data")
  (func (export "_start")
    ;; stdout and stderr reach the console; stdin cannot be waited for by
    ;; a module run unprepared (ENOTSUP), and nothing is read.
    (call $expect (i32.const 1) (call $write (i32.const 1) (i32.const 1024) (i32.const 4)) (i32.const 0))
    (call $expect (i32.const 2) (i32.load (i32.const 8)) (i32.const 4))
    (call $expect (i32.const 3) (call $write (i32.const 2) (i32.const 1032) (i32.const 4)) (i32.const 0))
    (call $expect (i32.const 4) (call $read (i32.const 0) (i32.const 4096) (i32.const 16)) (i32.const 58))
    (call $expect (i32.const 5) (i32.load (i32.const 8)) (i32.const 999))
    (call $expect (i32.const 6) (call $write (i32.const 0) (i32.const 1024) (i32.const 4)) (i32.const 8))
    (call $expect (i32.const 7) (call $read (i32.const 1) (i32.const 4096) (i32.const 4)) (i32.const 8))
    (call $expect (i32.const 8) (call $write (i32.const 9) (i32.const 1024) (i32.const 4)) (i32.const 8))

    ;; Bad pointers: EFAULT, and nothing happens.
    (call $expect (i32.const 10) (call $fd_write (i32.const 1) (i32.const 0xFFFFFFF0) (i32.const 1) (i32.const 8)) (i32.const 21))
    (i32.store (i32.const 64) (i32.const 1024))
    (i32.store (i32.const 68) (i32.const 4))
    (call $expect (i32.const 11) (call $fd_write (i32.const 1) (i32.const 64) (i32.const 1) (i32.const 0xFFFFFFFE)) (i32.const 21))
    (i32.store (i32.const 68) (i32.const 0x7FFFFFFF))
    (call $expect (i32.const 12) (call $fd_write (i32.const 1) (i32.const 64) (i32.const 1) (i32.const 8)) (i32.const 21))
    (call $expect (i32.const 13) (call $path_open (i32.const 3) (i32.const 1) (i32.const 1064) (i32.const 9)
      (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 0xFFFFFFFF)) (i32.const 21))
    (call $expect (i32.const 14) (call $path_open (i32.const 3) (i32.const 1) (i32.const 0xFFFFFF00) (i32.const 9)
      (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 0)) (i32.const 21))
    (call $expect (i32.const 15) (call $fd_write (i32.const 1) (i32.const 64) (i32.const 100000) (i32.const 8)) (i32.const 28))

    ;; Descriptors: unknown EBADF, not a directory ENOTDIR, stdio cannot seek.
    (call $expect (i32.const 20) (call $path_open (i32.const 99) (i32.const 1) (i32.const 1064) (i32.const 9)
      (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 0)) (i32.const 8))
    (call $expect (i32.const 21) (call $path_open (i32.const 1) (i32.const 1) (i32.const 1064) (i32.const 9)
      (i32.const 1) (i64.const 64) (i64.const 0) (i32.const 0) (i32.const 0)) (i32.const 54))
    (call $expect (i32.const 22) (call $fd_seek (i32.const 1) (i64.const 0) (i32.const 0) (i32.const 16)) (i32.const 70))
    (call $expect (i32.const 23) (call $fd_tell (i32.const 0) (i32.const 16)) (i32.const 70))

    ;; The sandbox: `..` above the root and absolute paths.
    (call $expect (i32.const 30) (call $open (i32.const 1040) (i32.const 4) (i32.const 1) (i64.const 64) (i32.const 0)) (i32.const 76))
    (call $expect (i32.const 31) (call $open (i32.const 1048) (i32.const 11) (i32.const 0) (i64.const 2) (i32.const 0)) (i32.const 76))

    ;; Preopens: fd 3 is "/data", there is no fd 4, stdio is not one.
    (call $expect (i32.const 40) (call $fd_prestat_get (i32.const 3) (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 41) (i32.load8_u (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 42) (i32.load (i32.const 20)) (i32.const 5))
    (call $expect (i32.const 43) (call $fd_prestat_get (i32.const 4) (i32.const 16)) (i32.const 8))
    (call $expect (i32.const 44) (call $fd_prestat_get (i32.const 0) (i32.const 16)) (i32.const 8))
    (call $expect (i32.const 45) (call $fd_prestat_dir_name (i32.const 3) (i32.const 4096) (i32.const 5)) (i32.const 0))
    (call $expect (i32.const 46) (i32.load (i32.const 4096)) (i32.load (i32.const 1080)))
    (call $expect (i32.const 47) (i32.load8_u (i32.const 4100)) (i32.load8_u (i32.const 1084)))
    (call $expect (i32.const 48) (call $fd_prestat_dir_name (i32.const 3) (i32.const 4096) (i32.const 2)) (i32.const 37))

    ;; fdstat: stdio is a character device without seek/tell (a tty), fd 3 a directory.
    (call $expect (i32.const 50) (call $fd_fdstat_get (i32.const 1) (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 51) (i32.load8_u (i32.const 16)) (i32.const 2))
    (call $expect (i32.const 52) (i32.wrap_i64 (i64.and (i64.load (i32.const 24)) (i64.const 36))) (i32.const 0))
    (call $expect (i32.const 53) (call $fd_fdstat_get (i32.const 3) (i32.const 16)) (i32.const 0))
    (call $expect (i32.const 54) (i32.load8_u (i32.const 16)) (i32.const 3)))
"#,
        false,
        &data,
    );
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    assert!(
        !data.join("ghost.txt").exists(),
        "a failed path_open created its file"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        1,
        "something was created outside"
    );
}

/// One dirent as the guest received it.
#[derive(Debug, PartialEq)]
struct Dirent {
    next: u64,
    ino: u64,
    kind: u8,
    name: String,
}

fn dirents(mut bytes: &[u8]) -> Vec<Dirent> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
        let name = String::from_utf8(bytes[24..24 + len].to_vec()).unwrap();
        out.push(Dirent {
            next: u64_at(0),
            ino: u64_at(8),
            kind: bytes[20],
            name,
        });
        bytes = &bytes[24 + len..];
    }
    out
}

/// The guest dumps what `fd_readdir` gives to stdout (whole listings) and
/// stderr (a listing cut to 30 bytes), and checks filestats itself.
#[test]
fn readdir_and_filestat_layouts() {
    use std::os::unix::fs::MetadataExt;
    let (_tmp, data) = sandbox();
    for name in ["b", "a", "c"] {
        std::fs::write(data.join(name), b"hello").unwrap();
    }
    std::fs::create_dir_all(data.join("d/inner")).unwrap();
    let out = run_wat(
        r#"
  (data (i32.const 1024) "d")
  (data (i32.const 1028) "a")
  (func $dump (param $fd i32) (param $to i32) (param $len i32) (param $cookie i64) (param $step i32)
    (call $expect (local.get $step)
      (call $fd_readdir (local.get $fd) (i32.const 8192) (local.get $len) (local.get $cookie) (i32.const 8)) (i32.const 0))
    (call $expect (i32.add (local.get $step) (i32.const 1))
      (call $write (local.get $to) (i32.const 8192) (i32.load (i32.const 8))) (i32.const 0)))
  (func (export "_start") (local $d i32)
    (call $dump (i32.const 3) (i32.const 1) (i32.const 4096) (i64.const 0) (i32.const 1))
    (call $dump (i32.const 3) (i32.const 2) (i32.const 30) (i64.const 0) (i32.const 3))
    (call $dump (i32.const 3) (i32.const 2) (i32.const 4096) (i64.const 3) (i32.const 5))
    (call $expect (i32.const 7) (call $fd_readdir (i32.const 3) (i32.const 8192) (i32.const 4096) (i64.const 6) (i32.const 8)) (i32.const 0))
    (call $expect (i32.const 8) (i32.load (i32.const 8)) (i32.const 0))

    ;; A directory opened beneath the preopen lists its own entries.
    (call $expect (i32.const 10) (call $open (i32.const 1024) (i32.const 1) (i32.const 2) (i64.const 0) (i32.const 0)) (i32.const 0))
    (local.set $d (i32.load (i32.const 0)))
    (call $dump (local.get $d) (i32.const 1) (i32.const 4096) (i64.const 0) (i32.const 11))
    (call $expect (i32.const 13) (call $fd_readdir (local.get $d) (i32.const 8192) (i32.const 64) (i64.const 0) (i32.const 0xFFFFFFFF)) (i32.const 21))
    (call $expect (i32.const 14) (call $fd_readdir (i32.const 1) (i32.const 8192) (i32.const 64) (i64.const 0) (i32.const 8)) (i32.const 54))

    ;; filestat: a is a 5-byte regular file, d a directory.
    (call $expect (i32.const 20) (call $path_filestat_get (i32.const 3) (i32.const 1) (i32.const 1028) (i32.const 1) (i32.const 512)) (i32.const 0))
    (call $expect (i32.const 21) (i32.load8_u (i32.const 528)) (i32.const 4))
    (call $expect (i32.const 22) (i32.wrap_i64 (i64.load (i32.const 544))) (i32.const 5))
    (call $expect (i32.const 23) (call $fd_filestat_get (local.get $d) (i32.const 512)) (i32.const 0))
    (call $expect (i32.const 24) (i32.load8_u (i32.const 528)) (i32.const 3))
    (call $expect (i32.const 25) (call $fd_filestat_get (i32.const 1) (i32.const 512)) (i32.const 0))
    (call $expect (i32.const 26) (i32.load8_u (i32.const 528)) (i32.const 2)))
"#,
        false,
        &data,
    );
    let names = |d: &[Dirent]| d.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
    let listed = dirents(&out.stdout);
    assert_eq!(
        names(&listed),
        [".", "..", "a", "b", "c", "d", ".", "..", "inner"]
    );
    assert_eq!(
        listed.iter().map(|e| e.next).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 1, 2, 3]
    );
    assert_eq!(
        listed.iter().map(|e| e.kind).collect::<Vec<_>>(),
        [3, 3, 4, 4, 4, 3, 3, 3, 3]
    );
    assert_eq!(
        listed[2].ino,
        std::fs::metadata(data.join("a")).unwrap().ino()
    );
    assert_eq!(listed[0].ino, std::fs::metadata(&data).unwrap().ino());
    // 30 bytes: "." whole (25 bytes), then the first 5 bytes of "..".
    let cut = &out.stderr[..30];
    assert_eq!(
        dirents(&cut[..25]),
        [Dirent {
            next: 1,
            ino: listed[0].ino,
            kind: 3,
            name: ".".into()
        }]
    );
    assert_eq!(&cut[25..30], &2u64.to_le_bytes()[..5]);
    assert_eq!(names(&dirents(&out.stderr[30..])), ["b", "c", "d"]);
}
