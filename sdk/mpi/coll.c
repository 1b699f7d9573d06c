/*
 * coll.c - collectives, built on point-to-point over the communicator's
 * collective context (ctx + 1), so they never match the program's own
 * messages. Every collective works on packed bytes: data of a derived type
 * is packed first and unpacked at the end.
 *
 *   Barrier                  dissemination (ceil(log2 P) rounds)
 *   Bcast                    binomial tree
 *   Reduce                   binomial tree (commutative operations; a
 *                            non-commutative one reduces to rank 0 in rank
 *                            order, then goes to the root)
 *   Allreduce                recursive doubling when P is a power of two
 *                            (from HALVING_MIN bytes, with a commutative
 *                            operation: Rabenseifner's recursive halving,
 *                            each rank reducing a 1/P share, then
 *                            recursive doubling of the shares), else
 *                            Reduce to rank 0 + Bcast
 *   Gather(v), Scatter(v)    linear: the root posts all transfers at once
 *   Allgather(v)             ring (P - 1 steps)
 *   Alltoall(v)              pairwise exchange (P - 1 steps)
 *   Reduce_scatter(_block)   Reduce to rank 0 + Scatterv
 *   Scan                     linear chain
 */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

/* From this many bytes an Allreduce over a power of two of ranks halves
 * (docs/mpi.md: it moves and reduces less than doubling from about here). */
#define HALVING_MIN (64 * 1024)

enum {
    TAG_BARRIER = 1, TAG_BCAST, TAG_REDUCE, TAG_ALLREDUCE, TAG_GATHER, TAG_SCATTER,
    TAG_ALLGATHER, TAG_ALLTOALL, TAG_SCAN,
};

