/*
 * test_demo_config.c — `mstar demo --config FILE` and the command line: every bad input is a
 * usage error (exit code 2) whose message names the file, the line and the key; a good config
 * that swaps the workers' components runs and passes; --shm-dir places the run's shm directory.
 */
#include "demo_harness.h"

typedef struct bad_case {
    const char *yaml;
    const char *want; /* a substring of the error, after "FILE:" */
} bad_case;

static const bad_case bad_cases[] = {
    { "model: {vocab: 128\n", "YAML syntax error" },
    { "model:\n  vocab: 128\n  vocabulary: 3\n", ":3: model: unknown key 'vocabulary' (known: " },
    { "modle: {}\n", ":1: unknown section 'modle'" },
    { "model:\n  hidden: many\n", ":2: model.hidden: 'many' is not an integer" },
    { "model:\n  hidden: 0\n", ":2: model.hidden: 0 is not in [1, 65536]" },
    { "model:\n  head_dim: 33\n", "head_dim 33 must be even" },
    { "model:\n  hidden: [1, 2]\n", ":2: model.hidden: expected an integer, found a list" },
    { "encoder:\n  batch_sizes: 4\n", ":2: encoder.batch_sizes: expected a list" },
    { "encoder:\n  batch_sizes: [1, 2, 2]\n", ":2: encoder.batch_sizes: 2 is listed twice" },
    { "encoder:\n  batch_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256]\n",
      ":2: encoder.batch_sizes: 9 entries, expected 1 to 8" },
    { "decoder:\n  batch_sizes: [1, -2]\n", ":2: decoder.batch_sizes[1]: -2 is not in [1, 256]" },
    { "decoder:\n  batch_sizes: [1, 64]\n  max_batch: 16\n",
      "decoder.batch_sizes: 64 is above decoder.max_batch 16" },
    { "decoder:\n  kv_pages: 2\n",
      "decoder.kv_pages: 2 pages of 16 tokens cannot hold one request" },
    { "requests:\n  prompt_tokens: [9, 3]\n", ":2: requests.prompt_tokens: min 9 is above max 3" },
    { "requests:\n  prompt_tokens: [9]\n", ":2: requests.prompt_tokens: expected [min, max]" },
    { "requests:\n  count: 4\n  check_sample: 5\n",
      "requests.check_sample: 5 is above requests.count 4" },
    { "requests:\n  count: 1\n  count: 2\n", ":3: requests.count: given twice" },
    { "workers: {0: encoder, 1: encoder}\n", ":1: workers: both workers run the encoder" },
    { "workers: {0: encoder}\n", ":1: workers: worker 1 has no component" },
    { "workers:\n  0: encoder\n  1: renderer\n", ":3: workers.1: 'renderer' is not a component" },
    { "workers: {0: encoder, 2: decoder}\n", ":1: workers: a worker rank: 2 is not in [0, 1]" },
    { "- 1\n- 2\n", ":1: expected a mapping of sections" },
};

static void test_bad_configs(void **state)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const char *path = demo_write_file("bad.yaml", bad_cases[i].yaml);
        const char *args[] = { "--config", path, NULL };
        demo_result r = demo_run(60, args);
        if (demo_exit_code(&r) != 2 || strstr(r.err, path) == NULL ||
            strstr(r.err, bad_cases[i].want) == NULL)
            fail_msg("case %zu (%s): exit %d, stderr:\n%s\nwanted '%s'", i, bad_cases[i].yaml,
                     demo_exit_code(&r), r.err, bad_cases[i].want);
        assert_string_equal(r.out, "");
        demo_result_free(&r);
    }
}

static void test_missing_file(void **state)
{
    const char *args[] = { "--config", "/nonexistent/demo.yaml", NULL };
    demo_result r = demo_run(60, args);
    assert_int_equal(demo_exit_code(&r), 2);
    assert_non_null(strstr(r.err, "/nonexistent/demo.yaml: cannot open"));
    demo_result_free(&r);
}

static void test_bad_options(void **state)
{
    static const char *const cases[][3] = {
        { "--device", "tpu", "--device: 'tpu' is not a device" },
        { "--transport", "pigeon", "--transport: 'pigeon' is not a transport" },
        { "--requests", "0", "--requests: '0' is not a count" },
        { "--abort-rate", "1.5", "--abort-rate: '1.5' is not a share in [0, 1]" },
        { "--kill-worker", "7", "--kill-worker: '7' is not a worker rank" },
        { "--shm-dir", "shm", "--shm-dir: 'shm' is not an absolute path" },
        { "--bogus", NULL, "'--bogus' is not an option" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[] = { cases[i][0], cases[i][1], NULL };
        mstar_cli_expect_usage_error("demo", args, cases[i][2], i);
    }
}

/* The workers' components swapped: worker 0 decodes, worker 1 encodes. */
static void test_swapped_workers(void **state)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml), "%s", demo_small_config);
    char *w = strstr(yaml, "workers: {0: encoder, 1: decoder}");
    assert_non_null(w);
    memcpy(w, "workers: {0: decoder, 1: encoder}", 33);
    const char *path = demo_write_file("swapped.yaml", yaml);
    const char *args[] = { "--config", path, "--requests", "6", "--json", NULL };
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 6);
    assert_non_null(strstr(r.out, "{\"entity\": \"worker_0\", \"component\": \"decoder\""));
    assert_non_null(strstr(r.out, "\"from\": \"worker_1\", \"to\": \"worker_0\""));
    demo_result_free(&r);
}

/* --shm-dir: the run's shm directory is made there (a small tmpfs, or a disk with room), and
 * removed at the end. */
static void test_shm_dir_option(void **state)
{
    const char *dir = mstar_test_tmpdir("demoshm");
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg, "--requests", "4", "--shm-dir", dir, "--json", NULL };
    demo_result r = demo_run(300, args);
    demo_expect_pass(&r, 4);
    char want[4200];
    snprintf(want, sizeof(want), "\"shm_dir\": \"%s/mstar-demo-", dir);
    if (strstr(r.out, want) == NULL)
        fail_msg("no '%s' in:\n%s", want, r.out);
    assert_int_equal(mstar_test_count_dir(dir), 0);
    demo_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_configs),    cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_bad_options),    cmocka_unit_test(test_swapped_workers),
        cmocka_unit_test(test_shm_dir_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
