/*
 * test_ref_replay.c — the reference model's captured steps on the host backend against the same
 * steps run eagerly by an identical twin:
 *   - replayed outputs equal eager outputs exactly (fp32) at every batch size 1..64, padded ones
 *     included, and padding rows never touch a live request's KV pages (every page compared
 *     before and after each step; every stream compared with the twin's);
 *   - graph-runner-spec §8.7: free pages unchanged after a dropped speculation (pre-plan);
 *   - §8.9: a packed bucket with fewer real tokens than it captured, next to a resident request:
 *     that request's KV is unchanged, the padded tail scatters into the sink page;
 *   - §8.13 (and §8.8): padding never allocates — not at capture, not at replay;
 *   - §8.19: outputs held across two steps must be copies: the static buffers are overwritten.
 * Sizes come from MSTAR_TEST_REPLAY_MAX_BS (default 64).
 */
#include "mstar_test.h"

#include "ref_twin.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_BS = 64, PACKED_ROWS = 2, PACKED_TOKENS = 16 };

static const mstar_kv_cache_config kv_cfg = {
    .num_pages = 400, .page_size = 16, .num_labels = 1, .max_seq_len = 256
};

static ref_twin T;
static int32_t max_bs;

static int setup(void **state)
{
    (void)state;
    int64_t knob;
    if (mstar_env_get_int("MSTAR_TEST_REPLAY_MAX_BS", MAX_BS, 1, MAX_BS, &knob) != MSTAR_OK)
        return -1;
    max_bs = (int32_t)knob;
    /* Smaller than ref_model_config_small: this test runs ~5000 token forwards, under ASan too. */
    ref_model_config cfg = ref_model_config_small();
    cfg.vocab = 64;
    cfg.hidden = 32;
    cfg.head_dim = 16;
    cfg.mlp = 64;
    ref_bucket buckets[8];
    int n = 0;
    for (int32_t bs = 1; bs <= MAX_BS; bs *= 2)
        buckets[n++] = (ref_bucket){ bs, bs };
    buckets[n++] = (ref_bucket){ PACKED_ROWS, PACKED_TOKENS };
    mstar_device host = { MSTAR_DEVICE_CPU, 0 };
    mstar_backend *b;
    if (mstar_backend_create(host, &b) != MSTAR_OK)
        return -1;
    if (ref_twin_create(&T, b, &cfg, &kv_cfg, buckets, n, 0.0) != MSTAR_OK) {
        print_error("twin: %s\n", mstar_last_error());
        mstar_backend_destroy(b);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ref_twin_destroy(&T);
    mstar_backend_destroy(T.backend);
    return 0;
}

/* The Must-show: every batch size 1..64 replayed on the tightest bucket (padded with zero-length
 * rows when bs is not a captured size) gives the eager twin's logits and tokens bit for bit; the
 * KV streams match the twin's; between the snapshots before and after each step, no page slot
 * changed that a real row of the step does not own; and padding took no page. */
static void test_replay_equals_eager_every_batch_size(void **state)
{
    (void)state;
    int padded;
    double worst = ref_twin_replay_every_batch_size(&T, 1000, max_bs, &padded);
    assert_true(worst == 0.0);
    if (max_bs == MAX_BS)
        assert_int_equal(padded, MAX_BS - 7); /* all but 1, 2, 4, ..., 64 were padded */
}

/* §8.7: a pre-plan admits pages for its rows; dropping the speculation hands exactly those back.
 * A pre-plan that is kept is promoted by the step's own plan, and the replay still matches. */
static void test_dropped_speculation_keeps_free_pages(void **state)
{
    (void)state;
    enum { N = 5 };
    int32_t cur[N], ones[N] = { 1, 1, 1, 1, 1 };
    int64_t reqs[N];
    ref_twin_open_and_prefill(&T, 2000, N, cur);
    for (int32_t i = 0; i < N; i++)
        reqs[i] = 2000 + i;
    mstar_stream *plan_stream;
    assert_mstar_ok(mstar_stream_create(T.backend, MSTAR_STREAM_NON_BLOCKING, &plan_stream));
    /* Bring row 0 to a page boundary, so its next token needs a fresh page. */
    float le[N * 128], lg[N * 128];
    int32_t ne[N], ng[N];
    for (;;) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(
            mstar_kv_cache_stream(ref_eager_kv(T.graphed), reqs[0], 0, &len, &pages, &np));
        if (len % kv_cfg.page_size == 0)
            break;
        int32_t index = ref_graphs_select(T.graphs, 1, 1);
        assert_mstar_ok(ref_graphs_step(T.graphs, index, ref_graphs_next_slot(T.graphs), reqs, ones,
                                        1, cur, ref_eager_stream(T.graphed)));
        assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, 1, cur, NULL, ne));
        cur[0] = ne[0];
    }
    int32_t index = ref_graphs_select(T.graphs, 1, 1);
    const ref_bucket *b = ref_graphs_bucket(T.graphs, index);
    int64_t rows[1] = { reqs[0] };
    int32_t spans[1] = { 1 };
    int32_t free_before = mstar_kv_cache_free_pages(ref_eager_kv(T.graphed));
    assert_mstar_ok(ref_step_declare(T.step, rows, spans, 1));
    assert_mstar_ok(ref_step_prepare(T.step, 1, b->rows, b->tokens, true, plan_stream, NULL));
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(T.graphed)), free_before - 1);
    ref_step_clear_preplan(T.step, 1); /* the speculation is dropped */
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(T.graphed)), free_before);

    /* A kept pre-plan over all five rows on a padded bucket, then the replay on the same slot. */
    index = ref_graphs_select(T.graphs, N, N);
    b = ref_graphs_bucket(T.graphs, index);
    int64_t padded_rows[8];
    int32_t padded_spans[8];
    for (int32_t i = 0; i < b->rows; i++) {
        padded_rows[i] = i < N ? reqs[i] : -1 - i;
        padded_spans[i] = i < N;
    }
    assert_mstar_ok(ref_step_declare(T.step, padded_rows, padded_spans, b->rows));
    assert_mstar_ok(ref_step_prepare(T.step, 0, b->rows, b->tokens, true, plan_stream, NULL));
    assert_mstar_ok(mstar_stream_synchronize(plan_stream));
    assert_mstar_ok(
        ref_graphs_step(T.graphs, index, 0, reqs, ones, N, cur, ref_eager_stream(T.graphed)));
    ref_twin_read_outputs(&T, N, lg, ng);
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, cur, le, ne));
    assert_memory_equal(lg, le, (size_t)N * (size_t)T.cfg.vocab * sizeof(float));
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(T.graphed)),
                     mstar_kv_cache_free_pages(ref_eager_kv(T.eager)));
    mstar_stream_destroy(plan_stream);
    ref_twin_close(&T, 2000, N);
}

