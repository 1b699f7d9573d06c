/*
 * p2p.c - point-to-point: sends, receives and their requests.
 *
 * Protocols (docs/mpi.md):
 *   eager       up to EAGER_MAX bytes travel inside the 64-byte message
 *               (KIND_EAGER), and up to EAGER_BODY_MAX in its body
 *               (KIND_BODY); the send is complete as soon as it is handed
 *               to the channel. A synchronous send of up to EAGER_BODY_MAX
 *               goes in a KIND_BODY too, marked `sync`: the receiver
 *               answers KIND_FIN when a receive matches it, which
 *               completes the send.
 *   rendezvous  larger payloads: the sender grants the payload to the
 *               receiver and sends KIND_RTS; the receiver, once a receive
 *               matches, copies it with one safecopy and answers KIND_FIN,
 *               which completes the send.
 * A rank's messages to itself take the same paths without IPC.
 *
 * Grants: each rendezvous send holds one until its FIN, and atoll gives a
 * process 1024. Sends keep to SEND_GRANTS of them, leaving the rest to the
 * receives below, the rank table and the program. Past that budget (or if
 * the runtime refuses a grant) the RTS goes without one, at once like any
 * other: when a receive matches it, the receiver grants where the payload
 * lands (KIND_CTS, at most RECV_GRANTS at a time, the others wait in
 * order), the sender copies into it when it next makes progress, and
 * answers KIND_DONE. So no message ever waits for a grant, nor behind one
 * that does, and a rank may keep any number of large sends unreceived
 * while its peer receives what it sent later (with another tag), as Open
 * MPI allows.
 */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

#define SEND_GRANTS 928
#define RECV_GRANTS 32

static int send_grants, recv_grants;
/* Sends whose RTS went without a grant, not yet asked for by KIND_CTS. */
static int copies_owed;
/* Receives that took an RTS without a grant and wait for one of
 * RECV_GRANTS to ask for it. */
static struct req_fifo asks;

int mpi_sends_unfinished(void)
{
    return send_grants + copies_owed;
}

/* Sends the RTS of send `s`, with a grant over its payload while the
 * budget lasts. */
static void send_rts(struct atoll_mpi_request *s, int dest_world, struct wire *w,
                     const void *payload, size_t len)
{
    s->payload = payload;
    s->payload_len = len;
    if (send_grants < SEND_GRANTS) {
        int err = atoll_grant(mpi_world[dest_world].pid, payload, len, CPF_READ, &s->grant);
        if (err == 0) {
            s->granted = true;
            send_grants++;
            w->u.rts.grant = s->grant;
            w->u.rts.granted = 1;
        } else if (err != ENOSPC) {
            mpi_fatal("granting a message's payload", err);
        }
    }
    if (!s->granted)
        copies_owed++;
    mpi_channel_send(dest_world, KIND_RTS, w, NULL, 0);
}

/* Requests released, kept for the next ones: every message costs a request
 * on each side, and malloc and free were a twentieth of a small message's
 * time. In linear memory, so they move with the rank. */
enum { SPARE_REQUESTS = 16 };
static struct atoll_mpi_request *spare_requests[SPARE_REQUESTS];
static int spare_count;

static struct atoll_mpi_request *new_request(enum req_kind kind, struct atoll_mpi_comm *comm)
{
    struct atoll_mpi_request *r =
        spare_count > 0 ? spare_requests[--spare_count] : mpi_alloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->magic = MAGIC_REQ;
    r->kind = kind;
    r->comm = comm;
    r->status.MPI_SOURCE = MPI_ANY_SOURCE;
    r->status.MPI_TAG = MPI_ANY_TAG;
    return r;
}

static void release(struct atoll_mpi_request *r)
{
    free(r->packed);
    if (r->landing != NULL && r->landing != r->buf)
        free(r->landing);
    r->magic = 0;
    if (spare_count < SPARE_REQUESTS)
        spare_requests[spare_count++] = r;
    else
        free(r);
}

static void complete(struct atoll_mpi_request *r)
{
    r->done = true;
    if (r->freed)
        release(r);
}

