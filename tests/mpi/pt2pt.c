/*
 * pt2pt.c - point-to-point semantics of atoll's MPI, in the style of
 * MPICH's pt2pt suite: payload sizes on both sides of the eager limit, any
 * source and any tag with per-sender order, tag matching out of order,
 * many outstanding requests, more large sends than a rank has grants
 * (received out of order), synchronous sends, Waitany/Testall/Iprobe,
 * truncation, MPI_PROC_NULL, messages to oneself, zero-length messages,
 * derived datatypes, and the errors a bad call returns.
 *
 * Run with any number of ranks >= 2: `atoll run -n 4 pt2pt.wasm`.
 */
#include <stddef.h>

#include "mpitest.h"

#include <stdint.h>

static unsigned char pattern(int from, int size, int i)
{
    return (unsigned char)(from * 31 + size * 7 + i);
}

/* Sizes on both sides of the 40-byte limit of one message and of the
 * 64 KiB limit of a message's body (the eager limits), up to 1 MiB. */
static const int sizes[] = {0, 1, 39, 40, 41, 300, 4096, 65535, 65536, 65537, 100000, 1 << 20};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

static void ring(void)
{
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    unsigned char *out = malloc(1 << 20), *in = malloc(1 << 20);
    for (int s = 0; s < NSIZES; s++) {
        int n = sizes[s];
        for (int i = 0; i < n; i++)
            out[i] = pattern(test_rank, n, i);
        memset(in, 0xEE, (size_t)n);
        MPI_Status st;
        if (s % 2 == 0) {
            OK(MPI_Sendrecv(out, n, MPI_BYTE, right, s, in, n, MPI_BYTE, left, s,
                            MPI_COMM_WORLD, &st));
        } else {
            MPI_Request r[2];
            OK(MPI_Irecv(in, n, MPI_BYTE, left, s, MPI_COMM_WORLD, &r[0]));
            OK(MPI_Isend(out, n, MPI_BYTE, right, s, MPI_COMM_WORLD, &r[1]));
            move();
            MPI_Status sts[2];
            OK(MPI_Waitall(2, r, sts));
            st = sts[0];
            CHECK(r[0] == MPI_REQUEST_NULL && r[1] == MPI_REQUEST_NULL);
        }
        int count;
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == n && st.MPI_SOURCE == left && st.MPI_TAG == s);
        for (int i = 0; i < n; i++)
            CHECK(in[i] == pattern(left, n, i));
    }
    free(out);
    free(in);
}

/* Every other rank sends rank 0 a numbered stream, small and large
 * messages mixed; rank 0 takes them with ANY_SOURCE/ANY_TAG and sees each
 * sender's messages in the order they were sent. On a communicator of its
 * own: a sender that is done goes on to the next test, whose messages to
 * rank 0 must not match. */
static void any_source(void)
{
    enum { K = 60, BIG = 200 };
    int buf[BIG];
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (test_rank != 0) {
        for (int k = 0; k < K; k++) {
            buf[0] = test_rank;
            buf[1] = k;
            int n = k % 3 == 0 ? BIG : 2;
            for (int i = 2; i < n; i++)
                buf[i] = test_rank * 1000 + k + i;
            OK(MPI_Send(buf, n, MPI_INT, 0, k % 7, c));
            if (k % 20 == 0)
                move();
        }
        OK(MPI_Comm_free(&c));
        return;
    }
    int *next = calloc((size_t)test_size, sizeof *next);
    for (int m = 0; m < K * (test_size - 1); m++) {
        MPI_Status st;
        OK(MPI_Recv(buf, BIG, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &st));
        int from = buf[0], k = buf[1], count;
        CHECK(st.MPI_SOURCE == from && st.MPI_TAG == k % 7);
        CHECK(k == next[from]);
        next[from]++;
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == (k % 3 == 0 ? BIG : 2));
        for (int i = 2; i < count; i++)
            CHECK(buf[i] == from * 1000 + k + i);
        if (m % 50 == 0)
            move();
    }
    free(next);
    OK(MPI_Comm_free(&c));
}

