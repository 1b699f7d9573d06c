/* Threads: create, join, detach, exit, self, once, keys, attributes.
 *
 * A thread's stack and record are one block, given back by whoever joins
 * it, or (detached) by the next pthread_create or pthread_join once the
 * host has said the thread ended (its `tid` word is 0): a thread cannot
 * free the stack it runs on. */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

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

/* Blocks of the default size are made BATCH at a time and kept, when their
 * thread ends, for the next one (as glibc keeps stacks): a memory.grow
 * (an mprotect of the host's) cost 2.7 us on the VM this was measured on,
 * more than the rest of a thread's creation, and a block of its own for
 * each new thread meant a grow for each. They are not given back to
 * malloc. */
#define BATCH 8
#define HEAD ((sizeof(struct __pthread) + 15) & ~(size_t)15)
#define DEFAULT_BLOCK ((DEFAULT_STACK + HEAD + 15) & ~(size_t)15)

/* Free default blocks, each linked to the next through its first word. */
static void *spare;

static char *take_block(size_t size) {
    if (size != DEFAULT_BLOCK)
        return malloc(size);
    if (!spare) {
        char *batch = malloc(BATCH * DEFAULT_BLOCK);
        if (!batch)
            return malloc(size);
        for (int i = BATCH - 1; i >= 0; i--) {
            *(void **)(batch + i * DEFAULT_BLOCK) = spare;
            spare = batch + i * DEFAULT_BLOCK;
        }
    }
    char *block = spare;
    spare = *(void **)block;
    return block;
}

static void give_block(char *block, size_t size) {
    if (size != DEFAULT_BLOCK) {
        free(block);
        return;
    }
    *(void **)block = spare;
    spare = block;
}

static void free_dead(void) {
    struct __pthread **p = &dead;
    while (*p) {
        struct __pthread *t = *p;
        if (t->tid == 0) {
            *p = t->next_dead;
            give_block(t->block, t->block_size);
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
    /* One block: the stack, then the record at its top, where the stack's
     * first frames are. A new thread so touches one new page, not two (a
     * page fault is most of what a thread costs in a new process). */
    size_t size = (stack + HEAD + 15) & ~(size_t)15;
    char *block = take_block(size);
    if (!block)
        return EAGAIN;
    /* The C stack grows down from the record, 16-byte aligned. */
    uintptr_t top = ((uintptr_t)block + stack) & ~(uintptr_t)15;
    struct __pthread *t = (struct __pthread *)top;
    memset(t, 0, sizeof *t);
    t->block = block;
    t->block_size = size;
    t->stack_top = top;
    t->start = start;
    t->arg = arg;
    t->detached = detached;
    t->tid = -1;
    int tid = __atoll_thread_spawn(atoll_thread_entry, t);
    if (tid < 0) {
        give_block(block, size);
        return -tid == ENOTSUP ? ENOSYS : -tid;
    }
    t->tid = tid;
    *out = t;
    return 0;
}

void __atoll_thread_start(struct __pthread *self) {
    __atoll_self = self;
    pthread_exit(self->start(self->arg));
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

_Noreturn void pthread_exit(void *result) {
    struct __pthread *self = pthread_self();
    run_destructors(self);
    self->result = result;
    if (self != &first && self->detached) {
        self->next_dead = dead;
        dead = self;
    }
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
        give_block(t->block, t->block_size);
    free_dead();
    return 0;
}

int pthread_detach(pthread_t t) {
    if (t->detached)
        return EINVAL;
    if (t->tid == 0) {
        /* Ended already: nobody will join it. */
        if (t != &first)
            give_block(t->block, t->block_size);
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
