/*
 * edge.c — the graph edge (reference GraphEdge, the fields transport touches): defaults,
 * ownership of its descriptor array, and the rules of its own fields.
 *
 * Unlike the reference's GraphEdge.clone(), a copy here is deep and keeps _total_fanin and
 * _shard_dim: a C caller that wants the reference's reset sets them after copying.
 */
#include "wire_internal.h"

#include <stdlib.h>
#include <string.h>

void mstar_edge_init(mstar_edge *edge)
{
    memset(edge, 0, sizeof(*edge));
    edge->total_fanin = 1;
    edge->shard_dim = -1;
}

void mstar_edge_clear(mstar_edge *edge)
{
    free(edge->tensor_info);
    mstar_edge_init(edge);
}

mstar_status mstar_edge_copy(mstar_edge *dst, const mstar_edge *src)
{
    mstar_tensor_info *infos;
    mstar_status st = mstar__wire_alloc_raw(src->ntensors, sizeof(*infos), (void **)&infos);
    if (st != MSTAR_OK) {
        mstar_edge_init(dst);
        return st;
    }
    if (src->ntensors > 0)
        memcpy(infos, src->tensor_info, (size_t)src->ntensors * sizeof(*infos));
    *dst = *src;
    dst->tensor_info = infos;
    return MSTAR_OK;
}

mstar_status mstar_edge_add_tensor(mstar_edge *edge, const mstar_tensor_info *info)
{
    if (edge->ntensors >= MSTAR_WIRE_MAX_TENSORS)
        return mstar_error_set(MSTAR_ENOSPC, "edge '%s' already holds %d descriptors", edge->name,
                               MSTAR_WIRE_MAX_TENSORS);
    mstar_status st =
        mstar__wire_grow((void **)&edge->tensor_info, edge->ntensors, sizeof(*edge->tensor_info));
    if (st != MSTAR_OK)
        return st;
    edge->tensor_info[edge->ntensors++] = *info;
    return MSTAR_OK;
}

mstar_status mstar__wire_check_edge(mstar_status code, const mstar__wpath *path,
                                    const mstar_edge *edge)
{
    mstar__wpath p = mstar__wpath_key(path, "next_node");
    mstar_status st =
        mstar__wire_check_cname(code, &p, edge->next_node, sizeof(edge->next_node), true);
    if (st != MSTAR_OK)
        return st;
    p = mstar__wpath_key(path, "name");
    if ((st = mstar__wire_check_cname(code, &p, edge->name, sizeof(edge->name), false)) != MSTAR_OK)
        return st;
    p = mstar__wpath_key(path, "tensor_info");
    if (edge->ntensors > MSTAR_WIRE_MAX_TENSORS)
        return mstar__wire_fail(code, &p, "%u entries, at most %d", edge->ntensors,
                                MSTAR_WIRE_MAX_TENSORS);
    if (edge->ntensors > 0 && edge->tensor_info == NULL)
        return mstar__wire_fail(code, &p, "%u entries but no array", edge->ntensors);
    if (edge->total_fanin < 1) {
        p = mstar__wpath_key(path, "_total_fanin");
        return mstar__wire_fail(code, &p, "%d, must be >= 1", (int)edge->total_fanin);
    }
    if (edge->shard_dim < -1 || edge->shard_dim >= MSTAR_MAX_NDIM) {
        p = mstar__wpath_key(path, "_shard_dim");
        return mstar__wire_fail(code, &p, "%d, must be None or in 0..%d", (int)edge->shard_dim,
                                MSTAR_MAX_NDIM - 1);
    }
    return MSTAR_OK;
}