/* A request that is complete at once: to or from MPI_PROC_NULL. */
static struct atoll_mpi_request *null_request(enum req_kind kind, struct atoll_mpi_comm *comm)
{
    struct atoll_mpi_request *r = new_request(kind, comm);
    r->status.MPI_SOURCE = MPI_PROC_NULL;
    r->status.MPI_TAG = MPI_ANY_TAG;
    r->done = true;
    return r;
}

/* ------------------------------------------------------------ receive */

/* A receive has its payload in `landing`: fill its status and unpack. */
static void received(struct atoll_mpi_request *r, int src_world, int tag, size_t len)
{
    size_t n = len < r->capacity ? len : r->capacity;
    int src = r->comm->rank_of[src_world];
    r->status.MPI_SOURCE = src;
    r->status.MPI_TAG = tag;
    r->status.atoll_bytes = (int)n;
    r->status.MPI_ERROR = len > r->capacity ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
    if (r->landing != r->buf) {
        mpi_unpack(r->landing, n, r->buf, r->count, r->type);
        free(r->landing);
        r->landing = NULL;
    }
    complete(r);
}

/* Tells rank `to` that a receive took its send `sreq`. */
static void answer_fin(int to, uint32_t sreq)
{
    struct wire fin;
    memset(&fin, 0, sizeof fin);
    fin.u.fin.sreq = sreq;
    mpi_channel_send(to, KIND_FIN, &fin, NULL, 0);
}

/* Grants the sender of the RTS that receive `r` took where its payload
 * lands, and asks it to copy (KIND_CTS). */
static void send_cts(struct atoll_mpi_request *r)
{
    size_t n = r->pull_len < r->capacity ? r->pull_len : r->capacity;
    struct wire w;
    memset(&w, 0, sizeof w);
    w.u.cts.sreq = r->pull_sreq;
    w.u.cts.rreq = (uint32_t)(uintptr_t)r;
    w.u.cts.len = (uint32_t)n;
    if (n > 0) {
        int err = atoll_grant(mpi_world[r->pull_from].pid, r->landing, n, CPF_WRITE,
                              &r->pull_grant);
        if (err != 0)
            mpi_fatal("granting a receive's buffer", err);
        r->pull_granted = true;
        recv_grants++;
        w.u.cts.grant = r->pull_grant;
    }
    mpi_channel_send(r->pull_from, KIND_CTS, &w, NULL, 0);
}

/* Receive `r` took an RTS that came without a grant: it asks for the
 * payload now, or once a grant of RECV_GRANTS is free. */
static void ask(struct atoll_mpi_request *r, int from, int tag, size_t len, uint32_t sreq)
{
    r->pulling = true;
    r->pull_from = from;
    r->pull_tag = tag;
    r->pull_len = len;
    r->pull_sreq = sreq;
    if (recv_grants < RECV_GRANTS)
        send_cts(r);
    else
        mpi_fifo_push(&asks, r);
}

/* The active request of this rank, of `kind`, that a peer's message names
 * by `id`, or NULL if it names none. */
static struct atoll_mpi_request *named(uint32_t id, enum req_kind kind)
{
    struct atoll_mpi_request *r = (struct atoll_mpi_request *)(uintptr_t)id;
    if (r == NULL || r->magic != MAGIC_REQ || r->kind != kind || r->done)
        return NULL;
    return r;
}

/* The sender copied into receive `r` (KIND_DONE from `from`). */
static void copied(int from, const struct wire *w)
{
    struct atoll_mpi_request *r = named(w->u.done.rreq, REQ_RECV);
    if (r == NULL || !r->pulling || r->pull_from != from)
        mpi_fatal("a rank copied into a receive this rank does not have", EIO);
    if (r->pull_granted) {
        atoll_revoke(r->pull_grant);
        recv_grants--;
        r->pull_granted = false;
    }
    r->pulling = false;
    received(r, from, r->pull_tag, r->pull_len);
    while (asks.first != NULL && recv_grants < RECV_GRANTS)
        send_cts(mpi_fifo_pop(&asks));
}

/* A receiver asks send `w->u.cts.sreq` of this rank, whose RTS had no
 * grant, to copy its payload through the receiver's grant (KIND_CTS). */
