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
    assert_mstar_ok(mstar__bell_hello(bell, from, to, r));
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

/* A message too large to go inline in a 4 KiB ring (a blob beside it). */
static void send_large(mstar_mesh *tx, int64_t n)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg.request_id = mstar_rid_from_int(n);
    for (int k = 0; k < 400; k++)
        assert_mstar_ok(mstar_msg_add_count(&msg, mstar_id_make(100, (uint64_t)k + 1), 1));
    assert_mstar_ok(mstar_mesh_send(tx, "worker_0", &msg));
    mstar_msg_clear(&msg);
}

/* Fault 2, a hello that gets no answer (its fd lost on the way, or a receiver that does not
 * read its bell): after a second the sender withdraws the ring and sends over ZeroMQ what it
 * wrote there; the receiver, reading the hello later, drops the withdrawn ring unread, so each
 * message arrives once. The sender looks while it waits in its own receive. */
static void test_unanswered_ring_is_withdrawn(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mesh_harness_send(m.tx, "worker_0", 1);
    mesh_harness_send(m.tx, "worker_0", 2);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(m.tx, 1500, &got), MSTAR_EAGAIN);
    mesh_harness_send(m.tx, "worker_0", 3);
    for (int64_t n = 1; n <= 3; n++)
        mesh_harness_recv(m.rx, "conductor", n);
    assert_mstar_status(mstar_mesh_recv(m.rx, 50, &got), MSTAR_EAGAIN);
    assert_int_equal(m.rx->inrings.n, 0);
    uint64_t *v = mstar__strmap_find(&m.tx->peers, "worker_0", 8);
    assert_non_null(v);
    assert_non_null(((mstar__peer *)(uintptr_t)*v)->sock); /* ZeroMQ */
    assert_int_equal(((mstar__peer *)(uintptr_t)*v)->ring.fd, -1);
    mesh_pair_close(&m);
}

/* Fault 2: with the receiver's table full of live rings, the conductor's ring hello is refused;
 * the conductor learns it and every message it sends arrives, in order, over ZeroMQ: the ones
 * it wrote into the refused ring before it knew, and the ones after. */
static void test_refused_ring_falls_back(void **state)
{
    (void)state;
    mstar_mesh *rx = mesh_harness_open(ipc_dir, "worker_0");
    static mstar__ring held[MSTAR__MESH_MAX_RINGS];
    char name[32];
    mstar_msg got;
    for (int i = 0; i < MSTAR__MESH_MAX_RINGS; i++) {
        snprintf(name, sizeof(name), "holder_%d", i);
        offer_ring("worker_0", name, MSTAR__RING_MIN_CAP, &held[i]);
        if (i % 8 == 7) /* the bell holds a limited number of datagrams */
            assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN);
    }
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(rx->inrings.n, MSTAR__MESH_MAX_RINGS);

    setenv("MSTAR_RING_BYTES", "4096", 1); /* message 2 goes beside the ring, as a blob */
    mstar_mesh *tx = mesh_harness_open(ipc_dir, "conductor");
    unsetenv("MSTAR_RING_BYTES");
    mesh_harness_send(tx, "worker_0", 1); /* into a ring, handed to the full table */
    send_large(tx, 2);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN); /* refuses it */
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("refused a ring from 'conductor'"));
    mesh_harness_send(tx, "worker_0", 3); /* the sender learns here */
    mesh_harness_send(tx, "worker_0", 4);
    for (int64_t n = 1; n <= 4; n++) {
        assert_mstar_ok(mstar_mesh_recv(rx, 10000, &got));
        assert_string_equal(got.from, "conductor");
        assert_int_equal(got.request_id.num, n);
        assert_int_equal(got.ncounts, n == 2 ? 400 : 0);
        mstar_msg_clear(&got);
    }
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);

    /* A sender that learns only when it next receives: its message still arrives. */
    mstar_mesh *tx2 = mesh_harness_open(ipc_dir, "worker_1");
    mesh_harness_send(tx2, "worker_0", 10);
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN); /* refuses it */
    assert_mstar_status(mstar_mesh_recv(tx2, 0, &got), MSTAR_EAGAIN);
    mesh_harness_recv(rx, "worker_1", 10);

    /* Once the table has room, the senders go on (over ZeroMQ) and nothing is lost. */
    for (int i = 0; i < MSTAR__MESH_MAX_RINGS; i++)
        mstar__ring_close(&held[i], false);
    mesh_harness_send(tx, "worker_0", 5);
    mesh_harness_send(tx2, "worker_0", 11);
    int64_t sum = 0; /* two senders: either may come first */
    for (int i = 0; i < 2; i++) {
        assert_mstar_ok(mstar_mesh_recv(rx, 10000, &got));
        assert_int_equal(got.request_id.num, strcmp(got.from, "conductor") == 0 ? 5 : 11);
        sum += got.request_id.num;
        mstar_msg_clear(&got);
    }
    assert_int_equal(sum, 16);
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
    mstar_mesh_destroy(tx2);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
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
        cmocka_unit_test(test_refused_ring_falls_back),
        cmocka_unit_test(test_unanswered_ring_is_withdrawn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
