/*
 * balance - an unbalanced CPU-bound workload, for the balancer's experiment:
 * N processes of unequal length, all started at once in one place.
 *
 *   balance N UNIT [KERNEL]
 *
 * Child i (0 <= i < N) runs (1 + i % 4) * UNIT rounds of xorshift64, with no
 * system call, then prints
 *
 *   balance child=I work=W kernel=K wall_us=T cpu_us=C value=0x...
 *
 * K the kernel it ended on (atoll: NODE.INDEX; `-` on Linux), T from its
 * parent's fork to its end, C its CPU time: T - C is the time it waited,
 * runnable, for a CPU (or moved). Once every child
 * has ended, the parent prints
 *
 *   balance n=N unit=UNIT makespan_us=M
 *
 * The same source builds for atoll and for Linux. On atoll, the children are
 * atoll_fork()ed onto KERNEL: an index of this node (default 0, all on one
 * kernel, for the balancer to spread) or `any` (ATOLL_KERNEL_ANY: the DQDT
 * places each). On Linux they are fork()ed, and the scheduler places them
 * (KERNEL is ignored). Exit status: 0, 1 if a child failed, 2 on bad
 * arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __wasi__
#include <atoll.h>
#else
#include <sys/wait.h>
#endif

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The work: nothing the compiler can fold, nothing that calls out. */
static uint64_t work(uint64_t rounds, uint64_t x)
{
    for (uint64_t r = 0; r < rounds; r++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static void child(long i, long unit, int64_t forked_us)
{
    long w = 1 + i % 4;
    uint64_t value = work((uint64_t)(w * unit), 0x9E3779B97F4A7C15ull + (uint64_t)i);
    int64_t wall = clock_us(CLOCK_MONOTONIC) - forked_us;
    int64_t cpu = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    char kernel[16] = "-";
#ifdef __wasi__
    snprintf(kernel, sizeof kernel, "%d.%d", atoll_kernel_node(), atoll_kernel_index());
#endif
    printf("balance child=%ld work=%ld kernel=%s wall_us=%" PRId64 " cpu_us=%" PRId64
           " value=0x%016" PRIx64 "\n",
           i, w, kernel, wall, cpu, value);
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: balance N UNIT [KERNEL|any]\n");
        return 2;
    }
    long n = strtol(argv[1], NULL, 10), unit = strtol(argv[2], NULL, 10);
    if (n < 1 || unit < 1) {
        fprintf(stderr, "balance: N and UNIT must be positive\n");
        return 2;
    }
#ifdef __wasi__
    int kernel = 0;
    if (argc == 4)
        kernel = strcmp(argv[3], "any") == 0 ? ATOLL_KERNEL_ANY : atoi(argv[3]);
    if (kernel != ATOLL_KERNEL_ANY && (kernel < 0 || kernel >= atoll_kernel_count())) {
        fprintf(stderr, "balance: no kernel %s on this node\n", argv[3]);
        return 2;
    }
#endif
    int64_t start = clock_us(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
        int64_t forked = clock_us(CLOCK_MONOTONIC);
#ifdef __wasi__
        atoll_pid_t pid = atoll_fork(kernel);
#else
        pid_t pid = fork();
#endif
        if (pid == 0)
            child(i, unit, forked);
        if (pid < 0) {
            fprintf(stderr, "balance: fork failed\n");
            return 1;
        }
    }
    int failed = 0;
    for (long i = 0; i < n; i++) {
        int status = 0;
#ifdef __wasi__
        failed |= atoll_wait(ATOLL_ANY, &status, NULL) != 0 || status != 0;
#else
        failed |= wait(&status) < 0 || status != 0;
#endif
    }
    printf("balance n=%ld unit=%ld makespan_us=%" PRId64 "\n", n, unit,
           clock_us(CLOCK_MONOTONIC) - start);
    return failed;
}
