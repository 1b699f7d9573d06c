/*
 * cblas.c - the ten CBLAS routines HPL calls, written for wasm32 as the
 * reference BLAS computes them (netlib's loop order, no blocking), so that
 * atoll's HPL and the native one linked with Debian's reference libblas do
 * the same arithmetic in the same order.
 *
 * Column-major is the native layout; a row-major call is the column-major
 * call on the transposed operands, as netlib's CBLAS wrappers do.
 */
#include <math.h>
#include <stddef.h>

enum order { ROW_MAJOR = 101, COL_MAJOR = 102 };
enum trans { NO_TRANS = 111, TRANS = 112, CONJ_TRANS = 113 };
enum uplo { UPPER = 121, LOWER = 122 };
enum diag { NON_UNIT = 131, UNIT = 132 };
enum side { LEFT = 141, RIGHT = 142 };

/* Element k of a strided vector; a negative stride walks it from the end. */
#define AT(x, inc, n, k) ((x)[(inc) > 0 ? (ptrdiff_t)(k) * (inc) : ((ptrdiff_t)(k) - (n) + 1) * (inc)])
/* A(i, j) of a column-major matrix with leading dimension ld. */
#define M(a, ld, i, j) ((a)[(ptrdiff_t)(j) * (ld) + (i)])

static int flip_trans(int t) { return t == NO_TRANS ? TRANS : NO_TRANS; }
static int flip_uplo(int u) { return u == UPPER ? LOWER : UPPER; }

int cblas_idamax(int n, const double *x, int incx)
{
    if (n <= 0 || incx <= 0)
        return 0;
    int best = 0;
    double max = fabs(x[0]);
    for (int i = 1; i < n; i++) {
        double v = fabs(x[(ptrdiff_t)i * incx]);
        if (v > max) {
            max = v;
            best = i;
        }
    }
    return best;
}

void cblas_daxpy(int n, double alpha, const double *x, int incx, double *y, int incy)
{
    if (n <= 0 || alpha == 0.0)
        return;
    for (int i = 0; i < n; i++)
        AT(y, incy, n, i) += alpha * AT(x, incx, n, i);
}

void cblas_dcopy(int n, const double *x, int incx, double *y, int incy)
{
    for (int i = 0; i < n; i++)
        AT(y, incy, n, i) = AT(x, incx, n, i);
}

void cblas_dscal(int n, double alpha, double *x, int incx)
{
    if (incx <= 0)
        return;
    for (int i = 0; i < n; i++)
        x[(ptrdiff_t)i * incx] *= alpha;
}

void cblas_dswap(int n, double *x, int incx, double *y, int incy)
{
    for (int i = 0; i < n; i++) {
        double t = AT(x, incx, n, i);
        AT(x, incx, n, i) = AT(y, incy, n, i);
        AT(y, incy, n, i) = t;
    }
}

/* y := alpha op(A) x + beta y, A m x n column-major. */
static void dgemv(int trans, int m, int n, double alpha, const double *a, int lda,
                  const double *x, int incx, double beta, double *y, int incy)
{
    int leny = trans == NO_TRANS ? m : n, lenx = trans == NO_TRANS ? n : m;
    if (m == 0 || n == 0 || (alpha == 0.0 && beta == 1.0))
        return;
    if (beta != 1.0)
        for (int i = 0; i < leny; i++)
            AT(y, incy, leny, i) = beta == 0.0 ? 0.0 : beta * AT(y, incy, leny, i);
    if (alpha == 0.0)
        return;
    if (trans == NO_TRANS) {
        for (int j = 0; j < n; j++) {
            double t = alpha * AT(x, incx, lenx, j);
            if (t != 0.0)
                for (int i = 0; i < m; i++)
                    AT(y, incy, leny, i) += t * M(a, lda, i, j);
        }
    } else {
        for (int j = 0; j < n; j++) {
            double t = 0.0;
            for (int i = 0; i < m; i++)
                t += M(a, lda, i, j) * AT(x, incx, lenx, i);
            AT(y, incy, leny, j) += alpha * t;
        }
    }
}

