//! The names and layouts a prepared module shares with the atoll runtime.
//!
//! These constants are a contract: `atoll prepare` writes them into every
//! module and the runtime (`atoll-process`) looks them up by name. Changing one
//! of them breaks every module prepared before the change, so bump
//! [`PREPARED_VERSION`] if you ever must.
//!
//! # The safepoint protocol
//!
//! Every loop's back edge, and the entry of every function that may
//! recurse, checks the yield flag:
//!
//! ```wat
//! global.get $atoll_flag_at
//! i32.load $atoll.yield_flags   ;; non-zero: stop
//! if
//!   call $atoll.safepoint
//! end
//! ```
//!
//! The flag is not in the instance. A node has one shared page of flags,
//! which every prepared module imports as [`FLAGS_MODULE`]`.`[`FLAGS_MEMORY`]
//! (memory 0; the module's own memory is memory 1), one flag per kernel,
//! and the exported global [`FLAG_AT_GLOBAL`] holds the byte offset of the
//! flag of the kernel the process runs on (the host sets it, 4-aligned,
//! within the page). Any thread may raise a flag while a process runs (the
//! quantum's ticker; a kernel that sends this one a message), and the
//! running process calls the import [`SAFEPOINT_MODULE`]`.`[`SAFEPOINT_NAME`]
//! at its next check, whose host side decides whether to stop (start an
//! Asyncify unwind) or to lower the flag and return. The engine then needs
//! no epoch checks of its own. Every other import is a safepoint too,
//! because Asyncify is applied with its default import list: any system
//! call may block and unwind.
//!
//! # Unwinding and rewinding (binaryen Asyncify)
//!
//! The Asyncify data structure lives in the module's linear memory, in the
//! top [`ASYNCIFY_RESERVED_PAGES`] pages, which preparation hides from the
//! program (its `memory.size` and `memory.grow` see a memory that much
//! smaller). At each stop the runtime uses [`asyncify_data_addr`] of the
//! current memory size as `data` and writes the header:
//!
//! ```text
//! data + 0: i32 current   // next free byte of the buffer: data + 8
//! data + 4: i32 end       // one past the last byte: the end of memory
//! data + 8: ...           // the buffer: saved locals and call indices
//! ```
//!
//! The memory cannot change size between an unwind and its rewind, so the
//! address is the same at both ends, on any machine. A stack too deep for the
//! region makes the unwind trap (out of bounds) rather than corrupt memory.
//!
//! To stop: inside an import, call [`ASYNCIFY_START_UNWIND`]`(data)` and return;
//! the wasm stack unwinds into the buffer and the outermost export returns
//! (its results are meaningless). Then call [`ASYNCIFY_STOP_UNWIND`]. The
//! process state is now entirely in linear memory and in the exported mutable
//! globals ([`GLOBAL_EXPORT_PREFIX`]`<N>`): no host stack is held. Of the
//! reserved pages only `data .. current` (read `current` back from `data`)
//! means anything now; a copy may skip the rest, but must recreate a memory
//! of the same total size. [`FLAG_AT_GLOBAL`] is not among the saved
//! globals: it belongs to the node the instance runs on.
//!
//! To resume, possibly in a fresh instance on another machine: write the
//! memory (grown to the same size) and the globals back, call
//! [`ASYNCIFY_START_REWIND`]`(data)`, then call the *same* export with the *same*
//! arguments. The code rewinds to the import call that unwound, and the
//! rewind ends there: unlike binaryen's own protocol, where the import calls
//! [`ASYNCIFY_STOP_REWIND`], a prepared module sets the state back to
//! [`ASYNCIFY_STATE_NORMAL`] itself right before every call of an import
//! (at such a call the state is normal or rewinding, never unwinding), and
//! an import named other than by a direct call is reached through a thunk
//! that does the same. The import, called normally, returns the result it
//! means to give the program (e.g. a system call's return value); the
//! runtime knows it is the rewound call because it started the rewind.
//!
//! An import that stops the process for another reason than a yield (a
//! blocking system call) does the same; when rewound, it does its work
//! instead of unwinding again.
//!
//! Each of those four functions only sets Asyncify's two globals (and checks
//! that `current <= end`), and preparation exports both:
//! [`ASYNCIFY_STATE_GLOBAL`] and [`ASYNCIFY_DATA_GLOBAL`]. A runtime may set
//! them itself instead: `start_unwind(data)` is `data = data; state =
//! UNWINDING`, `start_rewind(data)` is `data = data; state = REWINDING`, and
//! `stop_unwind` is `state = NORMAL`. atoll's runtime does, because each call
//! into the guest costs an entry into and an exit from wasm. It leaves the
//! state as the unwind left it until the guest is next entered other than
//! by a rewind (which sets it anyway), so a stop and resume writes the state
//! twice.

/// Exported mutable `i32` global, initialised to 0: the byte offset, in
/// [`FLAGS_MEMORY`], of the yield flag the safepoint checks read. The host
/// sets it to its kernel's flag before the process runs there.
pub const FLAG_AT_GLOBAL: &str = "atoll_flag_at";

/// Module name of the flag memory's import ([`SAFEPOINT_MODULE`]'s).
pub const FLAGS_MODULE: &str = SAFEPOINT_MODULE;

/// Field name of the flag memory's import: a shared memory of exactly one
/// page, which the module only reads, with `i32.load`.
pub const FLAGS_MEMORY: &str = "yield_flags";

