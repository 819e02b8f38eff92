/*
 * ucx_rkey.c — the remote key that travels in a descriptor's remote_key field.
 *
 * UCX's packed key says how to reach memory, but not which region it is or how long: a consumer
 * cannot check a read against it, and the AM protocol needs the producer's region id to look the
 * range up. So the engine wraps UCX's key in a small envelope (little-endian):
 *
 *   0  "MSRK"          magic
 *   4  version u8 = 1
 *   5  3 zero bytes
 *   8  region_id u64   never 0; a region registered again after unregister gets a new id
 *  16  base u64        first byte of the region
 *  24  len u64         bytes of the region
 *  32  ucx_len u32     bytes of UCX's packed key that follow
 *  36  UCX's packed key
 *
 * The envelope arrives from another process, so parsing checks everything, including the
 * structure of UCX's packed key (ucp_ep_rkey_unpack takes no length): UCX 1.13 lays it out as
 * md_map u64 | mem_type u8 | per md bit: size u8 + size bytes | optional device distances. The
 * walk below stops a key that claims more bytes than it has.
 */
#include "tensors/ucx/ucx_internal.h"

#include <string.h>
#include <ucs/memory/memory_type.h>

#define KEY_MAGIC   "MSRK"
#define KEY_VERSION 1
#define KEY_HEADER  36

mstar_status mstar__ucx_key_pack(const mstar__ucx_key_view *v, uint8_t *out, uint32_t cap,
                                 uint32_t *out_len)
{
    uint64_t total = (uint64_t)KEY_HEADER + v->ucx_rkey_len;
    if (total > cap)
        return mstar_error_set(MSTAR_ERANGE,
                               "ucx remote key: UCX packed %u bytes, more than the %u a "
                               "descriptor carries",
                               v->ucx_rkey_len, cap - KEY_HEADER);
    memcpy(out, KEY_MAGIC, 4);
    out[4] = KEY_VERSION;
    out[5] = out[6] = out[7] = 0;
    mstar__ucx_put_u64(out + 8, v->region_id);
    mstar__ucx_put_u64(out + 16, v->base);
    mstar__ucx_put_u64(out + 24, v->len);
    for (int i = 0; i < 4; i++)
        out[32 + i] = (uint8_t)(v->ucx_rkey_len >> (8 * i));
    if (v->ucx_rkey_len > 0)
        memcpy(out + KEY_HEADER, v->ucx_rkey, v->ucx_rkey_len);
    *out_len = (uint32_t)total;
    return MSTAR_OK;
}

/* Walk UCX's packed key: every md entry must lie inside the bytes present. */
static mstar_status check_ucx_key(const uint8_t *p, uint32_t len, const char *what)
{
    if (len == 0)
        return MSTAR_OK; /* a zero-length region carries no UCX key */
    if (len < 9)
        return mstar_error_set(MSTAR_EPROTO, "%s: UCX key is %u bytes, at least 9", what, len);
    uint64_t md_map = mstar__ucx_get_u64(p);
    uint8_t mem_type = p[8];
    if (mem_type >= UCS_MEMORY_TYPE_LAST)
        return mstar_error_set(MSTAR_EPROTO, "%s: UCX key has memory type %u", what, mem_type);
    uint32_t off = 9;
    for (int bit = 0; bit < 64; bit++) {
        if (!(md_map & (UINT64_C(1) << bit)))
            continue;
        if (off >= len)
            return mstar_error_set(MSTAR_EPROTO, "%s: UCX key ends inside md %d", what, bit);
        uint32_t sz = p[off];
        if (sz > len - off - 1)
            return mstar_error_set(MSTAR_EPROTO, "%s: UCX key md %d claims %u bytes, %u are left",
                                   what, bit, sz, len - off - 1);
        off += 1 + sz;
    }
    return MSTAR_OK;
}

mstar_status mstar__ucx_key_parse(const uint8_t *key, uint32_t len, const char *what,
                                  mstar__ucx_key_view *out)
{
    if (key == NULL || len == 0)
        return mstar_error_set(MSTAR_EPROTO, "%s is missing (the producer registered no memory)",
                               what);
    if (len > MSTAR_REMOTE_KEY_MAX)
        return mstar_error_set(MSTAR_EPROTO, "%s is %u bytes, at most %d", what, len,
                               MSTAR_REMOTE_KEY_MAX);
    if (len < KEY_HEADER)
        return mstar_error_set(MSTAR_EPROTO, "%s is %u bytes, at least %d", what, len, KEY_HEADER);
    if (memcmp(key, KEY_MAGIC, 4) != 0)
        return mstar_error_set(MSTAR_EPROTO, "%s is not a UCX engine key (bad magic)", what);
    if (key[4] != KEY_VERSION)
        return mstar_error_set(MSTAR_EPROTO, "%s has version %u, this engine speaks %d", what,
                               key[4], KEY_VERSION);
    if (key[5] != 0 || key[6] != 0 || key[7] != 0)
        return mstar_error_set(MSTAR_EPROTO, "%s has non-zero reserved bytes", what);
    mstar__ucx_key_view v;
    v.region_id = mstar__ucx_get_u64(key + 8);
    v.base = mstar__ucx_get_u64(key + 16);
    v.len = mstar__ucx_get_u64(key + 24);
    v.ucx_rkey_len = 0;
    for (int i = 0; i < 4; i++)
        v.ucx_rkey_len |= (uint32_t)key[32 + i] << (8 * i);
    v.ucx_rkey = key + KEY_HEADER;
    uint64_t end;
    if (v.region_id == 0)
        return mstar_error_set(MSTAR_EPROTO, "%s has region id 0", what);
    if (!mstar__add_u64(v.base, v.len, &end))
        return mstar_error_set(MSTAR_EPROTO, "%s: base 0x%llx + len %llu overflows", what,
                               (unsigned long long)v.base, (unsigned long long)v.len);
    if (v.ucx_rkey_len != len - KEY_HEADER)
        return mstar_error_set(MSTAR_EPROTO, "%s says %u bytes of UCX key, %u follow", what,
                               v.ucx_rkey_len, len - KEY_HEADER);
    if (v.len > 0 && v.ucx_rkey_len == 0)
        return mstar_error_set(MSTAR_EPROTO, "%s: a %llu-byte region without a UCX key", what,
                               (unsigned long long)v.len);
    mstar_status st = check_ucx_key(v.ucx_rkey, v.ucx_rkey_len, what);
    if (st != MSTAR_OK)
        return st;
    *out = v;
    return MSTAR_OK;
}
