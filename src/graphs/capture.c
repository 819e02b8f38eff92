/*
 * capture.c — capturing a run into a graph whose memory comes from a graph pool, with the cleanup
 * that keeps a failed capture from sinking the captures after it (design.md "Capture", "Pools").
 *
 * What a failed capture leaves behind in the reference — the allocator still routing the thread
 * into the pool, the thread still on the capture stream — maps here to: the stream still
 * capturing, the stream's allocations still routed into the pool, and the capture's live blocks
 * still taken. Every failure path below undoes all three before returning, and keeps the cause's
 * message.
 */
#include "mstar/graphs.h"

#include "core/assert.h"
#include "graphs/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Re-raise `st` with the saved message, prefixed. */
static mstar_status fail_with(mstar_status st, const char *saved, const mstar_graph_pool *pool)
{
    return mstar_error_set(st, "capture into graph pool %s failed: %s", mstar_graph_pool_name(pool),
                           saved);
}

mstar_status mstar_capture_into_graph(mstar_stream *stream, mstar_graph_pool *pool,
                                      mstar_capture_fn run, void *user, unsigned flags,
                                      mstar_graph **out, mstar_capture_stats *stats)
{
    if (stream == NULL || pool == NULL || run == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_capture_into_graph: stream, pool, run and out "
                                             "must not be NULL");
    if (flags & ~(unsigned)MSTAR_CAPTURE_KEEP_GRAPH)
        return mstar_error_set(MSTAR_EINVAL, "mstar_capture_into_graph: unknown flags 0x%x", flags);
    mstar_status st = mstar__pool_route_begin(pool, stream);
    if (st != MSTAR_OK)
        return st;
    st = mstar_stream_begin_capture(stream);
    if (st != MSTAR_OK) {
        char saved[512];
        snprintf(saved, sizeof(saved), "%s", mstar_last_error());
        mstar__pool_route_end(pool, stream, NULL, NULL, NULL, NULL);
        return fail_with(st, saved, pool);
    }
    mstar_status run_st = run(stream, user);
    char saved[512];
    snprintf(saved, sizeof(saved), "%s", mstar_last_error());
    mstar_graph *g = NULL;
    st = mstar_stream_end_capture(stream, &g);
    if (run_st == MSTAR_OK && st != MSTAR_OK) {
        run_st = st;
        snprintf(saved, sizeof(saved), "%s", mstar_last_error());
    }
    if (run_st == MSTAR_OK) {
        run_st = mstar_graph_instantiate(g, (flags & MSTAR_CAPTURE_KEEP_GRAPH) != 0);
        if (run_st != MSTAR_OK)
            snprintf(saved, sizeof(saved), "%s", mstar_last_error());
    }
    if (run_st != MSTAR_OK) {
        mstar_graph_destroy(g);
        MSTAR__ASSERT(!mstar_stream_is_capturing(stream)); /* I-17 */
        mstar__pool_route_end(pool, stream, NULL, NULL, NULL, NULL);
        return fail_with(run_st, saved, pool);
    }
    uint64_t taken = 0, kept = 0, peak = 0;
    st = mstar__pool_route_end(pool, stream, g, &taken, &kept, &peak);
    if (st != MSTAR_OK) {
        mstar_graph_destroy(g);
        return st;
    }
    if (stats != NULL) {
        stats->taken = taken;
        stats->kept = kept;
        stats->peak = peak;
        stats->nodes = mstar_graph_node_count(g);
    }
    *out = g;
    return MSTAR_OK;
}

/* ---- static outputs ---------------------------------------------------------------------------
 */

struct static_run {
    mstar_capture_outputs_fn run;
    void *user;
    const mstar_tensor_map *warm;
    mstar_tensor *buffers; /* one per warm output, outside the pool */
    mstar_tensor_map *outputs;
};

static bool same_layout(const mstar_tensor *a, const mstar_tensor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int32_t i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i])
            return false;
    }
    return true;
}

