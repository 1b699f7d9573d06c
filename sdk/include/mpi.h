/*
 * mpi.h - MPI for atoll guests (libatollmpi.a; build with sdk/bin/atoll-mpicc).
 *
 * The library lives inside the process: queues, requests, communicators and
 * unexpected messages are in linear memory, so they migrate with the rank.
 * The runtime provides only atoll's IPC (messages, notify, grants, copies);
 * docs/mpi.md says how the protocol is built on it.
 *
 * The subset implemented is listed in docs/mpi.md. The functions declared
 * at the end under "Not supported" exist so that a program using them
 * builds; each reports "MPI_Xxx is not supported by atoll's MPI" and fails
 * with MPI_ERR_OTHER through the communicator's error handler, never with a
 * silent wrong answer.
 */
#ifndef ATOLL_MPI_H
#define ATOLL_MPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPI_VERSION 3
#define MPI_SUBVERSION 1

/* ------------------------------------------------------------ handles */

typedef struct atoll_mpi_comm *MPI_Comm;
typedef struct atoll_mpi_type *MPI_Datatype;
typedef struct atoll_mpi_op *MPI_Op;
typedef struct atoll_mpi_request *MPI_Request;
typedef struct atoll_mpi_errhandler *MPI_Errhandler;
typedef struct atoll_mpi_group *MPI_Group;
typedef struct atoll_mpi_info *MPI_Info;
typedef intptr_t MPI_Aint;
typedef int64_t MPI_Offset;
typedef int64_t MPI_Count;

typedef struct {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    /* Private: the message's length in bytes. */
    int atoll_bytes;
    int atoll_cancelled;
} MPI_Status;

typedef void(MPI_User_function)(void *invec, void *inoutvec, int *len, MPI_Datatype *type);

extern struct atoll_mpi_comm atoll_mpi_comm_world, atoll_mpi_comm_self;
#define MPI_COMM_WORLD (&atoll_mpi_comm_world)
#define MPI_COMM_SELF (&atoll_mpi_comm_self)
#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_GROUP_NULL ((MPI_Group)0)
#define MPI_INFO_NULL ((MPI_Info)0)
#define MPI_ERRHANDLER_NULL ((MPI_Errhandler)0)

extern struct atoll_mpi_errhandler atoll_mpi_errors_are_fatal, atoll_mpi_errors_return;
#define MPI_ERRORS_ARE_FATAL (&atoll_mpi_errors_are_fatal)
#define MPI_ERRORS_RETURN (&atoll_mpi_errors_return)

/* Predefined datatypes. */
#define ATOLL_MPI_TYPES_(X)                                                   \
    X(MPI_CHAR, char) X(MPI_SIGNED_CHAR, signed_char)                         \
    X(MPI_UNSIGNED_CHAR, unsigned_char) X(MPI_BYTE, byte)                     \
    X(MPI_SHORT, short) X(MPI_UNSIGNED_SHORT, unsigned_short)                 \
    X(MPI_INT, int) X(MPI_UNSIGNED, unsigned) X(MPI_LONG, long)               \
    X(MPI_UNSIGNED_LONG, unsigned_long) X(MPI_LONG_LONG_INT, long_long_int)   \
    X(MPI_UNSIGNED_LONG_LONG, unsigned_long_long) X(MPI_FLOAT, float)         \
    X(MPI_DOUBLE, double) X(MPI_LONG_DOUBLE, long_double)                     \
    X(MPI_WCHAR, wchar) X(MPI_C_BOOL, c_bool) X(MPI_INT8_T, int8_t)           \
    X(MPI_INT16_T, int16_t) X(MPI_INT32_T, int32_t) X(MPI_INT64_T, int64_t)   \
    X(MPI_UINT8_T, uint8_t) X(MPI_UINT16_T, uint16_t)                         \
    X(MPI_UINT32_T, uint32_t) X(MPI_UINT64_T, uint64_t) X(MPI_AINT, aint)     \
    X(MPI_OFFSET, offset) X(MPI_COUNT, count) X(MPI_PACKED, packed)           \
    X(MPI_FLOAT_INT, float_int) X(MPI_DOUBLE_INT, double_int)                 \
    X(MPI_LONG_INT, long_int) X(MPI_2INT, 2int) X(MPI_SHORT_INT, short_int)   \
    X(MPI_LONG_DOUBLE_INT, long_double_int)

