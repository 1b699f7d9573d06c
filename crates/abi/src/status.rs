//! Wait status: how a process ended, as one `i32` that a parent receives.
//!
//! It follows the shell's convention so that `atoll run`'s exit code means
//! what a user expects: the exit code itself, `128 + signal` when the process
//! was killed, and [`TRAPPED`] when the guest trapped.

/// Status of a process that trapped (as a native program that aborted).
pub const TRAPPED: i32 = 134;

/// Signal number of the default `kill`, as in Unix.
pub const SIGKILL: i32 = 9;

/// Signal number a checkpointed process is reported stopped with (its job
/// ends with 128+SIGSTOP, as when CRIU dumps a process).
pub const SIGSTOP: i32 = 19;

/// Signal number a process is ended with when it used up its CPU time limit
/// (`atoll run --cpu-time`), as Unix's RLIMIT_CPU.
pub const SIGXCPU: i32 = 24;

/// Status of a process ended by `signal`.
pub fn killed(signal: i32) -> i32 {
    128 + signal
}
