/*
 * sizing.c — size_captures and size_lent_captures (design.md "Planning"): what each of
 * a runner's buckets would cost, measured before anything is captured for real.
 *
 * Warm-ups come first, for every bucket and slot, so that per-slot state (workspaces, plan
 * buffers) is spent before any free-memory reading. Then each walk's largest bucket is captured
 * once and thrown away: the bytes still live at its end are the walk's `kept`, those plus the
 * scratch it needed are its `graph` (scratch_of), and the graph feeds the walk's
 * ExecutableMemory. The pool is trimmed after every throwaway, so each throwaway's `taken` is its
 * whole footprint and free memory read later does not count segments nothing uses.
 */
#include "graphs/capturer.h"

#include "graphs/buckets.h"
#include "graphs/pool.h"
#include "ranks/rank_group.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct walk {
    const char *name;
    size_t largest; /* its first bucket in capture order */
    mstar_exec_memory *em;
};

struct mstar_capture_sizing {
    mstar__capturer c;
    mstar_rank_group *barrier;
    mstar_bucket_cost *costs; /* capture order */
    bool *own;                /* the cost is the bucket's own throwaway's, not its walk's */
    size_t n;
    struct walk *walks;
    size_t nwalks;
};

static mstar_status meet(mstar_capture_sizing *s)
{
    return s->barrier == NULL ? MSTAR_OK
                              : mstar_agree_across_ranks(s->barrier, NULL, 0, MSTAR_REDUCE_MIN);
}

static const char *name_of(const mstar_bucket_key *key, char *buf)
{
    return mstar_bucket_key_format(key, buf, MSTAR_BUCKET_NAME_MAX);
}

/*
 * What a capture needs beyond what it keeps (the planner's graph − kept): the shared segments it
 * grew — its scratch, which later captures of the pool reuse — and one segment more. That one is
 * for the small blocks graphs keep: kept counts them by their bytes, but they share kept
 * segments, the last of them partly empty. Like the largest extra it is the pool's once, so it
 * rides on the extra; without it the plan could fall up to a segment short, and it must err high,
 * since the pool grows while memory is tight.
 */
static uint64_t scratch_of(const mstar_capture_stats *stats, uint64_t kept_grown)
{
    uint64_t shared = stats->taken > kept_grown ? stats->taken - kept_grown : 0;
    return shared + MSTAR__SEGMENT_ROUND;
}

/* One throwaway capture of bucket i: its graph, kept and outside bytes; with `em`, also the
 * walk's executable-memory measurement on the kept graph. `flags` adds to KEEP_GRAPH (lent
 * sizing: MSTAR__CAPTURE_NO_WARMUP). The caller met the barrier, if one is needed. */
static mstar_status throwaway(mstar_capture_sizing *s, size_t i, mstar_exec_memory *em,
                              unsigned flags)
{
    mstar_graph_pool *pool = s->c.ops->pool(s->c.r);
    mstar_backend *backend = mstar_graph_pool_backend(pool);
    mstar_capture_cost *c = &s->costs[i].cost;
    uint64_t free_before, free_after, total;
    /* Warm-ups leave cached segments behind; the capture may need that memory. */
    mstar_status st = mstar_caching_trim(backend, NULL);
    if (st == MSTAR_OK)
        st = mstar_graph_pool_trim(pool, NULL);
    if (st == MSTAR_OK)
        st = mstar_mem_info(backend, &free_before, &total);
    mstar_graph *g = NULL;
    mstar_capture_stats stats;
    uint64_t kept_before = mstar__pool_reserved_kept(pool);
    if (st == MSTAR_OK)
        st = s->c.ops->throwaway(s->c.r, &s->costs[i].key, MSTAR_CAPTURE_KEEP_GRAPH | flags, &g,
                                 &stats);
    /* The throwaway's own warm-ups cached segments again; they are not the graph's. */
    if (st == MSTAR_OK)
        st = mstar_caching_trim(backend, NULL);
    if (st == MSTAR_OK)
        st = mstar_mem_info(backend, &free_after, &total);
    if (st == MSTAR_OK && em != NULL)
        st = mstar_exec_memory_measure(em, g);
    double per_node = 0;
    if (st == MSTAR_OK) {
        uint64_t drop = free_before > free_after ? free_before - free_after : 0;
        c->has_graph = true;
        c->kept = stats.kept;
        c->graph = stats.kept + scratch_of(&stats, mstar__pool_reserved_kept(pool) - kept_before);
        c->outside = drop > stats.taken ? drop - stats.taken : 0;
        const mstar_exec_memory *walk_em = s->walks[c->executable].em;
        if (mstar_exec_memory_per_node(walk_em, &per_node))
            c->outside = (uint64_t)ceil(per_node * (double)stats.nodes);
        s->own[i] = true;
    }
    mstar_graph_destroy(g);
    if (g != NULL && st == MSTAR_OK)
        st = mstar_graph_pool_trim(pool, NULL);
    return st;
}

