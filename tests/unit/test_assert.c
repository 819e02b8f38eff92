/*
 * test_assert.c — MSTAR__ASSERT and MSTAR__ASSERT_OK (src/core/assert.h): where the build turns
 * them on (Debug, sanitizers) a broken invariant aborts and names itself; where it compiles them
 * out (NDEBUG without MSTAR_ASSERTS) nothing happens. Either way the call inside ASSERT_OK runs.
 * Each case runs in a child process, since a firing assert aborts.
 */
#include "mstar_test.h"

#include "core/assert.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int calls;

static mstar_status counted(mstar_status st)
{
    calls++;
    return st;
}

/* Run `body` in a child with its stderr in `err`; the child's wait status. */
static int run_child(void (*body)(void), char *err, size_t cap)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        body();
        _exit(calls == 1 ? 0 : 3);
    }
    close(fds[1]);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < cap && (n = read(fds[0], err + used, cap - 1 - used)) > 0)
        used += (size_t)n;
    err[used] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void false_assert(void)
{
    calls = 1;
    MSTAR__ASSERT(calls == 2);
}

static void failing_call(void)
{
    MSTAR__ASSERT_OK(counted(MSTAR_ENOSPC));
}

static void passing_call(void)
{
    MSTAR__ASSERT_OK(counted(MSTAR_OK));
    MSTAR__ASSERT(calls == 1);
}

static void expect_fired(void (*body)(void), const char *expr)
{
    char err[512];
    int status = run_child(body, err, sizeof(err));
    if (MSTAR__ASSERTS_ON) {
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGABRT);
        assert_non_null(strstr(err, "mstar invariant failed"));
        assert_non_null(strstr(err, expr));
        assert_non_null(strstr(err, "test_assert.c"));
    } else {
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0); /* compiled out, and the call still ran */
        assert_string_equal(err, "");
    }
}

static void test_false_assert(void **state)
{
    (void)state;
    expect_fired(false_assert, "calls == 2");
}

static void test_assert_ok_on_error(void **state)
{
    (void)state;
    expect_fired(failing_call, "mstar__assert_st == MSTAR_OK");
}

static void test_assert_ok_passes_and_runs_once(void **state)
{
    (void)state;
    char err[512];
    int status = run_child(passing_call, err, sizeof(err));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_string_equal(err, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_false_assert),
        cmocka_unit_test(test_assert_ok_on_error),
        cmocka_unit_test(test_assert_ok_passes_and_runs_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
