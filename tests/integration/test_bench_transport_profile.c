/*
 * test_bench_transport_profile.c — `mstar bench transport --size N --profile`: every library call
 * of the round trips, timed on the side that makes it, for the copying arena and for loans and
 * views, in the table and in --json; and `--size N --batch K`, K tensors in each message. Without
 * --size either option is a usage error. No figure is judged: speed is what the bench states,
 * never what a test asserts.
 */
#include "demo_harness.h"
#include "format_check.h"

static const char *const calls[] = { "store",   "stage", "build",   "send",   "ack",
                                     "receive", "read",  "collect", "release" };

/* `json` holds one profile per row (the arena, then loans and views), each naming every call
 * with the side that makes it and how many it timed: most of --quick's 100 round trips (a call
 * under way as the producer arms or disarms the timers is not counted), and never more. */
static void check_profiles(const char *json)
{
    const char *at = json;
    for (int row = 0; row < 2; row++) {
        at = strstr(at, "\"profile\":{\"calls\":[");
        if (at == NULL)
            fail_msg("row %d has no profile:\n%s", row, json);
        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
            char want[128];
            snprintf(want, sizeof(want), "{\"call\":\"%s\",\"side\":\"%s\",\"n\":", calls[i],
                     i < 5 ? "producer" : "consumer");
            const char *hit = strstr(at, want);
            if (hit == NULL)
                fail_msg("row %d lacks %s:\n%s", row, want, json);
            long n = strtol(hit + strlen(want), NULL, 10);
            if (n < 90 || n > 100)
                fail_msg("row %d: %s timed %ld calls:\n%s", row, calls[i], n, json);
            at = hit + strlen(want);
        }
        at = strstr(at, "\"clock_us\":");
        assert_non_null(at);
    }
}

/* `mstar bench transport --transport arena --size 4K --quick` with `extra` (NULL-ended, at most
 * three): its output, once it exited 0. */
static char *bench_out(const char *const *extra)
{
    const char *args[12] = { "transport", "--transport", "arena", "--size", "4K", "--quick" };
    for (size_t i = 0; extra[i] != NULL; i++)
        args[6 + i] = extra[i];
    demo_result r = mstar_cli_run_sig(300, 0, 0, "bench", args);
    if (demo_exit_code(&r) != 0)
        fail_msg("mstar bench transport exited %d:\n%s", demo_exit_code(&r), r.err);
    char *out = strdup(r.out);
    demo_result_free(&r);
    assert_non_null(out);
    return out;
}

static void test_profile_times_each_call(void **state)
{
    (void)state;
    const char *json_args[] = { "--profile", "--json", NULL };
    char *out = bench_out(json_args);
    char why[256];
    if (!mstar_test_json_check(out, NULL, why, sizeof(why)))
        fail_msg("not JSON: %s\n%s", why, out);
    check_profiles(out);
    free(out);
    /* The table prints it under each row; without --profile there is none. */
    const char *table_args[] = { "--profile", NULL };
    out = bench_out(table_args);
    assert_non_null(strstr(out, "the round trip's calls (--profile)"));
    assert_non_null(strstr(out, "  consumer  collect "));
    free(out);
    const char *plain_args[] = { "--json", NULL };
    out = bench_out(plain_args);
    assert_null(strstr(out, "\"profile\""));
    free(out);
}

static void test_profile_needs_one_size(void **state)
{
    (void)state;
    const char *bad[][5] = {
        { "transport", "--profile", NULL },
        { "transport", "--transport", "arena", "--profile", NULL },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        mstar_cli_expect_usage_error("bench", bad[i], "--profile times the calls", i);
}

/* --batch K: the run says how many tensors each message carried, in the table and in --json,
 * and both the copying arena and loans and views moved them: the consumer fails the run when a
 * message carries another count, and every handoff was acknowledged, or the bench would not
 * have ended. */
static void test_batch_groups_tensors_into_messages(void **state)
{
    (void)state;
    const char *json_args[] = { "--batch", "4", "--json", NULL };
    char *out = bench_out(json_args);
    char why[256];
    if (!mstar_test_json_check(out, NULL, why, sizeof(why)))
        fail_msg("not JSON: %s\n%s", why, out);
    assert_non_null(strstr(out, "\"tensors_per_message\":4,"));
    assert_non_null(strstr(out, "\"transport\":\"arena-views\""));
    free(out);
    const char *table_args[] = { "--batch", "2", NULL };
    out = bench_out(table_args);
    assert_non_null(strstr(out, "2 tensors of that size in each message (--batch)"));
    free(out);
    const char *plain_args[] = { "--json", NULL };
    out = bench_out(plain_args);
    assert_non_null(strstr(out, "\"tensors_per_message\":1,"));
    free(out);
}

static void test_batch_is_checked(void **state)
{
    (void)state;
    const char *bad[][8] = {
        { "transport", "--transport", "arena", "--size", "4K", "--batch", "3", NULL },
        { "transport", "--transport", "arena", "--size", "4K", "--batch", "0", NULL },
        { "transport", "--transport", "arena", "--size", "4K", "--batch", "16", NULL },
        { "transport", "--transport", "arena", "--size", "4K", "--batch", "4x", NULL },
        { "transport", "--transport", "arena", "--batch", "2", NULL },
    };
    const char *says[] = { "want 1, 2, 4 or 8", "want 1, 2, 4 or 8", "want 1, 2, 4 or 8",
                           "want 1, 2, 4 or 8", "--batch groups one size's tensors" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        mstar_cli_expect_usage_error("bench", bad[i], says[i], i);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_times_each_call),
        cmocka_unit_test(test_profile_needs_one_size),
        cmocka_unit_test(test_batch_groups_tensors_into_messages),
        cmocka_unit_test(test_batch_is_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
