/*
 * ref_twin.c — see ref_twin.h.
 */
#include "ref_twin.h"

#include "mstar_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mstar_status ref_twin_create_uncaptured(ref_twin *t, mstar_backend *backend,
                                        const ref_model_config *cfg,
                                        const mstar_kv_cache_config *kv_cfg,
                                        const ref_capture_config *captures, size_t n_captures,
                                        double tolerance)
{
    memset(t, 0, sizeof(*t));
    t->backend = backend;
    t->cfg = *cfg;
    t->kv_cfg = *kv_cfg;
    t->tolerance = tolerance;
    ref_node_options o = {
        .model = *cfg, .kv = *kv_cfg, .captures = captures, .n_captures = n_captures
    };
    mstar_status st;
    if ((st = ref_node_create(backend, &o, &t->node)) != MSTAR_OK ||
        (st = ref_eager_create(cfg, kv_cfg, backend, &t->eager)) != MSTAR_OK)
        ref_twin_destroy(t);
    return st;
}

mstar_status ref_twin_create(ref_twin *t, mstar_backend *backend, const ref_model_config *cfg,
                             const mstar_kv_cache_config *kv_cfg,
                             const ref_capture_config *captures, size_t n_captures,
                             double tolerance)
{
    mstar_status st =
        ref_twin_create_uncaptured(t, backend, cfg, kv_cfg, captures, n_captures, tolerance);
    if (st == MSTAR_OK && (st = ref_node_capture(t->node)) != MSTAR_OK)
        ref_twin_destroy(t);
    return st;
}

mstar_status ref_twin_capture_startup(ref_twin *t, mstar_capture_report *rep)
{
    mstar_graph_runner *runners[1] = { ref_node_runner(t->node) };
    mstar_capture_startup s = { .step_runner = ref_node_step_runner(t->node),
                                .runners = runners,
                                .n_runners = 1 };
    return mstar_capture_startup_run(&s, rep);
}

void ref_twin_destroy(ref_twin *t)
{
    ref_node_destroy(t->node);
    ref_eager_destroy(t->eager);
    t->node = NULL;
    t->eager = NULL;
}

ref_step_request ref_twin_request(const char *walk, const int64_t *rows, const int32_t *spans,
                                  int32_t n, const int32_t *tokens, bool use_graphs)
{
    ref_step_request r = { .walk = walk,
                           .rows = rows,
                           .spans = spans,
                           .n = n,
                           .tokens = tokens,
                           .use_graphs = use_graphs,
                           .commit = true,
                           .slot = -1 };
    return r;
}

void ref_twin_open_and_prefill(ref_twin *t, int64_t first, int32_t n, int32_t *next)
{
    for (int32_t i = 0; i < n; i++) {
        int64_t req = first + i;
        int32_t len = 3 + (int32_t)(req % 7), prompt[16], ne, ng;
        for (int32_t j = 0; j < len; j++)
            prompt[j] = (int32_t)((req * 31 + j * 7) % t->cfg.vocab);
        assert_mstar_ok(ref_node_open(t->node, req));
        assert_mstar_ok(ref_eager_open(t->eager, req));
        ref_step_request r = ref_twin_request("prefill", &req, &len, 1, prompt, false);
        assert_mstar_ok(ref_node_step(t->node, &r, NULL, &ng, NULL));
        assert_mstar_ok(ref_eager_step(t->eager, &req, &len, 1, prompt, NULL, &ne));
        if (t->tolerance == 0)
            assert_int_equal(ng, ne);
        next[i] = ne;
    }
}

void ref_twin_close(ref_twin *t, int64_t first, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        ref_node_close(t->node, first + i);
        assert_mstar_ok(ref_eager_close(t->eager, first + i));
    }
}

static size_t pool_bytes(const ref_twin *t)
{
    return (size_t)t->kv_cfg.num_pages * ref_model_page_bytes(ref_node_model(t->node));
}

size_t ref_twin_pools_bytes(const ref_twin *t)
{
    return pool_bytes(t) * 2 * (size_t)t->cfg.layers;
}

void ref_twin_read_pools(ref_twin *t, bool graphed, char *out)
{
    ref_model *m = graphed ? ref_node_model(t->node) : ref_eager_model(t->eager);
    mstar_stream *s = graphed ? ref_node_stream(t->node) : ref_eager_stream(t->eager);
    size_t pool = pool_bytes(t);
    for (int32_t l = 0; l < t->cfg.layers; l++) {
        for (int v = 0; v < 2; v++)
            assert_mstar_ok(
                ref_model_read_pool(m, s, l, v, out + ((size_t)l * 2 + (size_t)v) * pool));
    }
}

