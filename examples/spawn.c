/*
 * spawn - start children on every kernel and collect their exit statuses.
 *
 *   spawn [K]                                    default K=4
 *
 * The parent starts K copies of its own module, child i on kernel
 * i % atoll_kernel_count(), with arguments "child" and i. Child i counts the
 * primes below 20000 + 1000*i, reports where it ran and exits with status
 * 10 + i. The parent waits for each child by pid, in spawn order, and checks
 * the statuses. With K=2 on a 2-kernel node the output looks like:
 *
 *   spawn: starting 2 children over 2 kernels
 *   child 0: pid 0.0:2:0 on kernel 0: 2262 primes below 20000
 *   child 1: pid 0.1:1:0 on kernel 1: 2360 primes below 21000
 *   child 0 exited with status 10
 *   child 1 exited with status 11
 *   spawn: all 2 children exited as expected
 *
 * The children's own lines may come in any order; the parent's do not. Exit
 * status 0 only if every child's status matched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atoll.h>

#define MAX_CHILDREN 1000

/* Plenty of work to notice on a profile, none to wait for in a demo. */
static int count_primes_below(int limit)
{
    int count = 0;
    for (int n = 2; n < limit; n++) {
        int prime = 1;
        for (int d = 2; d * d <= n; d++) {
            if (n % d == 0) {
                prime = 0;
                break;
            }
        }
        count += prime;
    }
    return count;
}

static int child(int i)
{
    char pid[ATOLL_PID_STRLEN];
    int limit = 20000 + 1000 * i;
    int primes = count_primes_below(limit);

    printf("child %d: pid %s on kernel %d: %d primes below %d\n", i,
           atoll_pid_format(pid, atoll_getpid()), atoll_kernel_index(), primes,
           limit);
    return 10 + i;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]));

    int k = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2 || k < 1 || k > MAX_CHILDREN) {
        fprintf(stderr, "usage: spawn [K]   (1 <= K <= %d)\n", MAX_CHILDREN);
        return 2;
    }

    int kernels = atoll_kernel_count();
    if (kernels < 1)
        kernels = 1; /* never divide by a runtime's bad answer */
    printf("spawn: starting %d children over %d kernels\n", k, kernels);
    fflush(stdout); /* before the children's lines, not after */

    static atoll_pid_t pids[MAX_CHILDREN];
    int started = 0;
    for (int i = 0; i < k; i++) {
        char index[16];
        snprintf(index, sizeof index, "%d", i);
        /* argv[0] as we were called, so the children look like us in ps. */
        char *child_argv[] = {argc > 0 ? argv[0] : "spawn", "child", index, NULL};

        int err = atoll_spawn(NULL, child_argv, i % kernels, &pids[i]);
        if (err != 0) {
            fprintf(stderr, "spawn: child %d: %s\n", i, strerror(err));
            break; /* still reap the ones already running */
        }
        started++;
    }

    int matched = 0;
    for (int i = 0; i < started; i++) {
        int status;
        int err = atoll_wait(pids[i], &status, NULL);
        if (err != 0) {
            fprintf(stderr, "spawn: wait for child %d: %s\n", i, strerror(err));
            continue;
        }
        printf("child %d exited with status %d\n", i, status);
        if (status == 10 + i)
            matched++;
    }

    if (matched == k) {
        printf("spawn: all %d children exited as expected\n", k);
        return 0;
    }
    printf("spawn: %d of %d children exited as expected\n", matched, k);
    return 1;
}
