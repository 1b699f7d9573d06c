//! A process's memory lent to another kernel of its node, for one copy.
//!
//! A `vcopy` from a process into a process on another kernel used to be
//! two copies: the source's kernel read the block into the portal and the
//! destination's kernel wrote it out. Across cores that is more than twice
//! a `memcpy` (docs/architecture.md, "Copies"). With a [`Loan`] the
//! destination's kernel reads the block where it lies: one copy.
//!
//! The kernel lends only what nothing can write while the loan is out:
//! bytes of the copy's requester, which is stopped in the copy until it is
//! answered (and answered only once they have been read), which has no
//! other thread that could run, and none of whose grants lets another
//! process write them. What the kernel cannot hold still is the instance:
//! the process may be killed, moved or made dormant meanwhile, and an
//! instance given back to the pool has its memory decommitted or reused.
//! So an [`Instance`] given up while it is lent is kept by its loans, and
//! the last loan returned drops it. A loan never leaves the node: a packet
//! that does carries the bytes instead ([`Loan::bytes`]).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use wasmtime::Store;

use crate::ctx::ProcCtx;

/// What a store's loans share with it: how many are out, and the store
/// itself once its process has given it up.
#[derive(Default)]
pub(crate) struct Lender(Arc<Mutex<Loans>>);

#[derive(Default)]
struct Loans {
    out: usize,
    kept: Option<Store<ProcCtx>>,
}

impl Lender {
    /// Whether some of the memory is lent now.
    pub(crate) fn lent(&self) -> bool {
        self.0.lock().expect("loans").out > 0
    }

    /// Lends `bytes` (of this store's memory) until the loan is dropped.
    ///
    /// # Safety
    /// Nothing may write `bytes` until then (see the module's rules); the
    /// instance itself is kept alive by the loan.
    pub(crate) unsafe fn lend(&self, bytes: &[u8]) -> Loan {
        self.0.lock().expect("loans").out += 1;
        Loan {
            at: NonNull::from(bytes).cast(),
            len: bytes.len(),
            loans: self.0.clone(),
        }
    }
}

/// Bytes of a process's memory, read in place by another kernel of its
/// node. Dropping it returns it.
pub struct Loan {
    at: NonNull<u8>,
    len: usize,
    loans: Arc<Mutex<Loans>>,
}

// SAFETY: a loan is read by one kernel at a time (the one its packet is
// at), and what it points to outlives it and is not written meanwhile
// (`Lender::lend`).
unsafe impl Send for Loan {}

impl Loan {
    /// The bytes lent.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the instance whose memory this is lives at least as long
        // as the loan (`Instance`), its memory does not move (it is never
        // grown while its process is stopped), and nothing writes these
        // bytes until the loan is dropped (`Lender::lend`).
        unsafe { std::slice::from_raw_parts(self.at.as_ptr(), self.len) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let kept = {
            let mut loans = self.loans.lock().expect("loans");
            loans.out -= 1;
            if loans.out == 0 {
                loans.kept.take()
            } else {
                None
            }
        };
        // Dropped out of the lock: the store holds the lender too.
        drop(kept);
    }
}

impl fmt::Debug for Loan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Loan({} bytes)", self.len)
    }
}

/// A live process's store. Given up while some of its memory is lent, it
/// goes to its loans instead of away.
pub(crate) struct Instance(ManuallyDrop<Store<ProcCtx>>);

impl Instance {
    pub(crate) fn new(store: Store<ProcCtx>) -> Self {
        Instance(ManuallyDrop::new(store))
    }
}

impl Deref for Instance {
    type Target = Store<ProcCtx>;

    fn deref(&self) -> &Store<ProcCtx> {
        &self.0
    }
}

impl DerefMut for Instance {
    fn deref_mut(&mut self) -> &mut Store<ProcCtx> {
        &mut self.0
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: this is the instance's drop: the store is not used again.
        let store = unsafe { ManuallyDrop::take(&mut self.0) };
        let shared = store.data().lender.0.clone();
        let mut loans = shared.lock().expect("loans");
        if loans.out > 0 {
            loans.kept = Some(store);
            return;
        }
        drop(loans);
        drop(store);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use atoll_abi::{KernelId, Pid};
    use atoll_prepare::ContentHash;
    use wasmtime::{Engine, Memory, Module, Store, StoreLimitsBuilder};

    use super::*;
    use crate::ctx::{Console, Host, ProcCtx};
    use crate::{ConsoleId, FdTable, Stream, UArea};

    struct Quiet;

    impl Console for Quiet {
        fn write(&self, _: ConsoleId, _: Stream, _: &[u8]) {}
        fn read(&self, _: ConsoleId, _: Pid, _: u32) {}
        fn drain(&self, _: ConsoleId, _: Pid, _: u64) {}
    }

    /// An instance whose memory begins with "lent bytes", and the console
    /// its context holds: while its store lives, the console has two owners.
    fn instance() -> (Instance, Memory, Arc<dyn Console>) {
        let engine = Engine::default();
        let module = Module::new(
            &engine,
            r#"(module (memory (export "memory") 1) (data (i32.const 0) "lent bytes"))"#,
        )
        .unwrap();
        let console: Arc<dyn Console> = Arc::new(Quiet);
        let pid = Pid::new(KernelId::new(0, 0), 1, 1);
        let uarea = UArea::new(
            pid,
            None,
            ContentHash([0; 32]),
            Vec::new(),
            Vec::new(),
            ConsoleId(0),
            FdTable::default(),
            None,
        );
        let host = Host {
            kernel: pid.home,
            kernel_count: 1,
            console: console.clone(),
            wake: Arc::new(|| false),
            instances: Default::default(),
        };
        let ctx = ProcCtx::new(uarea, host, StoreLimitsBuilder::new().build());
        let mut store = Store::new(&engine, ctx);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        (Instance::new(store), memory, console)
    }

    /// Lends `len` bytes at `at` of the instance's memory.
    fn lend(instance: &Instance, memory: Memory, at: usize, len: usize) -> Loan {
        let bytes = &memory.data(&**instance)[at..at + len];
        // SAFETY: nothing writes the memory in these tests.
        unsafe { instance.data().lender.lend(bytes) }
    }

    #[test]
    fn an_instance_given_up_while_lent_lives_until_its_last_loan_returns() {
        let (instance, memory, console) = instance();
        let first = lend(&instance, memory, 0, 4);
        let second = lend(&instance, memory, 5, 5);
        drop(instance);
        assert_eq!(Arc::strong_count(&console), 2, "kept by its loans");
        assert_eq!(first.bytes(), b"lent");
        drop(first);
        assert_eq!(Arc::strong_count(&console), 2, "kept by the second loan");
        assert_eq!(second.bytes(), b"bytes");
        drop(second);
        assert_eq!(Arc::strong_count(&console), 1, "dropped with the last loan");
    }

    #[test]
    fn an_instance_whose_loans_returned_goes_at_once() {
        let (instance, memory, console) = instance();
        let loan = lend(&instance, memory, 0, 10);
        assert_eq!(loan.bytes(), b"lent bytes");
        drop(loan);
        drop(instance);
        assert_eq!(Arc::strong_count(&console), 1);
    }

    #[test]
    fn a_loan_can_be_returned_on_another_thread() {
        let (instance, memory, console) = instance();
        let loan = lend(&instance, memory, 0, 4);
        drop(instance);
        let read = std::thread::spawn(move || loan.bytes().to_vec())
            .join()
            .unwrap();
        assert_eq!(read, b"lent");
        assert_eq!(Arc::strong_count(&console), 1);
    }
}
