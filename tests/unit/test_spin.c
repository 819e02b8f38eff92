/*
 * test_spin.c — spin, then sleep: MSTAR_RING_SPIN_US and the waits that poll before they sleep
 * (docs/environment.md). The knob refuses what does not parse or is out of range, at mesh
 * creation and at a completion wait; mstar_mesh_spin finds a message waiting in a ring, and when
 * it finds none leaves the rings asking to be rung, so a loop that sleeps next is woken; a
 * receiver that spins is not rung (its sender makes no system call); a spin that keeps finding
 * nothing stops spinning until one finds a frame again; a frame soon after a spin ended grows the
 * bound, one long after shrinks it; a completion wait ends as soon as its
 * read lands, and so does the spin of the mesh its manager sends through; a poll asks senders to
 * wait for a spin only in a loop that spins; with no CPU spare nothing spins (core/spare_cpu.h),
 * /proc/loadavg's count is read strictly, and where it cannot be read a wait spins.
 */
#include "mesh_harness.h"

#include "core/spare_cpu.h"
#include "core/vec.h"
#include "mesh/mesh_internal.h"
#include "tensors/comm_internal.h"
#include "tensors/completion.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *ipc_dir;

static int setup(void **state)
{
    (void)state;
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    unsetenv("MSTAR_RING_BYTES");
    unsetenv("MSTAR_RING_SPIN_US");
    setenv("MSTAR_MESH_RING", "1", 1);
    /* A spare CPU, whatever else the machine runs meanwhile; the tests below that need a busy
     * one say so. */
    mstar__cpu_spare_force(1);
    return 0;
}

static const char *const garbage[] = { "abc", "-1",   "1000001", "12us",
                                       "1e3", "0x10", "50 ",     "99999999999999999999" };

static void test_garbage_knob_is_refused_by_the_mesh(void **state)
{
    (void)state;
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    mstar_mesh *m;
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        setenv("MSTAR_RING_SPIN_US", garbage[i], 1);
        assert_mstar_status(mstar_mesh_create("conductor", &opts, &m), MSTAR_EINVAL);
        assert_non_null(strstr(mstar_last_error(), "MSTAR_RING_SPIN_US"));
    }
    /* The bounds themselves are values, and "" is unset (the default). */
    static const char *const good[] = { "0", "1000000", "" };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        setenv("MSTAR_RING_SPIN_US", good[i], 1);
        assert_mstar_ok(mstar_mesh_create("conductor", &opts, &m));
        assert_int_equal(m->cfg.spin_us, i == 0   ? 0
                                         : i == 1 ? 1000000
                                                  : MSTAR_RING_SPIN_US_DEFAULT);
        mstar_mesh_destroy(m);
    }
    assert_int_equal(mstar_test_count_dir(ipc_dir), 0);
}

static void test_garbage_knob_is_refused_by_a_completion_wait(void **state)
{
    (void)state;
    mstar_completion *c;
    assert_mstar_ok(mstar__completion_create(NULL, &c));
    for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
        setenv("MSTAR_RING_SPIN_US", garbage[i], 1);
        assert_mstar_status(mstar_completion_wait(c, 10), MSTAR_EINVAL);
        assert_non_null(strstr(mstar_last_error(), "MSTAR_RING_SPIN_US"));
        /* A poll (timeout 0) does not wait, so it reads no knob. */
        assert_mstar_status(mstar_completion_wait(c, 0), MSTAR_ETIMEDOUT);
    }
    /* A handle already finished waits for nothing either. */
    mstar__completion_finish(c, MSTAR_OK, NULL);
    assert_mstar_ok(mstar_completion_wait(c, -1));
    mstar_completion_release(c);
}

/* A disarmed receiver is awake: the next frame asks for no ring of its bell. */
static void test_disarmed_ring_is_not_rung(void **state)
{
    (void)state;
    mstar__ring tx, rx;
    assert_mstar_ok(mstar__ring_create("conductor", "worker_0", MSTAR__RING_MIN_CAP, &tx));
    int fd = dup(tx.fd);
    assert_true(fd >= 0);
    assert_mstar_ok(mstar__ring_attach(fd, "conductor", "worker_0", &rx));
    mstar__ring_arm(&rx, MSTAR__RING_ARMED);
    mstar__ring_disarm(&rx);
    bool wake = true;
    assert_mstar_ok(mstar__ring_write(&tx, "x", 1, &wake));
    assert_false(wake);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
}

