/*
 * channel.c - moving 64-byte messages between ranks without ever blocking
 * the sender.
 *
 * atoll's send is a rendezvous (Minix): the sender waits until the receiver
 * takes the message. MPI's Isend must not wait, and two ranks sending to
 * each other must not deadlock, so a rank sends in one of two ways:
 *
 *   direct   ipc_sendnb(): succeeds only when the peer waits in receive,
 *            and then costs one IPC. Used only when nothing older for that
 *            peer is still queued, so order is kept.
 *   outbox   otherwise the message goes into this rank's outbox ring for
 *            that peer (in its own memory, granted to the job) and the peer
 *            is notified. The peer, when it makes progress, reads the ring
 *            with safecopy and writes back how far it has read (`acked`).
 *            A full ring queues messages in memory until there is room.
 *
 * A rank that must wait for room (or, in MPI_Finalize, for every message
 * to be read) sets `want` in its outbox header and notifies the peer; a
 * peer that reads a header with `want` set notifies back after acking, so
 * a wait never misses its wake-up.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "impl.h"

#define RING 64

struct outbox_header {
    uint32_t head;  /* messages written (only the owner writes it) */
    uint32_t acked; /* messages the peer has read (only the peer writes it) */
    uint32_t want;  /* 1: notify the owner after acking */
    uint32_t pad;
};

struct outbox {
    struct outbox_header h;
    message slot[RING];
};

/* A message waiting for room in an outbox. */
struct queued {
    struct queued *next;
    int32_t kind;
    struct wire w;
};

struct peer {
    uint32_t tail;              /* messages read from its outbox for me */
    struct queued *first, *last;
    struct peer *next_waiting;  /* list of peers with queued messages */
    bool waiting;
};

static struct outbox *outboxes; /* [world size]: mine, one per peer */
static struct peer *peers;      /* [world size] */
static struct peer *waiting;    /* peers with queued messages */
static bool draining;           /* in MPI_Finalize: every ack is wanted */

uint32_t mpi_channel_open(void)
{
    size_t n = (size_t)mpi_world_size;
    outboxes = aligned_alloc(64, n * sizeof *outboxes);
    peers = calloc(n, sizeof *peers);
    if (outboxes == NULL || peers == NULL)
        mpi_fatal("allocating the outboxes", ENOMEM);
    memset(outboxes, 0, n * sizeof *outboxes);
    uint32_t grant;
    int err = atoll_grant(ANY, outboxes, n * sizeof *outboxes, CPF_READ | CPF_WRITE, &grant);
    if (err != 0)
        mpi_fatal("granting the outboxes", err);
    return grant;
}

/* Offset, in `to`'s grant, of its outbox for world rank `me`. */
static uint32_t outbox_offset(int me)
{
    return (uint32_t)((size_t)me * sizeof(struct outbox));
}

static void notify(int to)
{
    int err = ipc_notify(mpi_world[to].pid);
    if (err != 0)
        mpi_fatal("notifying a rank", err);
}

static void put(int to, int32_t kind, const struct wire *w)
{
    struct outbox *ob = &outboxes[to];
    message *m = &ob->slot[ob->h.head % RING];
    m->m_source = 0;
    m->m_type = kind;
    memcpy(m->m_u.m_payload, w, sizeof *w);
    /* The peer reads only up to head: the message before the count. */
    __atomic_store_n(&ob->h.head, ob->h.head + 1, __ATOMIC_RELEASE);
}

static bool room(int to)
{
    struct outbox *ob = &outboxes[to];
    return ob->h.head - __atomic_load_n(&ob->h.acked, __ATOMIC_ACQUIRE) < RING;
}

