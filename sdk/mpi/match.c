/*
 * match.c - MPI's matching: posted receives and unexpected messages, each
 * a FIFO, so that the oldest receive takes the oldest message it accepts
 * and two messages from one sender with one tag on one communicator are
 * received in the order they were sent (non-overtaking).
 */
#include "impl.h"

static struct req_fifo posted;
static struct unexpected *unexpected_first, *unexpected_last;

void mpi_fifo_push(struct req_fifo *q, struct atoll_mpi_request *r)
{
    r->next = NULL;
    if (q->last != NULL)
        q->last->next = r;
    else
        q->first = r;
    q->last = r;
}

struct atoll_mpi_request *mpi_fifo_pop(struct req_fifo *q)
{
    struct atoll_mpi_request *r = q->first;
    if (r != NULL) {
        q->first = r->next;
        if (q->first == NULL)
            q->last = NULL;
        r->next = NULL;
    }
    return r;
}

bool mpi_matches(int ctx, int src_world, int tag, int msg_ctx, int msg_src, int msg_tag)
{
    return ctx == msg_ctx && (src_world == MPI_ANY_SOURCE || src_world == msg_src) &&
           (tag == MPI_ANY_TAG || tag == msg_tag);
}

struct atoll_mpi_request *mpi_take_posted(int ctx, int src_world, int tag)
{
    struct atoll_mpi_request *prev = NULL;
    for (struct atoll_mpi_request *r = posted.first; r != NULL; prev = r, r = r->next) {
        if (!mpi_matches(r->ctx, r->src_world, r->tag, ctx, src_world, tag))
            continue;
        if (prev != NULL)
            prev->next = r->next;
        else
            posted.first = r->next;
        if (posted.last == r)
            posted.last = prev;
        r->next = NULL;
        return r;
    }
    return NULL;
}

void mpi_post(struct atoll_mpi_request *r)
{
    mpi_fifo_push(&posted, r);
}

struct unexpected *mpi_find_unexpected(int ctx, int src_world, int tag, bool peek)
{
    struct unexpected *prev = NULL;
    for (struct unexpected *u = unexpected_first; u != NULL; prev = u, u = u->next) {
        if (!mpi_matches(ctx, src_world, tag, u->ctx, u->src_world, u->tag))
            continue;
        if (peek)
            return u;
        if (prev != NULL)
            prev->next = u->next;
        else
            unexpected_first = u->next;
        if (unexpected_last == u)
            unexpected_last = prev;
        u->next = NULL;
        return u;
    }
    return NULL;
}

void mpi_add_unexpected(struct unexpected *u)
{
    u->next = NULL;
    if (unexpected_last != NULL)
        unexpected_last->next = u;
    else
        unexpected_first = u;
    unexpected_last = u;
}

int mpi_posted_count(void)
{
    int n = 0;
    for (struct atoll_mpi_request *r = posted.first; r != NULL; r = r->next)
        n++;
    return n;
}

int mpi_unexpected_count(void)
{
    int n = 0;
    for (struct unexpected *u = unexpected_first; u != NULL; u = u->next)
        n++;
    return n;
}
