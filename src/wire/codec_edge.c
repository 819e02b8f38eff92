/*
 * codec_edge.c — the graph edge as a msgpack map keyed by the reference's field names, both ways,
 * and the stand-alone mstar_edge_encode/decode.
 *
 * Required: next_node ("" is EMPTY_DESTINATION) and name. tensor_info defaults to [], the bools to
 * false, _total_fanin to 1 and _shard_dim to None (nil, or absent).
 */
#include "codec.h"

#include <string.h>

enum {
    F_NEXT_NODE,
    F_NAME,
    F_TENSOR_INFO,
    F_PERSIST,
    F_IS_STREAMING,
    F_PERSIST_FOR_LOOP,
    F_TOTAL_FANIN,
    F_SHARD_DIM,
    F_COUNT
};

static const mstar__wkey keys[F_COUNT] = {
    [F_NEXT_NODE] = { "next_node", 9 },        [F_NAME] = { "name", 4 },
    [F_TENSOR_INFO] = { "tensor_info", 11 },   [F_PERSIST] = { "persist", 7 },
    [F_IS_STREAMING] = { "is_streaming", 12 }, [F_PERSIST_FOR_LOOP] = { "_persist_for_loop", 17 },
    [F_TOTAL_FANIN] = { "_total_fanin", 12 },  [F_SHARD_DIM] = { "_shard_dim", 10 },
};

#define REQUIRED ((UINT64_C(1) << F_NEXT_NODE) | (UINT64_C(1) << F_NAME))

static const mstar__wmap edge_map = { keys, F_COUNT, (UINT64_C(1) << F_COUNT) - 1, REQUIRED };

/* ---- decoding -------------------------------------------------------------------------------- */

static mstar_status read_shard_dim(mstar__rd *r, const mstar__wpath *path, int32_t *out)
{
    if (mstar__rd_nil(r)) {
        *out = -1;
        return MSTAR_OK;
    }
    return mstar__rd_int32(r, path, 0, MSTAR_MAX_NDIM - 1, out);
}

static mstar_status read_field(mstar__rd *r, const mstar__wpath *path, int field, void *ctx)
{
    mstar_edge *out = ctx;
    switch (field) {
    case F_NEXT_NODE:
        return mstar__rd_name(r, path, true, out->next_node);
    case F_NAME:
        return mstar__rd_name(r, path, false, out->name);
    case F_TENSOR_INFO:
        return mstar__infos_read(r, path, out);
    case F_PERSIST:
        return mstar__rd_bool(r, path, &out->persist);
    case F_IS_STREAMING:
        return mstar__rd_bool(r, path, &out->is_streaming);
    case F_PERSIST_FOR_LOOP:
        return mstar__rd_bool(r, path, &out->persist_for_loop);
    case F_TOTAL_FANIN:
        return mstar__rd_int32(r, path, 1, INT32_MAX, &out->total_fanin);
    case F_SHARD_DIM:
        return read_shard_dim(r, path, &out->shard_dim);
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

mstar_status mstar__edge_read(mstar__rd *r, const mstar__wpath *path, mstar_edge *out)
{
    mstar_edge_init(out);
    /* Every rule of mstar__wire_check_edge is enforced as the fields are read (names validated,
     * counts and ranges passed to the reader). */
    mstar_status st = mstar__rd_fields(r, path, &edge_map, read_field, out);
    if (st != MSTAR_OK)
        mstar_edge_clear(out);
    return st;
}

/* ---- encoding -------------------------------------------------------------------------------- */

/* The fields that differ from their defaults, plus the required ones. */
static uint64_t present(const mstar_edge *edge)
{
    uint64_t m = REQUIRED;
    m |= (uint64_t)(edge->ntensors != 0) << F_TENSOR_INFO;
    m |= (uint64_t)edge->persist << F_PERSIST;
    m |= (uint64_t)edge->is_streaming << F_IS_STREAMING;
    m |= (uint64_t)edge->persist_for_loop << F_PERSIST_FOR_LOOP;
    m |= (uint64_t)(edge->total_fanin != 1) << F_TOTAL_FANIN;
    m |= (uint64_t)(edge->shard_dim != -1) << F_SHARD_DIM;
    return m;
}

static mstar_status write_field(mstar__wr *w, const mstar__wpath *path, int field,
                                const void *value)
{
    const mstar_edge *edge = value;
    switch (field) {
    case F_NEXT_NODE:
        mstar__wr_cstr(w, edge->next_node);
        break;
    case F_NAME:
        mstar__wr_cstr(w, edge->name);
        break;
    case F_TENSOR_INFO:
        return mstar__infos_write(w, path, edge);
    case F_PERSIST:
        mstar__wr_bool(w, edge->persist);
        break;
    case F_IS_STREAMING:
        mstar__wr_bool(w, edge->is_streaming);
        break;
    case F_PERSIST_FOR_LOOP:
        mstar__wr_bool(w, edge->persist_for_loop);
        break;
    case F_TOTAL_FANIN:
        mstar__wr_int(w, edge->total_fanin);
        break;
    case F_SHARD_DIM:
        mstar__wr_int(w, edge->shard_dim);
        break;
    }
    return MSTAR_OK;
}

mstar_status mstar__edge_write(mstar__wr *w, const mstar__wpath *path, const mstar_edge *edge)
{
    mstar_status st = mstar__wire_check_edge(MSTAR_EINVAL, path, edge);
    if (st != MSTAR_OK)
        return st;
    return mstar__wr_fields(w, path, &edge_map, present(edge), write_field, edge);
}

/* ---- stand-alone ----------------------------------------------------------------------------- */

static mstar_status read_root(mstar__rd *r, const mstar__wpath *path, void *out)
{
    return mstar__edge_read(r, path, out);
}

static mstar_status write_root(mstar__wr *w, const mstar__wpath *path, const void *value)
{
    return mstar__edge_write(w, path, value);
}

mstar_status mstar_edge_encode(const mstar_edge *edge, void **data, size_t *len)
{
    return mstar__encode_root("edge", write_root, edge, data, len);
}

mstar_status mstar_edge_decode(const void *data, size_t len, mstar_edge *out)
{
    if (out != NULL)
        mstar_edge_init(out);
    mstar_status st = mstar__decode_root("edge", read_root, data, len, out);
    if (st != MSTAR_OK && out != NULL)
        mstar_edge_clear(out); /* e.g. bytes after a valid edge */
    return st;
}
