//! Steps 1–5 of preparation, done on walrus' IR: parse and check the module,
//! add the yield flag and the safepoint import, insert the safepoint checks,
//! reserve the top of memory for Asyncify, export the mutable globals.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};

use walrus::ir::{dfs_in_order, Instr, InstrLocId, InstrSeqId, Loop, Value, Visitor};
use walrus::{
    ConstExpr, ExportItem, FunctionId, GlobalId, LocalFunction, MemoryId, Module, ModuleConfig,
    ValType,
};

use crate::conventions::{
    global_export_name, AREA_DIRTY_GLOBAL, GLOBAL_EXPORT_PREFIX, MEMORY_EXPORT, SAFEPOINT_MODULE,
    SAFEPOINT_NAME, START_EXPORT, TABLE_EXPORT, YIELD_GLOBAL,
};
use crate::{reserve, PrepareError};

/// Prefix of the exports that binaryen's Asyncify adds.
const ASYNCIFY_EXPORT_PREFIX: &str = "asyncify_";

/// Parses `wasm`, instruments it and returns the new binary, ready for
/// binaryen.
pub(crate) fn instrument(wasm: &[u8]) -> Result<Vec<u8>, PrepareError> {
    let (mut module, globals_in_order) = parse(wasm)?;
    let memory = check_command(&module)?;
    check_reserved_names(&module)?;
    let program: Vec<FunctionId> = module.funcs.iter_local().map(|(id, _)| id).collect();

    // `globals_in_order` holds the input's globals only: the yield flag added
    // next is not exported under the `atoll_global_` prefix.
    export_mutable_globals(&mut module, &globals_in_order);
    export_function_table(&mut module);
    let yield_flag = add_runtime_global(&mut module, YIELD_GLOBAL);
    let area_dirty = add_runtime_global(&mut module, AREA_DIRTY_GLOBAL);
    let ty = module.types.add(&[], &[]);
    let (safepoint, _) = module.add_import_func(SAFEPOINT_MODULE, SAFEPOINT_NAME, ty);
    let mut checks = 0;
    for &id in &program {
        let func = module.funcs.get_mut(id).kind.unwrap_local_mut();
        checks += insert_safepoint_checks(func, yield_flag, safepoint);
    }
    tracing::debug!(checks, "inserted safepoint checks");
    // After the checks: the helpers this adds need none (they call nothing).
    reserve::reserve_top_pages(&mut module, memory, area_dirty, &program)?;
    Ok(module.emit_wasm())
}

/// Parses and validates `wasm`, also returning its globals in the order of the
/// input's global index space (imports first).
fn parse(wasm: &[u8]) -> Result<(Module, Vec<GlobalId>), PrepareError> {
    // walrus numbers globals in its own arena; the exported names must follow
    // the input's indices, which only the parser knows for sure.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut config = ModuleConfig::new();
    let sink = Arc::clone(&order);
    config.on_parse(move |module, indices| {
        let count = u32::try_from(module.globals.iter().count())?;
        let ids = (0..count)
            .map(|index| indices.get_global(index))
            .collect::<Result<_, _>>()?;
        *sink.lock().unwrap_or_else(PoisonError::into_inner) = ids;
        Ok(())
    });
    // walrus validates with wasmparser and returns errors, but the input is
    // untrusted: if a bug in a parser panics, report a malformed module
    // rather than taking the caller (a kernel) down.
    let parsed = panic::catch_unwind(AssertUnwindSafe(|| {
        Module::from_buffer_with_config(wasm, &config)
    }))
    .map_err(|_| PrepareError::Malformed("the wasm parser panicked on this input".into()))?
    .map_err(|e| PrepareError::Malformed(format!("{e:#}")))?;
    let globals = std::mem::take(&mut *order.lock().unwrap_or_else(PoisonError::into_inner));
    Ok((parsed, globals))
}

/// Checks that the module is something atoll can run as a process: a command
/// with `_start` and exactly one 32-bit linear memory, defined in the module
/// and exported as `memory`. Returns that memory.
fn check_command(module: &Module) -> Result<MemoryId, PrepareError> {
    let not_a_command = |why: &str| Err(PrepareError::NotACommand(why.to_owned()));
    if module.exports.get_func(START_EXPORT).is_err() {
        return not_a_command("no exported function `_start`");
    }
    let memories: Vec<_> = module.memories.iter().collect();
    let [memory] = memories[..] else {
        return not_a_command(&format!(
            "{} linear memories, atoll needs exactly one",
            memories.len()
        ));
    };
    if memory.memory64 {
        return not_a_command("64-bit linear memory (wasm64), atoll needs wasm32");
    }
    if memory.import.is_some() {
        return not_a_command("its linear memory is imported, atoll needs to define it");
    }
    let exported = module.exports.iter().any(|e| {
        e.name == MEMORY_EXPORT && matches!(e.item, ExportItem::Memory(m) if m == memory.id())
    });
    if !exported {
        return not_a_command("the linear memory is not exported as `memory`");
    }
    Ok(memory.id())
}