/* Messages taken by tag in another order than they came. */
static void tags(void)
{
    if (test_rank == 0) {
        for (int t = 3; t >= 1; t--) {
            int v = t * 10;
            OK(MPI_Send(&v, 1, MPI_INT, 1, t, MPI_COMM_WORLD));
        }
        double d[3] = {1.5, 2.5, 3.5};
        OK(MPI_Send(d, 3, MPI_DOUBLE, 1, 9, MPI_COMM_WORLD));
    } else if (test_rank == 1) {
        for (int t = 1; t <= 3; t++) {
            int v;
            MPI_Status st;
            OK(MPI_Recv(&v, 1, MPI_INT, 0, t, MPI_COMM_WORLD, &st));
            CHECK(v == t * 10 && st.MPI_TAG == t);
        }
        MPI_Status st;
        int flag = 0;
        while (!flag)
            OK(MPI_Iprobe(0, 9, MPI_COMM_WORLD, &flag, &st));
        int count;
        OK(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(count == 3 && st.MPI_SOURCE == 0 && st.MPI_TAG == 9);
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 6);
        MPI_Datatype three;
        OK(MPI_Type_contiguous(3, MPI_INT, &three));
        OK(MPI_Type_commit(&three));
        OK(MPI_Get_count(&st, three, &count));
        CHECK(count == 2);
        OK(MPI_Type_free(&three));
        OK(MPI_Probe(0, 9, MPI_COMM_WORLD, &st));
        double d[3];
        OK(MPI_Recv(d, 3, MPI_DOUBLE, 0, 9, MPI_COMM_WORLD, &st));
        CHECK(d[0] == 1.5 && d[2] == 3.5);
    }
}

/* Hundreds of requests outstanding at once, sends posted in the reverse
 * order of the receives. */
static void outstanding(void)
{
    enum { N = 300, BIG = 64 };
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    static int in[N][BIG], out[N][BIG];
    MPI_Request r[2 * N];
    for (int t = 0; t < N; t++)
        OK(MPI_Irecv(in[t], BIG, MPI_INT, left, t, MPI_COMM_WORLD, &r[t]));
    move();
    for (int t = N - 1; t >= 0; t--) {
        int n = t % 3 == 0 ? BIG : 3;
        for (int i = 0; i < n; i++)
            out[t][i] = test_rank * 100000 + t * 100 + i;
        OK(MPI_Isend(out[t], n, MPI_INT, right, t, MPI_COMM_WORLD, &r[N + t]));
    }
    OK(MPI_Waitall(2 * N, r, MPI_STATUSES_IGNORE));
    for (int t = 0; t < N; t++) {
        int n = t % 3 == 0 ? BIG : 3;
        for (int i = 0; i < n; i++)
            CHECK(in[t][i] == left * 100000 + t * 100 + i);
    }
}

/* Eager messages of 64 KiB, many at once before their receives: the
 * runtime's window of bodies fills, and the rest wait in the sender until
 * the receiver takes some. */
static void flood(void)
{
    enum { N = 24, LEN = 16384 };
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    int *out = malloc(sizeof(int) * N * LEN), *in = malloc(sizeof(int) * LEN);
    MPI_Request r[N];
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < LEN; i++)
            out[t * LEN + i] = test_rank * 7 + t * 13 + i;
        OK(MPI_Isend(out + t * LEN, LEN, MPI_INT, right, t, MPI_COMM_WORLD, &r[t]));
    }
    move();
    for (int t = 0; t < N; t++) {
        OK(MPI_Recv(in, LEN, MPI_INT, left, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < LEN; i++)
            CHECK(in[i] == left * 7 + t * 13 + i);
    }
    OK(MPI_Waitall(N, r, MPI_STATUSES_IGNORE));
    free(out);
    free(in);
}

