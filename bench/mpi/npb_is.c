/*
 * npb_is.c - NPB's IS kernel (integer sort), written here from the NAS
 * Parallel Benchmarks specification (NPB 3, IS): keys from the NPB random
 * generator (each the sum of four uniform deviates, scaled to MAX_KEY/4),
 * ranked ten times, two keys changed before each ranking; the ranks of five
 * test keys are checked against the specification's values (partial
 * verification) and the final order against the keys (full verification).
 *
 *   npb_is CLASS        CLASS: S (2^16 keys below 2^11), W (2^20 below 2^16),
 *                       A (2^23 below 2^19) or B (2^25 below 2^21)
 *
 * Distribution: rank r generates the r-th slice of the one global sequence
 * of keys; each ranking sends every key to the rank owning its key range
 * (equal ranges, MPI_Alltoall of counts then MPI_Alltoallv of keys), counts
 * them there, and offsets the counts by the keys of lower ranges (MPI_Scan).
 * Prints `npb_is class=S ranks=4 seconds=0.05 mops=13.1 verified=1`; exits
 * 1 if a verification fails. The same source builds with Open MPI's mpicc.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb.h"

#define ITERATIONS 10
#define TESTS 5

struct class {
    char name;
    int keys_log2, max_key_log2;
    long index[TESTS], rank[TESTS];
};

static const struct class classes[] = {
    {'S', 16, 11, {48427, 17148, 23627, 62548, 4431}, {0, 18, 346, 64917, 65463}},
    {'W', 20, 16, {357773, 934767, 875723, 898999, 404505},
     {1249, 11698, 1039987, 1043896, 1048018}},
    {'A', 23, 19, {2112377, 662041, 5336171, 3642833, 4250760},
     {104, 17523, 123928, 8288932, 8388264}},
    {'B', 25, 21, {41869, 812306, 5102857, 18232239, 26860214},
     {33422937, 10244, 59149, 33135281, 99}},
};

/* The rank test key i must have after ranking `it` (the specification's
 * rule per class: keys below the changed ones move by it). */
static long expected(const struct class *c, int i, int it)
{
    switch (c->name) {
    case 'S':
        return i <= 2 ? c->rank[i] + it : c->rank[i] - it;
    case 'W':
        return i < 2 ? c->rank[i] + (it - 2) : c->rank[i] - it;
    case 'A':
        return i <= 2 ? c->rank[i] + (it - 1) : c->rank[i] - (it - 1);
    default: /* B */
        return i == 1 || i == 2 || i == 4 ? c->rank[i] + it : c->rank[i] - it;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const struct class *c = &classes[npb_class(argc, argv, "npb_is", "SWAB")];
    long n = 1L << c->keys_log2, max_key = 1L << c->max_key_log2;
    long first = n * me / size, last = n * (me + 1) / size, mine = last - first;

    /* My slice of the global sequence of keys. */
    int *keys = malloc(sizeof(int) * (size_t)mine);
    double seed = npb_skip(314159265.0, 1220703125.0, 4 * first);
    for (long i = 0; i < mine; i++) {
        double x = randlc(&seed, 1220703125.0);
        x += randlc(&seed, 1220703125.0);
        x += randlc(&seed, 1220703125.0);
        x += randlc(&seed, 1220703125.0);
        keys[i] = (int)((double)(max_key / 4) * x);
    }
    /* The test keys, from the ranks that hold them. */
    long test_key[TESTS], local_test[TESTS];
    for (int i = 0; i < TESTS; i++)
        local_test[i] = c->index[i] >= first && c->index[i] < last ? keys[c->index[i] - first] : -1;
    MPI_Allreduce(local_test, test_key, TESTS, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);

    /* Key range [lo, hi) is mine to count: the keys v with v * size /
     * max_key == me. */
    long lo = (max_key * me + size - 1) / size, hi = (max_key * (me + 1) + size - 1) / size;
    int *send_counts = malloc(sizeof(int) * (size_t)size), *recv_counts = malloc(sizeof(int) * (size_t)size);
    int *send_displs = malloc(sizeof(int) * (size_t)size), *recv_displs = malloc(sizeof(int) * (size_t)size);
    int *outgoing = malloc(sizeof(int) * (size_t)mine);
    int *incoming = malloc(sizeof(int) * (size_t)n);
    long *count = malloc(sizeof(long) * (size_t)(hi - lo + 1));
    int passed = 0;
    long received = 0, below = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    npb_timed_part_starts();
    for (int it = 1; it <= ITERATIONS; it++) {
        if (it >= first && it < last)
            keys[it - first] = it;
        if (it + ITERATIONS >= first && it + ITERATIONS < last)
            keys[it + ITERATIONS - first] = (int)(max_key - it);
        /* Each key to the rank owning its range. */
        memset(send_counts, 0, sizeof(int) * (size_t)size);
        for (long i = 0; i < mine; i++)
            send_counts[(long)keys[i] * size / max_key]++;
        for (int r = 0, d = 0; r < size; r++) {
            send_displs[r] = d;
            d += send_counts[r];
        }
        int *fill = malloc(sizeof(int) * (size_t)size);
        memcpy(fill, send_displs, sizeof(int) * (size_t)size);
        for (long i = 0; i < mine; i++)
            outgoing[fill[(long)keys[i] * size / max_key]++] = keys[i];
        free(fill);
        MPI_Alltoall(send_counts, 1, MPI_INT, recv_counts, 1, MPI_INT, MPI_COMM_WORLD);
        received = 0;
        for (int r = 0; r < size; r++) {
            recv_displs[r] = (int)received;
            received += recv_counts[r];
        }
        MPI_Alltoallv(outgoing, send_counts, send_displs, MPI_INT, incoming, recv_counts,
                      recv_displs, MPI_INT, MPI_COMM_WORLD);
        /* count[v - lo]: keys below v in my range; `below`: keys of lower ranges. */
        memset(count, 0, sizeof(long) * (size_t)(hi - lo + 1));
        for (long i = 0; i < received; i++)
            count[incoming[i] - lo + 1]++;
        for (long v = 1; v <= hi - lo; v++)
            count[v] += count[v - 1];
        long upto;
        MPI_Scan(&received, &upto, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        below = upto - received;
        for (int i = 0; i < TESTS; i++) {
            long k = test_key[i];
            if (k > 0 && k < max_key - 1 && k >= lo && k < hi)
                passed += below + count[k - lo] == expected(c, i, it);
            else if (k >= lo && k < hi)
                passed++; /* the specification checks only keys inside (0, max - 1) */
        }
    }
    double seconds = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&seconds, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    /* Full verification: every key is in exactly one range, the ranges are
     * in order, and the keys are the ones generated (same sum). */
    long long local_sum[2] = {0, (long long)received}, sums[2], gen[2] = {0, mine}, gens[2];
    for (long i = 0; i < received; i++) {
        local_sum[0] += incoming[i];
        if (incoming[i] < lo || incoming[i] >= hi)
            local_sum[1] = -(1LL << 40);
    }
    for (long i = 0; i < mine; i++)
        gen[0] += keys[i];
    MPI_Allreduce(local_sum, sums, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(gen, gens, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    int all_passed;
    MPI_Allreduce(&passed, &all_passed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int verified = all_passed == TESTS * ITERATIONS && sums[1] == n && gens[1] == n &&
                   sums[0] == gens[0];
    if (me == 0)
        printf("npb_is class=%c ranks=%d seconds=%.4f mops=%.2f verified=%d\n", c->name, size,
               tmax, (double)ITERATIONS * (double)n / tmax / 1e6, verified);
    MPI_Finalize();
    return verified ? 0 : 1;
}
