/*
 * test_rank_custom.c — a rank group whose reduction is a callback (mstar_rank_group_create_custom,
 * what the Python package wraps a torch.distributed group in): the callback's result is the
 * agreement, a failing callback leaves the values unwritten and names the group, the argument
 * checks, and destroy running once.
 */
#include "mstar_test.h"

#include "mstar/planner.h"

#include <string.h>

struct fake {
    int calls;
    int destroyed;
    bool fail;
};

/* Pretends another rank holds {10, 0, ...}: min/max against it. */
static mstar_status fake_reduce(void *user, int64_t *values, size_t n, mstar_reduce reduce)
{
    struct fake *f = user;
    f->calls++;
    if (f->fail)
        return mstar_error_set(MSTAR_ETIMEDOUT, "fake: rank 1 did not answer");
    for (size_t i = 0; i < n; i++) {
        int64_t other = i == 0 ? 10 : 0;
        if (reduce == MSTAR_REDUCE_MIN ? other < values[i] : other > values[i])
            values[i] = other;
    }
    return MSTAR_OK;
}

static void fake_destroy(void *user)
{
    ((struct fake *)user)->destroyed++;
}

static void test_custom_group_reduces_through_the_callback(void **state)
{
    (void)state;
    struct fake f = { 0 };
    mstar_rank_group *g;
    assert_mstar_ok(mstar_rank_group_create_custom(1, 2, fake_reduce, fake_destroy, &f, &g));
    assert_int_equal(mstar_rank_group_rank(g), 1);
    assert_int_equal(mstar_rank_group_size(g), 2);
    int64_t v[2] = { 3, 1 };
    assert_mstar_ok(mstar_agree_across_ranks(g, v, 2, MSTAR_REDUCE_MIN));
    assert_true(v[0] == 3 && v[1] == 0);
    int64_t w[2] = { 3, 1 };
    assert_mstar_ok(mstar_agree_across_ranks(g, w, 2, MSTAR_REDUCE_MAX));
    assert_true(w[0] == 10 && w[1] == 1);
    f.fail = true;
    int64_t u[2] = { 3, 1 };
    assert_mstar_status(mstar_agree_across_ranks(g, u, 2, MSTAR_REDUCE_MIN), MSTAR_ETIMEDOUT);
    assert_true(u[0] == 3 && u[1] == 1); /* unwritten on failure */
    assert_non_null(strstr(mstar_last_error(), "custom group"));
    assert_int_equal(f.calls, 3);
    mstar_rank_group_destroy(g);
    assert_int_equal(f.destroyed, 1);
}

static void test_custom_group_arguments(void **state)
{
    (void)state;
    struct fake f = { 0 };
    mstar_rank_group *g = NULL;
    assert_mstar_status(mstar_rank_group_create_custom(2, 2, fake_reduce, NULL, &f, &g),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_custom(0, 0, fake_reduce, NULL, &f, &g),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_rank_group_create_custom(0, 1, NULL, NULL, &f, &g), MSTAR_EINVAL);
    assert_null(g);
    assert_mstar_ok(mstar_rank_group_create_custom(0, 1, fake_reduce, NULL, &f, &g));
    mstar_rank_group_destroy(g); /* no destroy callback */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_custom_group_reduces_through_the_callback),
        cmocka_unit_test(test_custom_group_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
