/* The thread experiments of `atoll bench threads`, one C source for atoll
 * and for Linux (gcc -pthread).
 *
 *   threadbench create N         N threads created and joined one after
 *                                the other: ns=PER_THREAD
 *   threadbench sort NE NG       seed 004's MergeSort: NE numbers in NG
 *                                groups, each sorted (O(n^2), insertion)
 *                                by a thread, then merged and checked:
 *                                ns=SORTING sum=... (the time from the
 *                                first group's start to the last one's
 *                                end: seed 004's model has no merge term)
 *   threadbench sort-procs NE NG the same with a process per group: on
 *                                atoll forked onto any kernel, sending its
 *                                group back through a grant; on Linux
 *                                forked, in shared memory
 *   threadbench park T PAGES     T threads, each with PAGES 4 KiB pages of
 *                                its own written, waiting on a condition:
 *                                prints "ready", then waits for ever (the
 *                                migration experiment moves and ends it) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __wasm__
#include <atoll.h>
#else
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *nothing(void *arg) {
    return arg;
}

static int create(long n) {
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, 0, nothing, 0) != 0 || pthread_join(t, 0) != 0)
            return 1;
    }
    printf("threadbench create n=%ld ns=%.1f\n", n, (double)(now_ns() - t0) / (double)n);
    return 0;
}

/* The table and its groups. */
static int32_t *table;
static long n_e, n_g;

static long group_start(long g) {
    return g * n_e / n_g;
}

static void insertion_sort(int32_t *a, long n) {
    for (long i = 1; i < n; i++) {
        int32_t v = a[i];
        long j = i;
        for (; j > 0 && a[j - 1] > v; j--)
            a[j] = a[j - 1];
        a[j] = v;
    }
}

static void *sort_group(void *arg) {
    long g = (long)arg;
    insertion_sort(table + group_start(g), group_start(g + 1) - group_start(g));
    return 0;
}

static void fill(void) {
    uint32_t x = 12345;
    for (long i = 0; i < n_e; i++) {
        x = x * 1103515245u + 12345u;
        table[i] = (int32_t)(x >> 1);
    }
}

/* Bottom-up merges of the sorted groups, pairwise; checks the result. */
static int merge_and_check(uint64_t ns) {
    int32_t *tmp = malloc((size_t)n_e * sizeof *tmp);
    long *start = malloc((size_t)(n_g + 1) * sizeof *start);
    for (long g = 0; g <= n_g; g++)
        start[g] = group_start(g);
    for (long runs = n_g; runs > 1; runs = (runs + 1) / 2) {
        long k = 0;
        for (long r = 0; r < runs; r += 2, k++) {
            long lo = start[r], mid = start[r + 1 < runs ? r + 1 : runs];
            long hi = start[r + 2 < runs ? r + 2 : runs];
            long i = lo, j = mid, o = lo;
            while (i < mid && j < hi)
                tmp[o++] = table[i] <= table[j] ? table[i++] : table[j++];
            while (i < mid)
                tmp[o++] = table[i++];
            while (j < hi)
                tmp[o++] = table[j++];
            memcpy(table + lo, tmp + lo, (size_t)(hi - lo) * sizeof *tmp);
            start[k] = lo;
        }
        start[k] = n_e;
    }
    uint64_t sum = 0;
    for (long i = 0; i < n_e; i++) {
        if (i > 0 && table[i - 1] > table[i])
            return 1;
        sum = sum * 31 + (uint32_t)table[i];
    }
    printf("threadbench sort ne=%ld ng=%ld ns=%llu sum=%llu\n", n_e, n_g,
           (unsigned long long)ns, (unsigned long long)sum);
    free(tmp);
    free(start);
    return 0;
}

static int sort_threads(void) {
    table = malloc((size_t)n_e * sizeof *table);
    fill();
    uint64_t t0 = now_ns();
    pthread_t *t = malloc((size_t)n_g * sizeof *t);
    for (long g = 0; g < n_g; g++)
        if (pthread_create(&t[g], 0, sort_group, (void *)g) != 0)
            return 1;
    for (long g = 0; g < n_g; g++)
        pthread_join(t[g], 0);
    return merge_and_check(now_ns() - t0);
}

static int sort_procs(void) {
#ifdef __wasm__
    table = malloc((size_t)n_e * sizeof *table);
    fill();
    uint64_t t0 = now_ns();
    /* Each child writes its sorted group back through this grant. */
    uint32_t grant;
    if (atoll_grant(ATOLL_ANY, table, (size_t)n_e * sizeof *table, CPF_WRITE, &grant) != 0)
        return 1;
    atoll_pid_t parent = atoll_getpid();
    for (long g = 0; g < n_g; g++) {
        atoll_pid_t child = atoll_fork(ATOLL_KERNEL_ANY);
        if (child < 0)
            return 1;
        if (child == 0) {
            sort_group((void *)g);
            long at = group_start(g), n = group_start(g + 1) - at;
            exit(atoll_safecopy_to(parent, grant, (size_t)at * sizeof *table,
                                   table + at, (size_t)n * sizeof *table) != 0);
        }
    }
    for (long g = 0; g < n_g; g++) {
        int status;
        if (atoll_wait(ATOLL_ANY, &status, 0) != 0 || status != 0)
            return 1;
    }
    atoll_revoke(grant);
#else
    table = mmap(0, (size_t)n_e * sizeof *table, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    fill();
    uint64_t t0 = now_ns();
    for (long g = 0; g < n_g; g++) {
        pid_t child = fork();
        if (child < 0)
            return 1;
        if (child == 0) {
            sort_group((void *)g);
            _exit(0);
        }
    }
    for (long g = 0; g < n_g; g++) {
        int status;
        if (wait(&status) < 0 || status != 0)
            return 1;
    }
#endif
    return merge_and_check(now_ns() - t0);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;

static void *parked(void *arg) {
    long pages = (long)arg;
    char *mine = malloc((size_t)pages * 4096 + 1);
    for (long p = 0; p < pages; p++)
        memset(mine + p * 4096, (int)(p + 1), 4096);
    pthread_mutex_lock(&lock);
    for (;;)
        pthread_cond_wait(&never, &lock);
    return 0;
}

static int park(long threads, long pages) {
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, 0, parked, (void *)pages) != 0)
            return 1;
    }
    /* Let each thread write its pages and wait. */
    for (int i = 0; i < 4; i++)
        sched_yield();
    printf("ready\n");
    fflush(stdout);
    pthread_mutex_lock(&lock);
    for (;;)
        pthread_cond_wait(&never, &lock);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "create") == 0)
        return create(atol(argv[2]));
    if (argc == 4 && (strcmp(argv[1], "sort") == 0 || strcmp(argv[1], "sort-procs") == 0)) {
        n_e = atol(argv[2]);
        n_g = atol(argv[3]);
        if (n_g < 1 || n_g > n_e)
            return 2;
        return argv[1][4] ? sort_procs() : sort_threads();
    }
    if (argc == 4 && strcmp(argv[1], "park") == 0)
        return park(atol(argv[2]), atol(argv[3]));
    fprintf(stderr, "usage: threadbench create N | sort NE NG | sort-procs NE NG | park T PAGES\n");
    return 2;
}
