/*
 * trap - dies of a WebAssembly trap of the chosen kind, to check that a
 * crashing process is contained and reported (wait status 134).
 *
 *   trap div0|unreachable|oob|stack|shadow|mangled
 *
 *   div0         integer division by zero (i32.div_s traps in wasm)
 *   unreachable  __builtin_trap(), the wasm `unreachable` instruction
 *   oob          a load from 0xFFFFFFF0, far past the end of linear memory
 *   stack        unbounded recursion that exhausts the engine's call stack
 *   shadow       unbounded recursion with a buffer in each frame, which
 *                exhausts the C stack in linear memory; atoll-cc links with
 *                --stack-first, so this runs off address 0 and traps
 *   mangled      `unreachable` in functions whose symbols are mangled as
 *                rustc (v0) and clang++ name theirs, so that the report
 *                shows them demangled: std::process::abort, app::crash(int)
 *
 * Expected: "about to trap: KIND" (flushed), then the trap: no further output,
 * no exit status of its own. If the trap somehow does not happen it prints
 * "trap: KIND did not trap" and exits 1; an unknown KIND exits 2.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Results go here so that the compiler cannot drop the faulting operations. */
static volatile int sink;

/* Never returning is the point of the two functions below. */
#pragma clang diagnostic ignored "-Winfinite-recursion"

__attribute__((noinline)) static int recurse(int depth)
{
    sink = depth;
    int r = recurse(depth + 1);
    sink = r; /* work after the call: no tail call, every frame stays */
    return r;
}

__attribute__((noinline)) static int recurse_with_buffer(int depth)
{
    volatile char buffer[256]; /* volatile: must live in linear memory */
    buffer[depth & 255] = (char)depth;
    int r = recurse_with_buffer(depth + 1);
    sink = r + buffer[0];
    return r;
}

/* The names rustc gives std::process::abort and clang++ app::crash(int). */
__attribute__((noinline)) static void rust_abort(void)
    __asm__("_RNvNtCs6TxCtTcuIIP_3std7process5abort");
__attribute__((noinline)) static void cpp_crash(int why) __asm__("_ZN3app5crashEi");

static void rust_abort(void)
{
    __builtin_trap();
}

static void cpp_crash(int why)
{
    sink = why;
    rust_abort();
    sink = 0; /* not a tail call: both frames stay */
}

int main(int argc, char **argv)
{
    const char *kind = argc > 1 ? argv[1] : "";
    if (strcmp(kind, "div0") && strcmp(kind, "unreachable") &&
        strcmp(kind, "oob") && strcmp(kind, "stack") && strcmp(kind, "shadow") &&
        strcmp(kind, "mangled")) {
        fprintf(stderr, "usage: trap div0|unreachable|oob|stack|shadow|mangled\n");
        return 2;
    }

    printf("about to trap: %s\n", kind);
    fflush(stdout);

    if (strcmp(kind, "div0") == 0) {
        /* Both operands volatile: with a constant numerator the compiler may
         * turn the division into a compare-and-select that cannot trap. */
        volatile int numerator = 7, zero = 0;
        sink = numerator / zero;
    } else if (strcmp(kind, "unreachable") == 0) {
        __builtin_trap();
    } else if (strcmp(kind, "oob") == 0) {
        volatile int *far = (volatile int *)(uintptr_t)0xFFFFFFF0u;
        sink = *far;
    } else if (strcmp(kind, "mangled") == 0) {
        cpp_crash(42);
    } else if (strcmp(kind, "stack") == 0) {
        sink = recurse(0);
    } else {
        sink = recurse_with_buffer(0);
    }

    printf("trap: %s did not trap\n", kind);
    return 1;
}
