/*
 * test_kv_cache.c — the paged KV cache resource: the sink page, admit (all or nothing, what was
 * short), plans with padded tails and padding rows on the sink, pre-plan promote and clear,
 * commit, the request lifecycle, and page accounting under random churn.
 */
#include "resource_harness.h"

#include <stdlib.h>
#include <string.h>

static mstar_kv_cache *make_kv(int32_t pages, int32_t page_size, int32_t labels, int32_t max_len)
{
    mstar_kv_cache_config cfg = {
        .num_pages = pages, .page_size = page_size, .num_labels = labels, .max_seq_len = max_len
    };
    mstar_kv_cache *kv = NULL;
    assert_mstar_ok(mstar_kv_cache_create(&cfg, B, &kv));
    return kv;
}

static void admit_ok(mstar_kv_cache *kv, const mstar_step_segment *segs, int32_t n)
{
    mstar_resource_step st = step_of(segs, n, true);
    mstar_step_admit_result res;
    assert_mstar_ok(mstar_kv_cache_admit(kv, &st, &res));
    assert_true(res.ok);
}

static int32_t stream_len(mstar_kv_cache *kv, int64_t req, int32_t label, int32_t *npages)
{
    int32_t len, n;
    const int32_t *pages;
    assert_mstar_ok(mstar_kv_cache_stream(kv, req, label, &len, &pages, &n));
    if (npages != NULL)
        *npages = n;
    return len;
}

static void test_config_validation(void **state)
{
    (void)state;
    mstar_kv_cache *kv = NULL;
    mstar_kv_cache_config good = { 8, 4, 1, 32 };
    mstar_kv_cache_config bad[] = {
        { 1, 4, 1, 32 }, { 8, 0, 1, 32 }, { 8, 4, 0, 32 }, { 8, 4, MSTAR_KV_MAX_LABELS + 1, 32 },
        { 8, 4, 1, 0 },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_mstar_status(mstar_kv_cache_create(&bad[i], B, &kv), MSTAR_EINVAL);
    assert_mstar_status(mstar_kv_cache_create(NULL, B, &kv), MSTAR_EINVAL);
    assert_null(kv);
    assert_mstar_status(mstar_kv_cache_create(&good, NULL, &kv), MSTAR_EINVAL);
    assert_mstar_ok(mstar_kv_cache_create(&good, B, &kv));
    /* The sink page is taken at build time: one page fewer than the pool is free. */
    assert_int_equal(mstar_kv_cache_free_pages(kv), 7);
    mstar_kv_cache_destroy(kv);
    mstar_kv_cache_destroy(NULL);
}

static void test_prefill_then_decode_plan(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 64);
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 7));
    mstar_step_segment seg = { 7, 0, 6 };
    admit_ok(kv, &seg, 1);
    int32_t np;
    assert_int_equal(stream_len(kv, 7, 0, &np), 0);
    assert_int_equal(np, 2);
    assert_int_equal(mstar_kv_cache_free_pages(kv), 13);
    mstar_resource_step st = step_of(&seg, 1, true);
    assert_mstar_ok(mstar_kv_cache_plan(kv, MSTAR_PLAN_EAGER, &st, 1, 6, false, S));
    mstar_kv_plan p;
    assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, MSTAR_PLAN_EAGER, 0, &p));
    assert_int_equal(p.pages_per_row, 16);
    const int32_t *pages;
    int32_t len;
    assert_mstar_ok(mstar_kv_cache_stream(kv, 7, 0, &len, &pages, &np));
    /* FIFO from 1: the first request pages are 1 and 2, never the sink. */
    assert_int_equal(pages[0], 1);
    assert_int_equal(pages[1], 2);
    for (int32_t t = 0; t < 6; t++) {
        assert_int_equal(p.token_to_page[t], pages[t / 4]);
        assert_int_equal(p.token_to_cache[t], t % 4);
        assert_int_equal(p.token_row[t], 0);
        assert_int_equal(p.token_kv_len[t], t + 1);
    }
    assert_int_equal(p.page_table[0], 1);
    assert_int_equal(p.page_table[1], 2);
    for (int32_t i = 2; i < p.pages_per_row; i++)
        assert_int_equal(p.page_table[i], MSTAR_KV_SINK_PAGE);
    assert_int_equal(p.row_last_token[0], 5);
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    assert_int_equal(stream_len(kv, 7, 0, NULL), 6);

    /* Decode: positions 6 and 7 fit page 2; position 8 takes a third page. */
    seg.span = 1;
    for (int32_t i = 0; i < 3; i++) {
        admit_ok(kv, &seg, 1);
        assert_mstar_ok(mstar_kv_cache_plan(kv, MSTAR_PLAN_EAGER, &st, 1, 1, false, S));
        assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, MSTAR_PLAN_EAGER, 0, &p));
        assert_int_equal(p.token_kv_len[0], 7 + i);
        assert_int_equal(p.token_to_cache[0], (6 + i) % 4);
        assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    }
    assert_int_equal(stream_len(kv, 7, 0, &np), 9);
    assert_int_equal(np, 3);
    assert_int_equal(p.token_to_page[0], 3);
    mstar_kv_cache_destroy(kv);
}

