/*
 * pool.c — graph pools: the project's own allocator with the reference pool semantics.
 *
 * A pool is a block-caching allocator (alloc.c) that a capture routes its stream's mstar_alloc
 * calls into:
 *   1. allocations made while capturing into a pool come from it;
 *   2. blocks freed during a capture go back to it at once, for the rest of this capture and for
 *      later captures (the graphs of one pool never replay concurrently, so reusing another
 *      graph's scratch is safe);
 *   3. blocks live when the capture ends belong to the graph until it is destroyed;
 *   4. a failed capture's live blocks go back to the pool.
 * A block the capture's warm-up did not free by the end of its forward (lifetimes.h) comes from
 * the pool's kept segments, every other block from its shared ones, so kept outputs never split
 * the scratch later captures reuse. So a pool's footprint is what every graph keeps plus the
 * largest single transient, and the bytes each capture took (reserved growth) and kept (live at
 * its end) are the inputs capture planning needs. One pool per node, shared by its whole-forward
 * runner and piecewise regions. The pool is reference counted: its creator and each graph owning
 * blocks hold a reference.
 */
#include "graphs/pool.h"

#include "core/assert.h"
#include "mstar/graphs.h"

#include <stdlib.h>
#include <string.h>

struct mstar_graph_pool {
    mstar_backend *backend;
    char *name;
    mstar__allocator alloc;
    atomic_int refs;
    pthread_mutex_t lock;    /* capture routing */
    mstar_stream *capturing; /* the stream routed here now, or NULL */
    uint64_t capture_id;     /* tag of the blocks the running capture allocates */
    uint64_t next_capture_id;
    uint64_t start_reserved;
    uint64_t start_allocated;
};

static void release_graph_blocks(mstar_graph *g);

/* How the device layer reaches a pool (device/backend.h): mstar_alloc and mstar_free during a
 * capture, mstar_free of a pool block after it, and mstar_graph_destroy of a graph owning blocks.
 */
static const mstar__pool_hooks pool_hooks = {
    .capture_alloc = mstar__pool_capture_alloc,
    .capture_free = mstar__pool_capture_free,
    .owns = mstar__pool_owns,
    .free_outside_capture = mstar__pool_free_outside_capture,
    .release_graph_blocks = release_graph_blocks,
};

mstar_status mstar_graph_pool_create(mstar_backend *b, const char *name, mstar_graph_pool **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_pool_create: backend and out must not be "
                                             "NULL");
    if (name == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_pool_create: name is NULL");
    mstar_status st = mstar_name_validate(name, strlen(name), "graph pool name");
    if (st != MSTAR_OK)
        return st;
    mstar_graph_pool *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->name = strdup(name)) == NULL) {
        free(p);
        return mstar_error_set(MSTAR_ENOMEM, "mstar_graph_pool_create: out of memory");
    }
    p->backend = b;
    mstar__allocator_init(&p->alloc, b);
    atomic_init(&p->refs, 1);
    pthread_mutex_init(&p->lock, NULL);
    p->next_capture_id = 1;
    st = mstar__backend_add_pool(b, p, &pool_hooks);
    if (st != MSTAR_OK) {
        mstar__allocator_fini(&p->alloc);
        pthread_mutex_destroy(&p->lock);
        free(p->name);
        free(p);
        return st;
    }
    *out = p;
    return MSTAR_OK;
}

static void pool_unref(mstar_graph_pool *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    mstar__backend_remove_pool(p->backend, p);
    size_t leaked = mstar__allocator_fini(&p->alloc);
    if (leaked != 0)
        mstar_log(MSTAR_LOG_WARN, "graph pool %s released with %zu live blocks", p->name, leaked);
    pthread_mutex_destroy(&p->lock);
    free(p->name);
    free(p);
}

void mstar_graph_pool_destroy(mstar_graph_pool *p)
{
    if (p != NULL)
        pool_unref(p);
}

const char *mstar_graph_pool_name(const mstar_graph_pool *p)
{
    return p->name;
}

mstar_backend *mstar_graph_pool_backend(const mstar_graph_pool *p)
{
    return p->backend;
}

void mstar_graph_pool_stats(mstar_graph_pool *p, mstar_alloc_stats *out)
{
    mstar__allocator_stats(&p->alloc, out);
}