/* A pair spinning `spin_us`, its ring from conductor to worker_0 up (the first message taken). */
static mesh_pair ring_pair(const char *spin_us)
{
    setenv("MSTAR_RING_SPIN_US", spin_us, 1);
    mesh_pair m = mesh_pair_open(ipc_dir);
    mesh_harness_send(m.tx, "worker_0", 0);
    mesh_harness_recv(m.rx, "conductor", 0);
    return m;
}

static void test_spin_finds_a_waiting_message(void **state)
{
    (void)state;
    setenv("MSTAR_RING_SPIN_US", "1000000", 1); /* ends as soon as the frame is seen */
    mesh_pair m = mesh_pair_open(ipc_dir);
    assert_false(mstar_mesh_spin(m.rx)); /* no ring yet: nothing to spin on */
    assert_false(mstar_mesh_spin(NULL));
    mesh_harness_send(m.tx, "worker_0", 0);
    mesh_harness_recv(m.rx, "conductor", 0);
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_true(mstar_mesh_spin(m.rx));
    mstar_msg got;
    assert_mstar_ok(mstar_mesh_recv(m.rx, 0, &got));
    assert_int_equal(got.request_id.num, 1);
    mstar_msg_clear(&got);
    assert_int_equal(m.rx->inrings.spin_misses, 0);
    mesh_pair_close(&m);
}

/* A loop awake since its spin found a frame looks at its inbox and bell every
 * MSTAR__MESH_UNPOLLED_MAX receives, and that look (which does not wait) leaves it awake: its
 * next empty poll makes no system call of its own. Before, the look counted as a sleep, and
 * every empty poll after it looked again. */
static void test_a_look_that_does_not_wait_leaves_the_loop_awake(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000000");
    mstar_msg got;
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_true(mstar_mesh_spin(m.rx));
    assert_mstar_ok(mstar_mesh_recv(m.rx, 0, &got));
    mstar_msg_clear(&got);
    /* As a spin leaves it that found a frame its sender sent without a wake (the ring's sender
     * found it armed here, from the pair's first receive, and rang it). */
    m.rx->inrings.awake = true;
    m.rx->inrings.unpolled = MSTAR__MESH_UNPOLLED_MAX; /* the next receive looks */
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.unpolled, 0);
    assert_true(m.rx->inrings.awake);
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.unpolled, 1); /* not looked again */
    /* A sender that finds the ring armed rings it after all: the loop is no longer counted
     * awake, and its next empty poll looks, clearing that edge. */
    m.rx->inrings.loop_spins = false; /* armed to be rung, not to be waited for */
    mesh_harness_send(m.tx, "worker_0", 2);
    assert_mstar_ok(mstar_mesh_recv(m.rx, 0, &got));
    assert_int_equal(got.request_id.num, 2);
    mstar_msg_clear(&got);
    assert_false(m.rx->inrings.awake);
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.unpolled, 0);
    mesh_pair_close(&m);
}

/* A spin that finds nothing leaves the rings armed: the loop sleeps in poll() on the inbox fd and
 * the next message wakes it. Spinning stops after eight such spins in a row, then one wait in 4
 * spins. */
static void test_empty_spin_arms_and_then_stops(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("200");
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_false(mstar_mesh_spin(m.rx));
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(m.rx), .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 0);
    usleep(10000); /* long after the spin: a miss that counts (a near one would not) */
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_int_equal(poll(&p, 1, 10000), 1);
    mesh_harness_recv(m.rx, "conductor", 1);
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(poll(&p, 1, 0), 0);

    mstar__inrings *in = &m.rx->inrings;
    assert_int_equal(in->spin_misses, 1);
    assert_int_equal(in->spin_ns, 200000); /* a far miss leaves the bound where it started */
    for (uint32_t i = 2; i <= 8; i++) {
        assert_false(mstar_mesh_spin(m.rx));
        assert_int_equal(in->spin_misses, i);
    }
    for (int i = 1; i < 4; i++)
        assert_false(mstar_mesh_spin(m.rx)); /* skipped */
    assert_int_equal(in->spin_skips, 3);
    assert_false(mstar_mesh_spin(m.rx)); /* the probe spins, and finds nothing */
    assert_int_equal(in->spin_skips, 4);
    assert_int_equal(in->spin_misses, 8);
    /* A message while spinning is off is still found (the rings are checked before a sleep),
     * and the next spin that finds one turns spinning back on. */
    mesh_harness_send(m.tx, "worker_0", 2);
    assert_true(mstar_mesh_spin(m.rx));
    mesh_harness_recv(m.rx, "conductor", 2);
    for (int i = 0; i < 4 && in->spin_misses != 0; i++) {
        mesh_harness_send(m.tx, "worker_0", 3 + i);
        assert_true(mstar_mesh_spin(m.rx));
        mesh_harness_recv(m.rx, "conductor", 3 + i);
    }
    assert_int_equal(in->spin_misses, 0);
    mesh_pair_close(&m);
}

