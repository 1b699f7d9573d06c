/*
 * init.c - a rank's start and end, errors, clocks, and the calls that are
 * not supported.
 *
 * `atoll run -n N` starts rank 0 first and gives every rank its place in
 * the environment: ATOLL_MPI_SIZE, ATOLL_MPI_RANK and, for the others,
 * ATOLL_MPI_ROOT (rank 0's pid). In MPI_Init each rank sends rank 0 its
 * rank (sendrec); rank 0 answers every one with a grant over the table of
 * all ranks once it has them all, and each copies it.
 * A program started without those variables is a singleton (one rank).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "impl.h"

int mpi_world_size = 1, mpi_world_rank = 0;
struct rank_entry *mpi_world;
bool mpi_initialized, mpi_finalized;

struct atoll_mpi_errhandler atoll_mpi_errors_are_fatal = {.fatal = true};
struct atoll_mpi_errhandler atoll_mpi_errors_return = {.fatal = false};

/* pid -> world rank: open addressing over a power of two >= 2 * size;
 * ANY (never a pid) marks a free slot. */
static atoll_pid_t *pid_keys;
static int *pid_ranks;
static uint32_t pid_mask;

static uint32_t pid_hash(atoll_pid_t pid)
{
    uint64_t x = (uint64_t)pid * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 32) & pid_mask;
}

static void index_pids(void)
{
    uint32_t cap = 2;
    while (cap < 2u * (uint32_t)mpi_world_size)
        cap <<= 1;
    pid_mask = cap - 1;
    pid_keys = mpi_alloc(sizeof *pid_keys * cap);
    pid_ranks = mpi_alloc(sizeof *pid_ranks * cap);
    for (uint32_t i = 0; i < cap; i++)
        pid_keys[i] = ANY;
    for (int r = 0; r < mpi_world_size; r++) {
        uint32_t i = pid_hash(mpi_world[r].pid);
        while (pid_keys[i] != ANY)
            i = (i + 1) & pid_mask;
        pid_keys[i] = mpi_world[r].pid;
        pid_ranks[i] = r;
    }
}

int mpi_rank_of_pid(atoll_pid_t pid)
{
    if (pid == ANY)
        return -1;
    for (uint32_t i = pid_hash(pid);; i = (i + 1) & pid_mask) {
        if (pid_keys[i] == pid)
            return pid_ranks[i];
        if (pid_keys[i] == ANY)
            return -1;
    }
}

void *mpi_alloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);
    if (p == NULL)
        mpi_fatal("allocating memory", ENOMEM);
    return p;
}

/* strerror, knowing atoll's IPC errors too. */
static const char *error_name(int err)
{
    switch (err) {
    case ELOCKED: return "deadlock (ELOCKED)";
    case EDEADSRCDST: return "the rank has ended (EDEADSRCDST)";
    case EBADSRCDST: return "no such process (EBADSRCDST)";
    case ENOTREADY: return "not ready (ENOTREADY)";
    case ECALLDENIED: return "in another domain (ECALLDENIED)";
    default: return strerror(err);
    }
}

_Noreturn void mpi_fatal(const char *what, int err)
{
    fprintf(stderr, "atoll-mpi: rank %d: %s: %s\n", mpi_world_rank, what, error_name(err));
    fflush(stderr);
    _Exit(1);
}

int mpi_error(MPI_Comm comm, int code, const char *call, const char *fmt, ...)
{
    MPI_Errhandler eh = MPI_ERRORS_ARE_FATAL;
    if (comm != NULL && comm->magic == MAGIC_COMM)
        eh = comm->errhandler;
    else if (mpi_initialized)
        eh = atoll_mpi_comm_world.errhandler;
    char what[MPI_MAX_ERROR_STRING];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char class[MPI_MAX_ERROR_STRING];
    int len;
    MPI_Error_string(code, class, &len);
    /* A program that asked for errors back handles them; a call that is
     * not supported is always named. */
    if (eh->fatal || code == MPI_ERR_OTHER)
        fprintf(stderr, "atoll-mpi: rank %d: %s: %s (%s)%s\n", mpi_world_rank, call, what,
                class, eh->fatal ? ": the job is aborted" : "");
    if (eh->fatal) {
        fflush(stderr);
        _Exit(code != 0 ? code : 1);
    }
    return code;
}

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v != NULL ? atoi(v) : fallback;
}