static void csend(const void *buf, size_t len, int to, int tag, MPI_Comm c)
{
    MPI_Request r;
    mpi_isend_bytes(buf, len, c->world_of[to], tag, c->ctx + 1, c, false, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
}

static void crecv(void *buf, size_t len, int from, int tag, MPI_Comm c)
{
    MPI_Request r;
    mpi_irecv_bytes(buf, len, c->world_of[from], tag, c->ctx + 1, c, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
}

static void csendrecv(const void *out, size_t out_len, int to, void *in, size_t in_len,
                      int from, int tag, MPI_Comm c)
{
    MPI_Request r[2];
    mpi_irecv_bytes(in, in_len, c->world_of[from], tag, c->ctx + 1, c, &r[0]);
    mpi_isend_bytes(out, out_len, c->world_of[to], tag, c->ctx + 1, c, false, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
}

/* count elements of t at buf as new contiguous bytes. */
static void *packed_copy(const void *buf, int count, MPI_Datatype t)
{
    size_t len = mpi_type_bytes(t, count);
    void *p = mpi_alloc(len);
    mpi_pack(buf, count, t, p);
    return p;
}

static int check(MPI_Comm comm, const char *call)
{
    return mpi_check_comm(comm, call);
}

static int check_data(MPI_Comm comm, int count, MPI_Datatype t, const char *call)
{
    if (count < 0)
        return mpi_error(comm, MPI_ERR_COUNT, call, "negative count %d", count);
    if (mpi_check_type(t) != MPI_SUCCESS)
        return mpi_error(comm, MPI_ERR_TYPE, call, "invalid or uncommitted datatype");
    return MPI_SUCCESS;
}

static int check_root(MPI_Comm comm, int root, const char *call)
{
    if (root < 0 || root >= comm->size)
        return mpi_error(comm, MPI_ERR_ROOT, call, "invalid root %d (communicator of %d)", root,
                         comm->size);
    return MPI_SUCCESS;
}

/* The communicator, the data and that the operation applies to it. */
static int check_reduction(MPI_Comm comm, int count, MPI_Datatype t, MPI_Op op,
                           const char *call)
{
    int err = check(comm, call);
    if (err == MPI_SUCCESS)
        err = check_data(comm, count, t, call);
    if (err != MPI_SUCCESS)
        return err;
    if (mpi_check_op(op, t) != MPI_SUCCESS)
        return mpi_error(comm, MPI_ERR_OP, call, "operation %s does not apply to this datatype",
                         op != NULL && op->magic == MAGIC_OP ? op->name : "(invalid)");
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------ barrier */

int MPI_Barrier(MPI_Comm comm)
{
    int err = check(comm, "MPI_Barrier");
    if (err != MPI_SUCCESS)
        return err;
    for (int k = 1; k < comm->size; k <<= 1) {
        char none;
        csendrecv(&none, 0, (comm->rank + k) % comm->size, &none, 0,
                  (comm->rank - k + comm->size) % comm->size, TAG_BARRIER, comm);
    }
    return MPI_SUCCESS;
}

/* --------------------------------------------------------------- bcast */

static void bcast_bytes(void *buf, size_t len, int root, MPI_Comm c)
{
    int size = c->size, vr = (c->rank - root + size) % size;
    int mask = 1;
    while (mask < size) {
        if (vr & mask) {
            crecv(buf, len, (vr - mask + root) % size, TAG_BCAST, c);
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < size)
            csend(buf, len, (vr + mask + root) % size, TAG_BCAST, c);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
    const char *call = "MPI_Bcast";
    int err = check(comm, call);
    if (err == MPI_SUCCESS)
        err = check_data(comm, count, type, call);
    if (err == MPI_SUCCESS)
        err = check_root(comm, root, call);
    if (err != MPI_SUCCESS)
        return err;
    size_t len = mpi_type_bytes(type, count);
    if (type->contiguous) {
        bcast_bytes(buf, len, root, comm);
        return MPI_SUCCESS;
    }
    void *p = packed_copy(buf, count, type);
    bcast_bytes(p, len, root, comm);
    mpi_unpack(p, len, buf, count, type);
    free(p);
    return MPI_SUCCESS;
}

/* -------------------------------------------------------------- reduce */

/*
 * *acc = *acc op *other when `acc_first` (acc holds lower ranks), else
 * *acc = *other op *acc; *other is clobbered. The operands keep rank order
 * (MPI's rule for non-commutative operations, and the same rounding on
 * every rank); the result lands in whichever buffer `mpi_reduce_local`
 * writes, and the two pointers swap rather than the bytes being copied.
 */
static void combine(void **acc, void **other, int count, MPI_Datatype t, MPI_Op op,
                    bool acc_first)
{
    if (acc_first) {
        mpi_reduce_local(*acc, *other, count, t, op);
        void *result = *other;
        *other = *acc;
        *acc = result;
    } else {
        mpi_reduce_local(*other, *acc, count, t, op);
    }
}

/* After combines over `home` and one scratch buffer: the result `cur` ends
 * in `home`, and the scratch buffer (whichever of the two is not home) is
 * freed. */
static void finish_in(void *home, void *cur, void *other, size_t len)
{
    if (cur != home) {
        memcpy(home, cur, len);
        free(cur);
    } else {
        free(other);
    }
}

/* Reduces the packed `acc` of every rank into root's `acc`. */
static void reduce_bytes(void *acc, size_t len, int count, MPI_Datatype t, MPI_Op op, int root,
                         MPI_Comm c)
{
    int size = c->size;
    if (!op->commute && root != 0) {
        reduce_bytes(acc, len, count, t, op, 0, c);
        if (c->rank == 0)
            csend(acc, len, root, TAG_REDUCE, c);
        else if (c->rank == root)
            crecv(acc, len, 0, TAG_REDUCE, c);
        return;
    }
    int vr = (c->rank - root + size) % size;
    void *cur = acc, *other = mpi_alloc(len);
    for (int mask = 1; mask < size; mask <<= 1) {
        if (vr & mask) {
            csend(cur, len, (vr - mask + root) % size, TAG_REDUCE, c);
            break;
        }
        if ((vr | mask) < size) {
            crecv(other, len, ((vr | mask) + root) % size, TAG_REDUCE, c);
            combine(&cur, &other, count, t, op, true);
        }
    }
    finish_in(acc, cur, other, len);
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm)
{
    const char *call = "MPI_Reduce";
    int err = check_reduction(comm, count, type, op, call);
    if (err == MPI_SUCCESS)
        err = check_root(comm, root, call);
    if (err != MPI_SUCCESS)
        return err;
    const void *mine = sendbuf == MPI_IN_PLACE && comm->rank == root ? recvbuf : sendbuf;
    size_t len = mpi_type_bytes(type, count);
    void *acc = packed_copy(mine, count, type);
    reduce_bytes(acc, len, count, type, op, root, comm);
    if (comm->rank == root)
        mpi_unpack(acc, len, recvbuf, count, type);
    free(acc);
    return MPI_SUCCESS;
}

/* Rabenseifner's Allreduce over a power of two of ranks, for a commutative
 * `op` on the packed `home` (count elements, len bytes): recursive halving
 * leaves each rank the reduction of one share of the elements, then
 * recursive doubling gathers the shares, in the order they were split. */
static void allreduce_halving(void *home, size_t len, int count, MPI_Datatype t, MPI_Op op,
                              MPI_Comm c)
{
    size_t esz = len / (size_t)count;
    uint8_t *buf = home, *in = mpi_alloc((size_t)(count / 2 + 1) * esz);
    int lo = 0, hi = count, steps = 0;
    int los[32], mids[32], his[32];
    for (int mask = c->size >> 1; mask > 0; mask >>= 1, steps++) {
        int partner = c->rank ^ mask, mid = lo + (hi - lo) / 2;
        bool lower = c->rank < partner; /* keeps [lo, mid), sends [mid, hi) */
        int keep = lower ? lo : mid, keep_end = lower ? mid : hi;
        int give = lower ? mid : lo, give_end = lower ? hi : mid;
        los[steps] = lo, mids[steps] = mid, his[steps] = hi;
        csendrecv(buf + (size_t)give * esz, (size_t)(give_end - give) * esz, partner, in,
                  (size_t)(keep_end - keep) * esz, partner, TAG_ALLREDUCE, c);
        mpi_reduce_local(in, buf + (size_t)keep * esz, keep_end - keep, t, op);
        lo = keep, hi = keep_end;
    }
    for (int mask = 1; mask < c->size; mask <<= 1) {
        int s = --steps, partner = c->rank ^ mask;
        bool lower = c->rank < partner; /* holds [lo, mid) of level s */
        int other = lower ? mids[s] : los[s], other_end = lower ? his[s] : mids[s];
        csendrecv(buf + (size_t)lo * esz, (size_t)(hi - lo) * esz, partner,
                  buf + (size_t)other * esz, (size_t)(other_end - other) * esz, partner,
                  TAG_ALLREDUCE, c);
        lo = los[s], hi = his[s];
    }
    free(in);
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm)
{
    int err = check_reduction(comm, count, type, op, "MPI_Allreduce");
    if (err != MPI_SUCCESS)
        return err;
    size_t len = mpi_type_bytes(type, count);
    /* A contiguous result is reduced where it is wanted, in recvbuf. */
    void *home;
    if (!type->contiguous)
        home = packed_copy(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type);
    else if (sendbuf != MPI_IN_PLACE)
        home = memcpy(recvbuf, sendbuf, len);
    else
        home = recvbuf;
    int size = comm->size;
    bool power_of_two = (size & (size - 1)) == 0;
    if (power_of_two && size > 1 && op->commute && len >= HALVING_MIN && count >= size) {
        allreduce_halving(home, len, count, type, op, comm);
    } else if (power_of_two) {
        void *cur = home, *other = mpi_alloc(len);
        for (int mask = 1; mask < size; mask <<= 1) {
            int partner = comm->rank ^ mask;
            csendrecv(cur, len, partner, other, len, partner, TAG_ALLREDUCE, comm);
            combine(&cur, &other, count, type, op, comm->rank < partner);
        }
        finish_in(home, cur, other, len);
    } else {
        reduce_bytes(home, len, count, type, op, 0, comm);
        bcast_bytes(home, len, 0, comm);
    }
    if (home != recvbuf) {
        mpi_unpack(home, len, recvbuf, count, type);
        free(home);
    }
    return MPI_SUCCESS;
}

int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
             MPI_Comm comm)
{
    int err = check_reduction(comm, count, type, op, "MPI_Scan");
    if (err != MPI_SUCCESS)
        return err;
    size_t len = mpi_type_bytes(type, count);
    void *acc = packed_copy(sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, count, type);
    if (comm->rank > 0) {
        void *before = mpi_alloc(len);
        crecv(before, len, comm->rank - 1, TAG_SCAN, comm);
        combine(&acc, &before, count, type, op, false);
        free(before);
    }
    if (comm->rank + 1 < comm->size)
        csend(acc, len, comm->rank + 1, TAG_SCAN, comm);
    mpi_unpack(acc, len, recvbuf, count, type);
    free(acc);
    return MPI_SUCCESS;
}

/* ------------------------------------------------- gather and scatter */

/* Where each rank's block lies in a contiguous buffer of all blocks. */
static size_t *block_offsets(MPI_Comm c, const int *counts, int count, MPI_Datatype t)
{
    size_t *at = mpi_alloc(sizeof *at * ((size_t)c->size + 1));
    at[0] = 0;
    for (int i = 0; i < c->size; i++)
        at[i + 1] = at[i] + mpi_type_bytes(t, counts != NULL ? counts[i] : count);
    return at;
}

/* The blocks of `all` into buf: block i at displs[i] (or i * count) elements. */
static void unpack_blocks(const void *all, const size_t *at, void *buf, const int *counts,
                          const int *displs, int count, MPI_Datatype t, int size, int skip)
{
    for (int i = 0; i < size; i++) {
        if (i == skip)
            continue;
        int n = counts != NULL ? counts[i] : count;
        MPI_Aint d = displs != NULL ? displs[i] : (MPI_Aint)i * count;
        mpi_unpack((const char *)all + at[i], at[i + 1] - at[i], (char *)buf + d * t->extent, n,
                   t);
    }
}

static void pack_blocks(const void *buf, const size_t *at, void *all, const int *counts,
                        const int *displs, int count, MPI_Datatype t, int size)
{
    for (int i = 0; i < size; i++) {
        int n = counts != NULL ? counts[i] : count;
        MPI_Aint d = displs != NULL ? displs[i] : (MPI_Aint)i * count;
        mpi_pack((const char *)buf + d * t->extent, n, t, (char *)all + at[i]);
    }
}

static int gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  const int *recvcounts, const int *displs, int recvcount,
                  MPI_Datatype recvtype, int root, MPI_Comm comm, const char *call)
{
    int err = check(comm, call);
    if (err == MPI_SUCCESS)
        err = check_root(comm, root, call);
    if (err == MPI_SUCCESS && sendbuf != MPI_IN_PLACE)
        err = check_data(comm, sendcount, sendtype, call);
    if (err == MPI_SUCCESS && comm->rank == root)
        err = check_data(comm, recvcounts != NULL ? 0 : recvcount, recvtype, call);
    if (err != MPI_SUCCESS)
        return err;
    bool in_place = sendbuf == MPI_IN_PLACE && comm->rank == root;
    if (comm->rank != root) {
        void *mine = packed_copy(sendbuf, sendcount, sendtype);
        csend(mine, mpi_type_bytes(sendtype, sendcount), root, TAG_GATHER, comm);
        free(mine);
        return MPI_SUCCESS;
    }
    size_t *at = block_offsets(comm, recvcounts, recvcount, recvtype);
    char *all = mpi_alloc(at[comm->size]);
    MPI_Request *r = mpi_alloc(sizeof *r * (size_t)comm->size);
    for (int i = 0; i < comm->size; i++) {
        r[i] = MPI_REQUEST_NULL;
        if (i != root)
            mpi_irecv_bytes(all + at[i], at[i + 1] - at[i], comm->world_of[i], TAG_GATHER,
                            comm->ctx + 1, comm, &r[i]);
    }
    if (!in_place) {
        size_t mine = mpi_type_bytes(sendtype, sendcount);
        if (mine > at[root + 1] - at[root])
            mine = at[root + 1] - at[root];
        void *p = packed_copy(sendbuf, sendcount, sendtype);
        memcpy(all + at[root], p, mine);
        free(p);
    }
    MPI_Waitall(comm->size, r, MPI_STATUSES_IGNORE);
    unpack_blocks(all, at, recvbuf, recvcounts, displs, recvcount, recvtype, comm->size,
                  in_place ? root : -1);
    free(r);
    free(all);
    free(at);
    return MPI_SUCCESS;
}

int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return gather(sendbuf, sendcount, sendtype, recvbuf, NULL, NULL, recvcount, recvtype, root,
                  comm, "MPI_Gather");
}

int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm)
{
    return gather(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, 0, recvtype, root,
                  comm, "MPI_Gatherv");
}

static int scatter(const void *sendbuf, const int *sendcounts, const int *displs, int sendcount,
                   MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                   int root, MPI_Comm comm, const char *call)
{
    int err = check(comm, call);
    if (err == MPI_SUCCESS)
        err = check_root(comm, root, call);
    if (err == MPI_SUCCESS && recvbuf != MPI_IN_PLACE)
        err = check_data(comm, recvcount, recvtype, call);
    if (err == MPI_SUCCESS && comm->rank == root)
        err = check_data(comm, sendcounts != NULL ? 0 : sendcount, sendtype, call);
    if (err != MPI_SUCCESS)
        return err;
    size_t want = recvbuf == MPI_IN_PLACE ? 0 : mpi_type_bytes(recvtype, recvcount);
    if (comm->rank != root) {
        void *land = mpi_alloc(want);
        crecv(land, want, root, TAG_SCATTER, comm);
        mpi_unpack(land, want, recvbuf, recvcount, recvtype);
        free(land);
        return MPI_SUCCESS;
    }
    size_t *at = block_offsets(comm, sendcounts, sendcount, sendtype);
    char *all = mpi_alloc(at[comm->size]);
    pack_blocks(sendbuf, at, all, sendcounts, displs, sendcount, sendtype, comm->size);
    MPI_Request *r = mpi_alloc(sizeof *r * (size_t)comm->size);
    for (int i = 0; i < comm->size; i++) {
        r[i] = MPI_REQUEST_NULL;
        if (i != root)
            mpi_isend_bytes(all + at[i], at[i + 1] - at[i], comm->world_of[i], TAG_SCATTER,
                            comm->ctx + 1, comm, false, &r[i]);
    }
    if (recvbuf != MPI_IN_PLACE) {
        size_t n = at[root + 1] - at[root];
        mpi_unpack(all + at[root], n < want ? n : want, recvbuf, recvcount, recvtype);
    }
    MPI_Waitall(comm->size, r, MPI_STATUSES_IGNORE);
    free(r);
    free(all);
    free(at);
    return MPI_SUCCESS;
}

int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    return scatter(sendbuf, NULL, NULL, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
                   comm, "MPI_Scatter");
}

