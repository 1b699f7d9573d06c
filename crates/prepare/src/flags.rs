//! The yield flag moved out of the instance, into the node's flag memory.
//!
//! Until Asyncify has run, a safepoint check reads a global
//! (`global.get $atoll_flag_at`) as if it were the flag. Afterwards every
//! such read becomes `global.get $atoll_flag_at; i32.load $atoll.yield_flags`:
//! the global holds where the flag of the process's kernel is, in a one-page
//! shared memory the module imports ([`FLAGS_MEMORY`]). Another thread (the
//! node's ticker, a kernel that sends this one a message) can raise a flag
//! there while the process runs; a global it could not reach. That is what
//! lets the engine run without epoch checks, which cost an interpreter a
//! fifth of its time on top of the module's own checks.
//!
//! The import comes after Asyncify because binaryen 108's Asyncify keeps its
//! buffer in memory 0, and an imported memory is always memory 0: the
//! module's own memory becomes memory 1 here, every reference to it renumbered.
//!
//! A module that arrives already prepared is run as it is, so
//! [`check_reads_only`] makes sure it uses the flag memory for nothing but
//! those loads: a process that could write it could hold back the flags of
//! every other kernel of its node.

use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    CodeSection, EntityType, FunctionSection, ImportSection, Instruction, MemArg, MemoryType,
};
use wasmparser::{ExternalKind, FunctionBody, Operator, Parser, Payload, TypeRef};

use crate::conventions::{ASYNCIFY_STATE_GLOBAL, FLAGS_MEMORY, FLAGS_MODULE, FLAG_AT_GLOBAL};
use crate::rewind::Imports;
use crate::PrepareError;

/// The flag memory as a module imports it: one page, shared, never grown.
fn flags_memory_type() -> MemoryType {
    MemoryType {
        minimum: 1,
        maximum: Some(1),
        memory64: false,
        shared: true,
        page_size_log2: None,
    }
}

/// The load a check makes: the i32 at the address the global holds.
fn flag_load(flags: u32) -> MemArg {
    MemArg {
        offset: 0,
        align: 2,
        memory_index: flags,
    }
}

/// The last pass over what Asyncify wrote: imports the flag memory as
/// memory 0 and turns every read of [`FLAG_AT_GLOBAL`] into a read of the
/// flag it points at; and ends rewinds in the guest ([`crate::rewind`]),
/// which needs the same walk over every instruction.
pub(crate) fn finish(wasm: &[u8]) -> Result<Vec<u8>, PrepareError> {
    let global = |name: &str| {
        exported_global(wasm, name)?.ok_or_else(|| {
            PrepareError::Unsupported(format!("binaryen's output lost the `{name}` export"))
        })
    };
    let flag_at = global(FLAG_AT_GLOBAL)?;
    let imports = Imports::scan(wasm, global(ASYNCIFY_STATE_GLOBAL)?)?;
    let mut mover = Mover {
        flag_at,
        imported: false,
        imports,
    };
    let mut module = wasm_encoder::Module::new();
    mover
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|e| PrepareError::Malformed(e.to_string()))?;
    if !mover.imported {
        return Err(PrepareError::Unsupported(
            "binaryen's output has no import section".into(),
        ));
    }
    Ok(module.finish())
}

struct Mover {
    flag_at: u32,
    imported: bool,
    imports: Imports,
}

impl Reencode for Mover {
    type Error = std::convert::Infallible;

    fn memory_index(&mut self, memory: u32) -> Result<u32, reencode::Error> {
        Ok(memory + 1)
    }

