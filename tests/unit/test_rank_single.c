/*
 * test_rank_single.c — agree_across_ranks on a group of one (design.md "Rank agreement": a group of
 * one returns the input unchanged), the argument checks every group shares, the elementwise
 * reduction, and a build without CUDA answering MSTAR_ENOTSUP for NCCL.
 */
#include "mstar_test.h"

#include "ranks/rank_group.h"

#include <stdlib.h>
#include <string.h>

static void test_single_rank_is_identity(void **state)
{
    (void)state;
    mstar_rank_group *g;
    assert_mstar_ok(mstar_rank_group_create_single(&g));
    assert_int_equal(mstar_rank_group_rank(g), 0);
    assert_int_equal(mstar_rank_group_size(g), 1);
    int64_t v[4] = { 3, -1, INT64_MAX, INT64_MIN };
    assert_mstar_ok(mstar_agree_across_ranks(g, v, 4, MSTAR_REDUCE_MIN));
    assert_int_equal(v[0], 3);
    assert_int_equal(v[1], -1);
    assert_true(v[2] == INT64_MAX && v[3] == INT64_MIN);
    assert_mstar_ok(mstar_agree_across_ranks(g, v, 4, MSTAR_REDUCE_MAX));
    assert_int_equal(v[0], 3);
    assert_mstar_ok(mstar_agree_across_ranks(g, NULL, 0, MSTAR_REDUCE_MAX));

    assert_mstar_status(mstar_agree_across_ranks(NULL, v, 4, MSTAR_REDUCE_MIN), MSTAR_EINVAL);
    assert_mstar_status(mstar_agree_across_ranks(g, NULL, 4, MSTAR_REDUCE_MIN), MSTAR_EINVAL);
    assert_mstar_status(mstar_agree_across_ranks(g, v, 4, (mstar_reduce)7), MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_single(NULL), MSTAR_EINVAL);
    mstar_rank_group_destroy(g);
    mstar_rank_group_destroy(NULL);
}

static void test_reduce_into(void **state)
{
    (void)state;
    int64_t acc[3] = { 1, 5, -7 };
    const int64_t v[3] = { 0, 9, -7 };
    mstar__reduce_into(acc, v, 3, MSTAR_REDUCE_MIN);
    assert_true(acc[0] == 0 && acc[1] == 5 && acc[2] == -7);
    mstar__reduce_into(acc, v, 3, MSTAR_REDUCE_MAX);
    assert_true(acc[0] == 0 && acc[1] == 9 && acc[2] == -7);
}

static void test_timeout_knob(void **state)
{
    (void)state;
    int64_t t;
    unsetenv("MSTAR_RANK_AGREE_TIMEOUT_MS");
    assert_mstar_ok(mstar__rank_agree_timeout(0, &t));
    assert_int_equal(t, 300000);
    assert_mstar_ok(mstar__rank_agree_timeout(250, &t));
    assert_int_equal(t, 250);
    setenv("MSTAR_RANK_AGREE_TIMEOUT_MS", "1500", 1);
    assert_mstar_ok(mstar__rank_agree_timeout(0, &t));
    assert_int_equal(t, 1500);
    setenv("MSTAR_RANK_AGREE_TIMEOUT_MS", "0", 1);
    assert_mstar_status(mstar__rank_agree_timeout(0, &t), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_RANK_AGREE_TIMEOUT_MS"));
    unsetenv("MSTAR_RANK_AGREE_TIMEOUT_MS");
    assert_mstar_status(mstar__rank_agree_timeout(-5, &t), MSTAR_EINVAL);
}

static void test_nccl_needs_cuda(void **state)
{
    (void)state;
    if (mstar_built_with_cuda())
        skip();
    mstar_rank_group *g, *n = NULL;
    assert_mstar_ok(mstar_rank_group_create_single(&g));
    assert_mstar_status(mstar_rank_group_create_nccl(g, 0, &n), MSTAR_ENOTSUP);
    assert_null(n);
    mstar_rank_group_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_rank_is_identity),
        cmocka_unit_test(test_reduce_into),
        cmocka_unit_test(test_timeout_knob),
        cmocka_unit_test(test_nccl_needs_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
