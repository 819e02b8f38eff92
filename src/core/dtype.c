/*
 * dtype.c — the element-type table: stable codes, torch names, element sizes.
 *
 * The wire carries the torch name so that a Python peer can speak it; in process everything uses
 * the code. fp8 and complex codes are reserved: they travel, nothing computes on them.
 */
#include "mstar/core.h"

#include <string.h>

struct dtype_entry {
    const char *name;
    size_t size;
};

static const struct dtype_entry dtype_table[MSTAR_DTYPE_COUNT_] = {
    [MSTAR_DTYPE_INVALID] = { NULL, 0 },
    [MSTAR_DTYPE_BOOL] = { "bool", 1 },
    [MSTAR_DTYPE_UINT8] = { "uint8", 1 },
    [MSTAR_DTYPE_INT8] = { "int8", 1 },
    [MSTAR_DTYPE_INT16] = { "int16", 2 },
    [MSTAR_DTYPE_INT32] = { "int32", 4 },
    [MSTAR_DTYPE_INT64] = { "int64", 8 },
    [MSTAR_DTYPE_FLOAT16] = { "float16", 2 },
    [MSTAR_DTYPE_BFLOAT16] = { "bfloat16", 2 },
    [MSTAR_DTYPE_FLOAT32] = { "float32", 4 },
    [MSTAR_DTYPE_FLOAT64] = { "float64", 8 },
    [MSTAR_DTYPE_COMPLEX64] = { "complex64", 8 },
    [MSTAR_DTYPE_COMPLEX128] = { "complex128", 16 },
    [MSTAR_DTYPE_FLOAT8_E4M3FN] = { "float8_e4m3fn", 1 },
    [MSTAR_DTYPE_FLOAT8_E5M2] = { "float8_e5m2", 1 },
};

bool mstar_dtype_is_valid(int code)
{
    return code > MSTAR_DTYPE_INVALID && code < MSTAR_DTYPE_COUNT_;
}

bool mstar_dtype_is_computable(mstar_dtype dtype)
{
    return dtype >= MSTAR_DTYPE_BOOL && dtype <= MSTAR_DTYPE_FLOAT64;
}

size_t mstar_dtype_size(mstar_dtype dtype)
{
    return mstar_dtype_is_valid((int)dtype) ? dtype_table[dtype].size : 0;
}

const char *mstar_dtype_name(mstar_dtype dtype)
{
    return mstar_dtype_is_valid((int)dtype) ? dtype_table[dtype].name : NULL;
}

mstar_status mstar_dtype_from_name(const char *name, size_t len, mstar_dtype *out)
{
    static const char prefix[] = "torch.";
    const size_t plen = sizeof(prefix) - 1;
    if (len >= plen && memcmp(name, prefix, plen) == 0) {
        name += plen;
        len -= plen;
    }
    for (int code = MSTAR_DTYPE_BOOL; code < MSTAR_DTYPE_COUNT_; code++) {
        const char *n = dtype_table[code].name;
        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *out = (mstar_dtype)code;
            return MSTAR_OK;
        }
    }
    return mstar_error_set(MSTAR_EINVAL, "unknown dtype name '%.*s'", (int)(len > 64 ? 64 : len),
                           name);
}
