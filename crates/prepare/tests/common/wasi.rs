//! The few WASI preview1 calls a small C program makes (args, stdout,
//! exit), enough to run it in wasmtime without a WASI implementation. Used by
//! the C program test and by the `overhead` example.

#![allow(dead_code)] // shared by several test binaries and an example, each using a subset

use wasmtime::{Caller, Extern, Linker, Memory};

/// `wasi_snapshot_preview1`.
const WASI: &str = "wasi_snapshot_preview1";
const ESUCCESS: i32 = 0;
const EBADF: i32 = 8;
const ESPIPE: i32 = 70;

/// Per-instance host state.
#[derive(Default)]
pub struct Wasi {
    /// argv, including argv[0].
    pub args: Vec<String>,
    /// Everything written to fds 1 and 2.
    pub output: Vec<u8>,
}

/// The trap `proc_exit` raises to end the run.
#[derive(Debug)]
pub struct Exit(pub i32);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit({})", self.0)
    }
}

impl std::error::Error for Exit {}

fn memory(caller: &mut Caller<'_, Wasi>) -> Memory {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => m,
        _ => panic!("no exported memory"),
    }
}

fn write_u32(caller: &mut Caller<'_, Wasi>, addr: i32, value: u32) -> wasmtime::Result<()> {
    memory(caller).write(caller, addr as u32 as usize, &value.to_le_bytes())?;
    Ok(())
}

fn read_u32(caller: &mut Caller<'_, Wasi>, addr: u32) -> wasmtime::Result<u32> {
    let mut bytes = [0; 4];
    memory(caller).read(caller, addr as usize, &mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

/// Adds the stubs to `linker`.
pub fn add_to_linker(linker: &mut Linker<Wasi>) -> wasmtime::Result<()> {
    linker.func_wrap(
        WASI,
        "args_sizes_get",
        |mut c: Caller<'_, Wasi>, argc: i32, size: i32| {
            let n = c.data().args.len() as u32;
            let bytes = c.data().args.iter().map(|a| a.len() as u32 + 1).sum();
            write_u32(&mut c, argc, n)?;
            write_u32(&mut c, size, bytes)?;
            Ok(ESUCCESS)
        },
    )?;
    linker.func_wrap(
        WASI,
        "args_get",
        |mut c: Caller<'_, Wasi>, argv: i32, buf: i32| {
            let args = c.data().args.clone();
            let mut at = buf as u32;
            for (i, arg) in args.iter().enumerate() {
                write_u32(&mut c, argv + 4 * i as i32, at)?;
                let mut bytes = arg.clone().into_bytes();
                bytes.push(0);
                memory(&mut c).write(&mut c, at as usize, &bytes)?;
                at += bytes.len() as u32;
            }
            Ok(ESUCCESS)
        },
    )?;
    linker.func_wrap(
        WASI,
        "fd_write",
        |mut c: Caller<'_, Wasi>, fd: i32, iovs: i32, n: i32, out: i32| {
            if fd != 1 && fd != 2 {
                return Ok(EBADF);
            }
            let mut total = 0;
            for i in 0..n as u32 {
                let base = read_u32(&mut c, iovs as u32 + 8 * i)?;
                let len = read_u32(&mut c, iovs as u32 + 8 * i + 4)?;
                let mut bytes = vec![0; len as usize];
                memory(&mut c).read(&c, base as usize, &mut bytes)?;
                c.data_mut().output.extend_from_slice(&bytes);
                total += len;
            }
            write_u32(&mut c, out, total)?;
            Ok(ESUCCESS)
        },
    )?;
    linker.func_wrap(
        WASI,
        "fd_fdstat_get",
        |mut c: Caller<'_, Wasi>, fd: i32, stat: i32| {
            if !(0..=2).contains(&fd) {
                return Ok(EBADF);
            }
            // filetype 2 (character device), no flags, all rights.
            let mut fdstat = [0u8; 24];
            fdstat[0] = 2;
            fdstat[8..].fill(0xff);
            memory(&mut c).write(&mut c, stat as u32 as usize, &fdstat)?;
            Ok(ESUCCESS)
        },
    )?;
    linker.func_wrap(
        WASI,
        "fd_seek",
        |_: Caller<'_, Wasi>, _: i32, _: i64, _: i32, _: i32| Ok(ESPIPE),
    )?;
    linker.func_wrap(WASI, "fd_close", |_: Caller<'_, Wasi>, _: i32| Ok(ESUCCESS))?;
    linker.func_wrap(
        WASI,
        "proc_exit",
        |_: Caller<'_, Wasi>, code: i32| -> wasmtime::Result<()> { Err(Exit(code).into()) },
    )?;
    Ok(())
}

/// The exit code of a `_start` call: 0 if it returned, the `proc_exit` code
/// if it exited, the error otherwise.
pub fn exit_code(result: wasmtime::Result<()>) -> wasmtime::Result<i32> {
    match result {
        Ok(()) => Ok(0),
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(Exit(code)) => Ok(*code),
            None => Err(e),
        },
    }
}