/* One whole spin that finds nothing, then (after `later_us`) a frame taken: the miss settled. */
static void miss_then_frame(mesh_pair *m, int64_t rid, useconds_t later_us)
{
    assert_false(mstar_mesh_spin(m->rx));
    assert_true(m->rx->inrings.missed_at != 0);
    if (later_us > 0)
        usleep(later_us);
    mesh_harness_send(m->tx, "worker_0", rid);
    mesh_harness_recv(m->rx, "conductor", rid);
    assert_int_equal(m->rx->inrings.missed_at, 0);
}

/* A frame that comes soon after a spin ended (a near miss: the peer answers, later than the bound)
 * doubles the bound, up to 16 times MSTAR_RING_SPIN_US, and the miss does not count toward giving
 * up; one that comes long after halves it back and counts (inrings.c, SPIN_GROWTH). Without the
 * growth, two sides whose answers come a wake-up late sleep in turns for good. */
static void test_near_misses_grow_the_spin_and_far_ones_shrink_it(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000"); /* near: within 16 ms of the spin's end */
    mstar__inrings *in = &m.rx->inrings;
    uint64_t want = 1000000;
    for (int64_t rid = 1; rid <= 6; rid++) {
        miss_then_frame(&m, rid, 0);
        want = want * 2 > 16000000 ? 16000000 : want * 2;
        assert_int_equal(in->spin_ns, want);
        assert_int_equal(in->spin_misses, 0);
    }
    /* Far: 40 ms after the spin's end, more than 16 times the knob. */
    miss_then_frame(&m, 7, 40000);
    assert_int_equal(in->spin_ns, 8000000);
    assert_int_equal(in->spin_misses, 1);
    miss_then_frame(&m, 8, 40000);
    assert_int_equal(in->spin_ns, 4000000);
    assert_int_equal(in->spin_misses, 2);
    /* A spin that finds its frame changes no bound, and starts the count again. */
    mesh_harness_send(m.tx, "worker_0", 9);
    assert_true(mstar_mesh_spin(m.rx));
    mesh_harness_recv(m.rx, "conductor", 9);
    assert_int_equal(in->spin_ns, 4000000);
    assert_int_equal(in->spin_misses, 0);
    mesh_pair_close(&m);
}

/* Spinning that gave up (8 far misses) comes back with the first near one: the miss is taken
 * back, so the next wait spins again instead of one in 4. */
static void test_a_near_miss_brings_spinning_back(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000"); /* near: within 16 ms of the last spin's end */
    mstar__inrings *in = &m.rx->inrings;
    for (uint32_t i = 1; i <= 8; i++)
        assert_false(mstar_mesh_spin(m.rx)); /* nothing comes between: each one counts */
    assert_int_equal(in->spin_misses, 8);
    assert_int_equal(in->spin_ns, 1000000);
    for (int i = 1; i < 4; i++)
        assert_false(mstar_mesh_spin(m.rx)); /* skipped: nothing to settle */
    assert_int_equal(in->spin_skips, 3);
    assert_true(in->missed_at != 0);
    mesh_harness_send(m.tx, "worker_0", 1);
    mesh_harness_recv(m.rx, "conductor", 1);
    assert_int_equal(in->spin_misses, 7); /* below 8: the next wait spins */
    assert_int_equal(in->spin_ns, 2000000);
    mesh_harness_send(m.tx, "worker_0", 2);
    assert_true(mstar_mesh_spin(m.rx));
    assert_int_equal(in->spin_misses, 0);
    assert_int_equal(in->spin_skips, 0);
    mesh_harness_recv(m.rx, "conductor", 2);
    mesh_pair_close(&m);
}

