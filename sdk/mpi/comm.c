/*
 * comm.c - communicators: the predefined two, dup, split, free.
 *
 * A communicator is a group of world ranks and a context: messages carry
 * the context, so traffic on one communicator never matches a receive on
 * another. Each communicator uses two contexts, ctx for point-to-point and
 * ctx + 1 for its collectives. A new communicator's context is the largest
 * next free context of its members (an Allreduce with MPI_MAX), so it is
 * free at every member.
 */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

struct atoll_mpi_comm atoll_mpi_comm_world, atoll_mpi_comm_self;

static int next_ctx = 4;

/* A communicator of world ranks `members` (in rank order) with context ctx. */
static struct atoll_mpi_comm *make(struct atoll_mpi_comm *c, int ctx, const int *members,
                                   int size, MPI_Errhandler eh)
{
    c->magic = MAGIC_COMM;
    c->ctx = ctx;
    c->size = size;
    c->rank = -1;
    c->world_of = mpi_alloc(sizeof(int) * (size_t)size);
    c->rank_of = mpi_alloc(sizeof(int) * (size_t)mpi_world_size);
    for (int w = 0; w < mpi_world_size; w++)
        c->rank_of[w] = -1;
    for (int i = 0; i < size; i++) {
        c->world_of[i] = members[i];
        c->rank_of[members[i]] = i;
        if (members[i] == mpi_world_rank)
            c->rank = i;
    }
    c->errhandler = eh;
    return c;
}

void mpi_comm_init_predefined(void)
{
    int *all = mpi_alloc(sizeof(int) * (size_t)mpi_world_size);
    for (int w = 0; w < mpi_world_size; w++)
        all[w] = w;
    make(&atoll_mpi_comm_world, 0, all, mpi_world_size, MPI_ERRORS_ARE_FATAL);
    make(&atoll_mpi_comm_self, 2, &mpi_world_rank, 1, MPI_ERRORS_ARE_FATAL);
    atoll_mpi_comm_world.predefined = atoll_mpi_comm_self.predefined = true;
    free(all);
}

int mpi_check_comm(MPI_Comm comm, const char *call)
{
    if (!mpi_initialized || mpi_finalized)
        return mpi_error(NULL, MPI_ERR_OTHER, call, "called %s MPI_Init",
                         mpi_finalized ? "after MPI_Finalize" : "before");
    if (comm == NULL || comm->magic != MAGIC_COMM)
        return mpi_error(NULL, MPI_ERR_COMM, call, "invalid communicator");
    return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    int err = mpi_check_comm(comm, "MPI_Comm_rank");
    if (err == MPI_SUCCESS)
        *rank = comm->rank;
    return err;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
    int err = mpi_check_comm(comm, "MPI_Comm_size");
    if (err == MPI_SUCCESS)
        *size = comm->size;
    return err;
}

/* A context free at every member of comm (collective over comm). */
static int agree_ctx(MPI_Comm comm, int *ctx)
{
    int err = MPI_Allreduce(&next_ctx, ctx, 1, MPI_INT, MPI_MAX, comm);
    if (err == MPI_SUCCESS)
        next_ctx = *ctx + 2;
    return err;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm)
{
    int err = mpi_check_comm(comm, "MPI_Comm_dup");
    if (err != MPI_SUCCESS)
        return err;
    int ctx;
    if ((err = agree_ctx(comm, &ctx)) != MPI_SUCCESS)
        return err;
    *newcomm = make(mpi_alloc(sizeof **newcomm), ctx, comm->world_of, comm->size,
                    comm->errhandler);
    (*newcomm)->predefined = false;
    return MPI_SUCCESS;
}

struct member {
    int color, key, world;
};

static int by_key(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->world < y->world ? -1 : x->world > y->world;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    const char *call = "MPI_Comm_split";
    int err = mpi_check_comm(comm, call);
    if (err != MPI_SUCCESS)
        return err;
    if (color < 0 && color != MPI_UNDEFINED)
        return mpi_error(comm, MPI_ERR_ARG, call, "invalid color %d", color);
    int ctx;
    if ((err = agree_ctx(comm, &ctx)) != MPI_SUCCESS)
        return err;
    struct member mine = {color, key, mpi_world_rank};
    struct member *all = mpi_alloc(sizeof *all * (size_t)comm->size);
    err = MPI_Allgather(&mine, 3, MPI_INT, all, 3, MPI_INT, comm);
    if (err != MPI_SUCCESS) {
        free(all);
        return err;
    }
    if (color == MPI_UNDEFINED) {
        free(all);
        *newcomm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    /* My color's members, ordered by key and, on a tie, by old rank. */
    int n = 0;
    for (int i = 0; i < comm->size; i++) {
        if (all[i].color == color) {
            all[n] = all[i];
            all[n].world = i; /* old rank, for the tie break */
            n++;
        }
    }
    qsort(all, (size_t)n, sizeof *all, by_key);
    int *members = mpi_alloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        members[i] = comm->world_of[all[i].world];
    free(all);
    *newcomm = make(mpi_alloc(sizeof **newcomm), ctx, members, n, comm->errhandler);
    (*newcomm)->predefined = false;
    free(members);
    return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm *comm)
{
    if (comm == NULL || mpi_check_comm(*comm, "MPI_Comm_free") != MPI_SUCCESS)
        return mpi_error(NULL, MPI_ERR_COMM, "MPI_Comm_free", "invalid communicator");
    if ((*comm)->predefined)
        return mpi_error(*comm, MPI_ERR_COMM, "MPI_Comm_free",
                         "a predefined communicator cannot be freed");
    struct atoll_mpi_comm *c = *comm;
    c->magic = 0;
    free(c->world_of);
    free(c->rank_of);
    free(c);
    *comm = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

int MPI_Comm_compare(MPI_Comm a, MPI_Comm b, int *result)
{
    if (mpi_check_comm(a, "MPI_Comm_compare") != MPI_SUCCESS ||
        mpi_check_comm(b, "MPI_Comm_compare") != MPI_SUCCESS)
        return MPI_ERR_COMM;
    if (a == b) {
        *result = MPI_IDENT;
        return MPI_SUCCESS;
    }
    if (a->size != b->size) {
        *result = MPI_UNEQUAL;
        return MPI_SUCCESS;
    }
    bool same_order = true, same_members = true;
    for (int i = 0; i < a->size; i++) {
        if (a->world_of[i] != b->world_of[i])
            same_order = false;
        if (b->rank_of[a->world_of[i]] < 0)
            same_members = false;
    }
    *result = same_order ? MPI_CONGRUENT : same_members ? MPI_SIMILAR : MPI_UNEQUAL;
    return MPI_SUCCESS;
}

int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler)
{
    int err = mpi_check_comm(comm, "MPI_Comm_set_errhandler");
    if (err != MPI_SUCCESS)
        return err;
    if (errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN)
        return mpi_error(comm, MPI_ERR_ARG, "MPI_Comm_set_errhandler", "unknown error handler");
    comm->errhandler = errhandler;
    return MPI_SUCCESS;
}

int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler)
{
    int err = mpi_check_comm(comm, "MPI_Comm_get_errhandler");
    if (err == MPI_SUCCESS)
        *errhandler = comm->errhandler;
    return err;
}