static void test_admit_shortage_reserves_nothing(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(4, 4, 1, 64); /* 3 usable pages */
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 1));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 2));
    mstar_step_segment segs[] = { { 1, 0, 8 }, { 2, 0, 8 } };
    mstar_resource_step st = step_of(segs, 2, true);
    mstar_step_admit_result res;
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_ENOSPC);
    assert_false(res.ok);
    assert_int_equal(res.pages_short, 1);
    assert_int_equal(res.request, 2);
    assert_int_equal(res.label, 0);
    assert_int_equal(mstar_kv_cache_free_pages(kv), 3);
    int32_t np;
    stream_len(kv, 1, 0, &np);
    assert_int_equal(np, 0);
    /* One of them fits. */
    admit_ok(kv, segs, 1);
    assert_int_equal(mstar_kv_cache_free_pages(kv), 1);
    mstar_kv_cache_destroy(kv);
}

static void test_admit_bad_input(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(8, 4, 2, 10);
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 1));
    mstar_step_admit_result res;
    mstar_step_segment unknown = { 99, 0, 1 };
    mstar_resource_step st = step_of(&unknown, 1, true);
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_ENOENT);
    mstar_step_segment dup[] = { { 1, 0, 1 }, { 1, 0, 1 } };
    st = step_of(dup, 2, true);
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_EINVAL);
    mstar_step_segment two_labels[] = { { 1, 0, 1 }, { 1, 1, 1 } };
    st = step_of(two_labels, 2, true);
    admit_ok(kv, two_labels, 2);
    mstar_step_segment bad_label = { 1, 2, 1 };
    st = step_of(&bad_label, 1, true);
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_EINVAL);
    mstar_step_segment bad_span = { 1, 0, -1 };
    st = step_of(&bad_span, 1, true);
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_EINVAL);
    mstar_step_segment too_long = { 1, 0, 11 };
    st = step_of(&too_long, 1, true);
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_ERANGE);
    st.segments = NULL;
    assert_mstar_status(mstar_kv_cache_admit(kv, &st, &res), MSTAR_EINVAL);
    assert_mstar_status(mstar_kv_cache_admit(kv, NULL, &res), MSTAR_EINVAL);
    /* Errors reserved nothing beyond the two pages the good admit took. */
    assert_int_equal(mstar_kv_cache_free_pages(kv), 5);
    mstar_kv_cache_destroy(kv);
}

/* Padding rows (negative handles) own nothing, whatever their span; their rows and tokens and
 * the bucket's tails all address the sink page. */
