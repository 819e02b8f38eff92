/*
 * test_bench_graphs.c — `mstar bench graphs` options on the host backend: --profile adds each
 * op of one eager step per batch size (to the table and to --json), --model mlp runs the mlp
 * bench model with the same columns, --layers/--hidden size it, and bad options are usage
 * errors. No figure is judged: speed is what the bench states, never what a test asserts.
 */
#include "demo_harness.h"
#include "format_check.h"

static char *run_json(const char *const *args)
{
    demo_result r = mstar_cli_run_sig(300, 0, 0, "bench", args);
    if (demo_exit_code(&r) != 0)
        fail_msg("mstar bench graphs exited %d:\n%s", demo_exit_code(&r), r.err);
    char why[256];
    if (!mstar_test_json_check(r.out, NULL, why, sizeof(why)))
        fail_msg("not JSON: %s\n%s", why, r.out);
    char *out = strdup(r.out);
    demo_result_free(&r);
    assert_non_null(out);
    return out;
}

static void test_reference_profile(void **state)
{
    (void)state;
    const char *args[] = { "graphs", "--quick", "--profile", "--json", NULL };
    char *json = run_json(args);
    /* Two layers: the first layer's qkv reads its rows from the embedding table, normalized,
     * the second's from the residual stream, both with rope and the KV write as epilogue; the
     * final norm gathers the rows' last tokens into lm_head. */
    assert_non_null(strstr(json, "\"profile\":[{\"bs\":1,\"ops\":[{\"op\":\"embed+rmsnorm+"
                                 "qkv+rope\",\"calls\":1"));
    assert_non_null(strstr(json, "{\"op\":\"rmsnorm+qkv+rope\",\"calls\":1"));
    assert_non_null(strstr(json, "{\"op\":\"attention\",\"calls\":2"));
    assert_non_null(strstr(json, "{\"op\":\"rmsnorm+gate_up+silu_mul\",\"calls\":2"));
    assert_non_null(strstr(json, "{\"op\":\"last+rmsnorm+lm_head\",\"calls\":1"));
    assert_null(strstr(json, "rope_kv_write"));
    assert_non_null(strstr(json, "{\"bs\":64,\"ops\":["));
    /* The host runs each fused layer as its separate ops: 10 launches in the first layer (the
     * embedding lookups), 9 in the second, 3 around them. */
    assert_non_null(strstr(json, "\"graph_nodes\":22}"));
    free(json);
    /* Without --profile the JSON has no profile. */
    const char *plain[] = { "graphs", "--quick", "--json", NULL };
    json = run_json(plain);
    assert_null(strstr(json, "\"profile\""));
    free(json);
}

static void test_mlp_model(void **state)
{
    (void)state;
    const char *args[] = { "graphs", "--model", "mlp",       "--layers", "3", "--hidden",
                           "32",     "--quick", "--profile", "--json",   NULL };
    char *json = run_json(args);
    assert_non_null(strstr(json, "3 layers of rms_norm -> linear 32x32 -> silu -> residual add"));
    assert_non_null(strstr(json, "\"runner_replay_us\":"));
    assert_non_null(strstr(json, "\"raw_replay_us\":"));
    /* One fused layer op a layer, 3 host calls each (norm, GEMM, silu residual). */
    assert_non_null(strstr(json, "\"graph_nodes\":9}"));
    assert_non_null(strstr(json, "{\"op\":\"rmsnorm+linear+silu+residual\",\"calls\":3"));
    free(json);
    /* The table names the model and prints the profile. */
    const char *table[] = { "graphs", "--model", "mlp", "--quick", "--profile", NULL };
    demo_result r = mstar_cli_run_sig(300, 0, 0, "bench", table);
    assert_int_equal(demo_exit_code(&r), 0);
    assert_non_null(strstr(r.out, "the mlp bench model"));
    assert_non_null(strstr(r.out, "profile: one eager step per batch size, wall time per op"));
    demo_result_free(&r);
}

static void test_bad_options(void **state)
{
    (void)state;
    const char *bad[][6] = {
        { "graphs", "--layers", "2", NULL },                   /* sizes without --model mlp */
        { "graphs", "--model", "mlp", "--layers", "0", NULL }, /* not a positive size */
        { "graphs", "--model", "mlp", "--hidden", "x", NULL }, /* not a number */
        { "graphs", "--model", "gpt", NULL },                  /* no such model */
        { "graphs", "--model", "mlp", "--layers", NULL },      /* no value */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        mstar_cli_expect_usage_error("bench", bad[i], "usage: mstar bench graphs", i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_profile),
        cmocka_unit_test(test_mlp_model),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
