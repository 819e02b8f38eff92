/*
 * test_mesh_ring.c — the shared-memory ring between entities of one host: the ring itself
 * (order, its pages mapped up front, a full ring, frames wrapping the end, a message too large, a
 * corrupted ring refused), and the mesh over it (messages in order, a full ring is MSTAR_EAGAIN,
 * the pollable inbox fd, a receiver that dies, MSTAR_MESH_RING=0/1, nothing left in the directory
 * afterwards).
 */
#include "mesh_harness.h"

#include "core/spare_cpu.h"
#include "mesh/mesh_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *ipc_dir;

static int setup(void **state)
{
    (void)state;
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    unsetenv("MSTAR_RING_BYTES");
    setenv("MSTAR_MESH_RING", "1", 1);
    return 0;
}

/* ---- the ring alone ------------------------------------------------------------------------ */

/* A sender's ring and the receiver's view of it (the fd passed on as the bell would). */
static void ring_pair(uint64_t cap, mstar__ring *tx, mstar__ring *rx)
{
    assert_mstar_ok(mstar__ring_create("conductor", "worker_0", cap, tx));
    int fd = dup(tx->fd);
    assert_true(fd >= 0);
    assert_mstar_ok(mstar__ring_attach(fd, "conductor", "worker_0", rx));
}

static void put(mstar__ring *tx, uint32_t seq, size_t len)
{
    uint8_t buf[4096];
    assert_true(len >= 4 && len <= sizeof(buf));
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seq + i);
    memcpy(buf, &seq, 4);
    bool wake;
    assert_mstar_ok(mstar__ring_write(tx, buf, len, &wake));
}

static void get(mstar__ring *rx, uint32_t seq, size_t len, uint8_t **buf, size_t *cap)
{
    size_t got;
    bool blob;
    assert_mstar_ok(mstar__ring_read(rx, buf, cap, &got, &blob));
    assert_int_equal(got, len);
    uint32_t have;
    memcpy(&have, *buf, 4);
    assert_int_equal(have, seq);
    for (size_t i = 4; i < len; i++)
        assert_int_equal((*buf)[i], (uint8_t)(seq + i));
}

static void test_ring_keeps_order_and_wraps(void **state)
{
    (void)state;
    mstar__ring tx, rx;
    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    uint8_t *buf = NULL;
    size_t cap = 0;
    /* Odd sizes so that frames straddle the end of the 4 KiB data area many times over. */
    uint32_t sent = 0, got = 0;
    for (int round = 0; round < 200; round++) {
        for (int k = 0; k < 3; k++, sent++)
            put(&tx, sent, 100 + (sent * 37) % 900);
        for (; got < sent; got++)
            get(&rx, got, 100 + (got * 37) % 900, &buf, &cap);
    }
    assert_true(tx.pos > 20 * MSTAR__RING_MIN_CAP);
    size_t len;
    bool blob;
    assert_int_equal(mstar__ring_read(&rx, &buf, &cap, &len, &blob), MSTAR_EAGAIN);
    free(buf);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
}

static long minor_faults(void)
{
    struct rusage u;
    assert_int_equal(getrusage(RUSAGE_SELF, &u), 0);
    return u.ru_minflt;
}

/* Write every byte of `p` from /dev/zero, or read every byte of it into a scratch memfd: through
 * raw system calls, so the kernel touches the pages and a sanitizer's interceptors and shadow
 * memory (which fault pages of their own) stay out of the count. */
static void kernel_fill(void *p, size_t len)
{
    int zero = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    assert_true(zero >= 0);
    assert_int_equal(syscall(SYS_read, zero, p, len), (long)len);
    close(zero);
}

static void kernel_read(const void *p, size_t len)
{
    int sink = memfd_create("mstar-test-sink", MFD_CLOEXEC);
    assert_true(sink >= 0);
    assert_int_equal(syscall(SYS_write, sink, p, len), (long)len);
    close(sink);
}

