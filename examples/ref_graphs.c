/*
 * ref_graphs.c — capture and replay of the reference step's buckets (see ref_graphs.h).
 *
 * A capture routes the stream's allocations into the graph pool for its duration (the library's
 * pool routing, graphs/pool.h), so the forward's temporaries become pool blocks the graph keeps
 * or hands back for later captures, exactly as the runner's capture does.
 */
#include "ref_graphs.h"

#include "graphs/pool.h"

#include <stdlib.h>
#include <string.h>

enum { WARMUPS = 2 };

struct ref_graphs {
    ref_step *step;
    mstar_backend *backend;
    mstar_graph_pool *pool;
    ref_bucket *buckets; /* largest first */
    int32_t num_buckets, num_slots, next_slot;
    mstar_graph **graphs; /* [num_buckets * num_slots] */
    int64_t *rows;        /* [max rows] a step's handles */
    int32_t *spans;
    uint64_t taken, kept;
};

static int bucket_desc(const void *a, const void *b)
{
    const ref_bucket *x = a, *y = b;
    if (x->rows != y->rows)
        return x->rows > y->rows ? -1 : 1;
    if (x->tokens != y->tokens)
        return x->tokens > y->tokens ? -1 : 1;
    return 0;
}

/* Record one forward of the bucket into a graph, allocations from the pool. */
static mstar_status capture_one(ref_graphs *g, const ref_bucket *b, int32_t slot, mstar_stream *s,
                                mstar_graph **out)
{
    mstar_status rc = mstar__pool_route_begin(g->pool, s);
    if (rc != MSTAR_OK)
        return rc;
    mstar_graph *graph = NULL;
    rc = mstar_stream_begin_capture(s);
    if (rc == MSTAR_OK) {
        rc = ref_step_forward(g->step, slot, b->rows, b->tokens, s);
        mstar_status end = mstar_stream_end_capture(s, &graph);
        rc = rc != MSTAR_OK ? rc : end;
    }
    uint64_t taken = 0, kept = 0;
    mstar_status routed =
        mstar__pool_route_end(g->pool, s, rc == MSTAR_OK ? graph : NULL, &taken, &kept, NULL);
    rc = rc != MSTAR_OK ? rc : routed;
    if (rc == MSTAR_OK)
        rc = mstar_graph_instantiate(graph, false);
    if (rc != MSTAR_OK) {
        mstar_graph_destroy(graph);
        return mstar_error_wrap("capture of %d rows, %d tokens, slot %d", b->rows, b->tokens, slot);
    }
    g->taken += taken;
    g->kept += kept;
    *out = graph;
    return MSTAR_OK;
}

/* Warm the bucket up on padding rows (each warm-up re-plans, so each sees the same shapes), then
 * capture it. */
static mstar_status warm_and_capture(ref_graphs *g, const ref_bucket *b, int32_t slot,
                                     mstar_stream *s, mstar_graph **out)
{
    for (int32_t i = 0; i < b->rows; i++) {
        g->rows[i] = -1 - i;
        g->spans[i] = b->tokens / b->rows + (i == 0 ? b->tokens % b->rows : 0);
    }
    mstar_status rc = ref_step_declare(g->step, g->rows, g->spans, b->rows);
    for (int w = 0; rc == MSTAR_OK && w <= WARMUPS; w++) {
        rc = ref_step_prepare(g->step, slot, b->rows, b->tokens, false, s, NULL);
        if (rc == MSTAR_OK && w < WARMUPS)
            rc = ref_step_forward(g->step, slot, b->rows, b->tokens, s);
        if (rc == MSTAR_OK)
            rc = mstar_stream_synchronize(s);
    }
    if (rc != MSTAR_OK)
        return rc;
    return capture_one(g, b, slot, s, out);
}

