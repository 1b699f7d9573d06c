/*
 * npb_ep.c - NPB's EP kernel ("embarrassingly parallel"), written here from
 * the NAS Parallel Benchmarks specification (NPB 3, EP): pairs of uniform
 * random numbers from the NPB linear congruential generator (a = 5^13,
 * modulus 2^46, seed 271828183) are turned into Gaussian deviates by the
 * Marsaglia polar method; the deviates' sums and the counts per square
 * annulus are summed over every rank with MPI_Allreduce and checked against
 * the specification's verification values.
 *
 *   npb_ep CLASS        CLASS: S (2^24 pairs), W (2^25) or A (2^28)
 *
 * Prints `npb_ep class=S ranks=4 seconds=0.51 mops=33.0 verified=1` and the
 * sums; exits 1 if the verification fails. The same source builds with
 * Open MPI's mpicc.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb.h"

#define MK 16           /* a batch is 2^MK pairs */
#define NK (1 << MK)
#define NQ 10           /* annuli */
#define A 1220703125.0  /* 5^13 */
#define SEED 271828183.0

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Per class: 2^m pairs, and the specification's sums. */
    static const struct {
        int m;
        double sx, sy;
    } classes[] = {
        {24, -3.247834652034740e3, -6.958407078382297e3},
        {25, -2.863319731645753e3, -6.320053679109499e3},
        {28, -4.295875165629892e3, -1.580732573678431e4},
    };
    int which = npb_class(argc, argv, "npb_ep", "SWA");
    char class = "SWA"[which];
    int m = classes[which].m;
    double sx_ref = classes[which].sx, sy_ref = classes[which].sy;
    int batches = 1 << (m - MK);
    static double x[2 * NK];
    double q[NQ] = {0}, sx = 0, sy = 0;


    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    npb_timed_part_starts();
    /* Batch k starts 2 NK k steps into the sequence. */
    for (int k = rank; k < batches; k += size) {
        double t1 = npb_skip(SEED, A, 2L * NK * k);
        for (int i = 0; i < 2 * NK; i++)
            x[i] = randlc(&t1, A);
        for (int i = 0; i < NK; i++) {
            double x1 = 2.0 * x[2 * i] - 1.0, x2 = 2.0 * x[2 * i + 1] - 1.0;
            double r = x1 * x1 + x2 * x2;
            if (r <= 1.0) {
                double f = sqrt(-2.0 * log(r) / r);
                double g1 = x1 * f, g2 = x2 * f;
                int l = (int)fmax(fabs(g1), fabs(g2));
                q[l] += 1.0;
                sx += g1;
                sy += g2;
            }
        }
    }
    double local[NQ + 2], total[NQ + 2];
    memcpy(local, q, sizeof q);
    local[NQ] = sx;
    local[NQ + 1] = sy;
    MPI_Allreduce(local, total, NQ + 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double seconds = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&seconds, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    sx = total[NQ];
    sy = total[NQ + 1];
    double gc = 0;
    for (int i = 0; i < NQ; i++)
        gc += total[i];
    int verified = fabs((sx - sx_ref) / sx_ref) <= 1e-8 && fabs((sy - sy_ref) / sy_ref) <= 1e-8;
    if (rank == 0) {
        printf("npb_ep class=%c ranks=%d seconds=%.4f mops=%.2f verified=%d\n", class, size, tmax,
               ldexp(1.0, m + 1) / tmax / 1e6, verified);
        printf("  sx=%.15e sy=%.15e gaussian pairs=%.0f\n", sx, sy, gc);
    }
    MPI_Finalize();
    return verified ? 0 : 1;
}
