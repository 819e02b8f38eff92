/*
 * test_required_graphs.c — fail_if_graphs_required (design.md "Startup", the
 * MSTAR_REQUIRE_CUDA_GRAPHS half of hard case G-28): a dropped bucket is a warning by default
 * and a startup failure naming the bucket when graphs are required.
 */
#include "mstar_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_dropped_bucket_warns_by_default(void **state)
{
    (void)state;
    unsetenv("MSTAR_REQUIRE_CUDA_GRAPHS");
    const char *missing[] = { "decode[bs=64,tokens=64]" };
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_ok(mstar_fail_if_graphs_required(missing, 1));
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("decode[bs=64,tokens=64]"));

    setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "0", 1);
    assert_mstar_ok(mstar_fail_if_graphs_required(missing, 1));
}

static void test_required_graphs_fail_startup_naming_the_bucket(void **state)
{
    (void)state;
    setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "1", 1);
    const char *missing[] = { "decode[bs=64,tokens=64]", "prefill[bs=1,tokens=4096,key=cfg]" };
    assert_mstar_status(mstar_fail_if_graphs_required(missing, 2), MSTAR_ESTATE);
    assert_non_null(strstr(mstar_last_error(), "decode[bs=64,tokens=64]"));
    assert_non_null(strstr(mstar_last_error(), "prefill[bs=1,tokens=4096,key=cfg]"));
    /* Nothing dropped: nothing to fail. */
    assert_mstar_ok(mstar_fail_if_graphs_required(NULL, 0));
    unsetenv("MSTAR_REQUIRE_CUDA_GRAPHS");
}

static void test_long_list_is_cut(void **state)
{
    (void)state;
    setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "true", 1);
    static char names[200][40];
    const char *missing[200];
    for (int i = 0; i < 200; i++) {
        snprintf(names[i], sizeof(names[i]), "walk_%d[bs=%d,tokens=%d]", i, i + 1, i + 1);
        missing[i] = names[i];
    }
    assert_mstar_status(mstar_fail_if_graphs_required(missing, 200), MSTAR_ESTATE);
    assert_non_null(strstr(mstar_last_error(), "200 buckets were not captured"));
    assert_non_null(strstr(mstar_last_error(), "walk_0[bs=1,tokens=1]"));
    assert_non_null(strstr(mstar_last_error(), "more)"));
    unsetenv("MSTAR_REQUIRE_CUDA_GRAPHS");
}

static void test_bad_knob_value(void **state)
{
    (void)state;
    setenv("MSTAR_REQUIRE_CUDA_GRAPHS", "maybe", 1);
    const char *missing[] = { "w[bs=1,tokens=1]" };
    assert_mstar_status(mstar_fail_if_graphs_required(missing, 1), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_REQUIRE_CUDA_GRAPHS"));
    unsetenv("MSTAR_REQUIRE_CUDA_GRAPHS");
    assert_mstar_status(mstar_fail_if_graphs_required(NULL, 1), MSTAR_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropped_bucket_warns_by_default),
        cmocka_unit_test(test_required_graphs_fail_startup_naming_the_bucket),
        cmocka_unit_test(test_long_list_is_cut),
        cmocka_unit_test(test_bad_knob_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
