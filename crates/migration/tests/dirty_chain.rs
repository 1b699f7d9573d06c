//! The dirty tracker's signal handler hands every fault that is not its own
//! to the handler installed before it: a `SA_SIGINFO` handler, a plain one,
//! or the default action (the process dies of the fault as it would have).
//!
//! This file is its own test process: the handlers installed here must be
//! there before the first `DirtyTracker::start`, which installs ours.

use std::io;
use std::process::Command;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use atoll_migration::{DirtyTracker, BLOCK};

static SEGV_SEEN: AtomicUsize = AtomicUsize::new(0);
static BUS_SEEN: AtomicUsize = AtomicUsize::new(0);
static MEMFD: AtomicI32 = AtomicI32::new(-1);
const FILE_LEN: usize = 4 * BLOCK;

/// A `SA_SIGINFO` handler that makes the faulting page writable.
extern "C" fn fix_segv(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for a SIGSEGV carries the address.
    let addr = unsafe { (*info).si_addr() } as usize;
    SEGV_SEEN.fetch_add(1, Ordering::SeqCst);
    // SAFETY: only this test's read-only page faults here.
    unsafe {
        libc::mprotect(
            (addr & !(BLOCK - 1)) as *mut libc::c_void,
            BLOCK,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
}

/// A plain handler that gives the truncated file its length back.
extern "C" fn fix_bus(_: libc::c_int) {
    BUS_SEEN.fetch_add(1, Ordering::SeqCst);
    // SAFETY: ftruncate is async-signal-safe; the fd is this test's memfd.
    unsafe { libc::ftruncate(MEMFD.load(Ordering::SeqCst), FILE_LEN as libc::off_t) };
}

fn install(signal: libc::c_int, handler: usize, flags: libc::c_int) {
    // SAFETY: a fully initialised sigaction for a handler of the right kind.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = flags;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(libc::sigaction(signal, &action, ptr::null_mut()), 0);
    }
}

fn map(len: usize, prot: libc::c_int, flags: libc::c_int, fd: libc::c_int) -> &'static mut [u8] {
    // SAFETY: a fresh mapping, never unmapped (the test process is short).
    unsafe {
        let p = libc::mmap(ptr::null_mut(), len, prot, flags, fd, 0);
        assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
        std::slice::from_raw_parts_mut(p.cast(), len)
    }
}

fn write(memory: &mut [u8], offset: usize, value: u8) {
    // SAFETY: in bounds of the slice (indexing checks it).
    unsafe { ptr::write_volatile(&mut memory[offset], value) };
}

#[test]
fn faults_not_ours_reach_the_previous_handlers() {
    install(
        libc::SIGSEGV,
        fix_segv as *const () as usize,
        libc::SA_SIGINFO | libc::SA_NODEFER,
    );
    install(
        libc::SIGBUS,
        fix_bus as *const () as usize,
        libc::SA_NODEFER,
    );

    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let tracked = map(8 * BLOCK, libc::PROT_READ | libc::PROT_WRITE, anon, -1);
    let mut tracker = DirtyTracker::start(tracked).unwrap();

    // A write to a read-only page nobody tracks: the SA_SIGINFO handler
    // installed before ours gets it, fixes it, and the write happens.
    let other = map(BLOCK, libc::PROT_READ, anon, -1);
    write(other, 10, 42);
    assert_eq!(SEGV_SEEN.load(Ordering::SeqCst), 1);
    assert_eq!(other[10], 42);

    // A write to a tracked block is ours alone.
    write(tracked, 2 * BLOCK, 1);
    assert_eq!(SEGV_SEEN.load(Ordering::SeqCst), 1);
    assert_eq!(tracker.take(tracked).unwrap(), vec![2]);

    // A tracked file mapping whose file was truncated: the write first
    // takes our protection fault (recorded), is retried, and then raises
    // SIGBUS, which is not ours and reaches the plain handler before ours,
    // which restores the file; the retried write then succeeds.
    // SAFETY: plain system calls on a fresh memfd.
    let fd = unsafe { libc::memfd_create(c"atoll-dirty-test".as_ptr(), 0) };
    assert!(fd >= 0, "{}", io::Error::last_os_error());
    MEMFD.store(fd, Ordering::SeqCst);
    // SAFETY: our memfd.
    assert_eq!(unsafe { libc::ftruncate(fd, FILE_LEN as libc::off_t) }, 0);
    let file = map(
        FILE_LEN,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        fd,
    );
    let mut file_tracker = DirtyTracker::start(file).unwrap();
    // SAFETY: our memfd.
    assert_eq!(unsafe { libc::ftruncate(fd, 0) }, 0);
    write(file, BLOCK + 1, 9);
    assert_eq!(BUS_SEEN.load(Ordering::SeqCst), 1);
    assert_eq!(SEGV_SEEN.load(Ordering::SeqCst), 1);
    assert_eq!(file[BLOCK + 1], 9);
    assert_eq!(file_tracker.take(file).unwrap(), vec![1]);
    assert_eq!(tracker.take(tracked).unwrap(), Vec::<u32>::new());
}

const CHILD: &str = "ATOLL_DIRTY_TEST_CHILD";

/// Run in a child process by `default_action_still_kills`; does nothing
/// in the ordinary test run.
#[test]
fn child_writes_to_read_only_memory() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setting this process's core size limit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    // The action before ours is the default one (not the Rust runtime's
    // stack-overflow handler, which would itself fall back to it).
    install(libc::SIGSEGV, libc::SIG_DFL, 0);
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let tracked = map(4 * BLOCK, libc::PROT_READ | libc::PROT_WRITE, anon, -1);
    let _tracker = DirtyTracker::start(tracked).unwrap();
    write(tracked, 0, 1);
    let other = map(BLOCK, libc::PROT_READ, anon, -1);
    write(other, 0, 1);
    unreachable!("the write to read-only memory did not kill the process");
}

#[test]
fn default_action_still_kills() {
    use std::os::unix::process::ExitStatusExt;
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_writes_to_read_only_memory",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
}