/* "node.kernel:slot:generation" -> pid, ANY if malformed (0 is a pid). */
static atoll_pid_t parse_pid(const char *s)
{
    unsigned node, kernel, slot, generation;
    char end;
    if (s == NULL ||
        sscanf(s, "%u.%u:%u:%u%c", &node, &kernel, &slot, &generation, &end) != 4 ||
        node > 0xFFFF || kernel > 0xFFFF || slot > 0xFFFF || generation > 0xFFFF)
        return ANY;
    return (atoll_pid_t)(((uint64_t)node << 48) | ((uint64_t)kernel << 32) |
                         ((uint64_t)slot << 16) | generation);
}

/* Rank 0: hears every other rank, then answers each with the table. */
static void gather_world(void)
{
    for (int heard = 1; heard < mpi_world_size; heard++) {
        message m;
        int status;
        int err = ipc_receive(ANY, &m, &status);
        if (err != 0)
            mpi_fatal("MPI_Init: waiting for the other ranks", err);
        const struct wire *w = (const struct wire *)m.m_u.m_payload;
        int r = w->u.hello.rank;
        if (m.m_type != KIND_HELLO || IPC_STATUS_CALL(status) != SENDREC || r <= 0 ||
            r >= mpi_world_size || mpi_world[r].pid != ANY) {
            fprintf(stderr, "atoll-mpi: MPI_Init: rank 0 ignores a stray message\n");
            heard--;
            continue;
        }
        mpi_world[r].pid = m.m_source;
    }
    uint32_t table;
    int err = atoll_grant(ANY, mpi_world, sizeof *mpi_world * (size_t)mpi_world_size, CPF_READ,
                          &table);
    if (err != 0)
        mpi_fatal("MPI_Init: granting the table of ranks", err);
    for (int r = 1; r < mpi_world_size; r++) {
        message m;
        memset(&m, 0, sizeof m);
        m.m_type = KIND_HELLO;
        ((struct wire *)m.m_u.m_payload)->u.hello.table_grant = table;
        err = ipc_send(mpi_world[r].pid, &m);
        if (err != 0)
            mpi_fatal("MPI_Init: answering a rank", err);
    }
}

/* Any other rank: introduces itself to rank 0 and copies the table. */
static void join_world(atoll_pid_t root)
{
    message m;
    memset(&m, 0, sizeof m);
    m.m_type = KIND_HELLO;
    struct wire *w = (struct wire *)m.m_u.m_payload;
    w->u.hello.rank = mpi_world_rank;
    int err = ipc_sendrec(root, &m);
    if (err != 0)
        mpi_fatal("MPI_Init: reaching rank 0", err);
    err = atoll_safecopy_from(root, w->u.hello.table_grant, 0, mpi_world,
                              sizeof *mpi_world * (size_t)mpi_world_size);
    if (err != 0)
        mpi_fatal("MPI_Init: copying the table of ranks", err);
}

