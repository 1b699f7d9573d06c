/*
 * type.c - datatypes (predefined, contiguous, vector), packing, and the
 * reduction operations.
 *
 * A derived datatype is kept flat: the byte blocks of one element in
 * order, merged where they touch. Non-contiguous data is packed into
 * contiguous bytes before it is sent and unpacked after it is received.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "impl.h"

struct float_int { float v; int i; };
struct double_int { double v; int i; };
struct long_int { long v; int i; };
struct two_int { int v; int i; };
struct short_int { short v; int i; };
struct ldouble_int { long double v; int i; };

#define PREDEFINED(id, mpi_name, ctype, kind)                                              \
    struct atoll_mpi_type atoll_mpi_type_##id = {                                          \
        .magic = MAGIC_TYPE, .name = mpi_name, .size = sizeof(ctype),                      \
        .extent = sizeof(ctype), .basic = kind, .basic_size = sizeof(ctype),               \
        .contiguous = true, .committed = true, .predefined = true,                         \
    };

PREDEFINED(char, "MPI_CHAR", char, B_CHAR)
PREDEFINED(signed_char, "MPI_SIGNED_CHAR", signed char, B_SCHAR)
PREDEFINED(unsigned_char, "MPI_UNSIGNED_CHAR", unsigned char, B_UCHAR)
PREDEFINED(byte, "MPI_BYTE", unsigned char, B_BYTE)
PREDEFINED(short, "MPI_SHORT", short, B_SHORT)
PREDEFINED(unsigned_short, "MPI_UNSIGNED_SHORT", unsigned short, B_USHORT)
PREDEFINED(int, "MPI_INT", int, B_INT)
PREDEFINED(unsigned, "MPI_UNSIGNED", unsigned, B_UINT)
PREDEFINED(long, "MPI_LONG", long, B_LONG)
PREDEFINED(unsigned_long, "MPI_UNSIGNED_LONG", unsigned long, B_ULONG)
PREDEFINED(long_long_int, "MPI_LONG_LONG_INT", long long, B_LL)
PREDEFINED(unsigned_long_long, "MPI_UNSIGNED_LONG_LONG", unsigned long long, B_ULL)
PREDEFINED(float, "MPI_FLOAT", float, B_FLOAT)
PREDEFINED(double, "MPI_DOUBLE", double, B_DOUBLE)
PREDEFINED(long_double, "MPI_LONG_DOUBLE", long double, B_LDOUBLE)
PREDEFINED(wchar, "MPI_WCHAR", wchar_t, B_WCHAR)
PREDEFINED(c_bool, "MPI_C_BOOL", _Bool, B_BOOL)
PREDEFINED(int8_t, "MPI_INT8_T", int8_t, B_I8)
PREDEFINED(int16_t, "MPI_INT16_T", int16_t, B_I16)
PREDEFINED(int32_t, "MPI_INT32_T", int32_t, B_I32)
PREDEFINED(int64_t, "MPI_INT64_T", int64_t, B_I64)
PREDEFINED(uint8_t, "MPI_UINT8_T", uint8_t, B_U8)
PREDEFINED(uint16_t, "MPI_UINT16_T", uint16_t, B_U16)
PREDEFINED(uint32_t, "MPI_UINT32_T", uint32_t, B_U32)
PREDEFINED(uint64_t, "MPI_UINT64_T", uint64_t, B_U64)
PREDEFINED(aint, "MPI_AINT", MPI_Aint, B_AINT)
PREDEFINED(offset, "MPI_OFFSET", MPI_Offset, B_OFFSET)
PREDEFINED(count, "MPI_COUNT", MPI_Count, B_COUNT)
PREDEFINED(packed, "MPI_PACKED", unsigned char, B_PACKED)
PREDEFINED(float_int, "MPI_FLOAT_INT", struct float_int, B_FLOAT_INT)
PREDEFINED(double_int, "MPI_DOUBLE_INT", struct double_int, B_DOUBLE_INT)
PREDEFINED(long_int, "MPI_LONG_INT", struct long_int, B_LONG_INT)
PREDEFINED(2int, "MPI_2INT", struct two_int, B_2INT)
PREDEFINED(short_int, "MPI_SHORT_INT", struct short_int, B_SHORT_INT)
PREDEFINED(long_double_int, "MPI_LONG_DOUBLE_INT", struct ldouble_int, B_LDOUBLE_INT)

int mpi_check_type(MPI_Datatype t)
{
    return t != NULL && t->magic == MAGIC_TYPE && t->committed ? MPI_SUCCESS : MPI_ERR_TYPE;
}

size_t mpi_type_bytes(MPI_Datatype t, int count)
{
    return (size_t)t->size * (size_t)count;
}

/* The blocks of one element: its own list, or [0, size) when contiguous. */
static const struct block *blocks_of(MPI_Datatype t, int *n, struct block *one)
{
    if (t->contiguous) {
        one->off = 0;
        one->len = t->size;
        *n = 1;
        return one;
    }
    *n = t->nblocks;
    return t->blocks;
}

