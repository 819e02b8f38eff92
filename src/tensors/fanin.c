/*
 * fanin.c — see fanin.h.
 */
#include "tensors/fanin.h"

#include "core/assert.h"

#include <stdlib.h>
#include <string.h>

mstar_status mstar__fanin_create(const mstar_edge *first, mstar__fanin **out)
{
    mstar__fanin *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "fan-in buffer");
    mstar_status st = mstar_edge_copy(&f->edge, first);
    if (st != MSTAR_OK) {
        free(f);
        return st;
    }
    memcpy(f->name, first->name, sizeof(f->name));
    memcpy(f->next_node, first->next_node, sizeof(f->next_node));
    f->total_fanin = first->total_fanin;
    f->shard_dim = first->shard_dim;
    mstar__vec_init(&f->shards, sizeof(mstar__shard));
    *out = f;
    return MSTAR_OK;
}

static mstar__shard *shard(const mstar__fanin *f, size_t i)
{
    return (mstar__shard *)mstar__vec_at(&f->shards, i);
}

void mstar__fanin_destroy(mstar__fanin *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->shards.len; i++)
        mstar__buf_release(shard(f, i)->buf);
    mstar__vec_free(&f->shards);
    mstar_edge_clear(&f->edge);
    free(f);
}

bool mstar__fanin_matches(const mstar__fanin *f, const mstar_edge *edge)
{
    return strcmp(f->name, edge->name) == 0 && strcmp(f->next_node, edge->next_node) == 0;
}

/* Whether one of the first `upto` shards came from `rank`. */
static bool has_rank(const mstar__fanin *f, size_t upto, int32_t rank)
{
    for (size_t i = 0; i < upto; i++)
        if (shard(f, i)->rank == rank)
            return true;
    return false;
}

mstar_status mstar__fanin_add(mstar__fanin *f, const int32_t *ranks, mstar__buf *const *bufs,
                              const mstar_tensor *views, uint32_t n)
{
    size_t before = f->shards.len;
    for (uint32_t i = 0; i < n; i++)
        if (has_rank(f, before, ranks[i]))
            return mstar_error_set(MSTAR_EPROTO, "fan-in of '%s': source rank %d arrived twice",
                                   f->name, (int)ranks[i]);
    mstar_status st = mstar__vec_reserve(&f->shards, before + n);
    if (st != MSTAR_OK)
        return st;
    for (uint32_t i = 0; i < n; i++) {
        /* The position among this edge's tensors of the same rank. */
        uint32_t index = 0;
        for (uint32_t j = 0; j < i; j++)
            index += ranks[j] == ranks[i];
        mstar__shard s = { ranks[i], index, mstar__buf_retain(bufs[i]), views[i] };
        MSTAR__ASSERT(!has_rank(f, before, ranks[i]));     /* I-13: each source rank once */
        MSTAR__ASSERT_OK(mstar__vec_push(&f->shards, &s)); /* I-11 */
        f->nranks += index == 0;
    }
    return MSTAR_OK;
}

bool mstar__fanin_done(const mstar__fanin *f)
{
    return (int32_t)f->nranks >= f->total_fanin;
}

