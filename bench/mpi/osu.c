/*
 * osu.c - OSU-style MPI micro-benchmarks, one C source for atoll
 * (atoll-mpicc) and for Open MPI (mpicc): `atoll bench mpi` runs both.
 *
 *   osu latency [MAX]    ping-pong between ranks 0 and 1, one-way time per
 *                        message size (osu_latency)
 *   osu bw [MAX]         rank 0 sends windows of 64 messages, rank 1 acks
 *                        each window (osu_bw)
 *   osu allreduce [MAX]  MPI_Allreduce of doubles over every rank, average
 *                        time of rank 0 (osu_allreduce)
 *
 * Sizes are 0 (latency only), then 1 B (8 B for allreduce) up to MAX bytes
 * (default 4 MiB, 1 MiB for allreduce), by powers of 4. One line per size:
 * `latency size=64 us=1.23`, `bw size=65536 mbs=900.1`,
 * `allreduce size=8 us=3.4`.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 64 };

/* More iterations for small messages, fewer for large: ~64 MiB moved. */
static int iterations(long size, int most)
{
    long n = size > 0 ? (64L << 20) / size : most;
    if (n > most)
        n = most;
    return n < 20 ? 20 : (int)n;
}

/* One round of a test, at one message size. */
struct round {
    int rank;
    long size;
    char *buf;
    double *out; /* allreduce's result */
};

/*
 * Seconds for `iters` rounds of `step`, after iters/10 untimed ones: the
 * ranks start the timed rounds together, at a barrier.
 */
static double timed(int iters, void (*step)(const struct round *), const struct round *r)
{
    int warm = iters / 10;
    double t0 = 0;
    for (int i = 0; i < iters + warm; i++) {
        if (i == warm) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        step(r);
    }
    return MPI_Wtime() - t0;
}

static void ping_pong(const struct round *r)
{
    int n = (int)r->size;
    if (r->rank == 0) {
        MPI_Send(r->buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
        MPI_Recv(r->buf, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (r->rank == 1) {
        MPI_Recv(r->buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(r->buf, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
}

static void window(const struct round *r)
{
    MPI_Request q[WINDOW];
    char ack = 0;
    int n = (int)r->size;
    if (r->rank == 0) {
        for (int w = 0; w < WINDOW; w++)
            MPI_Isend(r->buf, n, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &q[w]);
        MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
        MPI_Recv(&ack, 1, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (r->rank == 1) {
        for (int w = 0; w < WINDOW; w++)
            MPI_Irecv(r->buf + (size_t)w * (size_t)n % (8u << 20), n, MPI_CHAR, 0, 2,
                      MPI_COMM_WORLD, &q[w]);
        MPI_Waitall(WINDOW, q, MPI_STATUSES_IGNORE);
        MPI_Send(&ack, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
    }
}

static void reduce_all(const struct round *r)
{
    MPI_Allreduce(r->buf, r->out, (int)(r->size / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static void latency(int rank, long max, char *buf)
{
    for (long size = 0; size <= max; size = size == 0 ? 1 : size * 4) {
        int iters = iterations(size, 10000);
        double s = timed(iters, ping_pong, &(struct round){rank, size, buf, NULL});
        if (rank == 0)
            printf("latency size=%ld us=%.3f\n", size, s * 1e6 / (2.0 * iters));
    }
}

static void bandwidth(int rank, long max, char *buf)
{
    for (long size = 1; size <= max; size *= 4) {
        int iters = iterations(size * WINDOW, 1000) / 4;
        if (iters < 10)
            iters = 10;
        double s = timed(iters, window, &(struct round){rank, size, buf, NULL});
        if (rank == 0)
            printf("bw size=%ld mbs=%.1f\n", size, (double)size * WINDOW * iters / s / 1e6);
    }
}

static void allreduce(int rank, long max, char *buf)
{
    double *out = malloc((size_t)max > 8 ? (size_t)max : 8);
    for (long size = 8; size <= max; size *= 4) {
        int iters = iterations(size, 5000) / 2;
        double s = timed(iters, reduce_all, &(struct round){rank, size, buf, out});
        if (rank == 0)
            printf("allreduce size=%ld us=%.3f\n", size, s * 1e6 / iters);
    }
    free(out);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *what = argc > 1 ? argv[1] : "latency";
    long max = argc > 2 ? atol(argv[2]) : strcmp(what, "allreduce") == 0 ? 1L << 20 : 4L << 20;
    if (max < 8 || max > (64L << 20) || (strcmp(what, "allreduce") != 0 && size < 2)) {
        if (rank == 0)
            fprintf(stderr, "usage: osu latency|bw|allreduce [MAX <= 64 MiB] (2+ ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Room for a window of messages up to 8 MiB apart, wrapped. */
    char *buf = malloc(((size_t)max > (8u << 20) ? (size_t)max : (8u << 20)) + (size_t)max);
    memset(buf, 1, ((size_t)max > (8u << 20) ? (size_t)max : (8u << 20)) + (size_t)max);
    if (strcmp(what, "latency") == 0)
        latency(rank, max, buf);
    else if (strcmp(what, "bw") == 0)
        bandwidth(rank, max, buf);
    else if (strcmp(what, "allreduce") == 0)
        allreduce(rank, max, buf);
    else
        MPI_Abort(MPI_COMM_WORLD, 2);
    free(buf);
    MPI_Finalize();
    return 0;
}