void mpi_pack(const void *buf, int count, MPI_Datatype t, void *out)
{
    if (t->contiguous) {
        memcpy(out, buf, mpi_type_bytes(t, count));
        return;
    }
    unsigned char *o = out;
    for (int i = 0; i < count; i++) {
        const unsigned char *e = (const unsigned char *)buf + (MPI_Aint)i * t->extent;
        for (int b = 0; b < t->nblocks; b++) {
            memcpy(o, e + t->blocks[b].off, (size_t)t->blocks[b].len);
            o += t->blocks[b].len;
        }
    }
}

void mpi_unpack(const void *in, size_t bytes, void *buf, int count, MPI_Datatype t)
{
    if (t->contiguous) {
        memcpy(buf, in, bytes);
        return;
    }
    const unsigned char *p = in;
    const unsigned char *end = p + bytes;
    for (int i = 0; i < count && p < end; i++) {
        unsigned char *e = (unsigned char *)buf + (MPI_Aint)i * t->extent;
        for (int b = 0; b < t->nblocks && p < end; b++) {
            size_t n = (size_t)t->blocks[b].len;
            if (n > (size_t)(end - p))
                n = (size_t)(end - p);
            memcpy(e + t->blocks[b].off, p, n);
            p += n;
        }
    }
}

/* ------------------------------------------------------ derived types */

/* A new type of `reps` copies of old's blocks, copy k at offset at[k]. */
static int derive(MPI_Datatype old, int reps, const MPI_Aint *at, MPI_Aint extent,
                  MPI_Datatype *newtype, const char *call)
{
    struct block one;
    int nb;
    const struct block *ob = blocks_of(old, &nb, &one);
    struct block *blocks = malloc(sizeof *blocks * ((size_t)reps * (size_t)nb + 1));
    struct atoll_mpi_type *t = malloc(sizeof *t);
    if (blocks == NULL || t == NULL) {
        free(blocks);
        free(t);
        return mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory");
    }
    int n = 0;
    for (int k = 0; k < reps; k++) {
        for (int b = 0; b < nb; b++) {
            MPI_Aint off = at[k] + ob[b].off;
            if (n > 0 && blocks[n - 1].off + blocks[n - 1].len == off) {
                blocks[n - 1].len += ob[b].len;
            } else {
                blocks[n].off = off;
                blocks[n].len = ob[b].len;
                n++;
            }
        }
    }
    *t = (struct atoll_mpi_type){
        .magic = MAGIC_TYPE,
        .name = "derived",
        .size = old->size * reps,
        .extent = extent,
        .basic = old->basic,
        .basic_size = old->basic_size,
        .nblocks = n,
        .blocks = blocks,
    };
    t->contiguous = n == 0 || (n == 1 && blocks[0].off == 0 && blocks[0].len == extent);
    *newtype = t;
    return MPI_SUCCESS;
}

static int check_old(MPI_Datatype old, MPI_Datatype *newtype, const char *call)
{
    if (old == NULL || old->magic != MAGIC_TYPE)
        return mpi_error(NULL, MPI_ERR_TYPE, call, "invalid datatype");
    if (newtype == NULL)
        return mpi_error(NULL, MPI_ERR_ARG, call, "newtype is NULL");
    return MPI_SUCCESS;
}

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_contiguous";
    int err = check_old(oldtype, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    if (count < 0)
        return mpi_error(NULL, MPI_ERR_COUNT, call, "negative count %d", count);
    MPI_Aint *at = malloc(sizeof *at * ((size_t)count + 1));
    if (at == NULL)
        return mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory");
    for (int k = 0; k < count; k++)
        at[k] = (MPI_Aint)k * oldtype->extent;
    err = derive(oldtype, count, at, (MPI_Aint)count * oldtype->extent, newtype, call);
    free(at);
    return err;
}