/* Both sides map every page of the ring up front: a first pass of frames through the data area
 * faults no page in on either side (it used to fault one in every few frames). A receiver maps
 * a ring larger than its own MSTAR_RING_BYTES lazily (it would allocate the sender's holes). */
static void test_ring_pages_are_mapped_up_front(void **state)
{
    (void)state;
    const uint64_t cap = UINT64_C(1) << 20;
    mstar__ring tx, rx;
    setenv("MSTAR_RING_BYTES", "1048576", 1);
    ring_pair(cap, &tx, &rx);
    long before = minor_faults();
    kernel_fill(tx.data, cap);
    kernel_read(rx.data, cap);
    long faults = minor_faults() - before;
    assert_true(faults < 16); /* 256 pages each side, unpopulated */
    mstar__ring_close(&rx, true);
    setenv("MSTAR_RING_BYTES", "4096", 1);
    int fd = dup(tx.fd);
    assert_mstar_ok(mstar__ring_attach(fd, "conductor", "worker_0", &rx));
    before = minor_faults();
    kernel_read(rx.data, cap);
    assert_true(minor_faults() - before > 0); /* mapped as it is touched */
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
    unsetenv("MSTAR_RING_BYTES");
}

static void test_full_ring_is_eagain_until_read(void **state)
{
    (void)state;
    mstar__ring tx, rx;
    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    uint8_t payload[1000] = { 0 };
    bool wake;
    int n = 0;
    while (mstar__ring_write(&tx, payload, sizeof(payload), &wake) == MSTAR_OK)
        n++;
    assert_int_equal(n, MSTAR__RING_MIN_CAP / 1008);
    assert_mstar_status(mstar__ring_write(&tx, payload, sizeof(payload), &wake), MSTAR_EAGAIN);
    uint8_t *buf = NULL;
    size_t cap = 0, len;
    bool blob;
    assert_mstar_ok(mstar__ring_read(&rx, &buf, &cap, &len, &blob));
    assert_mstar_ok(mstar__ring_write(&tx, payload, sizeof(payload), &wake));
    /* Larger than the ring can ever hold: not "retry", but a clear refusal. */
    uint8_t *big = calloc(1, MSTAR__RING_MIN_CAP);
    assert_mstar_status(mstar__ring_write(&tx, big, MSTAR__RING_MIN_CAP, &wake), MSTAR_ERANGE);
    free(big);
    free(buf);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
}

static void test_armed_receiver_is_woken_once(void **state)
{
    (void)state;
    mstar__ring tx, rx;
    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    bool wake;
    assert_mstar_ok(mstar__ring_write(&tx, "x", 1, &wake));
    assert_false(wake); /* not asked */
    mstar__ring_arm(&rx, MSTAR__RING_ARMED);
    assert_mstar_ok(mstar__ring_write(&tx, "y", 1, &wake));
    assert_true(wake);
    assert_mstar_ok(mstar__ring_write(&tx, "z", 1, &wake));
    assert_false(wake); /* one wake per sleep */
    /* About to spin, and it never does (it sleeps after all): woken once the wait is over. */
    mstar__ring_arm(&rx, MSTAR__RING_ARMED_SPIN);
    assert_mstar_ok(mstar__ring_write(&tx, "s", 1, &wake));
    assert_true(wake);
    assert_int_equal(atomic_load(&rx.hdr->rx_waiting), MSTAR__RING_AWAKE);
    /* Spinning (disarmed): no wake. */
    mstar__ring_arm(&rx, MSTAR__RING_ARMED_SPIN);
    mstar__ring_disarm(&rx);
    assert_mstar_ok(mstar__ring_write(&tx, "t", 1, &wake));
    assert_false(wake);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
}

