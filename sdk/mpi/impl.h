/*
 * impl.h - the inside of libatollmpi: what the library's files share.
 *
 *   init.c     start (finding the other ranks), end, errors, clocks
 *   channel.c  moving 64-byte messages between ranks (asynchronous IPC,
 *              queued in memory while a peer's window is full); the
 *              progress engine
 *   match.c    posted receives and unexpected messages (MPI's matching)
 *   p2p.c      point-to-point calls and requests
 *   coll.c     collectives, over point-to-point on a communicator's
 *              collective context
 *   type.c     datatypes, packing, reduction operations
 *   comm.c     communicators
 *
 * Every piece of state is a global of this process (linear memory), so a
 * rank that is captured and moved takes all of it along.
 */
#ifndef ATOLL_MPI_IMPL_H
#define ATOLL_MPI_IMPL_H

#include <atoll.h>
#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- wire */

/* m_type of a message between ranks. */
enum {
    KIND_EAGER = 0x4d504901, /* small payload inside the message */
    KIND_RTS,                /* large payload: read it through the grant */
    KIND_FIN,                /* the receiver has copied a KIND_RTS payload */
    KIND_HELLO,              /* MPI_Init: a rank introduces itself to rank 0 */
    KIND_BODY,               /* mid-sized payload: in the message's body */
    KIND_CTS,                /* a receive took a KIND_RTS sent without a grant:
                                copy the payload through the receiver's grant */
    KIND_DONE,               /* the sender has copied a KIND_CTS's payload */
};

/* Bytes of payload a message carries after its envelope. */
#define EAGER_MAX 40
/* Largest payload sent eagerly in a KIND_BODY, the body of one message
 * (ipc_senda_body): one crossing where a rendezvous takes three. From 41
 * bytes on it is faster everywhere than the payload cut into messages
 * (docs/mpi.md). */
#define EAGER_BODY_MAX ATOLL_BODY_MAX

/* The 52-byte payload of a message between ranks. */
struct wire {
    int32_t ctx; /* the communicator's context (point-to-point or collective) */
    int32_t tag;
    int32_t len; /* bytes of the whole payload */
    union {
        uint8_t data[EAGER_MAX];      /* KIND_EAGER */
        struct {                      /* KIND_RTS, and KIND_BODY (no grant) */
            uint32_t grant;           /* the sender's grant over the payload */
            uint32_t sreq;            /* the sender's request, for KIND_FIN or KIND_CTS */
            uint32_t sync;            /* 1: MPI_Ssend/Issend */
            uint32_t granted;         /* KIND_RTS: 0 when it has no grant (ask with KIND_CTS) */
        } rts;
        struct {                      /* KIND_FIN */
            uint32_t sreq;
        } fin;
        struct {                      /* KIND_CTS */
            uint32_t sreq;            /* the send to copy */
            uint32_t rreq;            /* the receive, for KIND_DONE */
            uint32_t grant;           /* the receiver's grant (write) over where it lands */
            uint32_t len;             /* bytes to copy: the payload's, or fewer (truncation) */
        } cts;
        struct {                      /* KIND_DONE */
            uint32_t rreq;
        } done;
        struct {                      /* KIND_HELLO */
            int32_t rank;             /* to rank 0: the sender's rank */
            uint32_t table_grant;     /* from rank 0: its grant over the table */
        } hello;
    } u;
};
_Static_assert(sizeof(struct wire) == ATOLL_PAYLOAD_SIZE, "a wire payload fills a message");

/* ------------------------------------------------------------ world */

struct rank_entry {
    atoll_pid_t pid;
};

extern int mpi_world_size, mpi_world_rank;
extern struct rank_entry *mpi_world;
extern bool mpi_initialized, mpi_finalized;

/* The world rank of pid, or -1 for a process outside the job. */
int mpi_rank_of_pid(atoll_pid_t pid);

/* ---------------------------------------------------------- objects */

#define MAGIC_COMM 0x434f4d4du
#define MAGIC_TYPE 0x54595045u
#define MAGIC_REQ 0x52455155u
#define MAGIC_OP 0x4f504f50u

struct atoll_mpi_errhandler {
    bool fatal;
};

