/*
 * type.c - datatypes (predefined; contiguous, vector, hvector, indexed,
 * struct and resized), packing, and the reduction operations.
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
        .extent = sizeof(ctype), .align = _Alignof(ctype), .basic = kind,                  \
        .basic_size = sizeof(ctype), .contiguous = true, .committed = true,                \
        .predefined = true,                                                                \
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

/* One copy of an old type inside a new one, at byte offset `at`. */
struct part {
    MPI_Datatype type;
    MPI_Aint at;
};

/*
 * The type made of `n` parts in typemap order: their blocks (merged where
 * they touch), their total size, the one basic kind they share (or
 * B_NONE), and lb/extent from the lowest and highest byte they span, as
 * MPI defines them for every constructor but struct's padding.
 */
static int derive(int n, const struct part *parts, MPI_Datatype *newtype, const char *call)
{
    size_t total = 0;
    for (int p = 0; p < n; p++)
        total += parts[p].type->contiguous ? 1 : (size_t)parts[p].type->nblocks;
    struct block *blocks = malloc(sizeof *blocks * (total + 1));
    struct atoll_mpi_type *t = malloc(sizeof *t);
    if (blocks == NULL || t == NULL) {
        free(blocks);
        free(t);
        return mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory");
    }
    *t = (struct atoll_mpi_type){
        .magic = MAGIC_TYPE,
        .name = "derived",
        .align = 1,
        .basic = n > 0 ? parts[0].type->basic : B_NONE,
        .basic_size = n > 0 ? parts[0].type->basic_size : 0,
        .blocks = blocks,
    };
    MPI_Aint lb = 0, ub = 0;
    int nb = 0;
    for (int p = 0; p < n; p++) {
        MPI_Datatype old = parts[p].type;
        struct block one;
        int count;
        const struct block *ob = blocks_of(old, &count, &one);
        for (int b = 0; b < count; b++) {
            MPI_Aint off = parts[p].at + ob[b].off;
            if (nb > 0 && blocks[nb - 1].off + blocks[nb - 1].len == off) {
                blocks[nb - 1].len += ob[b].len;
            } else {
                blocks[nb].off = off;
                blocks[nb].len = ob[b].len;
                nb++;
            }
        }
        MPI_Aint lo = parts[p].at + old->lb, hi = lo + old->extent;
        lb = p == 0 || lo < lb ? lo : lb;
        ub = p == 0 || hi > ub ? hi : ub;
        t->size += old->size;
        if (old->align > t->align)
            t->align = old->align;
        if (old->basic != t->basic)
            t->basic = B_NONE;
    }
    t->nblocks = nb;
    t->lb = lb;
    t->extent = ub - lb;
    t->contiguous = nb == 0 || (nb == 1 && blocks[0].off == 0 && lb == 0 &&
                                blocks[0].len == t->extent);
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

static struct part *alloc_parts(size_t n, const char *call, int *err)
{
    struct part *parts = malloc(sizeof *parts * (n + 1));
    *err = parts == NULL ? mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory") : MPI_SUCCESS;
    return parts;
}

/* `count` blocks of `blocklength` olds, block i starting `stride` bytes after block i-1. */
static int strided(int count, int blocklength, MPI_Aint stride, MPI_Datatype old,
                   MPI_Datatype *newtype, const char *call)
{
    int err = check_old(old, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    if (count < 0 || blocklength < 0)
        return mpi_error(NULL, MPI_ERR_COUNT, call, "negative count or blocklength");
    struct part *parts = alloc_parts((size_t)count * (size_t)blocklength, call, &err);
    if (parts == NULL)
        return err;
    int n = 0;
    for (int i = 0; i < count; i++)
        for (int j = 0; j < blocklength; j++)
            parts[n++] = (struct part){old, (MPI_Aint)i * stride + (MPI_Aint)j * old->extent};
    err = derive(n, parts, newtype, call);
    free(parts);
    return err;
}

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    return strided(1, count, 0, oldtype, newtype, "MPI_Type_contiguous");
}

int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_vector";
    int err = check_old(oldtype, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    return strided(count, blocklength, (MPI_Aint)stride * oldtype->extent, oldtype, newtype,
                   call);
}

int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype)
{
    return strided(count, blocklength, stride, oldtype, newtype, "MPI_Type_create_hvector");
}