static void test_padding_rows_and_tails_address_the_sink(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 32);
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 2, 8, 8));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 3));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, -1)); /* a no-op for padding */
    mstar_step_segment warm = { 3, 0, 5 };
    admit_ok(kv, &warm, 1);
    mstar_resource_step st = step_of(&warm, 1, true);
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    int32_t free_before = mstar_kv_cache_free_pages(kv);
    mstar_step_segment segs[] = { { 3, 0, 1 }, { -1, 0, 2 }, { -2, 0, 0 } };
    admit_ok(kv, segs, 3);
    assert_int_equal(mstar_kv_cache_free_pages(kv), free_before);
    st = step_of(segs, 3, true);
    /* Scribble over the slot's buffers so the test sees what the plan writes. */
    mstar_kv_plan p;
    assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, 1, 0, &p));
    assert_int_equal(p.rows, 8);
    assert_int_equal(p.tokens, 8);
    memset(p.page_table, 0x55, (size_t)p.rows * (size_t)p.pages_per_row * sizeof(int32_t));
    memset(p.token_to_page, 0x55, 4 * (size_t)p.tokens * sizeof(int32_t));
    memset(p.row_last_token, 0x55, (size_t)p.rows * sizeof(int32_t));
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &st, 4, 6, false, S));
    /* Row 0 is the real request: its pages, then sink. */
    const int32_t *pages;
    int32_t len, np;
    assert_mstar_ok(mstar_kv_cache_stream(kv, 3, 0, &len, &pages, &np));
    assert_int_equal(p.page_table[0], pages[0]);
    assert_int_equal(p.page_table[1], pages[1]);
    assert_int_equal(p.token_to_page[0], pages[1]);
    assert_int_equal(p.token_to_cache[0], 1);
    assert_int_equal(p.token_kv_len[0], 6);
    /* Rows 1..3 (two padding rows, one bucket-tail row): all sink. */
    for (int32_t r = 1; r < 4; r++) {
        for (int32_t i = 0; i < p.pages_per_row; i++)
            assert_int_equal(p.page_table[r * p.pages_per_row + i], MSTAR_KV_SINK_PAGE);
    }
    /* Tokens 1..2 belong to padding row 1; 3..5 are the bucket's tail. */
    for (int32_t t = 1; t < 6; t++) {
        assert_int_equal(p.token_to_page[t], MSTAR_KV_SINK_PAGE);
        assert_int_equal(p.token_to_cache[t], 0);
        assert_int_equal(p.token_kv_len[t], 0);
    }
    assert_int_equal(p.token_row[1], 1);
    assert_int_equal(p.token_row[2], 1);
    assert_int_equal(p.token_row[3], 0);
    assert_int_equal(p.row_last_token[0], 0);
    assert_int_equal(p.row_last_token[1], 2);
    assert_int_equal(p.row_last_token[2], 0);
    assert_int_equal(p.row_last_token[3], 0);
    /* Commit advances the real row only; padding rows have no streams. */
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    assert_int_equal(stream_len(kv, 3, 0, NULL), 6);
    assert_mstar_ok(mstar_kv_cache_reset(kv, -1, true));
    assert_mstar_ok(mstar_kv_cache_remove(kv, -1));
    assert_mstar_status(mstar_kv_cache_stream(kv, -1, 0, &len, &pages, &np), MSTAR_ENOENT);
    mstar_kv_cache_destroy(kv);
}

static void test_admit_is_idempotent(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 64);
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 0));
    mstar_step_segment seg = { 0, 0, 9 };
    admit_ok(kv, &seg, 1);
    int32_t free_after = mstar_kv_cache_free_pages(kv);
    admit_ok(kv, &seg, 1);
    assert_int_equal(mstar_kv_cache_free_pages(kv), free_after);
    int32_t np;
    stream_len(kv, 0, 0, &np);
    assert_int_equal(np, 3);
    mstar_kv_cache_destroy(kv);
}