static int by_rank_then_index(const void *a, const void *b)
{
    const mstar__shard *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* Shards of output i concatenate when dtype, ndim and every dim but the first agree. */
static mstar_status check_same(const mstar__fanin *f, const mstar_tensor *a, const mstar_tensor *b)
{
    bool same = a->dtype == b->dtype && a->ndim == b->ndim && a->ndim >= 1;
    for (int32_t d = 1; same && d < a->ndim; d++)
        same = a->shape[d] == b->shape[d];
    if (!same)
        return mstar_error_set(MSTAR_EPROTO,
                               "fan-in of '%s': shards do not concatenate along "
                               "the shard dim (dtype, rank or other dims differ)",
                               f->name);
    return MSTAR_OK;
}

static mstar_status copy_shard(const mstar__transport_env *env, void *dst, const mstar_tensor *src)
{
    uint64_t n = mstar_tensor_nbytes(src);
    if (n == 0)
        return MSTAR_OK;
    if (env->backend == NULL) {
        memcpy(dst, mstar_tensor_ptr(src), (size_t)n);
        return MSTAR_OK;
    }
    mstar_memcpy_kind kind =
        mstar__transport_on_device(env, src) ? MSTAR_MEMCPY_D2D : MSTAR_MEMCPY_H2D;
    return mstar_memcpy_async(env->h2d, dst, mstar_tensor_ptr(src), (size_t)n, kind);
}

mstar_status mstar__fanin_consolidate(mstar__fanin *f, const mstar__transport_env *env,
                                      mstar__buf ***bufs_out, mstar_tensor **views_out,
                                      uint32_t *n_out)
{
    qsort(f->shards.data, f->shards.len, sizeof(mstar__shard), by_rank_then_index);
    /* Every rank contributes the same count n: shards are then rank-major, n per rank. */
    uint32_t n = 0;
    while (n < f->shards.len && shard(f, n)->rank == shard(f, 0)->rank)
        n++;
    if (n == 0 || f->shards.len % n != 0)
        return mstar_error_set(MSTAR_EPROTO,
                               "fan-in of '%s': source ranks contributed unequal "
                               "tensor counts",
                               f->name);
    size_t nranks = f->shards.len / n;
    for (size_t r = 0; r < nranks; r++)
        for (uint32_t i = 0; i < n; i++)
            if (shard(f, r * n + i)->index != i ||
                shard(f, r * n + i)->rank != shard(f, r * n)->rank)
                return mstar_error_set(MSTAR_EPROTO,
                                       "fan-in of '%s': source ranks contributed "
                                       "unequal tensor counts",
                                       f->name);
    mstar__buf **bufs = calloc(n, sizeof(*bufs));
    mstar_tensor *views = calloc(n, sizeof(*views));
    mstar_status st = (bufs == NULL || views == NULL)
                          ? mstar_error_set(MSTAR_ENOMEM, "fan-in of %u outputs", n)
                          : MSTAR_OK;
    bool queued = false;
    for (uint32_t i = 0; i < n && st == MSTAR_OK; i++) {
        mstar_tensor out = shard(f, i)->view;
        int64_t rows = 0;
        for (size_t r = 0; r < nranks && st == MSTAR_OK; r++) {
            st = check_same(f, &out, &shard(f, r * n + i)->view);
            rows += shard(f, r * n + i)->view.shape[0];
        }
        if (st != MSTAR_OK)
            break;
        out.shape[0] = rows;
        mstar_shape_contiguous_strides(out.ndim, out.shape, out.strides);
        if ((st = mstar__transport_alloc_dest(env, mstar_tensor_nbytes(&out), &bufs[i])) != 0)
            break;
        out.data = bufs[i]->data;
        out.byte_offset = 0;
        out.device = bufs[i]->device;
        views[i] = out;
        uint64_t at = 0;
        for (size_t r = 0; r < nranks && st == MSTAR_OK; r++) {
            const mstar_tensor *src = &shard(f, r * n + i)->view;
            st = copy_shard(env, (char *)bufs[i]->data + at, src);
            queued = queued || env->backend != NULL;
            at += mstar_tensor_nbytes(src);
        }
    }
    if (queued) {
        mstar_status sync = mstar_stream_synchronize(env->h2d);
        if (st == MSTAR_OK && sync != MSTAR_OK)
            st = mstar_error_wrap("fan-in copies of '%s'", f->name);
    }
    if (st != MSTAR_OK) {
        for (uint32_t i = 0; bufs != NULL && i < n; i++)
            mstar__buf_release(bufs[i]);
        free(bufs);
        free(views);
        return st;
    }
    *bufs_out = bufs;
    *views_out = views;
    *n_out = n;
    return MSTAR_OK;
}
