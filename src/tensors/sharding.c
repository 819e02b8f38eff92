/*
 * sharding.c — fan-out of an edge to the workers of the destination group (reference
 * ShardingConfig.compute_fanout / fanout_graph_edges / compute_fanin, design.md "Sharding").
 *
 * Descriptors are in canonical layout, so a destination's part of a sharded tensor is a range of
 * rows along dim 0 — one contiguous byte range (offset, nbytes) of the SOURCE rank's tensor. The
 * offset is local to the source shard: row `start` of the logical tensor is row
 * start - src_rank * rows_per_source of this rank's slab (the reference computed it in logical
 * coordinates, out of range for any rank above 0, T-9). Element sizes come from the dtype, so
 * dims of 0 are fine (the reference divided nbytes by the element count).
 */
#include "mstar/tensors.h"

#include "tensors/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mstar_fanout_clear(mstar_fanout *fanout)
{
    for (uint32_t i = 0; i < fanout->n; i++)
        mstar_edge_clear(&fanout->edges[i]);
    free(fanout->edges);
    free(fanout->workers);
    memset(fanout, 0, sizeof(*fanout));
}

static bool in_group(const mstar_shard_group *g, const char *worker)
{
    for (int32_t r = 0; g != NULL && worker != NULL && r < g->tp_size; r++)
        if (strcmp(g->workers[r], worker) == 0)
            return true;
    return false;
}

/* Source ranks whose rows overlap destination rank k's (reference compute_fanin), in scaled
 * integer coordinates where the whole signal is src_tp * dst_tp units. */
static int32_t fanin_of(int32_t src_tp, int32_t dst_tp, int32_t k)
{
    int64_t lo = (int64_t)k * src_tp, hi = lo + src_tp, n = 0;
    for (int64_t r = 0; r < src_tp; r++)
        n += r * dst_tp < hi && (r + 1) * dst_tp > lo;
    return (int32_t)n;
}

static mstar_status check_group(const mstar_shard_group *g, const char *what)
{
    if (g == NULL)
        return MSTAR_OK;
    if (g->tp_size < 1 || g->workers == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s group: tp_size %d with %s workers", what,
                               (int)g->tp_size, g->workers == NULL ? "no" : "its");
    for (int32_t r = 0; r < g->tp_size; r++) {
        const char *w = g->workers[r];
        if (w == NULL || mstar_name_validate(w, strnlen(w, MSTAR_NAME_MAX + 1), what) != MSTAR_OK)
            return mstar_error_set(MSTAR_EINVAL, "%s group: worker %d is not a valid name", what,
                                   (int)r);
    }
    return MSTAR_OK;
}

/* Append one destination: a copy of `edge` whose descriptors are the whole tensors (rows NULL)
 * or rows [start[i], end[i]) of each. */
static mstar_status add_dest(mstar_fanout *out, const char *worker, const mstar_edge *edge,
                             int32_t shard_dim, int32_t fanin, const int64_t *start,
                             const int64_t *end, const int64_t *src_first)
{
    char(*workers)[MSTAR_NAME_MAX + 1] = realloc(out->workers, (out->n + 1) * sizeof(*workers));
    if (workers == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "fan-out destinations");
    out->workers = workers;
    mstar_edge *edges = realloc(out->edges, (out->n + 1) * sizeof(*edges));
    if (edges == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "fan-out destinations");
    out->edges = edges;
    mstar_edge *e = &edges[out->n];
    mstar_status st = mstar_edge_copy(e, edge);
    if (st != MSTAR_OK)
        return st;
    e->shard_dim = shard_dim;
    e->total_fanin = fanin;
    for (uint32_t i = 0; start != NULL && i < e->ntensors; i++) {
        mstar_tensor_info *info = &e->tensor_info[i];
        uint64_t row = mstar__layout_row_bytes(info->dtype, info->ndim, info->dims);
        info->dims[0] = end[i] - start[i];
        info->offset += (uint64_t)(start[i] - src_first[i]) * row;
        info->nbytes = (uint64_t)(end[i] - start[i]) * row;
        mstar_shape_contiguous_strides(info->ndim, info->dims, info->stride);
    }
    snprintf(workers[out->n], sizeof(workers[out->n]), "%s", worker);
    out->n++;
    return MSTAR_OK;
}

