/*
 * writer.c — the growing msgpack writer the encoders are built from (see codec.h).
 *
 * Each write reserves the most bytes its msgpack form can take, then lets msgpuck encode the
 * shortest form. The buffer starts at a size that holds the small hot-path messages (an ACK, a
 * one-descriptor INPUT_SIGNALS) in one allocation and doubles from there.
 */
#include "codec.h"
#include "core/assert.h"

#include <msgpuck.h>
#include <stdlib.h>
#include <string.h>

#define WR_INITIAL    512
#define WR_MAX_SCALAR 9 /* a type byte and 8 payload bytes */

static void wr_init(mstar__wr *w)
{
    w->data = NULL;
    w->len = 0;
    w->cap = 0;
    w->status = MSTAR_OK;
    w->tensors_left = MSTAR_WIRE_MAX_TENSORS;
}

/* Grow the buffer to room for `n` more bytes; NULL (the status set) if that fails. */
static char *grow(mstar__wr *w, size_t n)
{
    size_t ncap = w->cap ? w->cap : WR_INITIAL;
    while (ncap - w->len < n) {
        if (ncap > SIZE_MAX / 2) {
            w->status = mstar_error_set(MSTAR_ENOMEM, "encoded message too large");
            return NULL;
        }
        ncap *= 2;
    }
    char *d = realloc(w->data, ncap);
    if (d == NULL) {
        w->status = mstar_error_set(MSTAR_ENOMEM, "encode buffer of %zu bytes", ncap);
        return NULL;
    }
    w->data = d;
    w->cap = ncap;
    return w->data + w->len;
}

/* Room for `n` more bytes, or NULL once an allocation has failed. Every write calls this and
 * the buffer mostly has the room, so the check is inline (gcc -O2 does not inline it unasked;
 * the call was a tenth of an encode) and growing is not. */
static inline char *reserve(mstar__wr *w, size_t n)
{
    if (w->status != MSTAR_OK)
        return NULL;
    if (n <= w->cap - w->len)
        return w->data + w->len;
    return grow(w, n);
}

static void commit(mstar__wr *w, const char *end)
{
    MSTAR__ASSERT(end >= w->data + w->len && end <= w->data + w->cap); /* within reserve's room */
    w->len = (size_t)(end - w->data);
}

void mstar__wr_map(mstar__wr *w, uint32_t n)
{
    char *p = reserve(w, 5);
    if (p != NULL)
        commit(w, mp_encode_map(p, n));
}

void mstar__wr_array(mstar__wr *w, uint32_t n)
{
    char *p = reserve(w, 5);
    if (p != NULL)
        commit(w, mp_encode_array(p, n));
}

void mstar__wr_key(mstar__wr *w, const mstar__wkey *key)
{
    mstar__wr_str(w, key->name, key->len);
}

void mstar__wr_uint(mstar__wr *w, uint64_t v)
{
    char *p = reserve(w, WR_MAX_SCALAR);
    if (p != NULL)
        commit(w, mp_encode_uint(p, v));
}

void mstar__wr_int(mstar__wr *w, int64_t v)
{
    char *p = reserve(w, WR_MAX_SCALAR);
    if (p == NULL)
        return;
    /* msgpack's int family is for negatives; a non-negative value takes the uint form. */
    commit(w, v >= 0 ? mp_encode_uint(p, (uint64_t)v) : mp_encode_int(p, v));
}

void mstar__wr_bool(mstar__wr *w, bool v)
{
    char *p = reserve(w, 1);
    if (p != NULL)
        commit(w, mp_encode_bool(p, v));
}

void mstar__wr_double(mstar__wr *w, double v)
{
    char *p = reserve(w, WR_MAX_SCALAR);
    if (p != NULL)
        commit(w, mp_encode_double(p, v));
}

void mstar__wr_str(mstar__wr *w, const char *s, size_t len)
{
    char *p = reserve(w, 5 + len);
    if (p != NULL)
        commit(w, mp_encode_str(p, s, (uint32_t)len));
}

void mstar__wr_cstr(mstar__wr *w, const char *s)
{
    mstar__wr_str(w, s, strlen(s));
}

void mstar__wr_bin(mstar__wr *w, const void *s, size_t len)
{
    char *p = reserve(w, 5 + len);
    if (p != NULL)
        commit(w, mp_encode_bin(p, s, (uint32_t)len));
}

void mstar__wr_rid(mstar__wr *w, const mstar_rid *rid)
{
    if (rid->is_str)
        mstar__wr_cstr(w, rid->str);
    else
        mstar__wr_int(w, rid->num);
}

/* The bits set in m. Not __builtin_popcountll: without -mpopcnt that is a call into libgcc,
 * and a map has only a few fields. */
static uint32_t count_bits(uint64_t m)
{
    uint32_t n = 0;
    for (; m != 0; m &= m - 1)
        n++;
    return n;
}

mstar_status mstar__wr_fields(mstar__wr *w, const mstar__wpath *path, const mstar__wmap *map,
                              uint64_t present, mstar__wr_field_fn write_field, const void *value)
{
    MSTAR__ASSERT(mstar__wmap_indexes(map, present));
    mstar__wr_map(w, count_bits(present));
    for (uint64_t m = present; m != 0; m &= m - 1) {
        int f = __builtin_ctzll(m);
        mstar__wr_key(w, &map->keys[f]);
        mstar__wpath pf = mstar__wpath_key(path, map->keys[f].name);
        mstar_status st = write_field(w, &pf, f, value);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

mstar_status mstar__encode_root_into(const char *root, mstar__write_fn write, const void *value,
                                     void **buf, size_t *cap, size_t *len)
{
    if (value == NULL || buf == NULL || cap == NULL || len == NULL)
        return mstar_error_set(MSTAR_EINVAL, "encoding %s: NULL argument", root);
    mstar__wpath path = mstar__wpath_key(NULL, root);
    mstar__wr w;
    wr_init(&w);
    w.data = *buf;
    w.cap = *cap;
    mstar_status st = write(&w, &path, value);
    if (st == MSTAR_OK)
        st = w.status;
    if (st == MSTAR_OK && w.len > MSTAR_WIRE_MAX_MESSAGE)
        st = mstar_error_set(MSTAR_EINVAL, "%s: encodes to %zu bytes, at most %u", root, w.len,
                             MSTAR_WIRE_MAX_MESSAGE);
    *buf = w.data; /* reserve may have moved it, even on the way to a failure */
    *cap = w.cap;
    *len = st == MSTAR_OK ? w.len : 0;
    return st;
}

mstar_status mstar__encode_root(const char *root, mstar__write_fn write, const void *value,
                                void **data, size_t *len)
{
    if (value == NULL || data == NULL || len == NULL)
        return mstar_error_set(MSTAR_EINVAL, "encoding %s: NULL argument", root);
    void *buf = NULL;
    size_t cap = 0, n;
    mstar_status st = mstar__encode_root_into(root, write, value, &buf, &cap, &n);
    if (st != MSTAR_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *len = n;
    return MSTAR_OK;
}
