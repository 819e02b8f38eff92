/*
 * mstar_test.h — what every test shares: cmocka, scratch directories that are removed at exit,
 * a log capture to assert that bad input was reported, and a helper to skip a test (exit 77).
 */
#ifndef MSTAR_TEST_H
#define MSTAR_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "mstar/mstar.h"

/* Assert a call returned MSTAR_OK, printing the library's last error when it did not. */
#define assert_mstar_ok(expr)                                                            \
    do {                                                                                 \
        mstar_status st_ = (expr);                                                       \
        if (st_ != MSTAR_OK)                                                             \
            fail_msg("%s -> %s: %s", #expr, mstar_status_name(st_), mstar_last_error()); \
    } while (0)

/* Assert a call failed with `want` and left a non-empty error message. */
#define assert_mstar_status(expr, want)                                         \
    do {                                                                        \
        mstar_status st_ = (expr);                                              \
        if (st_ != (want))                                                      \
            fail_msg("%s -> %s, wanted %s (%s)", #expr, mstar_status_name(st_), \
                     mstar_status_name(want), mstar_last_error());              \
        assert_true(mstar_last_error()[0] != '\0');                             \
    } while (0)

/* A fresh directory under $TMPDIR (or /tmp), removed with its contents at process exit. The
 * returned string is valid for the life of the process. */
const char *mstar_test_tmpdir(const char *tag);
/* Number of entries in a directory (-1 if it cannot be opened). */
int mstar_test_count_dir(const char *path);
/* Remove a directory tree. */
void mstar_test_rmtree(const char *path);

/* Capture log lines at or above `level` into a buffer; mstar_test_log_contains searches them. */
void mstar_test_log_capture_begin(mstar_log_level level);
void mstar_test_log_capture_end(void);
bool mstar_test_log_contains(const char *needle);
int mstar_test_log_count(const char *needle);

/* Leave the test program with the "skipped" exit code (77) and a message saying why. */
void mstar_test_skip(const char *why) __attribute__((noreturn));

/* The backend of CUDA device `index`; skips the test program (77) with the reason when CUDA is not
 * built in or no GPU is there. */
mstar_backend *mstar_test_cuda_or_skip(int index);

/* The host backend and one stream on it (default flags), for a group setup or a fixture: 0, or -1
 * (setup failed) with the library's error printed. mstar_test_host_close releases both. */
int mstar_test_host_open(mstar_backend **backend, mstar_stream **stream);
void mstar_test_host_close(mstar_backend *backend, mstar_stream *stream);

/* cmocka group fixtures for tests that need the host backend alone: the setup creates it (0, or
 * -1 with the library's error printed), mstar_test_host_backend() hands it to the tests, the
 * teardown destroys it. */
int mstar_test_host_backend_setup(void **state);
int mstar_test_host_backend_teardown(void **state);
mstar_backend *mstar_test_host_backend(void);

/* A host function for mstar_launch whose runs show in what order they ran: each appends `digit`
 * to *target as a decimal digit (*target = *target * 10 + digit). */
typedef struct mstar_test_digit {
    int *target;
    int digit;
} mstar_test_digit;
void mstar_test_append_digit(void *args);

/* Run fn(rank, arg) for ranks 0..n-1, each in a forked process that exits with what fn returns,
 * and wait for them all; after timeout_s seconds the ones still running are killed. codes[rank]
 * gets each exit code (-signal if killed by one, -1000 if killed on the timeout). Returns the
 * number of ranks that did not exit 0. Ranks report their own failures on stderr. */
typedef int (*mstar_test_rank_fn)(int rank, void *arg);
int mstar_test_run_ranks(int n, mstar_test_rank_fn fn, void *arg, int timeout_s, int *codes);

/* Inside a rank's function: unless `cond`, print "rank R: file:line: <message> (last error: ...)"
 * on stderr and return 1 from the function. */
#define MSTAR_RANK_CHECK(rank, cond, ...)                                    \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "rank %d: %s:%d: ", (rank), __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                    \
            fprintf(stderr, " (last error: %s)\n", mstar_last_error());      \
            return 1;                                                        \
        }                                                                    \
    } while (0)

/* The pid of a child that has exited and been reaped: a pid no process has (until reused). */
int mstar_test_dead_pid(void);

/* Seeded xorshift for reproducible random tests. */
uint64_t mstar_test_rand(uint64_t *state);

#endif