int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm)
{
    return scatter(sendbuf, sendcounts, displs, 0, sendtype, recvbuf, recvcount, recvtype, root,
                   comm, "MPI_Scatterv");
}

/* ----------------------------------------------------------- allgather */

static int allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                     const int *recvcounts, const int *displs, int recvcount,
                     MPI_Datatype recvtype, MPI_Comm comm, const char *call)
{
    int err = check(comm, call);
    if (err == MPI_SUCCESS && sendbuf != MPI_IN_PLACE)
        err = check_data(comm, sendcount, sendtype, call);
    if (err == MPI_SUCCESS)
        err = check_data(comm, recvcounts != NULL ? 0 : recvcount, recvtype, call);
    if (err != MPI_SUCCESS)
        return err;
    int size = comm->size, me = comm->rank;
    size_t *at = block_offsets(comm, recvcounts, recvcount, recvtype);
    char *all = mpi_alloc(at[size]);
    if (sendbuf == MPI_IN_PLACE) {
        int n = recvcounts != NULL ? recvcounts[me] : recvcount;
        MPI_Aint d = displs != NULL ? displs[me] : (MPI_Aint)me * recvcount;
        mpi_pack((const char *)recvbuf + d * recvtype->extent, n, recvtype, all + at[me]);
    } else {
        void *p = packed_copy(sendbuf, sendcount, sendtype);
        size_t n = mpi_type_bytes(sendtype, sendcount);
        memcpy(all + at[me], p, n < at[me + 1] - at[me] ? n : at[me + 1] - at[me]);
        free(p);
    }
    /* Ring: at step s, pass on the block of rank me - s, take me - s - 1's. */
    int right = (me + 1) % size, left = (me - 1 + size) % size;
    for (int s = 0; s < size - 1; s++) {
        int out = (me - s + size) % size, in = (me - s - 1 + size) % size;
        csendrecv(all + at[out], at[out + 1] - at[out], right, all + at[in],
                  at[in + 1] - at[in], left, TAG_ALLGATHER, comm);
    }
    unpack_blocks(all, at, recvbuf, recvcounts, displs, recvcount, recvtype, size, -1);
    free(all);
    free(at);
    return MPI_SUCCESS;
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return allgather(sendbuf, sendcount, sendtype, recvbuf, NULL, NULL, recvcount, recvtype,
                     comm, "MPI_Allgather");
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm)
{
    return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, 0, recvtype,
                     comm, "MPI_Allgatherv");
}

