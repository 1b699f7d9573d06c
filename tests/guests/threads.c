/* POSIX threads on atoll: each part of <pthread.h> and <semaphore.h> the
 * guest library provides, checked, and a fork from a process with threads
 * (atoll_fork). Prints one line per check and exits 1 if any failed. */
#include <atoll.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failed;

static void check(int ok, const char *what) {
    printf("%s: %s\n", what, ok ? "ok" : "FAILED");
    failed |= !ok;
}

static struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec t;
    clock_gettime(clock, &t);
    t.tv_nsec += (ms % 1000) * 1000000L;
    t.tv_sec += ms / 1000 + t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    return t;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* 1. create, join, return values; a counter under a mutex. */
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void *add(void *arg) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&counter_lock);
        long c = counter;
        if (i % 100 == 0)
            sched_yield(); /* others try the lock meanwhile */
        counter = c + 1;
        pthread_mutex_unlock(&counter_lock);
    }
    return (void *)((long)arg * 2);
}

static void create_and_join(void) {
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], 0, add, (void *)i);
    long sum = 0;
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    check(counter == 8000 && sum == 56, "create, join, mutex");
    check(pthread_join(pthread_self(), 0) == EDEADLK, "join self is EDEADLK");
}

static void *nothing_but(void *arg) {
    return arg;
}

/* 2. detach, and a detached thread's end seen through a semaphore. */
static sem_t detached_done;

static void *detached(void *arg) {
    (void)arg;
    sem_post(&detached_done);
    return 0;
}

/* Starts `f` in a thread created detached (in `t`) and waits until it
 * posts `detached_done`; returns pthread_create's result. */
static int run_detached(pthread_t *t, void *(*f)(void *)) {
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(t, &a, f, 0);
    sem_wait(&detached_done);
    return rc;
}

static void detach(void) {
    sem_init(&detached_done, 0, 0);
    pthread_t t;
    int rc = run_detached(&t, detached);
    pthread_t u;
    pthread_create(&u, 0, detached, 0);
    int drc = pthread_detach(u);
    sem_wait(&detached_done);
    check(rc == 0 && drc == 0 && pthread_join(t, 0) == EINVAL, "detach");
}

/* 2b. pthread_exit from deep in a thread's stack (a thread that returns
 * from its start routine ends another way): its result is joined; a
 * detached thread's record is freed later. */
static void exit_from(int depth, long result) {
    if (depth == 0)
        pthread_exit((void *)result);
    exit_from(depth - 1, result + 1);
}

static void *exits_deep(void *arg) {
    exit_from(5, (long)arg);
    return 0;
}

static void *exits_detached(void *arg) {
    (void)arg;
    sem_post(&detached_done);
    pthread_exit(0);
}

static void exits(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], 0, exits_deep, (void *)(i * 10));
    long sum = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    pthread_t d;
    int rc = run_detached(&d, exits_detached);
    pthread_t u;
    void *r;
    int jrc = pthread_create(&u, 0, nothing_but, (void *)7) | pthread_join(u, &r);
    check(sum == 45 && rc == 0 && jrc == 0 && (long)r == 7, "pthread_exit");
}

/* 3. once. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int inits;

static void init_once(void) {
    inits++;
    sched_yield(); /* the others arrive while it runs */
}

static void *call_once(void *arg) {
    (void)arg;
    pthread_once(&once, init_once);
    return (void *)(long)inits;
}

static void once_only(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], 0, call_once, 0);
    int all_saw_it = 1;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        all_saw_it &= (long)r == 1;
    }
    check(inits == 1 && all_saw_it, "once");
}

/* 4. keys and their destructors; errno and pthread_self per thread. */
static pthread_key_t key;
static int destroyed;

static void destroy(void *v) {
    destroyed += *(int *)v;
}

static void *own_values(void *arg) {
    int *mine = arg;
    pthread_setspecific(key, mine);
    errno = *mine;
    pthread_t me = pthread_self();
    sched_yield();
    int ok = pthread_getspecific(key) == mine && errno == *mine && pthread_equal(me, pthread_self());
    return (void *)(long)ok;
}

static void keys(void) {
    pthread_key_create(&key, destroy);
    int v[3] = {1, 10, 100};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], 0, own_values, &v[i]);
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        ok &= (long)r;
    }
    check(ok && destroyed == 111 && pthread_getspecific(key) == 0, "keys, errno, self");
    pthread_key_delete(key);
}