static void test_preplan_promote_and_clear(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 64);
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 2, 4, 4));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 0));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 1));
    mstar_step_segment a[] = { { 0, 0, 2 }, { 1, 0, 2 } };
    mstar_step_segment b[] = { { 1, 0, 2 }, { 0, 0, 2 } };
    mstar_resource_step sa = step_of(a, 2, true), sb = step_of(b, 2, true);

    /* A pre-plan that is dropped hands back exactly the pages its admit took. */
    int32_t free0 = mstar_kv_cache_free_pages(kv);
    admit_ok(kv, a, 2);
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, true, S));
    assert_int_equal(mstar_kv_cache_free_pages(kv), free0 - 2); /* a page each */
    mstar_kv_cache_clear_preplan(kv, 1);
    assert_int_equal(mstar_kv_cache_free_pages(kv), free0);
    mstar_kv_cache_clear_preplan(kv, 1); /* nothing pending: no-op */
    mstar_kv_cache_clear_preplan(kv, 7); /* no such slot: no-op */

    /* Promote: the step's own plan of the same segments does not write again. */
    admit_ok(kv, a, 2);
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, true, S));
    mstar_kv_plan p;
    assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, 1, 0, &p));
    int32_t first = p.token_to_page[0];
    p.token_to_page[0] = 12345; /* marks whether the next plan writes */
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, false, S));
    assert_int_equal(p.token_to_page[0], 12345);
    /* Promoted once: a second plan writes. */
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, false, S));
    assert_int_equal(p.token_to_page[0], first);

    /* Stale: pre-plan a, then the step turns out to be b: rewritten, and the stale record can
     * never promote later. */
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, true, S));
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sb, 2, 4, false, S));
    assert_int_equal(p.token_row[0], 0);
    assert_int_not_equal(p.token_to_page[0], first);
    p.token_to_page[0] = 12345;
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, false, S));
    assert_int_equal(p.token_to_page[0], first);
    /* Same segments for another bucket size: not a match either. */
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 2, 4, true, S));
    p.token_to_page[0] = 12345;
    assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &sa, 4, 4, false, S));
    assert_int_equal(p.token_to_page[0], first);

    /* Pre-plans need a slot, and a built one. */
    assert_mstar_status(mstar_kv_cache_plan(kv, MSTAR_PLAN_EAGER, &sa, 2, 4, true, S),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_kv_cache_plan(kv, 2, &sa, 2, 4, true, S), MSTAR_ERANGE);
    mstar_kv_cache_destroy(kv);
}

static void test_plan_errors(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 64);
    mstar_step_segment seg = { 0, 0, 3 };
    mstar_resource_step st = step_of(&seg, 1, true);
    mstar_kv_plan p;
    assert_mstar_status(mstar_kv_cache_plan_buffers(kv, 0, 0, &p), MSTAR_ESTATE);
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 1, 3, false, S), MSTAR_ERANGE);
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 1, 2, 4));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 0));
    /* Not admitted yet. */
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 1, 3, false, S), MSTAR_ESTATE);
    assert_mstar_status(mstar_kv_cache_commit(kv, &st), MSTAR_ESTATE);
    admit_ok(kv, &seg, 1);
    /* The step does not fit the bucket; the bucket does not fit the buffers. */
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 1, 2, false, S), MSTAR_ERANGE);
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 0, 3, false, S), MSTAR_ERANGE);
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 3, 3, false, S), MSTAR_ERANGE);
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &st, 1, 5, false, S), MSTAR_ERANGE);
    assert_mstar_ok(mstar_kv_cache_plan(kv, 0, &st, 2, 4, false, S));
    mstar_step_segment gone = { 42, 0, 1 };
    mstar_resource_step sg = step_of(&gone, 1, true);
    assert_mstar_status(mstar_kv_cache_plan(kv, 0, &sg, 2, 4, false, S), MSTAR_ENOENT);
    assert_mstar_status(mstar_kv_cache_commit(kv, &sg), MSTAR_ENOENT);
    assert_mstar_status(mstar_kv_cache_build_plans(kv, 0, 2, 4), MSTAR_EINVAL);
    mstar_kv_cache_destroy(kv);
}

static void test_build_plans_only_grows(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 2, 64);
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 2, 8, 16));
    mstar_kv_plan before[2][2], after;
    for (int s = 0; s < 2; s++) {
        for (int l = 0; l < 2; l++)
            assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, s, l, &before[s][l]));
    }
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 1, 4, 8)); /* smaller claim: nothing moves */
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 2, 8, 16));
    for (int s = 0; s < 2; s++) {
        for (int l = 0; l < 2; l++) {
            assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, s, l, &after));
            assert_ptr_equal(after.page_table, before[s][l].page_table);
            assert_ptr_equal(after.row_last_token, before[s][l].row_last_token);
            assert_int_equal(after.rows, 8);
            assert_int_equal(after.tokens, 16);
        }
    }
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 3, 4, 32)); /* grows slots and tokens */
    assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, 2, 1, &after));
    assert_int_equal(after.rows, 8);
    assert_int_equal(after.tokens, 32);
    mstar_kv_cache_destroy(kv);
}