static mstar_status run_then_copy_out(mstar_stream *stream, void *p)
{
    struct static_run *sr = p;
    mstar_status st = sr->run(stream, sr->user, sr->outputs);
    for (size_t i = 0; st == MSTAR_OK && i < mstar_tensor_map_count(sr->warm); i++) {
        const char *name = mstar_tensor_map_name(sr->warm, i);
        const mstar_tensor *t = mstar_tensor_map_get(sr->outputs, name);
        if (t == NULL)
            st = mstar_error_set(MSTAR_EINVAL, "output '%s' of the warm-up is missing", name);
        else if (!same_layout(t, &sr->buffers[i]))
            st = mstar_error_set(MSTAR_EINVAL,
                                 "output '%s' differs in shape or dtype from its warm-up", name);
        else if (!mstar_tensor_is_contiguous(t))
            st = mstar_error_set(MSTAR_EINVAL, "output '%s' is not contiguous", name);
        else
            st = mstar_memcpy_async(stream, sr->buffers[i].data, mstar_tensor_ptr(t),
                                    (size_t)mstar_tensor_nbytes(t), MSTAR_MEMCPY_D2D);
    }
    /* The run's own outputs are scratch now: freed during the capture, their blocks go back to
     * the pool for later captures instead of being kept by this graph. */
    mstar_tensor_map_clear(sr->outputs);
    return st;
}

mstar_status mstar_capture_with_static_outputs(mstar_stream *stream, mstar_graph_pool *pool,
                                               mstar_capture_outputs_fn run, void *user,
                                               const mstar_tensor_map *warm_outputs, unsigned flags,
                                               mstar_graph **out, mstar_tensor_map *static_outputs,
                                               mstar_capture_stats *stats)
{
    if (stream == NULL || pool == NULL || run == NULL || warm_outputs == NULL || out == NULL ||
        static_outputs == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_capture_with_static_outputs: NULL argument");
    mstar_backend *b = mstar_stream_backend(stream);
    size_t n = mstar_tensor_map_count(warm_outputs);
    mstar_tensor *buffers = calloc(n == 0 ? 1 : n, sizeof(*buffers));
    mstar_tensor_map *outputs = NULL;
    mstar_status st = buffers == NULL ? mstar_error_set(MSTAR_ENOMEM, "out of memory")
                                      : mstar_tensor_map_create(&outputs);
    size_t made = 0;
    for (; st == MSTAR_OK && made < n; made++) {
        const mstar_tensor *w = mstar_tensor_map_at(warm_outputs, made);
        st = mstar_tensor_init(&buffers[made], NULL, w->device, w->dtype, w->ndim, w->shape);
        if (st == MSTAR_OK)
            st = mstar_caching_alloc(b, (size_t)mstar_tensor_nbytes(w), &buffers[made].data);
        if (st != MSTAR_OK)
            break;
    }
    mstar_graph *g = NULL;
    if (st == MSTAR_OK) {
        struct static_run sr = { run, user, warm_outputs, buffers, outputs };
        st = mstar_capture_into_graph(stream, pool, run_then_copy_out, &sr, flags, &g, stats);
    }
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        /* I-20: what outlives the replay is outside the pool the next replay writes */
        MSTAR__ASSERT(!mstar__pool_owns(pool, buffers[i].data));
        st = mstar__vec_push(&g->caching_blocks, &buffers[i].data);
        if (st == MSTAR_OK) {
            mstar_tensor view = buffers[i];
            buffers[i].data = NULL; /* the graph owns it now */
            st =
                mstar_tensor_map_set(static_outputs, mstar_tensor_map_name(warm_outputs, i), &view);
        }
    }
    if (st == MSTAR_OK)
        *out = g;
    else
        mstar_graph_destroy(g); /* gives back the buffers it already owns */
    for (size_t i = 0; i < made && buffers != NULL; i++) {
        if (buffers[i].data != NULL)
            mstar_caching_free(b, buffers[i].data);
    }
    free(buffers);
    mstar_tensor_map_destroy(outputs);
    return st;
}
