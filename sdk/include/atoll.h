/*
 * atoll.h - the guest side of atoll's own system calls.
 *
 * A C program built with atoll-cc (wasm32-wasi) includes this header to ask
 * the atoll runtime who and where it is, to spawn, wait for and kill other
 * processes, and to exchange messages and memory with them (Minix 3 IPC,
 * grants and domains). Everything else (files, clocks, stdio, exit) is plain WASI
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

/* atoll_spawn(), atoll_fork(), atoll_exec(): the kernel the DQDT chooses,
 * the least loaded of every node's (DESIGN.md, "Placement"). */
#define ATOLL_KERNEL_ANY (-1)

/*
 * A kernel argument (atoll_spawn, kmigrate_to) is the index of a kernel on
 * the caller's node, or ATOLL_KERNEL(node, index) for kernel `index` of
 * any node of the cluster (nodes 0 to 16383).
 */
#define ATOLL_KERNEL(node, index) \
    ((int)(0x40000000u | (((unsigned)(node) & 0x3FFFu) << 16) | ((unsigned)(index) & 0xFFFFu)))

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
int32_t __atoll_migrate_to(int32_t kernel) ATOLL_IMPORT_("migrate_to");
int32_t __atoll_fork(int32_t kernel, atoll_pid_t *pid_out) ATOLL_IMPORT_("fork");
int32_t __atoll_exec(const char *module, int32_t module_len, const char *argv_buf,
                     int32_t argv_buf_len, int32_t kernel) ATOLL_IMPORT_("exec");

int32_t __atoll_ipc_send(atoll_pid_t to, void *msg) ATOLL_IMPORT_("ipc_send");
int32_t __atoll_ipc_sendnb(atoll_pid_t to, void *msg) ATOLL_IMPORT_("ipc_sendnb");
int32_t __atoll_ipc_senda(atoll_pid_t to, void *msg) ATOLL_IMPORT_("ipc_senda");
int32_t __atoll_ipc_senda_more(atoll_pid_t to, void *msg) ATOLL_IMPORT_("ipc_senda_more");
int32_t __atoll_ipc_senda_body(atoll_pid_t to, void *msg, const void *body, uint32_t len)
    ATOLL_IMPORT_("ipc_senda_body");
int32_t __atoll_ipc_body(void *buf, uint32_t len) ATOLL_IMPORT_("ipc_body");
int32_t __atoll_ipc_sendrec(atoll_pid_t to, void *msg) ATOLL_IMPORT_("ipc_sendrec");
int32_t __atoll_ipc_receive(atoll_pid_t from, void *msg, int32_t *status)
    ATOLL_IMPORT_("ipc_receive");
int32_t __atoll_ipc_receivenb(atoll_pid_t from, void *msg, int32_t *status)
    ATOLL_IMPORT_("ipc_receivenb");
int32_t __atoll_ipc_notify(atoll_pid_t to) ATOLL_IMPORT_("ipc_notify");
int32_t __atoll_grant(atoll_pid_t grantee, const void *addr, uint32_t len,
                      uint32_t access, uint32_t *id_out) ATOLL_IMPORT_("grant");
int32_t __atoll_revoke(uint32_t id) ATOLL_IMPORT_("revoke");
int32_t __atoll_vcopy(atoll_pid_t src, const void *src_addr, atoll_pid_t dst,
                      void *dst_addr, uint32_t len) ATOLL_IMPORT_("vcopy");
int32_t __atoll_safecopy_from(atoll_pid_t owner, uint32_t grant, uint32_t offset,
                              void *addr, uint32_t len) ATOLL_IMPORT_("safecopy_from");
int32_t __atoll_safecopy_to(atoll_pid_t owner, uint32_t grant, uint32_t offset,
                            const void *addr, uint32_t len) ATOLL_IMPORT_("safecopy_to");
int32_t __atoll_bind(const char *name, uint32_t name_len) ATOLL_IMPORT_("bind");
int32_t __atoll_unbind(void) ATOLL_IMPORT_("unbind");
int64_t __atoll_domain(void) ATOLL_IMPORT_("domain");

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

/* argv as the ABI takes it: one malloc'd buffer of back-to-back
 * NUL-terminated strings (*len bytes); and the module name's length. */
