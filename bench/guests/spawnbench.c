/*
 * spawnbench - how many processes per second atoll can start and reap.
 *
 *   spawnbench N [INFLIGHT]          default INFLIGHT=64
 *
 * Spawns N children of its own module with argv {"spawnbench", "child"} (a
 * child returns 0 at once) on ATOLL_KERNEL_ANY, keeping at most INFLIGHT of
 * them alive, and reaps them with atoll_wait(ATOLL_ANY). Prints
 *
 *   spawnbench n=N seconds=S rate=R
 *
 * with R in processes per second, start of the first spawn to the last reap,
 * on the monotonic clock. Compare with bench/native/spawn_native. Exit
 * status: 0, 1 if a spawn or wait failed or a child exited non-zero, 2 on bad
 * arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atoll.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return 0;

    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    long inflight_max = argc > 2 ? strtol(argv[2], NULL, 10) : 64;
    if (argc < 2 || argc > 3 || n < 1 || inflight_max < 1) {
        fprintf(stderr, "usage: spawnbench N [INFLIGHT]   (N, INFLIGHT >= 1)\n");
        return 2;
    }

    char *child_argv[] = {"spawnbench", "child", NULL};
    long spawned = 0, reaped = 0, inflight = 0, bad = 0;

    double start = now_seconds();
    while (reaped < n) {
        /* Fill the window first, then free one slot at a time. */
        if (spawned < n && inflight < inflight_max) {
            int err = atoll_spawn(NULL, child_argv, ATOLL_KERNEL_ANY, NULL);
            if (err != 0) {
                fprintf(stderr, "spawnbench: spawn %ld: %s\n", spawned,
                        strerror(err));
                bad++;
                n = spawned; /* stop spawning; reap what is running */
                continue;
            }
            spawned++;
            inflight++;
            continue;
        }
        int status;
        int err = atoll_wait(ATOLL_ANY, &status, NULL);
        if (err != 0) {
            fprintf(stderr, "spawnbench: wait: %s\n", strerror(err));
            return 1;
        }
        if (status != 0)
            bad++;
        inflight--;
        reaped++;
    }
    double seconds = now_seconds() - start;

    printf("spawnbench n=%ld seconds=%.6f rate=%.1f\n", reaped, seconds,
           seconds > 0 ? (double)reaped / seconds : 0.0);
    if (bad != 0)
        fprintf(stderr, "spawnbench: %ld failures\n", bad);
    return bad != 0;
}