/* What a hostile or broken sender can do to the shared words is refused, never followed. */
static void test_corrupted_ring_is_refused(void **state)
{
    (void)state;
    uint8_t *buf = NULL;
    size_t cap = 0, len;
    bool blob;
    mstar__ring tx, rx;

    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    put(&tx, 1, 64);
    atomic_store(&tx.hdr->tail, UINT64_C(1) << 40); /* more than the ring holds */
    assert_mstar_status(mstar__ring_read(&rx, &buf, &cap, &len, &blob), MSTAR_EPROTO);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);

    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    put(&tx, 1, 64);
    uint32_t words[2] = { 1u << 20, ~(1u << 20) }; /* consistent, but past what was published */
    memcpy(tx.data, words, sizeof(words));
    assert_mstar_status(mstar__ring_read(&rx, &buf, &cap, &len, &blob), MSTAR_EPROTO);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);

    ring_pair(MSTAR__RING_MIN_CAP, &tx, &rx);
    put(&tx, 1, 64);
    tx.data[4] ^= 1; /* the check word no longer matches */
    assert_mstar_status(mstar__ring_read(&rx, &buf, &cap, &len, &blob), MSTAR_EPROTO);
    /* The receiver's own head is what the sender checks against. */
    atomic_store(&rx.hdr->head, UINT64_C(1) << 50);
    bool wake;
    assert_mstar_status(mstar__ring_write(&tx, "x", 1, &wake), MSTAR_EPROTO);
    mstar__ring_close(&rx, true);
    mstar__ring_close(&tx, false);
    free(buf);
}

static void test_attach_checks_the_memory_and_the_header(void **state)
{
    (void)state;
    mstar__ring tx, rx;
    assert_mstar_ok(mstar__ring_create("conductor", "worker_0", MSTAR__RING_MIN_CAP, &tx));
    assert_mstar_status(mstar__ring_attach(dup(tx.fd), "conductor", "worker_1", &rx), MSTAR_EPROTO);
    assert_mstar_status(mstar__ring_attach(dup(tx.fd), "api_server", "worker_0", &rx),
                        MSTAR_EPROTO);
    tx.hdr->magic ^= 1;
    assert_mstar_status(mstar__ring_attach(dup(tx.fd), "conductor", "worker_0", &rx), MSTAR_EPROTO);
    mstar__ring_close(&tx, false);

    /* Unsealed memory could shrink under the mapping: refused before it is mapped. */
    int fd = memfd_create("not-a-ring", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, MSTAR__RING_HEADER + MSTAR__RING_MIN_CAP), 0);
    assert_mstar_status(mstar__ring_attach(fd, "conductor", "worker_0", &rx), MSTAR_EPROTO);
    assert_true(strstr(mstar_last_error(), "sealed") != NULL);
    /* Not a file at all. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    close(p[1]);
    assert_mstar_status(mstar__ring_attach(p[0], "conductor", "worker_0", &rx), MSTAR_EPROTO);
}

/* ---- the mesh over rings ------------------------------------------------------------------- */

static bool peer_uses_ring(mstar_mesh *mesh, const char *peer)
{
    uint64_t *v = mstar__strmap_find(&mesh->peers, peer, strlen(peer));
    assert_non_null(v);
    return ((mstar__peer *)(uintptr_t)*v)->sock == NULL;
}

static void test_mesh_over_ring_keeps_order_and_cleans_up(void **state)
{
    (void)state;
    mstar_mesh *a = mesh_harness_open(ipc_dir, "conductor"),
               *b = mesh_harness_open(ipc_dir, "worker_0"),
               *c = mesh_harness_open(ipc_dir, "worker_1");
    for (int64_t i = 0; i < 2000; i++) {
        mesh_harness_send(a, "worker_0", i);
        if (i % 2 == 0)
            mesh_harness_send(c, "worker_0", i);
    }
    assert_true(peer_uses_ring(a, "worker_0"));
    int64_t next_a = 0, next_c = 0;
    while (next_a < 2000 || next_c < 2000) {
        mstar_msg got;
        assert_mstar_ok(mstar_mesh_recv(b, 10000, &got));
        int64_t *next = strcmp(got.from, "conductor") == 0 ? &next_a : &next_c;
        assert_int_equal(got.request_id.num, *next);
        *next += next == &next_a ? 1 : 2;
        mstar_msg_clear(&got);
    }
    assert_int_equal(b->inrings.n, 2);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_string_equal(mstar_last_error(), "mesh worker_0: no message"); /* made once */
    assert_int_equal(mstar_mesh_dropped(b), 0);
    mstar_mesh_destroy(a);
    mstar_mesh_destroy(b);
    mstar_mesh_destroy(c);
    assert_int_equal(mstar_test_count_dir(ipc_dir), 0);
}