static void copy_asked(int from, const struct wire *w)
{
    struct atoll_mpi_request *s = named(w->u.cts.sreq, REQ_SEND);
    if (s == NULL || s->granted || s->payload == NULL || w->u.cts.len > s->payload_len)
        mpi_fatal("a rank asked for a send this rank does not have", EIO);
    if (w->u.cts.len > 0) {
        int err = atoll_safecopy_to(mpi_world[from].pid, w->u.cts.grant, 0, s->payload,
                                    w->u.cts.len);
        if (err != 0)
            mpi_fatal("copying a message to a rank", err);
    }
    struct wire done;
    memset(&done, 0, sizeof done);
    done.u.done.rreq = w->u.cts.rreq;
    mpi_channel_send(from, KIND_DONE, &done, NULL, 0);
    copies_owed--;
    s->payload = NULL;
    free(s->packed);
    s->packed = NULL;
    complete(s);
}

/* Receive `r` takes a KIND_RTS payload of another rank: copied through the
 * sender's grant, or asked for if the RTS came without one. */
static void pull(struct atoll_mpi_request *r, int from, int tag, size_t len, uint32_t grant,
                 uint32_t sreq, bool granted)
{
    if (!granted) {
        ask(r, from, tag, len, sreq);
        return;
    }
    size_t n = len < r->capacity ? len : r->capacity;
    if (n > 0) {
        int err = atoll_safecopy_from(mpi_world[from].pid, grant, 0, r->landing, n);
        if (err != 0)
            mpi_fatal("copying a message from a rank", err);
    }
    answer_fin(from, sreq);
    received(r, from, tag, len);
}

/* A send of this rank to itself meets its receive. */
static void meet_self(struct atoll_mpi_request *r, struct atoll_mpi_request *s, int tag)
{
    size_t n = s->payload_len < r->capacity ? s->payload_len : r->capacity;
    if (n > 0)
        memcpy(r->landing, s->payload, n);
    received(r, mpi_world_rank, tag, s->payload_len);
    s->payload = NULL;
    free(s->packed);
    s->packed = NULL;
    complete(s);
}

static void take_unexpected(struct atoll_mpi_request *r, struct unexpected *u)
{
    if (u->kind == KIND_EAGER) {
        size_t n = (size_t)u->len < r->capacity ? (size_t)u->len : r->capacity;
        memcpy(r->landing, u->data, n);
        if (u->sync)
            answer_fin(u->src_world, u->sreq);
        received(r, u->src_world, u->tag, (size_t)u->len);
    } else if (u->self_send != NULL) {
        meet_self(r, u->self_send, u->tag);
    } else {
        pull(r, u->src_world, u->tag, (size_t)u->len, u->grant, u->sreq, u->granted);
    }
    free(u);
}

/* Copies the body of the message just received, `len` bytes of a KIND_BODY
 * payload, or the first `cap` of them. */
static void take_body(void *to, size_t len, size_t cap)
{
    size_t n = len < cap ? len : cap;
    int err = n > 0 ? ipc_body(to, n) : 0;
    if (err != 0)
        mpi_fatal("taking a message's body", err);
}

/* A KIND_BODY: into the receive it matches, or kept as an unexpected eager
 * message; a synchronous send's is answered with KIND_FIN once matched. */
static void body_arrived(int from, const struct wire *w)
{
    size_t len = (size_t)w->len;
    struct atoll_mpi_request *r = mpi_take_posted(w->ctx, from, w->tag);
    if (r != NULL) {
        take_body(r->landing, len, r->capacity);
        if (w->u.rts.sync)
            answer_fin(from, w->u.rts.sreq);
        received(r, from, w->tag, len);
        return;
    }
    struct unexpected *u = mpi_alloc(sizeof *u + len);
    memset(u, 0, sizeof *u);
    u->kind = KIND_EAGER;
    u->src_world = from;
    u->ctx = w->ctx;
    u->tag = w->tag;
    u->len = w->len;
    u->sync = w->u.rts.sync;
    u->sreq = w->u.rts.sreq;
    take_body(u->data, len, len);
    mpi_add_unexpected(u);
}