/*
 * The type of `count` blocks, block i being lens[i] copies of its type
 * (types[i], or `one` for every block) from byte byte_at[i] on.
 */
static int from_blocks(int count, const int lens[], const MPI_Aint byte_at[],
                       const MPI_Datatype types[], MPI_Datatype one, MPI_Datatype *newtype,
                       const char *call)
{
    size_t total = 0;
    for (int i = 0; i < count; i++) {
        int err = check_old(types != NULL ? types[i] : one, newtype, call);
        if (err != MPI_SUCCESS)
            return err;
        if (lens[i] < 0)
            return mpi_error(NULL, MPI_ERR_COUNT, call, "negative blocklength %d", lens[i]);
        total += (size_t)lens[i];
    }
    int err;
    struct part *parts = alloc_parts(total, call, &err);
    if (parts == NULL)
        return err;
    int n = 0;
    for (int i = 0; i < count; i++) {
        MPI_Datatype t = types != NULL ? types[i] : one;
        for (int j = 0; j < lens[i]; j++)
            parts[n++] = (struct part){t, byte_at[i] + (MPI_Aint)j * t->extent};
    }
    err = derive(n, parts, newtype, call);
    free(parts);
    return err;
}

int MPI_Type_indexed(int count, const int blocklengths[], const int displacements[],
                     MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_indexed";
    int err = check_old(oldtype, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    if (count < 0 || (count > 0 && (blocklengths == NULL || displacements == NULL)))
        return mpi_error(NULL, MPI_ERR_ARG, call, "invalid count or arrays");
    MPI_Aint *at = malloc(sizeof *at * ((size_t)count + 1));
    if (at == NULL)
        return mpi_error(NULL, MPI_ERR_NO_MEM, call, "out of memory");
    for (int i = 0; i < count; i++)
        at[i] = (MPI_Aint)displacements[i] * oldtype->extent;
    err = from_blocks(count, blocklengths, at, NULL, oldtype, newtype, call);
    free(at);
    return err;
}

int MPI_Type_create_struct(int count, const int blocklengths[], const MPI_Aint displacements[],
                           const MPI_Datatype types[], MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_create_struct";
    if (newtype == NULL)
        return mpi_error(NULL, MPI_ERR_ARG, call, "newtype is NULL");
    if (count < 0 ||
        (count > 0 && (blocklengths == NULL || displacements == NULL || types == NULL)))
        return mpi_error(NULL, MPI_ERR_ARG, call, "invalid count or arrays");
    int err = from_blocks(count, blocklengths, displacements, types, NULL, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    /* As a C struct is padded, the extent rounds up to the strictest alignment inside. */
    struct atoll_mpi_type *t = *newtype;
    MPI_Aint pad = (t->align - t->extent % t->align) % t->align;
    if (pad != 0) {
        t->extent += pad;
        t->contiguous = false;
    }
    return MPI_SUCCESS;
}

int MPI_Type_struct(int count, int blocklengths[], MPI_Aint displacements[],
                    MPI_Datatype types[], MPI_Datatype *newtype)
{
    return MPI_Type_create_struct(count, blocklengths, displacements, types, newtype);
}

int MPI_Type_create_resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent,
                            MPI_Datatype *newtype)
{
    const char *call = "MPI_Type_create_resized";
    int err = check_old(oldtype, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    if (extent < 0)
        return mpi_error(NULL, MPI_ERR_ARG, call, "negative extent %ld", (long)extent);
    err = derive(1, &(struct part){oldtype, 0}, newtype, call);
    if (err != MPI_SUCCESS)
        return err;
    struct atoll_mpi_type *t = *newtype;
    t->lb = lb;
    t->extent = extent;
    t->contiguous = oldtype->contiguous && lb == 0 && extent == oldtype->size;
    return MPI_SUCCESS;
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
    *lb = type->lb;
    *extent = type->extent;
    return MPI_SUCCESS;
}

int MPI_Get_address(const void *location, MPI_Aint *address)
{
    if (address == NULL)
        return mpi_error(NULL, MPI_ERR_ARG, "MPI_Get_address", "address is NULL");
    *address = (MPI_Aint)(uintptr_t)location;
    return MPI_SUCCESS;
}

int MPI_Address(void *location, MPI_Aint *address)
{
    return MPI_Get_address(location, address);
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

/* The integer kinds: their enum and C type. */
#define INT_TYPES(X)                                                                       \
    X(B_CHAR, char)                                                                        \
    X(B_SCHAR, signed char)                                                                \
    X(B_UCHAR, unsigned char)                                                              \
    X(B_SHORT, short)                                                                      \
    X(B_USHORT, unsigned short)                                                            \
    X(B_INT, int)                                                                          \
    X(B_UINT, unsigned)                                                                    \
    X(B_LONG, long)                                                                        \
    X(B_ULONG, unsigned long)                                                              \
    X(B_LL, long long)                                                                     \
    X(B_ULL, unsigned long long)                                                           \
    X(B_WCHAR, wchar_t)                                                                    \
    X(B_BOOL, _Bool)                                                                       \
    X(B_I8, int8_t)                                                                        \
    X(B_I16, int16_t)                                                                      \
    X(B_I32, int32_t)                                                                      \
    X(B_I64, int64_t)                                                                      \
    X(B_U8, uint8_t)                                                                       \
    X(B_U16, uint16_t)                                                                     \
    X(B_U32, uint32_t)                                                                     \
    X(B_U64, uint64_t)                                                                     \
    X(B_AINT, MPI_Aint)                                                                    \
    X(B_OFFSET, MPI_Offset)                                                                \
    X(B_COUNT, MPI_Count)

#define FLOAT_TYPES(X)                                                                     \
    X(B_FLOAT, float)                                                                      \
    X(B_DOUBLE, double)                                                                    \
    X(B_LDOUBLE, long double)

/*
 * One small function per element kind, and in it one loop per operation,
 * chosen once outside the loop: each loop is a plain element-wise pass the
 * compiler vectorizes, and each function stays small: one function holding
 * every kind's loops took about 1 us per call here whatever the count
 * (prepared, it carries hundreds of locals, which a wasm call zeroes).
 */
#define EACH(expr)                                                                         \
    for (size_t i = 0; i < n; i++)                                                         \
        b[i] = (expr);                                                                     \
    break

#define DEFINE_ARITH(kind, T)                                                              \
    static void arith_##kind(int which, const void *in, void *inout, size_t n)             \
    {                                                                                      \
        const T *a = in;                                                                   \
        T *b = inout;                                                                      \
        switch (which) {                                                                   \
        case OP_MAX: EACH(a[i] > b[i] ? a[i] : b[i]);                                      \
        case OP_MIN: EACH(a[i] < b[i] ? a[i] : b[i]);                                      \
        case OP_SUM: EACH(a[i] + b[i]);                                                    \
        case OP_PROD: EACH(a[i] * b[i]);                                                   \
        case OP_LAND: EACH((a[i] != 0) && (b[i] != 0));                                    \
        case OP_LOR: EACH((a[i] != 0) || (b[i] != 0));                                     \
        case OP_LXOR: EACH((a[i] != 0) != (b[i] != 0));                                    \
        }                                                                                  \
    }

#define DEFINE_BITS(kind, T)                                                               \
    static void bits_##kind(int which, const void *in, void *inout, size_t n)              \
    {                                                                                      \
        const T *a = in;                                                                   \
        T *b = inout;                                                                      \
        switch (which) {                                                                   \
        case OP_BAND: EACH(a[i] & b[i]);                                                   \
        case OP_BOR: EACH(a[i] | b[i]);                                                    \
        case OP_BXOR: EACH(a[i] ^ b[i]);                                                   \
        }                                                                                  \
    }

INT_TYPES(DEFINE_ARITH)
FLOAT_TYPES(DEFINE_ARITH)
INT_TYPES(DEFINE_BITS)
DEFINE_BITS(B_BYTE, unsigned char)

#define ARITH_CASE(kind, T)                                                                \
    case kind: arith_##kind(which, in, inout, n); break;
#define BITS_CASE(kind, T)                                                                 \
    case kind: bits_##kind(which, in, inout, n); break;

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
        INT_TYPES(BITS_CASE)
        case B_BYTE: case B_PACKED: bits_B_BYTE(which, in, inout, n); break;
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
        INT_TYPES(ARITH_CASE)
        FLOAT_TYPES(ARITH_CASE)
        default: return MPI_ERR_OP;
        }
        return MPI_SUCCESS;
    }
}
