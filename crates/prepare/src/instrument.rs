//! Steps 1–5 of preparation, done on walrus' IR: parse and check the module,
//! add the yield flag and the safepoint import, insert the safepoint checks,
//! reserve the top of memory for Asyncify, export the mutable globals.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};

use std::collections::{HashMap, HashSet};

use petgraph::algo::tarjan_scc;
use petgraph::graphmap::DiGraphMap;
use walrus::ir::{
    dfs_in_order, Block, Br, BrIf, BrOnCast, BrOnCastFail, BrOnNonNull, BrOnNull, BrTable, Call,
    GlobalGet, IfElse, Instr, InstrLocId, InstrSeq, InstrSeqId, InstrSeqType, Loop, ReturnCall,
    TryTable, TryTableCatch, Value, Visitor,
};
use walrus::{
    ConstExpr, ExportItem, FunctionId, GlobalId, LocalFunction, MemoryId, Module, ModuleConfig,
    ValType,
};

use crate::conventions::{
    global_export_name, AREA_DIRTY_GLOBAL, ASYNCIFY_DATA_GLOBAL, ASYNCIFY_STATE_GLOBAL,
    FLAGS_MEMORY, FLAGS_MODULE, FLAG_AT_GLOBAL, GLOBAL_EXPORT_PREFIX, MEMORY_EXPORT,
    SAFEPOINT_MODULE, SAFEPOINT_NAME, START_EXPORT, TABLE_EXPORT,
};
use crate::{reserve, PrepareError};

/// Prefix of the exports that binaryen's Asyncify adds.
const ASYNCIFY_EXPORT_PREFIX: &str = "asyncify_";