mstar_status ref_graphs_capture(ref_step *step, mstar_backend *backend, mstar_stream *stream,
                                const ref_bucket *buckets, int32_t num_buckets, int32_t num_slots,
                                const char *pool_name, ref_graphs **out)
{
    if (step == NULL || buckets == NULL || num_buckets < 1 || num_slots < 1 || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "reference graphs: need a step, %d >= 1 buckets and "
                               "%d >= 1 slots",
                               num_buckets, num_slots);
    ref_graphs *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference graphs");
    g->step = step;
    g->backend = backend;
    g->num_buckets = num_buckets;
    g->num_slots = num_slots;
    g->buckets = malloc((size_t)num_buckets * sizeof(*g->buckets));
    g->graphs = calloc((size_t)num_buckets * (size_t)num_slots, sizeof(*g->graphs));
    int32_t max_rows = 0;
    for (int32_t i = 0; i < num_buckets; i++)
        max_rows = buckets[i].rows > max_rows ? buckets[i].rows : max_rows;
    g->rows = malloc((size_t)max_rows * sizeof(*g->rows));
    g->spans = malloc((size_t)max_rows * sizeof(*g->spans));
    mstar_status rc = MSTAR_OK;
    if (g->buckets == NULL || g->graphs == NULL || g->rows == NULL || g->spans == NULL)
        rc = mstar_error_set(MSTAR_ENOMEM, "reference graphs: %d buckets", num_buckets);
    if (rc == MSTAR_OK) {
        memcpy(g->buckets, buckets, (size_t)num_buckets * sizeof(*buckets));
        qsort(g->buckets, (size_t)num_buckets, sizeof(*g->buckets), bucket_desc);
        rc = mstar_graph_pool_create(backend, pool_name, &g->pool);
    }
    for (int32_t i = 0; rc == MSTAR_OK && i < num_buckets; i++) {
        for (int32_t s = 0; rc == MSTAR_OK && s < num_slots; s++)
            rc = warm_and_capture(g, &g->buckets[i], s, stream,
                                  &g->graphs[(size_t)i * (size_t)num_slots + (size_t)s]);
    }
    if (rc != MSTAR_OK) {
        ref_graphs_destroy(g);
        return mstar_error_wrap("reference graphs");
    }
    *out = g;
    return MSTAR_OK;
}

void ref_graphs_destroy(ref_graphs *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; g->graphs != NULL && i < (size_t)g->num_buckets * (size_t)g->num_slots; i++)
        mstar_graph_destroy(g->graphs[i]);
    mstar_graph_pool_destroy(g->pool);
    free(g->graphs);
    free(g->buckets);
    free(g->rows);
    free(g->spans);
    free(g);
}

int32_t ref_graphs_select(const ref_graphs *g, int32_t rows, int32_t tokens)
{
    int32_t best = -1;
    for (int32_t i = 0; i < g->num_buckets; i++) {
        const ref_bucket *b = &g->buckets[i];
        if (b->rows < rows || b->tokens < tokens)
            continue;
        if (best < 0 || b->tokens < g->buckets[best].tokens ||
            (b->tokens == g->buckets[best].tokens && b->rows < g->buckets[best].rows))
            best = i;
    }
    return best;
}

const ref_bucket *ref_graphs_bucket(const ref_graphs *g, int32_t index)
{
    return &g->buckets[index];
}

int32_t ref_graphs_next_slot(ref_graphs *g)
{
    int32_t slot = g->next_slot;
    g->next_slot = (g->next_slot + 1) % g->num_slots;
    return slot;
}

mstar_status ref_graphs_launch(ref_graphs *g, int32_t index, int32_t slot, mstar_stream *stream)
{
    if (index < 0 || index >= g->num_buckets || slot < 0 || slot >= g->num_slots)
        return mstar_error_set(MSTAR_ERANGE, "reference graphs: bucket %d slot %d, not captured",
                               index, slot);
    return mstar_graph_launch(g->graphs[(size_t)index * (size_t)g->num_slots + (size_t)slot],
                              stream);
}

mstar_status ref_graphs_step(ref_graphs *g, int32_t index, int32_t slot, const int64_t *rows,
                             const int32_t *spans, int32_t n, const int32_t *tokens,
                             mstar_stream *stream)
{
    if (index < 0 || index >= g->num_buckets)
        return mstar_error_set(MSTAR_ERANGE, "reference graphs: bucket %d, not captured", index);
    const ref_bucket *b = &g->buckets[index];
    if (n < 1 || n > b->rows)
        return mstar_error_set(MSTAR_ERANGE, "reference graphs: %d rows on a bucket of %d", n,
                               b->rows);
    int32_t total = 0;
    for (int32_t i = 0; i < b->rows; i++) {
        g->rows[i] = i < n ? rows[i] : -1 - i;
        g->spans[i] = i < n ? spans[i] : 0;
        total += g->spans[i];
    }
    mstar_status rc = ref_step_declare(g->step, g->rows, g->spans, b->rows);
    if (rc == MSTAR_OK)
        rc = ref_step_prepare(g->step, slot, b->rows, b->tokens, false, stream, NULL);
    if (rc == MSTAR_OK)
        rc = ref_step_stage(g->step, tokens, total, stream);
    if (rc == MSTAR_OK)
        rc = ref_graphs_launch(g, index, slot, stream);
    if (rc == MSTAR_OK)
        rc = ref_step_commit(g->step);
    return rc;
}

void ref_graphs_pool_bytes(const ref_graphs *g, uint64_t *taken, uint64_t *kept)
{
    *taken = g->taken;
    *kept = g->kept;
}
