/*
 * npb_cg.c - NPB's CG kernel (conjugate gradient), written here from the
 * NAS Parallel Benchmarks specification (NPB 3, CG): the specification's
 * random sparse symmetric matrix (makea: NA rows, outer products of sparse
 * random vectors from the NPB generator, a diagonal shift), then NITER
 * inverse-power iterations, each solving A z = x with 25 conjugate
 * gradient steps; the estimate zeta of the smallest eigenvalue is checked
 * against the specification's value to 1e-10.
 *
 *   npb_cg CLASS        CLASS: S (NA 1400), W (NA 7000) or A (NA 14000)
 *
 * Distribution: every rank builds the matrix (it is generated, not read)
 * and owns a block of rows; each matrix-vector product gathers the whole
 * direction vector (MPI_Allgatherv) and each dot product is an
 * MPI_Allreduce. NPB's own MPI version uses a 2-D process grid instead.
 * Prints `npb_cg class=S ranks=4 seconds=0.3 mops=... verified=1`; exits 1
 * if the verification fails. The same source builds with Open MPI's mpicc.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npb.h"

struct class {
    char name;
    int na, nonzer, niter;
    double shift, zeta;
};

static const struct class classes[] = {
    {'S', 1400, 7, 15, 10.0, 8.5971775078648},
    {'W', 7000, 8, 15, 12.0, 10.362595087124},
    {'A', 14000, 11, 15, 20.0, 17.130235054029},
};

#define RCOND 0.1
#define CGITMAX 25

static double tran = 314159265.0;
static const double amult = 1220703125.0;

/* A sparse vector of nz distinct random positions in [1, n]. */
static void sprnvc(int n, int nz, int nn1, double *v, int *iv)
{
    int nzv = 0;
    while (nzv < nz) {
        double vecelt = randlc(&tran, amult);
        double vecloc = randlc(&tran, amult);
        int i = (int)(nn1 * vecloc) + 1;
        if (i > n)
            continue;
        int seen = 0;
        for (int ii = 0; ii < nzv; ii++)
            if (iv[ii] == i)
                seen = 1;
        if (seen)
            continue;
        v[nzv] = vecelt;
        iv[nzv] = i;
        nzv++;
    }
}

/* Sets element i of the sparse vector to val, adding it if absent. */
static void vecset(double *v, int *iv, int *nz, int i, double val)
{
    int set = 0;
    for (int k = 0; k < *nz; k++) {
        if (iv[k] == i) {
            v[k] = val;
            set = 1;
        }
    }
    if (!set) {
        v[*nz] = val;
        iv[*nz] = i;
        (*nz)++;
    }
}

/* The specification's matrix in compressed rows (rowstr, colidx, a). */
static void makea(const struct class *c, double *a, int *colidx, int *rowstr)
{
    int n = c->na, w = c->nonzer + 1;
    int *arow = malloc(sizeof(int) * (size_t)n);
    int *acol = malloc(sizeof(int) * (size_t)n * (size_t)w);
    double *aelt = malloc(sizeof(double) * (size_t)n * (size_t)w);
    int *ivc = malloc(sizeof(int) * (size_t)w);
    double *vc = malloc(sizeof(double) * (size_t)w);
    int nn1 = 1;
    do
        nn1 *= 2;
    while (nn1 < n);
    for (int iouter = 0; iouter < n; iouter++) {
        int nzv = c->nonzer;
        sprnvc(n, nzv, nn1, vc, ivc);
        vecset(vc, ivc, &nzv, iouter + 1, 0.5);
        arow[iouter] = nzv;
        for (int k = 0; k < nzv; k++) {
            acol[iouter * w + k] = ivc[k] - 1;
            aelt[iouter * w + k] = vc[k];
        }
    }
    /* sparse(): sum the outer products into rows, then squeeze. */
    int *nzloc = calloc((size_t)n, sizeof(int));
    memset(rowstr, 0, sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < arow[i]; k++)
            rowstr[acol[i * w + k] + 1] += arow[i];
    for (int j = 1; j <= n; j++)
        rowstr[j] += rowstr[j - 1];
    for (int j = 0; j < n; j++)
        for (int k = rowstr[j]; k < rowstr[j + 1]; k++) {
            a[k] = 0.0;
            colidx[k] = -1;
        }
    double size = 1.0, ratio = pow(RCOND, 1.0 / n);
    for (int i = 0; i < n; i++) {
        for (int nza = 0; nza < arow[i]; nza++) {
            int j = acol[i * w + nza];
            double scale = size * aelt[i * w + nza];
            for (int nzrow = 0; nzrow < arow[i]; nzrow++) {
                int jcol = acol[i * w + nzrow];
                double va = aelt[i * w + nzrow] * scale;
                if (jcol == j && j == i)
                    va = va + RCOND - c->shift;
                int k;
                for (k = rowstr[j]; k < rowstr[j + 1]; k++) {
                    if (colidx[k] > jcol) {
                        for (int kk = rowstr[j + 1] - 2; kk >= k; kk--) {
                            if (colidx[kk] > -1) {
                                a[kk + 1] = a[kk];
                                colidx[kk + 1] = colidx[kk];
                            }
                        }
                        colidx[k] = jcol;
                        a[k] = 0.0;
                        break;
                    } else if (colidx[k] == -1) {
                        colidx[k] = jcol;
                        break;
                    } else if (colidx[k] == jcol) {
                        nzloc[j]++;
                        break;
                    }
                }
                if (k == rowstr[j + 1]) {
                    fprintf(stderr, "npb_cg: matrix row %d overflows\n", j);
                    exit(1);
                }
                a[k] += va;
            }
        }
        size *= ratio;
    }
    for (int j = 1; j < n; j++)
        nzloc[j] += nzloc[j - 1];
    for (int j = 0; j < n; j++) {
        int j1 = j > 0 ? rowstr[j] - nzloc[j - 1] : 0;
        int j2 = rowstr[j + 1] - nzloc[j];
        int nza = rowstr[j];
        for (int k = j1; k < j2; k++) {
            a[k] = a[nza];
            colidx[k] = colidx[nza];
            nza++;
        }
    }
    for (int j = 1; j <= n; j++)
        rowstr[j] -= nzloc[j - 1];
    free(nzloc);
    free(arow);
    free(acol);
    free(aelt);
    free(ivc);
    free(vc);
}

