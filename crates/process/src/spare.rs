//! Instances of ended processes, kept by their kernel for the next fork of
//! the same program.
//!
//! A fork copies its parent's memory into an instance. One from the pool
//! was zeroed when its last process ended (wasmtime's reset writes zeros
//! over every page that process wrote), then is instantiated, then takes
//! the copy: for a parent holding 1 MiB, the reset and the instantiation
//! were 45 % of a fork on one kernel (`perf`, `placebench fork`), the copy
//! 30 %. The instance of an ended process of the same program needs
//! neither: the fork writes the parent's blocks over its memory and zeroes
//! only those of its other blocks that have a page. The rest of an
//! instance is its globals, which the fork sets, its context, which it
//! replaces, and its tables, which only a program that never writes them
//! leaves as they were ([`Program::tables_fixed`](crate::Program)).

use std::collections::VecDeque;

use atoll_prepare::ContentHash;

use crate::Container;

/// Spare instances a kernel keeps at most: a parent that forks one child
/// at a time reuses one, and each is a pool slot no process can have.
const MOST: usize = 2;

/// Largest memory kept: what the pool keeps resident in an ended
/// process's slot anyway (`runtime::KEEP_RESIDENT`).
pub(crate) const MOST_BYTES: usize = crate::runtime::KEEP_RESIDENT;

/// A kernel's spare instances, the most recently ended last.
#[derive(Default)]
pub struct Spares {
    kept: VecDeque<Container>,
}

impl Spares {
    /// Keeps the container of a process that ended here if it can serve a
    /// fork ([`Container::retire`]), and gives it back if it cannot, for
    /// the caller to drop, its files closed. To make room, the oldest
    /// spare goes back to the pool.
    pub fn keep(&mut self, mut container: Container) -> Option<Container> {
        if !container.retire() {
            return Some(container);
        }
        if self.kept.len() == MOST {
            self.kept.pop_front();
        }
        self.kept.push_back(container);
        None
    }

    /// A spare instance of `program` whose memory has at most `pages`
    /// pages (a memory never shrinks), the most recent first.
    pub(crate) fn take(&mut self, program: &ContentHash, pages: u64) -> Option<Container> {
        let at = self
            .kept
            .iter()
            .rposition(|c| c.program().hash() == *program && c.memory_pages() <= pages)?;
        self.kept.remove(at)
    }

    /// Gives every spare back to the pool.
    pub fn clear(&mut self) {
        self.kept.clear();
    }
}