/// Parses `wasm`, instruments it and returns the new binary, ready for
/// binaryen.
pub(crate) fn instrument(wasm: &[u8]) -> Result<Vec<u8>, PrepareError> {
    let (mut module, globals_in_order) = parse(wasm)?;
    check_reserved_names(&module)?;
    let memory = check_command(&module)?;
    let program: Vec<FunctionId> = module.funcs.iter_local().map(|(id, _)| id).collect();

    // `globals_in_order` holds the input's globals only: the flag's address
    // added next is not exported under the `atoll_global_` prefix. Until
    // Asyncify has run, the checks read it as if it were the flag
    // (`flags.rs` then makes each read a load of the flag it points at).
    export_mutable_globals(&mut module, &globals_in_order);
    export_function_table(&mut module);
    let yield_flag = add_runtime_global(&mut module, FLAG_AT_GLOBAL);
    let area_dirty = add_runtime_global(&mut module, AREA_DIRTY_GLOBAL);
    let ty = module.types.add(&[], &[]);
    let (safepoint, _) = module.add_import_func(SAFEPOINT_MODULE, SAFEPOINT_NAME, ty);
    let recursive = may_recurse(&module, &program);
    let mut checks = 0;
    for &id in &program {
        let at_entry = recursive.contains(&id);
        let func = module.funcs.get_mut(id).kind.unwrap_local_mut();
        checks += insert_safepoint_checks(func, at_entry, yield_flag, safepoint);
    }
    tracing::debug!(
        checks,
        recursive = recursive.len(),
        "inserted safepoint checks"
    );
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
        name == FLAG_AT_GLOBAL
            || name == AREA_DIRTY_GLOBAL
            || name == TABLE_EXPORT
            || name == ASYNCIFY_STATE_GLOBAL
            || name == ASYNCIFY_DATA_GLOBAL
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
    if module.imports.find(FLAGS_MODULE, FLAGS_MEMORY).is_some() {
        return Err(PrepareError::ReservedName(format!(
            "{FLAGS_MODULE}.{FLAGS_MEMORY}"
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

/// Inserts the safepoint checks into `func`: one on every branch back to
/// the start of a loop, and one at the start of its body if `at_entry`.
/// Returns how many loops and entries are checked.
fn insert_safepoint_checks(
    func: &mut LocalFunction,
    at_entry: bool,
    yield_flag: GlobalId,
    safepoint: FunctionId,
) -> usize {
    let loops = find_loops(func);
    let mut back_edges: HashMap<InstrSeqId, Vec<Branch>> = HashMap::new();
    for branch in branches_to_loops(func) {
        back_edges.entry(branch.target).or_default().push(branch);
    }
    let mut checked = 0;
    // Loops are wrapped first (one instruction replaced by one), then the
    // branches are rewritten (which shifts what follows them in their
    // sequence), and the checks at the start of a sequence come last.
    let mut inside = Vec::new();
    let mut rewrites = Vec::new();
    for &(holder, index, body) in &loops {
        let Some(back) = back_edges.remove(&body) else {
            continue; // not a cycle: runs once, needs no check
        };
        checked += 1;
        let simple = matches!(func.block(body).ty, InstrSeqType::Simple(_));
        if !simple || back.iter().any(|b| b.kind == BranchKind::Other) {
            // Values on the back edge, or a branch that cannot be given a
            // way out: keep the check at the start of the body, inside.
            inside.push(body);
            continue;
        }
        let out = wrap_loop(func, (holder, index, body), safepoint);
        rewrites.extend(back.into_iter().map(|b| (b, out)));
    }
    // Later places first, so that the earlier ones stay where they were.
    rewrites.sort_by_key(|(b, _)| std::cmp::Reverse((b.seq, b.index)));
    for (branch, out) in rewrites {
        check_branch(func, branch, out, yield_flag);
    }
    for body in inside {
        check_at_start(func, body, yield_flag, safepoint);
    }
    if at_entry {
        check_at_start(func, func.entry_block(), yield_flag, safepoint);
    }
    checked + usize::from(at_entry)
}

/// A branch to the start of a loop: where it is and how it branches.
#[derive(Clone, Copy, Debug)]
struct Branch {
    seq: InstrSeqId,
    index: usize,
    target: InstrSeqId,
    kind: BranchKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BranchKind {
    Br,
    BrIf,
    /// `br_table`, `br_on_*` and the labels of `try_table`'s catches: a
    /// loop they go back to keeps its check inside.
    Other,
}

/// Every branch in `func`, with the sequence it targets; those targeting
/// loop bodies are the back edges. Every instruction that names a label
/// to branch to is here: a back edge missed would be a cycle unchecked.
fn branches_to_loops(func: &LocalFunction) -> Vec<Branch> {
    let mut seqs = Sequences::default();
    dfs_in_order(&mut seqs, func, func.entry_block());
    let mut branches = Vec::new();
    for seq in seqs.0 {
        for (index, (instr, _)) in func.block(seq).instrs.iter().enumerate() {
            let mut push = |target, kind| {
                branches.push(Branch {
                    seq,
                    index,
                    target,
                    kind,
                })
            };
            match instr {
                Instr::Br(Br { block }) => push(*block, BranchKind::Br),
                Instr::BrIf(BrIf { block }) => push(*block, BranchKind::BrIf),
                Instr::BrTable(BrTable { blocks, default }) => {
                    for target in blocks.iter().chain([default]) {
                        push(*target, BranchKind::Other);
                    }
                }
                Instr::BrOnNull(BrOnNull { block })
                | Instr::BrOnNonNull(BrOnNonNull { block })
                | Instr::BrOnCast(BrOnCast { block, .. })
                | Instr::BrOnCastFail(BrOnCastFail { block, .. }) => {
                    push(*block, BranchKind::Other)
                }
                Instr::TryTable(TryTable { catches, .. }) => {
                    for catch in catches {
                        let (TryTableCatch::Catch { label, .. }
                        | TryTableCatch::CatchRef { label, .. }
                        | TryTableCatch::CatchAll { label }
                        | TryTableCatch::CatchAllRef { label }) = catch;
                        push(*label, BranchKind::Other);
                    }
                }
                _ => {}
            }
        }
    }
    branches
}

/// Makes a back edge look at the yield flag first: `br $loop` becomes
/// `global.get $atoll_flag_at; br_if $out; br $loop`, and `br_if $loop`
/// becomes `if; global.get $atoll_flag_at; br_if $out; br $loop; end`
/// (each `global.get` later a load of the flag, `flags.rs`).
fn check_branch(func: &mut LocalFunction, branch: Branch, out: InstrSeqId, yield_flag: GlobalId) {
    let flag = Instr::GlobalGet(GlobalGet { global: yield_flag });
    let leave = Instr::BrIf(BrIf { block: out });
    let again = Instr::Br(Br {
        block: branch.target,
    });
    match branch.kind {
        BranchKind::Br => {
            func.builder_mut()
                .instr_seq(branch.seq)
                .instr_at(branch.index, leave)
                .instr_at(branch.index, flag);
        }
        BranchKind::BrIf => {
            let builder = func.builder_mut();
            let mut then = builder.dangling_instr_seq(None);
            then.instr(flag).instr(leave).instr(again);
            let consequent = then.id();
            let alternative = builder.dangling_instr_seq(None).id();
            func.block_mut(branch.seq).instrs[branch.index].0 = Instr::IfElse(IfElse {
                consequent,
                alternative,
            });
        }
        BranchKind::Other => unreachable!("loops with such branches keep the check inside"),
    }
}

/// The functions of `program` that need a safepoint check at their entry:
/// those that may be part of a recursion.
///
/// Loops are checked on their back edges, so a run without a check can
/// only go on for long by calling round a cycle of functions; one check per
/// cycle bounds it. A cycle of direct calls is a strongly connected
/// component of the call graph (or a function calling itself), and every
/// function in one is checked. A cycle through a table passes through an
/// indirect call, so every function that calls indirectly is checked too.
///
/// The others are left without a check, and that is what keeps them fast:
/// a function with no loop that calls only such functions never reaches an
/// import, so Asyncify leaves it as it was, and calls to it cost its
/// callers nothing either (a loop calling only such helpers stays tight).
fn may_recurse(module: &Module, program: &[FunctionId]) -> HashSet<FunctionId> {
    let defined: HashSet<FunctionId> = program.iter().copied().collect();
    let mut graph = DiGraphMap::<FunctionId, ()>::new();
    let mut recursive = HashSet::new();
    for &id in program {
        graph.add_node(id);
        let func = module.funcs.get(id).kind.unwrap_local();
        let mut calls = Calls::default();
        dfs_in_order(&mut calls, func, func.entry_block());
        if calls.indirect {
            recursive.insert(id);
        }
        for callee in calls.direct {
            if defined.contains(&callee) {
                graph.add_edge(id, callee, ());
            }
        }
    }
    for component in tarjan_scc(&graph) {
        if component.len() > 1 || graph.contains_edge(component[0], component[0]) {
            recursive.extend(component);
        }
    }
    recursive
}

/// The calls a function makes: the functions it calls by name, and
/// whether it calls through a table or a reference.
#[derive(Default)]
struct Calls {
    direct: Vec<FunctionId>,
    indirect: bool,
}

impl<'instr> Visitor<'instr> for Calls {
    fn visit_instr(&mut self, instr: &'instr Instr, _: &'instr InstrLocId) {
        match instr {
            Instr::Call(Call { func }) | Instr::ReturnCall(ReturnCall { func }) => {
                self.direct.push(*func)
            }
            Instr::CallIndirect(_)
            | Instr::ReturnCallIndirect(_)
            | Instr::CallRef(_)
            | Instr::ReturnCallRef(_) => self.indirect = true,
            _ => {}
        }
    }
}

/// Puts `global.get $yield_flag; if; call $safepoint; end` at the start of
/// `seq`.
fn check_at_start(
    func: &mut LocalFunction,
    seq: InstrSeqId,
    yield_flag: GlobalId,
    safepoint: FunctionId,
) {
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
        .instr_at(0, Instr::GlobalGet(GlobalGet { global: yield_flag }));
}

/// Wraps a loop so that the checks on its back edges (added by the
/// caller, [`check_branch`]) stop *outside* it; returns `$out`:
///
/// ```wat
/// block $done (result T)          ;; replaces the loop where it was
///   loop $again (result T)
///     block $out
///       loop $body (result T)     ;; the original loop
///         ...                     ;; the original body, where each
///         global.get $atoll_flag_at ;; branch back to $body is first
///         br_if $out              ;; a way out, locals intact
///         br $body
///       end
///       br $done                  ;; the loop ended as it would have
///     end
///     call $atoll.safepoint       ;; stop here, outside the loop
///     br $again                   ;; then start the next iteration
///   end
/// end
/// ```
///
/// This is what keeps tight loops fast. Asyncify must be able to come back
/// to any call that may unwind, so every piece of a loop body that contains
/// such a call is guarded by tests of its state, paid on every iteration.
/// With the call outside, a loop whose body calls nothing that may unwind
/// (most inner loops) is left alone by Asyncify, and an iteration pays only
/// the load of the flag and a branch. The check is on the way back, not
/// at the start of the body, so that coming back from the safepoint
/// always runs an iteration before the next check: a process stopped at
/// every safepoint still makes progress.
fn wrap_loop(
    func: &mut LocalFunction,
    (holder, index, body): (InstrSeqId, usize, InstrSeqId),
    safepoint: FunctionId,
) -> InstrSeqId {
    let ty = func.block(body).ty;
    let builder = func.builder_mut();
    let done = builder.dangling_instr_seq(ty).id();
    let again = builder.dangling_instr_seq(ty).id();
    let out = builder.dangling_instr_seq(None).id();
    builder
        .instr_seq(out)
        .instr(Instr::Loop(Loop { seq: body }))
        .instr(Instr::Br(Br { block: done }));
    builder
        .instr_seq(again)
        .instr(Instr::Block(Block { seq: out }))
        .call(safepoint)
        .instr(Instr::Br(Br { block: again }));
    builder
        .instr_seq(done)
        .instr(Instr::Loop(Loop { seq: again }));
    func.block_mut(holder).instrs[index].0 = Instr::Block(Block { seq: done });
    out
}

/// Every `loop` of a function, as (the sequence that holds it, its index
/// there, its body), found before any is rewritten.
fn find_loops(func: &LocalFunction) -> Vec<(InstrSeqId, usize, InstrSeqId)> {
    let mut seqs = Sequences::default();
    dfs_in_order(&mut seqs, func, func.entry_block());
    let mut loops = Vec::new();
    for holder in seqs.0 {
        for (index, (instr, _)) in func.block(holder).instrs.iter().enumerate() {
            if let Instr::Loop(Loop { seq }) = instr {
                loops.push((holder, index, *seq));
            }
        }
    }
    loops
}

/// Collects every instruction sequence of a function.
#[derive(Default)]
struct Sequences(Vec<InstrSeqId>);

impl<'instr> Visitor<'instr> for Sequences {
    fn start_instr_seq(&mut self, seq: &'instr InstrSeq) {
        self.0.push(seq.id());
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

    /// Whether every branch back to loop `body` is `global.get $flag;
    /// br_if $out; br $body`, where `$out` starts with the loop and is
    /// followed by `call $safepoint` and a branch back to it.
    fn checked_from_outside(
        func: &LocalFunction,
        body: InstrSeqId,
        flag: GlobalId,
        sp: FunctionId,
    ) -> bool {
        let back: Vec<_> = branches_to_loops(func)
            .into_iter()
            .filter(|b| b.target == body)
            .collect();
        !back.is_empty()
            && back.iter().all(|b| {
                let instrs = &func.block(b.seq).instrs;
                let (Some(i), BranchKind::Br) = (b.index.checked_sub(2), b.kind) else {
                    return false;
                };
                let [(Instr::GlobalGet(GlobalGet { global }), _), (Instr::BrIf(BrIf { block: out }), _)] =
                    &instrs[i..b.index]
                else {
                    return false;
                };
                *global == flag && leads_to_safepoint(func, body, *out, sp)
            })
    }

    /// Whether `out` starts with loop `body` and is followed by `call $sp`
    /// and a branch back to the loop that holds it. (What follows the loop
    /// in `out`, the branch past it all, is dropped by the parser when the
    /// loop never ends.)
    fn leads_to_safepoint(
        func: &LocalFunction,
        body: InstrSeqId,
        out: InstrSeqId,
        sp: FunctionId,
    ) -> bool {
        let holds_loop = matches!(
            &func.block(out).instrs[..],
            [(Instr::Loop(Loop { seq }), _), ..] if *seq == body
        );
        let mut seqs = Sequences::default();
        dfs_in_order(&mut seqs, func, func.entry_block());
        let stops_after = seqs.0.iter().any(|&again| {
            matches!(
                &func.block(again).instrs[..],
                [(Instr::Block(Block { seq }), _), (Instr::Call(Call { func }), _), (Instr::Br(Br { block }), _)]
                    if *seq == out && *func == sp && *block == again
            )
        });
        holds_loop && stops_after
    }

    fn flag_and_safepoint(module: &Module) -> (GlobalId, FunctionId) {
        let flag = module
            .exports
            .iter()
            .find(|e| e.name == FLAG_AT_GLOBAL)
            .unwrap();
        let ExportItem::Global(flag) = flag.item else {
            panic!("atoll_flag_at is not a global")
        };
        assert!(module.globals.get(flag).mutable);
        let sp = module
            .imports
            .get_func(SAFEPOINT_MODULE, SAFEPOINT_NAME)
            .unwrap();
        (flag, sp)
    }

    #[test]
    fn every_loop_body_and_recursive_function_is_checked() {
        let module = instrumented();
        let (flag, sp) = flag_and_safepoint(&module);
        let mut loops_seen = 0;
        for (id, func) in module.funcs.iter_local() {
            let name = module.funcs.get(id).name.as_deref().unwrap_or_default();
            if name.starts_with("atoll_memory_") {
                continue; // our own helpers call nothing, so need no check
            }
            let entry = starts_with_check(func, func.entry_block(), flag, sp);
            // Only $rec calls itself; $loops and _start are not recursive.
            assert_eq!(entry, name == "rec", "{name}");
            for (_, _, body) in find_loops(func) {
                // A loop of the input, or the one that re-enters it.
                let reenters = matches!(
                    &func.block(body).instrs[..],
                    [(Instr::Block(_), _), (Instr::Call(Call { func }), _), (Instr::Br(_), _)]
                        if *func == sp
                );
                if !reenters {
                    assert!(checked_from_outside(func, body, flag, sp), "{name}");
                    loops_seen += 1;
                }
            }
        }
        assert_eq!(loops_seen, 2);
    }

    #[test]
    fn cycles_and_indirect_callers_are_checked_at_entry() {
        let wat = r#"
            (module
              (type $v (func))
              (memory (export "memory") 1)
              (table 1 funcref)
              (func $ping (call $pong))
              (func $pong (call $ping))
              (func $leaf)
              (func $caller (call $leaf))
              (func $dispatch (call_indirect (type $v) (i32.const 0)))
              (func (export "_start") (call $ping) (call $caller) (call $dispatch)))
        "#;
        let wasm = instrument(&wat::parse_str(wat).unwrap()).unwrap();
        let module = Module::from_buffer(&wasm).unwrap();
        let (flag, sp) = flag_and_safepoint(&module);
        let checked: HashSet<&str> = module
            .funcs
            .iter_local()
            .filter(|(_, func)| starts_with_check(func, func.entry_block(), flag, sp))
            .filter_map(|(id, _)| module.funcs.get(id).name.as_deref())
            .collect();
        assert_eq!(checked, HashSet::from(["ping", "pong", "dispatch"]));
    }

    #[test]
    fn loops_that_cannot_be_left_keep_their_check_inside() {
        // Values on the back edge; a branch table back to the loop.
        for body in [
            r#"(local i32)
               i32.const 3
               loop (type $take)
                 i32.const 1
                 i32.sub
                 local.tee 0
                 local.get 0
                 br_if 0
               end
               drop"#,
            r#"(local i32)
               block
                 loop
                   local.get 0
                   br_table 0 1
                 end
               end"#,
        ] {
            let wat = format!(
                r#"(module
                     (type $take (func (param i32) (result i32)))
                     (memory (export "memory") 1)
                     (func (export "_start") {body}))"#
            );
            let wasm = instrument(&wat::parse_str(&wat).unwrap()).unwrap();
            let module = Module::from_buffer(&wasm).unwrap();
            let (flag, sp) = flag_and_safepoint(&module);
            let (_, func) = module
                .funcs
                .iter_local()
                .find(|(id, _)| module.funcs.get(*id).name.is_none())
                .unwrap();
            let [(_, _, body)] = find_loops(func)[..] else {
                panic!("one loop, not wrapped")
            };
            assert!(starts_with_check(func, body, flag, sp), "{wat}");
        }
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
            r#"(global (export "atoll_flag_at") (mut i32) (i32.const 0))"#,
            r#"(global (export "atoll_global_0") (mut i32) (i32.const 0))"#,
            r#"(func (export "asyncify_get_state") (result i32) (i32.const 0))"#,
            r#"(import "atoll" "safepoint" (func))"#,
            r#"(import "atoll" "yield_flags" (memory 1 1 shared))"#,
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
