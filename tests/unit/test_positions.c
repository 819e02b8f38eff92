/*
 * test_positions.c — the positions resource: per-token positions with zeroed padding and tails,
 * one advance per request however many labels it has rows for (design.md G-23), frozen
 * steps, pre-plan promote, lifecycle and bad input.
 */
#include "resource_harness.h"

static void test_plan_positions(void **state)
{
    (void)state;
    mstar_positions *pos;
    assert_mstar_ok(mstar_positions_create(B, &pos));
    assert_mstar_ok(mstar_positions_build_plans(pos, 2, 16));
    assert_mstar_ok(mstar_positions_ingest(pos, 1));
    assert_mstar_ok(mstar_positions_ingest(pos, 2));
    mstar_step_segment prefill[] = { { 1, 0, 3 }, { 2, 0, 2 } };
    mstar_resource_step st = step_of(prefill, 2, true);
    assert_mstar_ok(mstar_positions_plan(pos, MSTAR_PLAN_EAGER, &st, 5, false, S));
    assert_mstar_ok(mstar_positions_commit(pos, &st));
    int32_t *ids, cap;
    assert_mstar_ok(mstar_positions_plan_buffer(pos, MSTAR_PLAN_EAGER, &ids, &cap));
    assert_int_equal(cap, 5);
    int32_t want[] = { 0, 1, 2, 0, 1 };
    for (int i = 0; i < 5; i++)
        assert_int_equal(ids[i], want[i]);
    /* Decode into slot 1 of an 8-token bucket with a padding row: tail and padding read 0. */
    mstar_step_segment decode[] = { { 2, 0, 1 }, { 1, 0, 1 }, { -3, 0, 2 } };
    st = step_of(decode, 3, true);
    assert_mstar_ok(mstar_positions_plan_buffer(pos, 1, &ids, &cap));
    for (int i = 0; i < cap; i++)
        ids[i] = 77;
    assert_mstar_ok(mstar_positions_plan(pos, 1, &st, 8, false, S));
    int32_t want2[] = { 2, 3, 0, 0, 0, 0, 0, 0 };
    for (int i = 0; i < 8; i++)
        assert_int_equal(ids[i], want2[i]);
    assert_mstar_ok(mstar_positions_commit(pos, &st));
    int64_t p;
    assert_mstar_ok(mstar_positions_get(pos, 1, &p));
    assert_int_equal(p, 4);
    assert_mstar_ok(mstar_positions_get(pos, 2, &p));
    assert_int_equal(p, 3);
    mstar_positions_destroy(pos);
}

/* G-23: a combined-label step (cond and uncond rows of one request) advances the request once;
 * a frozen-prefix step does not grow. The KV cache advances each label's stream once. */
static void test_combined_label_commit_advances_once(void **state)
{
    (void)state;
    mstar_positions *pos;
    assert_mstar_ok(mstar_positions_create(B, &pos));
    mstar_kv_cache_config cfg = { 32, 4, 2, 64 };
    mstar_kv_cache *kv;
    assert_mstar_ok(mstar_kv_cache_create(&cfg, B, &kv));
    assert_mstar_ok(mstar_positions_ingest(pos, 9));
    assert_mstar_ok(mstar_kv_cache_ingest(kv, 9));
    mstar_step_segment cfg_step[] = { { 9, 0, 3 }, { 9, 1, 3 } };
    mstar_resource_step st = step_of(cfg_step, 2, true);
    mstar_step_admit_result res;
    assert_mstar_ok(mstar_kv_cache_admit(kv, &st, &res));
    assert_mstar_ok(mstar_positions_plan(pos, MSTAR_PLAN_EAGER, &st, 6, false, S));
    int32_t *ids, cap;
    assert_mstar_ok(mstar_positions_plan_buffer(pos, MSTAR_PLAN_EAGER, &ids, &cap));
    int32_t want[] = { 0, 1, 2, 0, 1, 2 };
    for (int i = 0; i < 6; i++)
        assert_int_equal(ids[i], want[i]);
    assert_mstar_ok(mstar_positions_commit(pos, &st));
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    int64_t p;
    assert_mstar_ok(mstar_positions_get(pos, 9, &p));
    assert_int_equal(p, 3);
    for (int32_t l = 0; l < 2; l++) {
        int32_t len, np;
        const int32_t *pages;
        assert_mstar_ok(mstar_kv_cache_stream(kv, 9, l, &len, &pages, &np));
        assert_int_equal(len, 3);
    }
    /* Frozen: the same tokens rewritten, nothing advances. */
    mstar_step_segment frozen[] = { { 9, 0, 2 }, { 9, 1, 2 } };
    st = step_of(frozen, 2, false);
    assert_mstar_ok(mstar_kv_cache_admit(kv, &st, &res));
    assert_mstar_ok(mstar_positions_commit(pos, &st));
    assert_mstar_ok(mstar_kv_cache_commit(kv, &st));
    assert_mstar_ok(mstar_positions_get(pos, 9, &p));
    assert_int_equal(p, 3);
    int32_t len, np;
    const int32_t *pages;
    assert_mstar_ok(mstar_kv_cache_stream(kv, 9, 1, &len, &pages, &np));
    assert_int_equal(len, 3);
    /* Rows of one request that disagree on the span are refused. */
    mstar_step_segment uneven[] = { { 9, 0, 2 }, { 9, 1, 1 } };
    st = step_of(uneven, 2, true);
    assert_mstar_status(mstar_positions_plan(pos, MSTAR_PLAN_EAGER, &st, 3, false, S),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_positions_commit(pos, &st), MSTAR_EINVAL);
    assert_mstar_ok(mstar_positions_get(pos, 9, &p));
    assert_int_equal(p, 3);
    mstar_kv_cache_destroy(kv);
    mstar_positions_destroy(pos);
}

