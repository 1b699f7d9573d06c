//! The node's yield flags: one per kernel, in the shared page every
//! prepared module imports (`atoll.yield_flags`, see
//! [`atoll_prepare::conventions`]).
//!
//! A running process reads its kernel's flag at every safepoint check, and
//! calls the kernel when it is raised. Any thread may raise it: the ticker
//! when a quantum may be over, a kernel that has just sent this one a
//! message ([`crate::Runtime::interrupt`]). That is what wasmtime's epoch
//! checks did, at the cost of a second check, with a call on its slow path,
//! in every loop: a loop's floating-point sum was then kept on the stack
//! across it, and an interpreter ran a fifth slower.

use std::sync::atomic::{AtomicU32, Ordering};

use wasmtime::{Engine, MemoryType, SharedMemory};

/// Bytes between two kernels' flags: a cache line each, so that raising
/// one kernel's flag does not take the line another kernel reads.
const STRIDE: usize = 64;

/// Flags in the page. Kernel `i` uses flag `i % SLOTS`: kernels beyond
/// that share one, and a raise meant for one makes the other check its
/// quantum too, which only costs a call.
pub(crate) const SLOTS: usize = (64 << 10) / STRIDE;

/// The flag page of one node, shared by its runtime's instances.
#[derive(Clone)]
pub(crate) struct YieldFlags {
    memory: SharedMemory,
}

impl YieldFlags {
    pub(crate) fn new(engine: &Engine) -> anyhow::Result<Self> {
        let memory = SharedMemory::new(engine, MemoryType::shared(1, 1))?;
        Ok(YieldFlags { memory })
    }

    /// What modules import.
    pub(crate) fn memory(&self) -> &SharedMemory {
        &self.memory
    }

    /// Where kernel `index`'s flag is: the value of a process's
    /// `atoll_flag_at` while it runs there.
    pub(crate) fn offset(index: u16) -> u32 {
        ((index as usize % SLOTS) * STRIDE) as u32
    }

    fn flag(&self, index: u16) -> &AtomicU32 {
        let cell = &self.memory.data()[Self::offset(index) as usize];
        // SAFETY: the page lives as long as `self.memory`, the offset is
        // 4-aligned and within it, and the guest only reads the flag
        // (preparation checks that); every host access is atomic.
        unsafe { AtomicU32::from_ptr(cell.get().cast()) }
    }

    /// Makes the process running on kernel `index` call the kernel at its
    /// next safepoint check.
    pub(crate) fn raise(&self, index: u16) {
        self.flag(index).store(1, Ordering::Relaxed);
    }

    pub(crate) fn lower(&self, index: u16) {
        self.flag(index).store(0, Ordering::Relaxed);
    }

    #[cfg(test)]
    fn is_raised(&self, index: u16) -> bool {
        self.flag(index).load(Ordering::Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_have_a_line_each_and_wrap_past_the_page() {
        let mut config = wasmtime::Config::new();
        config.shared_memory(true);
        let flags = YieldFlags::new(&Engine::new(&config).unwrap()).unwrap();
        assert_eq!(YieldFlags::offset(0), 0);
        assert_eq!(YieldFlags::offset(3), 192);
        assert_eq!(YieldFlags::offset(SLOTS as u16), 0);
        flags.raise(3);
        assert!(flags.is_raised(3) && !flags.is_raised(2) && !flags.is_raised(4));
        flags.lower(3);
        assert!(!flags.is_raised(3));
    }
}
