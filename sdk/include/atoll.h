/*
 * atoll.h - the guest side of atoll's own system calls.
 *
 * A C program built with atoll-cc (wasm32-wasi) includes this header to ask
 * the atoll runtime who and where it is, and to spawn, wait for and kill other
 * processes. Everything else (files, clocks, stdio, exit) is plain WASI
 * preview1 through wasi-libc.
 *
 * Calling convention
 *   Every call that can fail returns 0 on success or a positive error number.
 *   The numbers are WASI errno values, which are exactly wasi-libc's <errno.h>
 *   constants (EFAULT, ENOENT, EINVAL, ECHILD, ESRCH, ...), so they can be
 *   compared with those names or passed to strerror(). The global errno is
 *   never read or written: the result is the whole story.
 *
 * Threads
 *   None needed and none taken: an atoll process is single-threaded, so these
 *   wrappers keep no locks and no hidden state.
 *
 * Safepoints
 *   Every call that enters the runtime (all of them except the pure
 *   atoll_pid_* helpers) is a safepoint: the process may be frozen there,
 *   moved to another kernel or node, and resumed. The pid stays the same;
 *   atoll_kernel() tells where the process runs now.
 *
 * The raw imports (__atoll_*) are the fixed ABI the runtime implements. They
 * are declared here so that tests can call them directly; programs should use
 * the atoll_* wrappers, which take care of buffers and NULL out-pointers.
 */
#ifndef ATOLL_H
#define ATOLL_H

#if !defined(__wasm32__)
#error "atoll.h is for wasm32-wasi guests: build with sdk/bin/atoll-cc"
#endif

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- PIDs */

/*
 * A pid is global and stable for the life of the process, across moves.
 * Packed high to low: node:16 | kernel:16 | slot:16 | generation:16.
 * node.kernel is the process's home kernel (where it was created, which always
 * knows where it runs now), not necessarily where it runs; the generation
 * makes a reused slot a different pid.
 */
typedef int64_t atoll_pid_t;

/* atoll_wait(): any child (all bits set). */
#define ATOLL_ANY ((atoll_pid_t)-1)

/* atoll_spawn(): let the runtime pick the kernel. */
#define ATOLL_KERNEL_ANY (-1)

/* "65535.65535:65535:65535" plus the NUL. */
#define ATOLL_PID_STRLEN 24

static inline int atoll_pid_node(atoll_pid_t pid)
{
    return (int)(((uint64_t)pid >> 48) & 0xFFFF);
}

static inline int atoll_pid_kernel(atoll_pid_t pid)
{
    return (int)(((uint64_t)pid >> 32) & 0xFFFF);
}

static inline int atoll_pid_slot(atoll_pid_t pid)
{
    return (int)(((uint64_t)pid >> 16) & 0xFFFF);
}

static inline int atoll_pid_generation(atoll_pid_t pid)
{
    return (int)((uint64_t)pid & 0xFFFF);
}

/* Writes a decimal field and returns the position after it. */
static inline char *atoll_pid_put_field_(char *out, unsigned v)
{
    char digits[5];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    while (n > 0)
        *out++ = digits[--n];
    return out;
}

/*
 * Formats pid as "node.kernel:slot:generation", e.g. "0.1:5:0", and returns
 * buf so that it can be used inline in printf. Hand-rolled rather than
 * snprintf so that including this header never drags printf into a module.
 */
static inline char *atoll_pid_format(char buf[ATOLL_PID_STRLEN], atoll_pid_t pid)
{
    char *p = buf;
    p = atoll_pid_put_field_(p, (unsigned)atoll_pid_node(pid));
    *p++ = '.';
    p = atoll_pid_put_field_(p, (unsigned)atoll_pid_kernel(pid));
    *p++ = ':';
    p = atoll_pid_put_field_(p, (unsigned)atoll_pid_slot(pid));
    *p++ = ':';
    p = atoll_pid_put_field_(p, (unsigned)atoll_pid_generation(pid));
    *p = '\0';
    return buf;
}

/* -------------------------------------------------------- wait status */

/*
 * The status that atoll_wait() reports for a child:
 *   n            the code given to exit() or returned from main;
 *   128 + sig    the child was killed with atoll_kill(pid, sig);
 *   134          the child trapped (division by zero, out-of-bounds access,
 *                unreachable, stack exhaustion...). 134 is 128 + SIGABRT,
 *                what a shell shows for a crashed native program, so scripts
 *                read it the same way.
 * A child that calls exit(134) or exit(128 + sig) is indistinguishable from
 * one that trapped or was killed, as with POSIX shells.
 */
#define ATOLL_STATUS_TRAPPED 134

/*
 * Signal numbers for atoll_kill(). Only their value matters (it shows up in
 * the wait status); there are no handlers. Linux numbering, so statuses read
 * as they would natively (143 = terminated, 137 = killed).
 */