void ref_twin_assert_only_real_rows_written(ref_twin *t, const char *before, const char *after,
                                            const int64_t *reqs, int32_t n)
{
    int32_t ps = t->kv_cfg.page_size, npages = t->kv_cfg.num_pages;
    size_t page = ref_model_page_bytes(ref_node_model(t->node)), slot = page / (size_t)ps;
    bool *owned = calloc((size_t)npages * (size_t)ps, sizeof(bool));
    assert_non_null(owned);
    for (int32_t r = 0; r < n; r++) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(mstar_kv_cache_stream(ref_node_kv(t->node), reqs[r], 0, &len, &pages, &np));
        for (int32_t p = 0; p < len; p++)
            owned[(size_t)pages[p / ps] * (size_t)ps + (size_t)(p % ps)] = true;
    }
    size_t pool = pool_bytes(t);
    for (int32_t i = 0; i < t->cfg.layers * 2; i++) {
        for (int32_t pg = 1; pg < npages; pg++) {
            size_t first = (size_t)i * pool + (size_t)pg * page;
            if (memcmp(before + first, after + first, page) == 0)
                continue;
            for (int32_t o = 0; o < ps; o++) {
                size_t at = first + (size_t)o * slot;
                if (memcmp(before + at, after + at, slot) != 0 && !owned[pg * ps + o])
                    fail_msg("page %d offset %d of pool %d changed, but no real row owns it", pg, o,
                             i);
            }
        }
    }
    free(owned);
}

/* One KV element of the model's dtype as a double. */
static double element(const ref_twin *t, const char *p)
{
    float f;
    if (ref_model_dtype(ref_node_model(t->node)) == MSTAR_DTYPE_FLOAT32) {
        memcpy(&f, p, sizeof(f));
        return f;
    }
    uint16_t h;
    memcpy(&h, p, sizeof(h));
    ref_bf16_to_f32(&h, &f, 1);
    return f;
}

/* Token slot x (graphed) against y (twin): equal bytes, or within the tolerance. */
static void compare_slot(const ref_twin *t, const char *x, const char *y, size_t bytes, int64_t req,
                         int32_t pos, int32_t pool)
{
    if (t->tolerance == 0) {
        assert_memory_equal(x, y, bytes);
        return;
    }
    size_t elsize = mstar_dtype_size(ref_model_dtype(ref_node_model(t->node)));
    double worst = 0, scale = 0;
    for (size_t e = 0; e < bytes; e += elsize) {
        worst = fmax(worst, fabs(element(t, x + e) - element(t, y + e)));
        scale = fmax(scale, fabs(element(t, y + e)));
    }
    if (worst > t->tolerance * (scale > 0 ? scale : 1))
        fail_msg("request %lld position %d pool %d: KV differs by %g of %g", (long long)req, pos,
                 pool, worst, scale);
}

void ref_twin_assert_streams_match(ref_twin *t, char *a, char *b, const int64_t *reqs, int32_t n)
{
    int32_t ps = t->kv_cfg.page_size;
    size_t pool = pool_bytes(t), page = ref_model_page_bytes(ref_node_model(t->node));
    size_t slot = page / (size_t)ps;
    ref_twin_read_pools(t, true, a);
    ref_twin_read_pools(t, false, b);
    for (int32_t r = 0; r < n; r++) {
        int32_t la, lb, na, nb;
        const int32_t *pa, *pb;
        assert_mstar_ok(mstar_kv_cache_stream(ref_node_kv(t->node), reqs[r], 0, &la, &pa, &na));
        assert_mstar_ok(mstar_kv_cache_stream(ref_eager_kv(t->eager), reqs[r], 0, &lb, &pb, &nb));
        assert_int_equal(la, lb);
        for (int32_t i = 0; i < t->cfg.layers * 2; i++) {
            for (int32_t p = 0; p < la; p++) {
                size_t off = (size_t)(p % ps) * slot;
                compare_slot(t, a + (size_t)i * pool + (size_t)pa[p / ps] * page + off,
                             b + (size_t)i * pool + (size_t)pb[p / ps] * page + off, slot, reqs[r],
                             p, i);
            }
        }
    }
}