/* §8.9: two prompts of 5 and 4 tokens on the (2 rows, 16 tokens) packed bucket — the tightest fit
 * for 9 tokens — beside a resident request: the resident request's KV is byte for byte what it
 * was, and everything else matches the twin, which prefilled the same prompts eagerly. */
static void test_packed_tail_scatters_into_sink(void **state)
{
    (void)state;
    int32_t cur[1];
    ref_twin_open_and_prefill(&T, 3000, 1, cur); /* the resident request */
    int64_t reqs[2] = { 3001, 3002 };
    int32_t spans[2] = { 5, 4 }, prompts[9] = { 9, 8, 7, 6, 5, 4, 3, 2, 1 };
    for (int i = 0; i < 2; i++) {
        assert_mstar_ok(ref_eager_open(T.graphed, reqs[i]));
        assert_mstar_ok(ref_eager_open(T.eager, reqs[i]));
    }
    /* Make the tail of the static token buffer hold real-looking tokens from an earlier step. */
    int32_t stale[PACKED_TOKENS];
    for (int i = 0; i < PACKED_TOKENS; i++)
        stale[i] = (i * 5 + 1) % T.cfg.vocab;
    assert_mstar_ok(ref_step_stage(T.step, stale, PACKED_TOKENS, ref_eager_stream(T.graphed)));
    int32_t resident_len, np;
    const int32_t *resident_pages;
    assert_mstar_ok(mstar_kv_cache_stream(ref_eager_kv(T.graphed), 3000, 0, &resident_len,
                                          &resident_pages, &np));
    size_t all = ref_twin_pools_bytes(&T);
    char *before = malloc(all), *after = malloc(all), *twin_pools = malloc(all);
    ref_twin_read_pools(&T, T.graphed, before);
    int32_t index = ref_graphs_select(T.graphs, 2, 9);
    const ref_bucket *b = ref_graphs_bucket(T.graphs, index);
    assert_int_equal(b->rows, PACKED_ROWS);
    assert_int_equal(b->tokens, PACKED_TOKENS);
    assert_mstar_ok(ref_graphs_step(T.graphs, index, ref_graphs_next_slot(T.graphs), reqs, spans, 2,
                                    prompts, ref_eager_stream(T.graphed)));
    float lg[2 * 128], le[2 * 128];
    int32_t ng[2], ne[2];
    ref_twin_read_outputs(&T, 2, lg, ng);
    assert_mstar_ok(ref_eager_step(T.eager, reqs, spans, 2, prompts, le, ne));
    assert_memory_equal(lg, le, 2 * (size_t)T.cfg.vocab * sizeof(float));
    ref_twin_read_pools(&T, T.graphed, after);
    /* The resident request's pages, in every pool, are unchanged. */
    size_t page = ref_model_page_bytes(ref_eager_model(T.graphed));
    size_t pool = (size_t)kv_cfg.num_pages * page;
    for (int32_t i = 0; i < T.cfg.layers * 2; i++) {
        for (int32_t p = 0; p < np; p++) {
            size_t at = (size_t)i * pool + (size_t)resident_pages[p] * page;
            assert_memory_equal(before + at, after + at, page);
        }
    }
    ref_twin_assert_only_real_rows_written(&T, before, after, reqs, 2);
    ref_twin_assert_streams_match(&T, after, twin_pools, reqs, 2);
    free(before);
    free(after);
    free(twin_pools);
    ref_twin_close(&T, 3000, 1);
    for (int i = 0; i < 2; i++) {
        assert_mstar_ok(ref_eager_close(T.graphed, reqs[i]));
        assert_mstar_ok(ref_eager_close(T.eager, reqs[i]));
    }
}