/* ------------------------------------------------------------ alltoall */

static int alltoall(const void *sendbuf, const int *sendcounts, const int *sdispls,
                    int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int *recvcounts, const int *rdispls, int recvcount,
                    MPI_Datatype recvtype, MPI_Comm comm, const char *call)
{
    int err = check(comm, call);
    if (err == MPI_SUCCESS && sendbuf == MPI_IN_PLACE)
        err = mpi_error(comm, MPI_ERR_ARG, call, "MPI_IN_PLACE is not supported by atoll's MPI");
    if (err == MPI_SUCCESS)
        err = check_data(comm, sendcounts != NULL ? 0 : sendcount, sendtype, call);
    if (err == MPI_SUCCESS)
        err = check_data(comm, recvcounts != NULL ? 0 : recvcount, recvtype, call);
    if (err != MPI_SUCCESS)
        return err;
    int size = comm->size, me = comm->rank;
    size_t *sat = block_offsets(comm, sendcounts, sendcount, sendtype);
    size_t *rat = block_offsets(comm, recvcounts, recvcount, recvtype);
    char *out = mpi_alloc(sat[size]);
    char *in = mpi_alloc(rat[size]);
    pack_blocks(sendbuf, sat, out, sendcounts, sdispls, sendcount, sendtype, size);
    size_t own = sat[me + 1] - sat[me];
    if (own > rat[me + 1] - rat[me])
        own = rat[me + 1] - rat[me];
    memcpy(in + rat[me], out + sat[me], own);
    for (int s = 1; s < size; s++) {
        int to = (me + s) % size, from = (me - s + size) % size;
        csendrecv(out + sat[to], sat[to + 1] - sat[to], to, in + rat[from],
                  rat[from + 1] - rat[from], from, TAG_ALLTOALL, comm);
    }
    unpack_blocks(in, rat, recvbuf, recvcounts, rdispls, recvcount, recvtype, size, -1);
    free(out);
    free(in);
    free(sat);
    free(rat);
    return MPI_SUCCESS;
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoall(sendbuf, NULL, NULL, sendcount, sendtype, recvbuf, NULL, NULL, recvcount,
                    recvtype, comm, "MPI_Alltoall");
}

