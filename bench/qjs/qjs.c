/*
 * qjs: QuickJS (Debian's source, unmodified) evaluating one script.
 *
 *   qjs FILE.js [ARGS...]
 *
 * The engine alone, with `print(...)` and `scriptArgs` as the script's only
 * window on the world: QuickJS's own qjs.c needs quickjs-libc, which wants
 * termios, signals, fork and dlopen that WASI does not have. Built for
 * wasm32-wasi (about 800 KiB, atoll's largest real program: `atoll bench
 * prepare`) and natively, from the same sources.
 */
#include <stdio.h>
#include <stdlib.h>

#include "quickjs.h"

#define JS_STACK (32 << 10)

static JSValue print(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv)
{
    (void)this_val;
    for (int i = 0; i < argc; i++) {
        const char *s = JS_ToCString(ctx, argv[i]);
        if (!s)
            return JS_EXCEPTION;
        fputs(s, stdout);
        if (i + 1 < argc)
            putchar(' ');
        JS_FreeCString(ctx, s);
    }
    putchar('\n');
    return JS_UNDEFINED;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, 2 * cap + 1);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

/* Prints the pending exception and its stack, as qjs does. */
static void report(JSContext *ctx)
{
    JSValue e = JS_GetException(ctx);
    const char *s = JS_ToCString(ctx, e);
    fprintf(stderr, "%s\n", s ? s : "exception");
    JS_FreeCString(ctx, s);
    if (JS_IsError(ctx, e)) {
        JSValue stack = JS_GetPropertyStr(ctx, e, "stack");
        if (!JS_IsUndefined(stack)) {
            const char *st = JS_ToCString(ctx, stack);
            if (st)
                fputs(st, stderr);
            JS_FreeCString(ctx, st);
        }
        JS_FreeValue(ctx, stack);
    }
    JS_FreeValue(ctx, e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: qjs FILE.js [ARGS...]\n");
        return 2;
    }
    size_t len;
    char *src = read_file(argv[1], &len);
    if (!src) {
        perror(argv[1]);
        return 1;
    }
    JSRuntime *rt = JS_NewRuntime();
    JSContext *ctx = rt ? JS_NewContext(rt) : NULL;
    if (!ctx) {
        fprintf(stderr, "qjs: cannot allocate a JS context\n");
        return 1;
    }
    /* The C stack is 1 MiB (-z stack-size), but wasmtime's own stack for
     * wasm frames runs out first: a deep recursion must end in a
     * RangeError, not a trap. */
    JS_SetMaxStackSize(rt, JS_STACK);
    JSValue global = JS_GetGlobalObject(ctx);
    JS_SetPropertyStr(ctx, global, "print", JS_NewCFunction(ctx, print, "print", 1));
    JSValue args = JS_NewArray(ctx);
    for (int i = 1; i < argc; i++)
        JS_SetPropertyUint32(ctx, args, i - 1, JS_NewString(ctx, argv[i]));
    JS_SetPropertyStr(ctx, global, "scriptArgs", args);
    JS_FreeValue(ctx, global);

    JSValue result = JS_Eval(ctx, src, len, argv[1], JS_EVAL_TYPE_GLOBAL);
    int status = 0;
    if (JS_IsException(result)) {
        report(ctx);
        status = 1;
    }
    JS_FreeValue(ctx, result);
    free(src);
    fflush(stdout);
    JS_FreeContext(ctx);
    JS_FreeRuntime(rt);
    return status;
}
