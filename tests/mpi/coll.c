/*
 * coll.c - every collective of atoll's MPI against a serial reference, in
 * the style of MPICH's coll suite: every root, several counts (zero
 * included), every predefined operation that applies, MAXLOC/MINLOC, a
 * non-commutative user operation, MPI_IN_PLACE, derived datatypes, and
 * communicators made by Comm_split and Comm_dup.
 *
 * Run with any number of ranks, powers of two or not:
 * `atoll run -n 5 coll.wasm`.
 */
#include "mpitest.h"

/* The value rank r contributes at index i. */
static int val(int r, int i)
{
    return (r * 7 + i * 3) % 11 + 1;
}

static const int counts[] = {0, 1, 7, 1000};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

static void bcast(MPI_Comm c, int rank, int size)
{
    static double buf[100000];
    for (int root = 0; root < size; root++) {
        for (int k = 0; k < NCOUNTS; k++) {
            int n = counts[k] * 100;
            for (int i = 0; i < n; i++)
                buf[i] = rank == root ? root + i * 0.25 : -1;
            OK(MPI_Bcast(buf, n, MPI_DOUBLE, root, c));
            for (int i = 0; i < n; i++)
                CHECK(buf[i] == root + i * 0.25);
        }
        move();
    }
}

/* The serial reference of op over every rank's input(op, r, i); the
 * logical operations give 0 or 1, except over one rank (its own value). */
static int reference(MPI_Op op, int size, int i)
{
    int acc = val(0, i);
    if (size > 1 && (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR))
        acc = acc != 0;
    for (int r = 1; r < size; r++) {
        int v = val(r, i);
        if (op == MPI_SUM) acc += v;
        else if (op == MPI_MAX) acc = v > acc ? v : acc;
        else if (op == MPI_MIN) acc = v < acc ? v : acc;
        else if (op == MPI_BAND) acc &= v;
        else if (op == MPI_BOR) acc |= v;
        else if (op == MPI_BXOR) acc ^= v;
        else if (op == MPI_LAND) acc = acc && v % 3;
        else if (op == MPI_LOR) acc = acc || v % 3;
        else if (op == MPI_LXOR) acc = !acc != !(v % 3);
    }
    return acc;
}

static int input(MPI_Op op, int r, int i)
{
    int v = val(r, i);
    if (op == MPI_LAND || op == MPI_LOR || op == MPI_LXOR)
        return r == 0 ? v : v % 3;
    return v;
}