static void test_lifecycle(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(16, 4, 1, 64);
    int32_t free0 = mstar_kv_cache_free_pages(kv);
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 5));
    assert_mstar_status(mstar_kv_cache_ingest(kv, 5), MSTAR_EEXIST);
    mstar_step_segment seg = { 5, 0, 10 };
    admit_ok(kv, &seg, 1);
    mstar_resource_step st = step_of(&seg, 1, true);
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    int32_t np;
    /* reset without free: length 0, pages kept for the next stream. */
    assert_mstar_ok(mstar_kv_cache_reset(kv, 5, false));
    assert_int_equal(stream_len(kv, 5, 0, &np), 0);
    assert_int_equal(np, 3);
    admit_ok(kv, &seg, 1);
    assert_int_equal(mstar_kv_cache_free_pages(kv), free0 - 3);
    assert_mstar_ok(mstar_kv_cache_reset(kv, 5, true));
    assert_int_equal(mstar_kv_cache_free_pages(kv), free0);
    admit_ok(kv, &seg, 1);
    assert_mstar_ok(mstar_kv_cache_remove(kv, 5));
    assert_int_equal(mstar_kv_cache_free_pages(kv), free0);
    assert_mstar_status(mstar_kv_cache_remove(kv, 5), MSTAR_ENOENT);
    assert_mstar_status(mstar_kv_cache_reset(kv, 5, true), MSTAR_ENOENT);
    /* Frozen steps (commit false) read and rewrite without growing. */
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 6));
    mstar_step_segment frozen = { 6, 0, 4 };
    admit_ok(kv, &frozen, 1);
    st = step_of(&frozen, 1, true);
    st.commit = false;
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    assert_int_equal(stream_len(kv, 6, 0, NULL), 0);
    /* A request still open at destroy is freed with the cache (ASan checks). */
    mstar_kv_cache_destroy(kv);
}

/* Random ingest / admit / commit / pre-plan drop / reset / remove: every page is held by at most
 * one stream, never the sink, and held + free always equals the pool less the sink. */
static void test_page_accounting_churn(void **state)
{
    (void)state;
    enum { REQS = 12, PAGES = 40, PS = 4 };
    mstar_kv_cache *kv = make_kv(PAGES, PS, 2, 48);
    assert_mstar_ok(mstar_kv_cache_build_plans(kv, 2, REQS, REQS * 8));
    bool open[REQS] = { false };
    uint64_t rng = 99;
    for (int iter = 0; iter < 4000; iter++) {
        int64_t r = (int64_t)(mstar_test_rand(&rng) % REQS);
        unsigned op = (unsigned)(mstar_test_rand(&rng) % 6);
        if (!open[r]) {
            assert_mstar_ok(mstar_kv_cache_ingest(kv, r));
            open[r] = true;
        } else if (op == 0) {
            assert_mstar_ok(mstar_kv_cache_remove(kv, r));
            open[r] = false;
        } else if (op == 1) {
            assert_mstar_ok(mstar_kv_cache_reset(kv, r, mstar_test_rand(&rng) & 1));
        } else {
            int32_t label = (int32_t)(mstar_test_rand(&rng) % 2);
            mstar_step_segment seg = { r, label, (int32_t)(mstar_test_rand(&rng) % 7) };
            mstar_step_segment pad = { -1, label, 3 };
            mstar_step_segment segs[2] = { seg, pad };
            mstar_resource_step st = step_of(segs, 2, true);
            mstar_step_admit_result res;
            mstar_status s = mstar_kv_cache_admit(kv, &st, &res);
            if (s == MSTAR_OK && op == 2) {
                assert_mstar_ok(mstar_kv_cache_plan(kv, 1, &st, 2, 16, true, S));
                mstar_kv_cache_clear_preplan(kv, 1);
            } else if (s == MSTAR_OK) {
                assert_mstar_ok(mstar_kv_cache_plan(kv, 0, &st, 2, 16, false, S));
                assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
            } else {
                assert_true(s == MSTAR_ENOSPC || s == MSTAR_ERANGE);
            }
        }
        int owner[PAGES];
        memset(owner, 0xff, sizeof(owner));
        int32_t held = 0;
        for (int64_t q = 0; q < REQS; q++) {
            if (!open[q])
                continue;
            for (int32_t l = 0; l < 2; l++) {
                int32_t len, np;
                const int32_t *pages;
                assert_mstar_ok(mstar_kv_cache_stream(kv, q, l, &len, &pages, &np));
                assert_true((int64_t)np * PS >= len);
                for (int32_t i = 0; i < np; i++) {
                    assert_int_not_equal(pages[i], MSTAR_KV_SINK_PAGE);
                    assert_true(pages[i] > 0 && pages[i] < PAGES);
                    assert_int_equal(owner[pages[i]], -1);
                    owner[pages[i]] = (int)q;
                }
                held += np;
            }
        }
        assert_int_equal(held + mstar_kv_cache_free_pages(kv), PAGES - 1);
    }
    mstar_kv_cache_destroy(kv);
}

