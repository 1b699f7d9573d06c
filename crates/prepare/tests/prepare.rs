//! What a prepared module looks like from the outside, and how bad input fails.

mod common;

use std::path::PathBuf;

use atoll_prepare::conventions::*;
use atoll_prepare::{content_hash, is_prepared, prepare, prepared_source, Options, PrepareError};
use wasmtime::{Engine, ExternType, Module, Mutability};

use common::runtime::{define_flags, engine, Flags};
use common::{options, prepare_wat, LOOPY_WAT};

#[test]
fn prepared_module_has_the_contract() {
    let input = wat::parse_str(LOOPY_WAT).unwrap();
    let output = prepare(&input, &options()).unwrap();
    let engine = engine();
    Module::validate(&engine, &output).expect("output validates");
    let module = Module::new(&engine, &output).unwrap();

    let export = |name: &str| {
        module
            .get_export(name)
            .unwrap_or_else(|| panic!("no export `{name}`"))
    };
    for name in [START_EXPORT, "run", "fib"] {
        assert!(matches!(export(name), ExternType::Func(_)), "{name}");
    }
    assert!(matches!(export(MEMORY_EXPORT), ExternType::Memory(_)));
    let ExternType::Global(flag) = export(FLAG_AT_GLOBAL) else {
        panic!("atoll_flag_at")
    };
    assert_eq!(flag.mutability(), Mutability::Var);
    let flags = module
        .imports()
        .find(|i| (i.module(), i.name()) == (FLAGS_MODULE, FLAGS_MEMORY))
        .expect("the flag memory is imported");
    let ExternType::Memory(flags) = flags.ty() else {
        panic!("the flags are not a memory")
    };
    assert!(flags.is_shared() && flags.minimum() == 1 && flags.maximum() == Some(1));
    for name in ["atoll_global_0", "atoll_global_2"] {
        let ExternType::Global(g) = export(name) else {
            panic!("{name}")
        };
        assert_eq!(g.mutability(), Mutability::Var, "{name}");
    }
    assert!(
        module.get_export("atoll_global_1").is_none(),
        "immutable global"
    );
    let globals = module
        .exports()
        .filter(|e| e.name().starts_with(GLOBAL_EXPORT_PREFIX))
        .count();
    assert_eq!(globals, 2);

    for name in [ASYNCIFY_STATE_GLOBAL, ASYNCIFY_DATA_GLOBAL] {
        assert!(matches!(export(name), ExternType::Global(_)), "{name}");
    }
    for (name, params, results) in [
        (ASYNCIFY_START_UNWIND, 1, 0),
        (ASYNCIFY_STOP_UNWIND, 0, 0),
        (ASYNCIFY_START_REWIND, 1, 0),
        (ASYNCIFY_STOP_REWIND, 0, 0),
        (ASYNCIFY_GET_STATE, 0, 1),
    ] {
        let ExternType::Func(f) = export(name) else {
            panic!("{name}")
        };
        assert_eq!(
            (f.params().len(), f.results().len()),
            (params, results),
            "{name}"
        );
    }

    let safepoint = module
        .imports()
        .find(|i| i.module() == SAFEPOINT_MODULE && i.name() == SAFEPOINT_NAME)
        .expect("imports atoll.safepoint");
    let ExternType::Func(ty) = safepoint.ty() else {
        panic!("safepoint is not a function")
    };
    assert_eq!((ty.params().len(), ty.results().len()), (0, 0));

    assert!(!is_prepared(&input));
    assert!(is_prepared(&output));
    assert_eq!(prepared_source(&output), Some(content_hash(&input)));
}