void mpi_arrived(int from, int32_t kind, const struct wire *w)
{
    if (kind == KIND_FIN) {
        struct atoll_mpi_request *s = named(w->u.fin.sreq, REQ_SEND);
        if (s == NULL)
            mpi_fatal("a rank answered a send this rank does not have", EIO);
        if (s->granted) {
            atoll_revoke(s->grant);
            send_grants--;
        }
        s->granted = false;
        s->payload = NULL;
        free(s->packed);
        s->packed = NULL;
        complete(s);
        return;
    }
    if (kind == KIND_CTS) {
        copy_asked(from, w);
        return;
    }
    if (kind == KIND_DONE) {
        copied(from, w);
        return;
    }
    if (kind != KIND_EAGER && kind != KIND_BODY && kind != KIND_RTS)
        return; /* a late KIND_HELLO, or noise: nothing to match */
    if (w->len < 0 || (kind == KIND_EAGER && w->len > EAGER_MAX) ||
        (kind == KIND_BODY && w->len > EAGER_BODY_MAX))
        mpi_fatal("a rank sent a damaged message", EIO);
    if (kind == KIND_BODY) {
        body_arrived(from, w);
        return;
    }
    size_t len = (size_t)w->len;
    struct atoll_mpi_request *r = mpi_take_posted(w->ctx, from, w->tag);
    if (r != NULL) {
        if (kind == KIND_EAGER) {
            memcpy(r->landing, w->u.data, len < r->capacity ? len : r->capacity);
            received(r, from, w->tag, len);
        } else {
            pull(r, from, w->tag, (size_t)w->len, w->u.rts.grant, w->u.rts.sreq,
                 w->u.rts.granted != 0);
        }
        return;
    }
    size_t extra = kind == KIND_EAGER ? len : 0;
    struct unexpected *u = mpi_alloc(sizeof *u + extra);
    u->kind = kind;
    u->src_world = from;
    u->ctx = w->ctx;
    u->tag = w->tag;
    u->len = w->len;
    u->grant = kind == KIND_RTS ? w->u.rts.grant : 0;
    u->sreq = kind == KIND_RTS ? w->u.rts.sreq : 0;
    u->sync = kind == KIND_RTS ? w->u.rts.sync : 0;
    u->granted = kind == KIND_RTS ? w->u.rts.granted : 0;
    u->self_send = NULL;
    memcpy(u->data, w->u.data, extra);
    mpi_add_unexpected(u);
}

/* Starts receiving count elements of type into buf: matched with an
 * unexpected message now, or posted. Non-contiguous data lands in a packed
 * buffer first (`received` unpacks it). */
static struct atoll_mpi_request *start_recv(void *buf, int count, MPI_Datatype type,
                                            int src_world, int tag, int ctx,
                                            struct atoll_mpi_comm *comm)
{
    struct atoll_mpi_request *r = new_request(REQ_RECV, comm);
    r->ctx = ctx;
    r->src_world = src_world;
    r->tag = tag;
    r->buf = buf;
    r->count = count;
    r->type = type;
    r->capacity = mpi_type_bytes(type, count);
    r->landing = type->contiguous || r->capacity == 0 ? buf : mpi_alloc(r->capacity);
    struct unexpected *u = mpi_find_unexpected(ctx, src_world, tag, false);
    if (u != NULL)
        take_unexpected(r, u);
    else
        mpi_post(r);
    return r;
}

int mpi_irecv_bytes(void *buf, size_t len, int src_world, int tag, int ctx,
                    struct atoll_mpi_comm *comm, MPI_Request *req)
{
    *req = start_recv(buf, (int)len, MPI_BYTE, src_world, tag, ctx, comm);
    return MPI_SUCCESS;
}

/* ---------------------------------------------------------------- send */

