/*
 * balance - an unbalanced CPU-bound workload, for the balancer's experiment:
 * N processes of unequal length, all started at once in one place.
 *
 *   balance [-m MIB] N UNIT [KERNEL [PAIRS ROUNDS]]
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
 * With PAIRS, the workload is mixed: PAIRS pairs of processes are forked
 * first, in the same place, and each pair makes ROUNDS round trips of one
 * message (atoll: ipc_sendrec and ipc_receive/ipc_send; Linux: two pipes);
 * the client of pair P prints, at its end,
 *
 *   balance pair=P rounds=R wall_us=T cpu_us=C
 *
 * (the server prints the same with side=server before wall_us), and the
 * makespan covers the pairs too.
 *
 * With -m MIB, the parent holds MIB MiB of memory before it forks the
 * children, and each child writes all of its copy before each unit of its
 * work: processes that are dear to copy from their start, and rewrite their
 * memory faster than a link carries it (what the balancer must weigh before
 * moving one to another node).
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

/* Where the held memory is published, so that its writes are not optimized
 * away as never read. */
unsigned char *volatile balance_held;

/* One end of a ping-pong pair: `server` is 0 in the client. */
#ifdef __wasi__
static void pair_end(long p, long rounds, atoll_pid_t server, int64_t forked_us)
{
    message m;
    memset(&m, 0, sizeof m);
    for (long r = 0; r < rounds; r++) {
        int err;
        if (server == 0) {
            err = ipc_receive(ANY, &m, NULL);
            if (err == 0)
                err = ipc_send(m.m_source, &m);
        } else {
            m.m_type = (int32_t)r;
            err = ipc_sendrec(server, &m);
        }
        if (err != 0) {
            fprintf(stderr, "balance: pair %ld: IPC failed (%d)\n", p, err);
            _exit(1);
        }
    }
#else
static int pipes[2][2];
static void pair_end(long p, long rounds, int server, int64_t forked_us)
{
    char byte = 0;
    int in = server == 0 ? pipes[0][0] : pipes[1][0];
    int out = server == 0 ? pipes[1][1] : pipes[0][1];
    for (long r = 0; r < rounds; r++) {
        if (server == 0) {
            if (read(in, &byte, 1) != 1 || write(out, &byte, 1) != 1)
                _exit(1);
        } else if (write(out, &byte, 1) != 1 || read(in, &byte, 1) != 1) {
            _exit(1);
        }
    }
#endif
    int64_t wall = clock_us(CLOCK_MONOTONIC) - forked_us;
    printf("balance pair=%ld rounds=%ld%s wall_us=%" PRId64 " cpu_us=%" PRId64 "\n", p, rounds,
           server == 0 ? " side=server" : "", wall, clock_us(CLOCK_PROCESS_CPUTIME_ID));
    fflush(stdout);
    _exit(0);
}

static void child(long i, long unit, unsigned char *held, size_t hold, int64_t forked_us)
{
    long w = 1 + i % 4;
    uint64_t value = 0x9E3779B97F4A7C15ull + (uint64_t)i;
    for (long u = 0; u < w; u++) {
        memset(held, (int)(value & 0xff) | 1, hold);
        value = work((uint64_t)unit, value);
    }
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
    static const char usage[] = "usage: balance [-m MIB] N UNIT [KERNEL|any [PAIRS ROUNDS]]\n";
    long hold = 0;
    for (int opt; (opt = getopt(argc, argv, "m:")) != -1;) {
        if (opt != 'm') {
            fputs(usage, stderr);
            return 2;
        }
        hold = strtol(optarg, NULL, 10);
        if (hold < 0 || hold > 2048) {
            fprintf(stderr, "balance: -m takes 0 to 2048 (MiB)\n");
            return 2;
        }
    }
    argc -= optind - 1;
    argv += optind - 1;
    if (argc != 3 && argc != 4 && argc != 6) {
        fputs(usage, stderr);
        return 2;
    }
    long n = strtol(argv[1], NULL, 10), unit = strtol(argv[2], NULL, 10);
    long pairs = argc == 6 ? strtol(argv[4], NULL, 10) : 0;
    long rounds = argc == 6 ? strtol(argv[5], NULL, 10) : 0;
    if (n < 1 || unit < 1 || pairs < 0 || rounds < 0) {
        fprintf(stderr, "balance: N and UNIT must be positive, PAIRS and ROUNDS not negative\n");
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
    size_t hold_bytes = (size_t)hold << 20;
    unsigned char *held = malloc(hold_bytes ? hold_bytes : 1);
    if (!held) {
        fprintf(stderr, "balance: cannot hold %ld MiB\n", hold);
        return 1;
    }
    balance_held = held;
    memset(held, 1, hold_bytes);
    int64_t start = clock_us(CLOCK_MONOTONIC);
    for (long p = 0; p < pairs; p++) {
        int64_t forked = clock_us(CLOCK_MONOTONIC);
#ifdef __wasi__
        atoll_pid_t server = atoll_fork(kernel);
        if (server == 0)
            pair_end(p, rounds, 0, forked);
        atoll_pid_t client = server < 0 ? server : atoll_fork(kernel);
        if (client == 0)
            pair_end(p, rounds, server, forked);
#else
        if (pipe(pipes[0]) != 0 || pipe(pipes[1]) != 0) {
            fprintf(stderr, "balance: pipe failed\n");
            return 1;
        }
        pid_t server = fork();
        if (server == 0)
            pair_end(p, rounds, 0, forked);
        pid_t client = server < 0 ? server : fork();
        if (client == 0)
            pair_end(p, rounds, 1, forked);
        for (int e = 0; e < 2; e++) {
            close(pipes[e][0]);
            close(pipes[e][1]);
        }
#endif
        if (server < 0 || client < 0) {
            fprintf(stderr, "balance: fork failed\n");
            return 1;
        }
    }
    for (long i = 0; i < n; i++) {
        int64_t forked = clock_us(CLOCK_MONOTONIC);
#ifdef __wasi__
        atoll_pid_t pid = atoll_fork(kernel);
#else
        pid_t pid = fork();
#endif
        if (pid == 0)
            child(i, unit, held, hold_bytes, forked);
        if (pid < 0) {
            fprintf(stderr, "balance: fork failed\n");
            return 1;
        }
    }
    int failed = 0;
    for (long i = 0; i < n + 2 * pairs; i++) {
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