int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_vector";
    int err = check_old(oldtype, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    if (count < 0 || blocklength < 0)
        return mpi_error(NULL, MPI_ERR_COUNT, call, "negative count or blocklength");
    if (stride < 0)
        return mpi_error(NULL, MPI_ERR_ARG, call,
                         "negative stride %d is not supported by atoll's MPI", stride);
    size_t reps = (size_t)count * (size_t)blocklength;
    MPI_Aint *at = malloc(sizeof *at * (reps + 1));
    if (at == NULL)
        return mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory");
    size_t k = 0;
    for (int i = 0; i < count; i++)
        for (int j = 0; j < blocklength; j++)
            at[k++] = ((MPI_Aint)i * stride + j) * oldtype->extent;
    MPI_Aint extent =
        count == 0 ? 0 : ((MPI_Aint)(count - 1) * stride + blocklength) * oldtype->extent;
    err = derive(oldtype, (int)reps, at, extent, newtype, call);
    free(at);
    return err;
}

int MPI_Type_commit(MPI_Datatype *type)
{
    if (type == NULL || *type == NULL || (*type)->magic != MAGIC_TYPE)
        return mpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_commit", "invalid datatype");
    (*type)->committed = true;
    return MPI_SUCCESS;
}

int MPI_Type_free(MPI_Datatype *type)
{
    if (type == NULL || *type == NULL || (*type)->magic != MAGIC_TYPE)
        return mpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_free", "invalid datatype");
    if ((*type)->predefined)
        return mpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_free", "%s is predefined",
                         (*type)->name);
    (*type)->magic = 0;
    free((*type)->blocks);
    free(*type);
    *type = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
}

int MPI_Type_size(MPI_Datatype type, int *size)
{
    if (type == NULL || type->magic != MAGIC_TYPE || size == NULL)
        return mpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_size", "invalid datatype");
    *size = type->size;
    return MPI_SUCCESS;
}

int MPI_Type_get_extent(MPI_Datatype type, MPI_Aint *lb, MPI_Aint *extent)
{
    if (type == NULL || type->magic != MAGIC_TYPE || lb == NULL || extent == NULL)
        return mpi_error(NULL, MPI_ERR_TYPE, "MPI_Type_get_extent", "invalid datatype");
    *lb = 0;
    *extent = type->extent;
    return MPI_SUCCESS;
}

int MPI_Get_address(const void *location, MPI_Aint *address)
{
    *address = (MPI_Aint)(uintptr_t)location;
    return MPI_SUCCESS;
}

/* ------------------------------------------------------------ operations */

#define OP(id, mpi_name, kind)                                                             \
    struct atoll_mpi_op atoll_mpi_op_##id = {                                              \
        .magic = MAGIC_OP, .name = mpi_name, .which = kind, .commute = true};

OP(max, "MPI_MAX", OP_MAX)
OP(min, "MPI_MIN", OP_MIN)
OP(sum, "MPI_SUM", OP_SUM)
OP(prod, "MPI_PROD", OP_PROD)
OP(land, "MPI_LAND", OP_LAND)
OP(band, "MPI_BAND", OP_BAND)
OP(lor, "MPI_LOR", OP_LOR)
OP(bor, "MPI_BOR", OP_BOR)
OP(lxor, "MPI_LXOR", OP_LXOR)
OP(bxor, "MPI_BXOR", OP_BXOR)
OP(maxloc, "MPI_MAXLOC", OP_MAXLOC)
OP(minloc, "MPI_MINLOC", OP_MINLOC)
OP(replace, "MPI_REPLACE", OP_REPLACE)
OP(no_op, "MPI_NO_OP", OP_NO_OP)

