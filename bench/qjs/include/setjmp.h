/* QuickJS's dtoa.c includes <setjmp.h> and uses nothing from it; wasi-libc
 * has no setjmp.h (wasm has no setjmp without its exception handling). */
