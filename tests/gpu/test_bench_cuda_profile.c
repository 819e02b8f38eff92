/*
 * test_bench_cuda_profile.c — `mstar bench transport --device cuda --transport arena --size 4K
 * --profile`: the round trips of one size of device tensors over the CUDA IPC route, with every
 * library call timed on the side that makes it, as the host tensors' profile
 * (integration.test_bench_transport_profile) times them; and `--batch K`, K device tensors in
 * each message over the route. No figure is judged. Skips (77) without a GPU.
 */
#include "demo_harness.h"

#include <string.h>

static const char *const calls[] = { "store",   "stage", "build",   "send",   "ack",
                                     "receive", "read",  "collect", "release" };

/* `mstar bench transport --device cuda --transport arena --size SIZE --quick EXTRA [ARG]`,
 * skipped without a GPU: its output, once it exited 0 and named the route. */
static demo_result bench_route(const char *size, const char *extra, const char *arg)
{
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_backend_destroy(b); /* only asked whether there is a GPU: the bench's children open it */
    const char *args[] = { "transport", "--device", "cuda", "--transport", "arena", "--size",
                           size,        "--quick",  extra,  arg,           NULL };
    demo_result r = mstar_cli_run_sig(300, 0, 0, "bench", args);
    if (demo_exit_code(&r) != 0)
        fail_msg("mstar bench transport exited %d:\n%s", demo_exit_code(&r), r.err);
    print_message("%s", r.out);
    assert_non_null(strstr(r.out, "arena, device tensors over CUDA IPC"));
    return r;
}

static void test_cuda_route_profile_times_each_call(void **state)
{
    (void)state;
    demo_result r = bench_route("4K", "--profile", NULL);
    assert_non_null(strstr(r.out, "the round trip's calls (--profile)"));
    /* Each call's row: its side, its name and how many it timed, most of --quick's 100 round
     * trips (one under way as the producer arms or disarms the timers is not counted). */
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "  %-9s %-9s ", i < 5 ? "producer" : "consumer", calls[i]);
        const char *row = strstr(r.out, want);
        if (row == NULL)
            fail_msg("no row '%s'", want);
        long n = strtol(row + strlen(want), NULL, 10);
        if (n < 90 || n > 100)
            fail_msg("%s timed %ld calls", calls[i], n);
    }
    demo_result_free(&r);
}

/* Four 1 MiB device tensors in each message: each read call copies four, lands them once and
 * acknowledges them together, and the run ends only once every one was acknowledged. */
static void test_cuda_route_batch(void **state)
{
    (void)state;
    demo_result r = bench_route("1M", "--batch", "4");
    assert_non_null(strstr(r.out, "4 tensors of that size in each message (--batch)"));
    demo_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_route_profile_times_each_call),
        cmocka_unit_test(test_cuda_route_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
