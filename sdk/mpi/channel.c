/*
 * channel.c - moving 64-byte messages between ranks without ever blocking
 * the sender.
 *
 * MPI's Isend must not wait, and two ranks sending to each other must not
 * deadlock, so a rank sends with atoll's asynchronous send (ipc_senda,
 * Minix's senda): the runtime queues the message at the receiver, in the
 * receiver's UArea, and keeps each pair's messages in order wherever the
 * two ranks move. A receiver waiting in receive gets it at once.
 *
 * The runtime lets a sender have ATOLL_ASYNC_WINDOW messages untaken by one
 * receiver. Past that ipc_senda fails with EAGAIN; the message then waits
 * in this rank's memory, with every later one to that peer (MPI's order
 * between a pair), and the runtime notifies this rank, as if from the
 * peer, when the peer has taken one: the progress engine sends again.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "impl.h"

/* A message waiting for room in the runtime's window. */
struct queued {
    struct queued *next;
    int32_t kind;
    struct wire w;
    void *body; /* its body, copied; NULL if none */
    size_t len;
};

struct peer {
    struct queued *first, *last;
    struct peer *next_waiting; /* list of peers with queued messages */
    bool waiting;
};

static struct peer *peers;   /* [world size] */
static struct peer *waiting; /* peers with queued messages */

void mpi_channel_open(void)
{
    peers = calloc((size_t)mpi_world_size, sizeof *peers);
    if (peers == NULL)
        mpi_fatal("allocating the channel", ENOMEM);
}

/* Hands one message to the runtime; false if the window to `to` is full.
 * `more`: another follows at once, and may share its write to another
 * node. */
static bool try_send(int to, int32_t kind, const struct wire *w, bool more, const void *body,
                     size_t len)
{
    message m;
    m.m_source = 0;
    m.m_type = kind;
    memcpy(m.m_u.m_payload, w, sizeof *w);
    atoll_pid_t pid = mpi_world[to].pid;
    int err = body != NULL ? ipc_senda_body(pid, &m, body, len)
              : more       ? ipc_senda_more(pid, &m)
                           : ipc_senda(pid, &m);
    if (err == EAGAIN)
        return false;
    if (err != 0)
        mpi_fatal("sending to a rank", err);
    return true;
}

void mpi_channel_send(int to, int32_t kind, const struct wire *w, const void *body, size_t len)
{
    struct peer *p = &peers[to];
    if (p->first == NULL && try_send(to, kind, w, false, body, len))
        return;
    struct queued *q = mpi_alloc(sizeof *q);
    q->next = NULL;
    q->kind = kind;
    q->w = *w;
    q->body = NULL;
    q->len = len;
    if (body != NULL) {
        q->body = mpi_alloc(len > 0 ? len : 1);
        memcpy(q->body, body, len);
    }
    if (p->last != NULL)
        p->last->next = q;
    else
        p->first = q;
    p->last = q;
    if (!p->waiting) {
        p->waiting = true;
        p->next_waiting = waiting;
        waiting = p;
    }
}

/* Sends queued messages while the runtime takes them. */
static void flush(void)
{
    struct peer **link = &waiting;
    while (*link != NULL) {
        struct peer *p = *link;
        int to = (int)(p - peers);
        struct queued *q;
        while ((q = p->first) != NULL &&
               try_send(to, q->kind, &q->w, q->next != NULL, q->body, q->len)) {
            p->first = q->next;
            if (p->first == NULL)
                p->last = NULL;
            free(q->body);
            free(q);
        }
        if (p->first == NULL) {
            p->waiting = false;
            *link = p->next_waiting;
        } else {
            link = &p->next_waiting;
        }
    }
}

static void dispatch(const message *m, int status)
{
    int from = mpi_rank_of_pid(m->m_source);
    if (from < 0) {
        fprintf(stderr, "atoll-mpi: rank %d ignores a message from a process outside the job\n",
                mpi_world_rank);
        return;
    }
    /* A notification only says that a peer took messages: the next
     * progress sends what waits for it. */
    if (IPC_STATUS_CALL(status) != NOTIFY)
        mpi_arrived(from, m->m_type, (const struct wire *)m->m_u.m_payload);
}

void mpi_progress(bool block)
{
    flush();
    message m;
    int status = 0;
    int err = block ? ipc_receive(ANY, &m, &status) : ipc_receivenb(ANY, &m, &status);
    /*
     * A poll that found nothing (Test, Iprobe in a loop) gives the kernel to
     * the other processes on it: the message it waits for may come from a
     * rank on the same kernel, which cannot run until this one stops (as
     * Open MPI's mpi_yield_when_idle, when ranks outnumber cores).
     */
    if (err == ENOTREADY)
        sched_yield();
    /* Drains what had come: the kernel says when nothing more had (a last
     * receivenb would cost a system call to find nothing). */
    while (err == 0) {
        dispatch(&m, status);
        if (!IPC_STATUS_MORE(status))
            return;
        err = ipc_receivenb(ANY, &m, &status);
    }
    if (err != ENOTREADY)
        mpi_fatal("receiving", err);
}

void mpi_channel_drain(void)
{
    for (;;) {
        flush();
        if (waiting == NULL && mpi_sends_unfinished() == 0)
            return;
        mpi_progress(true);
    }
}