/* Starts sending len bytes at payload (owned: freed when the send ends). */
static struct atoll_mpi_request *start_send(const void *payload, size_t len, void *owned,
                                            int dest_world, int tag, int ctx,
                                            struct atoll_mpi_comm *comm, bool sync)
{
    struct atoll_mpi_request *s = new_request(REQ_SEND, comm);
    s->packed = owned;
    s->status.MPI_ERROR = MPI_SUCCESS;
    bool eager = !sync && len <= EAGER_BODY_MAX;
    if (dest_world == mpi_world_rank) {
        s->payload = payload;
        s->payload_len = len;
        struct atoll_mpi_request *r = mpi_take_posted(ctx, dest_world, tag);
        if (r != NULL) {
            meet_self(r, s, tag);
            return s;
        }
        struct unexpected *u = mpi_alloc(sizeof *u + (eager ? len : 0));
        memset(u, 0, sizeof *u);
        u->src_world = dest_world;
        u->ctx = ctx;
        u->tag = tag;
        u->len = (int)len;
        if (eager) {
            u->kind = KIND_EAGER;
            memcpy(u->data, payload, len);
            free(s->packed);
            s->packed = NULL;
            complete(s);
        } else {
            u->kind = KIND_RTS;
            u->self_send = s;
        }
        mpi_add_unexpected(u);
        return s;
    }
    struct wire w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.tag = tag;
    w.len = (int)len;
    if (eager && len <= EAGER_MAX) {
        memcpy(w.u.data, payload, len);
        mpi_channel_send(dest_world, KIND_EAGER, &w, NULL, 0);
    } else if (len <= EAGER_BODY_MAX) {
        /* Synchronous: complete when the receiver's FIN says it matched. */
        w.u.rts.sreq = sync ? (uint32_t)(uintptr_t)s : 0;
        w.u.rts.sync = sync;
        mpi_channel_send(dest_world, KIND_BODY, &w, payload, len);
    }
    if (len <= EAGER_BODY_MAX) {
        free(s->packed);
        s->packed = NULL;
        if (!sync)
            complete(s);
        return s;
    }
    w.u.rts.sreq = (uint32_t)(uintptr_t)s;
    w.u.rts.sync = sync;
    send_rts(s, dest_world, &w, payload, len);
    return s;
}

int mpi_isend_bytes(const void *buf, size_t len, int dest_world, int tag, int ctx,
                    struct atoll_mpi_comm *comm, bool sync, MPI_Request *req)
{
    *req = start_send(buf, len, NULL, dest_world, tag, ctx, comm, sync);
    return MPI_SUCCESS;
}

void mpi_wait_done(MPI_Request r)
{
    while (!r->done)
        mpi_progress(true);
}

static int wait_as(MPI_Request *request, MPI_Status *status, const char *call);

/* ----------------------------------------------------- argument checks */

static int check_args(MPI_Comm comm, int count, MPI_Datatype type, const char *call)
{
    int err = mpi_check_comm(comm, call);
    if (err != MPI_SUCCESS)
        return err;
    if (count < 0)
        return mpi_error(comm, MPI_ERR_COUNT, call, "negative count %d", count);
    if (mpi_check_type(type) != MPI_SUCCESS)
        return mpi_error(comm, MPI_ERR_TYPE, call, "invalid or uncommitted datatype");
    return MPI_SUCCESS;
}

static int check_peer(MPI_Comm comm, int rank, bool any, const char *call)
{
    if (rank == MPI_PROC_NULL || (any && rank == MPI_ANY_SOURCE))
        return MPI_SUCCESS;
    if (rank < 0 || rank >= comm->size)
        return mpi_error(comm, MPI_ERR_RANK, call, "invalid rank %d (communicator of %d)", rank,
                         comm->size);
    return MPI_SUCCESS;
}

static int check_tag(MPI_Comm comm, int tag, bool any, const char *call)
{
    if ((any && tag == MPI_ANY_TAG) || (tag >= 0 && tag <= MPI_TAG_UB_VALUE))
        return MPI_SUCCESS;
    return mpi_error(comm, MPI_ERR_TAG, call, "invalid tag %d", tag);
}

/* What starting a send (`any` false) or a receive (`any`: the wildcards
 * are allowed) checks. */
