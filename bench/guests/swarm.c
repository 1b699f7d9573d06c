/*
 * swarm - many processes alive at once, each blocked in IPC receive.
 *
 *   swarm N [HOLD]
 *
 * Spawns N children of its own module on ATOLL_KERNEL_ANY. Each child
 * notifies the parent, then blocks in ipc_receive until the parent's
 * request, answers it (2 * value + 1) and exits 0. Once every child has
 * notified, the parent prints
 *
 *   swarm ready n=N seconds=S
 *
 * (S: first spawn to last notification). With HOLD, a path, it then waits
 * until that file exists, polling every 20 ms (meanwhile the children can be
 * listed, killed and migrated from outside). It then sends each child its
 * request with ipc_sendrec, reaps every child and prints
 *
 *   swarm done answered=A gone=G clean=C seconds=S
 *
 * A: children that answered correctly; G: children that were gone (killed)
 * when asked; C: children that exited 0; S: first request to last reap.
 * Exit status: 0 when A + G = N and C = A; 1 otherwise; 2 on bad arguments.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atoll.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int child(atoll_pid_t parent)
{
    if (ipc_notify(parent) != 0)
        return 3;
    message m;
    if (ipc_receive(ATOLL_ANY, &m, NULL) != 0)
        return 4;
    atoll_pid_t asker = m.m_source;
    m.m1_i1 = 2 * m.m1_i1 + 1;
    return ipc_send(asker, &m) == 0 ? 0 : 5;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child((atoll_pid_t)strtoll(argv[2], NULL, 10));

    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    const char *hold = argc > 2 ? argv[2] : NULL;
    if (argc < 2 || argc > 3 || n < 1) {
        fprintf(stderr, "usage: swarm N [HOLD]   (N >= 1)\n");
        return 2;
    }
    atoll_pid_t *kids = calloc((size_t)n, sizeof *kids);
    if (kids == NULL) {
        fprintf(stderr, "swarm: no memory for %ld pids\n", n);
        return 1;
    }
    char me[24];
    snprintf(me, sizeof me, "%lld", (long long)atoll_getpid());
    char *child_argv[] = {"swarm", "child", me, NULL};

    double start = now_seconds();
    for (long i = 0; i < n; i++) {
        int err = atoll_spawn(NULL, child_argv, ATOLL_KERNEL_ANY, &kids[i]);
        if (err != 0) {
            fprintf(stderr, "swarm: spawn %ld: %s\n", i, strerror(err));
            return 1;
        }
    }
    for (long i = 0; i < n; i++) {
        message m;
        int status = 0;
        int err = ipc_receive(ATOLL_ANY, &m, &status);
        if (err != 0) {
            fprintf(stderr, "swarm: receive: %s\n", strerror(err));
            return 1;
        }
    }
    printf("swarm ready n=%ld seconds=%.6f\n", n, now_seconds() - start);
    fflush(stdout);

    if (hold != NULL) {
        struct timespec tick = {0, 20 * 1000 * 1000};
        while (access(hold, F_OK) != 0)
            nanosleep(&tick, NULL);
    }

    long answered = 0, gone = 0, clean = 0, wrong = 0;
    start = now_seconds();
    for (long i = 0; i < n; i++) {
        message m = {0};
        m.m1_i1 = (int32_t)i;
        int err = ipc_sendrec(kids[i], &m);
        if (err == EDEADSRCDST)
            gone++;
        else if (err != 0 || m.m1_i1 != 2 * (int32_t)i + 1)
            wrong++;
        else
            answered++;
    }
    for (long i = 0; i < n; i++) {
        int status;
        if (atoll_wait(ATOLL_ANY, &status, NULL) != 0) {
            fprintf(stderr, "swarm: wait: %s\n", strerror(errno));
            return 1;
        }
        clean += status == 0;
    }
    printf("swarm done answered=%ld gone=%ld clean=%ld seconds=%.6f\n", answered,
           gone, clean, now_seconds() - start);
    if (wrong != 0)
        fprintf(stderr, "swarm: %ld wrong answers\n", wrong);
    return answered + gone == n && clean == answered && wrong == 0 ? 0 : 1;
}