/* A synchronous send is not complete before its receive is posted. */
static void synchronous(void)
{
    /* In a message's body, and by rendezvous. */
    static const int lens[] = {1, 20000};
    static int v[20000];
    for (int l = 0; l < 2; l++) {
        int n = lens[l], go = 1;
        if (test_rank == 0) {
            v[n - 1] = 6 + l;
            v[0] = 5;
            MPI_Request r;
            OK(MPI_Issend(v, n, MPI_INT, 1, 1, MPI_COMM_WORLD, &r));
            int flag = 1;
            for (int i = 0; i < 20; i++)
                OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
            OK(MPI_Send(&go, 1, MPI_INT, 1, 2, MPI_COMM_WORLD));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            OK(MPI_Ssend(v, n, MPI_INT, 1, 3, MPI_COMM_WORLD));
        } else if (test_rank == 1) {
            OK(MPI_Recv(&go, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            move();
            memset(v, 0, sizeof v);
            OK(MPI_Recv(v, n, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(v[0] == 5 && v[n - 1] == (n == 1 ? 5 : 6 + l));
            OK(MPI_Recv(v, n, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
    }
}

/* Waitany hands out each completed request once; Testall and Testany. */
static void any_and_all(void)
{
    if (test_rank == 0) {
        int n = test_size - 1, *vals = calloc((size_t)n, sizeof *vals), seen = 0;
        MPI_Request *r = malloc(sizeof *r * (size_t)n);
        for (int i = 0; i < n; i++)
            OK(MPI_Irecv(&vals[i], 1, MPI_INT, i + 1, 4, MPI_COMM_WORLD, &r[i]));
        for (int k = 0; k < n; k++) {
            int index;
            MPI_Status st;
            OK(MPI_Waitany(n, r, &index, &st));
            CHECK(index >= 0 && index < n && r[index] == MPI_REQUEST_NULL);
            CHECK(st.MPI_SOURCE == index + 1 && vals[index] == (index + 1) * 3);
            seen |= 1 << index;
        }
        CHECK(seen == (1 << n) - 1);
        int index, flag;
        OK(MPI_Waitany(n, r, &index, MPI_STATUS_IGNORE));
        CHECK(index == MPI_UNDEFINED);
        OK(MPI_Testany(n, r, &index, &flag, MPI_STATUS_IGNORE));
        CHECK(flag && index == MPI_UNDEFINED);
        for (int i = 0; i < n; i++)
            OK(MPI_Irecv(&vals[i], 1, MPI_INT, i + 1, 5, MPI_COMM_WORLD, &r[i]));
        flag = 0;
        while (!flag)
            OK(MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE));
        for (int i = 0; i < n; i++)
            CHECK(r[i] == MPI_REQUEST_NULL && vals[i] == -(i + 1));
        free(r);
        free(vals);
    } else {
        int v = test_rank * 3;
        OK(MPI_Send(&v, 1, MPI_INT, 0, 4, MPI_COMM_WORLD));
        v = -test_rank;
        OK(MPI_Send(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
    }
}

/* More rendezvous sends outstanding than the library keeps grants for:
 * past the library's budget, they go without grants, with eager messages
 * among them, and still arrive in order (the order between a pair). The
 * sends share one buffer, each a different length. */
static void more_sends_than_grants(void)
{
    enum { N = 1200, BIG = 16400 }; /* 65,600 bytes: above the eager limit */
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    static int out[BIG], in[BIG];
    static MPI_Request r[N];
    for (int i = 0; i < BIG; i++)
        out[i] = test_rank * 1000000 + i;
    for (int t = 0; t < N; t++) {
        /* Every seventh message goes eager. */
        int n = t % 7 == 0 ? 2 : BIG - t % 5;
        OK(MPI_Isend(out, n, MPI_INT, right, 9, MPI_COMM_WORLD, &r[t]));
    }
    move();
    for (int t = 0; t < N; t++) {
        MPI_Status st;
        OK(MPI_Recv(in, BIG, MPI_INT, left, 9, MPI_COMM_WORLD, &st));
        int n = t % 7 == 0 ? 2 : BIG - t % 5, got;
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == n);
        CHECK(in[0] == left * 1000000 && in[n - 1] == left * 1000000 + n - 1);
    }
    OK(MPI_Waitall(N, r, MPI_STATUSES_IGNORE));
}

/* Past the library's grant budget, a rank's large sends go without
 * grants; its peer still receives what it sent after them first (other
 * tags): a synchronous send, and one truncated, which both complete. The
 * receiver then grants where each lands, and the sender copies, also for
 * a send whose request was freed. */
static void later_tags_past_the_grants(void)
{
    enum { N = 1100, BIG = 16400 }; /* 65,600 bytes: above the eager limit */
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    static int out[BIG], in[BIG];
    static MPI_Request r[N + 2];
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    for (int i = 0; i < BIG; i++)
        out[i] = test_rank * 1000000 + i;
    for (int t = 0; t < N; t++)
        OK(MPI_Isend(out, BIG - t % 3, MPI_INT, right, 11, MPI_COMM_WORLD, &r[t]));
    /* The last one's request is freed: it still completes, unwatched. */
    OK(MPI_Request_free(&r[N - 1]));
    CHECK(r[N - 1] == MPI_REQUEST_NULL);
    OK(MPI_Issend(out, BIG, MPI_INT, right, 12, MPI_COMM_WORLD, &r[N]));
    OK(MPI_Isend(out, BIG, MPI_INT, right, 13, c, &r[N + 1]));
    MPI_Status st;
    int got;
    OK(MPI_Recv(in, BIG, MPI_INT, left, 12, MPI_COMM_WORLD, &st));
    OK(MPI_Get_count(&st, MPI_INT, &got));
    CHECK(got == BIG && in[0] == left * 1000000 && in[BIG - 1] == left * 1000000 + BIG - 1);
    memset(in, 0, sizeof in);
    CHECK(MPI_Recv(in, 5, MPI_INT, left, 13, c, &st) == MPI_ERR_TRUNCATE);
    CHECK(st.MPI_ERROR == MPI_ERR_TRUNCATE && in[4] == left * 1000000 + 4 && in[5] == 0);
    move();
    for (int t = 0; t < N; t++) {
        OK(MPI_Recv(in, BIG, MPI_INT, left, 11, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == BIG - t % 3);
        CHECK(in[0] == left * 1000000 && in[got - 1] == left * 1000000 + got - 1);
    }
    OK(MPI_Waitall(N + 2, r, MPI_STATUSES_IGNORE));
    OK(MPI_Comm_free(&c));
}

/* Too small a receive: MPI_ERR_TRUNCATE, and the sender still completes. */
static void truncation(void)
{
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    OK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    static int out[20000], in[20000];
    for (int i = 0; i < 20000; i++)
        out[i] = i;
    static const int lens[] = {10, 30, 20000}; /* eager in the message, in its body, rendezvous */
    for (int l = 0; l < 3; l++) {
        int n = lens[l];
        if (test_rank == 0) {
            OK(MPI_Send(out, n, MPI_INT, 1, n, c));
        } else if (test_rank == 1) {
            MPI_Status st;
            memset(in, 0, sizeof in);
            CHECK(MPI_Recv(in, 5, MPI_INT, 0, n, c, &st) == MPI_ERR_TRUNCATE);
            CHECK(st.MPI_ERROR == MPI_ERR_TRUNCATE && in[4] == 4 && in[5] == 0);
        }
    }
    /* Errors a bad call returns under MPI_ERRORS_RETURN. */
    int v = 0;
    CHECK(MPI_Send(&v, 1, MPI_INT, test_size, 0, c) == MPI_ERR_RANK);
    CHECK(MPI_Send(&v, 1, MPI_INT, 0, -5, c) == MPI_ERR_TAG);
    CHECK(MPI_Send(&v, -1, MPI_INT, 0, 0, c) == MPI_ERR_COUNT);
    CHECK(MPI_Recv(&v, 1, MPI_DATATYPE_NULL, 0, 0, c, MPI_STATUS_IGNORE) == MPI_ERR_TYPE);
    CHECK(MPI_Bcast(&v, 1, MPI_INT, test_size, c) == MPI_ERR_ROOT);
    CHECK(MPI_Allreduce(&v, &v, 1, MPI_DOUBLE_INT, MPI_SUM, c) == MPI_ERR_OP);
    MPI_Request r = MPI_REQUEST_NULL;
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Cancel(&r) == MPI_ERR_OTHER);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Comm_free(&c));
    CHECK(c == MPI_COMM_NULL);
}

/* MPI_PROC_NULL, messages to oneself, zero-length messages. */
static void odd_peers(void)
{
    MPI_Status st;
    int v = 7;
    OK(MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    int count;
    OK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && count == 0 && v == 7);

    static double big[50000], back[50000];
    for (int i = 0; i < 50000; i++)
        big[i] = i * 0.5;
    MPI_Request r[2];
    OK(MPI_Isend(big, 50000, MPI_DOUBLE, test_rank, 1, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Isend(&v, 1, MPI_INT, test_rank, 2, MPI_COMM_WORLD, &r[1]));
    int small = 0;
    OK(MPI_Recv(&small, 1, MPI_INT, test_rank, 2, MPI_COMM_WORLD, &st));
    CHECK(small == 7 && st.MPI_SOURCE == test_rank);
    OK(MPI_Recv(back, 50000, MPI_DOUBLE, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st));
    OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
    CHECK(back[49999] == 49999 * 0.5 && st.MPI_SOURCE == test_rank);

    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    OK(MPI_Sendrecv(NULL, 0, MPI_INT, right, 6, NULL, 0, MPI_INT, left, 6, MPI_COMM_WORLD,
                    &st));
    OK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(count == 0 && st.MPI_SOURCE == left);
    /* A synchronous zero-length send to oneself completes with its receive. */
    MPI_Request s;
    OK(MPI_Issend(NULL, 0, MPI_BYTE, test_rank, 8, MPI_COMM_WORLD, &s));
    OK(MPI_Test(&s, &small, MPI_STATUS_IGNORE));
    CHECK(!small);
    OK(MPI_Recv(NULL, 0, MPI_BYTE, test_rank, 8, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
}

/* A column of a matrix (Type_vector) sent as a row, and back. */
static void datatypes(void)
{
    enum { R = 6, C = 5 };
    int m[R][C], col[R];
    MPI_Datatype column;
    OK(MPI_Type_vector(R, 1, C, MPI_INT, &column));
    OK(MPI_Type_commit(&column));
    int size;
    MPI_Aint lb, extent;
    OK(MPI_Type_size(column, &size));
    OK(MPI_Type_get_extent(column, &lb, &extent));
    CHECK(size == R * (int)sizeof(int) && extent == ((R - 1) * C + 1) * (MPI_Aint)sizeof(int));
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            m[i][j] = test_rank * 1000 + i * 10 + j;
    OK(MPI_Sendrecv(&m[0][2], 1, column, right, 0, col, R, MPI_INT, left, 0, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    for (int i = 0; i < R; i++)
        CHECK(col[i] == left * 1000 + i * 10 + 2);
    OK(MPI_Sendrecv(col, R, MPI_INT, left, 1, &m[0][4], 1, column, right, 1, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    for (int i = 0; i < R; i++)
        CHECK(m[i][4] == test_rank * 1000 + i * 10 + 2 && m[i][3] == test_rank * 1000 + i * 10 + 3);
    /* Sendrecv_replace with the vector type in place. */
    OK(MPI_Sendrecv_replace(&m[0][0], 1, column, right, 2, left, 2, MPI_COMM_WORLD,
                            MPI_STATUS_IGNORE));
    for (int i = 0; i < R; i++)
        CHECK(m[i][0] == left * 1000 + i * 10 && m[i][1] == test_rank * 1000 + i * 10 + 1);
    OK(MPI_Type_free(&column));
    CHECK(column == MPI_DATATYPE_NULL);
}

/*
 * Struct, indexed, hvector and resized types: a C struct array sent as a
 * struct type, HPL's habit of one struct type over scattered buffers at
 * absolute addresses (MPI_BOTTOM), and the lower triangle of a matrix.
 */
static void derived(void)
{
    struct item { char tag; double value; int count; };
    int right = (test_rank + 1) % test_size, left = (test_rank - 1 + test_size) % test_size;

    MPI_Datatype item;
    int lens[3] = {1, 1, 1};
    MPI_Aint at[3] = {offsetof(struct item, tag), offsetof(struct item, value),
                      offsetof(struct item, count)};
    MPI_Datatype kinds[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    OK(MPI_Type_create_struct(3, lens, at, kinds, &item));
    OK(MPI_Type_commit(&item));
    int size;
    MPI_Aint lb, extent;
    OK(MPI_Type_size(item, &size));
    OK(MPI_Type_get_extent(item, &lb, &extent));
    CHECK(size == 1 + 8 + 4 && lb == 0 && extent == (MPI_Aint)sizeof(struct item));
    struct item out[3], in[3];
    memset(in, 0, sizeof in);
    for (int i = 0; i < 3; i++)
        out[i] = (struct item){'a' + test_rank, test_rank + i / 4.0, 10 * test_rank + i};
    OK(MPI_Sendrecv(out, 3, item, right, 0, in, 3, item, left, 0, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    for (int i = 0; i < 3; i++)
        CHECK(in[i].tag == 'a' + left && in[i].value == left + i / 4.0 &&
              in[i].count == 10 * left + i);
    OK(MPI_Type_free(&item));

    /* Two separate buffers as one message: absolute addresses from MPI_BOTTOM. */
    double a[4], b[2], ra[4], rb[2];
    for (int i = 0; i < 4; i++)
        a[i] = test_rank * 100 + i;
    b[0] = -test_rank;
    b[1] = 0.5;
    MPI_Aint where[2];
    OK(MPI_Address(a, &where[0]));
    OK(MPI_Get_address(b, &where[1]));
    int n2[2] = {4, 2};
    MPI_Datatype doubles[2] = {MPI_DOUBLE, MPI_DOUBLE}, scattered, landing;
    OK(MPI_Type_struct(2, n2, where, doubles, &scattered));
    OK(MPI_Type_commit(&scattered));
    OK(MPI_Get_address(ra, &where[0]));
    OK(MPI_Get_address(rb, &where[1]));
    OK(MPI_Type_create_struct(2, n2, where, doubles, &landing));
    OK(MPI_Type_commit(&landing));
    OK(MPI_Sendrecv(MPI_BOTTOM, 1, scattered, right, 1, MPI_BOTTOM, 1, landing, left, 1,
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++)
        CHECK(ra[i] == left * 100 + i);
    CHECK(rb[0] == -left && rb[1] == 0.5);
    /* Made of doubles only, it reduces like a double array (here in place). */
    OK(MPI_Allreduce(MPI_IN_PLACE, MPI_BOTTOM, 1, scattered, MPI_SUM, MPI_COMM_WORLD));
    double ranks = test_size * (test_size - 1) / 2.0;
    CHECK(a[3] == 100 * ranks + 3 * test_size && b[0] == -ranks && b[1] == 0.5 * test_size);
    OK(MPI_Type_free(&scattered));
    OK(MPI_Type_free(&landing));

    /* The lower triangle of a 4x4 matrix (indexed), into a packed array. */
    enum { N = 4 };
    int m[N][N], tri[N * (N + 1) / 2];
    int rows[N], starts[N];
    for (int i = 0; i < N; i++) {
        rows[i] = i + 1;
        starts[i] = i * N;
        for (int j = 0; j < N; j++)
            m[i][j] = test_rank * 100 + i * 10 + j;
    }
    MPI_Datatype lower;
    OK(MPI_Type_indexed(N, rows, starts, MPI_INT, &lower));
    OK(MPI_Type_commit(&lower));
    OK(MPI_Type_size(lower, &size));
    CHECK(size == (int)sizeof tri);
    OK(MPI_Sendrecv(m, 1, lower, right, 2, tri, N * (N + 1) / 2, MPI_INT, left, 2,
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0, k = 0; i < N; i++)
        for (int j = 0; j <= i; j++)
            CHECK(tri[k++] == left * 100 + i * 10 + j);
    OK(MPI_Type_free(&lower));

    /* Every other pair of ints (hvector), resized so that copies interleave. */
    int ints[8], got[8] = {0};
    for (int i = 0; i < 8; i++)
        ints[i] = test_rank * 10 + i;
    MPI_Datatype pairs, narrow;
    OK(MPI_Type_create_hvector(2, 1, 4 * (MPI_Aint)sizeof(int), MPI_INT, &pairs));
    OK(MPI_Type_create_resized(pairs, 0, sizeof(int), &narrow));
    OK(MPI_Type_commit(&narrow));
    OK(MPI_Type_get_extent(narrow, &lb, &extent));
    CHECK(lb == 0 && extent == sizeof(int));
    /* Four copies one int apart: 0,4 1,5 2,6 3,7. */
    OK(MPI_Sendrecv(ints, 4, narrow, right, 3, got, 8, MPI_INT, left, 3, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    for (int k = 0; k < 4; k++)
        CHECK(got[2 * k] == left * 10 + k && got[2 * k + 1] == left * 10 + k + 4);
    OK(MPI_Type_free(&pairs));
    OK(MPI_Type_free(&narrow));
}

int main(int argc, char **argv)
{
    test_init(&argc, &argv);
    CHECK(test_size >= 2);
    int flag;
    OK(MPI_Initialized(&flag));
    CHECK(flag);
    CHECK(MPI_Wtick() > 0 && MPI_Wtime() > 0);
    ring();
    move();
    any_source();
    move();
    tags();
    outstanding();
    flood();
    more_sends_than_grants();
    move();
    later_tags_past_the_grants();
    synchronous();
    any_and_all();
    move();
    truncation();
    odd_peers();
    move();
    datatypes();
    derived();
    return test_end("pt2pt");
}