static inline int atoll_argv_buffer_(const char *module, char *const argv[], char **buf,
                                     size_t *len, size_t *module_len)
{
    if (argv == NULL || argv[0] == NULL)
        return EINVAL;
    *len = 0;
    for (size_t i = 0; argv[i] != NULL; i++) {
        size_t n = strlen(argv[i]) + 1;
        if (n > (size_t)INT32_MAX - *len)
            return E2BIG;
        *len += n;
    }
    *module_len = module != NULL ? strlen(module) : 0;
    if (*module_len > (size_t)INT32_MAX)
        return E2BIG;
    *buf = (char *)malloc(*len);
    if (*buf == NULL)
        return ENOMEM;
    char *p = *buf;
    for (size_t i = 0; argv[i] != NULL; i++) {
        size_t n = strlen(argv[i]) + 1;
        memcpy(p, argv[i], n);
        p += n;
    }
    return 0;
}

/*
 * Starts a new process, a child of this one.
 *   module  path of a .wasm module, resolved through this process's preopened
 *           directories like any file it opens; NULL runs this process's own
 *           module.
 *   argv    NULL-terminated, argv[0] included (as for execv); at least argv[0]
 *           is required, as every program expects one.
 *   kernel  index of a kernel on this node, ATOLL_KERNEL(node, index), or
 *           ATOLL_KERNEL_ANY.
 *   pid     receives the child's pid; may be NULL.
 *           A directory of another node (one the job was started with
 *           there) is read there: that node's file is the module.
 * Returns 0, or EINVAL, ENOMEM, ENOENT (no such module), ENOEXEC (not a
 * module), EIO (the directory's node was lost meanwhile), EAGAIN (the job
 * or the domain has its --max-processes alive), ... from the runtime.
 */
static inline int atoll_spawn(const char *module, char *const argv[], int kernel,
                              atoll_pid_t *pid)
{
    char *buf;
    size_t len, module_len;
    int err = atoll_argv_buffer_(module, argv, &buf, &len, &module_len);
    if (err != 0)
        return err;
    /* Address 0 is valid wasm memory, so a NULL out-pointer must never reach
     * the runtime: it would silently overwrite whatever lives there. */
    atoll_pid_t child = 0;
    err = __atoll_spawn(module, (int32_t)module_len, buf, (int32_t)len, kernel, &child);
    free(buf);
    if (err == 0 && pid != NULL)
        *pid = child;
    return err;
}

/*
 * Replaces this process's program with `module` (as atoll_spawn finds it;
 * NULL: its own module again) run with `argv`, as execv does: the PID,
 * parent, children, console, domain, pending IPC, open descriptors, limits
 * and CPU time stay; memory, globals and grants start afresh. Given a
 * kernel, the process also moves there before the new program's first
 * instruction, as ALMOS-MK's exec does; with ATOLL_KERNEL_ANY it moves to
 * the kernel the DQDT chooses (the least loaded, which may be its own).
 * Returns only on failure, with the old program intact: EINVAL, ENOENT,
 * ENOEXEC (not a module), EIO (the module's directory is another node's,
 * which was lost meanwhile), ENOMEM, ENOTSUP (a module run unprepared).
 */
static inline int atoll_exec(const char *module, char *const argv[], int kernel)
{
    char *buf;
    size_t len, module_len;
    int err = atoll_argv_buffer_(module, argv, &buf, &len, &module_len);
    if (err != 0)
        return err;
    err = __atoll_exec(module, (int32_t)module_len, buf, (int32_t)len, kernel);
    free(buf);
    return err;
}

/*
 * fork() for WebAssembly: copies this process (memory, globals, stack, open
 * descriptors, environment, domain, limits) into a new child, which starts
 * on `kernel` (an index on this node, ATOLL_KERNEL(node, index), or
 * ATOLL_KERNEL_ANY) and returns from this same call.
 * Returns the child's pid in the parent, 0 in the child, or -errno in the
 * parent when there is no child (-ENOMEM, -EINVAL for a kernel that does not
 * exist, -ENOTSUP in a module run without `atoll prepare`, -EAGAIN when the
 * job or the domain has its --max-processes alive).
 * Unlike POSIX, parent and child do not share file offsets: kernels share
 * nothing, so each process has its own copy of every descriptor. A child
 * that cannot be moved to `kernel` runs on its parent's (the parent is told
 * on stderr). The child holds no grants and no pending IPC of its parent.
 */
