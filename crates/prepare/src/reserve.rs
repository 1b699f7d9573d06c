//! Reserving the top of linear memory for the Asyncify buffer.
//!
//! Asyncify saves the stack into linear memory, so the runtime needs a region
//! there that the program never uses — and a C program owns all of its
//! memory: wasi-libc's malloc, for one, takes everything between
//! `__heap_base` and `memory.size` at its first call, so even pages the host
//! grows before `_start` end up in the heap (a first version of this crate
//! did that, and a preempted mergesort came back unsorted).
//!
//! So the program is made to see a memory [`RESERVED_PAGES`] smaller than
//! the real one: the declared size grows by that much, `memory.size` answers
//! `real - RESERVED`, and `memory.grow` returns `old real - RESERVED`. The
//! reserved pages are always the top ones; the pages a grow hands to the
//! program start where the reserved region was, so the helper zeroes them
//! where the runtime may have left a saved stack: the first
//! `atoll_area_dirty` bytes of the region, no more. The region's content only
//! matters between an unwind and the end of the matching rewind, while the
//! program does not run, so it need not move when the memory grows.
//!
//! Because the region ends at the end of memory, an unwind that needs more
//! room traps (out of bounds) instead of overwriting the program.

use walrus::ir::{BinaryOp, Call, Instr, InstrLocId, VisitorMut};
use walrus::{FunctionBuilder, FunctionId, GlobalId, LocalFunction, MemoryId, Module, ValType};

use crate::conventions::{ASYNCIFY_RESERVED_PAGES as RESERVED_PAGES, WASM_PAGE_SIZE};
use crate::PrepareError;

/// The most pages a wasm32 memory can have.
const MAX_PAGES: u64 = 1 << 16;

/// Hides the top [`RESERVED_PAGES`] of `memory` from the functions `funcs`.
pub(crate) fn reserve_top_pages(
    module: &mut Module,
    memory: MemoryId,
    dirty: GlobalId,
    funcs: &[FunctionId],
) -> Result<(), PrepareError> {
    let reserved = u64::from(RESERVED_PAGES);
    let mem = module.memories.get_mut(memory);
    if mem.initial + reserved > MAX_PAGES {
        return Err(PrepareError::NotACommand(format!(
            "its memory starts at {} pages, no room left for atoll's {reserved}",
            mem.initial
        )));
    }
    mem.initial += reserved;
    mem.maximum = mem.maximum.map(|max| (max + reserved).min(MAX_PAGES));

    let mut helpers = Helpers {
        memory,
        size: size_helper(module, memory),
        grow: grow_helper(module, memory, dirty),
    };
    for &id in funcs {
        let func = module.funcs.get_mut(id).kind.unwrap_local_mut();
        walk(func, &mut helpers);
    }
    Ok(())
}

/// Rewrites every `memory.size` and `memory.grow` of `func`.
fn walk(func: &mut LocalFunction, helpers: &mut Helpers) {
    let entry = func.entry_block();
    walrus::ir::dfs_pre_order_mut(helpers, func, entry);
}

/// Replaces `memory.size` / `memory.grow` of the reserved memory with calls.
struct Helpers {
    memory: MemoryId,
    size: FunctionId,
    grow: FunctionId,
}

impl VisitorMut for Helpers {
    fn visit_instr_mut(&mut self, instr: &mut Instr, _: &mut InstrLocId) {
        match instr {
            Instr::MemorySize(s) if s.memory == self.memory => {
                *instr = Instr::Call(Call { func: self.size });
            }
            Instr::MemoryGrow(g) if g.memory == self.memory => {
                *instr = Instr::Call(Call { func: self.grow });
            }
            _ => {}
        }
    }
}

/// `() -> i32`: `memory.size - RESERVED`.
fn size_helper(module: &mut Module, memory: MemoryId) -> FunctionId {
    let mut f = FunctionBuilder::new(&mut module.types, &[], &[ValType::I32]);
    f.name("atoll_memory_size".into());
    f.func_body()
        .memory_size(memory)
        .i32_const(RESERVED_PAGES as i32)
        .binop(BinaryOp::I32Sub);
    f.finish(vec![], &mut module.funcs)
}