    fn function_index(&mut self, func: u32) -> Result<u32, reencode::Error> {
        Ok(self.imports.reference(func))
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), reencode::Error> {
        let defined = section.count();
        reencode::utils::parse_function_section(self, functions, section)?;
        for ty in self.imports.place_thunks(defined) {
            functions.function(ty);
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), reencode::Error> {
        reencode::utils::parse_code_section(self, code, section)?;
        for thunk in self.imports.thunks() {
            code.function(&thunk);
        }
        Ok(())
    }

    fn parse_import_section(
        &mut self,
        imports: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), reencode::Error> {
        imports.import(
            FLAGS_MODULE,
            FLAGS_MEMORY,
            EntityType::Memory(flags_memory_type()),
        );
        self.imported = true;
        reencode::utils::parse_import_section(self, imports, section)
    }

    fn parse_function_body(
        &mut self,
        code: &mut CodeSection,
        func: FunctionBody<'_>,
    ) -> Result<(), reencode::Error> {
        let mut f = self.new_function_with_parsed_locals(&func)?;
        let mut reader = func.get_operators_reader()?;
        while !reader.eof() {
            let op = reader.read()?;
            let is_check =
                matches!(op, Operator::GlobalGet { global_index } if global_index == self.flag_at);
            if let Operator::Call { function_index } = op {
                if self.imports.is_import(function_index) {
                    self.imports.end_rewind(&mut f);
                    f.instruction(&Instruction::Call(function_index));
                    continue;
                }
            }
            f.instruction(&self.instruction(op)?);
            if is_check {
                f.instruction(&Instruction::I32Load(flag_load(0)));
            }
        }
        code.function(&f);
        Ok(())
    }
}

/// Checks that an already prepared `wasm` uses the flag memory, if it
/// imports it, only as [`finish`] does: to load the flag.
///
/// # Errors
/// [`PrepareError::Unsupported`] naming what else it does with it.
pub(crate) fn check_reads_only(wasm: &[u8]) -> Result<(), PrepareError> {
    let Some(flags) = flags_memory_index(wasm)? else {
        return Ok(());
    };
    let mut checker = Checker {
        flags,
        loading: false,
    };
    checker
        .parse_core_module(&mut wasm_encoder::Module::new(), Parser::new(0), wasm)
        .map_err(|e| match e {
            reencode::Error::UserError(why) => PrepareError::Unsupported(why),
            other => PrepareError::Malformed(other.to_string()),
        })
}

/// Re-encodes a module only to see every place it names a memory: the
/// flag memory may be named by an `i32.load` and nothing else.
struct Checker {
    flags: u32,
    /// Set while the instruction being translated is an `i32.load`.
    loading: bool,
}

impl Reencode for Checker {
    type Error = String;

    fn memory_index(&mut self, memory: u32) -> Result<u32, reencode::Error<String>> {
        if memory == self.flags && !self.loading {
            return Err(reencode::Error::UserError(format!(
                "a prepared module may only load from `{FLAGS_MODULE}.{FLAGS_MEMORY}`"
            )));
        }
        Ok(memory)
    }

    fn parse_instruction<'a>(
        &mut self,
        reader: &mut wasmparser::OperatorsReader<'a>,
    ) -> Result<Instruction<'a>, reencode::Error<String>> {
        let op = reader.read()?;
        self.loading = matches!(op, Operator::I32Load { .. });
        let instruction = self.instruction(op);
        self.loading = false;
        instruction
    }
}

/// The index of the flag memory among the module's memories, if it
/// imports it; an error if it imports it with another type.
fn flags_memory_index(wasm: &[u8]) -> Result<Option<u32>, PrepareError> {
    let malformed = |e: wasmparser::BinaryReaderError| PrepareError::Malformed(e.to_string());
    let mut memories = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        let Payload::ImportSection(imports) = payload.map_err(malformed)? else {
            continue;
        };
        for import in imports.into_imports() {
            let import = import.map_err(malformed)?;
            let TypeRef::Memory(ty) = import.ty else {
                continue;
            };
            if (import.module, import.name) == (FLAGS_MODULE, FLAGS_MEMORY) {
                let expected = flags_memory_type();
                if !ty.shared || ty.initial != 1 || ty.maximum != Some(1) || ty.memory64 {
                    return Err(PrepareError::Unsupported(format!(
                        "`{FLAGS_MODULE}.{FLAGS_MEMORY}` must be imported as {expected:?}"
                    )));
                }
                return Ok(Some(memories));
            }
            memories += 1;
        }
    }
    Ok(None)
}