static int n, lo, hi; /* my rows: [lo, hi) */
static int *counts, *displs;
static int *colidx, *rowstr;
static double *a;

/* out[lo..hi) = A v (v whole). */
static void matvec(const double *v, double *out)
{
    for (int j = lo; j < hi; j++) {
        double sum = 0.0;
        for (int k = rowstr[j]; k < rowstr[j + 1]; k++)
            sum += a[k] * v[colidx[k]];
        out[j] = sum;
    }
}

/* The dot product of my rows of x and y, over every rank. */
static double dot(const double *x, const double *y)
{
    double mine = 0.0, all;
    for (int j = lo; j < hi; j++)
        mine += x[j] * y[j];
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* Every rank's rows of v, to every rank. */
static void gather(double *v)
{
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, v, counts, displs, MPI_DOUBLE,
                   MPI_COMM_WORLD);
}

/* 25 conjugate gradient steps on A z = x; returns ||x - A z||. */
static double conj_grad(const double *x, double *z, double *p, double *q, double *r)
{
    for (int j = lo; j < hi; j++) {
        q[j] = 0.0;
        z[j] = 0.0;
        r[j] = x[j];
        p[j] = r[j];
    }
    double rho = dot(r, r);
    for (int cgit = 0; cgit < CGITMAX; cgit++) {
        gather(p);
        matvec(p, q);
        double alpha = rho / dot(p, q), rho0 = rho;
        for (int j = lo; j < hi; j++) {
            z[j] += alpha * p[j];
            r[j] -= alpha * q[j];
        }
        rho = dot(r, r);
        double beta = rho / rho0;
        for (int j = lo; j < hi; j++)
            p[j] = r[j] + beta * p[j];
    }
    gather(z);
    matvec(z, r);
    double sum = 0.0, all;
    for (int j = lo; j < hi; j++)
        sum += (x[j] - r[j]) * (x[j] - r[j]);
    MPI_Allreduce(&sum, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sqrt(all);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const struct class *c = &classes[npb_class(argc, argv, "npb_cg", "SWA")];
    n = c->na;
    size_t nz = (size_t)n * (size_t)(c->nonzer + 1) * (size_t)(c->nonzer + 1);
    a = malloc(sizeof(double) * nz);
    colidx = malloc(sizeof(int) * nz);
    rowstr = malloc(sizeof(int) * (size_t)(n + 1));
    randlc(&tran, amult); /* the specification draws zeta's seed first */
    makea(c, a, colidx, rowstr);
    lo = (int)((long)n * me / size);
    hi = (int)((long)n * (me + 1) / size);
    counts = malloc(sizeof(int) * (size_t)size);
    displs = malloc(sizeof(int) * (size_t)size);
    for (int r = 0; r < size; r++) {
        displs[r] = (int)((long)n * r / size);
        counts[r] = (int)((long)n * (r + 1) / size) - displs[r];
    }
    double *x = malloc(sizeof(double) * (size_t)n), *z = malloc(sizeof(double) * (size_t)n);
    double *p = malloc(sizeof(double) * (size_t)n), *q = malloc(sizeof(double) * (size_t)n);
    double *r = malloc(sizeof(double) * (size_t)n);
    double zeta = 0.0, t0 = 0.0;
    /* One untimed iteration (the specification's warm-up), then NITER. */
    for (int pass = 0; pass < 2; pass++) {
        for (int j = 0; j < n; j++)
            x[j] = 1.0;
        if (pass == 1) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            npb_timed_part_starts();
        }
        for (int it = 0; it < (pass == 0 ? 1 : c->niter); it++) {
            conj_grad(x, z, p, q, r);
            double xz = dot(x, z), zz = dot(z, z);
            zeta = c->shift + 1.0 / xz;
            for (int j = lo; j < hi; j++)
                x[j] = z[j] / sqrt(zz);
        }
    }
    double seconds = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&seconds, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int verified = fabs(zeta - c->zeta) <= 1e-10;
    if (me == 0) {
        /* The specification's operation count. */
        double nn = c->nonzer * (c->nonzer + 1.0);
        double flops = 2.0 * c->niter * n * (3.0 + nn + 25.0 * (5.0 + nn) + 3.0);
        printf("npb_cg class=%c ranks=%d seconds=%.4f mops=%.2f verified=%d\n", c->name, size,
               tmax, flops / tmax / 1e6, verified);
        printf("  zeta=%.13f (specification %.13f)\n", zeta, c->zeta);
    }
    MPI_Finalize();
    return verified ? 0 : 1;
}