/* A spin its receive's deadline cut short says nothing of the bound: it settles nothing. */
static void test_a_spin_cut_by_its_deadline_settles_nothing(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("100000"); /* 100 ms, cut at 5 ms; a near miss would double it */
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(m.rx, 5, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.missed_at, 0);
    mesh_harness_send(m.tx, "worker_0", 1);
    mesh_harness_recv(m.rx, "conductor", 1);
    assert_int_equal(m.rx->inrings.spin_ns, UINT64_C(100000000));
    mesh_pair_close(&m);
}

static void test_spin_off_only_checks(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("0");
    assert_false(mstar_mesh_spin(m.rx));
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_true(mstar_mesh_spin(m.rx)); /* waiting already: found without spinning */
    mesh_harness_recv(m.rx, "conductor", 1);
    assert_int_equal(m.rx->inrings.spin_misses, 0);
    mesh_pair_close(&m);
}

static uint32_t rx_waiting(const mesh_pair *m)
{
    return atomic_load(&m->rx->inrings.rings[0].ring.hdr->rx_waiting);
}

/* A poll leaves the rings asking their senders to wait a moment for a spin only in a loop that
 * spins (one that has called mstar_mesh_spin), and only while a CPU is spare: any other loop
 * would cost each of its senders that wait. */
static void test_a_poll_asks_for_a_spin_only_in_a_loop_that_spins(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("200");
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(rx_waiting(&m), MSTAR__RING_ARMED);
    assert_false(mstar_mesh_spin(m.rx));
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(rx_waiting(&m), MSTAR__RING_ARMED_SPIN);
    mstar__cpu_spare_force(0);
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(rx_waiting(&m), MSTAR__RING_ARMED);
    mesh_pair_close(&m);
}

/* With no CPU spare a wait does not spin, however long the bound: the spin counts no miss, and
 * what waits already is still found. */
static void test_a_busy_machine_stops_the_spin(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000000");
    mstar__cpu_spare_force(0);
    assert_false(mstar_mesh_spin(m.rx));
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(m.rx, 1, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.spin_misses, 0); /* neither spun: a spin would count one */
    assert_int_equal(rx_waiting(&m), MSTAR__RING_ARMED);
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_true(mstar_mesh_spin(m.rx));
    mesh_harness_recv(m.rx, "conductor", 1);
    mesh_pair_close(&m);
}

/* /proc/loadavg's runnable count, and every line that does not hold one. */
static void test_loadavg_runnable(void **state)
{
    (void)state;
    long n = 0;
    assert_true(mstar__loadavg_runnable("0.20 0.18 0.12 2/345 6789\n", &n));
    assert_int_equal(n, 2);
    assert_true(mstar__loadavg_runnable("12.00 8.50 4.00 17/1200 1", &n));
    assert_int_equal(n, 17);
    static const char *const bad[] = {
        "",
        "\n",
        "0.20 0.18 0.12",
        "0.20 0.18 0.12 \n",
        "0.20 0.18 0.12 x/345 6789",
        "0.20 0.18 0.12 2 345",
        "0.20 0.18 0.12 0/345 6789",
        "0.20 0.18 0.12 -3/345 6789",
        "0.20 0.18 0.12 99999999999999999999/345 1",
        "0.20 0.18 0.12 2147483648/345 1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = -7;
        if (mstar__loadavg_runnable(bad[i], &n))
            fail_msg("'%s' gave %ld", bad[i], n);
        assert_int_equal(n, -7);
    }
    /* The kernel's own line, read as the waits read it: this thread at least is running. */
    assert_true(mstar__loadavg_read(&n));
    assert_true(n >= 1);
}

