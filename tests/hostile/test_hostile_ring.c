/*
 * test_hostile_ring.c — what a co-located peer can do to the mesh's rings (src/mesh/ring.h): send
 * garbage to an entity's bell, hand it fds that are no ring (a pipe, unsealed memory, a ring for
 * someone else, a wake-up fd that is no eventfd), garble a ring it made or change its header after
 * the hand-over, name blobs that never came or are shorter than named, and plant files (a FIFO)
 * under a bell's name. The receiver must drop and count, never crash or hang, keep no fd it was
 * given, and go on receiving from honest peers.
 */
#include "mesh_harness.h"

#include "mesh/mesh_internal.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *ipc_dir;

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

/* Send one datagram to `entity`'s bell, with `nfds` fds attached. */
static void to_bell(const char *entity, const void *data, size_t len, const int *fds, size_t nfds)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/%s.bell", ipc_dir, entity);
    int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr mh = {
        .msg_name = &addr, .msg_namelen = sizeof(addr), .msg_iov = &iov, .msg_iovlen = 1
    };
    if (nfds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    assert_true(sendmsg(s, &mh, 0) >= 0);
    close(s);
}

/* A hello handing over `fd` as a ring and `wake_fd` as its wake-up eventfd. */
static void hello(const char *to, const char *from, int fd, int wake_fd)
{
    char data[300];
    int n = snprintf(data, sizeof(data), "mstar-ring-hello 2 %s", from);
    int fds[2] = { fd, wake_fd };
    to_bell(to, data, (size_t)n, fds, 2);
}

/* The honest sender's message arrives, and nothing else does. */
static void expect_only(mstar_mesh *rx, int64_t n)
{
    mesh_harness_recv(rx, "conductor", n);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
}

static void test_garbage_at_the_bell(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *rx = m.rx, *tx = m.tx;
    mesh_harness_send(tx, "worker_0", 0); /* the honest ring is open before the fds are counted */
    expect_only(rx, 0);
    int before = open_fds();
    int p[2];
    assert_int_equal(pipe(p), 0);
    mstar__ring other;
    assert_mstar_ok(mstar__ring_create("intruder", "worker_1", MSTAR__RING_MIN_CAP, &other));
    int unsealed = memfd_create("unsealed", MFD_CLOEXEC);
    assert_int_equal(ftruncate(unsealed, MSTAR__RING_HEADER + MSTAR__RING_MIN_CAP), 0);

    int wake = other.wake_fd;
    to_bell("worker_0", "hello?", 6, NULL, 0);                      /* 1: no fd, no hello */
    to_bell("worker_0", "", 0, p, 2);                               /* 2: fds without words */
    hello("worker_0", "intruder", p[0], wake);                      /* 3: a pipe */
    hello("worker_0", "intruder", unsealed, wake);                  /* 4: unsealed memory */
    hello("worker_0", "intruder", other.fd, wake);                  /* 5: for another receiver */
    hello("worker_0", "../../etc", other.fd, wake);                 /* 6: a name that is no name */
    to_bell("worker_0", "mstar-ring-blob 1 zz intruder", 29, p, 1); /* 7: no sequence number */
    mstar_msg none; /* the bell holds 10 datagrams (net.unix.max_dgram_qlen): drain it */
    assert_mstar_status(mstar_mesh_recv(rx, 0, &none), MSTAR_EAGAIN);
    int two[2] = { p[0], p[1] };
    to_bell("worker_0", "mstar-ring-hello 1 intruder", 27, two, 2); /* 8: an older version */
    to_bell("worker_0", "mstar-ring-hello 2 intruder", 27, p, 1);   /* 9: no wake-up fd */
    /* 10: a good ring whose wake-up fd is no eventfd: a pipe would be readable for ever, and
     * another receiver's fd could wake it. The ring is refused, so its sender goes another way. */
    mstar__ring mine;
    assert_mstar_ok(mstar__ring_create("intruder", "worker_0", MSTAR__RING_MIN_CAP, &mine));
    hello("worker_0", "intruder", mine.fd, p[0]);
    close(p[0]);
    close(p[1]);
    close(unsealed);
    mstar__ring_close(&other, false);

    mesh_harness_send(tx, "worker_0", 1);
    expect_only(rx, 1);
    assert_int_equal(mstar_mesh_dropped(rx), 10);
    assert_int_equal(mstar__ring_answer(&mine), MSTAR__RING_REFUSED);
    mstar__ring_close(&mine, false);
    assert_int_equal(rx->inrings.n, 1);
    assert_int_equal(open_fds(), before); /* every fd handed over was closed */
    mesh_pair_close(&m);
}

/* A ring that attaches, then is garbled: its frames, its positions, and its header (which the
 * reader copied once and never reads again). */