int MPI_Op_create(MPI_User_function *function, int commute, MPI_Op *op)
{
    if (function == NULL || op == NULL)
        return mpi_error(NULL, MPI_ERR_ARG, "MPI_Op_create", "function or op is NULL");
    struct atoll_mpi_op *o = mpi_alloc(sizeof *o);
    *o = (struct atoll_mpi_op){
        .magic = MAGIC_OP, .name = "user", .which = OP_USER, .user = function,
        .commute = commute != 0};
    *op = o;
    return MPI_SUCCESS;
}

int MPI_Op_free(MPI_Op *op)
{
    if (op == NULL || *op == NULL || (*op)->magic != MAGIC_OP || (*op)->which != OP_USER)
        return mpi_error(NULL, MPI_ERR_OP, "MPI_Op_free", "invalid or predefined operation");
    (*op)->magic = 0;
    free(*op);
    *op = MPI_OP_NULL;
    return MPI_SUCCESS;
}

enum family { F_NONE, F_INT, F_FLOAT, F_BYTE, F_PAIR };

static enum family family_of(enum basic b)
{
    switch (b) {
    case B_CHAR: case B_SCHAR: case B_UCHAR: case B_SHORT: case B_USHORT: case B_INT:
    case B_UINT: case B_LONG: case B_ULONG: case B_LL: case B_ULL: case B_WCHAR:
    case B_BOOL: case B_I8: case B_I16: case B_I32: case B_I64: case B_U8: case B_U16:
    case B_U32: case B_U64: case B_AINT: case B_OFFSET: case B_COUNT:
        return F_INT;
    case B_FLOAT: case B_DOUBLE: case B_LDOUBLE:
        return F_FLOAT;
    case B_BYTE: case B_PACKED:
        return F_BYTE;
    case B_FLOAT_INT: case B_DOUBLE_INT: case B_LONG_INT: case B_2INT: case B_SHORT_INT:
    case B_LDOUBLE_INT:
        return F_PAIR;
    default:
        return F_NONE;
    }
}

int mpi_check_op(MPI_Op op, MPI_Datatype t)
{
    if (op == NULL || op->magic != MAGIC_OP)
        return MPI_ERR_OP;
    /* A user function is handed the data packed: only right for a
     * contiguous type. */
    if (op->which == OP_USER)
        return t->contiguous ? MPI_SUCCESS : MPI_ERR_OP;
    if (op->which == OP_REPLACE || op->which == OP_NO_OP)
        return MPI_SUCCESS;
    enum family f = family_of(t->basic);
    switch (op->which) {
    case OP_MAX: case OP_MIN: case OP_SUM: case OP_PROD:
        return f == F_INT || f == F_FLOAT ? MPI_SUCCESS : MPI_ERR_OP;
    case OP_LAND: case OP_LOR: case OP_LXOR:
        return f == F_INT ? MPI_SUCCESS : MPI_ERR_OP;
    case OP_BAND: case OP_BOR: case OP_BXOR:
        return f == F_INT || f == F_BYTE ? MPI_SUCCESS : MPI_ERR_OP;
    case OP_MAXLOC: case OP_MINLOC:
        return f == F_PAIR ? MPI_SUCCESS : MPI_ERR_OP;
    default:
        return MPI_ERR_OP;
    }
}

#define ARITH(T)                                                                           \
    do {                                                                                   \
        const T *a = in;                                                                   \
        T *b = inout;                                                                      \
        for (size_t i = 0; i < n; i++) {                                                   \
            switch (which) {                                                               \
            case OP_MAX: b[i] = a[i] > b[i] ? a[i] : b[i]; break;                          \
            case OP_MIN: b[i] = a[i] < b[i] ? a[i] : b[i]; break;                          \
            case OP_SUM: b[i] = a[i] + b[i]; break;                                        \
            case OP_PROD: b[i] = a[i] * b[i]; break;                                       \
            case OP_LAND: b[i] = (a[i] != 0) && (b[i] != 0); break;                        \
            case OP_LOR: b[i] = (a[i] != 0) || (b[i] != 0); break;                         \
            case OP_LXOR: b[i] = (a[i] != 0) != (b[i] != 0); break;                        \
            }                                                                              \
        }                                                                                  \
    } while (0)