/* Write `line` over the test's loadavg file at `path`. */
static void write_loadavg(const char *path, const char *line)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(line, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* The answer the waits get from the kernel's count: a count above this thread's CPUs stops a
 * spin, one within them allows it, and the answer is kept for a millisecond. Where the count
 * cannot be read or holds none, nothing says a CPU is short, and a wait spins. */
static void test_spare_follows_the_runnable_count(void **state)
{
    (void)state;
    char path[] = "/tmp/mstar-test-loadavg-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    mstar__cpu_spare_force(-1);
    mstar__cpu_spare_read_from(path);
    /* Past any answer this thread kept, and a millisecond apart: each call reads the file. */
    uint64_t t = mstar__now_ns() + UINT64_C(1000000000), ms = UINT64_C(1000000);
    write_loadavg(path, "0.00 0.00 0.00 100000/100001 1\n");
    assert_false(mstar__cpu_spare(t));
    write_loadavg(path, "0.00 0.00 0.00 1/100 1\n");
    assert_false(mstar__cpu_spare(t + ms / 2)); /* kept: the file is not read again yet */
    assert_true(mstar__cpu_spare(t + ms));
    write_loadavg(path, "0.00 0.00 0.00 100000/100001 1\n");
    assert_false(mstar__cpu_spare(t + 2 * ms));
    write_loadavg(path, "no count here\n");
    assert_true(mstar__cpu_spare(t + 3 * ms));
    write_loadavg(path, "0.00 0.00 0.00 100000/100001 1\n");
    assert_false(mstar__cpu_spare(t + 4 * ms));
    assert_int_equal(unlink(path), 0);
    assert_true(mstar__cpu_spare(t + 5 * ms));
    mstar__cpu_spare_read_from(NULL);
    mstar__cpu_spare_force(1);
}

/* Take the spare CPU away 20 ms into a wait. */
static void *fill_the_cpus_later(void *arg)
{
    (void)arg;
    usleep(20000);
    mstar__cpu_spare_force(0);
    return NULL;
}

/* A spin that has begun stops once no CPU is spare, long before its bound, and counts no miss
 * (it says nothing of whether spinning pays). */
static void test_a_spin_stops_when_the_cpus_fill(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000000");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fill_the_cpus_later, NULL), 0);
    uint64_t t0 = mstar__now_ns();
    assert_false(mstar_mesh_spin(m.rx));
    assert_true(mstar__now_ns() - t0 < UINT64_C(500000000)); /* its bound is a second */
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(m.rx->inrings.spin_misses, 0);
    mesh_pair_close(&m);
}

static void *finish_after_300ms(void *arg)
{
    usleep(300000);
    mstar__completion_finish(arg, MSTAR_OK, NULL);
    return NULL;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* A completion wait stops spinning once no CPU is spare and sleeps until its read lands: over a
 * 300 ms wait it spends about the 20 ms before the CPUs filled, not the whole wait. */
static void test_a_completion_wait_stops_spinning_when_the_cpus_fill(void **state)
{
    (void)state;
    setenv("MSTAR_RING_SPIN_US", "1000000", 1);
    mstar_completion *c;
    assert_mstar_ok(mstar__completion_create(NULL, &c));
    pthread_t filler, finisher;
    assert_int_equal(pthread_create(&filler, NULL, fill_the_cpus_later, NULL), 0);
    assert_int_equal(pthread_create(&finisher, NULL, finish_after_300ms, c), 0);
    uint64_t cpu0 = thread_cpu_ns();
    assert_mstar_ok(mstar_completion_wait(c, 5000));
    uint64_t cpu = thread_cpu_ns() - cpu0;
    if (cpu >= UINT64_C(150000000))
        fail_msg("the wait spent %.1f ms of CPU: it spun on with no CPU spare", (double)cpu / 1e6);
    assert_int_equal(pthread_join(filler, NULL), 0);
    assert_int_equal(pthread_join(finisher, NULL), 0);
    mstar_completion_release(c);
}

static void *finish_later(void *arg)
{
    usleep(2000);
    mstar__completion_finish(arg, MSTAR_OK, NULL);
    return NULL;
}

/* Spinning or asleep, a wait returns once its read lands, with its status. */
static void test_completion_wait_ends_when_the_read_lands(void **state)
{
    (void)state;
    static const char *const spins[] = { "0", "1000000" };
    for (size_t i = 0; i < 2; i++) {
        setenv("MSTAR_RING_SPIN_US", spins[i], 1);
        mstar_completion *c;
        assert_mstar_ok(mstar__completion_create(NULL, &c));
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, finish_later, c), 0);
        assert_mstar_ok(mstar_completion_wait(c, -1));
        assert_true(mstar__completion_done(c));
        pthread_join(t, NULL);
        mstar_completion_release(c);
    }
}