/// Exported mutable `i32` global, initialised to 0: how many bytes at the
/// start of the reserved region may not be zero. The runtime raises it
/// after each unwind (to the end of what Asyncify wrote) and whenever it
/// writes a saved stack there; a `memory.grow` zeroes only that much of the
/// pages it hands from the region to the program, and lowers it by as much.
/// Zeroing the whole handed-over part (up to a MiB) at every grow made each
/// growth cost a page fault per 4 KiB.
pub const AREA_DIRTY_GLOBAL: &str = "atoll_area_dirty";

/// Module name of the safepoint import.
pub const SAFEPOINT_MODULE: &str = "atoll";

/// Field name of the safepoint import, of type `[] -> []`.
pub const SAFEPOINT_NAME: &str = "safepoint";

/// Every mutable global of the input (imported or defined, including
/// `__stack_pointer`) is exported as `atoll_global_<N>`, where `N` is its
/// index in the *input* module's global index space (imports first). The
/// names stay valid whatever binaryen does to the order of globals.
/// [`FLAG_AT_GLOBAL`] and Asyncify's own globals are not exported this way.
pub const GLOBAL_EXPORT_PREFIX: &str = "atoll_global_";

/// Custom section appended to every prepared module. Its payload is the UTF-8
/// text `"v1 <hex sha256 of the input module>"`.
pub const PREPARED_SECTION: &str = "atoll.prepared";

/// Version tag at the start of the [`PREPARED_SECTION`] payload.
pub const PREPARED_VERSION: &str = "v8";

/// The exported function the runtime starts a process with (WASI command).
pub const START_EXPORT: &str = "_start";

/// The module's function table, exported by preparation when there is one,
/// so that the runtime can start a thread in a function the program names
/// by its pointer (`atoll.thread_spawn(func, arg)`; the guest thread
/// library's is `atoll_thread_entry` in `sdk/thread/entry.s`). Not an
/// export of the function itself: wasm-ld wraps every export of a WASI
/// command in calls to the C constructors and destructors, which would
/// then run again at each thread's start.
pub const TABLE_EXPORT: &str = "atoll_table";

/// The exported linear memory the runtime saves, copies and restores.
pub const MEMORY_EXPORT: &str = "memory";

/// `asyncify_start_unwind(data: i32)`: begin unwinding into `data`.
pub const ASYNCIFY_START_UNWIND: &str = "asyncify_start_unwind";

/// `asyncify_stop_unwind()`: call after the unwound export has returned.
pub const ASYNCIFY_STOP_UNWIND: &str = "asyncify_stop_unwind";

/// `asyncify_start_rewind(data: i32)`: call before re-entering the export.
pub const ASYNCIFY_START_REWIND: &str = "asyncify_start_rewind";

/// `asyncify_stop_rewind()`: binaryen's end of a rewind, which a prepared
/// module makes itself before each import call (see the module docs).
pub const ASYNCIFY_STOP_REWIND: &str = "asyncify_stop_rewind";

/// `asyncify_get_state() -> i32`: one of the `ASYNCIFY_STATE_*` values.
pub const ASYNCIFY_GET_STATE: &str = "asyncify_get_state";

/// Exported mutable `i32` global: Asyncify's state, one of the
/// `ASYNCIFY_STATE_*` values (what [`ASYNCIFY_GET_STATE`] returns).
pub const ASYNCIFY_STATE_GLOBAL: &str = "atoll_asyncify_state";

/// Exported mutable `i32` global: the address of Asyncify's data header
/// while it unwinds or rewinds.
pub const ASYNCIFY_DATA_GLOBAL: &str = "atoll_asyncify_data";

/// [`ASYNCIFY_GET_STATE`] value: running normally.
pub const ASYNCIFY_STATE_NORMAL: i32 = 0;

/// [`ASYNCIFY_GET_STATE`] value: unwinding towards the export.
pub const ASYNCIFY_STATE_UNWINDING: i32 = 1;

/// [`ASYNCIFY_GET_STATE`] value: rewinding towards the import that unwound.
pub const ASYNCIFY_STATE_REWINDING: i32 = 2;

/// Size of the Asyncify data header (`current`, `end`) before the buffer.
pub const ASYNCIFY_DATA_HEADER: u32 = 8;

/// Pages at the top of linear memory reserved for the Asyncify data. The
/// declared memory is this much larger than the input's; the program never
/// sees these pages.
pub const ASYNCIFY_RESERVED_PAGES: u32 = 16;

/// Size of a wasm page.
pub const WASM_PAGE_SIZE: u32 = 65536;

/// Where the Asyncify data structure goes in a memory of `memory_bytes`
/// bytes (the real size, as the host sees it): the start of the reserved
/// pages. Its `end` is `memory_bytes`. `None` if the memory is too small or
/// too large to be a prepared wasm32 memory.
pub fn asyncify_data_addr(memory_bytes: u64) -> Option<u32> {
    let reserved = u64::from(ASYNCIFY_RESERVED_PAGES * WASM_PAGE_SIZE);
    u32::try_from(memory_bytes.checked_sub(reserved)?).ok()
}

/// The export name for the mutable global at `index` in the input module.
pub fn global_export_name(index: u32) -> String {
    format!("{GLOBAL_EXPORT_PREFIX}{index}")
}
