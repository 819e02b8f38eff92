/*
 * demo_harness.h — what the `mstar demo` integration tests share: running the real binary
 * ($MSTAR_TEST_BUILD_DIR/mstar; the `mstar bench all` test runs it the same way) with a small
 * config, capturing its stdout and stderr, reading fields of its --json summary, and checking
 * that a run left nothing behind (its private shm and inbox directories, its worker processes).
 */
#ifndef MSTAR_TEST_DEMO_HARNESS_H
#define MSTAR_TEST_DEMO_HARNESS_H

#include "mstar_test.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A model, buckets and request counts small enough for seconds under ASan. */
extern const char demo_small_config[];

/* One scratch directory per test process (mstar_test_tmpdir removes it at exit). */
const char *demo_scratch(void);

typedef struct demo_result {
    int status; /* waitpid status */
    char *out;  /* stdout, NUL-terminated */
    char *err;  /* stderr */
} demo_result;

char *demo_slurp(const char *path);

/* Write `text` to the file `name` in the scratch directory; returns its path (valid until the
 * eighth call after this one). */
const char *demo_write_file(const char *name, const char *text);

/* Run `mstar <command> <args...>` (args NULL-terminated), sending it `sig` after
 * `signal_after_s` seconds when sig != 0, and killing it if it runs past `timeout_s`. */
demo_result mstar_cli_run_sig(int timeout_s, int sig, double signal_after_s, const char *command,
                              const char *const *args);

/* Run `mstar demo <args...>`, as mstar_cli_run_sig does. */
demo_result demo_run_sig(int timeout_s, int sig, double signal_after_s, const char *const *args);

demo_result demo_run(int timeout_s, const char *const *args);

/* Run `mstar <command> <args...>` and fail the test unless it exits 2 (a usage error) with
 * `says` on stderr; `case_no` names the case in the failure. */
void mstar_cli_expect_usage_error(const char *command, const char *const *args, const char *says,
                                  size_t case_no);

void demo_result_free(demo_result *r);

int demo_exit_code(const demo_result *r);

/* The integer after `"key": ` in the JSON summary (the demo's keys are unique). */
long long demo_json_int(const demo_result *r, const char *key);

/* The string after `"key": "` (copied into buf). */
const char *demo_json_str(const demo_result *r, const char *key, char *buf, size_t size);

/* The sum of `field` ("replays" or "eager") over the summary's step rows of `walk`. */
long long demo_json_steps(const demo_result *r, const char *walk, const char *field);

/* The route of the summary's first edge of `signal` (copied into buf; "" if there is none). */
const char *demo_json_edge_route(const demo_result *r, const char *signal, char *buf, size_t size);

bool demo_path_exists(const char *path);

/* From the driver's first stderr line ("mstar demo: driver pid D; worker_0 (encoder) pid N;
 * worker_1 (decoder) pid M; ...; shm DIR; ipc DIR"): worker w's pid, or a directory. */
pid_t demo_worker_pid(const demo_result *r, int w);

const char *demo_startup_dir(const demo_result *r, const char *which, char *buf, size_t size);

/* The process is gone: no such pid, or a zombie nobody reaped yet (reparented to an init that
 * has not waited for it). */
bool demo_pid_gone(pid_t pid);

/* The run's private directories are gone, and so are its workers. */
void demo_expect_clean(const demo_result *r);

/* A run that passed: every request completed or was aborted, nothing leaked, the self-check
 * sampled and matched. */
void demo_expect_pass(const demo_result *r, long long requests);

#endif