static void reductions(MPI_Comm c, int rank, int size)
{
    MPI_Op ops[] = {MPI_SUM, MPI_MAX, MPI_MIN, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR,
                    MPI_LXOR};
    enum { N = 1000 };
    static int in[N], out[N];
    for (unsigned o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        MPI_Op op = ops[o];
        for (int k = 0; k < NCOUNTS; k++) {
            int n = counts[k];
            for (int i = 0; i < n; i++)
                in[i] = input(op, rank, i);
            for (int root = 0; root < size; root += size > 2 ? size - 1 : 1) {
                memset(out, 0, sizeof out);
                OK(MPI_Reduce(in, out, n, MPI_INT, op, root, c));
                if (rank == root) {
                    for (int i = 0; i < n; i++)
                        CHECK(out[i] == reference(op, size, i));
                }
            }
            memcpy(out, in, sizeof(int) * (size_t)n);
            OK(MPI_Allreduce(MPI_IN_PLACE, out, n, MPI_INT, op, c));
            for (int i = 0; i < n; i++)
                CHECK(out[i] == reference(op, size, i));
        }
        move();
    }
    /* Large enough to be reduced in shares (recursive halving) over a
     * power of two of ranks, with a count the ranks do not divide. */
    enum { BIG = 50001 };
    static int big_in[BIG], big_out[BIG];
    for (int o = 0; o < 2; o++) {
        MPI_Op op = o == 0 ? MPI_SUM : MPI_MAX;
        for (int i = 0; i < BIG; i++)
            big_in[i] = input(op, rank, i);
        memset(big_out, 0, sizeof big_out);
        OK(MPI_Allreduce(big_in, big_out, BIG, MPI_INT, op, c));
        for (int i = 0; i < BIG; i++)
            CHECK(big_out[i] == reference(op, size, i));
    }
    /* Doubles, and MPI_IN_PLACE at the root of a Reduce. */
    double d = rank + 0.5, sum = 0;
    OK(MPI_Allreduce(&d, &sum, 1, MPI_DOUBLE, MPI_SUM, c));
    CHECK(sum == size * (size - 1) / 2.0 + size * 0.5);
    double prod = rank == 0 ? 2.0 : 1.0;
    if (rank == 0)
        OK(MPI_Reduce(MPI_IN_PLACE, &prod, 1, MPI_DOUBLE, MPI_PROD, 0, c));
    else
        OK(MPI_Reduce(&prod, NULL, 1, MPI_DOUBLE, MPI_PROD, 0, c));
    CHECK(rank != 0 || prod == 2.0);
    /* MAXLOC and MINLOC, ties going to the smaller index. */
    struct { double v; int i; } loc = {rank % 2 ? 10.0 : (double)rank, rank}, mx, mn;
    OK(MPI_Allreduce(&loc, &mx, 1, MPI_DOUBLE_INT, MPI_MAXLOC, c));
    OK(MPI_Allreduce(&loc, &mn, 1, MPI_DOUBLE_INT, MPI_MINLOC, c));
    if (size > 1)
        CHECK(mx.v == 10.0 && mx.i == 1);
    CHECK(mn.v == 0.0 && mn.i == 0);
    int pair[2] = {rank / 2, rank}, best[2];
    OK(MPI_Allreduce(pair, best, 1, MPI_2INT, MPI_MAXLOC, c));
    CHECK(best[0] == (size - 1) / 2 && best[1] == ((size - 1) / 2) * 2);
    /* Scan. */
    int mine = rank + 1, upto = 0;
    OK(MPI_Scan(&mine, &upto, 1, MPI_INT, MPI_SUM, c));
    CHECK(upto == (rank + 1) * (rank + 2) / 2);
}

/* 2x2 matrices modulo 1009: associative, not commutative. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {(a[0] * b[0] + a[1] * b[2]) % 1009, (a[0] * b[1] + a[1] * b[3]) % 1009,
                    (a[2] * b[0] + a[3] * b[2]) % 1009, (a[2] * b[1] + a[3] * b[3]) % 1009};
        memcpy(b, c, sizeof c);
    }
}

static void user_op(MPI_Comm c, int rank, int size)
{
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    MPI_Op op;
    OK(MPI_Op_create(matmul, 0, &op));
    int m[4] = {rank + 1, 1, rank % 3, 2}, out[4];
    int want[4] = {1, 0, 0, 1};
    for (int r = 0; r < size; r++) {
        int x[4] = {r + 1, 1, r % 3, 2};
        int len = 1;
        int acc[4];
        memcpy(acc, x, sizeof acc);
        /* want = want * x, in rank order. */
        matmul(want, acc, &len, &mat);
        memcpy(want, acc, sizeof acc);
    }
    for (int root = 0; root < size; root++) {
        OK(MPI_Reduce(m, out, 1, mat, op, root, c));
        if (rank == root)
            CHECK(memcmp(out, want, sizeof want) == 0);
    }
    OK(MPI_Allreduce(m, out, 1, mat, op, c));
    CHECK(memcmp(out, want, sizeof want) == 0);
    OK(MPI_Op_free(&op));
    OK(MPI_Type_free(&mat));
}

