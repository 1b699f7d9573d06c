/* A process whose threads are in every state a thread can be captured in,
 * for the migration and checkpoint tests: waiting on a condition, on a
 * mutex, in a join, asleep, in an IPC receive, on a semaphore, and
 * computing. It prints "ready" once they all are, sleeps `ms` (default
 * 800) meanwhile the test moves it, then releases them and prints what
 * each one got: the same lines however often it moved.
 *
 *   threadmix [ms [alone]]    the process; `alone`: no IPC (no child, no
 *                             receiving thread), for a checkpoint restored
 *                             without the child it talks to
 *   threadmix child PID MS    (spawned by it) sends PID one message after MS */
#include <atoll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static sem_t sem;
static int go;

static void sleep_ms(long ms) {
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&d, 0);
}

static void *on_condition(void *arg) {
    pthread_mutex_lock(&lock);
    while (!go)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return arg;
}

static void *on_mutex(void *arg) {
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    return arg;
}

static void *asleep(void *arg) {
    sleep_ms(300);
    return arg;
}

static void *joining(void *arg) {
    pthread_t sleeper = arg;
    void *r;
    pthread_join(sleeper, &r);
    return r;
}

static void *receiving(void *arg) {
    (void)arg;
    message m;
    int status;
    int rc = ipc_receive(ATOLL_ANY, &m, &status);
    return (void *)(long)(rc == 0 ? m.m_type : -rc);
}

static void *on_semaphore(void *arg) {
    sem_wait(&sem);
    return arg;
}

/* Fixed work, long enough to be moved mid-way: its result does not
 * depend on where it ran. */
static void *computing(void *arg) {
    (void)arg;
    unsigned long long h = 1469598103934665603ULL;
    for (unsigned long long i = 0; i < 30000000ULL; i++)
        h = (h ^ i) * 1099511628211ULL;
    return (void *)(long)(h & 0x7fffffff);
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "child") == 0) {
        sleep_ms(atol(argv[3]));
        message m = {0};
        m.m_type = 42;
        return ipc_send(strtoll(argv[2], 0, 10), &m) != 0;
    }
    long ms = argc > 1 ? atol(argv[1]) : 800;
    int alone = argc > 2 && strcmp(argv[2], "alone") == 0;
    sem_init(&sem, 0, 0);
    pthread_mutex_lock(&held);

    pthread_t t[7];
    pthread_create(&t[0], 0, on_condition, (void *)1L);
    pthread_create(&t[1], 0, on_mutex, (void *)2L);
    pthread_create(&t[2], 0, asleep, (void *)7L);
    pthread_create(&t[3], 0, joining, t[2]);
    if (!alone)
        pthread_create(&t[4], 0, receiving, 0);
    pthread_create(&t[5], 0, on_semaphore, (void *)5L);
    pthread_create(&t[6], 0, computing, 0);

    char pid[24], wait[24];
    snprintf(pid, sizeof pid, "%lld", (long long)atoll_getpid());
    snprintf(wait, sizeof wait, "%ld", ms / 2);
    char *child_argv[] = {argv[0], "child", pid, wait, 0};
    atoll_pid_t child;
    int spawned = alone ? -1 : atoll_spawn(0, child_argv, ATOLL_KERNEL_ANY, &child);

    sched_yield(); /* each thread runs to where it waits */
    printf("ready\n");
    fflush(stdout);
    sleep_ms(ms);

    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&held);
    sem_post(&sem);

    /* The sleeper is joined by its joiner, which returns what it got. */
    const char *names[] = {"condition", "mutex", 0, "join", alone ? 0 : "receive", "semaphore",
                           "compute"};
    for (int i = 0; i < 7; i++) {
        if (!names[i])
            continue;
        void *r;
        pthread_join(t[i], &r);
        printf("%s: %ld\n", names[i], (long)r);
    }
    if (!alone) {
        int status = -1;
        if (spawned == 0)
            atoll_wait(child, &status, 0);
        printf("child: spawned %d, exit %d\n", spawned, status);
    }
    return 0;
}
