/*
 * wire_array.c — the arrays inside edges and messages: allocation by the shared growth rule
 * (wire_internal.h), and duplicate-key detection for the fields that travel as msgpack maps.
 *
 * Duplicates are found through the core maps: a 65536-entry map from a peer costs linear time,
 * not quadratic, and the short arrays of the hot path (a TENSOR_RECEIVED with a handful of uuids)
 * no allocation (the maps' small mode, core/u64map.h).
 */
#include "wire_internal.h"

#include "core/strmap.h"
#include "core/u64map.h"

#include <stdlib.h>
#include <string.h>

mstar_status mstar__wire_alloc_raw(uint32_t n, size_t elsize, void **out)
{
    *out = NULL;
    if (n == 0)
        return MSTAR_OK;
    size_t cap = mstar__wire_cap(n);
    void *p = elsize != 0 && cap > SIZE_MAX / elsize ? NULL : malloc(cap * elsize);
    if (p == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "array of %u elements of %zu bytes", n, elsize);
    *out = p;
    return MSTAR_OK;
}

mstar_status mstar__wire_alloc(uint32_t n, size_t elsize, void **out)
{
    mstar_status st = mstar__wire_alloc_raw(n, elsize, out);
    if (st == MSTAR_OK && *out != NULL)
        memset(*out, 0, (size_t)mstar__wire_cap(n) * elsize);
    return st;
}

mstar_status mstar__wire_grow(void **arr, uint32_t n, size_t elsize)
{
    if (n == UINT32_MAX)
        return mstar_error_set(MSTAR_ENOMEM, "array already holds %u elements", n);
    uint32_t cap = mstar__wire_cap(n);
    if (n < cap)
        return MSTAR_OK;
    size_t ncap = cap == 0 ? 1 : (size_t)cap * 2;
    void *p = realloc(*arr, ncap * elsize);
    if (p == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "array of %zu elements of %zu bytes", ncap, elsize);
    memset((char *)p + (size_t)n * elsize, 0, (ncap - n) * elsize);
    *arr = p;
    return MSTAR_OK;
}

static const char *name_at(const void *base, size_t stride, size_t key_offset, uint32_t i)
{
    return (const char *)base + (size_t)i * stride + key_offset;
}

static uint64_t u64_at(const void *base, size_t stride, size_t key_offset, uint32_t i)
{
    uint64_t v;
    memcpy(&v, (const char *)base + (size_t)i * stride + key_offset, sizeof(v));
    return v;
}

mstar_status mstar__wire_find_dup_name(const void *base, uint32_t n, size_t stride,
                                       size_t key_offset, int64_t *dup)
{
    *dup = -1;
    mstar__strmap seen;
    mstar__strmap_init(&seen);
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < n && *dup < 0; i++) {
        const char *key = name_at(base, stride, key_offset, i);
        size_t len = strlen(key);
        if (mstar__strmap_find(&seen, key, len) != NULL)
            *dup = i;
        else if ((st = mstar__strmap_put(&seen, key, len, i)) != MSTAR_OK)
            break;
    }
    mstar__strmap_free(&seen);
    return st;
}

mstar_status mstar__wire_find_dup_u64(const void *base, uint32_t n, size_t stride,
                                      size_t key_offset, int64_t *dup)
{
    *dup = -1;
    if (n < 2)
        return MSTAR_OK; /* nothing can repeat (an ACK of one uuid): no map to set up */
    mstar__u64map seen;
    mstar__u64map_init(&seen);
    mstar_status st = mstar__u64map_reserve(&seen, n);
    for (uint32_t i = 0; st == MSTAR_OK && i < n && *dup < 0; i++) {
        uint64_t key = u64_at(base, stride, key_offset, i);
        if (mstar__u64map_find(&seen, key) != NULL)
            *dup = i;
        else
            st = mstar__u64map_put(&seen, key, i);
    }
    mstar__u64map_free(&seen);
    return st;
}
