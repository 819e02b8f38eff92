/*
 * test_demo_transports.c — `mstar demo` end to end (three processes) over each transport, with
 * and without aborts: every request completes or is aborted as asked, the self-check matches,
 * nothing is left in any manager or in the shm directory, and the run's directories and workers
 * are gone afterwards, and the summary names each edge's route. Over ucx-tcp every tensor crosses a
 * loopback socket between the processes' UCX engines.
 */
#include "demo_harness.h"

/* The small config over `transport` with more options (NULL-terminated); the run must pass. */
static demo_result run_small(const char *transport, const char *const *extra)
{
    const char *args[16] = { "--config", demo_write_file("small.yaml", demo_small_config),
                             "--transport", transport, "--json" };
    size_t n = 5;
    for (size_t i = 0; extra[i] != NULL && n < 15; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 16);
    /* The traffic table saw the edges of the walk. */
    assert_non_null(strstr(r.out, "\"signal\": \"prompt\""));
    assert_non_null(strstr(r.out, "\"signal\": \"enc_hidden\""));
    if (demo_json_int(&r, "completed") > 0)
        assert_non_null(strstr(r.out, "\"signal\": \"tokens\""));
    /* Host tensors: every edge names the run's transport as its route. */
    char route[32];
    const char *want = strcmp(transport, "ucx-tcp") == 0 ? "ucx" : transport;
    assert_string_equal(demo_json_edge_route(&r, "enc_hidden", route, sizeof(route)), want);
    assert_string_equal(demo_json_edge_route(&r, "prompt", route, sizeof(route)), want);
    return r;
}

static void run_all_complete(const char *transport, const char *const *extra, bool graphs)
{
    demo_result r = run_small(transport, extra);
    assert_int_equal(demo_json_int(&r, "completed"), 16);
    /* With graphs every encoder and decode step fits a captured bucket (the small config's
     * prompts fit the largest ones); without, none replays. */
    const char *walks[] = { "encode", "decode" };
    for (size_t i = 0; i < 2; i++) {
        long long replays = demo_json_steps(&r, walks[i], "replays");
        long long eager = demo_json_steps(&r, walks[i], "eager");
        assert_true(graphs ? replays > 0 && eager == 0 : replays == 0 && eager > 0);
    }
    demo_result_free(&r);
}

/* Aborts mid-walk go through the drain (READS_DONE) and force cleanup. */
static void run_aborts(const char *transport, const char *seed)
{
    const char *extra[] = { "--abort-rate", "0.5", "--seed", seed, NULL };
    demo_result r = run_small(transport, extra);
    assert_true(demo_json_int(&r, "aborted") > 0);
    assert_true(demo_json_int(&r, "removed_force") > 0);
    demo_result_free(&r);
}

static const char *const no_options[] = { NULL };

static void test_files(void **state)
{
    run_all_complete("files", no_options, true);
}

static void test_arena(void **state)
{
    run_all_complete("arena", no_options, true);
}

static void test_files_aborts(void **state)
{
    run_aborts("files", "11");
}

static void test_arena_aborts(void **state)
{
    run_aborts("arena", "12");
}

/* --no-graphs: every step eager, the same tokens (the self-check compares them). */
static void test_arena_no_graphs(void **state)
{
    const char *extra[] = { "--no-graphs", NULL };
    run_all_complete("arena", extra, false);
}

static void test_ucx_tcp(void **state)
{
    run_all_complete("ucx-tcp", no_options, true);
}

static void test_ucx_tcp_aborts(void **state)
{
    run_aborts("ucx-tcp", "13");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files),           cmocka_unit_test(test_arena),
        cmocka_unit_test(test_files_aborts),    cmocka_unit_test(test_arena_aborts),
        cmocka_unit_test(test_arena_no_graphs), cmocka_unit_test(test_ucx_tcp),
        cmocka_unit_test(test_ucx_tcp_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
