/*
 * test_bench_cost.c — what `mstar bench transport` reports a handoff cost its peer process
 * (apps/mstar/bench/bench_floor.c): the peer's CPU time as the peer reads it itself. Read from
 * outside, a peer that spun through a loop shorter than a scheduler tick showed no CPU time at
 * all (the busy-poll floor's peer read 0.0 us). Only that a busy peer used some CPU is checked;
 * how much is the bench's to report. That a measured window leaves out the bench's own reads of
 * /proc, and that the futex floor is two wake-ups a round trip, waiting for a state it reads right.
 * Also the shared page `--profile` times each side's calls on (bench_phases.c): samples only while
 * armed, from both processes, summarized in order; the percentiles and means the suites report
 * (bench_util.c); and the handoff's calls timed with both ends in one process (bench_calls.c).
 */
#include "mstar_test.h"

#include "bench.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
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

/* The CPU time a measured window charges this process leaves out the bench's own reads of
 * /proc: a window with nothing in it costs far less than the reads that open and close it (read
 * inside, they added about 4 us to each handoff of a --quick run). */
static void test_cost_window_leaves_out_its_own_reads(void **state)
{
    (void)state;
    struct timespec t0, t1;
    mstar_bench_usage u;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    for (int i = 0; i < 10; i++) {
        mstar_bench_usage_sample(getpid(), &u);
        mstar_bench_usage_sample(getppid(), &u);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double reads_us =
        ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / 10;
    double least = 1e9;
    for (int i = 0; i < 5; i++) { /* the least of five: a preemption can land in any one */
        mstar_bench_cost_clock clock;
        mstar_bench_cost cost;
        mstar_bench_cost_begin(&clock, getppid());
        mstar_bench_cost_end(&clock, 1, &cost);
        least = cost.self.cpu_us < least ? cost.self.cpu_us : least;
    }
    assert_true(least >= 0);
    if (!(least < reads_us / 2))
        fail_msg("an empty window cost %.1f us, the reads %.1f us", least, reads_us);
}

/* The futex floor: each side posts only once the other sleeps, so every round trip is two
 * wake-ups and each side switched out about once a round trip (before, on this machine in a
 * quick hour, 0.27 switches a round trip in all: the posts landed while the other side was still
 * in its own wake call). The CPU time the waits took is taken out, and what is left is not
 * negative. */
static void test_futex_floor_wakes_each_side_every_round_trip(void **state)
{
    (void)state;
    mstar_bench_floor f;
    assert_mstar_ok(mstar_bench_floor_run(false, 300, &f));
    assert_true(f.cost.self.vol_csw >= 0.9);
    assert_true(f.cost.peer.vol_csw >= 0.9);
    assert_true(f.p50_us > 0 && f.p99_us >= f.p50_us);
    assert_true(f.cost.self.cpu_us >= 0 && f.cost.peer.cpu_us >= 0);
}

/* The state the futex floor waits for, read from a /proc/<pid>/stat line: after the last ')',
 * since a process's name may hold ") R" or ") S" itself; anything cut short or without a name is
 * not asleep. */
static void test_stat_line_says_sleeping(void **state)
{
    (void)state;
    assert_true(mstar_bench_stat_sleeping("4242 (mstar) S 1 4242 4242 0 -1"));
    assert_false(mstar_bench_stat_sleeping("4242 (mstar) R 1 4242 4242 0 -1"));
    assert_false(mstar_bench_stat_sleeping("4242 (mstar) D 1"));
    assert_true(mstar_bench_stat_sleeping("4242 (a) R (b) S 1 2"));  /* the name is "a) R (b" */
    assert_false(mstar_bench_stat_sleeping("4242 (a) S (b) R 1 2")); /* the name is "a) S (b" */
    assert_false(mstar_bench_stat_sleeping("4242 (mstar)"));
    assert_false(mstar_bench_stat_sleeping("4242 (mstar) "));
    assert_false(mstar_bench_stat_sleeping("4242 mstar S"));
    assert_false(mstar_bench_stat_sleeping(""));
}

/* The order statistics and the mean every suite reports (bench_util.c): the element nearest
 * q * (n - 1) of the sorted samples, which are sorted in place. */
static void test_percentile_and_mean(void **state)
{
    (void)state;
    double v[] = { 5, 1, 4, 2, 3 };
    assert_true(mstar_bench_percentile(v, 5, 0.5) == 3);
    assert_true(v[0] == 1 && v[4] == 5);
    assert_true(mstar_bench_percentile(v, 5, 0.99) == 5);
    assert_true(mstar_bench_percentile(v, 5, 0) == 1);
    assert_true(mstar_bench_percentile(v, 4, 0.5) == 3); /* 1.5 rounds up */
    assert_true(mstar_bench_percentile(v, 1, 0.99) == 1);
    assert_true(mstar_bench_mean(v, 5) == 3);
    assert_true(mstar_bench_mean(v, 0) == 0);
}

/* Samples a forked peer records land on the producer's page; a disarmed page records nothing
 * and reads no clock; p50 and p99 are order statistics of what was recorded. */
/* The handoff's calls with both ends in one process (bench_calls.c): a time a handoff on each
 * CPU the thread may use, the thread's affinity as it was, and nothing left in the directories
 * the meshes and managers used (each handoff's tensor is freed by its ACK, or the run fails). */
static void test_calls_of_a_handoff_in_one_process(void **state)
{
    (void)state;
    const char *ipc = mstar_test_tmpdir("calls-ipc"), *shm = mstar_test_tmpdir("calls-shm");
    cpu_set_t before, after;
    assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
    mstar_bench_calls c;
    assert_mstar_ok(mstar_bench_calls_run(ipc, shm, true, &c));
    /* One figure per CPU this thread may use (up to the bound), each one of those CPUs. */
    int allowed = CPU_COUNT(&before);
    assert_int_equal(c.ncpus, allowed < MSTAR_BENCH_CALLS_CPUS ? allowed : MSTAR_BENCH_CALLS_CPUS);
    for (int i = 0; i < c.ncpus; i++) {
        assert_true(c.cpu[i] >= 0 && CPU_ISSET(c.cpu[i], &before));
        assert_true(i == 0 || c.cpu[i] > c.cpu[i - 1]);
        assert_true(c.us[i] > 0 && c.us[i] < 1e6);
    }
    /* The thread may run where it could before, and nothing is left in the directories. */
    assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
    assert_true(CPU_EQUAL(&before, &after));
    assert_int_equal(mstar_test_count_dir(ipc), 0);
    assert_int_equal(mstar_test_count_dir(shm), 0);
}

/* What the table, report.md and the JSON say of the calls (bench_calls.c): each CPU's figure in
 * order, an unpinned one said so, the fastest and slowest, and a buffer too short cut, never
 * overrun. */
static void test_calls_said_per_cpu(void **state)
{
    (void)state;
    mstar_bench_calls c = { 3, { 0, 1, -1 }, { 3.854, 6.04, 5.0 } };
    char buf[128];
    mstar_bench_calls_format(&c, "us", false, buf, sizeof(buf));
    assert_string_equal(buf, "3.85 us on CPU 0, 6.04 us on CPU 1, 5.00 us on unpinned");
    mstar_bench_calls_format(&c, "µs", true, buf, sizeof(buf));
    assert_string_equal(buf, "**3.85 µs** on CPU 0, **6.04 µs** on CPU 1, **5.00 µs** on unpinned");
    char small[12];
    memset(small, '#', sizeof(small));
    mstar_bench_calls_format(&c, "us", false, small, 10);
    assert_string_equal(small, "3.85 us o");
    assert_int_equal(small[10], '#');
    double lo, hi;
    mstar_bench_calls_range(&c, &lo, &hi);
    assert_true(lo == 3.854 && hi == 6.04);
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&json, &len);
    assert_non_null(f);
    mstar_bench_calls_json(&c, f);
    fclose(f);
    assert_string_equal(json, ",\"calls_4k\":[{\"cpu\":0,\"us\":3.854},{\"cpu\":1,\"us\":6.04},"
                              "{\"cpu\":-1,\"us\":5}]");
    free(json);
}