/// The index of the global `wasm` exports as `name`.
fn exported_global(wasm: &[u8], name: &str) -> Result<Option<u32>, PrepareError> {
    let malformed = |e: wasmparser::BinaryReaderError| PrepareError::Malformed(e.to_string());
    for payload in Parser::new(0).parse_all(wasm) {
        let Payload::ExportSection(exports) = payload.map_err(malformed)? else {
            continue;
        };
        for export in exports {
            let export = export.map_err(malformed)?;
            if export.name == name && export.kind == ExternalKind::Global {
                return Ok(Some(export.index));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Asyncify hands on, reduced: one check in a loop, a store to
    /// the module's memory, a data segment and the memory's export.
    const PREPARED: &str = r#"(module
      (import "atoll" "safepoint" (func $safepoint))
      (memory (export "memory") 1)
      (global $flag_at (export "atoll_flag_at") (mut i32) (i32.const 0))
      (global $state (export "atoll_asyncify_state") (mut i32) (i32.const 0))
      (data (i32.const 8) "hi")
      (func (export "_start")
        (loop $l
          (i32.store (i32.const 16) (i32.const 1))
          (if (global.get $flag_at) (then (call $safepoint)))
          (br_if $l (i32.const 0)))))"#;

    /// The module's imports, instructions, data segments and exports, one
    /// a line, as wasmparser shows them.
    fn listing(wasm: &[u8]) -> String {
        let mut ops = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.unwrap() {
                Payload::CodeSectionEntry(body) => {
                    for op in body.get_operators_reader().unwrap() {
                        ops.push(format!("{:?}", op.unwrap()));
                    }
                }
                Payload::ImportSection(imports) => {
                    for i in imports.into_imports() {
                        let i = i.unwrap();
                        ops.push(format!("import {}.{} {:?}", i.module, i.name, i.ty));
                    }
                }
                Payload::DataSection(data) => {
                    for d in data {
                        ops.push(format!("data {:?}", d.unwrap().kind));
                    }
                }
                Payload::ExportSection(exports) => {
                    for e in exports {
                        let e = e.unwrap();
                        ops.push(format!("export {} {:?} {}", e.name, e.kind, e.index));
                    }
                }
                _ => {}
            }
        }
        ops.join("\n")
    }

    #[test]
    fn a_check_loads_the_flag_and_the_own_memory_becomes_memory_1() {
        let wasm = wat::parse_str(PREPARED).unwrap();
        let moved = finish(&wasm).unwrap();
        wasmparser::Validator::new().validate_all(&moved).unwrap();
        let text = listing(&moved);
        assert!(text.contains("import atoll.yield_flags Memory"), "{text}");
        assert!(
            text.contains("GlobalGet { global_index: 0 }\nI32Load { memarg: MemArg { align: 2, max_align: 2, offset: 0, memory: 0 } }"),
            "{text}"
        );
        assert!(
            text.contains(
                "I32Store { memarg: MemArg { align: 2, max_align: 2, offset: 0, memory: 1 } }"
            ),
            "{text}"
        );
        assert!(text.contains("data Active { memory_index: 1"), "{text}");
        assert!(text.contains("export memory Memory 1"), "{text}");
        check_reads_only(&moved).unwrap();
    }

    #[test]
    fn each_import_call_ends_a_rewind_first() {
        let moved = finish(&wat::parse_str(PREPARED).unwrap()).unwrap();
        let text = listing(&moved);
        // The state global is 1 ($flag_at is 0); the safepoint import is 0.
        assert!(
            text.contains(
                "I32Const { value: 0 }\nGlobalSet { global_index: 1 }\nCall { function_index: 0 }"
            ),
            "{text}"
        );
        assert_eq!(text.matches("GlobalSet").count(), 1, "{text}");
    }

    #[test]
    fn an_import_in_a_table_is_reached_through_a_thunk() {
        let wat = r#"(module
          (import "atoll" "safepoint" (func $safepoint))
          (import "wasi" "write" (func $write (param i32 i64) (result i32)))
          (memory (export "memory") 1)
          (global $flag_at (export "atoll_flag_at") (mut i32) (i32.const 0))
          (global $state (export "atoll_asyncify_state") (mut i32) (i32.const 0))
          (table 2 funcref)
          (elem (i32.const 0) $write $main)
          (func $main (export "_start")
            (drop (call $write (i32.const 1) (i64.const 2)))
            (drop (call_indirect (param i32 i64) (result i32)
              (i32.const 1) (i64.const 2) (i32.const 0)))))"#;
        let moved = finish(&wat::parse_str(wat).unwrap()).unwrap();
        wasmparser::Validator::new().validate_all(&moved).unwrap();
        let text = listing(&moved);
        // The direct call is preceded by the reset; the table's entry is
        // now the thunk (function 3), which resets and calls the import.
        assert!(
            text.contains(
                "I32Const { value: 0 }\nGlobalSet { global_index: 1 }\nCall { function_index: 1 }"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "I32Const { value: 0 }\nGlobalSet { global_index: 1 }\nLocalGet { local_index: 0 }\n\
                 LocalGet { local_index: 1 }\nCall { function_index: 1 }\nEnd"
            ),
            "{text}"
        );
        let elements: Vec<u32> = Parser::new(0)
            .parse_all(&moved)
            .filter_map(|p| match p.unwrap() {
                Payload::ElementSection(s) => Some(s),
                _ => None,
            })
            .flat_map(|s| s.into_iter().map(|e| e.unwrap().items))
            .flat_map(|items| match items {
                wasmparser::ElementItems::Functions(f) => {
                    f.into_iter().map(|f| f.unwrap()).collect()
                }
                wasmparser::ElementItems::Expressions(..) => vec![],
            })
            .collect();
        assert_eq!(elements, [3, 2]);
    }

    #[test]
    fn an_exported_import_and_a_ref_func_of_one_name_its_thunk() {
        let wat = r#"(module
          (import "atoll" "safepoint" (func $safepoint))
          (import "wasi" "clock" (func $clock (result i64)))
          (memory (export "memory") 1)
          (global $flag_at (export "atoll_flag_at") (mut i32) (i32.const 0))
          (global $state (export "atoll_asyncify_state") (mut i32) (i32.const 0))
          (export "clock" (func $clock))
          (elem declare func $clock)
          (func $main (export "_start")
            (drop (ref.func $clock))))"#;
        let moved = finish(&wat::parse_str(wat).unwrap()).unwrap();
        wasmparser::Validator::new().validate_all(&moved).unwrap();
        let text = listing(&moved);
        // One thunk (function 3) for both references; the safepoint import,
        // only ever called, has none.
        assert!(text.contains("export clock Func 3"), "{text}");
        assert!(text.contains("RefFunc { function_index: 3 }"), "{text}");
        assert!(
            text.ends_with(
                "I32Const { value: 0 }\nGlobalSet { global_index: 1 }\nCall { function_index: 1 }\nEnd"
            ),
            "{text}"
        );
        assert_eq!(text.matches("GlobalSet").count(), 1, "{text}");
    }

    #[test]
    fn a_module_without_the_flag_memory_passes_the_check() {
        check_reads_only(&wat::parse_str(PREPARED).unwrap()).unwrap();
    }

    #[test]
    fn a_prepared_module_that_writes_the_flags_is_refused() {
        let refused = |body: &str| {
            let wat = format!(
                r#"(module (import "atoll" "yield_flags" (memory 1 1 shared))
                     (memory (export "memory") 1)
                     (func (export "_start") {body}))"#
            );
            check_reads_only(&wat::parse_str(&wat).unwrap())
        };
        refused("(drop (i32.load 0 (i32.const 0)))").unwrap();
        for writes in [
            "(i32.store 0 (i32.const 0) (i32.const 0))",
            "(i32.store8 0 (i32.const 0) (i32.const 0))",
            "(drop (i32.atomic.rmw.xchg 0 (i32.const 0) (i32.const 0)))",
            "(memory.fill 0 (i32.const 0) (i32.const 0) (i32.const 4))",
            "(memory.copy 0 1 (i32.const 0) (i32.const 0) (i32.const 4))",
        ] {
            let e = refused(writes).unwrap_err();
            assert!(matches!(e, PrepareError::Unsupported(_)), "{writes}: {e}");
        }
        // Exporting it would hand it to anyone who links the module.
        let exported = r#"(module (import "atoll" "yield_flags" (memory 1 1 shared))
            (export "f" (memory 0)) (func (export "_start")))"#;
        assert!(check_reads_only(&wat::parse_str(exported).unwrap()).is_err());
        // Of another size, it is not the node's.
        let grown = r#"(module (import "atoll" "yield_flags" (memory 1 2 shared))
            (func (export "_start")))"#;
        assert!(check_reads_only(&wat::parse_str(grown).unwrap()).is_err());
    }
}