static void gathers(MPI_Comm c, int rank, int size)
{
    int *all = malloc(sizeof(int) * (size_t)size * 1000), mine[1000];
    int *cnt = malloc(sizeof(int) * (size_t)size), *dsp = malloc(sizeof(int) * (size_t)size);
    for (int k = 0; k < NCOUNTS; k++) {
        int n = counts[k];
        for (int i = 0; i < n; i++)
            mine[i] = val(rank, i);
        for (int root = 0; root < size; root++) {
            memset(all, 0, sizeof(int) * (size_t)size * (size_t)n);
            OK(MPI_Gather(mine, n, MPI_INT, all, n, MPI_INT, root, c));
            if (rank == root)
                for (int r = 0; r < size; r++)
                    for (int i = 0; i < n; i++)
                        CHECK(all[r * n + i] == val(r, i));
            /* Scatter back what was gathered. */
            int back[1000] = {0};
            OK(MPI_Scatter(all, n, MPI_INT, back, n, MPI_INT, root, c));
            for (int i = 0; i < n; i++)
                CHECK(back[i] == val(rank, i));
        }
        memset(all, 0, sizeof(int) * (size_t)size * (size_t)n);
        OK(MPI_Allgather(mine, n, MPI_INT, all, n, MPI_INT, c));
        for (int r = 0; r < size; r++)
            for (int i = 0; i < n; i++)
                CHECK(all[r * n + i] == val(r, i));
        move();
    }
    /* The v-variants: rank r has r + 1 elements, laid out back to front. */
    int total = 0;
    for (int r = size - 1; r >= 0; r--) {
        cnt[r] = r + 1;
        dsp[r] = total;
        total += cnt[r];
    }
    for (int i = 0; i <= rank; i++)
        mine[i] = val(rank, i);
    for (int root = 0; root < size; root++) {
        memset(all, 0, sizeof(int) * (size_t)total);
        OK(MPI_Gatherv(mine, rank + 1, MPI_INT, all, cnt, dsp, MPI_INT, root, c));
        if (rank == root)
            for (int r = 0; r < size; r++)
                for (int i = 0; i <= r; i++)
                    CHECK(all[dsp[r] + i] == val(r, i));
        int back[1000] = {0};
        OK(MPI_Scatterv(all, cnt, dsp, MPI_INT, back, rank + 1, MPI_INT, root, c));
        for (int i = 0; i <= rank; i++)
            CHECK(back[i] == val(rank, i));
    }
    memset(all, 0, sizeof(int) * (size_t)total);
    OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, all, cnt, dsp, MPI_INT, c));
    for (int r = 0; r < size; r++)
        for (int i = 0; i <= r; i++)
            CHECK(all[dsp[r] + i] == val(r, i));
    /* MPI_IN_PLACE: my block is already where it goes. */
    for (int r = 0; r < size; r++)
        all[r] = r == rank ? val(rank, 0) : -1;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 1, MPI_INT, c));
    for (int r = 0; r < size; r++)
        CHECK(all[r] == val(r, 0));
    for (int r = 0; r < size; r++)
        all[r] = r == rank ? val(rank, 1) : -1;
    if (rank == 0)
        OK(MPI_Gather(MPI_IN_PLACE, 1, MPI_INT, all, 1, MPI_INT, 0, c));
    else
        OK(MPI_Gather(&all[rank], 1, MPI_INT, NULL, 0, MPI_INT, 0, c));
    if (rank == 0)
        for (int r = 0; r < size; r++)
            CHECK(all[r] == val(r, 1));
    free(all);
    free(cnt);
    free(dsp);
}

static void alltoalls(MPI_Comm c, int rank, int size)
{
    int *out = malloc(sizeof(int) * (size_t)size * 64), *in = malloc(sizeof(int) * (size_t)size * 64);
    int *sc = malloc(sizeof(int) * (size_t)size), *sd = malloc(sizeof(int) * (size_t)size);
    int *rc = malloc(sizeof(int) * (size_t)size), *rd = malloc(sizeof(int) * (size_t)size);
    for (int n = 0; n <= 64; n += 16) {
        for (int r = 0; r < size; r++)
            for (int i = 0; i < n; i++)
                out[r * n + i] = rank * 10000 + r * 100 + i;
        OK(MPI_Alltoall(out, n, MPI_INT, in, n, MPI_INT, c));
        for (int r = 0; r < size; r++)
            for (int i = 0; i < n; i++)
                CHECK(in[r * n + i] == r * 10000 + rank * 100 + i);
    }
    /* Rank s sends (s + d) % 3 elements to rank d. */
    int so = 0, ro = 0;
    for (int r = 0; r < size; r++) {
        sc[r] = (rank + r) % 3;
        sd[r] = so;
        so += sc[r];
        rc[r] = (r + rank) % 3;
        rd[r] = ro;
        ro += rc[r];
        for (int i = 0; i < sc[r]; i++)
            out[sd[r] + i] = rank * 100 + r * 10 + i;
    }
    OK(MPI_Alltoallv(out, sc, sd, MPI_INT, in, rc, rd, MPI_INT, c));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < rc[r]; i++)
            CHECK(in[rd[r] + i] == r * 100 + rank * 10 + i);
    /* Reduce_scatter: rank r gets r + 1 sums; _block: 2 each. */
    int total = 0;
    for (int r = 0; r < size; r++) {
        rc[r] = r + 1;
        total += rc[r];
    }
    int *vec = malloc(sizeof(int) * (size_t)total), res[64];
    for (int i = 0; i < total; i++)
        vec[i] = val(rank, i);
    OK(MPI_Reduce_scatter(vec, res, rc, MPI_INT, MPI_SUM, c));
    int first = rank * (rank + 1) / 2;
    for (int i = 0; i <= rank; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            want += val(r, first + i);
        CHECK(res[i] == want);
    }
    OK(MPI_Reduce_scatter_block(vec, res, 1, MPI_INT, MPI_MAX, c));
    int want = 0;
    for (int r = 0; r < size; r++)
        want = val(r, rank) > want ? val(r, rank) : want;
    CHECK(res[0] == want);
    free(vec);
    free(out);
    free(in);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* A column type in a broadcast, a contiguous one in an allgather. */