static void test_phases_record_both_sides_while_armed(void **state)
{
    (void)state;
    mstar_bench_phases *ph = mstar_bench_phases_create();
    assert_non_null(ph);
    assert_int_equal(mstar_bench_phase_begin(ph), 0); /* disarmed */
    mstar_bench_phase_end(ph, MSTAR_BENCH_PHASE_READ, 0);
    mstar_bench_phases_arm(ph, true);
    assert_true(mstar_bench_phase_begin(ph) > 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        for (uint64_t ns = 1000; ns <= 100000; ns += 1000) /* 1..100 us */
            mstar_bench_phases_add(ph, MSTAR_BENCH_PHASE_READ, ns);
        uint64_t t = mstar_bench_phase_begin(ph);
        mstar_bench_phase_end(ph, MSTAR_BENCH_PHASE_RELEASE, t);
        _exit(t == 0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    mstar_bench_phases_add(ph, MSTAR_BENCH_PHASE_STORE, 7000);
    mstar_bench_phases_add(ph, MSTAR_BENCH_PHASE_STORE, 5000);
    mstar_bench_phases_add(ph, MSTAR_BENCH_PHASE_STORE, UINT64_MAX); /* past 2^32 ns: counted */
    mstar_bench_phases_add(ph, MSTAR_BENCH_PHASES, 1);               /* no such phase */
    mstar_bench_phases_arm(ph, false);
    mstar_bench_phase_row row;
    mstar_bench_phases_summarize(ph, &row);
    assert_int_equal(row.calls[MSTAR_BENCH_PHASE_READ], 100);
    assert_true(row.p50_us[MSTAR_BENCH_PHASE_READ] == 51.0);
    assert_true(row.p99_us[MSTAR_BENCH_PHASE_READ] == 99.0);
    assert_int_equal(row.calls[MSTAR_BENCH_PHASE_RELEASE], 1);
    assert_int_equal(row.calls[MSTAR_BENCH_PHASE_STORE], 3);
    assert_true(row.p50_us[MSTAR_BENCH_PHASE_STORE] == 7.0);
    assert_true(row.p99_us[MSTAR_BENCH_PHASE_STORE] == 7.0);
    assert_true(row.p50_us[MSTAR_BENCH_PHASE_STORE] < row.p50_us[MSTAR_BENCH_PHASE_READ]);
    assert_int_equal(row.calls[MSTAR_BENCH_PHASE_SEND], 0);
    assert_true(row.clock_us >= 0 && row.clock_us < 1000);
    /* Armed again: the earlier samples are forgotten. */
    mstar_bench_phases_arm(ph, true);
    mstar_bench_phases_summarize(ph, &row);
    assert_int_equal(row.calls[MSTAR_BENCH_PHASE_READ], 0);
    assert_string_equal(mstar_bench_phase_name(MSTAR_BENCH_PHASE_COLLECT), "collect");
    assert_true(mstar_bench_phase_on_producer(MSTAR_BENCH_PHASE_ACK));
    assert_false(mstar_bench_phase_on_producer(MSTAR_BENCH_PHASE_RECEIVE));
    mstar_bench_phases_destroy(ph);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_reads_its_own_cpu),
        cmocka_unit_test(test_busy_floor_peer_uses_cpu),
        cmocka_unit_test(test_futex_floor_wakes_each_side_every_round_trip),
        cmocka_unit_test(test_cost_window_leaves_out_its_own_reads),
        cmocka_unit_test(test_phases_record_both_sides_while_armed),
        cmocka_unit_test(test_percentile_and_mean),
        cmocka_unit_test(test_stat_line_says_sleeping),
        cmocka_unit_test(test_calls_of_a_handoff_in_one_process),
        cmocka_unit_test(test_calls_said_per_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