struct atoll_mpi_comm {
    uint32_t magic;
    int ctx;         /* point-to-point context; ctx + 1 for collectives */
    int size, rank;
    int *world_of;   /* comm rank -> world rank */
    int *rank_of;    /* world rank -> comm rank, or -1 */
    MPI_Errhandler errhandler;
    bool predefined;
};

struct block {
    MPI_Aint off;
    MPI_Aint len;
};

/* The element kinds that reductions know. */
enum basic {
    B_NONE, B_CHAR, B_SCHAR, B_UCHAR, B_BYTE, B_SHORT, B_USHORT, B_INT, B_UINT,
    B_LONG, B_ULONG, B_LL, B_ULL, B_FLOAT, B_DOUBLE, B_LDOUBLE, B_WCHAR, B_BOOL,
    B_I8, B_I16, B_I32, B_I64, B_U8, B_U16, B_U32, B_U64, B_AINT, B_OFFSET,
    B_COUNT, B_PACKED, B_FLOAT_INT, B_DOUBLE_INT, B_LONG_INT, B_2INT,
    B_SHORT_INT, B_LDOUBLE_INT,
};

struct atoll_mpi_type {
    uint32_t magic;
    const char *name;
    int size;          /* bytes of data in one element */
    MPI_Aint lb;       /* where an element's span starts, from its address */
    MPI_Aint extent;   /* distance between consecutive elements */
    MPI_Aint align;    /* the strictest alignment of what it holds */
    enum basic basic;  /* the one element kind it is made of, or B_NONE */
    int basic_size;    /* bytes of one `basic` element */
    bool contiguous;   /* data fills [0, size) */
    bool committed, predefined;
    int nblocks;       /* when not contiguous: the data's pieces in order */
    struct block *blocks;
};

struct atoll_mpi_op {
    uint32_t magic;
    const char *name;
    int which; /* OP_* below, or OP_USER */
    MPI_User_function *user;
    bool commute;
};

enum { OP_MAX, OP_MIN, OP_SUM, OP_PROD, OP_LAND, OP_BAND, OP_LOR, OP_BOR,
       OP_LXOR, OP_BXOR, OP_MAXLOC, OP_MINLOC, OP_REPLACE, OP_NO_OP, OP_USER };

/* ---------------------------------------------------------- requests */

enum req_kind { REQ_SEND, REQ_RECV };

struct atoll_mpi_request {
    uint32_t magic;
    enum req_kind kind;
    bool done;
    bool freed;       /* MPI_Request_free'd while active: free it when done */
    MPI_Status status;
    struct atoll_mpi_comm *comm;
    /* Receive: what it accepts, where the data goes. */
    int ctx, src_world, tag; /* src_world: a world rank, or MPI_ANY_SOURCE */
    void *buf;
    int count;
    MPI_Datatype type;
    void *landing;    /* contiguous bytes the payload lands in */
    size_t capacity;  /* bytes `landing` holds */
    struct atoll_mpi_request *next; /* the posted queue */
    /* Send: the payload, while a KIND_RTS is outstanding. */
    void *packed;     /* owned copy of a non-contiguous payload */
    uint32_t grant;
    bool granted;
    const void *payload; /* a send to oneself, or a KIND_RTS without a grant: */
    size_t payload_len;  /* what the receive copies, or what KIND_CTS asks for */
    /* Receive that took a KIND_RTS without a grant: what it took, until
     * KIND_DONE (`pulling`); `next` links it while it waits for a grant. */
    bool pulling, pull_granted;
    int pull_from, pull_tag;
    size_t pull_len;
    uint32_t pull_sreq, pull_grant;
};

/* ----------------------------------------------------------- match.c */

/* Requests in order, linked by their `next`. */
struct req_fifo {
    struct atoll_mpi_request *first, *last;
};
void mpi_fifo_push(struct req_fifo *q, struct atoll_mpi_request *r);
/* The oldest request, removed; NULL if there is none. */
struct atoll_mpi_request *mpi_fifo_pop(struct req_fifo *q);

