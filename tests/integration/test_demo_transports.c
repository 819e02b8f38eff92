/*
 * test_demo_transports.c — `mstar demo` end to end (three processes) over each transport, with
 * and without aborts: every request completes or is aborted as asked, the self-check matches,
 * nothing is left in any manager or in the shm directory, and the run's directories and workers
 * are gone afterwards. The ucx-tcp transport is refused with a clear error until it is built.
 */
#include "demo_harness.h"

static void run_passing(const char *transport, const char *abort_rate, bool graphs)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = {
        "--config", cfg,      "--transport", transport, "--abort-rate",
        abort_rate, "--json", "--timeout",   "120",     graphs ? NULL : "--no-graphs",
        NULL
    };
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 16);
    /* The traffic table saw all three edges of the walk. */
    assert_non_null(strstr(r.out, "\"signal\": \"prompt\""));
    assert_non_null(strstr(r.out, "\"signal\": \"enc_hidden\""));
    if (demo_json_int(&r, "completed") > 0)
        assert_non_null(strstr(r.out, "\"signal\": \"tokens\""));
    if (abort_rate[0] == '0' && abort_rate[1] == '\0')
        assert_int_equal(demo_json_int(&r, "completed"), 16);
    demo_result_free(&r);
}

static void test_files(void **state)
{
    run_passing("files", "0", true);
}

static void test_arena(void **state)
{
    run_passing("arena", "0", true);
}

/* Aborts mid-walk go through the drain (READS_DONE) and force cleanup on every transport. */
static void test_files_aborts(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg,      "--transport", "files",  "--abort-rate",
                           "0.5",      "--seed", "11",          "--json", NULL };
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 16);
    assert_true(demo_json_int(&r, "aborted") > 0);
    assert_true(demo_json_int(&r, "removed_force") > 0);
    demo_result_free(&r);
}

static void test_arena_aborts(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg,      "--transport", "arena",  "--abort-rate",
                           "0.5",      "--seed", "12",          "--json", NULL };
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 16);
    assert_true(demo_json_int(&r, "aborted") > 0);
    demo_result_free(&r);
}

/* --no-graphs: every step eager, the same tokens (the self-check compares them). */
static void test_arena_no_graphs(void **state)
{
    run_passing("arena", "0", false);
}

static void test_ucx_tcp_not_built(void **state)
{
    const char *args[] = { "--transport", "ucx-tcp", NULL };
    demo_result r = demo_run(60, args);
    assert_int_equal(demo_exit_code(&r), 2);
    assert_non_null(strstr(r.err, "ucx-tcp"));
    assert_non_null(strstr(r.err, "not built yet"));
    demo_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files),           cmocka_unit_test(test_arena),
        cmocka_unit_test(test_files_aborts),    cmocka_unit_test(test_arena_aborts),
        cmocka_unit_test(test_arena_no_graphs), cmocka_unit_test(test_ucx_tcp_not_built),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
