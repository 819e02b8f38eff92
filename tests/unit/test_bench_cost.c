/*
 * test_bench_cost.c — what `mstar bench transport` reports a handoff cost its peer process
 * (apps/mstar/bench/bench_floor.c): the peer's CPU time as the peer reads it itself. Read from
 * outside, a peer that spun through a loop shorter than a scheduler tick showed no CPU time at
 * all (the busy-poll floor's peer read 0.0 us). Only that a busy peer used some CPU is checked;
 * how much is the bench's to report.
 */
#include "mstar_test.h"

#include "bench.h"

#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

/* A peer that works between the two marks: its own clock says it used CPU time then. */
static void test_peer_reads_its_own_cpu(void **state)
{
    (void)state;
    mstar_bench_peer_cpu *pc = mstar_bench_peer_cpu_create();
    assert_non_null(pc);
    mstar_bench_peer_cpu_arm(pc, 7, 8);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        mstar_bench_peer_cpu_note(pc, 6); /* not a mark */
        mstar_bench_peer_cpu_note(pc, 7);
        volatile uint64_t x = 0;
        for (uint64_t i = 0; i < 20000000u; i++)
            x = x + i;
        mstar_bench_peer_cpu_note(pc, 8);
        _exit(x == 0); /* the sum is never 0: the loop's work is used */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    mstar_bench_cost cost = { .peer = { .cpu_us = -1 } };
    mstar_bench_peer_cpu_apply(pc, 1, &cost);
    assert_true(cost.peer.cpu_us > 0);
    /* Armed again: nothing sampled yet, so nothing applied. */
    mstar_bench_peer_cpu_arm(pc, 1, 2);
    cost.peer.cpu_us = -1;
    mstar_bench_peer_cpu_apply(pc, 1, &cost);
    assert_true(cost.peer.cpu_us == -1);
    mstar_bench_peer_cpu_destroy(pc);
}

/* The busy-poll floor: both sides spin the whole loop, so both used CPU time. */
static void test_busy_floor_peer_uses_cpu(void **state)
{
    (void)state;
    mstar_bench_floor f;
    assert_mstar_ok(mstar_bench_floor_run(true, 2000, &f));
    assert_true(f.cost.self.cpu_us > 0);
    assert_true(f.cost.peer.cpu_us > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_reads_its_own_cpu),
        cmocka_unit_test(test_busy_floor_peer_uses_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