static mstar_status fan_replicated(const mstar_edge *edge, const mstar_shard_group *src,
                                   int32_t src_rank, const mstar_shard_group *dst,
                                   mstar_fanout *out)
{
    const char *me = src != NULL ? src->workers[src_rank] : NULL;
    static const char *const pseudo[1] = { "" };
    const char *const *dws = dst != NULL ? dst->workers : pseudo;
    int32_t dn = dst != NULL ? dst->tp_size : 1;
    mstar_status st = MSTAR_OK;
    if (me != NULL && in_group(dst, me))
        st = add_dest(out, me, edge, -1, 1, NULL, NULL, NULL);
    /* Only rank 0 sends to destinations outside the source group: one copy each. */
    for (int32_t k = 0; st == MSTAR_OK && src_rank == 0 && k < dn; k++)
        if (!in_group(src, dws[k]))
            st = add_dest(out, dws[k], edge, -1, 1, NULL, NULL, NULL);
    return st;
}

static mstar_status fan_sharded(const mstar_edge *edge, int32_t shard_dim,
                                const mstar_shard_group *src, int32_t src_rank,
                                const mstar_shard_group *dst, mstar_fanout *out)
{
    int32_t src_tp = src != NULL ? src->tp_size : 1;
    int32_t dst_tp = dst != NULL ? dst->tp_size : 1;
    uint32_t n = edge->ntensors;
    int64_t *rows = calloc((size_t)n * 5 + 1, sizeof(int64_t));
    if (rows == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "fan-out of %u descriptors", n);
    int64_t *first = rows + n, *last = rows + 2 * n, *start = rows + 3 * n, *end = rows + 4 * n;
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        const mstar_tensor_info *info = &edge->tensor_info[i];
        if (info->ndim < 1)
            st = mstar_error_set(MSTAR_EINVAL,
                                 "edge '%s': descriptor %u of a sharded signal has "
                                 "no dims",
                                 edge->name, i);
        else if ((info->dims[0] * src_tp) % dst_tp != 0)
            st = mstar_error_set(MSTAR_EINVAL,
                                 "edge '%s': %lld rows × %d source ranks do not "
                                 "divide among %d destination ranks",
                                 edge->name, (long long)info->dims[0], (int)src_tp, (int)dst_tp);
        rows[i] = info->dims[0];
        first[i] = (int64_t)src_rank * rows[i];
        last[i] = first[i] + rows[i];
    }
    for (int32_t k = 0; k < dst_tp && st == MSTAR_OK && n > 0; k++) {
        /* Overlap is decided on the first descriptor, as the reference does. */
        int64_t per_dst0 = rows[0] * src_tp / dst_tp;
        if (last[0] <= k * per_dst0)
            break;
        if (first[0] >= (k + 1) * per_dst0)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            int64_t per = rows[i] * src_tp / dst_tp;
            start[i] = first[i] > k * per ? first[i] : k * per;
            end[i] = last[i] < (k + 1) * per ? last[i] : (k + 1) * per;
            if (end[i] < start[i])
                end[i] = start[i];
        }
        st = add_dest(out, dst != NULL ? dst->workers[k] : "", edge, shard_dim,
                      fanin_of(src_tp, dst_tp, k), start, end, first);
    }
    free(rows);
    return st;
}

mstar_status mstar_edge_fanout(const mstar_edge *edge, int32_t shard_dim,
                               const mstar_shard_group *src, int32_t src_rank,
                               const mstar_shard_group *dst, mstar_fanout *out)
{
    if (edge == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "edge_fanout: %s is NULL",
                               edge == NULL ? "edge" : "out");
    mstar_status st;
    if ((st = check_group(src, "source")) != MSTAR_OK ||
        (st = check_group(dst, "destination")) != MSTAR_OK)
        return st;
    if (src == NULL)
        src_rank = 0;
    else if (src_rank < 0 || src_rank >= src->tp_size)
        return mstar_error_set(MSTAR_EINVAL, "src_rank %d outside 0..%d", (int)src_rank,
                               (int)src->tp_size - 1);
    if (shard_dim < -1 || shard_dim >= MSTAR_MAX_NDIM)
        return mstar_error_set(MSTAR_EINVAL, "shard_dim %d outside -1..%d", (int)shard_dim,
                               MSTAR_MAX_NDIM - 1);
    mstar_fanout result = { 0 };
    st = shard_dim < 0 ? fan_replicated(edge, src, src_rank, dst, &result)
                       : fan_sharded(edge, shard_dim, src, src_rank, dst, &result);
    if (st != MSTAR_OK) {
        mstar_fanout_clear(&result);
        return st;
    }
    *out = result;
    return MSTAR_OK;
}