#define BITS(T)                                                                            \
    do {                                                                                   \
        const T *a = in;                                                                   \
        T *b = inout;                                                                      \
        for (size_t i = 0; i < n; i++) {                                                   \
            switch (which) {                                                               \
            case OP_BAND: b[i] = a[i] & b[i]; break;                                       \
            case OP_BOR: b[i] = a[i] | b[i]; break;                                        \
            case OP_BXOR: b[i] = a[i] ^ b[i]; break;                                       \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* MAXLOC/MINLOC: the better value, and the smaller index on a tie. */
#define LOC(T)                                                                             \
    do {                                                                                   \
        const T *a = in;                                                                   \
        T *b = inout;                                                                      \
        for (size_t i = 0; i < n; i++) {                                                   \
            bool better = which == OP_MAXLOC ? a[i].v > b[i].v : a[i].v < b[i].v;          \
            if (better || (a[i].v == b[i].v && a[i].i < b[i].i))                           \
                b[i] = a[i];                                                               \
        }                                                                                  \
    } while (0)

#define INT_CASES(X)                                                                       \
    case B_CHAR: X(char); break;                                                           \
    case B_SCHAR: X(signed char); break;                                                   \
    case B_UCHAR: X(unsigned char); break;                                                 \
    case B_SHORT: X(short); break;                                                         \
    case B_USHORT: X(unsigned short); break;                                               \
    case B_INT: X(int); break;                                                             \
    case B_UINT: X(unsigned); break;                                                       \
    case B_LONG: X(long); break;                                                           \
    case B_ULONG: X(unsigned long); break;                                                 \
    case B_LL: X(long long); break;                                                        \
    case B_ULL: X(unsigned long long); break;                                              \
    case B_WCHAR: X(wchar_t); break;                                                       \
    case B_BOOL: X(_Bool); break;                                                          \
    case B_I8: X(int8_t); break;                                                           \
    case B_I16: X(int16_t); break;                                                         \
    case B_I32: X(int32_t); break;                                                         \
    case B_I64: X(int64_t); break;                                                         \
    case B_U8: X(uint8_t); break;                                                          \
    case B_U16: X(uint16_t); break;                                                        \
    case B_U32: X(uint32_t); break;                                                        \
    case B_U64: X(uint64_t); break;                                                        \
    case B_AINT: X(MPI_Aint); break;                                                       \
    case B_OFFSET: X(MPI_Offset); break;                                                   \
    case B_COUNT: X(MPI_Count); break;

int mpi_reduce_local(const void *in, void *inout, int count, MPI_Datatype t, MPI_Op op)
{
    int which = op->which;
    if (which == OP_NO_OP)
        return MPI_SUCCESS;
    if (which == OP_REPLACE) {
        memcpy(inout, in, mpi_type_bytes(t, count));
        return MPI_SUCCESS;
    }
    if (which == OP_USER) {
        /* Contiguous bytes of count elements: the user function sees the
         * type it was called with only when that type is contiguous. */
        int len = count;
        MPI_Datatype type = t;
        op->user((void *)in, inout, &len, &type);
        return MPI_SUCCESS;
    }
    size_t n = t->basic_size > 0 ? mpi_type_bytes(t, count) / (size_t)t->basic_size : 0;
    switch (which) {
    case OP_BAND: case OP_BOR: case OP_BXOR:
        switch (t->basic) {
        INT_CASES(BITS)
        case B_BYTE: case B_PACKED: BITS(unsigned char); break;
        default: return MPI_ERR_OP;
        }
        return MPI_SUCCESS;
    case OP_MAXLOC: case OP_MINLOC:
        switch (t->basic) {
        case B_FLOAT_INT: LOC(struct float_int); break;
        case B_DOUBLE_INT: LOC(struct double_int); break;
        case B_LONG_INT: LOC(struct long_int); break;
        case B_2INT: LOC(struct two_int); break;
        case B_SHORT_INT: LOC(struct short_int); break;
        case B_LDOUBLE_INT: LOC(struct ldouble_int); break;
        default: return MPI_ERR_OP;
        }
        return MPI_SUCCESS;
    default:
        switch (t->basic) {
        INT_CASES(ARITH)
        case B_FLOAT: ARITH(float); break;
        case B_DOUBLE: ARITH(double); break;
        case B_LDOUBLE: ARITH(long double); break;
        default: return MPI_ERR_OP;
        }
        return MPI_SUCCESS;
    }
}