/* The cache and positions as step-runner resources: a shortage is an ok = false result naming the
 * request, not an error; a leased plan lands in the lease's slot; commit honours the payload;
 * pre-plans clear per slot or all at once; bad payloads and double registration are refused. */
/* The post-warm-up symmetry check: nothing to compare without a TP group, and a group of one
 * rank agrees with itself whatever the pool holds. */
static void test_post_warmup_validate_alone(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(8, 4, 1, 64);
    assert_mstar_ok(mstar_kv_cache_post_warmup_validate(kv));
    mstar_rank_group *g;
    assert_mstar_ok(mstar_rank_group_create_single(&g));
    mstar_kv_cache_set_tp_group(kv, g);
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 1));
    mstar_step_segment seg = { 1, 0, 5 };
    admit_ok(kv, &seg, 1);
    assert_mstar_ok(mstar_kv_cache_post_warmup_validate(kv));
    assert_mstar_status(mstar_kv_cache_post_warmup_validate(NULL), MSTAR_EINVAL);
    mstar_kv_cache_destroy(kv);
    mstar_rank_group_destroy(g);
}

static void test_as_step_runner_resources(void **state)
{
    (void)state;
    mstar_kv_cache *kv = make_kv(4, 4, 1, 64); /* 3 usable pages */
    mstar_positions *pos;
    assert_mstar_ok(mstar_positions_create(B, &pos));
    mstar_step_runner *sr;
    assert_mstar_ok(mstar_step_runner_create(B, S, &sr));
    assert_mstar_ok(mstar_kv_cache_register(kv, sr, "kv"));
    assert_mstar_ok(mstar_positions_register(pos, sr, "positions"));
    assert_mstar_status(mstar_kv_cache_register(kv, sr, "kv2"), MSTAR_ESTATE);
    assert_true(mstar_step_runner_supports_preplan(sr));
    mstar_cg_slot_spec specs[2] = { { { "decode", 4, 4, NULL }, 0, 0 },
                                    { { "decode", 4, 4, NULL }, 1, 0 } };
    assert_mstar_ok(mstar_step_runner_claim(sr, specs, 2, 4, 4));
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(sr));
    assert_mstar_ok(mstar_step_runner_ingest_request(sr, 1));
    assert_mstar_ok(mstar_step_runner_ingest_request(sr, 2));

    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    mstar_resource_payload commit = { .commit = true };
    assert_mstar_ok(mstar_step_add_segment(step, 1, 0, 8));
    assert_mstar_ok(mstar_step_add_segment(step, 2, 0, 8));
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &commit, sizeof(commit)));
    assert_mstar_ok(mstar_step_set_resource(step, "positions", &commit, sizeof(commit)));
    mstar_step_admit_result res;
    assert_mstar_ok(mstar_step_runner_admit(sr, step, &res));
    assert_false(res.ok);
    assert_int_equal(res.request, 2);
    assert_int_equal(res.pages_short, 1);
    assert_non_null(strstr(res.reason, "pages short"));
    assert_int_equal(mstar_kv_cache_free_pages(kv), 3);

    /* A leased step of one row: planned into slot 1, committed by the payload. */
    mstar_step_reset(step);
    assert_mstar_ok(mstar_step_add_segment(step, 1, 0, 3));
    assert_mstar_ok(mstar_step_add_segment(step, -7, 0, 0));
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &commit, sizeof(commit)));
    assert_mstar_ok(mstar_step_set_resource(step, "positions", &commit, sizeof(commit)));
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->has_lease = true;
    ctx->slot = 1;
    ctx->lease = (mstar_slot_lease){ 1, { "decode", 4, 4, NULL } };
    assert_mstar_ok(mstar_step_runner_admit(sr, step, &res));
    assert_true(res.ok);
    assert_mstar_ok(mstar_step_runner_plan(sr, step));
    mstar_kv_plan p;
    assert_mstar_ok(mstar_kv_cache_plan_buffers(kv, 1, 0, &p));
    assert_int_equal(p.token_kv_len[2], 3);
    assert_int_equal(p.token_to_page[3], MSTAR_KV_SINK_PAGE); /* the bucket's tail */
    assert_mstar_ok(mstar_step_runner_commit(sr, step));
    assert_int_equal(stream_len(kv, 1, 0, NULL), 3);
    int64_t at;
    assert_mstar_ok(mstar_positions_get(pos, 1, &at));
    assert_int_equal(at, 3);

    /* Pre-plan a page-taking step into slot 0, then drop it: the page comes back. */
    mstar_step_reset(step);
    assert_mstar_ok(mstar_step_add_segment(step, 1, 0, 2));
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &commit, sizeof(commit)));
    ctx = mstar_step_context(step);
    ctx->has_lease = true;
    ctx->lease = (mstar_slot_lease){ 0, { "decode", 4, 4, NULL } };
    int32_t free_before = mstar_kv_cache_free_pages(kv);
    assert_mstar_ok(mstar_step_runner_pre_admit(sr, step, &res));
    assert_true(res.ok);
    assert_mstar_ok(mstar_step_runner_pre_plan(sr, step, NULL));
    assert_int_equal(mstar_kv_cache_free_pages(kv), free_before - 1);
    mstar_step_runner_clear_preplan(sr, -1);
    assert_int_equal(mstar_kv_cache_free_pages(kv), free_before);

    /* A frozen payload advances nothing; a payload of the wrong size is refused. */
    mstar_resource_payload frozen = { .commit = false };
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &frozen, sizeof(frozen)));
    ctx->has_lease = false;
    ctx->slot = -1;
    assert_mstar_ok(mstar_step_runner_admit(sr, step, &res));
    assert_mstar_ok(mstar_step_runner_plan(sr, step));
    assert_mstar_ok(mstar_step_runner_commit(sr, step));
    assert_int_equal(stream_len(kv, 1, 0, NULL), 3);
    char odd[3] = { 1, 0, 0 };
    assert_mstar_ok(mstar_step_set_resource(step, "kv", odd, sizeof(odd)));
    assert_mstar_status(mstar_step_runner_admit(sr, step, &res), MSTAR_EINVAL);

    mstar_step_runner_remove_request(sr, 1);
    mstar_step_runner_remove_request(sr, 2);
    assert_int_equal(mstar_kv_cache_free_pages(kv), 3);
    mstar_step_destroy(step);
    mstar_step_runner_destroy(sr);
    mstar_positions_destroy(pos);
    mstar_kv_cache_destroy(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_prefill_then_decode_plan),
        cmocka_unit_test(test_admit_shortage_reserves_nothing),
        cmocka_unit_test(test_admit_bad_input),
        cmocka_unit_test(test_padding_rows_and_tails_address_the_sink),
        cmocka_unit_test(test_admit_is_idempotent),
        cmocka_unit_test(test_preplan_promote_and_clear),
        cmocka_unit_test(test_plan_errors),
        cmocka_unit_test(test_build_plans_only_grows),
        cmocka_unit_test(test_lifecycle),
        cmocka_unit_test(test_page_accounting_churn),
        cmocka_unit_test(test_post_warmup_validate_alone),
        cmocka_unit_test(test_as_step_runner_resources),
    };
    return cmocka_run_group_tests(tests, host_group_setup, host_group_teardown);
}