int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)
{
    return alltoall(sendbuf, sendcounts, sdispls, 0, sendtype, recvbuf, recvcounts, rdispls, 0,
                    recvtype, comm, "MPI_Alltoallv");
}

/* ------------------------------------------------------ reduce_scatter */

static int reduce_scatter(const void *sendbuf, void *recvbuf, const int *recvcounts,
                          int recvcount, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                          const char *call)
{
    int err = check(comm, call);
    if (err != MPI_SUCCESS)
        return err;
    int total = 0;
    for (int i = 0; i < comm->size; i++)
        total += recvcounts != NULL ? recvcounts[i] : recvcount;
    if ((err = check_reduction(comm, total, type, op, call)) != MPI_SUCCESS)
        return err;
    int *counts = mpi_alloc(sizeof(int) * (size_t)comm->size);
    int *displs = mpi_alloc(sizeof(int) * (size_t)comm->size);
    for (int i = 0, d = 0; i < comm->size; i++) {
        counts[i] = recvcounts != NULL ? recvcounts[i] : recvcount;
        displs[i] = d;
        d += counts[i];
    }
    size_t len = mpi_type_bytes(type, total);
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    void *acc = packed_copy(mine, total, type);
    reduce_bytes(acc, len, total, type, op, 0, comm);
    /* acc is packed: scatter it as bytes of `type`'s packed size. */
    MPI_Datatype packed;
    MPI_Type_contiguous(type->size, MPI_BYTE, &packed);
    MPI_Type_commit(&packed);
    void *land = mpi_alloc(mpi_type_bytes(type, counts[comm->rank]));
    err = MPI_Scatterv(acc, counts, displs, packed, land, counts[comm->rank], packed, 0, comm);
    mpi_unpack(land, mpi_type_bytes(type, counts[comm->rank]), recvbuf, counts[comm->rank],
               type);
    MPI_Type_free(&packed);
    free(land);
    free(acc);
    free(counts);
    free(displs);
    return err;
}

int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter(sendbuf, recvbuf, recvcounts, 0, type, op, comm,
                          "MPI_Reduce_scatter");
}

int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    return reduce_scatter(sendbuf, recvbuf, NULL, recvcount, type, op, comm,
                          "MPI_Reduce_scatter_block");
}
