/*
 * capturer.c — the whole-forward and the piecewise runner behind one table (capturer.h). Each
 * entry forwards to the runner's own call; the few values no public call gives (the pool, the
 * step runner, a bucket's config) come from the runners' structs, which live in this directory.
 */
#include "graphs/capturer.h"

#include "graphs/piecewise.h"
#include "graphs/runner.h"

/* ---- the whole-forward runner ---------------------------------------------------------------- */

static const char *w_name(const void *r)
{
    return ((const mstar_graph_runner *)r)->name;
}

static mstar_graph_pool *w_pool(const void *r)
{
    return ((const mstar_graph_runner *)r)->pool;
}

static mstar_step_runner *w_step_runner(const void *r)
{
    return ((const mstar_graph_runner *)r)->sr;
}

static int32_t w_num_slots(const void *r)
{
    return mstar_graph_runner_num_slots(r);
}

static const mstar_bucket_key *w_buckets(const void *r, size_t *n)
{
    return mstar_graph_runner_buckets(r, n);
}

static uint32_t w_config_idx(const void *r, const mstar_bucket_key *key)
{
    return mstar__buckets_find(&((const mstar_graph_runner *)r)->set, key)->config_idx;
}

static mstar_status w_prepare(void *r)
{
    return mstar_graph_runner_prepare_for_capture(r, NULL, NULL);
}

static mstar_status w_warm(void *r, const mstar_bucket_key *key, uint64_t *peak)
{
    return mstar_graph_runner_warm_bucket(r, key, peak);
}

static mstar_status w_throwaway(void *r, const mstar_bucket_key *key, unsigned flags,
                                mstar_graph **out, mstar_capture_stats *stats)
{
    return mstar_graph_runner_capture_throwaway(r, key, flags, out, stats);
}

static mstar_status w_capture(void *r, const mstar_bucket_key *planned, size_t n)
{
    return mstar_graph_runner_warmup_and_capture(r, planned, n);
}

static const mstar_bucket_key *w_dropped(const void *r, size_t *n)
{
    return mstar_graph_runner_dropped_buckets(r, n);
}

static mstar_status w_drop(void *r, const mstar_bucket_key *key)
{
    return mstar_graph_runner_drop_bucket(r, key);
}

static mstar_dummy_rows *w_rows(void *r)
{
    return mstar_graph_runner_dummy_rows(r);
}

static bool w_kept_hint(const void *r, const mstar_bucket_key *key, uint64_t *bytes)
{
    const struct bucket *b = mstar__buckets_find(&((const mstar_graph_runner *)r)->set, key);
    return b != NULL && b->warmed && mstar__lifetimes_kept_bytes(&b->hints, bytes);
}

static const mstar__capturer_ops whole_ops = {
    w_name, w_pool,      w_step_runner, w_num_slots, w_buckets, w_config_idx, w_prepare,
    w_warm, w_throwaway, w_capture,     w_dropped,   w_drop,    w_rows,       w_kept_hint,
};

mstar__capturer mstar__capturer_whole(mstar_graph_runner *runner)
{
    return (mstar__capturer){ &whole_ops, runner };
}

/* ---- the piecewise runner -------------------------------------------------------------------- */

static const char *p_name(const void *r)
{
    return ((const mstar_piecewise_runner *)r)->who;
}

static mstar_graph_pool *p_pool(const void *r)
{
    return ((const mstar_piecewise_runner *)r)->pool;
}

static mstar_step_runner *p_step_runner(const void *r)
{
    return ((const mstar_piecewise_runner *)r)->sr;
}

static int32_t p_num_slots(const void *r)
{
    return mstar_piecewise_runner_num_slots(r);
}

static const mstar_bucket_key *p_buckets(const void *r, size_t *n)
{
    return mstar_piecewise_runner_buckets(r, n);
}

static uint32_t p_config_idx(const void *r, const mstar_bucket_key *key)
{
    return mstar__buckets_find(&((const mstar_piecewise_runner *)r)->set, key)->config_idx;
}

static mstar_status p_prepare(void *r)
{
    return mstar_piecewise_runner_prepare_for_capture(r, NULL, NULL);
}

static mstar_status p_warm(void *r, const mstar_bucket_key *key, uint64_t *peak)
{
    return mstar_piecewise_runner_warm_bucket(r, key, peak);
}

static mstar_status p_throwaway(void *r, const mstar_bucket_key *key, unsigned flags,
                                mstar_graph **out, mstar_capture_stats *stats)
{
    return mstar_piecewise_runner_capture_throwaway(r, key, flags, out, stats);
}

static mstar_status p_capture(void *r, const mstar_bucket_key *planned, size_t n)
{
    return mstar_piecewise_runner_warmup_and_capture(r, planned, n);
}

static const mstar_bucket_key *p_dropped(const void *r, size_t *n)
{
    return mstar_piecewise_runner_dropped_shapes(r, n);
}

static mstar_status p_drop(void *r, const mstar_bucket_key *key)
{
    return mstar_piecewise_runner_drop_shape(r, key);
}

static mstar_dummy_rows *p_rows(void *r)
{
    return mstar_piecewise_runner_dummy_rows(r);
}

static const mstar__capturer_ops piecewise_ops = {
    p_name, p_pool,      p_step_runner, p_num_slots, p_buckets, p_config_idx, p_prepare,
    p_warm, p_throwaway, p_capture,     p_dropped,   p_drop,    p_rows,       NULL,
};

mstar__capturer mstar__capturer_piecewise(mstar_piecewise_runner *runner)
{
    return (mstar__capturer){ &piecewise_ops, runner };
}
