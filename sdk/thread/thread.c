/* Threads: create, join, detach, exit, self, once, keys, attributes.
 *
 * A thread is a record, pthread_t, kept until the thread is joined (or,
 * detached, has ended), and a stack, used only while the thread runs. A
 * stack of the default size is taken as the thread starts (entry.s) and
 * given back as it ends, so threads that run one after another share one
 * stack: a new page costs a page fault, 1.4 us on the VM this was measured
 * on, more than the rest of a thread's creation and join. A stack of another
 * size is the thread's own, freed with its record by whoever joins it, or
 * (detached) by the next pthread_create or pthread_join once the host has
 * said the thread ended (its `tid` word is 0): a thread cannot free the
 * stack it runs on. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "impl.h"

_Static_assert(offsetof(struct __pthread, stack_top) == 0, "entry.s reads stack_top at 0");
_Static_assert(offsetof(struct __pthread, stack) == 4, "entry.s writes stack at 4");
_Static_assert(offsetof(struct stacks, spare) == 0 && offsetof(struct stacks, count) == 4 &&
                   offsetof(struct stacks, size) == 8,
               "entry.s reads struct stacks");

struct __pthread *__atoll_self;

/* The first thread's record: it needs no stack of ours. */
static struct __pthread first;

/* Ended detached threads not yet freed. */
static struct __pthread *dead;

static struct {
    int used;
    void (*destructor)(void *);
} keys[PTHREAD_KEYS_MAX];

/* Called from entry.s, on the new thread's own stack. */
void __atoll_thread_start(struct __pthread *self);

/* Where threads start (entry.s). */
void atoll_thread_entry(struct __pthread *self);

void __atoll_threads_init(void) {
    static int done;
    if (done)
        return;
    done = 1;
    first.tid = 1;
    /* errno and the current thread are each thread's own. */
    static uint32_t words[2];
    words[0] = (uint32_t)(uintptr_t)&errno;
    words[1] = (uint32_t)(uintptr_t)&__atoll_self;
    __atoll_thread_locals(words, 2);
}

/* Default stacks not in use, by address (entry.s takes the last one; the
 * list lives apart from the stacks, so making a stack touches none of its
 * pages). Those not promised to a created thread that has yet to start
 * are `available`: the list always holds one stack per such thread, so
 * entry.s never finds it empty. Stacks are made several at a time (8,
 * then as many as there are, up to 64 at once): each malloc that grows
 * the memory costs a memory.grow and the page faults of malloc's own
 * headers, and a stack's pages cost nothing until it is used. They are
 * never given back to malloc, as glibc keeps stacks. */
struct stacks __atoll_stacks = {.size = DEFAULT_STACK};
static unsigned available, made;

#define MOST_AT_ONCE 64

/* Promises a default stack to a thread about to be created. */
static int promise_stack(void) {
    if (!available) {
        unsigned n = made < 8 ? 8 : made < MOST_AT_ONCE ? made : MOST_AT_ONCE;
        char **list = realloc(__atoll_stacks.spare, (made + n) * sizeof *list);
        if (!list)
            return EAGAIN;
        __atoll_stacks.spare = list;
        char *batch = malloc(n * DEFAULT_STACK);
        if (!batch && (batch = malloc(DEFAULT_STACK)))
            n = 1;
        if (!batch)
            return EAGAIN;
        made += n;
        available += n;
        /* Lowest first out. */
        for (unsigned i = n; i-- > 0;)
            list[__atoll_stacks.count++] = batch + i * DEFAULT_STACK;
    }
    available--;
    return 0;
}

/* Frees an ended thread's record (and its own stack, if it had one). */
static void free_record(struct __pthread *t) {
    free(t->block);
    free(t);
}

static void free_dead(void) {
    struct __pthread **p = &dead;
    while (*p) {
        struct __pthread *t = *p;
        if (t->tid == 0) {
            *p = t->next_dead;
            free_record(t);
        } else {
            p = &t->next_dead;
        }
    }
}

int pthread_create(pthread_t *restrict out, const pthread_attr_t *restrict attr,
                   void *(*start)(void *), void *restrict arg) {
    __atoll_threads_init();
    free_dead();
    size_t stack = DEFAULT_STACK;
    int detached = 0;
    if (attr) {
        stack = attr->__u.__s[0] ? attr->__u.__s[0] : DEFAULT_STACK;
        detached = attr->__u.__i[1];
    }
    struct __pthread *t = calloc(1, sizeof *t);
    if (!t)
        return EAGAIN;
    if (stack == DEFAULT_STACK) {
        if (promise_stack() != 0) {
            free(t);
            return EAGAIN;
        }
    } else {
        if (!(t->block = malloc(stack))) {
            free(t);
            return EAGAIN;
        }
        /* The C stack grows down from its end, 16-byte aligned. */
        t->stack_top = ((uintptr_t)t->block + stack) & ~(uintptr_t)15;
    }
    t->start = start;
    t->arg = arg;
    t->detached = detached;
    t->tid = -1;
    int tid = __atoll_thread_spawn(atoll_thread_entry, t);
    if (tid < 0) {
        if (!t->block)
            available++;
        free_record(t);
        return -tid == ENOTSUP ? ENOSYS : -tid;
    }
    t->tid = tid;
    *out = t;
    return 0;
}

pthread_t pthread_self(void) {
    return __atoll_self ? __atoll_self : &first;
}

int atoll_thread_id(void) {
    return __atoll_thread_self();
}