int MPI_Init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mpi_initialized)
        return mpi_error(NULL, MPI_ERR_OTHER, "MPI_Init", "called twice");
    mpi_world_size = env_int("ATOLL_MPI_SIZE", 1);
    mpi_world_rank = env_int("ATOLL_MPI_RANK", 0);
    atoll_pid_t root = parse_pid(getenv("ATOLL_MPI_ROOT"));
    if (mpi_world_size < 1 || mpi_world_rank < 0 || mpi_world_rank >= mpi_world_size ||
        (mpi_world_rank > 0 && root == ANY)) {
        fprintf(stderr, "atoll-mpi: ATOLL_MPI_SIZE, ATOLL_MPI_RANK or ATOLL_MPI_ROOT is wrong "
                        "(start MPI programs with `atoll run -n N`)\n");
        _Exit(1);
    }
    mpi_world = mpi_alloc(sizeof *mpi_world * (size_t)mpi_world_size);
    for (int r = 0; r < mpi_world_size; r++)
        mpi_world[r] = (struct rank_entry){.pid = ANY};
    mpi_world[mpi_world_rank].pid = atoll_getpid();
    mpi_channel_open();
    if (mpi_world_size > 1) {
        if (mpi_world_rank == 0)
            gather_world();
        else
            join_world(root);
    }
    index_pids();
    mpi_comm_init_predefined();
    mpi_initialized = true;
    return MPI_SUCCESS;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    (void)required;
    *provided = MPI_THREAD_SINGLE;
    return MPI_Init(argc, argv);
}

int MPI_Query_thread(int *provided)
{
    *provided = MPI_THREAD_SINGLE;
    return MPI_SUCCESS;
}

int MPI_Initialized(int *flag)
{
    *flag = mpi_initialized;
    return MPI_SUCCESS;
}

int MPI_Finalized(int *flag)
{
    *flag = mpi_finalized;
    return MPI_SUCCESS;
}

int MPI_Finalize(void)
{
    int err = mpi_check_comm(MPI_COMM_WORLD, "MPI_Finalize");
    if (err != MPI_SUCCESS)
        return err;
    /* Every rank is here, then every message this rank still keeps is
     * handed to the runtime (which delivers it even after this rank ends)
     * and every rendezvous send has been copied by its receiver. */
    MPI_Barrier(MPI_COMM_WORLD);
    mpi_channel_drain();
    mpi_finalized = true;
    return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int errorcode)
{
    (void)comm;
    /* `atoll run -n` ends the other ranks when one fails; the job's status
     * is this rank's (never 0, or the job would not be seen to fail). */
    int status = errorcode & 0xFF;
    fprintf(stderr, "atoll-mpi: MPI_Abort was called on rank %d with errorcode %d\n",
            mpi_world_rank, errorcode);
    fflush(stdout);
    fflush(stderr);
    _Exit(status != 0 ? status : 1);
}

double MPI_Wtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double MPI_Wtick(void)
{
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC, &ts) != 0)
        return 1e-9;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int MPI_Get_processor_name(char *name, int *resultlen)
{
    int k = atoll_kernel();
    *resultlen = snprintf(name, MPI_MAX_PROCESSOR_NAME, "atoll-%d.%d", (k >> 16) & 0xFFFF,
                          k & 0xFFFF);
    return MPI_SUCCESS;
}