static void test_garbled_ring(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *rx = m.rx, *tx = m.tx;
    mstar__ring evil;
    assert_mstar_ok(mstar__ring_create("intruder", "worker_0", MSTAR__RING_MIN_CAP, &evil));
    hello("worker_0", "intruder", evil.fd, evil.wake_fd);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN); /* attaches it */
    assert_int_equal(rx->inrings.n, 1);

    /* The header changed under the reader: ignored, frames still read by the first capacity. */
    evil.hdr->capacity = UINT64_C(1) << 40;
    evil.hdr->magic = 0;
    bool wake;
    assert_mstar_ok(mstar__ring_write(&evil, "\x01\x02", 2, &wake)); /* 1: not a message */
    uint64_t ref[2] = { 99, 100 };
    assert_mstar_ok(mstar__ring_write_blob(&evil, ref[0], ref[1], &wake)); /* 2: no blob */
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 2);
    assert_int_equal(rx->inrings.n, 1);

    /* A blob shorter than its frame says: read with pread, so a dropped frame, not a fault. */
    int blob = memfd_create("blob", MFD_CLOEXEC);
    assert_int_equal(write(blob, "0123456789", 10), 10);
    char data[128];
    int n = snprintf(data, sizeof(data), "mstar-ring-blob 1 %016x intruder", 5);
    to_bell("worker_0", data, (size_t)n, &blob, 1);
    close(blob);
    assert_mstar_ok(mstar__ring_write_blob(&evil, 5, 100, &wake)); /* 3 */
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 3);
    assert_int_equal(rx->inrings.nblobs, 0);

    /* A length past what was published: the ring itself goes. */
    uint32_t words[2] = { 1000, ~1000u };
    memcpy(evil.data + (evil.pos & (evil.cap - 1)), words, sizeof(words));
    atomic_store(&evil.hdr->tail, evil.pos + 16);
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 4);
    assert_int_equal(rx->inrings.n, 0);
    mstar__ring_close(&evil, false);

    /* Positions running backwards or far ahead, in a second ring. */
    assert_mstar_ok(mstar__ring_create("intruder", "worker_0", MSTAR__RING_MIN_CAP, &evil));
    hello("worker_0", "intruder", evil.fd, evil.wake_fd);
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN);
    atomic_store(&evil.hdr->tail, UINT64_MAX - 3);
    assert_mstar_status(mstar_mesh_recv(rx, 50, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 5);
    mstar__ring_close(&evil, false);

    mesh_harness_send(tx, "worker_0", 7);
    expect_only(rx, 7);
    mesh_pair_close(&m);
}

/* A receiver's position that cannot be right makes the sender drop that ring and choose again. */
static void test_hostile_receiver_position(void **state)
{
    (void)state;
    mesh_pair m = mesh_pair_open(ipc_dir);
    mstar_mesh *rx = m.rx, *tx = m.tx;
    mesh_harness_send(tx, "worker_0", 1);
    expect_only(rx, 1);
    atomic_store(&rx->inrings.rings[0].ring.hdr->head, UINT64_C(1) << 60);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mesh_harness_send(tx, "worker_0", 2); /* on a fresh ring */
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("is gone"));
    mstar_msg got;
    assert_mstar_ok(mstar_mesh_recv(rx, 10000, &got));
    assert_int_equal(got.request_id.num, 2);
    mstar_msg_clear(&got);
    mesh_pair_close(&m);
}

/* A FIFO (or any non-socket) under a bell's name: a sender does not use it (ZeroMQ carries the
 * messages), and the entity itself runs without rings, or refuses to start when forced. */
static void test_fifo_under_a_bell_name(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof(path), "%s/worker_0.bell", ipc_dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    mstar_mesh *rx = NULL;
    setenv("MSTAR_MESH_RING", "1", 1);
    assert_mstar_status(mstar_mesh_create("worker_0", &opts, &rx), MSTAR_EEXIST);
    assert_true(strstr(mstar_last_error(), "not a socket") != NULL);
    setenv("MSTAR_MESH_RING", "AUTO", 1);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    rx = mesh_harness_open(ipc_dir, "worker_0");
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("no rings"));
    assert_int_equal(rx->bell_fd, -1);
    mstar_mesh *tx = mesh_harness_open(ipc_dir, "conductor");
    mesh_harness_send(tx, "worker_0", 3);
    uint64_t *v = mstar__strmap_find(&tx->peers, "worker_0", 8);
    assert_non_null(v);
    assert_non_null(((mstar__peer *)(uintptr_t)*v)->sock); /* ZeroMQ */
    expect_only(rx, 3);
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode)); /* left alone */
    unlink(path);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

int main(void)
{
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    unsetenv("MSTAR_RING_BYTES");
    setenv("MSTAR_MESH_RING", "AUTO", 1);
    ipc_dir = mstar_test_tmpdir("hostile-ring");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_garbage_at_the_bell),
        cmocka_unit_test(test_garbled_ring),
        cmocka_unit_test(test_hostile_receiver_position),
        cmocka_unit_test(test_fifo_under_a_bell_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