static inline atoll_pid_t atoll_fork(int kernel)
{
    atoll_pid_t pid = 0;
    int err = __atoll_fork(kernel, &pid);
    return err != 0 ? -(atoll_pid_t)err : pid;
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
 * Returns 0, ESRCH when no such process exists, or EPERM when it is in
 * another domain (domains isolate processes; `atoll kill` may end any).
 */
static inline int atoll_kill(atoll_pid_t pid, int signal)
{
    return __atoll_kill(pid, signal);
}

/*
 * Moves this process to kernel `kernel` (an index on this node, or
 * ATOLL_KERNEL(node, index) on any node) and returns there: the pid, domain,
 * grants, pending notifications, open files and output stay the same.
 * Within the node, the node's migration mode decides how (`atoll node
 * --migrate-mode`: hand-over, or copy with pre-copy); to another node it is
 * always copied. Returns 0 (also when it already runs there), EINVAL for a
 * kernel that does not exist, or EAGAIN when the destination could not take
 * it or cannot be reached (the process then goes on where it was). Asked
 * while another move of it is under way (the balancer's, an operator's),
 * the move waits for that one and starts from where it leaves the process.
 */
static inline int atoll_migrate_to(int kernel)
{
    return __atoll_migrate_to(kernel);
}

/* Nanvix's name. */
#define kmigrate_to atoll_migrate_to

/* ------------------------------------------------ IPC (Minix 3) */

/*
 * Message passing between atoll processes with Minix 3's semantics, wherever
 * the two processes run (same kernel, another core): the code is the same.
 *
 *   ipc_send(to, &m)        blocks until `to` has received m (rendezvous).
 *   ipc_receive(from, &m, &status)
 *                           blocks until a message from `from` (a pid or
 *                           ANY) arrives; pending notifications come first.
 *                           status (may be NULL) receives how it was sent:
 *                           IPC_STATUS_CALL(status) is SEND, SENDREC, NOTIFY,
 *                           SENDNB or SENDA; IPC_STATUS_MORE(status) says
 *                           whether more from `from` were waiting.
 *   ipc_sendrec(to, &m)     sends m and waits for the reply from `to`, which
 *                           overwrites m (the server answers with ipc_send).
 *   ipc_notify(to)          never blocks; delivered at to's next receive as a
 *                           message of type NOTIFY_MESSAGE with m_source set.
 *                           Several notifications from one source coalesce.
 *   ipc_sendnb(to, &m)      fails with ENOTREADY unless `to` is waiting.
 *   ipc_senda(to, &m)       never blocks: m is copied and queued for `to`,
 *                           which receives it like a sent message (status
 *                           SENDA). The letters of one sender reach one
 *                           receiver in the order sent, wherever either
 *                           moves. At most ATOLL_ASYNC_WINDOW may be untaken:
 *                           past that it fails with EAGAIN, and the caller
 *                           is notified (as if by `to`) when there is room.
 *                           A letter that cannot be delivered (the receiver
 *                           ended, or is in another domain) makes the next
 *                           ipc_senda to `to` fail with EDEADSRCDST or
 *                           ECALLDENIED (Minix's senda reports errors late
 *                           too). Not to oneself: EINVAL.
 *   ipc_senda_more(to, &m)  ipc_senda, saying that more letters follow at
 *                           once (as MSG_MORE does for a socket): to a
 *                           process on another node the letter may wait
 *                           for them, to share one write. It goes at the
 *                           latest when the caller next waits or its slice
 *                           ends.
 *   ipc_senda_body(to, &m, body, len)
 *                           ipc_senda with up to ATOLL_BODY_MAX bytes that
 *                           travel with the letter, copied at the call (one
 *                           crossing to another node, where a grant and a
 *                           copy take three). The receiver finds their
 *                           length in IPC_STATUS_BODY(status) and takes them
 *                           with ipc_body. Besides ATOLL_ASYNC_WINDOW
 *                           letters, a sender may have ATOLL_BODY_WINDOW
 *                           bytes of bodies untaken by one receiver (and one
 *                           letter, however large): past that EAGAIN, as
 *                           above. len > ATOLL_BODY_MAX: EMSGSIZE.
 *   ipc_body(buf, len)      copies the first len bytes (at most all) of the
 *                           body of the message received last; they stay
 *                           until the next receive. ENOMSG if it has none.
 *   ipc_receivenb(from, &m, &status)
 *                           receives as ipc_receive if a notification or a
 *                           waiting sender is there, else fails with
 *                           ENOTREADY at once (Minix's receivenb: polling).
 *
 * m_source is always set by the runtime: a receiver knows who sent.
 * Endpoints are pids; SELF is the caller and ANY any process (receive only).
 * A process takes part in IPC only inside its domain: `atoll run --domain`
 * chooses it, children inherit it, atoll_unbind()/atoll_bind() change it.
 *
 * Errors (returned, never in errno):
 *   ELOCKED      the call would close a cycle of processes blocked on each
 *                other (including sending to or receiving from oneself).
 *   EDEADSRCDST  the peer does not exist, or ended while the caller waited,
 *                or was lost with its node.
 *   EBADSRCDST   the endpoint is not a pid, or names a kernel of this node
 *                that does not exist.
 *   ENOTREADY    ipc_sendnb: the receiver is not waiting; ipc_receivenb:
 *                nothing to receive yet.
 *   ECALLDENIED  the peer is in another domain, or the caller is in none.
 *   EFAULT       a message or status pointer outside the caller's memory.
 */

#define ANY ((atoll_pid_t)-1)
#define SELF ((atoll_pid_t)-2)

#define ELOCKED 100
#define EDEADSRCDST 101
#define EBADSRCDST 102
#define ENOTREADY 103
#define ECALLDENIED 104

/* How a message was sent (Minix's call numbers). */
#define SEND 1
#define SENDREC 3
#define NOTIFY 4
#define SENDNB 5
#define SENDA 16
#define IPC_STATUS_CALL(status) ((status) & 0xFF)
/* Bytes of the received message's body (ipc_senda_body), 0 if none. */
#define IPC_STATUS_BODY(status) (((uint32_t)(status) >> 8) & 0x7FFFFF)
/* 1 if another message from the same `from` was already waiting when this
 * one was received: the next receive from it returns at once (unless a
 * sender blocked in ipc_send ends or moves meanwhile: letters and
 * notifications stay). 0 says nothing more had come yet: a loop that
 * drains what came stops there, rather than make a last ipc_receivenb
 * that finds nothing. */
#define IPC_STATUS_MORE(status) ((uint32_t)(status) >> 31)

/* Letters of ipc_senda one sender may have untaken by one receiver. */
#define ATOLL_ASYNC_WINDOW 64
/* The largest body of a letter, and the bytes of bodies one sender may have
 * untaken by one receiver (beyond one letter's). */
#define ATOLL_BODY_MAX (64 * 1024)
#define ATOLL_BODY_WINDOW (256 * 1024)

/* m_type of a notification. */
#define NOTIFY_MESSAGE 0x1000

/* Payload bytes: 52, as the 64-bit m_source leaves of a 64-byte message. */
#define ATOLL_PAYLOAD_SIZE 52

/* A message: 64 bytes, one cache line. */
typedef struct {
    atoll_pid_t m_source;
    int32_t m_type;
    /* 4-aligned so that the payload starts at byte 12, as in the runtime. */
    union __attribute__((packed, aligned(4))) {
        uint8_t m_payload[ATOLL_PAYLOAD_SIZE];
        struct __attribute__((packed)) { int32_t m1i1, m1i2, m1i3; char *m1p1, *m1p2, *m1p3; } m_m1;
        struct __attribute__((packed)) { int64_t m2ll1; int32_t m2i1, m2i2, m2i3; uint32_t m2u1; } m_m2;
        struct __attribute__((packed)) { int64_t m9ll1, m9ll2, m9ll3, m9ll4, m9ll5, m9ll6; int32_t m9i1; } m_m9;
    } m_u;
} __attribute__((aligned(8))) message;

_Static_assert(sizeof(message) == 64, "a message is 64 bytes");

#define m1_i1 m_u.m_m1.m1i1
#define m1_i2 m_u.m_m1.m1i2
#define m1_i3 m_u.m_m1.m1i3
#define m1_p1 m_u.m_m1.m1p1
#define m1_p2 m_u.m_m1.m1p2
#define m1_p3 m_u.m_m1.m1p3
#define m2_ll1 m_u.m_m2.m2ll1
#define m2_i1 m_u.m_m2.m2i1
#define m2_i2 m_u.m_m2.m2i2
#define m2_i3 m_u.m_m2.m2i3
#define m2_u1 m_u.m_m2.m2u1

static inline int ipc_send(atoll_pid_t to, message *m)
{
    return __atoll_ipc_send(to, m);
}

static inline int ipc_sendnb(atoll_pid_t to, message *m)
{
    return __atoll_ipc_sendnb(to, m);
}

static inline int ipc_senda(atoll_pid_t to, message *m)
{
    return __atoll_ipc_senda(to, m);
}

static inline int ipc_senda_more(atoll_pid_t to, message *m)
{
    return __atoll_ipc_senda_more(to, m);
}

static inline int ipc_senda_body(atoll_pid_t to, message *m, const void *body, size_t len)
{
    if (len > ATOLL_BODY_MAX)
        return EMSGSIZE;
    return __atoll_ipc_senda_body(to, m, body, (uint32_t)len);
}

static inline int ipc_body(void *buf, size_t len)
{
    return __atoll_ipc_body(buf, len > ATOLL_BODY_MAX ? ATOLL_BODY_MAX : (uint32_t)len);
}

static inline int ipc_sendrec(atoll_pid_t to, message *m)
{
    return __atoll_ipc_sendrec(to, m);
}

static inline int ipc_receive(atoll_pid_t from, message *m, int *status)
{
    int32_t st = 0;
    int err = __atoll_ipc_receive(from, m, &st);
    if (err == 0 && status != NULL)
        *status = st;
    return err;
}

static inline int ipc_receivenb(atoll_pid_t from, message *m, int *status)
{
    int32_t st = 0;
    int err = __atoll_ipc_receivenb(from, m, &st);
    if (err == 0 && status != NULL)
        *status = st;
    return err;
}

static inline int ipc_notify(atoll_pid_t to)
{
    return __atoll_ipc_notify(to);
}

/* ---------------------------------------------------------- grants */

/*
 * Another process's memory is reachable only through a grant its owner made
 * (Minix 3's safecopies). A grant lets `grantee` (or any process of the
 * owner's domain, with ANY) read and/or write len bytes at addr.
 *
 *   atoll_grant(grantee, addr, len, access, &id)   access: CPF_READ|CPF_WRITE
 *   atoll_revoke(id)
 *   atoll_safecopy_from(owner, id, offset, buf, len)  owner's grant -> buf
 *   atoll_safecopy_to(owner, id, offset, buf, len)    buf -> owner's grant
 *   atoll_vcopy(src, src_addr, dst, dst_addr, len)
 *       copies between any two processes (SELF for the caller), by address;
 *       each side that is not the caller must be covered by a grant of its
 *       owner to the caller. A third process may copy between two others.
 *
 * One copy from memory to memory on one kernel; across kernels the block
 * travels once through the NoC's portal. Any length that fits both memories.
 * Errors: EPERM (no grant allows it), EFAULT (outside memory or grant),
 * EDEADSRCDST, ECALLDENIED, EINVAL (unknown grant id to revoke, bad access),
 * ENOSPC (too many grants).
 */
#define CPF_READ 1u
#define CPF_WRITE 2u

static inline int atoll_grant(atoll_pid_t grantee, const void *addr, size_t len,
                              unsigned access, uint32_t *id)
{
    if (len > UINT32_MAX || id == NULL)
        return EINVAL;
    return __atoll_grant(grantee, addr, (uint32_t)len, access, id);
}

static inline int atoll_revoke(uint32_t id)
{
    return __atoll_revoke(id);
}

static inline int atoll_safecopy_from(atoll_pid_t owner, uint32_t grant, size_t offset,
                                      void *buf, size_t len)
{
    if (len > UINT32_MAX || offset > UINT32_MAX)
        return EINVAL;
    return __atoll_safecopy_from(owner, grant, (uint32_t)offset, buf, (uint32_t)len);
}

static inline int atoll_safecopy_to(atoll_pid_t owner, uint32_t grant, size_t offset,
                                    const void *buf, size_t len)
{
    if (len > UINT32_MAX || offset > UINT32_MAX)
        return EINVAL;
    return __atoll_safecopy_to(owner, grant, (uint32_t)offset, buf, (uint32_t)len);
}

static inline int atoll_vcopy(atoll_pid_t src, const void *src_addr, atoll_pid_t dst,
                              void *dst_addr, size_t len)
{
    if (len > UINT32_MAX)
        return EINVAL;
    return __atoll_vcopy(src, src_addr, dst, dst_addr, (uint32_t)len);
}

/* --------------------------------------------------------- domains */

/*
 * atoll_bind(name) joins a domain made with `atoll domain create NAME`; a
 * process is in at most one domain, so it must atoll_unbind() first (EBUSY
 * otherwise; ENOENT for an unknown name). After atoll_unbind() the process
 * takes no part in IPC (ECALLDENIED) and senders waiting for it are refused.
 * atoll_domain() is the current domain's id, or -1.
 */
static inline int atoll_bind(const char *name)
{
    return __atoll_bind(name, (uint32_t)strlen(name));
}

static inline int atoll_unbind(void)
{
    return __atoll_unbind();
}

static inline int64_t atoll_domain(void)
{
    return __atoll_domain();
}

/* The M3-IPC names. */
#define mnx_send ipc_send
#define mnx_receive(from, m) ipc_receive((from), (m), NULL)
#define mnx_sendrec ipc_sendrec
#define mnx_notify ipc_notify
#define mnx_vcopy atoll_vcopy
#define mnx_bind atoll_bind
#define mnx_unbind atoll_unbind

#ifdef __cplusplus
}
#endif

#endif /* ATOLL_H */