/// The exported Asyncify globals are the ones binaryen's functions set, so
/// that a runtime may set them instead of calling those.
#[test]
fn asyncify_globals_are_the_ones_its_functions_set() {
    let wasm = prepare(&wat::parse_str(LOOPY_WAT).unwrap(), &options()).unwrap();
    let engine = engine();
    let module = Module::new(&engine, &wasm).unwrap();
    let mut linker = wasmtime::Linker::new(&engine);
    define_flags(&mut linker, &Flags::new(&engine));
    linker.func_wrap("env", "tick", || {}).unwrap();
    linker
        .func_wrap(SAFEPOINT_MODULE, SAFEPOINT_NAME, || {})
        .unwrap();
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let global = |store: &mut wasmtime::Store<()>, name| {
        let g = instance.get_global(&mut *store, name).unwrap();
        assert_eq!(g.ty(&*store).mutability(), Mutability::Var, "{name}");
        g.get(&mut *store).unwrap_i32()
    };
    let memory = instance.get_memory(&mut store, MEMORY_EXPORT).unwrap();
    let area = asyncify_data_addr(memory.data_size(&store) as u64).unwrap();
    let end = memory.data_size(&store) as u32;
    let mut header = (area + ASYNCIFY_DATA_HEADER).to_le_bytes().to_vec();
    header.extend_from_slice(&end.to_le_bytes());
    memory.write(&mut store, area as usize, &header).unwrap();
    let call = |store: &mut wasmtime::Store<()>, name, args: &[wasmtime::Val]| {
        let f = instance.get_func(&mut *store, name).unwrap();
        f.call(&mut *store, args, &mut []).unwrap();
    };
    assert_eq!(
        global(&mut store, ASYNCIFY_STATE_GLOBAL),
        ASYNCIFY_STATE_NORMAL
    );
    let at = [wasmtime::Val::I32(area as i32)];
    for (func, args, state) in [
        (ASYNCIFY_START_UNWIND, &at[..], ASYNCIFY_STATE_UNWINDING),
        (ASYNCIFY_STOP_UNWIND, &[][..], ASYNCIFY_STATE_NORMAL),
        (ASYNCIFY_START_REWIND, &at[..], ASYNCIFY_STATE_REWINDING),
        (ASYNCIFY_STOP_REWIND, &[][..], ASYNCIFY_STATE_NORMAL),
    ] {
        call(&mut store, func, args);
        assert_eq!(
            global(&mut store, ASYNCIFY_STATE_GLOBAL),
            state,
            "after {func}"
        );
        assert_eq!(
            global(&mut store, ASYNCIFY_DATA_GLOBAL),
            area as i32,
            "after {func}"
        );
    }
}

/// The program sees its memory without the pages reserved for Asyncify, and
/// pages handed to it by `memory.grow` are zero even if the runtime left a
/// saved stack there.
#[test]
fn reserved_pages_are_invisible_to_the_program() {
    let wasm = prepare_wat(
        r#"(module
          (memory (export "memory") 2 40)
          (func (export "_start"))
          (func (export "size") (result i32) (memory.size))
          (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
    );
    let engine = engine();
    let module = Module::new(&engine, &wasm).unwrap();
    let mut linker = wasmtime::Linker::new(&engine);
    define_flags(&mut linker, &Flags::new(&engine));
    linker
        .func_wrap(SAFEPOINT_MODULE, SAFEPOINT_NAME, || {})
        .unwrap();
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let size = instance
        .get_typed_func::<(), i32>(&mut store, "size")
        .unwrap();
    let grow = instance
        .get_typed_func::<i32, i32>(&mut store, "grow")
        .unwrap();
    let memory = instance.get_memory(&mut store, MEMORY_EXPORT).unwrap();
    let page = WASM_PAGE_SIZE as usize;
    let reserved = ASYNCIFY_RESERVED_PAGES as usize;
    let dirty = instance.get_global(&mut store, AREA_DIRTY_GLOBAL).unwrap();
    // As the runtime does: what it writes there, it says it wrote.
    let dirty_reserved = |store: &mut wasmtime::Store<()>| {
        let real = memory.data_size(&*store);
        assert_eq!(
            asyncify_data_addr(real as u64),
            Some((real - reserved * page) as u32)
        );
        memory.data_mut(&mut *store)[real - reserved * page..].fill(0xaa);
        dirty
            .set(&mut *store, wasmtime::Val::I32((reserved * page) as i32))
            .unwrap();
    };

    assert_eq!(size.call(&mut store, ()).unwrap(), 2);
    assert_eq!(memory.data_size(&store), (2 + reserved) * page);
    for (n, old) in [(1, 2), (0, 3), (reserved as i32 + 3, 3)] {
        dirty_reserved(&mut store);
        assert_eq!(grow.call(&mut store, n).unwrap(), old, "grow({n})");
        let new = old as usize + n as usize;
        assert_eq!(size.call(&mut store, ()).unwrap() as usize, new);
        assert_eq!(memory.data_size(&store), (new + reserved) * page);
        let handed_over = &memory.data(&store)[old as usize * page..new * page];
        assert!(
            handed_over.iter().all(|&b| b == 0),
            "grow({n}) handed over dirty pages"
        );
    }
    // The program's maximum (40 pages) still holds.
    let program_pages = size.call(&mut store, ()).unwrap();
    assert_eq!(grow.call(&mut store, 40 - program_pages + 1).unwrap(), -1);
    assert_eq!(
        grow.call(&mut store, 40 - program_pages).unwrap(),
        program_pages
    );
}

#[test]
fn preparing_twice_changes_nothing() {
    let once = prepare_wat(LOOPY_WAT);
    let twice = prepare(&once, &options()).unwrap();
    assert_eq!(once, twice);
    // Not even binaryen is needed the second time.
    let no_binaryen = Options {
        wasm_opt: PathBuf::from("/nonexistent/wasm-opt"),
        optimize: true,
    };
    assert_eq!(prepare(&once, &no_binaryen).unwrap(), once);
}

#[test]
fn without_optimisation_it_still_works_but_is_bigger() {
    let input = wat::parse_str(LOOPY_WAT).unwrap();
    let plain = Options {
        optimize: false,
        ..options()
    };
    let unoptimised = prepare(&input, &plain).unwrap();
    let optimised = prepare(&input, &options()).unwrap();
    Module::validate(&Engine::default(), &unoptimised).unwrap();
    assert!(
        unoptimised.len() > optimised.len(),
        "{} <= {}",
        unoptimised.len(),
        optimised.len()
    );
}

#[test]
fn garbage_is_malformed() {
    let valid = wat::parse_str(LOOPY_WAT).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("text", b"hello, world".to_vec()),
        ("wat source", LOOPY_WAT.as_bytes().to_vec()),
        ("magic only", b"\0asm".to_vec()),
        ("component", b"\0asm\x0d\0\x01\0".to_vec()),
        ("truncated", valid[..valid.len() / 2].to_vec()),
        ("truncated by one", valid[..valid.len() - 1].to_vec()),
        ("bad opcode", {
            // The last byte of this module is the `end` of its last body.
            let mut v = wat::parse_str(NAMELESS_WAT).unwrap();
            *v.last_mut().unwrap() = 0xff;
            v
        }),
    ];
    for (what, bytes) in cases {
        match prepare(&bytes, &options()) {
            Err(PrepareError::Malformed(why)) => assert!(!why.is_empty(), "{what}"),
            Err(other) => panic!("{what}: expected Malformed, got {other:?}"),
            Ok(out) => panic!("{what}: accepted, {} bytes out", out.len()),
        }
        assert!(!is_prepared(&bytes), "{what}");
    }
}