static void test_mesh_full_ring_is_eagain(void **state)
{
    (void)state;
    setenv("MSTAR_RING_BYTES", "4096", 1);
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    int64_t sent = 0;
    mstar_status st;
    for (;;) {
        mstar_msg msg;
        mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
        msg.request_id = mstar_rid_from_int(sent);
        st = mstar_mesh_send(a, "worker_0", &msg);
        mstar_msg_clear(&msg);
        if (st != MSTAR_OK)
            break;
        sent++;
    }
    assert_int_equal(st, MSTAR_EAGAIN);
    assert_true(strstr(mstar_last_error(), "full") != NULL);
    assert_true(sent > 10);
    for (int64_t i = 0; i < sent; i++)
        mesh_harness_recv(b, "conductor", i);
    mesh_harness_send(a, "worker_0", sent);
    mesh_harness_recv(b, "conductor", sent);
    mesh_pair_close(&m);
}

/* Messages too large to go inline travel as blobs beside the ring, in their place in the order. */
static void test_large_messages_keep_their_place(void **state)
{
    (void)state;
    setenv("MSTAR_RING_BYTES", "4096", 1);
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    for (int64_t i = 0; i < 6; i++) {
        mstar_msg msg;
        mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
        msg.request_id = mstar_rid_from_int(i);
        for (int k = 0; i % 2 == 1 && k < 400; k++)
            assert_mstar_ok(mstar_msg_add_count(&msg, mstar_id_make(100, (uint64_t)k + 1), 1));
        assert_mstar_ok(mstar_mesh_send(a, "worker_0", &msg));
        mstar_msg_clear(&msg);
    }
    for (int64_t i = 0; i < 6; i++) {
        mstar_msg got;
        assert_mstar_ok(mstar_mesh_recv(b, 10000, &got));
        assert_int_equal(got.request_id.num, i);
        assert_int_equal(got.ncounts, i % 2 == 1 ? 400 : 0);
        mstar_msg_clear(&got);
    }
    assert_int_equal(b->inrings.nblobs, 0);
    size_t big_len = (size_t)MSTAR_WIRE_MAX_MESSAGE + 1;
    char *big = calloc(1, big_len);
    assert_mstar_status(mstar_mesh_send_raw(a, "worker_0", big, big_len), MSTAR_ERANGE);
    free(big);
    mesh_pair_close(&m);
}

/* Send TENSOR_RECEIVED numbered `n` carrying `ncounts` counts from a to worker_0. */
static void send_counts(mstar_mesh *a, int64_t n, int ncounts)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg.request_id = mstar_rid_from_int(n);
    for (int k = 0; k < ncounts; k++)
        assert_mstar_ok(mstar_msg_add_count(&msg, mstar_id_make(100, (uint64_t)k + 1), 1));
    assert_mstar_ok(mstar_mesh_send(a, "worker_0", &msg));
    mstar_msg_clear(&msg);
}

static void recv_counts(mstar_mesh *b, int64_t n, int ncounts)
{
    mstar_msg got;
    assert_mstar_ok(mstar_mesh_recv(b, 10000, &got));
    assert_int_equal(got.request_id.num, n);
    assert_int_equal(got.ncounts, ncounts);
    for (int k = 0; k < ncounts; k++)
        assert_true(got.counts[k].uuid == mstar_id_make(100, (uint64_t)k + 1));
    mstar_msg_clear(&got);
}

/* mstar_mesh_send encodes into a buffer the mesh keeps while messages go over a ring (copied in),
 * drops it when a message needed more than MSTAR__MESH_KEEP_ENCODED (one large message does not
 * pin its size), and hands it to ZeroMQ with each frame (the next message encodes into a new
 * one): every message arrives whole either way. */
