/*
 * hpl.c - HPL as HPCC 1.5.0 carries it (Debian's hpcc source package), run
 * as a plain MPI program: MPI_Init, HPCC's HPL_main, MPI_Finalize.
 *
 *   hpl [N NB P Q]
 *
 * HPL reads its parameters from hpccinf.txt (HPL.dat's format) in the
 * current directory and appends its report to hpccoutf.txt. Given N, NB, P
 * and Q, rank 0 first writes an hpccinf.txt for that one run (right-looking
 * recursive panel factorization, increasing-ring broadcast, look-ahead 1,
 * residual threshold 16). At the end rank 0 prints HPL's report and a
 * summary line:
 *
 *   hpl: N=2000 NB=80 P=2 Q=2 time=1.234567 s gflops=4.32 residual=0.0041 PASSED
 *
 * The exit status is 0 only when every run passed HPL's residual check.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "hpl.h"

int HPL_main(int argc, char **argv, HPL_RuntimeData *rdata, int *failure);

static const char *INPUT = "hpccinf.txt", *REPORT = "hpccoutf.txt";

static int write_input(const char *n, const char *nb, const char *p, const char *q)
{
    FILE *f = fopen(INPUT, "w");
    if (f == NULL) {
        perror(INPUT);
        return -1;
    }
    fprintf(f,
            "HPLinpack benchmark input file\n"
            "written by atoll's bench/hpl/hpl.c\n"
            "HPL.out      output file name (if any)\n"
            "8            device out (6=stdout,7=stderr,file)\n"
            "1            # of problems sizes (N)\n"
            "%s           Ns\n"
            "1            # of NBs\n"
            "%s           NBs\n"
            "0            PMAP process mapping (0=Row-,1=Column-major)\n"
            "1            # of process grids (P x Q)\n"
            "%s           Ps\n"
            "%s           Qs\n"
            "16.0         threshold\n"
            "1            # of panel fact\n"
            "2            PFACTs (0=left, 1=Crout, 2=Right)\n"
            "1            # of recursive stopping criterium\n"
            "4            NBMINs (>= 1)\n"
            "1            # of panels in recursion\n"
            "2            NDIVs\n"
            "1            # of recursive panel fact.\n"
            "2            RFACTs (0=left, 1=Crout, 2=Right)\n"
            "1            # of broadcast\n"
            "0            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)\n"
            "1            # of lookahead depth\n"
            "1            DEPTHs (>=0)\n"
            "2            SWAP (0=bin-exch,1=long,2=mix)\n"
            "64           swapping threshold\n"
            "0            L1 in (0=transposed,1=no-transposed) form\n"
            "0            U  in (0=transposed,1=no-transposed) form\n"
            "1            Equilibration (0=no,1=yes)\n"
            "8            memory alignment in double (> 0)\n",
            n, nb, p, q);
    return fclose(f) == 0 ? 0 : -1;
}

/*
 * HPL_pdinfo calls this when hpccinf.txt holds an illegal value; HPCC then
 * silently runs its own defaults instead. Here the run stops, saying why.
 */
int HPCC_Defaults(HPL_T_test *test, int *ns, int *n, int *nbs, int *nb, HPL_T_ORDER *pmap,
                  int *npqs, int *p, int *q, int *npfs, HPL_T_FACT *pf, int *nbms, int *nbm,
                  int *ndvs, int *ndv, int *nrfs, HPL_T_FACT *rf, int *ntps, HPL_T_TOP *tp,
                  int *ndhs, int *dh, HPL_T_SWAP *fswap, int *tswap, int *l1notran,
                  int *unotran, int *equil, int *align, MPI_Comm comm)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0)
        fprintf(stderr, "hpl: %s holds an illegal value (HPL's warning above names it)\n",
                INPUT);
    MPI_Abort(comm, 2);
    return 0;
}

static void print_report(void)
{
    FILE *f = fopen(REPORT, "r");
    if (f == NULL) {
        perror(REPORT);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f) != NULL)
        fputs(line, stdout);
    fclose(f);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int bad = 0;
    if (rank == 0) {
        if (argc == 5)
            bad = write_input(argv[1], argv[2], argv[3], argv[4]) != 0;
        else if (argc != 1) {
            fprintf(stderr, "usage: hpl [N NB P Q]   (no arguments: read hpccinf.txt)\n");
            bad = 1;
        }
        remove(REPORT);
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (bad) {
        MPI_Finalize();
        return 2;
    }
    HPL_RuntimeData best = {0};
    int failure = 0;
    HPL_main(argc, argv, &best, &failure);
    if (rank == 0) {
        print_report();
        /* HPL's scaled residual: ||Ax-b||_oo / (eps (||A||_oo ||x||_oo + ||b||_oo) N). */
        double residual =
            best.RnormI / (best.eps * (best.AnormI * best.XnormI + best.BnormI) * best.N);
        printf("hpl: N=%d NB=%d P=%d Q=%d time=%.6f s gflops=%.4g residual=%.4g %s\n", best.N,
               best.NB, best.nprow, best.npcol, best.time, best.Gflops, residual,
               failure ? "FAILED" : "PASSED");
    }
    MPI_Bcast(&failure, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return failure ? 1 : 0;
}
