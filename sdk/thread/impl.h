/* The insides of atoll's guest thread library: the host calls it is built
 * on (crates/process/src/syscall/threads.rs) and the layouts it gives
 * musl's opaque pthread types.
 *
 * Threads run cooperatively: one at a time, switched only inside a host
 * call or at a safepoint (a function entry or loop header, when the
 * thread's quantum is up). A read-modify-write written with __atomic
 * builtins is one sequence of loads and stores with no safepoint in it,
 * so it is atomic here without the wasm threads feature. */
#ifndef ATOLL_THREAD_IMPL_H
#define ATOLL_THREAD_IMPL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define ATOLL_IMPORT(name) __attribute__((import_module("atoll"), import_name(name)))

ATOLL_IMPORT("thread_spawn") int32_t __atoll_thread_spawn(void (*func)(struct __pthread *),
                                                          struct __pthread *arg);
ATOLL_IMPORT("thread_exit") _Noreturn void __atoll_thread_exit(volatile int *clear);
ATOLL_IMPORT("thread_self") int32_t __atoll_thread_self(void);
ATOLL_IMPORT("thread_locals") int32_t __atoll_thread_locals(const uint32_t *addrs, int32_t n);
ATOLL_IMPORT("futex_wait") int32_t __atoll_futex_wait(volatile int *addr, int32_t expected,
                                                      int64_t timeout_ns);
ATOLL_IMPORT("futex_wake") int32_t __atoll_futex_wake(volatile int *addr, int32_t count);

/* Default stack of a new thread, as musl's. */
#define DEFAULT_STACK (128 * 1024)

struct __pthread;

/* A thread: what pthread_t points to, from pthread_create until the
 * thread is joined (or, detached, has ended). `stack_top` and `stack`
 * must stay first: atoll_thread_entry (entry.s) reads and writes them
 * before any C code runs on the new thread. */
struct __pthread {
    /* Where its C stack starts, for a stack of its own (a size other than
     * the default); 0 for a default stack, taken as the thread starts. */
    uintptr_t stack_top;
    /* The default stack it took (entry.s), given back as it ends. */
    void *stack;
    /* The thread's number while it runs; set to 0 by the host when it
     * has ended (and left its stack): joiners wait on it. */
    volatile int tid;
    void *(*start)(void *);
    void *arg;
    void *result;
    /* Its own stack (NULL: a default one), freed with this record. */
    void *block;
    int detached;
    /* An ended detached thread, waiting to be freed by another. */
    struct __pthread *next_dead;
    /* Its thread-specific values, PTHREAD_KEYS_MAX of them, from its
     * first pthread_setspecific on (most threads never have any). */
    const void **specific;
};

/* The default stacks not in use (thread.c): entry.s takes the last of
 * `spare` as a thread starts. */
struct stacks {
    char **spare;
    uint32_t count;
    uint32_t size;
};
extern struct stacks __atoll_stacks;

/* The running thread's record (NULL: the first thread), and the words
 * each thread has its own copy of; see thread.c. */
extern struct __pthread *__atoll_self;
void __atoll_threads_init(void);

/* Waits on *addr while it holds `expected`, until `abstime` on `clock`
 * (NULL: for ever). Returns 0, EAGAIN or ETIMEDOUT. */
int __atoll_futex_until(volatile int *addr, int expected, clockid_t clock,
                 const struct timespec *abstime);

/* A lock word: 0 free, 1 held, 2 held with waiters (Drepper's futex
 * mutex). */
void __atoll_word_lock(volatile int *l);
int __atoll_word_lock_until(volatile int *l, clockid_t clock, const struct timespec *abstime);
void __atoll_word_unlock(volatile int *l);

struct mutex {
    volatile int lock;
    int type;
    int owner; /* thread number, for recursive and errorcheck mutexes */
    int count; /* recursion depth beyond the first lock */
};

struct cond {
    volatile int seq;
    clockid_t clock;
};

struct rwlock {
    volatile int lock;
    volatile int seq;
    int readers;
    int writer;
    int writers_waiting;
};

struct barrier {
    volatile int lock;
    volatile int generation;
    unsigned count;
    unsigned total;
};

#define LAYOUT(type, inner) \
    _Static_assert(sizeof(type) >= sizeof(inner), #inner " does not fit " #type)

#endif