static void test_send_keeps_its_encoding_buffer_for_rings_only(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    send_counts(a, 0, 1);
    assert_true(peer_uses_ring(a, "worker_0"));
    void *kept = a->encoded;
    assert_non_null(kept);
    assert_true(a->encoded_cap > 0 && a->encoded_cap <= MSTAR__MESH_KEEP_ENCODED);
    send_counts(a, 1, 2);
    assert_ptr_equal(a->encoded, kept);
    int big = 8000; /* about 100 KiB encoded */
    send_counts(a, 2, big);
    assert_null(a->encoded);
    assert_int_equal(a->encoded_cap, 0);
    send_counts(a, 3, 1);
    assert_non_null(a->encoded);
    recv_counts(b, 0, 1);
    recv_counts(b, 1, 2);
    recv_counts(b, 2, big);
    recv_counts(b, 3, 1);
    mesh_pair_close(&m);

    setenv("MSTAR_MESH_RING", "0", 1);
    m = mesh_pair_open(ipc_dir);
    a = m.tx;
    b = m.rx;
    for (int64_t i = 0; i < 3; i++) {
        send_counts(a, i, 3);
        assert_false(peer_uses_ring(a, "worker_0"));
        assert_null(a->encoded); /* the frame took it */
    }
    for (int64_t i = 0; i < 3; i++)
        recv_counts(b, i, 3);
    mesh_pair_close(&m);
}

/* The inbox fd becomes readable when a ring message arrives for a loop that found none. */
static void test_inbox_fd_signals_ring_arrivals(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    mesh_harness_send(a, "worker_0", 0);
    mesh_harness_recv(b, "conductor", 0);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(b), .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 0);
    mesh_harness_send(a, "worker_0", 1);
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_mstar_ok(mstar_mesh_recv(b, 0, &got));
    assert_int_equal(got.request_id.num, 1);
    mstar_msg_clear(&got);
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(poll(&p, 1, 0), 0); /* drained: the loop can sleep again */
    mesh_pair_close(&m);
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* A ring the receiver drops (here: its sender's position is impossible) closes both fds it came
 * with, and its eventfd leaves the epoll set: the sender still holds that eventfd, and a write
 * to it must not wake the receiver any more. */
static void test_dropped_ring_releases_its_fds(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    mesh_harness_send(a, "worker_0", 0);
    mesh_harness_recv(b, "conductor", 0);
    assert_int_equal(b->inrings.n, 1);
    uint64_t *found = mstar__strmap_find(&a->peers, "worker_0", strlen("worker_0"));
    assert_non_null(found);
    const mstar__peer *peer = (const mstar__peer *)(uintptr_t)*found;
    int before = open_fds();
    atomic_store(&b->inrings.rings[0].ring.hdr->tail, UINT64_C(1) << 40);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(b->inrings.n, 0);
    assert_int_equal(mstar_mesh_dropped(b), 1);
    assert_int_equal(open_fds(), before - 2); /* the memfd and the eventfd */
    mstar__ring_wake(&peer->ring);
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(b), .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 0);
    mesh_pair_close(&m);
}

/* A loop that spins (MSTAR_RING_SPIN_US) and then sleeps in its own poll() of the inbox fd: a
 * receive after a spin that found a frame asks the kernel nothing, yet after a spin that found
 * nothing the loop never sleeps through a frame, and the fd is quiet again once received. */