/// Refuses modules that already use a name preparation would add.
fn check_reserved_names(module: &Module) -> Result<(), PrepareError> {
    let reserved = |name: &str| {
        name == YIELD_GLOBAL
            || name == AREA_DIRTY_GLOBAL
            || name == TABLE_EXPORT
            || name.starts_with(GLOBAL_EXPORT_PREFIX)
            || name.starts_with(ASYNCIFY_EXPORT_PREFIX)
    };
    if let Some(export) = module.exports.iter().find(|e| reserved(&e.name)) {
        return Err(PrepareError::ReservedName(export.name.clone()));
    }
    if module
        .imports
        .find(SAFEPOINT_MODULE, SAFEPOINT_NAME)
        .is_some()
    {
        return Err(PrepareError::ReservedName(format!(
            "{SAFEPOINT_MODULE}.{SAFEPOINT_NAME}"
        )));
    }
    Ok(())
}

/// Exports every mutable global as `atoll_global_<index in the input>`.
/// Existing exports stay: a global may end up with several names.
fn export_mutable_globals(module: &mut Module, globals_in_order: &[GlobalId]) {
    for (index, &id) in (0u32..).zip(globals_in_order) {
        if module.globals.get(id).mutable {
            module.exports.add(&global_export_name(index), id);
        }
    }
}

/// Exports the first function table, if any, as [`TABLE_EXPORT`].
fn export_function_table(module: &mut Module) {
    let table = module
        .tables
        .iter()
        .find(|t| t.element_ty == walrus::RefType::FUNCREF)
        .map(|t| t.id());
    if let Some(table) = table {
        module.exports.add(TABLE_EXPORT, table);
    }
}

/// Adds an exported, mutable `i32` global of the runtime's, initialised
/// to 0 (the yield flag, the reserved region's dirty length).
fn add_runtime_global(module: &mut Module, name: &str) -> GlobalId {
    let id = module
        .globals
        .add_local(ValType::I32, true, false, ConstExpr::Value(Value::I32(0)));
    module.globals.get_mut(id).name = Some(name.to_owned());
    module.exports.add(name, id);
    id
}

/// Puts `global.get $yield_flag; if; call $safepoint; end` at the start of the
/// function body and of every loop body in `func`; returns how many.
fn insert_safepoint_checks(
    func: &mut LocalFunction,
    yield_flag: GlobalId,
    safepoint: FunctionId,
) -> usize {
    let mut loops = LoopBodies::default();
    dfs_in_order(&mut loops, func, func.entry_block());
    let mut seqs = loops.0;
    seqs.push(func.entry_block());
    for &seq in &seqs {
        func.builder_mut()
            .instr_seq(seq)
            .if_else_at(
                0,
                None,
                |then| {
                    then.call(safepoint);
                },
                |_| {},
            )
            .instr_at(
                0,
                Instr::GlobalGet(walrus::ir::GlobalGet { global: yield_flag }),
            );
    }
    seqs.len()
}

/// Collects the body of every `loop` in a function.
#[derive(Default)]
struct LoopBodies(Vec<InstrSeqId>);