/// `(n: i32) -> i32`: grows by `n` pages; returns the program's old size, or
/// -1 on failure; zeroes what the runtime may have written in the pages
/// handed over that were reserved before.
fn grow_helper(module: &mut Module, memory: MemoryId, dirty: GlobalId) -> FunctionId {
    let reserved = RESERVED_PAGES as i32;
    let n = module.locals.add(ValType::I32);
    let old = module.locals.add(ValType::I32);
    let len = module.locals.add(ValType::I32);
    let mut f = FunctionBuilder::new(&mut module.types, &[ValType::I32], &[ValType::I32]);
    f.name("atoll_memory_grow".into());
    let mut body = f.func_body();
    // old = memory.grow(n); if old == -1 { return -1 }
    body.local_get(n)
        .memory_grow(memory)
        .local_tee(old)
        .i32_const(-1)
        .binop(BinaryOp::I32Eq);
    body.if_else(
        None,
        |then| {
            then.i32_const(-1).return_();
        },
        |_| {},
    );
    // old -= RESERVED: the program's old size, where its new pages begin.
    body.local_get(old)
        .i32_const(reserved)
        .binop(BinaryOp::I32Sub)
        .local_set(old);
    // len = min_u(min_u(n, RESERVED) * PAGE, dirty)
    body.local_get(n)
        .i32_const(reserved)
        .local_get(n)
        .i32_const(reserved)
        .binop(BinaryOp::I32LtU)
        .select(None)
        .i32_const(WASM_PAGE_SIZE as i32)
        .binop(BinaryOp::I32Mul)
        .local_tee(len)
        .global_get(dirty)
        .local_get(len)
        .global_get(dirty)
        .binop(BinaryOp::I32LtU)
        .select(None)
        .local_set(len);
    // memory.fill(old * PAGE, 0, len); dirty -= len
    body.local_get(old)
        .i32_const(WASM_PAGE_SIZE as i32)
        .binop(BinaryOp::I32Mul)
        .i32_const(0)
        .local_get(len)
        .memory_fill(memory);
    body.global_get(dirty)
        .local_get(len)
        .binop(BinaryOp::I32Sub)
        .global_set(dirty);
    body.local_get(old);
    f.finish(vec![n], &mut module.funcs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty_global(module: &mut Module) -> GlobalId {
        module.globals.add_local(
            ValType::I32,
            true,
            false,
            walrus::ConstExpr::Value(walrus::ir::Value::I32(0)),
        )
    }

    fn reserved(wat: &str) -> Module {
        let mut module = Module::from_buffer(&wat::parse_str(wat).unwrap()).unwrap();
        let memory = module.memories.iter().next().unwrap().id();
        let funcs: Vec<_> = module.funcs.iter_local().map(|(id, _)| id).collect();
        let dirty = dirty_global(&mut module);
        reserve_top_pages(&mut module, memory, dirty, &funcs).unwrap();
        module
    }

    #[test]
    fn declared_sizes_grow_by_the_reservation() {
        let module = reserved("(module (memory 3 10))");
        let memory = module.memories.iter().next().unwrap();
        let pages = u64::from(RESERVED_PAGES);
        assert_eq!(
            (memory.initial, memory.maximum),
            (3 + pages, Some(10 + pages))
        );
        let module = reserved("(module (memory 3 65536))");
        assert_eq!(
            module.memories.iter().next().unwrap().maximum,
            Some(MAX_PAGES)
        );
    }

    #[test]
    fn no_memory_instruction_is_left() {
        let module = reserved(
            "(module (memory 1) (func (result i32) (drop (memory.grow (memory.size))) (memory.size)))",
        );
        let mut left = 0;
        for (id, func) in module.funcs.iter_local() {
            if module
                .funcs
                .get(id)
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("atoll_memory_"))
            {
                continue;
            }
            for (instr, _) in &func.block(func.entry_block()).instrs {
                left += usize::from(matches!(instr, Instr::MemorySize(_) | Instr::MemoryGrow(_)));
            }
        }
        assert_eq!(left, 0);
    }

    /// A grow zeroes what the runtime said it wrote in the pages it hands
    /// over, and keeps count of what is left in the region.
    #[test]
    fn a_grow_zeroes_the_dirty_part_it_hands_over() {
        let mut module = Module::from_buffer(
            &wat::parse_str(
                r#"(module (memory (export "memory") 1)
                     (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
            )
            .unwrap(),
        )
        .unwrap();
        let memory = module.memories.iter().next().unwrap().id();
        let funcs: Vec<_> = module.funcs.iter_local().map(|(id, _)| id).collect();
        let dirty = dirty_global(&mut module);
        module.exports.add("dirty", dirty);
        reserve_top_pages(&mut module, memory, dirty, &funcs).unwrap();
        let wasm = module.emit_wasm();

        let engine = wasmtime::Engine::default();
        let mut store = wasmtime::Store::new(&engine, ());
        let m = wasmtime::Module::new(&engine, &wasm).unwrap();
        let instance = wasmtime::Instance::new(&mut store, &m, &[]).unwrap();
        let mem = instance.get_memory(&mut store, "memory").unwrap();
        let dirty = instance.get_global(&mut store, "dirty").unwrap();
        let grow = instance
            .get_typed_func::<i32, i32>(&mut store, "grow")
            .unwrap();
        let page = WASM_PAGE_SIZE as usize;
        // The region starts after the program's one page; the runtime
        // wrote 70,000 bytes there.
        mem.data_mut(&mut store)[page..page + 70_000].fill(0xAB);
        dirty.set(&mut store, wasmtime::Val::I32(70_000)).unwrap();
        assert_eq!(grow.call(&mut store, 1).unwrap(), 1);
        let data = mem.data(&store);
        assert!(data[page..2 * page].iter().all(|&b| b == 0));
        // What stays in the region (which moved up a page) is still counted.
        assert_eq!(dirty.get(&mut store).i32(), Some(70_000 - page as i32));
        assert_eq!(grow.call(&mut store, 2).unwrap(), 2);
        assert_eq!(dirty.get(&mut store).i32(), Some(0));
        assert!(mem.data(&store)[2 * page..4 * page].iter().all(|&b| b == 0));
    }

    #[test]
    fn too_big_to_reserve() {
        let mut module =
            Module::from_buffer(&wat::parse_str("(module (memory 65530))").unwrap()).unwrap();
        let memory = module.memories.iter().next().unwrap().id();
        let dirty = dirty_global(&mut module);
        let err = reserve_top_pages(&mut module, memory, dirty, &[]).unwrap_err();
        assert!(matches!(err, PrepareError::NotACommand(_)), "{err}");
    }
}
