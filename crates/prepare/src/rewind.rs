//! A rewind ends in the guest: Asyncify's state is set back to normal by the
//! module itself, right before it calls an import.
//!
//! A rewind replays the stack down to the import call that unwound, which
//! the host answers. binaryen's protocol has that import call
//! `asyncify_stop_rewind` first; the runtime did it by writing the state
//! global, and a write of a global from the host costs a type check in
//! wasmtime (each was about 2 % of an IPC round trip on one kernel). At
//! any import call the state is either normal or rewinding, never
//! unwinding (an unwind only returns), so writing "normal" there is right
//! in both cases: the module does it, in two instructions before each
//! `call` of an import, and the host only answers.
//!
//! An import can also be reached other than by a direct call: through a
//! table, a `ref.func`, an export or the start function. Each import named
//! so gets a thunk, a function that resets the state and calls it, and
//! every such reference names the thunk instead. The thunk keeps nothing
//! across its call, so Asyncify need not save it: it has no frame to
//! restore when its caller, rewinding, calls it again.

use std::collections::BTreeMap;

use wasm_encoder::{Function, Instruction};
use wasmparser::{ElementItems, ExternalKind, Operator, OperatorsReader, Parser, Payload, TypeRef};

use crate::PrepareError;

/// The imports of a module, as the rewind's end needs them.
pub(crate) struct Imports {
    /// Asyncify's state global.
    state: u32,
    /// How many functions the module imports (they come first).
    count: u32,
    /// Imports named other than by a direct `call`, with their type's
    /// index and its parameter count, in index order: one thunk each.
    thunked: BTreeMap<u32, (u32, u32)>,
    /// Where the thunks start in the output's function index space: after
    /// the module's own functions (known once its function section is read).
    first_thunk: Option<u32>,
}

impl Imports {
    /// Reads what `wasm` imports and where it names its imports, `state`
    /// being Asyncify's state global.
    pub(crate) fn scan(wasm: &[u8], state: u32) -> Result<Imports, PrepareError> {
        let malformed = |e: wasmparser::BinaryReaderError| PrepareError::Malformed(e.to_string());
        let mut params = Vec::new();
        let mut types = Vec::new();
        let mut named = Vec::new();
        let refs = |ops: OperatorsReader<'_>, named: &mut Vec<u32>| {
            for op in ops {
                match op? {
                    Operator::RefFunc { function_index }
                    | Operator::ReturnCall { function_index } => named.push(function_index),
                    _ => {}
                }
            }
            Ok::<_, wasmparser::BinaryReaderError>(())
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.map_err(malformed)? {
                Payload::TypeSection(section) => {
                    for ty in section.into_iter_err_on_gc_types() {
                        params.push(ty.map_err(malformed)?.params().len() as u32);
                    }
                }
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        if let TypeRef::Func(ty) = import.map_err(malformed)?.ty {
                            types.push(ty);
                        }
                    }
                }
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export.map_err(malformed)?;
                        if export.kind == ExternalKind::Func {
                            named.push(export.index);
                        }
                    }
                }
                Payload::StartSection { func, .. } => named.push(func),
                Payload::GlobalSection(section) => {
                    for global in section {
                        let ops = global.map_err(malformed)?.init_expr.get_operators_reader();
                        refs(ops, &mut named).map_err(malformed)?;
                    }
                }
                Payload::TableSection(section) => {
                    for table in section {
                        if let wasmparser::TableInit::Expr(e) = table.map_err(malformed)?.init {
                            refs(e.get_operators_reader(), &mut named).map_err(malformed)?;
                        }
                    }
                }
                Payload::ElementSection(section) => {
                    for element in section {
                        match element.map_err(malformed)?.items {
                            ElementItems::Functions(funcs) => {
                                for f in funcs {
                                    named.push(f.map_err(malformed)?);
                                }
                            }
                            ElementItems::Expressions(_, exprs) => {
                                for e in exprs {
                                    let ops = e.map_err(malformed)?.get_operators_reader();
                                    refs(ops, &mut named).map_err(malformed)?;
                                }
                            }
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let ops = body.get_operators_reader().map_err(malformed)?;
                    refs(ops, &mut named).map_err(malformed)?;
                }
                _ => {}
            }
        }
        let count = types.len() as u32;
        let mut thunked = BTreeMap::new();
        for f in named.into_iter().filter(|&f| f < count) {
            let ty = types[f as usize];
            let n = *params.get(ty as usize).ok_or_else(|| {
                PrepareError::Malformed(format!("import {f} has an unknown type {ty}"))
            })?;
            thunked.insert(f, (ty, n));
        }
        Ok(Imports {
            state,
            count,
            thunked,
            first_thunk: None,
        })
    }

    /// Whether `func` is an import: a direct call of it is preceded by
    /// [`end_rewind`](Self::end_rewind).
    pub(crate) fn is_import(&self, func: u32) -> bool {
        func < self.count
    }

    /// The two instructions that end a rewind, before an import is called.
    pub(crate) fn end_rewind(&self, f: &mut Function) {
        f.instruction(&Instruction::I32Const(
            crate::conventions::ASYNCIFY_STATE_NORMAL,
        ));
        f.instruction(&Instruction::GlobalSet(self.state));
    }

    /// The module has `defined` functions of its own: the thunks follow.
    /// Returns the thunks' type indices, for the function section.
    pub(crate) fn place_thunks(&mut self, defined: u32) -> impl Iterator<Item = u32> + '_ {
        self.first_thunk = Some(self.count + defined);
        self.thunked.values().map(|&(ty, _)| ty)
    }

    /// Where a reference to `func` (other than a direct call) must point:
    /// its thunk if it is a thunked import.
    pub(crate) fn reference(&self, func: u32) -> u32 {
        match (
            self.first_thunk,
            self.thunked.keys().position(|&f| f == func),
        ) {
            (Some(first), Some(k)) => first + k as u32,
            _ => func,
        }
    }

    /// The thunks' bodies, in the order of [`place_thunks`](Self::place_thunks).
    pub(crate) fn thunks(&self) -> impl Iterator<Item = Function> + '_ {
        self.thunked.iter().map(|(&import, &(_, params))| {
            let mut f = Function::new([]);
            self.end_rewind(&mut f);
            for p in 0..params {
                f.instruction(&Instruction::LocalGet(p));
            }
            f.instruction(&Instruction::Call(import));
            f.instruction(&Instruction::End);
            f
        })
    }
}
