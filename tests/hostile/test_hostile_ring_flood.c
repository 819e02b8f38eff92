/*
 * test_hostile_ring_flood.c — a co-located peer that holds a receiver with its ring, and a
 * receiver that refuses a ring (issue 29, faults 2 and 3): a ring flooded with junk frames must
 * not hold mstar_mesh_recv past its timeout nor flood the log, and every drop is counted; a
 * sender whose ring hello is refused (the receiver's table full of live rings) learns it and
 * carries its messages over ZeroMQ, those written before it learned included, in order.
 */
#include "mesh_harness.h"

#include "core/vec.h"
#include "mesh/mesh_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *ipc_dir;

/* A ring from `from` handed to `to`'s bell, as a sender would (without a mesh). */
static void offer_ring(const char *to, const char *from, uint64_t cap, mstar__ring *r)
{
    assert_mstar_ok(mstar__ring_create(from, to, cap, r));
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    mstar__mesh_config cfg;
    assert_mstar_ok(mstar__mesh_config_resolve(&opts, &cfg));
    int bell;
    assert_mstar_ok(mstar__bell_connect(&cfg, from, to, &bell));
    assert_mstar_ok(mstar__bell_hello(bell, from, to, r->fd));
    close(bell);
}

typedef struct flood {
    mstar__ring ring;
    atomic_bool stop;
    uint64_t frames;
} flood;

/* Junk frames (two bytes that decode as nothing) as fast as the ring takes them, until told to
 * stop or for at most 10 s. (The ring is full when this starts, so the flood does not depend
 * on how soon this thread runs.) */
static void *flooder(void *arg)
{
    flood *f = arg;
    uint64_t end = mstar__now_ns() + UINT64_C(10000000000);
    while (!atomic_load(&f->stop) && mstar__now_ns() < end) {
        bool wake;
        if (mstar__ring_write(&f->ring, "\x01\x02", 2, &wake) == MSTAR_OK)
            f->frames++;
        else
            mstar_error_clear();
    }
    return NULL;
}

/* Counts the log lines about dropped frames (without keeping them: unbounded, they were
 * millions). */
static void count_drop_lines(mstar_log_level level, const char *line, void *ctx)
{
    (void)level;
    if (strstr(line, "dropped a frame") != NULL)
        (*(int *)ctx)++;
}

/* Fault 3: while one ring floods junk, a receive with a 100 ms timeout returns (it used to be
 * held for the whole flood), the log carries a bounded number of lines about the drops, every
 * drop is counted, and an honest sender's message gets through. */
static void test_junk_flood_is_bounded(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    flood f = { 0 };
    /* A ring of 1 MiB full of junk (65536 frames) before it is handed over, then refilled. */
    offer_ring("worker_0", "intruder", UINT64_C(1) << 20, &f.ring);
    bool wake;
    while (mstar__ring_write(&f.ring, "\x01\x02", 2, &wake) == MSTAR_OK)
        f.frames++;
    mstar__inrings_drain(m.rx); /* attaches it */
    assert_int_equal(m.rx->inrings.n, 1);
    mstar_msg got;

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, flooder, &f), 0);
    int lines = 0;
    mstar_log_set_sink(count_drop_lines, &lines);
    uint64_t t0 = mstar__now_ns();
    mstar_status st = mstar_mesh_recv(m.rx, 100, &got);
    uint64_t waited_ms = (mstar__now_ns() - t0) / 1000000;
    /* A poll (timeout 0) returns too, however much junk is waiting. */
    mstar_status polled = mstar_mesh_recv(m.rx, 0, &got);
    atomic_store(&f.stop, true);
    assert_int_equal(pthread_join(t, NULL), 0);
    mstar_log_set_sink(NULL, NULL);
    print_message("recv(100 ms) returned after %llu ms; %llu junk frames sent, %llu dropped, "
                  "%d log lines\n",
                  (unsigned long long)waited_ms, (unsigned long long)f.frames,
                  (unsigned long long)mstar_mesh_dropped(m.rx), lines);
    assert_mstar_status(st, MSTAR_EAGAIN);
    assert_mstar_status(polled, MSTAR_EAGAIN);
    assert_true(waited_ms < 5000); /* the flood lasts up to 10 s */
    assert_true(lines <= 40);
    assert_true(mstar_mesh_dropped(m.rx) > 100);

    /* What is left of the flood is dropped and counted; the honest sender still gets through. */
    mesh_harness_send(m.tx, "worker_0", 5);
    for (;;) {
        st = mstar_mesh_recv(m.rx, 10000, &got);
        if (st == MSTAR_OK)
            break;
        assert_mstar_status(st, MSTAR_EAGAIN);
    }
    assert_string_equal(got.from, "conductor");
    assert_int_equal(got.request_id.num, 5);
    mstar_msg_clear(&got);
    for (int i = 0; i < 10000000 && mstar_mesh_dropped(m.rx) < f.frames; i++)
        assert_mstar_status(mstar_mesh_recv(m.rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(m.rx), f.frames);
    mstar__ring_close(&f.ring, false);
    mesh_pair_close(&m);
}

int main(void)
{
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    unsetenv("MSTAR_RING_BYTES");
    setenv("MSTAR_MESH_RING", "AUTO", 1);
    ipc_dir = mstar_test_tmpdir("hostile-ringflood");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_junk_flood_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