static void test_preplan_and_errors(void **state)
{
    (void)state;
    mstar_positions *pos;
    assert_mstar_ok(mstar_positions_create(B, &pos));
    mstar_step_segment seg = { 4, 0, 2 };
    mstar_resource_step st = step_of(&seg, 1, true);
    assert_mstar_status(mstar_positions_plan(pos, MSTAR_PLAN_EAGER, &st, 2, false, S),
                        MSTAR_ENOENT);
    assert_mstar_ok(mstar_positions_ingest(pos, 4));
    assert_mstar_status(mstar_positions_ingest(pos, 4), MSTAR_EEXIST);
    assert_mstar_status(mstar_positions_plan(pos, 0, &st, 2, false, S), MSTAR_ERANGE);
    assert_mstar_ok(mstar_positions_build_plans(pos, 2, 4));
    assert_mstar_status(mstar_positions_plan(pos, 0, &st, 1, false, S), MSTAR_ERANGE);
    assert_mstar_status(mstar_positions_plan(pos, 0, &st, 8, false, S), MSTAR_ERANGE);
    assert_mstar_status(mstar_positions_plan(pos, MSTAR_PLAN_EAGER, &st, 2, true, S), MSTAR_EINVAL);
    assert_mstar_ok(mstar_positions_plan(pos, 0, &st, 4, true, S));
    int32_t *ids, cap;
    assert_mstar_ok(mstar_positions_plan_buffer(pos, 0, &ids, &cap));
    ids[0] = 55;
    assert_mstar_ok(mstar_positions_plan(pos, 0, &st, 4, false, S)); /* promoted: no write */
    assert_int_equal(ids[0], 55);
    assert_mstar_ok(mstar_positions_plan(pos, 0, &st, 4, true, S));
    mstar_positions_clear_preplan(pos, 0);
    assert_mstar_ok(mstar_positions_plan(pos, 0, &st, 4, false, S)); /* cleared: writes */
    assert_int_equal(ids[0], 0);
    assert_mstar_ok(mstar_positions_commit(pos, &st));
    assert_mstar_ok(mstar_positions_reset(pos, 4));
    int64_t p;
    assert_mstar_ok(mstar_positions_get(pos, 4, &p));
    assert_int_equal(p, 0);
    assert_mstar_ok(mstar_positions_remove(pos, 4));
    assert_mstar_status(mstar_positions_remove(pos, 4), MSTAR_ENOENT);
    assert_mstar_status(mstar_positions_reset(pos, 4), MSTAR_ENOENT);
    assert_mstar_status(mstar_positions_get(pos, 4, &p), MSTAR_ENOENT);
    assert_mstar_ok(mstar_positions_ingest(pos, -2)); /* padding rows own nothing */
    assert_mstar_ok(mstar_positions_remove(pos, -2));
    assert_mstar_status(mstar_positions_build_plans(pos, 1, 0), MSTAR_EINVAL);
    assert_mstar_status(mstar_positions_create(B, NULL), MSTAR_EINVAL);
    mstar_step_segment neg = { 5, 0, -1 };
    st = step_of(&neg, 1, true);
    assert_mstar_status(mstar_positions_commit(pos, &st), MSTAR_EINVAL);
    mstar_positions_destroy(pos);
    mstar_positions_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_positions),
        cmocka_unit_test(test_combined_label_commit_advances_once),
        cmocka_unit_test(test_preplan_and_errors),
    };
    return cmocka_run_group_tests(tests, host_group_setup, host_group_teardown);
}