double ref_twin_compare(const ref_twin *t, const float *got, const float *want, size_t n,
                        const char *what)
{
    if (t->tolerance == 0)
        assert_memory_equal(got, want, n * sizeof(float));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        scale = fmax(scale, fabs((double)want[i]));
    }
    double rel = worst / (scale > 0 ? scale : 1);
    if (t->tolerance > 0 && rel > t->tolerance)
        fail_msg("%s: relative difference %g, more than %g", what, rel, t->tolerance);
    return rel;
}

/* The decode loop of the public helpers: one step at each of sizes[0..nsizes) (ascending) over
 * requests [first, first + the largest size); `require_replay` fails a step that ran eager. */
static double decode_sizes(ref_twin *t, int64_t first, const int32_t *sizes, int32_t nsizes,
                           bool require_replay, int *padded, int *replays)
{
    int32_t max_bs = sizes[nsizes - 1];
    size_t v = (size_t)t->cfg.vocab, all = ref_twin_pools_bytes(t);
    int32_t *cur = malloc((size_t)max_bs * sizeof(int32_t));
    int32_t *ones = malloc((size_t)max_bs * sizeof(int32_t));
    int32_t *ng = malloc((size_t)max_bs * sizeof(int32_t));
    int32_t *ne = malloc((size_t)max_bs * sizeof(int32_t));
    int64_t *reqs = malloc((size_t)max_bs * sizeof(int64_t));
    float *lg = malloc((size_t)max_bs * v * sizeof(float));
    float *le = malloc((size_t)max_bs * v * sizeof(float));
    char *before = malloc(all), *after = malloc(all), *twin_pools = malloc(all);
    assert_true(cur && ones && ng && ne && reqs && lg && le && before && after && twin_pools);
    for (int32_t i = 0; i < max_bs; i++) {
        reqs[i] = first + i;
        ones[i] = 1;
    }
    ref_twin_open_and_prefill(t, first, max_bs, cur);
    double worst = 0;
    *padded = 0;
    *replays = 0;
    char what[80];
    for (int32_t k = 0; k < nsizes; k++) {
        int32_t bs = sizes[k];
        ref_step_timing timing;
        ref_step_request r = ref_twin_request("decode", reqs, ones, bs, cur, true);
        ref_twin_read_pools(t, true, before);
        assert_mstar_ok(ref_node_step(t->node, &r, lg, ng, &timing));
        if (require_replay)
            assert_true(timing.replayed);
        *padded += timing.bucket_rows > bs;
        *replays += timing.replayed;
        assert_mstar_ok(ref_eager_step(t->eager, reqs, ones, bs, cur, le, ne));
        snprintf(what, sizeof(what), "logits at batch size %d (bucket %lld)", bs,
                 (long long)timing.bucket_rows);
        worst = fmax(worst, ref_twin_compare(t, lg, le, (size_t)bs * v, what));
        if (t->tolerance == 0)
            assert_memory_equal(ng, ne, (size_t)bs * sizeof(int32_t));
        ref_twin_read_pools(t, true, after);
        ref_twin_assert_only_real_rows_written(t, before, after, reqs, bs);
        ref_twin_assert_streams_match(t, after, twin_pools, reqs, bs);
        /* Padding allocated nothing: the twin, which has no padding rows, holds as many. */
        assert_int_equal(mstar_kv_cache_free_pages(ref_node_kv(t->node)),
                         mstar_kv_cache_free_pages(ref_eager_kv(t->eager)));
        /* Both sides go on with the twin's tokens, so a bf16 near-tie cannot fork them. */
        memcpy(cur, ne, (size_t)bs * sizeof(int32_t));
    }
    ref_twin_close(t, first, max_bs);
    free(cur);
    free(ones);
    free(ng);
    free(ne);
    free(reqs);
    free(lg);
    free(le);
    free(before);
    free(after);
    free(twin_pools);
    return worst;
}

double ref_twin_replay_every_batch_size(ref_twin *t, int64_t first, int32_t max_bs, int *padded)
{
    int32_t *sizes = malloc((size_t)max_bs * sizeof(int32_t));
    assert_non_null(sizes);
    for (int32_t i = 0; i < max_bs; i++)
        sizes[i] = i + 1;
    int replays;
    double worst = decode_sizes(t, first, sizes, max_bs, true, padded, &replays);
    free(sizes);
    return worst;
}

double ref_twin_decode_batch_sizes(ref_twin *t, int64_t first, const int32_t *sizes, int32_t nsizes,
                                   int *replays)
{
    int padded;
    return decode_sizes(t, first, sizes, nsizes, false, &padded, replays);
}