#define ATOLL_SIGKILL 9
#define ATOLL_SIGTERM 15

/* ------------------------------------------------------- raw imports */

#define ATOLL_IMPORT_(name) \
    __attribute__((import_module("atoll"), import_name(name)))

/* Pointers are i32 and pids i64 on the wire; wasm32 C types match that. */
int64_t __atoll_getpid(void) ATOLL_IMPORT_("getpid");
int32_t __atoll_kernel(void) ATOLL_IMPORT_("kernel");
int32_t __atoll_kernel_count(void) ATOLL_IMPORT_("kernel_count");
int32_t __atoll_spawn(const char *module, int32_t module_len,
                      const char *argv_buf, int32_t argv_buf_len,
                      int32_t kernel, atoll_pid_t *pid_out)
    ATOLL_IMPORT_("spawn");
int32_t __atoll_wait(atoll_pid_t pid, int32_t *status_out, atoll_pid_t *pid_out)
    ATOLL_IMPORT_("wait");
int32_t __atoll_kill(atoll_pid_t pid, int32_t signal) ATOLL_IMPORT_("kill");

#undef ATOLL_IMPORT_

/* ----------------------------------------------------------- wrappers */

/* This process's pid. */
static inline atoll_pid_t atoll_getpid(void)
{
    return __atoll_getpid();
}

/* The kernel the process runs on right now: (node << 16) | index. */
static inline int atoll_kernel(void)
{
    return __atoll_kernel();
}

/* Index of the current kernel on its node: 0 .. atoll_kernel_count() - 1. */
static inline int atoll_kernel_index(void)
{
    return __atoll_kernel() & 0xFFFF;
}

/* Node of the current kernel. */
static inline int atoll_kernel_node(void)
{
    return (__atoll_kernel() >> 16) & 0xFFFF;
}

/* Number of kernels on this node (valid kernel arguments to atoll_spawn). */
static inline int atoll_kernel_count(void)
{
    return __atoll_kernel_count();
}

/*
 * Starts a new process, a child of this one.
 *   module  path of a .wasm module, resolved through this process's preopened
 *           directories like any file it opens; NULL runs this process's own
 *           module.
 *   argv    NULL-terminated, argv[0] included (as for execv); at least argv[0]
 *           is required, as every program expects one.
 *   kernel  index of a kernel on this node, or ATOLL_KERNEL_ANY.
 *   pid     receives the child's pid; may be NULL.
 * Returns 0, or EINVAL, ENOMEM, ENOENT (no such module), ... from the runtime.
 */
static inline int atoll_spawn(const char *module, char *const argv[], int kernel,
                              atoll_pid_t *pid)
{
    if (argv == NULL || argv[0] == NULL)
        return EINVAL;

    /* The ABI takes argv as one buffer of back-to-back NUL-terminated strings. */
    size_t len = 0;
    for (size_t i = 0; argv[i] != NULL; i++) {
        size_t n = strlen(argv[i]) + 1;
        if (n > (size_t)INT32_MAX - len)
            return E2BIG;
        len += n;
    }
    char *buf = (char *)malloc(len);
    if (buf == NULL)
        return ENOMEM;
    char *p = buf;
    for (size_t i = 0; argv[i] != NULL; i++) {
        size_t n = strlen(argv[i]) + 1;
        memcpy(p, argv[i], n);
        p += n;
    }

    size_t module_len = module != NULL ? strlen(module) : 0;
    if (module_len > (size_t)INT32_MAX) {
        free(buf);
        return E2BIG;
    }

    /* Address 0 is valid wasm memory, so a NULL out-pointer must never reach
     * the runtime: it would silently overwrite whatever lives there. */
    atoll_pid_t child = 0;
    int err = __atoll_spawn(module, (int32_t)module_len, buf, (int32_t)len,
                            kernel, &child);
    free(buf);
    if (err == 0 && pid != NULL)
        *pid = child;
    return err;
}

/*
 * Waits until the child pid (or any child, with ATOLL_ANY) has ended and
 * reaps it. status receives its wait status (see ATOLL_STATUS_TRAPPED) and
 * child its pid; either may be NULL. Returns 0, or ECHILD when there is no
 * such child of this process.
 */
static inline int atoll_wait(atoll_pid_t pid, int *status, atoll_pid_t *child)
{
    int32_t st = 0;
    atoll_pid_t who = 0;
    int err = __atoll_wait(pid, &st, &who);
    if (err == 0) {
        if (status != NULL)
            *status = st;
        if (child != NULL)
            *child = who;
    }
    return err;
}

/*
 * Ends process pid wherever it runs; its wait status becomes 128 + signal.
 * Returns 0, or ESRCH when no such process exists.
 */
static inline int atoll_kill(atoll_pid_t pid, int signal)
{
    return __atoll_kill(pid, signal);
}

#ifdef __cplusplus
}
#endif

#endif /* ATOLL_H */