void mpi_channel_send(int to, int32_t kind, const struct wire *w)
{
    struct peer *p = &peers[to];
    struct outbox *ob = &outboxes[to];
    if (p->first == NULL && __atomic_load_n(&ob->h.acked, __ATOMIC_ACQUIRE) == ob->h.head) {
        message m;
        m.m_source = 0;
        m.m_type = kind;
        memcpy(m.m_u.m_payload, w, sizeof *w);
        int err = ipc_sendnb(mpi_world[to].pid, &m);
        if (err == 0)
            return;
        if (err != ENOTREADY)
            mpi_fatal("sending to a rank", err);
    }
    if (p->first == NULL && room(to)) {
        put(to, kind, w);
        notify(to);
        return;
    }
    struct queued *q = mpi_alloc(sizeof *q);
    q->next = NULL;
    q->kind = kind;
    q->w = *w;
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

/* Moves queued messages into outboxes that have room. With `before_block`,
 * asks each peer whose outbox is still full to say when it has read. */
static void flush(bool before_block)
{
    struct peer **link = &waiting;
    while (*link != NULL) {
        struct peer *p = *link;
        int to = (int)(p - peers);
        bool moved = false;
        while (p->first != NULL && room(to)) {
            struct queued *q = p->first;
            put(to, q->kind, &q->w);
            p->first = q->next;
            if (p->first == NULL)
                p->last = NULL;
            free(q);
            moved = true;
        }
        if (p->first == NULL) {
            if (!draining)
                outboxes[to].h.want = 0;
            p->waiting = false;
            *link = p->next_waiting;
        } else {
            if (before_block)
                outboxes[to].h.want = 1;
            link = &p->next_waiting;
        }
        if (moved || before_block)
            notify(to);
    }
}

/* Reads what world rank `from` has put in its outbox for me. A rank that
 * has ended is skipped: it ended after MPI_Finalize, once everything it
 * sent had been read, so only a stale notification of it can be left. */
static void drain(int from)
{
    struct peer *p = &peers[from];
    atoll_pid_t pid = mpi_world[from].pid;
    uint32_t grant = mpi_world[from].outbox_grant;
    uint32_t base = outbox_offset(mpi_world_rank);
    /* The whole ring in one copy: across kernels a copy costs a round trip
     * whatever its size up to a few KiB, so this beats reading the header
     * and then the new entries. */
    static struct outbox ob;
    int err = atoll_safecopy_from(pid, grant, base, &ob, sizeof ob);
    if (err == EDEADSRCDST)
        return;
    if (err != 0)
        mpi_fatal("reading a rank's outbox", err);
    struct outbox_header h = ob.h;
    if (h.head - p->tail > RING)
        mpi_fatal("a rank's outbox is damaged", EIO);
    /* Handling a message may send (a FIN), never read this outbox again:
     * the copy stays valid while it is walked. */
    for (; p->tail != h.head; p->tail++) {
        const message *m = &ob.slot[p->tail % RING];
        mpi_arrived(from, m->m_type, (const struct wire *)m->m_u.m_payload);
    }
    if (p->tail != h.acked) {
        err = atoll_safecopy_to(pid, grant, base + offsetof(struct outbox_header, acked),
                                &p->tail, sizeof p->tail);
        /* No rank ends before its messages are read: one that did anyway
         * (killed) needs no acknowledgement. */
        if (err != 0 && err != EDEADSRCDST)
            mpi_fatal("acknowledging a rank's outbox", err);
    }
    if (h.want) {
        err = ipc_notify(pid);
        if (err != 0 && err != EDEADSRCDST)
            mpi_fatal("notifying a rank", err);
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
    if (IPC_STATUS_CALL(status) == NOTIFY)
        drain(from);
    else
        mpi_arrived(from, m->m_type, (const struct wire *)m->m_u.m_payload);
}

void mpi_progress(bool block)
{
    flush(block);
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
    while (err == 0) {
        dispatch(&m, status);
        err = ipc_receivenb(ANY, &m, &status);
    }
    if (err != ENOTREADY)
        mpi_fatal("receiving", err);
}

static bool all_read(void)
{
    if (waiting != NULL || mpi_sends_held())
        return false;
    for (int r = 0; r < mpi_world_size; r++)
        if (__atomic_load_n(&outboxes[r].h.acked, __ATOMIC_ACQUIRE) != outboxes[r].h.head)
            return false;
    return true;
}

void mpi_channel_drain(void)
{
    draining = true;
    for (;;) {
        for (int r = 0; r < mpi_world_size; r++) {
            struct outbox *ob = &outboxes[r];
            if (ob->h.acked == ob->h.head)
                continue;
            ob->h.want = 1;
            int err = ipc_notify(mpi_world[r].pid);
            /* A rank that has ended read all it was going to. */
            if (err == EDEADSRCDST)
                ob->h.acked = ob->h.head;
            else if (err != 0)
                mpi_fatal("notifying a rank", err);
        }
        if (all_read())
            return;
        mpi_progress(true);
    }
}
