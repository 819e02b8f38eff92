/*
 * mstar_test_ranks.c — run one function as several ranks, one forked process each, the way a
 * group of workers runs: see mstar_test_run_ranks in mstar_test.h.
 */
#include "mstar_test.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 64

int mstar_test_run_ranks(int n, mstar_test_rank_fn fn, void *arg, int timeout_s, int *codes)
{
    pid_t pids[MAX_RANKS];
    if (n < 1 || n > MAX_RANKS)
        fail_msg("mstar_test_run_ranks: %d ranks, 1..%d", n, MAX_RANKS);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            fail_msg("fork: %s", strerror(errno));
        if (pids[r] == 0)
            exit(fn(r, arg)); /* exit, not _exit: a sanitizer build checks the child for leaks */
        codes[r] = -1000;
    }
    int running = n;
    struct timespec start, now, tick = { 0, 10 * 1000 * 1000 };
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (running > 0) {
        for (int r = 0; r < n; r++) {
            int status;
            if (pids[r] == 0 || waitpid(pids[r], &status, WNOHANG) != pids[r])
                continue;
            codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
            pids[r] = 0;
            running--;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (running > 0 && now.tv_sec - start.tv_sec >= timeout_s) {
            for (int r = 0; r < n; r++) {
                if (pids[r] == 0)
                    continue;
                fprintf(stderr, "rank %d still running after %d s: killed\n", r, timeout_s);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], NULL, 0);
                pids[r] = 0;
            }
            running = 0;
        }
        if (running > 0)
            nanosleep(&tick, NULL);
    }
    int failed = 0;
    for (int r = 0; r < n; r++)
        failed += codes[r] != 0;
    return failed;
}
