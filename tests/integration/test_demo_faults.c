/*
 * test_demo_faults.c — `mstar demo` when things go wrong: worker 1 (the decoder) is SIGKILLed
 * mid-run, and the driver itself gets SIGTERM. Either way the driver names what failed, exits
 * non-zero, tears the unfinished requests down, and leaves no file, directory or process behind.
 * A SIGKILLed driver leaves its directories to the next run, and no process. The run's own
 * checks fail when a test-only fault is planted (--inject-fault): a corrupted token is caught
 * by the self-check, a tensor kept alive by the leak check, each named.
 */
#include "demo_harness.h"

static void test_kill_worker_1(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config",     cfg, "--kill-worker", "1",
                           "--kill-after", "3", "--json",        NULL };
    demo_result r = demo_run(300, args);
    assert_int_equal(demo_exit_code(&r), 1);
    assert_non_null(strstr(r.out, "\"ok\": false"));
    /* The reason names the worker, its component and how it died, on stderr too. */
    assert_non_null(strstr(r.err, "FAILED: worker_1 (decoder, pid "));
    assert_non_null(strstr(r.err, "killed by signal 9"));
    assert_non_null(strstr(r.out, "\"died\": true"));
    /* The requests in flight failed, each with the reason; the rest never started. */
    long long failed = demo_json_int(&r, "failed");
    assert_true(failed > 0);
    assert_true(demo_json_int(&r, "completed") >= 3);
    assert_int_equal(demo_json_int(&r, "completed") + demo_json_int(&r, "aborted") + failed +
                         demo_json_int(&r, "not_started"),
                     16);
    assert_non_null(strstr(r.out, "\"failed_requests\": [{\"id\": "));
    assert_int_equal(demo_json_int(&r, "unaccounted_requests"), 0);
    /* The survivors released everything; the dead worker's leftovers were swept. */
    assert_int_equal(demo_json_int(&r, "tensors_held"), 0);
    assert_int_equal(demo_json_int(&r, "live_arena_slots"), 0);
    assert_int_equal(demo_json_int(&r, "shm_files_left"), 0);
    /* The completed ones still match an eager run. */
    assert_int_equal(demo_json_int(&r, "mismatches"), 0);
    demo_expect_clean(&r);
    demo_result_free(&r);
}

static void test_sigterm_to_the_driver(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg, "--requests", "100000", "--json", NULL };
    demo_result r = demo_run_sig(300, SIGTERM, 3.0, args);
    assert_int_equal(demo_exit_code(&r), 128 + SIGTERM);
    assert_non_null(strstr(r.err, "interrupted by signal 15"));
    assert_int_equal(demo_json_int(&r, "unaccounted_requests"), 0);
    demo_expect_clean(&r);
    demo_result_free(&r);
}

/* A SIGKILLed driver cannot clean up: its workers die with it (PR_SET_PDEATHSIG) and the next
 * run removes its directories. */
static void test_sigkill_to_the_driver(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg, "--requests", "100000", NULL };
    demo_result r = demo_run_sig(300, SIGKILL, 3.0, args);
    assert_int_equal(demo_exit_code(&r), 128 + SIGKILL);
    char shm[256], ipc[256];
    demo_startup_dir(&r, "shm", shm, sizeof(shm));
    demo_startup_dir(&r, "ipc", ipc, sizeof(ipc));
    for (int w = 0; w < 2; w++) {
        pid_t pid = demo_worker_pid(&r, w);
        for (int i = 0; i < 500 && !demo_pid_gone(pid); i++) {
            struct timespec pause = { 0, 10 * 1000 * 1000 };
            nanosleep(&pause, NULL);
        }
        assert_true(demo_pid_gone(pid));
    }
    assert_true(demo_path_exists(shm));
    assert_true(demo_path_exists(ipc));
    const char *next[] = { "--config", cfg, "--requests", "2", "--json", NULL };
    demo_result n = demo_run(300, next);
    demo_expect_pass(&n, 2);
    assert_false(demo_path_exists(shm));
    assert_false(demo_path_exists(ipc));
    demo_result_free(&n);
    demo_result_free(&r);
}

/* The decoder changes token 0 of request 0's result: the self-check (which always reruns the
 * first completed request) names the request, the token and both values; nothing else fails. */
static void test_injected_corrupt_token(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg, "--inject-fault", "corrupt-token", "--json", NULL };
    demo_result r = demo_run(300, args);
    assert_int_equal(demo_exit_code(&r), 1);
    assert_non_null(strstr(r.out, "\"ok\": false"));
    assert_non_null(strstr(r.err, "FAILED: self-check: 1 of "));
    assert_non_null(strstr(r.err, "request 0: token 0 is "));
    assert_non_null(strstr(r.err, " from the workers, "));
    assert_int_equal(demo_json_int(&r, "mismatches"), 1);
    assert_int_equal(demo_json_int(&r, "completed"), 16);
    assert_int_equal(demo_json_int(&r, "tensors_held"), 0);
    demo_expect_clean(&r);
    demo_result_free(&r);
}

/* The decoder keeps request 0's input: the leak check names the worker, the count and the
 * tensor (its uuid, signal and request); the self-check still matches. An unknown fault is a
 * usage error. */
static void test_injected_leak(void **state)
{
    const char *cfg = demo_write_file("small.yaml", demo_small_config);
    const char *args[] = { "--config", cfg, "--inject-fault", "leak-tensor", "--json", NULL };
    demo_result r = demo_run(300, args);
    assert_int_equal(demo_exit_code(&r), 1);
    assert_non_null(strstr(r.out, "\"ok\": false"));
    assert_non_null(strstr(r.err, "FAILED: leak: worker_1 still holds 1 tensors"));
    assert_non_null(strstr(r.err, "; first held: tensor 0x"));
    assert_non_null(strstr(r.err, " (signal 'enc_hidden', request 0)"));
    assert_int_equal(demo_json_int(&r, "tensors_held"), 1);
    assert_int_equal(demo_json_int(&r, "mismatches"), 0);
    demo_expect_clean(&r);
    demo_result_free(&r);
    const char *bad[] = { "--config", cfg, "--inject-fault", "leak", NULL };
    demo_result u = demo_run(60, bad);
    assert_int_equal(demo_exit_code(&u), 2);
    assert_non_null(strstr(u.err, "--inject-fault: 'leak' is not a fault"));
    demo_result_free(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_worker_1),         cmocka_unit_test(test_sigterm_to_the_driver),
        cmocka_unit_test(test_sigkill_to_the_driver), cmocka_unit_test(test_injected_corrupt_token),
        cmocka_unit_test(test_injected_leak),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
