/*
 * matching.c - unit tests of libatollmpi's matching queues (sdk/mpi/match.c),
 * run without MPI_Init: the oldest posted receive takes the oldest message
 * it accepts, wildcards included, and what one receive leaves stays in order.
 */
#include "impl.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static struct atoll_mpi_request *recv_for(int ctx, int src, int tag)
{
    struct atoll_mpi_request *r = calloc(1, sizeof *r);
    r->ctx = ctx;
    r->src_world = src;
    r->tag = tag;
    return r;
}

static struct unexpected *arrival(int ctx, int src, int tag, int seq)
{
    struct unexpected *u = calloc(1, sizeof *u);
    u->ctx = ctx;
    u->src_world = src;
    u->tag = tag;
    u->len = seq; /* the arrival order, for the checks */
    return u;
}

int main(void)
{
    /* Wildcards. */
    CHECK(mpi_matches(0, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 3, 9));
    CHECK(mpi_matches(0, 3, MPI_ANY_TAG, 0, 3, 9));
    CHECK(!mpi_matches(0, 2, MPI_ANY_TAG, 0, 3, 9));
    CHECK(!mpi_matches(0, MPI_ANY_SOURCE, 8, 0, 3, 9));
    CHECK(!mpi_matches(1, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 3, 9)); /* another context */

    /* Posted receives: the oldest that accepts takes the message. */
    struct atoll_mpi_request *a = recv_for(0, 1, 5), *b = recv_for(0, MPI_ANY_SOURCE, 5),
                             *c = recv_for(0, MPI_ANY_SOURCE, MPI_ANY_TAG);
    mpi_post(a);
    mpi_post(b);
    mpi_post(c);
    CHECK(mpi_take_posted(0, 2, 5) == b); /* a wants source 1 */
    CHECK(mpi_take_posted(0, 1, 5) == a);
    CHECK(mpi_take_posted(1, 1, 5) == NULL); /* no receive on context 1 */
    CHECK(mpi_take_posted(0, 7, 1) == c);
    CHECK(mpi_posted_count() == 0 && mpi_take_posted(0, 1, 5) == NULL);

    /* Unexpected messages: each receive takes the oldest it accepts, and
     * messages from one source with one tag come out in arrival order. */
    for (int seq = 0; seq < 6; seq++)
        mpi_add_unexpected(arrival(0, seq % 2, seq % 3, seq));
    /* arrivals: (src,tag) = (0,0) (1,1) (0,2) (1,0) (0,1) (1,2) */
    struct unexpected *u = mpi_find_unexpected(0, 1, MPI_ANY_TAG, true);
    CHECK(u != NULL && u->len == 1 && mpi_unexpected_count() == 6); /* peek keeps it */
    CHECK(mpi_find_unexpected(0, MPI_ANY_SOURCE, 2, false)->len == 2);
    CHECK(mpi_find_unexpected(0, 1, MPI_ANY_TAG, false)->len == 1);
    CHECK(mpi_find_unexpected(0, 1, MPI_ANY_TAG, false)->len == 3);
    CHECK(mpi_find_unexpected(0, MPI_ANY_SOURCE, MPI_ANY_TAG, false)->len == 0);
    CHECK(mpi_find_unexpected(1, MPI_ANY_SOURCE, MPI_ANY_TAG, false) == NULL);
    CHECK(mpi_find_unexpected(0, 0, 1, false)->len == 4);
    CHECK(mpi_find_unexpected(0, MPI_ANY_SOURCE, MPI_ANY_TAG, false)->len == 5);
    CHECK(mpi_unexpected_count() == 0);

    /* Many from one source: strictly in order. */
    for (int seq = 0; seq < 1000; seq++)
        mpi_add_unexpected(arrival(4, 2, 7, seq));
    for (int seq = 0; seq < 1000; seq++)
        CHECK(mpi_find_unexpected(4, MPI_ANY_SOURCE, 7, false)->len == seq);
    puts("ok matching");
    return 0;
}