static mstar_status find_walks(mstar_capture_sizing *s)
{
    s->walks = calloc(s->n ? s->n : 1, sizeof(*s->walks));
    if (s->walks == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "size_captures: out of memory");
    for (size_t i = 0; i < s->n; i++) {
        const char *walk = s->costs[i].key.graph_walk;
        size_t w = 0;
        while (w < s->nwalks && strcmp(s->walks[w].name, walk) != 0)
            w++;
        if (w == s->nwalks) {
            mstar_status st = mstar_exec_memory_create(&s->walks[w].em);
            if (st != MSTAR_OK)
                return st;
            s->walks[w].name = walk;
            s->walks[w].largest = i;
            s->nwalks++;
        }
        s->costs[i].cost.executable = (int32_t)w;
    }
    return MSTAR_OK;
}

static mstar_status warm_all(mstar_capture_sizing *s)
{
    for (size_t i = 0; i < s->n; i++) {
        mstar_status st = meet(s);
        if (st != MSTAR_OK)
            return st;
        uint64_t peak = 0;
        st = s->c.ops->warm(s->c.r, &s->costs[i].key, &peak);
        if (st == MSTAR_OK) {
            s->costs[i].cost.peak = peak;
            continue;
        }
        /* An error of the bucket, not of the device: it simply cannot be planned. */
        char name[MSTAR_BUCKET_NAME_MAX];
        mstar_log(MSTAR_LOG_WARN, "size_captures(%s): %s cannot be warmed up, so not captured: %s",
                  s->c.ops->name(s->c.r), name_of(&s->costs[i].key, name), mstar_last_error());
        s->costs[i].cost.has_graph = false;
        s->costs[i].cost.peak = 0;
        s->own[i] = true; /* nothing to size later either */
    }
    return MSTAR_OK;
}

/*
 * Bucket i, not captured on its own, takes its walk's largest bucket's cost as an upper bound —
 * except for what it keeps, where its own last warm-up says better. A graph keeps what its
 * forward returns (the outputs, which scale with the batch), so pricing every bucket at the
 * largest's kept bytes summed, over 7 batch sizes and 2 slots, 14 times the largest's output
 * where the captures kept 2·(1 + 2 + … + 64)/64 ≈ 4 times it: the pool predicted 228 MiB for
 * 66 MiB taken on the H200 when every bucket fitted. The warm-up just before sizing ran the
 * same forward on the same shapes, and what it had not freed when the forward returned is what
 * the capture keeps (lifetimes.h), charged as the pool charges it; its scratch beyond that
 * (graph − kept) stays the largest's, since the pool holds only the largest scratch anyway.
 */
static void take_walks_cost(mstar_capture_sizing *s, size_t i, const mstar_capture_cost *big)
{
    mstar_capture_cost *c = &s->costs[i].cost;
    c->has_graph = big->has_graph;
    c->graph = big->graph;
    c->kept = big->kept;
    c->outside = big->outside;
    uint64_t kept;
    if (big->has_graph && s->c.ops->kept_hint != NULL &&
        s->c.ops->kept_hint(s->c.r, &s->costs[i].key, &kept) && kept < big->kept) {
        c->kept = kept;
        c->graph = kept + (big->graph - big->kept);
    }
}

/* Each walk's largest bucket, thrown away; the rest of the walk takes its numbers. The capture
 * runs no warm-up: warm_all just ran them, and left what the capture needs in the bucket. */
static mstar_status size_walks(mstar_capture_sizing *s)
{
    for (size_t w = 0; w < s->nwalks; w++) {
        size_t big = s->walks[w].largest;
        /* Every rank meets here, whatever its own warm-ups did. */
        mstar_status st = meet(s);
        if (st != MSTAR_OK)
            return st;
        if (!s->own[big])
            st = throwaway(s, big, s->walks[w].em, MSTAR__CAPTURE_NO_WARMUP);
        if (st != MSTAR_OK) {
            char name[MSTAR_BUCKET_NAME_MAX];
            mstar_log(MSTAR_LOG_WARN,
                      "size_captures(%s): the throwaway capture of %s failed, so walk %s is not "
                      "captured: %s",
                      s->c.ops->name(s->c.r), name_of(&s->costs[big].key, name), s->walks[w].name,
                      mstar_last_error());
            s->costs[big].cost.has_graph = false;
            s->own[big] = true;
        }
        for (size_t i = big + 1; i < s->n; i++) {
            if ((size_t)s->costs[i].cost.executable == w && !s->own[i])
                take_walks_cost(s, i, &s->costs[big].cost);
        }
    }
    return MSTAR_OK;
}