int MPI_Get_version(int *version, int *subversion)
{
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

int MPI_Error_string(int errorcode, char *string, int *resultlen)
{
    static const char *const names[] = {
        "MPI_SUCCESS: no error", "MPI_ERR_BUFFER: invalid buffer",
        "MPI_ERR_COUNT: invalid count", "MPI_ERR_TYPE: invalid datatype",
        "MPI_ERR_TAG: invalid tag", "MPI_ERR_COMM: invalid communicator",
        "MPI_ERR_RANK: invalid rank", "MPI_ERR_REQUEST: invalid request",
        "MPI_ERR_ROOT: invalid root", "MPI_ERR_GROUP: invalid group",
        "MPI_ERR_OP: invalid operation", "MPI_ERR_TOPOLOGY: invalid topology",
        "MPI_ERR_DIMS: invalid dimensions", "MPI_ERR_ARG: invalid argument",
        "MPI_ERR_UNKNOWN: unknown error", "MPI_ERR_TRUNCATE: message truncated",
        "MPI_ERR_OTHER: other error", "MPI_ERR_INTERN: internal error",
        "MPI_ERR_IN_STATUS: error code is in status", "MPI_ERR_PENDING: pending request",
        "MPI_ERR_NO_MEM: out of memory",
    };
    const char *s = errorcode >= 0 && errorcode <= MPI_ERR_LASTCODE ? names[errorcode]
                                                                     : "unknown error code";
    *resultlen = snprintf(string, MPI_MAX_ERROR_STRING, "%s", s);
    return MPI_SUCCESS;
}

int MPI_Error_class(int errorcode, int *errorclass)
{
    *errorclass = errorcode >= 0 && errorcode <= MPI_ERR_LASTCODE ? errorcode : MPI_ERR_UNKNOWN;
    return MPI_SUCCESS;
}

/* ------------------------------------------------------ not supported */

#define UNSUPPORTED(name, params, comm)                                                    \
    int name params                                                                        \
    {                                                                                      \
        return mpi_error(comm, MPI_ERR_OTHER, #name, "not supported by atoll's MPI");      \
    }

UNSUPPORTED(MPI_Bsend, (const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm comm), comm)
UNSUPPORTED(MPI_Rsend, (const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm comm), comm)
UNSUPPORTED(MPI_Ibsend, (const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm comm,
                         MPI_Request *r), comm)
UNSUPPORTED(MPI_Irsend, (const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm comm,
                         MPI_Request *r), comm)
UNSUPPORTED(MPI_Send_init, (const void *b, int c, MPI_Datatype t, int d, int g, MPI_Comm comm,
                            MPI_Request *r), comm)
UNSUPPORTED(MPI_Recv_init, (void *b, int c, MPI_Datatype t, int s, int g, MPI_Comm comm,
                            MPI_Request *r), comm)
UNSUPPORTED(MPI_Start, (MPI_Request *r), NULL)
UNSUPPORTED(MPI_Startall, (int n, MPI_Request r[]), NULL)
UNSUPPORTED(MPI_Cancel, (MPI_Request *r), NULL)
UNSUPPORTED(MPI_Waitsome, (int n, MPI_Request r[], int *o, int i[], MPI_Status s[]), NULL)
UNSUPPORTED(MPI_Testsome, (int n, MPI_Request r[], int *o, int i[], MPI_Status s[]), NULL)
UNSUPPORTED(MPI_Exscan, (const void *s, void *r, int c, MPI_Datatype t, MPI_Op o,
                         MPI_Comm comm), comm)
UNSUPPORTED(MPI_Pack, (const void *i, int c, MPI_Datatype t, void *o, int s, int *p,
                       MPI_Comm comm), comm)
UNSUPPORTED(MPI_Unpack, (const void *i, int s, int *p, void *o, int c, MPI_Datatype t,
                         MPI_Comm comm), comm)
UNSUPPORTED(MPI_Comm_group, (MPI_Comm comm, MPI_Group *g), comm)
UNSUPPORTED(MPI_Comm_create, (MPI_Comm comm, MPI_Group g, MPI_Comm *n), comm)
UNSUPPORTED(MPI_Group_incl, (MPI_Group g, int n, const int r[], MPI_Group *o), NULL)
UNSUPPORTED(MPI_Group_free, (MPI_Group *g), NULL)
UNSUPPORTED(MPI_Cart_create, (MPI_Comm comm, int n, const int d[], const int p[], int r,
                              MPI_Comm *c), comm)
UNSUPPORTED(MPI_Dims_create, (int n, int d, int dims[]), NULL)
UNSUPPORTED(MPI_Ibarrier, (MPI_Comm comm, MPI_Request *r), comm)
UNSUPPORTED(MPI_Ibcast, (void *b, int c, MPI_Datatype t, int root, MPI_Comm comm,
                         MPI_Request *r), comm)
UNSUPPORTED(MPI_Iallreduce, (const void *s, void *r, int c, MPI_Datatype t, MPI_Op o,
                             MPI_Comm comm, MPI_Request *q), comm)