static int check_start(MPI_Comm comm, int count, MPI_Datatype type, int peer, int tag, bool any,
                       MPI_Request *request, const char *call)
{
    int err = check_args(comm, count, type, call);
    if (err == MPI_SUCCESS)
        err = check_peer(comm, peer, any, call);
    if (err == MPI_SUCCESS)
        err = check_tag(comm, tag, any, call);
    if (err == MPI_SUCCESS && request == NULL)
        err = mpi_error(comm, MPI_ERR_REQUEST, call, "request is NULL");
    return err;
}

/* ------------------------------------------------------- public calls */

static int isend(const void *buf, int count, MPI_Datatype type, int dest, int tag,
                 MPI_Comm comm, bool sync, MPI_Request *request, const char *call)
{
    int err = check_start(comm, count, type, dest, tag, false, request, call);
    if (err != MPI_SUCCESS)
        return err;
    if (dest == MPI_PROC_NULL) {
        *request = null_request(REQ_SEND, comm);
        return MPI_SUCCESS;
    }
    size_t len = mpi_type_bytes(type, count);
    void *owned = NULL;
    const void *payload = buf;
    if (!type->contiguous && len > 0) {
        owned = mpi_alloc(len);
        mpi_pack(buf, count, type, owned);
        payload = owned;
    }
    *request = start_send(payload, len, owned, comm->world_of[dest], tag, comm->ctx, comm, sync);
    return MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    return isend(buf, count, type, dest, tag, comm, false, request, "MPI_Isend");
}

int MPI_Issend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request *request)
{
    return isend(buf, count, type, dest, tag, comm, true, request, "MPI_Issend");
}

static int send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                bool sync, const char *call)
{
    MPI_Request r;
    int err = isend(buf, count, type, dest, tag, comm, sync, &r, call);
    if (err != MPI_SUCCESS)
        return err;
    return wait_as(&r, MPI_STATUS_IGNORE, call);
}

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    return send(buf, count, type, dest, tag, comm, false, "MPI_Send");
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    return send(buf, count, type, dest, tag, comm, true, "MPI_Ssend");
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *request)
{
    const char *call = "MPI_Irecv";
    int err = check_start(comm, count, type, source, tag, true, request, call);
    if (err != MPI_SUCCESS)
        return err;
    if (source == MPI_PROC_NULL) {
        *request = null_request(REQ_RECV, comm);
        return MPI_SUCCESS;
    }
    int src_world = source == MPI_ANY_SOURCE ? MPI_ANY_SOURCE : comm->world_of[source];
    *request = start_recv(buf, count, type, src_world, tag, comm->ctx, comm);
    return MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status)
{
    MPI_Request r;
    int err = MPI_Irecv(buf, count, type, source, tag, comm, &r);
    if (err != MPI_SUCCESS)
        return err;
    return wait_as(&r, status, "MPI_Recv");
}

/* ----------------------------------------------------------- requests */

static int check_request(MPI_Request r, const char *call)
{
    if (r != MPI_REQUEST_NULL && r->magic != MAGIC_REQ)
        return mpi_error(NULL, MPI_ERR_REQUEST, call, "invalid request");
    return MPI_SUCCESS;
}

/* Hands a completed request's status to the caller and frees it. */
static int finish(MPI_Request *request, MPI_Status *status)
{
    struct atoll_mpi_request *r = *request;
    int err = r->status.MPI_ERROR;
    if (status != MPI_STATUS_IGNORE)
        *status = r->status;
    release(r);
    *request = MPI_REQUEST_NULL;
    return err;
}

/* The status of a null or inactive request. */
static void empty_status(MPI_Status *status)
{
    if (status != MPI_STATUS_IGNORE) {
        status->MPI_SOURCE = MPI_ANY_SOURCE;
        status->MPI_TAG = MPI_ANY_TAG;
        status->MPI_ERROR = MPI_SUCCESS;
        status->atoll_bytes = 0;
        status->atoll_cancelled = 0;
    }
}