static void typed(MPI_Comm c, int rank, int size)
{
    enum { R = 4, C = 3 };
    int m[R][C];
    MPI_Datatype column, two;
    OK(MPI_Type_vector(R, 1, C, MPI_INT, &column));
    OK(MPI_Type_commit(&column));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            m[i][j] = rank == 0 ? i * 10 + j : -1;
    OK(MPI_Bcast(&m[0][1], 1, column, 0, c));
    for (int i = 0; i < R; i++)
        CHECK(m[i][1] == i * 10 + 1 && (rank == 0 || m[i][0] == -1));
    OK(MPI_Type_contiguous(2, MPI_INT, &two));
    OK(MPI_Type_commit(&two));
    int mine[2] = {rank, -rank}, *all = malloc(sizeof(int) * 2 * (size_t)size);
    OK(MPI_Allgather(mine, 1, two, all, 1, two, c));
    for (int r = 0; r < size; r++)
        CHECK(all[2 * r] == r && all[2 * r + 1] == -r);
    free(all);
    OK(MPI_Type_free(&column));
    OK(MPI_Type_free(&two));
}

static void run_all(MPI_Comm c)
{
    int rank, size;
    OK(MPI_Comm_rank(c, &rank));
    OK(MPI_Comm_size(c, &size));
    OK(MPI_Barrier(c));
    bcast(c, rank, size);
    reductions(c, rank, size);
    user_op(c, rank, size);
    OK(MPI_Barrier(c));
    gathers(c, rank, size);
    alltoalls(c, rank, size);
    typed(c, rank, size);
    OK(MPI_Barrier(c));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv);
    run_all(MPI_COMM_WORLD);
    /* Split into evens and odds, ranks reversed by key. */
    MPI_Comm half;
    OK(MPI_Comm_split(MPI_COMM_WORLD, test_rank % 2, -test_rank, &half));
    int hrank, hsize;
    OK(MPI_Comm_rank(half, &hrank));
    OK(MPI_Comm_size(half, &hsize));
    CHECK(hsize == (test_size + 1 - test_rank % 2) / 2);
    int world_of_first;
    int me = test_rank;
    OK(MPI_Allreduce(&me, &world_of_first, 1, MPI_INT, MPI_MAX, half));
    CHECK(hrank != 0 || test_rank == world_of_first);
    run_all(half);
    MPI_Comm dup;
    OK(MPI_Comm_dup(half, &dup));
    int cmp;
    OK(MPI_Comm_compare(half, dup, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    OK(MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_IDENT);
    run_all(dup);
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&half));
    MPI_Comm none;
    OK(MPI_Comm_split(MPI_COMM_WORLD, test_rank == 0 ? MPI_UNDEFINED : 1, 0, &none));
    CHECK((test_rank == 0) == (none == MPI_COMM_NULL));
    if (none != MPI_COMM_NULL) {
        run_all(none);
        OK(MPI_Comm_free(&none));
    }
    run_all(MPI_COMM_SELF);
    return test_end("coll");
}