mstar_status mstar__size_captures(mstar__capturer c, mstar_rank_group *barrier,
                                  mstar_capture_sizing **out)
{
    mstar_capture_sizing *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "size_captures: out of memory");
    s->c = c;
    s->barrier = barrier;
    const mstar_bucket_key *keys = c.ops->buckets(c.r, &s->n);
    s->costs = calloc(s->n ? s->n : 1, sizeof(*s->costs));
    s->own = calloc(s->n ? s->n : 1, sizeof(*s->own));
    mstar_status st = s->costs == NULL || s->own == NULL
                          ? mstar_error_set(MSTAR_ENOMEM, "size_captures: out of memory")
                          : MSTAR_OK;
    for (size_t i = 0; st == MSTAR_OK && i < s->n; i++) {
        s->costs[i].key = keys[i];
        s->costs[i].config_idx = c.ops->config_idx(c.r, &keys[i]);
        s->costs[i].cost.slots = (uint32_t)c.ops->num_slots(c.r);
    }
    if (st == MSTAR_OK)
        st = find_walks(s);
    if (st == MSTAR_OK)
        st = warm_all(s);
    if (st == MSTAR_OK)
        st = size_walks(s);
    if (st != MSTAR_OK) {
        mstar_capture_sizing_destroy(s);
        return mstar_error_wrap("size_captures(%s)", c.ops->name(c.r));
    }
    *out = s;
    return MSTAR_OK;
}

mstar_status mstar_size_captures(mstar_graph_runner *runner, mstar_rank_group *barrier,
                                 mstar_capture_sizing **out)
{
    if (runner == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "size_captures: %s is NULL",
                               runner == NULL ? "runner" : "out");
    return mstar__size_captures(mstar__capturer_whole(runner), barrier, out);
}

mstar_status mstar_size_piecewise_captures(mstar_piecewise_runner *runner,
                                           mstar_rank_group *barrier, mstar_capture_sizing **out)
{
    if (runner == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "size_captures: %s is NULL",
                               runner == NULL ? "runner" : "out");
    return mstar__size_captures(mstar__capturer_piecewise(runner), barrier, out);
}

/*
 * Every bucket this rank sized but did not capture on its own yet, captured once and thrown away
 * (design.md "Planning"). No forward and no barrier: sizing's warm-ups already ran every forward
 * and left what the capture needs in the bucket (lifetimes, output layout), and a capture records a
 * collective without running it. So ranks whose own lists differ (one warmed a bucket another
 * could not) each capture their own, and none waits on another or runs a collective alone.
 */
mstar_status mstar_size_lent_captures(mstar_capture_sizing *s, bool wanted)
{
    if (s == NULL)
        return mstar_error_set(MSTAR_EINVAL, "size_lent_captures: sizing is NULL");
    for (size_t i = 0; wanted && i < s->n; i++) {
        if (s->own[i])
            continue; /* sized already, or not capturable */
        mstar_status st = throwaway(s, i, NULL, MSTAR__CAPTURE_NO_WARMUP);
        if (st != MSTAR_OK) {
            char name[MSTAR_BUCKET_NAME_MAX];
            mstar_log(MSTAR_LOG_WARN,
                      "size_lent_captures(%s): the throwaway capture of %s failed, so it is not "
                      "captured: %s",
                      s->c.ops->name(s->c.r), name_of(&s->costs[i].key, name), mstar_last_error());
            s->costs[i].cost.has_graph = false;
            s->own[i] = true;
        }
    }
    return MSTAR_OK;
}

mstar_bucket_cost *mstar_capture_sizing_costs(mstar_capture_sizing *s, size_t *n)
{
    *n = s->n;
    return s->costs;
}

size_t mstar_capture_sizing_walks(const mstar_capture_sizing *s)
{
    return s->nwalks;
}

mstar_exec_memory *mstar_capture_sizing_executable(const mstar_capture_sizing *s, size_t walk)
{
    return walk < s->nwalks ? s->walks[walk].em : NULL;
}

void mstar_capture_sizing_release(mstar_capture_sizing *s)
{
    for (size_t w = 0; s != NULL && w < s->nwalks; w++)
        mstar_exec_memory_release(s->walks[w].em);
}

void mstar_capture_sizing_destroy(mstar_capture_sizing *s)
{
    if (s == NULL)
        return;
    for (size_t w = 0; s->walks != NULL && w < s->nwalks; w++)
        mstar_exec_memory_destroy(s->walks[w].em);
    free(s->walks);
    free(s->costs);
    free(s->own);
    free(s);
}
