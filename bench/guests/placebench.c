/*
 * placebench - what creating, replacing and ending a process costs on atoll,
 * with the target on this kernel or another (seed 001's experiment).
 *
 *   placebench spawn|fork|exec|kill N KERNEL HEAP_KIB
 *
 * First takes HEAP_KIB KiB of heap and touches it (the size fork copies).
 * Then, N times, one at a time, on KERNEL (an index of this node, or
 * NODE.INDEX):
 *   spawn  atoll_spawn of its own module, which exits at once; wait
 *   fork   atoll_fork; the child exits at once; wait
 *   exec   atoll_fork on its own kernel; the child atoll_execs its own
 *          module on KERNEL, which exits at once; wait
 *   kill   atoll_spawn of a child that sleeps; atoll_kill it; wait
 * and prints
 *
 *   placebench what=W n=N kernel=KERNEL us=U
 *
 * with U the mean microseconds per iteration. Exit status: 0, 1 if a call
 * failed or a child ended otherwise than expected, 2 on bad arguments.
 */
#include <atoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static char *heap;

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return 0;
    if (argc == 2 && strcmp(argv[1], "sleeper") == 0) {
        sleep(100);
        return 1;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: placebench spawn|fork|exec|kill N KERNEL HEAP_KIB\n");
        return 2;
    }
    const char *what = argv[1];
    long n = strtol(argv[2], NULL, 10), kib = strtol(argv[4], NULL, 10);
    const char *dot = strchr(argv[3], '.');
    int index = atoi(dot != NULL ? dot + 1 : argv[3]);
    int kernel = dot != NULL ? ATOLL_KERNEL(atoi(argv[3]), index) : index;
    if (n < 1 || kib < 0 || index < 0 || (dot == NULL && index >= atoll_kernel_count())) {
        fprintf(stderr, "placebench: bad N, KERNEL or HEAP_KIB\n");
        return 2;
    }
    heap = malloc((size_t)kib * 1024 + 1);
    if (heap == NULL)
        return 1;
    memset(heap, 1, (size_t)kib * 1024 + 1);

    char *child[] = {"placebench", "child", NULL};
    char *sleeper[] = {"placebench", "sleeper", NULL};
    int bad = 0;
    double t0 = now_us();
    for (long i = 0; i < n && !bad; i++) {
        atoll_pid_t pid = 0;
        int want = 0, status = -1;
        if (strcmp(what, "spawn") == 0) {
            bad = atoll_spawn(NULL, child, kernel, &pid) != 0;
        } else if (strcmp(what, "fork") == 0) {
            pid = atoll_fork(kernel);
            if (pid == 0)
                _exit(0);
            bad = pid < 0;
        } else if (strcmp(what, "exec") == 0) {
            pid = atoll_fork(atoll_kernel_index());
            if (pid == 0) {
                atoll_exec(NULL, child, kernel);
                _exit(1);
            }
            bad = pid < 0;
        } else if (strcmp(what, "kill") == 0) {
            bad = atoll_spawn(NULL, sleeper, kernel, &pid) != 0 || atoll_kill(pid, 9) != 0;
            want = 128 + 9;
        } else {
            fprintf(stderr, "placebench: unknown %s\n", what);
            return 2;
        }
        if (!bad)
            bad = atoll_wait(pid, &status, NULL) != 0 || status != want;
    }
    double us = (now_us() - t0) / (double)n;
    if (bad) {
        fprintf(stderr, "placebench: %s failed\n", what);
        return 1;
    }
    printf("placebench what=%s n=%ld kernel=%s us=%.2f\n", what, n, argv[3], us);
    return heap[kib * 1024] == 1 ? 0 : 1;
}
