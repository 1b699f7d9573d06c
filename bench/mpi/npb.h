/*
 * npb.h - what the NPB kernels share: the NAS Parallel Benchmarks' random
 * number generator, as the specification defines it (x = a * x mod 2^46,
 * computed in doubles that hold 46-bit integers exactly, each factor split
 * into 23-bit halves), and choosing the problem class.
 */
#ifndef NPB_H
#define NPB_H

#include <mpi.h>
#include <stdio.h>
#include <string.h>

/* Advances *x by one step of multiplier a; returns the new x / 2^46. */
/* Rank 0 says at once that the timed part starts (after its barrier):
 * `atoll bench mpi` moves ranks in the middle of that part. */
static inline void npb_timed_part_starts(void)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        printf("npb: timed part starts\n");
        fflush(stdout);
    }
}

static inline double randlc(double *x, double a)
{
    const double r23 = 1.0 / 8388608.0, r46 = r23 * r23;
    const double t23 = 8388608.0, t46 = t23 * t23;
    double t1 = r23 * a;
    double a1 = (double)(long long)t1, a2 = a - t23 * a1;
    t1 = r23 * *x;
    double x1 = (double)(long long)t1, x2 = *x - t23 * x1;
    t1 = a1 * x2 + a2 * x1;
    double t2 = (double)(long long)(r23 * t1);
    double z = t1 - t23 * t2;
    double t3 = t23 * z + a2 * x2;
    double t4 = (double)(long long)(r46 * t3);
    *x = t3 - t46 * t4;
    return r46 * *x;
}

/* The seed after n steps from `seed` with multiplier a: a^n by binary
 * exponentiation, so each rank starts its own stretch of one sequence. */
static inline double npb_skip(double seed, double a, long n)
{
    for (double t = a; n > 0; n /= 2) {
        if (n % 2)
            randlc(&seed, t);
        randlc(&t, t);
    }
    return seed;
}

/* The position in `classes` (e.g. "SW") of the class argv[1] names; the
 * job ends with a usage line for any other. */
static inline int npb_class(int argc, char **argv, const char *program, const char *classes)
{
    const char *c = argc > 1 && argv[1][0] != '\0' && argv[1][1] == '\0'
                        ? strchr(classes, argv[1][0])
                        : NULL;
    if (c == NULL) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr, "usage: %s CLASS (one of %s)\n", program, classes);
        /* Said before any rank ends the job. */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (int)(c - classes);
}

#endif