/* 5. mutex types. */
static pthread_mutex_t held;

static void *try_held(void *arg) {
    (void)arg;
    int busy = pthread_mutex_trylock(&held) == EBUSY;
    int perm = pthread_mutex_unlock(&held) == EPERM;
    return (void *)(long)(busy && perm);
}

static void mutex_types(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&held, &a);
    int rec = !pthread_mutex_lock(&held) && !pthread_mutex_lock(&held) &&
              !pthread_mutex_trylock(&held);
    pthread_t t;
    void *r;
    pthread_create(&t, 0, try_held, 0);
    pthread_join(t, &r);
    rec &= (long)r && !pthread_mutex_unlock(&held) && !pthread_mutex_unlock(&held) &&
           !pthread_mutex_unlock(&held) && pthread_mutex_unlock(&held) == EPERM;
    check(rec, "recursive mutex");

    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_destroy(&held);
    pthread_mutex_init(&held, &a);
    pthread_mutex_lock(&held);
    int ec = pthread_mutex_lock(&held) == EDEADLK;
    pthread_create(&t, 0, try_held, 0);
    pthread_join(t, &r);
    ec &= (long)r && !pthread_mutex_unlock(&held) && pthread_mutex_unlock(&held) == EPERM;
    check(ec, "errorcheck mutex");

    pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&normal);
    struct timespec soon = in_ms(CLOCK_REALTIME, 20);
    check(pthread_mutex_trylock(&normal) == EBUSY &&
              pthread_mutex_timedlock(&normal, &soon) == ETIMEDOUT,
          "trylock and timedlock");
}

/* 6. condition variables: a bounded queue, and a timed wait. */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_nonempty = PTHREAD_COND_INITIALIZER, q_nonfull = PTHREAD_COND_INITIALIZER;
static int q[4], q_len, q_head;

static void *produce(void *arg) {
    for (int i = 1; i <= 100; i++) {
        pthread_mutex_lock(&q_lock);
        while (q_len == 4)
            pthread_cond_wait(&q_nonfull, &q_lock);
        q[(q_head + q_len++) % 4] = i;
        pthread_cond_signal(&q_nonempty);
        pthread_mutex_unlock(&q_lock);
    }
    return arg;
}

static void conditions(void) {
    pthread_t t;
    pthread_create(&t, 0, produce, 0);
    long sum = 0;
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&q_lock);
        while (q_len == 0)
            pthread_cond_wait(&q_nonempty, &q_lock);
        sum += q[q_head];
        q_head = (q_head + 1) % 4;
        q_len--;
        pthread_cond_signal(&q_nonfull);
        pthread_mutex_unlock(&q_lock);
    }
    pthread_join(t, 0);
    check(sum == 5050, "condition variables");

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_t c;
    pthread_cond_init(&c, &ca);
    pthread_mutex_lock(&q_lock);
    double t0 = now_ms();
    struct timespec at = in_ms(CLOCK_MONOTONIC, 30);
    int rc = pthread_cond_timedwait(&c, &q_lock, &at);
    double waited = now_ms() - t0;
    pthread_mutex_unlock(&q_lock);
    check(rc == ETIMEDOUT && waited >= 29, "timed wait");
}

/* 7. read-write locks. */
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static int readers_in, most_readers, writer_saw_readers;

static void *reader(void *arg) {
    (void)arg;
    pthread_rwlock_rdlock(&rw);
    readers_in++;
    if (readers_in > most_readers)
        most_readers = readers_in;
    sched_yield();
    readers_in--;
    pthread_rwlock_unlock(&rw);
    return 0;
}

static void *writer(void *arg) {
    (void)arg;
    pthread_rwlock_wrlock(&rw);
    writer_saw_readers |= readers_in != 0;
    sched_yield();
    pthread_rwlock_unlock(&rw);
    return 0;
}

static void rwlocks(void) {
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        pthread_create(&t[i], 0, i == 3 ? writer : reader, 0);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], 0);
    pthread_rwlock_wrlock(&rw);
    int busy = pthread_rwlock_tryrdlock(&rw) == EDEADLK;
    pthread_rwlock_unlock(&rw);
    pthread_rwlock_rdlock(&rw);
    int shared = pthread_rwlock_tryrdlock(&rw) == 0;
    pthread_rwlock_unlock(&rw);
    pthread_rwlock_unlock(&rw);
    check(most_readers > 1 && !writer_saw_readers && busy && shared, "read-write locks");
}

