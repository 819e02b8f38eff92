/*
 * test_plan_captures.c — plan_captures against hand-computed plans (design.md "Planning",
 * hard case G-28): the pool model (kept plus the largest extra), executable memory and a walk's
 * reuse credit spread across its buckets, the `reusable` bound, the stop at the first candidate
 * that does not fit, the floor of the largest eager step, and a plan that does not depend on the
 * order the costs came in.
 */
#include "mstar_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

static mstar_bucket_cost bucket(const char *walk, int64_t bs, uint64_t graph, uint64_t kept,
                                uint32_t slots, uint64_t outside, int32_t executable)
{
    mstar_bucket_cost b;
    memset(&b, 0, sizeof(b));
    b.key.graph_walk = walk;
    b.key.bs = bs;
    b.key.num_tokens = bs;
    b.cost.peak = 10;
    b.cost.has_graph = true;
    b.cost.graph = graph;
    b.cost.kept = kept;
    b.cost.slots = slots;
    b.cost.outside = outside;
    b.cost.executable = executable;
    return b;
}

static void test_pool_model_kept_plus_largest_extra(void **state)
{
    (void)state;
    /* standalone costs 110, 170, 340: planned in that order.
     *   bs1: 2·10 + (90 − 0)   = 110   total 110
     *   bs2: 2·20 + (130 − 90) =  80   total 190
     *   bs4: 2·40 + (260 − 130)= 210   total 400
     * predicted = kept 20+40+80 + largest extra 260 = 400. */
    mstar_bucket_cost b[] = {
        bucket("decode", 4, 300, 40, 2, 0, -1),
        bucket("decode", 1, 100, 10, 2, 0, -1),
        bucket("decode", 2, 150, 20, 2, 0, -1),
    };
    mstar_pool_costs pool = { "node_a", b, 3 };
    mstar_capture_plan plan;
    assert_mstar_ok(
        mstar_plan_captures(&pool, 1, 10 + 400, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.floor, 10);
    assert_int_equal(plan.npools, 1);
    assert_int_equal(plan.pools[0].nplanned, 3);
    assert_true(plan.pools[0].planned[0] && plan.pools[0].planned[1] && plan.pools[0].planned[2]);
    assert_int_equal(plan.pools[0].predicted, 400);
    assert_int_equal(plan.pools[0].outside, 0);
    mstar_capture_plan_clear(&plan);

    /* One byte less and the last (bs4, Δ 210) no longer fits: predicted 20+40 + 130. */
    assert_mstar_ok(
        mstar_plan_captures(&pool, 1, 10 + 399, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_false(plan.pools[0].planned[0]);
    assert_true(plan.pools[0].planned[1] && plan.pools[0].planned[2]);
    assert_int_equal(plan.pools[0].nplanned, 2);
    assert_int_equal(plan.pools[0].predicted, 190);
    mstar_capture_plan_clear(&plan);
    assert_null(plan.pools);
    mstar_capture_plan_clear(&plan); /* twice is fine */
}

/* Walk w (credit 250, index 0) in pool p; walk v (credit 1000, index 1) in pool q. */
static mstar_bucket_cost walk_w[3], walk_v[1];
static mstar_pool_costs two_pools[2];
static const uint64_t credits[2] = { 250, 1000 };

static void setup_two_walks(void)
{
    walk_w[0] = bucket("w", 1, 100, 0, 2, 100, 0); /* standalone 100 + 200 = 300 */
    walk_w[1] = bucket("w", 2, 200, 0, 2, 100, 0); /* 200 + 200 = 400 */
    walk_w[2] = bucket("w", 4, 300, 0, 1, 100, 0); /* 300 + 100 = 400: ties bs2, after it */
    walk_v[0] = bucket("v", 1, 50, 0, 1, 100, 1);  /* 50 + 100 = 150: first */
    two_pools[0] = (mstar_pool_costs){ "p", walk_w, 3 };
    two_pools[1] = (mstar_pool_costs){ "q", walk_v, 1 };
}

static void test_reuse_credit_spread_across_walk(void **state)
{
    (void)state;
    setup_two_walks();
    /* v bs1: pool 50, exec 100, reuse 100 of v's 1000     Δ  50   total  50
     * w bs1: pool 100, exec 200, reuse 200 (credit → 50)  Δ 100   total 150
     * w bs2: pool 100, exec 200, reuse 50 (credit → 0)    Δ 250   total 400
     * w bs4: pool 100, exec 100, reuse 0                  Δ 200   total 600
     * p: predicted 300, outside 150 + 100; q: predicted 50, outside 0 (v's credit is its own). */
    mstar_capture_plan plan;
    assert_mstar_ok(
        mstar_plan_captures(two_pools, 2, 10 + 600, credits, 2, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.pools[0].nplanned, 3);
    assert_int_equal(plan.pools[0].predicted, 300);
    assert_int_equal(plan.pools[0].outside, 250);
    assert_int_equal(plan.pools[1].nplanned, 1);
    assert_int_equal(plan.pools[1].predicted, 50);
    assert_int_equal(plan.pools[1].outside, 0);
    mstar_capture_plan_clear(&plan);

    /* 599: w bs4 (Δ 200) no longer fits. */
    assert_mstar_ok(
        mstar_plan_captures(two_pools, 2, 10 + 599, credits, 2, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_true(plan.pools[0].planned[0] && plan.pools[0].planned[1]);
    assert_false(plan.pools[0].planned[2]);
    assert_int_equal(plan.pools[0].predicted, 200);
    assert_int_equal(plan.pools[0].outside, 150);
    mstar_capture_plan_clear(&plan);

    /* Without credits (executable -1 everywhere) every graph pays its full executable bytes. */
    for (int i = 0; i < 3; i++)
        walk_w[i].cost.executable = -1;
    walk_v[0].cost.executable = -1;
    assert_mstar_ok(mstar_plan_captures(two_pools, 2, UINT64_MAX, credits, 2,
                                        MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.pools[0].outside, 500);
    assert_int_equal(plan.pools[1].outside, 100);
    mstar_capture_plan_clear(&plan);
}

static void test_reusable_bound(void **state)
{
    (void)state;
    setup_two_walks();
    /* reusable 120 over every bucket of the device:
     * v bs1: reuse min(100, 1000, 120) = 100   used 100   q outside 0
     * w bs1: reuse min(200, 250, 20)   = 20    used 120   p outside 180
     * w bs2: reuse 0                                       p outside 380
     * w bs4: reuse 0                                       p outside 480 */
    mstar_capture_plan plan;
    assert_mstar_ok(mstar_plan_captures(two_pools, 2, UINT64_MAX, credits, 2, 120, &plan));
    assert_int_equal(plan.pools[0].nplanned, 3);
    assert_int_equal(plan.pools[0].outside, 480);
    assert_int_equal(plan.pools[1].outside, 0);
    mstar_capture_plan_clear(&plan);

    /* 0 means no reuse at all (the reference read 0 as None). */
    assert_mstar_ok(mstar_plan_captures(two_pools, 2, UINT64_MAX, credits, 2, 0, &plan));
    assert_int_equal(plan.pools[0].outside, 500);
    assert_int_equal(plan.pools[1].outside, 100);
    mstar_capture_plan_clear(&plan);

    /* The bound decides fit: with reusable 120, w bs1 needs Δ 100 + 180 = 280 after v's 50. */
    assert_mstar_ok(mstar_plan_captures(two_pools, 2, 10 + 50 + 279, credits, 2, 120, &plan));
    assert_int_equal(plan.pools[1].nplanned, 1);
    assert_int_equal(plan.pools[0].nplanned, 0);
    assert_int_equal(plan.pools[0].predicted, 0);
    mstar_capture_plan_clear(&plan);
}

static void test_stops_at_first_candidate_that_does_not_fit(void **state)
{
    (void)state;
    /* P: a (100) and c (160); Q: b (150). Order a, b, c. With 200 beside the floor, b does not
     * fit (100 + 150), so the walk stops there even though c would add only 60 to P. */
    mstar_bucket_cost p[] = { bucket("w", 1, 100, 0, 1, 0, -1), bucket("w", 4, 160, 0, 1, 0, -1) };
    mstar_bucket_cost q[] = { bucket("x", 2, 150, 0, 1, 0, -1) };
    mstar_pool_costs pools[] = { { "P", p, 2 }, { "Q", q, 1 } };
    mstar_capture_plan plan;
    assert_mstar_ok(
        mstar_plan_captures(pools, 2, 10 + 200, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_true(plan.pools[0].planned[0]);
    assert_false(plan.pools[0].planned[1]);
    assert_false(plan.pools[1].planned[0]);
    assert_int_equal(plan.pools[0].predicted, 100);
    assert_int_equal(plan.pools[1].predicted, 0);
    mstar_capture_plan_clear(&plan);
}

static void test_floor_of_largest_eager_step(void **state)
{
    (void)state;
    /* The unplannable bucket (no throwaway capture succeeded) still sets the floor: its shape
     * runs eager beside whatever is captured. */
    mstar_bucket_cost b[] = {
        bucket("w", 1, 100, 0, 1, 0, -1),
        bucket("w", 2, 101, 0, 1, 0, -1),
        bucket("prefill", 1, 0, 0, 1, 0, -1),
    };
    b[2].cost.has_graph = false;
    b[2].cost.peak = 500;
    mstar_pool_costs pool = { "node", b, 3 };
    mstar_capture_plan plan;
    /* 600 = floor 500 + 100: bs1 fits exactly, bs2 (Δ 1) does not. */
    assert_mstar_ok(mstar_plan_captures(&pool, 1, 600, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.floor, 500);
    assert_true(plan.pools[0].planned[0]);
    assert_false(plan.pools[0].planned[1]);
    assert_false(plan.pools[0].planned[2]);
    mstar_capture_plan_clear(&plan);

    /* Less free than the floor: nothing, not even a zero-cost graph. */
    b[0].cost.graph = 0;
    assert_mstar_ok(mstar_plan_captures(&pool, 1, 499, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.pools[0].nplanned, 0);
    assert_int_equal(plan.pools[0].predicted, 0);
    mstar_capture_plan_clear(&plan);

    /* Even with unlimited memory the unplannable bucket is a drop. */
    assert_mstar_ok(
        mstar_plan_captures(&pool, 1, UINT64_MAX, NULL, 0, MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    assert_int_equal(plan.pools[0].nplanned, 2);
    assert_false(plan.pools[0].planned[2]);
    mstar_capture_plan_clear(&plan);
}

/* ---- order independence ---------------------------------------------------------------------- */

#define NPOOLS   3
#define PER_POOL 8

static const char *planned_keys(const mstar_pool_costs *pools, const mstar_capture_plan *plan,
                                char *buf, size_t size)
{
    /* A canonical text: sorted "pool/walk/bs/tokens/key/config" lines of the planned buckets. */
    char lines[NPOOLS * PER_POOL][96];
    size_t n = 0;
    for (size_t p = 0; p < plan->npools; p++) {
        for (size_t i = 0; i < pools[p].nbuckets; i++) {
            if (!plan->pools[p].planned[i])
                continue;
            const mstar_bucket_key *k = &pools[p].buckets[i].key;
            snprintf(lines[n++], sizeof(lines[0]), "%s/%s/%lld/%lld/%s/%u", pools[p].name,
                     k->graph_walk, (long long)k->bs, (long long)k->num_tokens,
                     k->cg_key_info ? k->cg_key_info : "-", pools[p].buckets[i].config_idx);
        }
    }
    qsort(lines, n, sizeof(lines[0]), (int (*)(const void *, const void *))strcmp);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strncat(buf, lines[i], size - strlen(buf) - 1);
        strncat(buf, "\n", size - strlen(buf) - 1);
    }
    return buf;
}

static void test_tie_break_is_order_independent(void **state)
{
    (void)state;
    /* Every bucket has the same standalone cost (graph 100, one slot), so the order is the
     * tie-break alone: (bs, tokens), pool name, config, walk, key_info (None first). Pool "a"
     * has a second capture of walk_y at bs=1 (key "cfg", keeping 30), so the bs=1 order is
     *   a/y/None (Δ 100)  a/y/cfg (Δ 30)  a/x (Δ 0)  b/y (Δ 100)  b/x (Δ 0)  c/y (Δ 100) ...
     * With 250 beside the floor the walk stops at c/y; with 120, at a/y/cfg. Any other order
     * inside pool "a" would stop elsewhere (a/y/cfg first costs 100 and leaves a/y/None 30). */
    const char *pool_names[NPOOLS] = { "c", "a", "b" };
    mstar_bucket_cost buckets[NPOOLS][PER_POOL];
    for (int p = 0; p < NPOOLS; p++) {
        for (int i = 0; i < PER_POOL; i++) {
            buckets[p][i] =
                bucket(i % 2 ? "walk_x" : "walk_y", (int64_t)1 << (i / 2), 100, 0, 1, 0, -1);
            buckets[p][i].config_idx = (uint32_t)(i % 2);
        }
        if (strcmp(pool_names[p], "a") == 0) {
            buckets[p][2].key.bs = 1;
            buckets[p][2].key.num_tokens = 1;
            buckets[p][2].key.cg_key_info = "cfg";
            buckets[p][2].cost.kept = 30;
        }
    }
    mstar_pool_costs pools[NPOOLS];
    for (int p = 0; p < NPOOLS; p++)
        pools[p] = (mstar_pool_costs){ pool_names[p], buckets[p], PER_POOL };
    const uint64_t budgets[2] = { 250, 120 };
    const char *wants[2] = { "a/walk_x/1/1/-/1\n"
                             "a/walk_y/1/1/-/0\n"
                             "a/walk_y/1/1/cfg/0\n"
                             "b/walk_x/1/1/-/1\n"
                             "b/walk_y/1/1/-/0\n",
                             "a/walk_y/1/1/-/0\n" };
    uint64_t rng = 42;
    for (int round = 0; round < 50; round++) {
        for (int k = 0; k < 2; k++) {
            mstar_capture_plan plan;
            char got[2048];
            assert_mstar_ok(mstar_plan_captures(pools, NPOOLS, 10 + budgets[k], NULL, 0,
                                                MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
            assert_string_equal(planned_keys(pools, &plan, got, sizeof(got)), wants[k]);
            mstar_capture_plan_clear(&plan);
        }
        /* Shuffle the pools and the buckets inside each: the plans must not change. */
        for (int p = NPOOLS - 1; p > 0; p--) {
            int j = (int)(mstar_test_rand(&rng) % (uint64_t)(p + 1));
            mstar_pool_costs t = pools[p];
            pools[p] = pools[j];
            pools[j] = t;
        }
        for (int p = 0; p < NPOOLS; p++) {
            mstar_bucket_cost *b = (mstar_bucket_cost *)pools[p].buckets;
            for (int i = PER_POOL - 1; i > 0; i--) {
                int j = (int)(mstar_test_rand(&rng) % (uint64_t)(i + 1));
                mstar_bucket_cost t = b[i];
                b[i] = b[j];
                b[j] = t;
            }
        }
    }
}

static void test_bad_costs_are_rejected(void **state)
{
    (void)state;
    mstar_bucket_cost b[2] = { bucket("w", 1, 100, 0, 1, 0, -1), bucket("w", 2, 100, 0, 1, 0, -1) };
    mstar_pool_costs pool = { "node", b, 2 };
    mstar_capture_plan plan;
    memset(&plan, 0, sizeof(plan));

    b[1].cost.kept = 101;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "w[bs=2,tokens=2]"));
    b[1].cost.kept = 0;

    b[1].cost.slots = 0;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "slots"));
    b[1].cost.slots = 1;

    b[1].cost.executable = 1;
    uint64_t one_credit = 5;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, &one_credit, 1, 0, &plan),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "executable"));
    b[1].cost.executable = -2;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, &one_credit, 1, 0, &plan),
                        MSTAR_EINVAL);
    b[1].cost.executable = -1;

    b[1].key.bs = 1;
    b[1].key.num_tokens = 1;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "twice"));
    b[1].config_idx = 1; /* same shape, another config: a different bucket */
    assert_mstar_ok(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan));
    mstar_capture_plan_clear(&plan);

    b[1].key.graph_walk = "bad/walk";
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    b[1].key.graph_walk = NULL;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    b[1].key.graph_walk = "w";
    b[1].key.bs = 0;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    b[1].key.bs = 2;
    b[1].key.num_tokens = 2;

    mstar_pool_costs twins[2] = { pool, pool };
    assert_mstar_status(mstar_plan_captures(twins, 2, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "both named"));
    twins[1].name = "..";
    assert_mstar_status(mstar_plan_captures(twins, 2, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);

    b[1].cost.slots = 4;
    b[1].cost.kept = UINT64_MAX / 2;
    b[1].cost.graph = UINT64_MAX;
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, &plan), MSTAR_ERANGE);

    /* Nothing was allocated on any failing path (ASan checks), and *out was left alone. */
    assert_null(plan.pools);
    assert_mstar_status(mstar_plan_captures(NULL, 1, 1000, NULL, 0, 0, &plan), MSTAR_EINVAL);
    assert_mstar_status(mstar_plan_captures(&pool, 1, 1000, NULL, 0, 0, NULL), MSTAR_EINVAL);
}

static void test_empty_device(void **state)
{
    (void)state;
    mstar_capture_plan plan;
    assert_mstar_ok(mstar_plan_captures(NULL, 0, 0, NULL, 0, 0, &plan));
    assert_int_equal(plan.npools, 0);
    assert_int_equal(plan.floor, 0);
    mstar_capture_plan_clear(&plan);
    mstar_pool_costs empty = { "node", NULL, 0 };
    assert_mstar_ok(mstar_plan_captures(&empty, 1, 0, NULL, 0, 0, &plan));
    assert_int_equal(plan.npools, 1);
    assert_int_equal(plan.pools[0].nplanned, 0);
    mstar_capture_plan_clear(&plan);
}

/* Realistic sizes: nothing overflows near the top of the range with 1 TiB of "free". */
static void test_large_sizes(void **state)
{
    (void)state;
    mstar_bucket_cost b[] = {
        bucket("w", 64, 900 * MiB, 300 * MiB, 2, 40 * MiB, 0),
        bucket("w", 1, 900 * MiB, 300 * MiB, 2, 40 * MiB, 0),
    };
    b[0].cost.peak = 20000 * MiB;
    mstar_pool_costs pool = { "talker", b, 2 };
    uint64_t credit = 24 * MiB;
    mstar_capture_plan plan;
    assert_mstar_ok(mstar_plan_captures(&pool, 1, (uint64_t)1 << 40, &credit, 1,
                                        MSTAR_PLAN_REUSE_UNBOUNDED, &plan));
    /* kept 4·300 + extra 600; outside 4·40 − 24. */
    assert_int_equal(plan.pools[0].predicted, 1800 * MiB);
    assert_int_equal(plan.pools[0].outside, 136 * MiB);
    assert_int_equal(plan.floor, 20000 * MiB);
    mstar_capture_plan_clear(&plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_model_kept_plus_largest_extra),
        cmocka_unit_test(test_reuse_credit_spread_across_walk),
        cmocka_unit_test(test_reusable_bound),
        cmocka_unit_test(test_stops_at_first_candidate_that_does_not_fit),
        cmocka_unit_test(test_floor_of_largest_eager_step),
        cmocka_unit_test(test_tie_break_is_order_independent),
        cmocka_unit_test(test_bad_costs_are_rejected),
        cmocka_unit_test(test_empty_device),
        cmocka_unit_test(test_large_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