impl<'instr> Visitor<'instr> for LoopBodies {
    fn visit_instr(&mut self, instr: &'instr Instr, _: &'instr InstrLocId) {
        if let Instr::Loop(Loop { seq }) = instr {
            self.0.push(*seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use walrus::ir::{Call, GlobalGet, IfElse};
    use walrus::{GlobalKind, ImportKind};

    use super::*;

    /// Global index space: 0 imported mutable, 1 imported immutable, 2 `$sp`
    /// (mutable), 3 `$k` (immutable), 4 `$acc` (mutable).
    const WAT: &str = r#"
        (module
          (import "env" "g_imported" (global $imported (mut i32)))
          (import "env" "g_const" (global $imported_const i64))
          (import "env" "tick" (func $tick))
          (memory (export "memory") 1)
          (global $sp (mut i32) (i32.const 1111))
          (global $k i32 (i32.const 2222))
          (global $acc (mut i64) (i64.const 3333))
          (export "sp_too" (global $sp))
          (func $rec (param i32) (result i32)
            (if (result i32) (local.get 0)
              (then (call $rec (i32.sub (local.get 0) (i32.const 1))))
              (else (i32.const 0))))
          (func $loops
            (local i32)
            (loop $outer
              (block $done
                (loop $inner
                  (call $tick)
                  (br_if $done (i32.eqz (local.get 0)))
                  (br $inner)))
              (br_if $outer (local.get 0))))
          (func (export "_start") (call $loops) (drop (call $rec (i32.const 3)))))
    "#;

    fn instrumented() -> Module {
        let wasm = wat::parse_str(WAT).unwrap();
        Module::from_buffer(&instrument(&wasm).unwrap()).unwrap()
    }

    /// Whether `seq` starts with the safepoint check.
    fn starts_with_check(
        func: &LocalFunction,
        seq: InstrSeqId,
        flag: GlobalId,
        sp: FunctionId,
    ) -> bool {
        let instrs = &func.block(seq).instrs;
        let [(Instr::GlobalGet(GlobalGet { global }), _), (
            Instr::IfElse(IfElse {
                consequent,
                alternative,
            }),
            _,
        ), ..] = &instrs[..]
        else {
            return false;
        };
        let then = &func.block(*consequent).instrs;
        *global == flag
            && matches!(&then[..], [(Instr::Call(Call { func }), _)] if *func == sp)
            && func.block(*alternative).instrs.is_empty()
    }

    #[test]
    fn every_function_entry_and_loop_body_is_checked() {
        let module = instrumented();
        let flag = module
            .exports
            .iter()
            .find(|e| e.name == YIELD_GLOBAL)
            .unwrap();
        let ExportItem::Global(flag) = flag.item else {
            panic!("atoll_yield is not a global")
        };
        assert!(module.globals.get(flag).mutable);
        let sp = module
            .imports
            .get_func(SAFEPOINT_MODULE, SAFEPOINT_NAME)
            .unwrap();
        let mut loops_seen = 0;
        for (id, func) in module.funcs.iter_local() {
            let name = module.funcs.get(id).name.as_deref().unwrap_or_default();
            if name.starts_with("atoll_memory_") {
                continue; // our own helpers call nothing, so need no check
            }
            assert!(
                starts_with_check(func, func.entry_block(), flag, sp),
                "{name}"
            );
            let mut loops = LoopBodies::default();
            dfs_in_order(&mut loops, func, func.entry_block());
            for &body in &loops.0 {
                assert!(starts_with_check(func, body, flag, sp));
            }
            loops_seen += loops.0.len();
        }
        assert_eq!(loops_seen, 2);
    }

    #[test]
    fn mutable_globals_are_exported_by_input_index() {
        let module = instrumented();
        let exported = |name: &str| {
            let export = module.exports.iter().find(|e| e.name == name);
            match export.map(|e| &e.item) {
                Some(ExportItem::Global(g)) => Some(module.globals.get(*g)),
                _ => None,
            }
        };
        let global0 = exported("atoll_global_0").expect("imported mutable global exported");
        let GlobalKind::Import(import) = global0.kind else {
            panic!("global 0 is not the import")
        };
        assert!(matches!(
            module.imports.get(import).kind,
            ImportKind::Global(_)
        ));
        assert_eq!(module.imports.get(import).name, "g_imported");
        assert!(exported("atoll_global_1").is_none(), "immutable import");
        let init = |name| match exported(name).map(|g| &g.kind) {
            Some(GlobalKind::Local(ConstExpr::Value(v))) => Some(*v),
            _ => None,
        };
        assert!(matches!(init("atoll_global_2"), Some(Value::I32(1111))));
        assert!(exported("atoll_global_3").is_none(), "immutable");
        assert!(matches!(init("atoll_global_4"), Some(Value::I64(3333))));
        assert!(
            exported("atoll_global_5").is_none(),
            "the yield flag is not one of them"
        );
        assert!(exported("sp_too").is_some(), "existing exports are kept");
    }

    #[test]
    fn commands_only() {
        let not_a_command = |wat: &str| {
            let err = instrument(&wat::parse_str(wat).unwrap()).unwrap_err();
            assert!(matches!(err, PrepareError::NotACommand(_)), "{wat}: {err}");
        };
        not_a_command(r#"(module (memory (export "memory") 1))"#);
        not_a_command(r#"(module (func (export "_start")))"#);
        not_a_command(r#"(module (memory 1) (func (export "_start")))"#);
        not_a_command(r#"(module (memory (export "mem") 1) (func (export "_start")))"#);
        not_a_command(r#"(module (memory (export "memory") i64 1) (func (export "_start")))"#);
        not_a_command(
            r#"(module (memory (export "memory") 1) (memory 1) (func (export "_start")))"#,
        );
    }

    #[test]
    fn reserved_names_are_refused() {
        let command = r#"(memory (export "memory") 1) (func (export "_start"))"#;
        for extra in [
            r#"(global (export "atoll_yield") (mut i32) (i32.const 0))"#,
            r#"(global (export "atoll_global_0") (mut i32) (i32.const 0))"#,
            r#"(func (export "asyncify_get_state") (result i32) (i32.const 0))"#,
            r#"(import "atoll" "safepoint" (func))"#,
        ] {
            let wasm = wat::parse_str(format!("(module {extra} {command})")).unwrap();
            let err = instrument(&wasm).unwrap_err();
            assert!(
                matches!(err, PrepareError::ReservedName(_)),
                "{extra}: {err}"
            );
        }
    }
}