/* 8. barriers. */
static pthread_barrier_t barrier;
static int before, after_all_arrived = 1;

static void *at_barrier(void *arg) {
    (void)arg;
    before++;
    int rc = pthread_barrier_wait(&barrier);
    after_all_arrived &= before == 5;
    return (void *)(long)(rc == PTHREAD_BARRIER_SERIAL_THREAD);
}

static void barriers(void) {
    pthread_barrier_init(&barrier, 0, 5);
    pthread_t t[5];
    for (int i = 0; i < 5; i++)
        pthread_create(&t[i], 0, at_barrier, 0);
    int serial = 0;
    for (int i = 0; i < 5; i++) {
        void *r;
        pthread_join(t[i], &r);
        serial += (long)r;
    }
    check(serial == 1 && after_all_arrived, "barrier");
}

/* 9. semaphores. */
static void semaphores(void) {
    sem_t s;
    sem_init(&s, 0, 1);
    int ok = sem_trywait(&s) == 0 && sem_trywait(&s) == -1 && errno == EAGAIN;
    struct timespec at = in_ms(CLOCK_REALTIME, 20);
    ok &= sem_timedwait(&s, &at) == -1 && errno == ETIMEDOUT;
    sem_post(&s);
    sem_post(&s);
    int v;
    sem_getvalue(&s, &v);
    ok &= v == 2 && sem_wait(&s) == 0 && sem_open("/x", 0) == SEM_FAILED && errno == ENOSYS;
    check(ok, "semaphores");
}

/* 10. a thread asleep, or spinning without a system call, holds up no
 * other: the sleep is the thread's, and the quantum is per thread. */
static volatile int ticks, stop_spinning;

static void *sleeper(void *arg) {
    (void)arg;
    struct timespec d = {0, 50 * 1000000L};
    nanosleep(&d, 0);
    return (void *)(long)ticks;
}

static void *spinner(void *arg) {
    (void)arg;
    while (!stop_spinning)
        ticks++;
    return 0;
}

static void no_thread_holds_up_another(void) {
    pthread_t s, p;
    pthread_create(&s, 0, sleeper, 0);
    pthread_create(&p, 0, spinner, 0);
    void *seen;
    pthread_join(s, &seen);
    stop_spinning = 1;
    pthread_join(p, 0);
    check((long)seen > 0, "sleep and spin");
}

/* 11. a thread's sleep ends on time while another thread of the process
 * waits in the kernel (here, for a message that never comes). */
static void *receive_forever(void *arg) {
    message m;
    int status;
    ipc_receive(ATOLL_ANY, &m, &status);
    return arg;
}

static void sleep_beside_the_kernel(void) {
    pthread_t sleeping, receiving;
    double t0 = now_ms();
    pthread_create(&sleeping, 0, sleeper, 0); /* asleep first, then */
    pthread_create(&receiving, 0, receive_forever, 0);
    pthread_join(sleeping, 0);
    double waited = now_ms() - t0;
    check(waited >= 49 && waited < 5000, "sleep beside a thread in the kernel");
    pthread_detach(receiving);
}

/* 12. Stacks: threads alive at once each have their own; a stack of the
 * default size is used again by the next thread once its thread has
 * ended, so creating and joining threads one after another does not grow
 * the memory; a stack of another size is honoured. */
enum { ALIVE = 100 };
static pthread_barrier_t all_alive;
static uintptr_t stack_of[ALIVE];

static void *own_stack(void *arg) {
    volatile char mine[2048];
    for (unsigned i = 0; i < sizeof mine; i++)
        mine[i] = (char)(long)arg;
    stack_of[(long)arg] = (uintptr_t)mine;
    pthread_barrier_wait(&all_alive);
    for (unsigned i = 0; i < sizeof mine; i++)
        if (mine[i] != (char)(long)arg)
            return 0;
    return (void *)1;
}

static void *deep(void *arg) {
    volatile char big[192 * 1024];
    big[0] = 1;
    big[sizeof big - 1] = 2;
    return (void *)(long)(big[0] + big[sizeof big - 1] + (long)arg);
}