void cblas_dgemv(int order, int trans, int m, int n, double alpha, const double *a, int lda,
                 const double *x, int incx, double beta, double *y, int incy)
{
    if (order == COL_MAJOR)
        dgemv(trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
    else
        dgemv(flip_trans(trans), n, m, alpha, a, lda, x, incx, beta, y, incy);
}

/* A := alpha x y' + A, A m x n column-major. */
static void dger(int m, int n, double alpha, const double *x, int incx, const double *y,
                 int incy, double *a, int lda)
{
    if (m == 0 || n == 0 || alpha == 0.0)
        return;
    for (int j = 0; j < n; j++) {
        double t = alpha * AT(y, incy, n, j);
        if (t != 0.0)
            for (int i = 0; i < m; i++)
                M(a, lda, i, j) += AT(x, incx, m, i) * t;
    }
}

void cblas_dger(int order, int m, int n, double alpha, const double *x, int incx,
                const double *y, int incy, double *a, int lda)
{
    if (order == COL_MAJOR)
        dger(m, n, alpha, x, incx, y, incy, a, lda);
    else
        dger(n, m, alpha, y, incy, x, incx, a, lda);
}

/* Solves op(A) x = b in place, A n x n triangular column-major. */
static void dtrsv(int uplo, int trans, int diag, int n, const double *a, int lda, double *x,
                  int incx)
{
    int unit = diag == UNIT;
    if (trans == NO_TRANS) {
        if (uplo == UPPER) {
            for (int j = n - 1; j >= 0; j--) {
                if (AT(x, incx, n, j) == 0.0)
                    continue;
                if (!unit)
                    AT(x, incx, n, j) /= M(a, lda, j, j);
                double t = AT(x, incx, n, j);
                for (int i = j - 1; i >= 0; i--)
                    AT(x, incx, n, i) -= t * M(a, lda, i, j);
            }
        } else {
            for (int j = 0; j < n; j++) {
                if (AT(x, incx, n, j) == 0.0)
                    continue;
                if (!unit)
                    AT(x, incx, n, j) /= M(a, lda, j, j);
                double t = AT(x, incx, n, j);
                for (int i = j + 1; i < n; i++)
                    AT(x, incx, n, i) -= t * M(a, lda, i, j);
            }
        }
    } else if (uplo == UPPER) {
        for (int j = 0; j < n; j++) {
            double t = AT(x, incx, n, j);
            for (int i = 0; i < j; i++)
                t -= M(a, lda, i, j) * AT(x, incx, n, i);
            AT(x, incx, n, j) = unit ? t : t / M(a, lda, j, j);
        }
    } else {
        for (int j = n - 1; j >= 0; j--) {
            double t = AT(x, incx, n, j);
            for (int i = n - 1; i > j; i--)
                t -= M(a, lda, i, j) * AT(x, incx, n, i);
            AT(x, incx, n, j) = unit ? t : t / M(a, lda, j, j);
        }
    }
}

void cblas_dtrsv(int order, int uplo, int trans, int diag, int n, const double *a, int lda,
                 double *x, int incx)
{
    if (order == COL_MAJOR)
        dtrsv(uplo, trans, diag, n, a, lda, x, incx);
    else
        dtrsv(flip_uplo(uplo), flip_trans(trans), diag, n, a, lda, x, incx);
}

/* C := alpha op(A) op(B) + beta C, C m x n column-major. */
static void dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                  const double *b, int ldb, double beta, double *c, int ldc)
{
    if (m == 0 || n == 0 || ((alpha == 0.0 || k == 0) && beta == 1.0))
        return;
    for (int j = 0; j < n; j++) {
        if (beta == 0.0)
            for (int i = 0; i < m; i++)
                M(c, ldc, i, j) = 0.0;
        else if (beta != 1.0)
            for (int i = 0; i < m; i++)
                M(c, ldc, i, j) *= beta;
        if (alpha == 0.0)
            continue;
        if (ta == NO_TRANS) {
            /* Column j of C gains alpha B(l, j) times column l of A. */
            for (int l = 0; l < k; l++) {
                double t = alpha * (tb == NO_TRANS ? M(b, ldb, l, j) : M(b, ldb, j, l));
                if (t != 0.0)
                    for (int i = 0; i < m; i++)
                        M(c, ldc, i, j) += t * M(a, lda, i, l);
            }
        } else {
            /* C(i, j) gains alpha times the dot product of A's column i and op(B)'s column j. */
            for (int i = 0; i < m; i++) {
                double t = 0.0;
                for (int l = 0; l < k; l++)
                    t += M(a, lda, l, i) * (tb == NO_TRANS ? M(b, ldb, l, j) : M(b, ldb, j, l));
                M(c, ldc, i, j) += alpha * t;
            }
        }
    }
}

void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a,
                 int lda, const double *b, int ldb, double beta, double *c, int ldc)
{
    if (order == COL_MAJOR)
        dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        dgemm(tb, ta, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
}

/* Solves op(A) X = alpha B (side LEFT) or X op(A) = alpha B (RIGHT), in B, m x n. */
static void dtrsm(int side, int uplo, int trans, int diag, int m, int n, double alpha,
                  const double *a, int lda, double *b, int ldb)
{
    if (m == 0 || n == 0)
        return;
    if (alpha == 0.0) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++)
                M(b, ldb, i, j) = 0.0;
        return;
    }
    if (side == LEFT) {
        /* Each column of B is a triangular solve with A. */
        for (int j = 0; j < n; j++) {
            if (alpha != 1.0)
                for (int i = 0; i < m; i++)
                    M(b, ldb, i, j) *= alpha;
            dtrsv(uplo, trans, diag, m, a, lda, &M(b, ldb, 0, j), 1);
        }
        return;
    }
    int unit = diag == UNIT;
    /* X op(A) = alpha B, column by column of X, in the order op(A) allows. */
    int forward = (uplo == UPPER) == (trans == NO_TRANS);
    for (int s = 0; s < n; s++) {
        int j = forward ? s : n - 1 - s;
        if (alpha != 1.0)
            for (int i = 0; i < m; i++)
                M(b, ldb, i, j) *= alpha;
        for (int t = 0; t < s; t++) {
            int l = forward ? t : n - 1 - t;
            /* op(A)(l, j): A(l, j) without transposition, A(j, l) with. */
            double v = trans == NO_TRANS ? M(a, lda, l, j) : M(a, lda, j, l);
            if (v != 0.0)
                for (int i = 0; i < m; i++)
                    M(b, ldb, i, j) -= v * M(b, ldb, i, l);
        }
        if (!unit) {
            double d = 1.0 / M(a, lda, j, j);
            for (int i = 0; i < m; i++)
                M(b, ldb, i, j) *= d;
        }
    }
}

void cblas_dtrsm(int order, int side, int uplo, int trans, int diag, int m, int n, double alpha,
                 const double *a, int lda, double *b, int ldb)
{
    if (order == COL_MAJOR)
        dtrsm(side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb);
    else
        dtrsm(side == LEFT ? RIGHT : LEFT, flip_uplo(uplo), trans, diag, n, m, alpha, a, lda, b,
              ldb);
}