#[test]
fn valid_but_not_a_command() {
    let wasm = wat::parse_str(r#"(module (func (export "f")))"#).unwrap();
    let err = prepare(&wasm, &options()).unwrap_err();
    assert!(matches!(err, PrepareError::NotACommand(_)), "{err}");
    assert!(err.to_string().contains("_start"), "{err}");
}

#[test]
fn missing_wasm_opt_is_reported() {
    let wasm = wat::parse_str(LOOPY_WAT).unwrap();
    let path = PathBuf::from("/nonexistent/wasm-opt");
    let options = Options {
        wasm_opt: path.clone(),
        optimize: true,
    };
    match prepare(&wasm, &options) {
        Err(PrepareError::WasmOptMissing { path: p }) => assert_eq!(p, path),
        other => panic!("expected WasmOptMissing, got {other:?}"),
    }
}

#[test]
fn failing_wasm_opt_is_reported() {
    let wasm = wat::parse_str(LOOPY_WAT).unwrap();
    let options = Options {
        wasm_opt: PathBuf::from("false"),
        optimize: true,
    };
    match prepare(&wasm, &options) {
        Err(PrepareError::WasmOptFailed { status, .. }) => assert!(!status.success()),
        other => panic!("expected WasmOptFailed, got {other:?}"),
    }
}

/// A command without `$names`, so that its binary has no name section and
/// ends with its code section.
const NAMELESS_WAT: &str = r#"
(module
  (import "env" "tick" (func))
  (memory (export "memory") 1)
  (global (mut i32) (i32.const 0))
  (func (export "_start")
    (loop (call 0) (br_if 0 (global.get 0)))))
"#;

#[test]
fn nameless_command_prepares() {
    let wasm = wat::parse_str(NAMELESS_WAT).unwrap();
    let prepared = prepare(&wasm, &options()).unwrap();
    Module::validate(&Engine::default(), &prepared).unwrap();
}

/// A command wasm-smith made (the generated-module fuzzer, shrunk), with a
/// `funcref` local set by `ref.func`, which wasmtime runs: binaryen 108
/// prepares it into a module with a type in a draft encoding that reads as
/// a GC type. It is refused with that reason, not prepared into a module
/// that cannot run, and it still runs unprepared.
#[test]
fn what_binaryen_would_break_is_refused_with_its_reason() {
    let wasm = hex::decode(
        "0061736d010000000108026000017f600000030201010404017000020503010001060d017c01440000\
         0000000000000b071302065f73746172740000066d656d6f727902000907010041000b01000c01020a\
         2c012a02017e017fd2002300fc06b9994100ac5021014300000000a82c0000047f420000000541000b\
         1a1a1a0b0b0a020041000b0100010100",
    )
    .unwrap();
    Module::new(&Engine::default(), &wasm).expect("wasmtime runs it as it is");
    let err = prepare(&wasm, &options()).unwrap_err();
    assert!(matches!(err, PrepareError::Unsupported(_)), "{err}");
    let said = err.to_string();
    assert!(
        said.contains("gc types are disallowed") && said.contains("--no-prepare"),
        "{said}"
    );
}