static void stacks(void) {
    pthread_t t[ALIVE];
    pthread_barrier_init(&all_alive, 0, ALIVE);
    for (long i = 0; i < ALIVE; i++)
        pthread_create(&t[i], 0, own_stack, (void *)i);
    int intact = 1, distinct = 1;
    for (int i = 0; i < ALIVE; i++) {
        void *r;
        pthread_join(t[i], &r);
        intact &= r != 0;
        for (int j = 0; j < i; j++)
            distinct &= stack_of[i] != stack_of[j];
    }
    check(intact && distinct, "threads alive at once have stacks of their own");

    size_t before = __builtin_wasm_memory_size(0);
    int ok = 1;
    for (long i = 0; i < 20000 && ok; i++) {
        void *r;
        ok = pthread_create(&t[0], 0, nothing_but, (void *)i) == 0 && pthread_join(t[0], &r) == 0 &&
             (long)r == i;
    }
    check(ok && __builtin_wasm_memory_size(0) == before, "ended threads' stacks are used again");

    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    void *r = 0;
    ok = pthread_create(&t[0], &a, deep, (void *)4L) == 0 && pthread_join(t[0], &r) == 0;
    check(ok && (long)r == 7, "a stack of the size asked for");
}

/* 13. fork copies the calling thread alone (POSIX): the child, which
 * forked from a thread other than the first, can make and join threads of
 * its own, while the parent's other thread still waits for the parent. */
static sem_t release;

static void *waiting(void *arg) {
    sem_wait(&release);
    return arg;
}

static void *forking(void *arg) {
    (void)arg;
    atoll_pid_t child = atoll_fork(ATOLL_KERNEL_ANY);
    if (child == 0) {
        pthread_t t;
        void *r = 0;
        int ok = pthread_create(&t, 0, nothing_but, (void *)7L) == 0 && pthread_join(t, &r) == 0;
        exit(ok && (long)r == 7 ? 0 : 1);
    }
    int status = -1;
    if (child > 0)
        atoll_wait(child, &status, 0);
    return (void *)(long)status;
}

static void fork_with_threads(void) {
    sem_init(&release, 0, 0);
    pthread_t w, f;
    pthread_create(&w, 0, waiting, (void *)3L);
    pthread_create(&f, 0, forking, 0);
    void *status, *waited;
    pthread_join(f, &status);
    sem_post(&release);
    pthread_join(w, &waited);
    check((long)status == 0 && (long)waited == 3, "fork in a process with threads");
}

/* 14. A thread in a receive nobody has answered does not hold back
 * another thread's prompt kernel call: here the spawn of the very process
 * that sends the message it waits for. The receive gives way and is made
 * again once the spawn is answered. */
static void *receive_one(void *arg) {
    (void)arg;
    message m;
    int status;
    int rc = ipc_receive(ATOLL_ANY, &m, &status);
    return (void *)(long)(rc == 0 ? m.m_type : -rc);
}

static void spawn_beside_a_receive(const char *self) {
    pthread_t receiving;
    pthread_create(&receiving, 0, receive_one, 0);
    /* Main waits within the process: the receiver runs, into the kernel. */
    struct timespec d = {0, 20 * 1000000L};
    nanosleep(&d, 0);
    char pid[24];
    snprintf(pid, sizeof pid, "%lld", (long long)atoll_getpid());
    char *argv[] = {(char *)self, "send", pid, 0};
    atoll_pid_t child;
    int spawned = atoll_spawn(0, argv, ATOLL_KERNEL_ANY, &child);
    void *got = 0;
    pthread_join(receiving, &got);
    int status = -1;
    if (spawned == 0)
        atoll_wait(child, &status, 0);
    check(spawned == 0 && (long)got == 43 && status == 0, "spawn beside a thread in a receive");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "send") == 0) {
        message m = {0};
        m.m_type = 43;
        return ipc_send(strtoll(argv[2], 0, 10), &m) != 0;
    }
    create_and_join();
    detach();
    exits();
    once_only();
    keys();
    mutex_types();
    conditions();
    rwlocks();
    barriers();
    semaphores();
    stacks();
    no_thread_holds_up_another();
    fork_with_threads();
    spawn_beside_a_receive(argv[0]);
    /* Last: it leaves a thread in the kernel for good, and the other
     * threads' kernel calls would wait their turn behind it. */
    sleep_beside_the_kernel();
    printf("thread ids: %d\n", atoll_thread_id());
    return failed;
}
