/*
 * spawn_native - what starting a process (or thread) costs on plain Linux,
 * the baseline for bench/guests/spawnbench.
 *
 *   spawn_native fork_exec|posix_spawn|pthread N [INFLIGHT [TARGET]]
 *
 *   fork_exec    fork(), execv(TARGET) in the child, waitpid() in the parent
 *   posix_spawn  posix_spawn(TARGET), then waitpid()
 *   pthread      pthread_create() of an empty thread, then pthread_join();
 *                TARGET is not used
 *
 * Runs N iterations, keeping at most INFLIGHT (default 1) started and not
 * yet waited for, as spawnbench does: with 1, each is started and waited
 * for in turn; with more, a process is reaped whichever ends first
 * (waitpid(-1)) and a thread in the order started. Prints
 *
 *   spawn_native mode=MODE n=N inflight=W seconds=S rate=R
 *
 * with R in iterations per second on the monotonic clock. TARGET should be a
 * tiny program that exits 0 at once (build/native/true). Exit status: 0, 1 if
 * any start failed or a child exited non-zero, 2 on bad arguments.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_INFLIGHT 4096

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What each mode does: start one, and wait for one of those started. */
struct mode {
    const char *name;
    int (*start)(char *const argv[], long slot);
    int (*finish)(long slot);
};

/* Threads are joined by slot (the oldest first); processes by any pid. */
static pthread_t threads[MAX_INFLIGHT];

static int start_fork_exec(char *const argv[], long slot)
{
    (void)slot;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127); /* exec failed: the parent sees a non-zero status */
    }
    return 0;
}

static int start_posix_spawn(char *const argv[], long slot)
{
    (void)slot;
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

/* 0 if a child ran and exited 0. */
static int reap_any(long slot)
{
    (void)slot;
    int status;
    while (waitpid(-1, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void *empty_thread(void *arg)
{
    return arg;
}

static int start_pthread(char *const argv[], long slot)
{
    (void)argv;
    int err = pthread_create(&threads[slot], NULL, empty_thread, NULL);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

static int join_pthread(long slot)
{
    int err = pthread_join(threads[slot], NULL);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

static const struct mode modes[] = {
    {"fork_exec", start_fork_exec, reap_any},
    {"posix_spawn", start_posix_spawn, reap_any},
    {"pthread", start_pthread, join_pthread},
};

static int failed(const char *mode, const char *what, long i)
{
    fprintf(stderr, "spawn_native: %s: %s %ld failed (%s)\n", mode, what, i,
            errno != 0 ? strerror(errno) : "child exited non-zero");
    return 1;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    long inflight = argc > 3 ? strtol(argv[3], NULL, 10) : 1;
    char *target = argc > 4 ? argv[4] : NULL;

    const struct mode *mode = NULL;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(name, modes[i].name) == 0)
            mode = &modes[i];
    }
    int threaded = mode != NULL && mode->start == start_pthread;
    if (mode == NULL || n < 1 || inflight < 1 || inflight > MAX_INFLIGHT ||
        argc > 5 || (!threaded && target == NULL)) {
        fprintf(stderr,
                "usage: spawn_native fork_exec|posix_spawn|pthread N [INFLIGHT [TARGET]]\n"
                "       (1 <= INFLIGHT <= %d; TARGET is required except for pthread)\n",
                MAX_INFLIGHT);
        return 2;
    }
    if (!threaded && access(target, X_OK) != 0) {
        fprintf(stderr, "spawn_native: %s: %s\n", target, strerror(errno));
        return 2;
    }

    char *target_argv[] = {target, NULL};
    long started = 0, finished = 0;
    double start = now_seconds();
    while (finished < n) {
        errno = 0;
        if (started < n && started - finished < inflight) {
            if (mode->start(target_argv, started % inflight) != 0)
                return failed(name, "start", started);
            started++;
        } else {
            if (mode->finish(finished % inflight) != 0)
                return failed(name, "wait", finished);
            finished++;
        }
    }
    double seconds = now_seconds() - start;

    printf("spawn_native mode=%s n=%ld inflight=%ld seconds=%.6f rate=%.1f\n", name, n,
           inflight, seconds, (double)n / seconds);
    return 0;
}