static void test_spinning_loop_never_sleeps_through_a_frame(void **state)
{
    (void)state;
    setenv("MSTAR_RING_SPIN_US", "200", 1);
    mesh_pair m = mesh_pair_open(ipc_dir);
    unsetenv("MSTAR_RING_SPIN_US");
    mstar_mesh *a = m.tx, *b = m.rx;
    mesh_harness_send(a, "worker_0", 0);
    mesh_harness_recv(b, "conductor", 0);
    mstar_msg got;
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(b), .events = POLLIN };
    for (int64_t i = 1; i <= 20; i++) {
        assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
        if (i % 2 == 0) {
            /* Awake: the frame comes while the loop spins. */
            mesh_harness_send(a, "worker_0", i);
            assert_true(mstar_mesh_spin(b));
        } else {
            /* Asleep: nothing came within the spin, then the frame wakes the poll. */
            assert_false(mstar_mesh_spin(b));
            assert_int_equal(poll(&p, 1, 0), 0);
            mesh_harness_send(a, "worker_0", i);
            assert_int_equal(poll(&p, 1, 10000), 1);
        }
        assert_mstar_ok(mstar_mesh_recv(b, 0, &got));
        assert_int_equal(got.request_id.num, i);
        mstar_msg_clear(&got);
    }
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_false(mstar_mesh_spin(b));
    assert_int_equal(poll(&p, 1, 0), 0);
    mesh_pair_close(&m);
}

typedef struct late_sender {
    mstar_mesh *tx;
    _Atomic int go;
} late_sender;

/* Send request 1 once the receiver is about to spin, a moment later (while it spins). */
static void *send_late(void *arg)
{
    late_sender *ls = arg;
    while (atomic_load(&ls->go) == 0)
        continue;
    usleep(1000);
    mesh_harness_send(ls->tx, "worker_0", 1);
    return NULL;
}

/* Awake: a spin found a frame no sender woke it for (it came while the receiver spun, from
 * another thread), so the receives after it ask the kernel nothing; then, with no spin first,
 * the loop polls and a sender wakes it. The receive that finds the rings empty must clear that
 * wake's edge, or the loop's next poll returns at once. */
static void test_awake_loop_clears_a_later_wake(void **state)
{
    (void)state;
    setenv("MSTAR_RING_SPIN_US", "1000000", 1); /* the spin ends when the frame comes */
    mesh_pair m = mesh_pair_open(ipc_dir);
    unsetenv("MSTAR_RING_SPIN_US");
    mstar_mesh *a = m.tx, *b = m.rx;
    mesh_harness_send(a, "worker_0", 0);
    mesh_harness_recv(b, "conductor", 0);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    late_sender ls = { .tx = a };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, send_late, &ls), 0);
    atomic_store(&ls.go, 1);
    assert_true(mstar_mesh_spin(b));
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_mstar_ok(mstar_mesh_recv(b, 0, &got));
    assert_int_equal(got.request_id.num, 1);
    mstar_msg_clear(&got);
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(b), .events = POLLIN };
    assert_int_equal(poll(&p, 1, 0), 0);
    mesh_harness_send(a, "worker_0", 2); /* armed: it waits for a spin, then wakes b */
    assert_int_equal(poll(&p, 1, 10000), 1);
    assert_mstar_ok(mstar_mesh_recv(b, 0, &got));
    assert_int_equal(got.request_id.num, 2);
    mstar_msg_clear(&got);
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_int_equal(poll(&p, 1, 0), 0);
    mesh_pair_close(&m);
}

/* A receiver killed outright: its sender notices at its first send MSTAR__RING_LIVENESS_NS after
 * it woke it, drops the ring, and (forced onto rings) reports that the peer is not there; under
 * AUTO it falls back to ZeroMQ. */
