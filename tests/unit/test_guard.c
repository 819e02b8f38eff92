/*
 * test_guard.c — mstar__guarded_copy (src/core/guard.c): a SIGBUS while copying from a mapped
 * file that was truncated becomes MSTAR_EIO and the process lives on (and can fault-guard again);
 * a SIGBUS outside a guarded copy still reaches the handler installed before the guard's (or the
 * default action, which ends the process). The chaining cases run first, in children forked
 * before this process ever installs the guard.
 */
#include "mstar_test.h"

#include "core/guard.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* A mapping of `pages` pages of a fresh file, whose file is then truncated to nothing: every
 * access to it faults with SIGBUS. */
static const char *scratch; /* made by the parent: a child's exit would not remove its own */

static uint8_t *truncated_mapping(size_t pages, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/f%d", scratch, (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    *len = pages * (size_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(ftruncate(fd, (off_t)*len), 0);
    void *p = mmap(NULL, *len, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(ftruncate(fd, 0), 0);
    close(fd);
    unlink(path);
    return p;
}

static void exit_42(int sig)
{
    (void)sig;
    _exit(42);
}

/* In a child: install `handler` (NULL: default), guard one copy so the guard's handler goes in
 * on top, then fault outside any guarded copy. */
static int fault_after_guard(void (*handler)(int))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = handler != NULL ? handler : SIG_DFL;
        sigaction(SIGBUS, &sa, NULL);
        uint8_t a[8] = { 1 }, b[8];
        if (mstar__guarded_copy(b, a, sizeof(a), "test") != MSTAR_OK)
            _exit(3);
        size_t len;
        volatile uint8_t *p = truncated_mapping(1, &len);
        uint8_t x = p[0]; /* unguarded: the earlier disposition decides */
        (void)x;
        _exit(4);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_unguarded_faults_chain(void **state)
{
    (void)state;
    int status = fault_after_guard(exit_42);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 42);
    status = fault_after_guard(NULL);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGBUS);
}

static void test_guarded_fault_is_an_error(void **state)
{
    (void)state;
    mstar__guard_install(); /* on top of the handler cmocka sets for each test */
    size_t len;
    uint8_t *p = truncated_mapping(4, &len);
    uint8_t *dst = malloc(len);
    assert_non_null(dst);
    for (int round = 0; round < 3; round++) { /* again and again: SIGBUS is unblocked after */
        assert_mstar_status(mstar__guarded_copy(dst, p, len, "arena segment x"), MSTAR_EIO);
        assert_non_null(strstr(mstar_last_error(), "arena segment x"));
        assert_non_null(strstr(mstar_last_error(), "SIGBUS"));
    }
    /* Plain memory copies as memcpy does. */
    uint8_t src[300];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 13);
    assert_mstar_ok(mstar__guarded_copy(dst, src, sizeof(src), "x"));
    assert_memory_equal(dst, src, sizeof(src));
    assert_mstar_ok(mstar__guarded_copy(dst, NULL, 0, "x"));
    free(dst);
    munmap(p, len);
}

int main(void)
{
    scratch = mstar_test_tmpdir("guard");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unguarded_faults_chain), /* first: before the parent guards */
        cmocka_unit_test(test_guarded_fault_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