/* §8.13 and §8.8: captures ran on padding rows only and took no page; after every replay test
 * above, every page not held by an open request is free again. */
static void test_padding_never_allocates(void **state)
{
    (void)state;
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(T.graphed)), kv_cfg.num_pages - 1);
    int32_t cur[3], ones[3] = { 1, 1, 1 };
    ref_twin_open_and_prefill(&T, 4000, 3, cur);
    int64_t reqs[3] = { 4000, 4001, 4002 };
    int32_t index = ref_graphs_select(T.graphs, 3, 3); /* the 4-row bucket: one padding row */
    assert_int_equal(ref_graphs_bucket(T.graphs, index)->rows, 4);
    assert_mstar_ok(ref_graphs_step(T.graphs, index, ref_graphs_next_slot(T.graphs), reqs, ones, 3,
                                    cur, ref_eager_stream(T.graphed)));
    int32_t now = kv_cfg.num_pages - 1 - mstar_kv_cache_free_pages(ref_eager_kv(T.graphed));
    int32_t need = 0;
    for (int i = 0; i < 3; i++) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(
            mstar_kv_cache_stream(ref_eager_kv(T.graphed), reqs[i], 0, &len, &pages, &np));
        need += (len + kv_cfg.page_size - 1) / kv_cfg.page_size;
    }
    assert_int_equal(now, need);
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(ref_eager_close(T.graphed, reqs[i]));
    for (int i = 0; i < 3; i++)
        assert_mstar_ok(ref_eager_close(T.eager, reqs[i]));
    assert_int_equal(mstar_kv_cache_free_pages(ref_eager_kv(T.graphed)), kv_cfg.num_pages - 1);
}

/* §8.19: the step's outputs live in static buffers that the next replay overwrites, so a caller
 * that holds a view across steps reads the next step's tokens (the duplicated-token bug). The
 * copy taken right after step N still holds step N's tokens. */
static void test_held_outputs_are_copies(void **state)
{
    (void)state;
    enum { N = 8 };
    int32_t cur[N], ones[N], clone_n[N], view_after[N], ne[N];
    int64_t reqs[N];
    for (int i = 0; i < N; i++) {
        reqs[i] = 5000 + i;
        ones[i] = 1;
    }
    ref_twin_open_and_prefill(&T, 5000, N, cur);
    int32_t index = ref_graphs_select(T.graphs, N, N);
    mstar_stream *s = ref_eager_stream(T.graphed);
    float lg[N * 128];
    assert_mstar_ok(
        ref_graphs_step(T.graphs, index, ref_graphs_next_slot(T.graphs), reqs, ones, N, cur, s));
    ref_twin_read_outputs(&T, N, lg, clone_n); /* the copy, as the engine takes it */
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, cur, NULL, ne));
    assert_memory_equal(clone_n, ne, sizeof(ne));
    const int32_t *view = ref_step_next(T.step); /* host backend: device memory is readable */
    assert_memory_equal(view, clone_n, sizeof(clone_n));
    /* Step N+1 on the same bucket, fed step N's tokens. */
    assert_mstar_ok(ref_graphs_step(T.graphs, index, ref_graphs_next_slot(T.graphs), reqs, ones, N,
                                    clone_n, s));
    assert_mstar_ok(mstar_stream_synchronize(s));
    memcpy(view_after, view, sizeof(view_after));
    assert_mstar_ok(ref_eager_step(T.eager, reqs, ones, N, clone_n, NULL, ne));
    assert_memory_equal(view_after, ne, sizeof(ne)); /* the view now shows step N+1 */
    assert_memory_not_equal(view_after, clone_n, sizeof(clone_n));
    ref_twin_close(&T, 5000, N);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_equals_eager_every_batch_size),
        cmocka_unit_test(test_dropped_speculation_keeps_free_pages),
        cmocka_unit_test(test_packed_tail_scatters_into_sink),
        cmocka_unit_test(test_padding_never_allocates),
        cmocka_unit_test(test_held_outputs_are_copies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