/* A read that lands while the loop spins ends the spin (mesh/spin_break.h): the loop looks at
 * what landed at once, not when a bound of up to 16 times MSTAR_RING_SPIN_US is over. The reads
 * are those of the manager that sends through the mesh. The spin says it found work with no
 * message waiting, and counts neither a hit nor a miss. A read that landed before the spin
 * started ends it too: the loop may have looked at its work before. A break is seen once, and
 * a receive that waits goes on waiting for its message. */
static void test_a_landed_read_ends_the_spin(void **state)
{
    (void)state;
    mesh_pair m = ring_pair("1000000"); /* a second: this spin ends only for the read */
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "worker_0";
    o.transport = MSTAR_TRANSPORT_LOCAL;
    o.send = mstar_comm_send_via_mesh;
    o.send_ctx = m.rx;
    mstar_comm *comm;
    assert_mstar_ok(mstar_comm_create(&o, &comm));
    /* What the manager's transports make their read handles with. */
    const mstar__completion_notice *notice = comm->env.notice;
    assert_int_equal(notice->fd, mstar_comm_event_fd(comm));
    mstar__inrings *in = &m.rx->inrings;
    mstar_msg got;
    mstar_completion *c;
    assert_mstar_ok(mstar__completion_create(notice, &c));
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, finish_later, c), 0);
    assert_true(mstar_mesh_spin(m.rx));
    assert_true(mstar__completion_done(c));
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(in->spin_misses, 0);
    assert_int_equal(in->missed_at, 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    mstar_completion_release(c);

    assert_mstar_ok(mstar__completion_create(notice, &c));
    mstar__completion_finish(c, MSTAR_OK, NULL);
    assert_true(mstar_mesh_spin(m.rx));
    assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    mstar_completion_release(c);

    /* A break is seen once: the next spin (its bound cut to 10 ms here) finds nothing. */
    in->spin_ns = 10000000;
    assert_false(mstar_mesh_spin(m.rx));
    /* A receive that waits spins again after a break, and still waits for a message. */
    assert_mstar_ok(mstar__completion_create(notice, &c));
    mstar__completion_finish(c, MSTAR_OK, NULL);
    assert_mstar_status(mstar_mesh_recv(m.rx, 20, &got), MSTAR_EAGAIN);
    assert_non_null(strstr(mstar_last_error(), "no message within 20 ms"));
    mstar_completion_release(c);
    mesh_harness_send(m.tx, "worker_0", 1);
    assert_true(mstar_mesh_spin(m.rx));
    mesh_harness_recv(m.rx, "conductor", 1);
    mstar_comm_destroy(comm);
    mesh_pair_close(&m);
}

int main(void)
{
    ipc_dir = mstar_test_tmpdir("spin");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_garbage_knob_is_refused_by_the_mesh, setup),
        cmocka_unit_test_setup(test_garbage_knob_is_refused_by_a_completion_wait, setup),
        cmocka_unit_test_setup(test_disarmed_ring_is_not_rung, setup),
        cmocka_unit_test_setup(test_spin_finds_a_waiting_message, setup),
        cmocka_unit_test_setup(test_a_look_that_does_not_wait_leaves_the_loop_awake, setup),
        cmocka_unit_test_setup(test_empty_spin_arms_and_then_stops, setup),
        cmocka_unit_test_setup(test_near_misses_grow_the_spin_and_far_ones_shrink_it, setup),
        cmocka_unit_test_setup(test_a_near_miss_brings_spinning_back, setup),
        cmocka_unit_test_setup(test_a_spin_cut_by_its_deadline_settles_nothing, setup),
        cmocka_unit_test_setup(test_spin_off_only_checks, setup),
        cmocka_unit_test_setup(test_completion_wait_ends_when_the_read_lands, setup),
        cmocka_unit_test_setup(test_a_landed_read_ends_the_spin, setup),
        cmocka_unit_test_setup(test_a_poll_asks_for_a_spin_only_in_a_loop_that_spins, setup),
        cmocka_unit_test_setup(test_a_busy_machine_stops_the_spin, setup),
        cmocka_unit_test_setup(test_loadavg_runnable, setup),
        cmocka_unit_test_setup(test_spare_follows_the_runnable_count, setup),
        cmocka_unit_test_setup(test_a_spin_stops_when_the_cpus_fill, setup),
        cmocka_unit_test_setup(test_a_completion_wait_stops_spinning_when_the_cpus_fill, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