#define ATOLL_MPI_DECLARE_TYPE_(name, id) extern struct atoll_mpi_type atoll_mpi_type_##id;
ATOLL_MPI_TYPES_(ATOLL_MPI_DECLARE_TYPE_)
#undef ATOLL_MPI_DECLARE_TYPE_

#define MPI_CHAR (&atoll_mpi_type_char)
#define MPI_SIGNED_CHAR (&atoll_mpi_type_signed_char)
#define MPI_UNSIGNED_CHAR (&atoll_mpi_type_unsigned_char)
#define MPI_BYTE (&atoll_mpi_type_byte)
#define MPI_SHORT (&atoll_mpi_type_short)
#define MPI_UNSIGNED_SHORT (&atoll_mpi_type_unsigned_short)
#define MPI_INT (&atoll_mpi_type_int)
#define MPI_UNSIGNED (&atoll_mpi_type_unsigned)
#define MPI_LONG (&atoll_mpi_type_long)
#define MPI_UNSIGNED_LONG (&atoll_mpi_type_unsigned_long)
#define MPI_LONG_LONG_INT (&atoll_mpi_type_long_long_int)
#define MPI_LONG_LONG MPI_LONG_LONG_INT
#define MPI_UNSIGNED_LONG_LONG (&atoll_mpi_type_unsigned_long_long)
#define MPI_FLOAT (&atoll_mpi_type_float)
#define MPI_DOUBLE (&atoll_mpi_type_double)
#define MPI_LONG_DOUBLE (&atoll_mpi_type_long_double)
#define MPI_WCHAR (&atoll_mpi_type_wchar)
#define MPI_C_BOOL (&atoll_mpi_type_c_bool)
#define MPI_INT8_T (&atoll_mpi_type_int8_t)
#define MPI_INT16_T (&atoll_mpi_type_int16_t)
#define MPI_INT32_T (&atoll_mpi_type_int32_t)
#define MPI_INT64_T (&atoll_mpi_type_int64_t)
#define MPI_UINT8_T (&atoll_mpi_type_uint8_t)
#define MPI_UINT16_T (&atoll_mpi_type_uint16_t)
#define MPI_UINT32_T (&atoll_mpi_type_uint32_t)
#define MPI_UINT64_T (&atoll_mpi_type_uint64_t)
#define MPI_AINT (&atoll_mpi_type_aint)
#define MPI_OFFSET (&atoll_mpi_type_offset)
#define MPI_COUNT (&atoll_mpi_type_count)
#define MPI_PACKED (&atoll_mpi_type_packed)
#define MPI_FLOAT_INT (&atoll_mpi_type_float_int)
#define MPI_DOUBLE_INT (&atoll_mpi_type_double_int)
#define MPI_LONG_INT (&atoll_mpi_type_long_int)
#define MPI_2INT (&atoll_mpi_type_2int)
#define MPI_SHORT_INT (&atoll_mpi_type_short_int)
#define MPI_LONG_DOUBLE_INT (&atoll_mpi_type_long_double_int)

/* Predefined operations. */
extern struct atoll_mpi_op atoll_mpi_op_max, atoll_mpi_op_min, atoll_mpi_op_sum,
    atoll_mpi_op_prod, atoll_mpi_op_land, atoll_mpi_op_band, atoll_mpi_op_lor,
    atoll_mpi_op_bor, atoll_mpi_op_lxor, atoll_mpi_op_bxor, atoll_mpi_op_maxloc,
    atoll_mpi_op_minloc, atoll_mpi_op_replace, atoll_mpi_op_no_op;
#define MPI_MAX (&atoll_mpi_op_max)
#define MPI_MIN (&atoll_mpi_op_min)
#define MPI_SUM (&atoll_mpi_op_sum)
#define MPI_PROD (&atoll_mpi_op_prod)
#define MPI_LAND (&atoll_mpi_op_land)
#define MPI_BAND (&atoll_mpi_op_band)
#define MPI_LOR (&atoll_mpi_op_lor)
#define MPI_BOR (&atoll_mpi_op_bor)
#define MPI_LXOR (&atoll_mpi_op_lxor)
#define MPI_BXOR (&atoll_mpi_op_bxor)
#define MPI_MAXLOC (&atoll_mpi_op_maxloc)
#define MPI_MINLOC (&atoll_mpi_op_minloc)
#define MPI_REPLACE (&atoll_mpi_op_replace)
#define MPI_NO_OP (&atoll_mpi_op_no_op)

/* ---------------------------------------------------------- constants */