mstar_status mstar_graph_pool_trim(mstar_graph_pool *p, uint64_t *released)
{
    if (p == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_pool_trim: pool is NULL");
    pthread_mutex_lock(&p->lock);
    bool capturing = p->capturing != NULL;
    pthread_mutex_unlock(&p->lock);
    if (capturing)
        return mstar_error_set(MSTAR_ESTATE, "graph pool %s is capturing; trim it after", p->name);
    uint64_t bytes = mstar__allocator_trim(&p->alloc);
    if (released != NULL)
        *released = bytes;
    return MSTAR_OK;
}

mstar_status mstar__pool_capture_alloc(mstar_graph_pool *p, size_t nbytes, mstar__seg_kind kind,
                                       void **out)
{
    MSTAR__ASSERT(p->capturing != NULL); /* I-18: only a capture allocates from its pool */
    return mstar__allocator_alloc(&p->alloc, nbytes, p->capture_id, kind, out);
}

mstar_status mstar__pool_capture_free(mstar_graph_pool *p, void *ptr)
{
    mstar_status st = mstar__allocator_free(&p->alloc, ptr, false);
    if (st != MSTAR_ENOENT)
        return st;
    if (mstar__allocator_owns(&p->backend->caching, ptr))
        return mstar_error_set(MSTAR_ESTATE,
                               "mstar_free: %p came from the caching allocator and the stream is "
                               "capturing into graph pool %s; free it after the capture",
                               ptr, p->name);
    return mstar_error_set(MSTAR_EINVAL,
                           "mstar_free: %p is not a live block of graph pool %s (the capturing "
                           "stream's pool)",
                           ptr, p->name);
}

bool mstar__pool_owns(mstar_graph_pool *p, const void *ptr)
{
    return mstar__allocator_owns(&p->alloc, ptr);
}

uint64_t mstar__pool_reserved_kept(mstar_graph_pool *p)
{
    return mstar__allocator_reserved_kept(&p->alloc);
}

mstar_status mstar__pool_free_outside_capture(mstar_graph_pool *p, void *ptr)
{
    return mstar__allocator_free(&p->alloc, ptr, false);
}

mstar_status mstar__pool_route_begin(mstar_graph_pool *p, mstar_stream *s)
{
    if (s->backend != p->backend)
        return mstar_error_set(MSTAR_EINVAL,
                               "graph pool %s belongs to another backend than the "
                               "capture stream",
                               p->name);
    pthread_mutex_lock(&p->lock);
    if (p->capturing != NULL) {
        pthread_mutex_unlock(&p->lock);
        return mstar_error_set(MSTAR_ESTATE,
                               "graph pool %s is already capturing on another stream; the graphs "
                               "of one pool capture one at a time",
                               p->name);
    }
    p->capturing = s;
    p->capture_id = p->next_capture_id++;
    pthread_mutex_unlock(&p->lock);
    mstar_alloc_stats stats;
    mstar__allocator_reset_peak(&p->alloc);
    mstar__allocator_stats(&p->alloc, &stats);
    p->start_reserved = stats.reserved;
    p->start_allocated = stats.allocated;
    s->pool = p;
    s->pool_hooks = &pool_hooks;
    return MSTAR_OK;
}

mstar_status mstar__pool_route_end(mstar_graph_pool *p, mstar_stream *s, mstar_graph *g,
                                   uint64_t *taken, uint64_t *kept, uint64_t *peak)
{
    mstar_status st = MSTAR_OK;
    s->pool = NULL;
    s->pool_hooks = NULL;
    mstar_alloc_stats stats;
    mstar__allocator_stats(&p->alloc, &stats);
    if (g != NULL) {
        uint64_t bytes = 0;
        st = mstar__allocator_adopt(&p->alloc, p->capture_id, &g->pool_blocks, &bytes);
        if (g->pool_blocks.len != 0) {
            atomic_fetch_add(&p->refs, 1);
            g->pool = p;
            g->pool_hooks = &pool_hooks;
        }
        if (taken != NULL)
            *taken = stats.reserved - p->start_reserved;
        if (kept != NULL)
            *kept = bytes;
        if (peak != NULL)
            *peak = stats.peak - p->start_allocated;
    }
    if (g == NULL || st != MSTAR_OK) {
        /* Blocks adopted before a failure are released with the graph; the rest go back now. */
        mstar__allocator_release_tag(&p->alloc, p->capture_id);
    }
    pthread_mutex_lock(&p->lock);
    p->capturing = NULL;
    p->capture_id = 0;
    pthread_mutex_unlock(&p->lock);
    return st;
}

static void release_graph_blocks(mstar_graph *g)
{
    for (size_t i = 0; i < g->pool_blocks.len; i++) {
        void *ptr = *(void **)mstar__vec_at(&g->pool_blocks, i);
        mstar__allocator_free(&g->pool->alloc, ptr, true);
    }
    g->pool_blocks.len = 0;
    pool_unref(g->pool);
    g->pool = NULL;
    g->pool_hooks = NULL;
}