/* MPI_Wait, for `call` (MPI_Recv, MPI_Send... wait too). */
static int wait_as(MPI_Request *request, MPI_Status *status, const char *call)
{
    if (request == NULL || check_request(*request, call) != MPI_SUCCESS)
        return mpi_error(NULL, MPI_ERR_REQUEST, call, "invalid request");
    if (*request == MPI_REQUEST_NULL) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    MPI_Comm comm = (*request)->comm;
    mpi_wait_done(*request);
    int err = finish(request, status);
    if (err != MPI_SUCCESS)
        return mpi_error(comm, err, call, "message truncated");
    return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
    return wait_as(request, status, "MPI_Wait");
}

int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status)
{
    if (request == NULL || flag == NULL || check_request(*request, "MPI_Test") != MPI_SUCCESS)
        return mpi_error(NULL, MPI_ERR_ARG, "MPI_Test", "invalid request or flag");
    if (*request == MPI_REQUEST_NULL) {
        *flag = 1;
        empty_status(status);
        return MPI_SUCCESS;
    }
    if (!(*request)->done)
        mpi_progress(false);
    *flag = (*request)->done;
    if (!*flag)
        return MPI_SUCCESS;
    MPI_Comm comm = (*request)->comm;
    int err = finish(request, status);
    if (err != MPI_SUCCESS)
        return mpi_error(comm, err, "MPI_Test", "message truncated");
    return MPI_SUCCESS;
}

static int check_requests(int count, MPI_Request requests[], const char *call)
{
    if (count < 0 || (count > 0 && requests == NULL))
        return mpi_error(NULL, MPI_ERR_ARG, call, "invalid request array");
    for (int i = 0; i < count; i++)
        if (check_request(requests[i], call) != MPI_SUCCESS)
            return MPI_ERR_REQUEST;
    return MPI_SUCCESS;
}

/* Finishes every request of a completed set; MPI_ERR_IN_STATUS if any failed. */
static int finish_all(int count, MPI_Request requests[], MPI_Status statuses[],
                      const char *call)
{
    bool failed = false;
    for (int i = 0; i < count; i++) {
        MPI_Status *st = statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i];
        if (requests[i] == MPI_REQUEST_NULL) {
            empty_status(st);
            continue;
        }
        if (finish(&requests[i], st) != MPI_SUCCESS)
            failed = true;
    }
    if (failed)
        return mpi_error(NULL, MPI_ERR_IN_STATUS, call, "a request failed (see its status)");
    return MPI_SUCCESS;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
    int err = check_requests(count, requests, "MPI_Waitall");
    if (err != MPI_SUCCESS)
        return err;
    for (int i = 0; i < count; i++)
        if (requests[i] != MPI_REQUEST_NULL)
            mpi_wait_done(requests[i]);
    return finish_all(count, requests, statuses, "MPI_Waitall");
}

int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[])
{
    int err = check_requests(count, requests, "MPI_Testall");
    if (err != MPI_SUCCESS)
        return err;
    mpi_progress(false);
    for (int i = 0; i < count; i++) {
        if (requests[i] != MPI_REQUEST_NULL && !requests[i]->done) {
            *flag = 0;
            return MPI_SUCCESS;
        }
    }
    *flag = 1;
    return finish_all(count, requests, statuses, "MPI_Testall");
}

/* The first completed request of the set, -1 if none, MPI_UNDEFINED if
 * every request is null. */
static int first_done(int count, MPI_Request requests[])
{
    bool active = false;
    for (int i = 0; i < count; i++) {
        if (requests[i] == MPI_REQUEST_NULL)
            continue;
        active = true;
        if (requests[i]->done)
            return i;
    }
    return active ? -1 : MPI_UNDEFINED;
}

int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status)
{
    int err = check_requests(count, requests, "MPI_Waitany");
    if (err != MPI_SUCCESS)
        return err;
    int i;
    while ((i = first_done(count, requests)) == -1)
        mpi_progress(true);
    *index = i;
    if (i == MPI_UNDEFINED) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    MPI_Comm comm = requests[i]->comm;
    if (finish(&requests[i], status) != MPI_SUCCESS)
        return mpi_error(comm, MPI_ERR_TRUNCATE, "MPI_Waitany", "message truncated");
    return MPI_SUCCESS;
}

