/*
 * spawn_native - what starting a process (or thread) costs on plain Linux,
 * the baseline for bench/guests/spawnbench.
 *
 *   spawn_native fork_exec|posix_spawn|pthread N [TARGET]
 *
 *   fork_exec    fork(), execv(TARGET) in the child, waitpid() in the parent
 *   posix_spawn  posix_spawn(TARGET), then waitpid()
 *   pthread      pthread_create() of an empty thread, then pthread_join();
 *                TARGET is not used
 *
 * Runs N iterations one at a time (start, then wait) and prints
 *
 *   spawn_native mode=MODE n=N seconds=S rate=R
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

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 0 if the child ran and exited 0. */
static int reap(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int run_fork_exec(char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127); /* exec failed: the parent sees a non-zero status */
    }
    return reap(pid);
}

static int run_posix_spawn(char *const argv[])
{
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return reap(pid);
}

static void *empty_thread(void *arg)
{
    return arg;
}

static int run_pthread(char *const argv[])
{
    (void)argv;
    pthread_t thread;
    int err = pthread_create(&thread, NULL, empty_thread, NULL);
    if (err == 0)
        err = pthread_join(thread, NULL);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    char *target = argc > 3 ? argv[3] : NULL;

    int (*run)(char *const argv[]);
    if (strcmp(mode, "fork_exec") == 0)
        run = run_fork_exec;
    else if (strcmp(mode, "posix_spawn") == 0)
        run = run_posix_spawn;
    else if (strcmp(mode, "pthread") == 0)
        run = run_pthread;
    else
        run = NULL;

    if (run == NULL || n < 1 || argc > 4 ||
        (run != run_pthread && target == NULL)) {
        fprintf(stderr,
                "usage: spawn_native fork_exec|posix_spawn|pthread N [TARGET]\n"
                "       (TARGET is required except for pthread)\n");
        return 2;
    }
    if (run != run_pthread && access(target, X_OK) != 0) {
        fprintf(stderr, "spawn_native: %s: %s\n", target, strerror(errno));
        return 2;
    }

    char *target_argv[] = {target, NULL};
    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        errno = 0;
        if (run(target_argv) != 0) {
            fprintf(stderr, "spawn_native: %s: iteration %ld failed (%s)\n", mode,
                    i, errno != 0 ? strerror(errno) : "child exited non-zero");
            return 1;
        }
    }
    double seconds = now_seconds() - start;

    printf("spawn_native mode=%s n=%ld seconds=%.6f rate=%.1f\n", mode, n,
           seconds, (double)n / seconds);
    return 0;
}