static void test_dead_receiver_is_detected(void **state)
{
    (void)state;
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(go[0]);
        mstar_mesh *b = mesh_harness_open(ipc_dir, "worker_0");
        mstar_msg got;
        if (write(go[1], "r", 1) != 1 || mstar_mesh_recv(b, 10000, &got) != MSTAR_OK)
            _exit(1);
        /* Finding nothing more arms the ring: the sender will ring the bell next time. */
        if (mstar_mesh_recv(b, 0, &got) != MSTAR_EAGAIN || write(go[1], "a", 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(go[1]);
    char c;
    assert_int_equal(read(go[0], &c, 1), 1);
    mstar_mesh *a = mesh_harness_open(ipc_dir, "conductor");
    mesh_harness_send(a, "worker_0", 0);
    assert_true(peer_uses_ring(a, "worker_0"));
    assert_int_equal(read(go[0], &c, 1), 1);
    close(go[0]);
    kill(child, SIGKILL);
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    /* The child died with its ring armed. A wake through the ring's eventfd cannot tell, but
     * the first send to find it has read nothing since it was woken, once the liveness interval
     * has passed, checks through the bell, which tells the sender. (Before the interval the
     * wake goes to the eventfd; the send after that needs no wake: the flag is down.) */
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_status st = mstar_mesh_send_raw(a, "worker_0", "x", 1);
    assert_true(st == MSTAR_OK || st == MSTAR_EAGAIN);
    usleep((useconds_t)(2 * MSTAR__RING_LIVENESS_NS / 1000));
    st = mstar_mesh_send_raw(a, "worker_0", "x", 1);
    mstar_test_log_capture_end();
    assert_true(st == MSTAR_OK || st == MSTAR_EAGAIN);
    assert_true(mstar_test_log_contains("is gone"));
    assert_int_equal(mstar_mesh_num_peers(a), 0);
    assert_mstar_status(mstar_mesh_send_raw(a, "worker_0", "x", 1), MSTAR_EAGAIN);
    setenv("MSTAR_MESH_RING", "AUTO", 1);
    mstar_mesh_destroy(a);
    a = mesh_harness_open(ipc_dir, "conductor");
    assert_mstar_ok(mstar_mesh_send_raw(a, "worker_0", "x", 1));
    assert_false(peer_uses_ring(a, "worker_0"));
    mstar_mesh_destroy(a);
}

static void test_ring_off_uses_zeromq(void **state)
{
    (void)state;
    setenv("MSTAR_MESH_RING", "0", 1);
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *a = m.tx, *b = m.rx;
    assert_int_equal(b->bell_fd, -1);
    mesh_harness_send(a, "worker_0", 5);
    assert_false(peer_uses_ring(a, "worker_0"));
    mesh_harness_recv(b, "conductor", 5);
    mesh_pair_close(&m);
    setenv("MSTAR_MESH_RING", "sometimes", 1);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    assert_mstar_status(mstar_mesh_create("conductor", &opts, &a), MSTAR_EINVAL);
    assert_true(strstr(mstar_last_error(), "MSTAR_MESH_RING") != NULL);
}

int main(void)
{
    ipc_dir = mstar_test_tmpdir("mesh-ring");
    /* The spinning loops below spin whatever else the machine runs meanwhile (core/spare_cpu.h;
     * test_spin covers a busy machine). */
    mstar__cpu_spare_force(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ring_keeps_order_and_wraps, setup),
        cmocka_unit_test_setup(test_ring_pages_are_mapped_up_front, setup),
        cmocka_unit_test_setup(test_full_ring_is_eagain_until_read, setup),
        cmocka_unit_test_setup(test_armed_receiver_is_woken_once, setup),
        cmocka_unit_test_setup(test_corrupted_ring_is_refused, setup),
        cmocka_unit_test_setup(test_attach_checks_the_memory_and_the_header, setup),
        cmocka_unit_test_setup(test_mesh_over_ring_keeps_order_and_cleans_up, setup),
        cmocka_unit_test_setup(test_mesh_full_ring_is_eagain, setup),
        cmocka_unit_test_setup(test_large_messages_keep_their_place, setup),
        cmocka_unit_test_setup(test_send_keeps_its_encoding_buffer_for_rings_only, setup),
        cmocka_unit_test_setup(test_inbox_fd_signals_ring_arrivals, setup),
        cmocka_unit_test_setup(test_dropped_ring_releases_its_fds, setup),
        cmocka_unit_test_setup(test_spinning_loop_never_sleeps_through_a_frame, setup),
        cmocka_unit_test_setup(test_awake_loop_clears_a_later_wake, setup),
        cmocka_unit_test_setup(test_dead_receiver_is_detected, setup),
        cmocka_unit_test_setup(test_ring_off_uses_zeromq, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
