/*
 * mstar_test_partial.c — see mstar_test_partial.h.
 */
#include "mstar_test_partial.h"

#include <stdlib.h>
#include <string.h>

struct probe {
    mstar_pool_costs pool;
    const uint64_t *credits;
    size_t ncredits;
};

/* How many buckets a plan at `free_bytes` captures; its prediction and floor when asked. */
static mstar_status plan_at(const struct probe *p, uint64_t free_bytes, size_t *planned,
                            uint64_t *predicted, uint64_t *floor)
{
    mstar_capture_plan plan;
    mstar_status st = mstar_plan_captures(&p->pool, 1, free_bytes, p->credits, p->ncredits,
                                          MSTAR_PLAN_REUSE_UNBOUNDED, &plan);
    if (st != MSTAR_OK)
        return st;
    *planned = plan.pools[0].nplanned;
    if (predicted != NULL)
        *predicted = plan.pools[0].predicted;
    if (floor != NULL)
        *floor = plan.floor;
    mstar_capture_plan_clear(&plan);
    return MSTAR_OK;
}

/* The least free memory that plans at least k buckets: plans only grow with free memory. */
static mstar_status least_free_for(const struct probe *p, size_t k, uint64_t *out)
{
    uint64_t lo = 0, hi = UINT64_MAX / 4;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        size_t n;
        mstar_status st = plan_at(p, mid, &n, NULL, NULL);
        if (st != MSTAR_OK)
            return st;
        if (n >= k)
            hi = mid;
        else
            lo = mid + 1;
    }
    *out = lo;
    return MSTAR_OK;
}

static mstar_status free_now(mstar_backend *b, uint64_t *out)
{
    uint64_t total;
    mstar_status st = mstar_caching_trim(b, NULL);
    return st != MSTAR_OK ? st : mstar_mem_info(b, out, &total);
}

static mstar_status fill(const struct probe *p, mstar_test_partial *out)
{
    out->nbuckets = p->pool.nbuckets;
    if (out->nbuckets < 2 || out->nbuckets > MSTAR_TEST_PARTIAL_MAX)
        return mstar_error_set(MSTAR_ERANGE, "partial probe: %zu buckets, 2..%d", out->nbuckets,
                               MSTAR_TEST_PARTIAL_MAX);
    out->need[0] = 0;
    for (size_t k = 1; k <= out->nbuckets; k++) {
        mstar_status st = least_free_for(p, k, &out->need[k]);
        if (st != MSTAR_OK)
            return st;
    }
    /* The k nearest half of everything, kept off both ends. */
    uint64_t half = out->need[1] + (out->need[out->nbuckets] - out->need[1]) / 2;
    size_t k = 1;
    for (size_t j = 1; j < out->nbuckets; j++) {
        uint64_t dj = out->need[j] > half ? out->need[j] - half : half - out->need[j];
        uint64_t dk = out->need[k] > half ? out->need[k] - half : half - out->need[k];
        if (dj < dk)
            k = j;
    }
    if (out->need[k + 1] <= out->need[k])
        return mstar_error_set(
            MSTAR_ERANGE, "partial probe: %zu and %zu buckets need the same free memory", k, k + 1);
    out->planned = k;
    out->target = out->need[k] + (out->need[k + 1] - out->need[k]) / 2;
    size_t n;
    mstar_status st = plan_at(p, out->target, &n, &out->predicted, &out->floor);
    if (st == MSTAR_OK && n != k)
        st = mstar_error_set(MSTAR_ESTATE,
                             "partial probe: %zu buckets planned at the target, not %zu", n, k);
    return st;
}

mstar_status mstar_test_partial_probe(mstar_graph_runner *runner, mstar_step_runner *sr,
                                      mstar_test_partial *out)
{
    memset(out, 0, sizeof(*out));
    mstar_backend *b = mstar_step_runner_backend(sr);
    uint64_t before, after;
    mstar_capture_sizing *sizing = NULL;
    mstar_status st = free_now(b, &before);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_prepare_for_capture(runner, NULL, NULL);
    if (st == MSTAR_OK)
        st = mstar_step_runner_build_graph_buffers(sr);
    if (st == MSTAR_OK)
        st = mstar_size_captures(runner, NULL, &sizing);
    if (st == MSTAR_OK)
        st = mstar_size_lent_captures(sizing, true);
    if (st == MSTAR_OK)
        st = free_now(b, &after);
    uint64_t credits[MSTAR_TEST_PARTIAL_MAX];
    size_t nwalks = sizing != NULL ? mstar_capture_sizing_walks(sizing) : 0;
    if (st == MSTAR_OK && nwalks > MSTAR_TEST_PARTIAL_MAX)
        st = mstar_error_set(MSTAR_ERANGE, "partial probe: %zu walks", nwalks);
    for (size_t w = 0; st == MSTAR_OK && w < nwalks; w++)
        credits[w] = mstar_exec_memory_held(mstar_capture_sizing_executable(sizing, w));
    if (st == MSTAR_OK) {
        size_t n;
        mstar_bucket_cost *costs = mstar_capture_sizing_costs(sizing, &n);
        /* Startup names the pool; the plan only needs one valid name. */
        struct probe p = { { "probe", costs, n }, credits, nwalks };
        out->overhead = before > after ? before - after : 0;
        st = fill(&p, out);
    }
    mstar_capture_sizing_destroy(sizing);
    return st;
}