#undef pthread_equal
int pthread_equal(pthread_t a, pthread_t b) {
    return a == b;
}

static void run_destructors(struct __pthread *self) {
    if (!self->specific)
        return;
    for (int round = 0; round < PTHREAD_DESTRUCTOR_ITERATIONS; round++) {
        int any = 0;
        for (int k = 0; k < PTHREAD_KEYS_MAX; k++) {
            void *v = (void *)self->specific[k];
            if (v && keys[k].used && keys[k].destructor) {
                self->specific[k] = 0;
                keys[k].destructor(v);
                any = 1;
            }
        }
        if (!any)
            break;
    }
    free(self->specific);
    self->specific = 0;
}

/* Everything of a thread's end but the last step: its destructors, its
 * result, its record to the dead if detached, its default stack back. The
 * stack goes back while the thread still runs on it: no other thread runs
 * before this one has left, by its last host call or by returning out of
 * atoll_thread_entry: there is no safepoint on the way. */
static void finish(struct __pthread *self, void *result) {
    run_destructors(self);
    self->result = result;
    if (self != &first && self->detached) {
        self->next_dead = dead;
        dead = self;
    }
    if (self->stack) {
        __atoll_stacks.spare[__atoll_stacks.count++] = self->stack;
        available++;
    }
}

/* A thread whose start routine returns ends by returning too: it says it
 * ended (`tid` 0, joiners woken, as the host does for pthread_exit) and
 * returns out of atoll_thread_entry, and the host ends it there. That
 * costs a host call, not the unwind of its stack that pthread_exit's call
 * makes (a fifth of a thread's create and join). */
void __atoll_thread_start(struct __pthread *self) {
    __atoll_self = self;
    finish(self, self->start(self->arg));
    self->tid = 0;
    __atoll_futex_wake(&self->tid, INT32_MAX);
}

_Noreturn void pthread_exit(void *result) {
    struct __pthread *self = pthread_self();
    finish(self, result);
    /* The host clears `tid` and wakes the joiners as the thread ends; the
     * first thread's record is static and nobody frees it. */
    __atoll_thread_exit(&self->tid);
}

int pthread_join(pthread_t t, void **result) {
    if (t == pthread_self())
        return EDEADLK;
    if (t->detached)
        return EINVAL;
    for (int tid; (tid = t->tid) != 0;)
        __atoll_futex_wait(&t->tid, tid, -1);
    if (result)
        *result = t->result;
    if (t != &first)
        free_record(t);
    free_dead();
    return 0;
}

int pthread_detach(pthread_t t) {
    if (t->detached)
        return EINVAL;
    if (t->tid == 0) {
        /* Ended already: nobody will join it. */
        if (t != &first)
            free_record(t);
        return 0;
    }
    t->detached = 1;
    return 0;
}

int pthread_once(pthread_once_t *once, void (*init)(void)) {
    volatile int *state = (volatile int *)once;
    for (;;) {
        int s = 0;
        if (__atomic_compare_exchange_n(state, &s, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            init();
            __atomic_store_n(state, 2, __ATOMIC_SEQ_CST);
            __atoll_futex_wake(state, INT32_MAX);
            return 0;
        }
        if (s == 2)
            return 0;
        __atoll_futex_wait(state, 1, -1);
    }
}

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *)) {
    for (unsigned k = 0; k < PTHREAD_KEYS_MAX; k++) {
        if (!keys[k].used) {
            keys[k].used = 1;
            keys[k].destructor = destructor;
            *key = k;
            return 0;
        }
    }
    return EAGAIN;
}

int pthread_key_delete(pthread_key_t key) {
    if (key >= PTHREAD_KEYS_MAX || !keys[key].used)
        return EINVAL;
    keys[key].used = 0;
    keys[key].destructor = 0;
    return 0;
}

void *pthread_getspecific(pthread_key_t key) {
    struct __pthread *self = pthread_self();
    return key < PTHREAD_KEYS_MAX && self->specific ? (void *)self->specific[key] : 0;
}

int pthread_setspecific(pthread_key_t key, const void *value) {
    if (key >= PTHREAD_KEYS_MAX || !keys[key].used)
        return EINVAL;
    struct __pthread *self = pthread_self();
    if (!self->specific && !(self->specific = calloc(PTHREAD_KEYS_MAX, sizeof(void *))))
        return ENOMEM;
    self->specific[key] = value;
    return 0;
}

/* pthread_attr_t: __s[0] the stack size (0: default), __i[1] detached. */
int pthread_attr_init(pthread_attr_t *a) {
    memset(a, 0, sizeof *a);
    return 0;
}

int pthread_attr_destroy(pthread_attr_t *a) {
    (void)a;
    return 0;
}

int pthread_attr_getdetachstate(const pthread_attr_t *a, int *state) {
    *state = a->__u.__i[1];
    return 0;
}

int pthread_attr_setdetachstate(pthread_attr_t *a, int state) {
    if (state != PTHREAD_CREATE_JOINABLE && state != PTHREAD_CREATE_DETACHED)
        return EINVAL;
    a->__u.__i[1] = state;
    return 0;
}

int pthread_attr_getstacksize(const pthread_attr_t *restrict a, size_t *restrict size) {
    *size = a->__u.__s[0] ? a->__u.__s[0] : DEFAULT_STACK;
    return 0;
}

int pthread_attr_setstacksize(pthread_attr_t *a, size_t size) {
    if (size < PTHREAD_STACK_MIN)
        return EINVAL;
    a->__u.__s[0] = size;
    return 0;
}