int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status)
{
    int err = check_requests(count, requests, "MPI_Testany");
    if (err != MPI_SUCCESS)
        return err;
    mpi_progress(false);
    int i = first_done(count, requests);
    *flag = i != -1;
    *index = i == -1 ? MPI_UNDEFINED : i;
    if (i == -1)
        return MPI_SUCCESS;
    if (i == MPI_UNDEFINED) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    MPI_Comm comm = requests[i]->comm;
    if (finish(&requests[i], status) != MPI_SUCCESS)
        return mpi_error(comm, MPI_ERR_TRUNCATE, "MPI_Testany", "message truncated");
    return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *request)
{
    if (request == NULL || *request == MPI_REQUEST_NULL ||
        check_request(*request, "MPI_Request_free") != MPI_SUCCESS)
        return mpi_error(NULL, MPI_ERR_REQUEST, "MPI_Request_free", "invalid request");
    struct atoll_mpi_request *r = *request;
    *request = MPI_REQUEST_NULL;
    if (r->done)
        release(r);
    else
        r->freed = true;
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------- probe */

static int probe(int source, int tag, MPI_Comm comm, bool block, int *flag, MPI_Status *status,
                 const char *call)
{
    int err = mpi_check_comm(comm, call);
    if (err == MPI_SUCCESS)
        err = check_peer(comm, source, true, call);
    if (err == MPI_SUCCESS)
        err = check_tag(comm, tag, true, call);
    if (err != MPI_SUCCESS)
        return err;
    if (source == MPI_PROC_NULL) {
        *flag = 1;
        if (status != MPI_STATUS_IGNORE) {
            empty_status(status);
            status->MPI_SOURCE = MPI_PROC_NULL;
        }
        return MPI_SUCCESS;
    }
    int src_world = source == MPI_ANY_SOURCE ? MPI_ANY_SOURCE : comm->world_of[source];
    mpi_progress(false);
    struct unexpected *u;
    while ((u = mpi_find_unexpected(comm->ctx, src_world, tag, true)) == NULL && block)
        mpi_progress(true);
    *flag = u != NULL;
    if (u != NULL && status != MPI_STATUS_IGNORE) {
        status->MPI_SOURCE = comm->rank_of[u->src_world];
        status->MPI_TAG = u->tag;
        status->MPI_ERROR = MPI_SUCCESS;
        status->atoll_bytes = u->len;
        status->atoll_cancelled = 0;
    }
    return MPI_SUCCESS;
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)
{
    return probe(source, tag, comm, false, flag, status, "MPI_Iprobe");
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    int flag;
    return probe(source, tag, comm, true, &flag, status, "MPI_Probe");
}

/* ------------------------------------------------------------ sendrecv */

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                 int recvtag, MPI_Comm comm, MPI_Status *status)
{
    MPI_Request r[2];
    int err = MPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &r[0]);
    if (err != MPI_SUCCESS)
        return err;
    err = MPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &r[1]);
    if (err != MPI_SUCCESS)
        return err;
    mpi_wait_done(r[1]);
    finish(&r[1], MPI_STATUS_IGNORE);
    return wait_as(&r[0], status, "MPI_Sendrecv");
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype type, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status)
{
    int err = check_args(comm, count, type, "MPI_Sendrecv_replace");
    if (err != MPI_SUCCESS)
        return err;
    size_t len = mpi_type_bytes(type, count);
    void *copy = mpi_alloc(len > 0 ? len : 1);
    mpi_pack(buf, count, type, copy);
    err = MPI_Sendrecv(copy, (int)len, MPI_BYTE, dest, sendtag, buf, count, type, source,
                       recvtag, comm, status);
    free(copy);
    return err;
}

int MPI_Get_count(const MPI_Status *status, MPI_Datatype type, int *count)
{
    if (status == NULL || count == NULL || mpi_check_type(type) != MPI_SUCCESS)
        return mpi_error(NULL, MPI_ERR_ARG, "MPI_Get_count", "invalid status or datatype");
    if (type->size == 0)
        *count = 0;
    else if (status->atoll_bytes % type->size != 0)
        *count = MPI_UNDEFINED;
    else
        *count = status->atoll_bytes / type->size;
    return MPI_SUCCESS;
}