#define MPI_ANY_SOURCE (-1)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-2)
#define MPI_ROOT (-3)
#define MPI_UNDEFINED (-32766)
#define MPI_TAG_UB_VALUE 0x7fffffff
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_ERROR_STRING 256
#define MPI_MAX_OBJECT_NAME 64
#define MPI_BOTTOM ((void *)0)
#define MPI_IN_PLACE ((void *)1)
#define MPI_STATUS_IGNORE ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)

#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

#define MPI_IDENT 0
#define MPI_CONGRUENT 1
#define MPI_SIMILAR 2
#define MPI_UNEQUAL 3

/* Error classes. */
#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_REQUEST 7
#define MPI_ERR_ROOT 8
#define MPI_ERR_GROUP 9
#define MPI_ERR_OP 10
#define MPI_ERR_TOPOLOGY 11
#define MPI_ERR_DIMS 12
#define MPI_ERR_ARG 13
#define MPI_ERR_UNKNOWN 14
#define MPI_ERR_TRUNCATE 15
#define MPI_ERR_OTHER 16
#define MPI_ERR_INTERN 17
#define MPI_ERR_IN_STATUS 18
#define MPI_ERR_PENDING 19
#define MPI_ERR_NO_MEM 20
#define MPI_ERR_LASTCODE 20

/* -------------------------------------------------------------- calls */

int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalize(void);
int MPI_Finalized(int *flag);
int MPI_Query_thread(int *provided);
int MPI_Abort(MPI_Comm comm, int errorcode);
double MPI_Wtime(void);
double MPI_Wtick(void);
int MPI_Get_processor_name(char *name, int *resultlen);
int MPI_Get_version(int *version, int *subversion);
int MPI_Error_string(int errorcode, char *string, int *resultlen);
int MPI_Error_class(int errorcode, int *errorclass);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler);

int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_compare(MPI_Comm comm1, MPI_Comm comm2, int *result);

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
int MPI_Ssend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Issend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]);
int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status);
int MPI_Request_free(MPI_Request *request);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                 int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype type, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype type, int *count);

int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype type, MPI_Op op, MPI_Comm comm);
int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
             MPI_Comm comm);

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype);
int MPI_Type_commit(MPI_Datatype *type);
int MPI_Type_free(MPI_Datatype *type);
int MPI_Type_size(MPI_Datatype type, int *size);
int MPI_Type_get_extent(MPI_Datatype type, MPI_Aint *lb, MPI_Aint *extent);
int MPI_Get_address(const void *location, MPI_Aint *address);
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype);
int MPI_Type_indexed(int count, const int blocklengths[], const int displacements[],
                     MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_create_struct(int count, const int blocklengths[], const MPI_Aint displacements[],
                           const MPI_Datatype types[], MPI_Datatype *newtype);
int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype);
/* MPI-1's names, removed in MPI-3 but still called by HPL and older codes. */
int MPI_Type_struct(int count, int blocklengths[], MPI_Aint displacements[],
                    MPI_Datatype types[], MPI_Datatype *newtype);
int MPI_Address(void *location, MPI_Aint *address);
int MPI_Op_create(MPI_User_function *function, int commute, MPI_Op *op);
int MPI_Op_free(MPI_Op *op);

/* Not supported: each fails with MPI_ERR_OTHER and a message naming it. */
int MPI_Bsend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
int MPI_Rsend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm);
int MPI_Ibsend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Irsend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
               MPI_Request *request);
int MPI_Send_init(const void *buf, int count, MPI_Datatype type, int dest, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Recv_init(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Request *request);
int MPI_Start(MPI_Request *request);
int MPI_Startall(int count, MPI_Request requests[]);
int MPI_Cancel(MPI_Request *request);
int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[]);
int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[]);
int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               MPI_Comm comm);
int MPI_Pack(const void *inbuf, int incount, MPI_Datatype type, void *outbuf, int outsize,
             int *position, MPI_Comm comm);
int MPI_Unpack(const void *inbuf, int insize, int *position, void *outbuf, int outcount,
               MPI_Datatype type, MPI_Comm comm);
int MPI_Comm_group(MPI_Comm comm, MPI_Group *group);
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm);
int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *newgroup);
int MPI_Group_free(MPI_Group *group);
int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *comm_cart);
int MPI_Dims_create(int nnodes, int ndims, int dims[]);
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request);
int MPI_Ibcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
               MPI_Request *request);
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                   MPI_Comm comm, MPI_Request *request);

#ifdef __cplusplus
}
#endif

#endif /* ATOLL_MPI_H */