/* A message that arrived before its receive was posted. */
struct unexpected {
    struct unexpected *next;
    int kind;          /* KIND_EAGER or KIND_RTS */
    int src_world;
    int ctx, tag, len;
    uint32_t grant, sreq, sync, granted;
    struct atoll_mpi_request *self_send; /* from oneself: the send */
    uint8_t data[];    /* KIND_EAGER: the payload */
};

/* Whether a receive for (ctx, src, tag) takes a message (ctx, from, its_tag). */
bool mpi_matches(int ctx, int src_world, int tag, int msg_ctx, int msg_src, int msg_tag);
/* The oldest posted receive that takes the message, removed from the queue. */
struct atoll_mpi_request *mpi_take_posted(int ctx, int src_world, int tag);
void mpi_post(struct atoll_mpi_request *r);
/* The oldest unexpected message a receive takes; removed unless `peek`. */
struct unexpected *mpi_find_unexpected(int ctx, int src_world, int tag, bool peek);
void mpi_add_unexpected(struct unexpected *u);
/* Counts, for the tests. */
int mpi_posted_count(void);
int mpi_unexpected_count(void);

/* --------------------------------------------------------- channel.c */

/* Makes the queues of messages waiting for room. */
void mpi_channel_open(void);
/* Sends a message of `kind` to world rank `to` (never oneself); never
 * blocks: what cannot go now waits in memory for the progress engine.
 * `body`, `len`: the message's body (ipc_senda_body), copied if it must
 * wait; NULL, 0 for none. */
void mpi_channel_send(int to, int32_t kind, const struct wire *w, const void *body, size_t len);
/* Moves messages: delivers queued ones, takes arrived ones and hands them
 * to mpi_arrived(). With `block`, waits for at least one event. */
void mpi_progress(bool block);
/* Waits until every message this rank sent is in the runtime's hands and
 * no send needs this rank's memory any more (one MPI_Request_free'd may
 * still be received after this rank called MPI_Finalize). */
void mpi_channel_drain(void);
/* Rendezvous sends of this rank that still need its memory: a KIND_RTS
 * with a grant whose KIND_FIN has not come, or one without a grant not
 * yet copied. */
int mpi_sends_unfinished(void);

/* ------------------------------------------------------------- p2p.c */

/* A message from world rank `from` (the progress engine's callback); its
 * body, if it has one, is ipc_body's until the next receive. */
void mpi_arrived(int from, int32_t kind, const struct wire *w);
/* Point-to-point on raw bytes, for collectives (context ctx). */
int mpi_isend_bytes(const void *buf, size_t len, int dest_world, int tag, int ctx,
                    struct atoll_mpi_comm *comm, bool sync, MPI_Request *req);
int mpi_irecv_bytes(void *buf, size_t len, int src_world, int tag, int ctx,
                    struct atoll_mpi_comm *comm, MPI_Request *req);
void mpi_wait_done(MPI_Request r);

/* ------------------------------------------------------------ type.c */

int mpi_check_type(MPI_Datatype t);
/* Bytes of data in count elements. */
size_t mpi_type_bytes(MPI_Datatype t, int count);
/* Copies count elements at buf to/from contiguous bytes. */
void mpi_pack(const void *buf, int count, MPI_Datatype t, void *out);
void mpi_unpack(const void *in, size_t bytes, void *buf, int count, MPI_Datatype t);
/* inout[i] = in[i] op inout[i] for count elements of t (contiguous bytes). */
int mpi_reduce_local(const void *in, void *inout, int count, MPI_Datatype t, MPI_Op op);
int mpi_check_op(MPI_Op op, MPI_Datatype t);

/* ------------------------------------------------------------ init.c */

/* Reports an error through comm's handler (the world's when comm is NULL):
 * fatal ends the job; otherwise returns code. */
int mpi_error(MPI_Comm comm, int code, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Ends this rank after a failure that is not the caller's (the runtime
 * refused a call): the job then ends too. */
_Noreturn void mpi_fatal(const char *what, int err);
void *mpi_alloc(size_t n);
int mpi_check_comm(MPI_Comm comm, const char *call);

/* ------------------------------------------------------------ comm.c */

void mpi_comm_init_predefined(void);

#endif /* ATOLL_MPI_IMPL_H */
