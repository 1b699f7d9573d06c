/*
 * mergesort - a CPU-bound workload, in plain C11, to compare atoll with Linux.
 *
 *   mergesort [N [SEED [ROUNDS]]]        defaults: N=1000000 SEED=1 ROUNDS=1
 *
 * Each round fills N 32-bit integers from a xorshift generator seeded with
 * SEED + round, sorts them with a top-down merge sort, checks the result and
 * prints
 *
 *   round R: n=N checksum=0x0123456789abcdef
 *
 * where the checksum is FNV-1a over the sorted values. The output depends only
 * on the arguments, so the same bytes come out of the native build
 * (gcc -O2 examples/mergesort.c) and the wasm one, and time is the only thing
 * that differs. Exit status: 0, 1 if a round came out unsorted, 2 on bad
 * arguments or out of memory.
 *
 * It deliberately does not use atoll.h: the point is to run the same code on
 * both sides.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: turns any seed, even 0, into a good non-zero xorshift state. */
static uint64_t seed_state(uint64_t seed)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    z ^= z >> 31;
    return z != 0 ? z : 1;
}

/* xorshift64 (Marsaglia 2003). */
static uint64_t next(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

static void fill(int32_t *a, size_t n, uint64_t seed)
{
    uint64_t state = seed_state(seed);
    for (size_t i = 0; i < n; i++) {
        /* Shift the top 32 bits down into int32 range: unlike a cast, this is
         * defined by the C standard, so every compiler agrees. */
        int64_t v = (int64_t)(next(&state) >> 32) - INT64_C(2147483648);
        a[i] = (int32_t)v;
    }
}

/* Merges the sorted runs a[lo..mid) and a[mid..hi) through tmp. */
static void merge(int32_t *a, int32_t *tmp, size_t lo, size_t mid, size_t hi)
{
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        tmp[k++] = a[j] < a[i] ? a[j++] : a[i++]; /* ties from the left: stable */
    while (i < mid)
        tmp[k++] = a[i++];
    while (j < hi)
        tmp[k++] = a[j++];
    memcpy(a + lo, tmp + lo, (hi - lo) * sizeof a[0]);
}

/* Sorts a[lo..hi). Recursion depth is log2(n), so the stack stays small. */
static void sort(int32_t *a, int32_t *tmp, size_t lo, size_t hi)
{
    if (hi - lo < 2)
        return;
    size_t mid = lo + (hi - lo) / 2;
    sort(a, tmp, lo, mid);
    sort(a, tmp, mid, hi);
    if (a[mid - 1] <= a[mid])
        return; /* already in order */
    merge(a, tmp, lo, mid, hi);
}

static int is_sorted(const int32_t *a, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (a[i - 1] > a[i])
            return 0;
    return 1;
}

/* FNV-1a over each value's four bytes, least significant first, so the result
 * does not depend on the host's byte order. */
static uint64_t checksum(const int32_t *a, size_t n)
{
    uint64_t h = 0xCBF29CE484222325u;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)a[i];
        for (int b = 0; b < 4; b++) {
            h ^= (v >> (8 * b)) & 0xFF;
            h *= 0x100000001B3u;
        }
    }
    return h;
}

/* Parses a whole decimal argument into *out, or returns 0. */
static int parse(const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    if (s[0] < '0' || s[0] > '9')
        return 0; /* strtoull would accept "-1" and " 1" */
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || v > max)
        return 0;
    *out = v;
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t n = 1000000, seed = 1, rounds = 1;
    /* Both arrays together must fit in a size_t, including on wasm32. */
    uint64_t max_n = SIZE_MAX / (2 * sizeof(int32_t));

    if (argc > 4 || (argc > 1 && !parse(argv[1], max_n, &n)) ||
        (argc > 2 && !parse(argv[2], UINT64_MAX, &seed)) ||
        (argc > 3 && !parse(argv[3], UINT64_MAX, &rounds))) {
        fprintf(stderr, "usage: mergesort [N [SEED [ROUNDS]]]\n");
        return 2;
    }

    /* One allocation of each for all rounds: the timing is about sorting. */
    int32_t *a = malloc(n > 0 ? n * sizeof *a : 1);
    int32_t *tmp = malloc(n > 0 ? n * sizeof *tmp : 1);
    if (a == NULL || tmp == NULL) {
        fprintf(stderr, "mergesort: out of memory for n=%" PRIu64 "\n", n);
        return 2;
    }

    int status = 0;
    for (uint64_t r = 0; r < rounds; r++) {
        fill(a, (size_t)n, seed + r);
        sort(a, tmp, 0, (size_t)n);
        if (!is_sorted(a, (size_t)n)) {
            fprintf(stderr, "mergesort: round %" PRIu64 " is not sorted\n", r);
            status = 1;
        }
        printf("round %" PRIu64 ": n=%" PRIu64 " checksum=0x%016" PRIx64 "\n", r,
               n, checksum(a, (size_t)n));
    }

    free(tmp);
    free(a);
    return status;
}
