/*
 * test_mesh_messages.c — typed messages between two meshes in one process (ipc and tcp), the
 * garbage a peer can send (random bytes, truncated messages, empty and multi-frame messages),
 * receive timeouts, wake-ups ending a wait, the pollable inbox fd, and lazy connection to a peer
 * that binds later.
 */
#include "mstar_test.h"
#include "wire_samples.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

static const char *ipc_dir;

static int setup(void **state)
{
    (void)state;
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    return 0;
}

static mstar_mesh_options ipc_opts(void)
{
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = ipc_dir };
    return opts;
}

static mstar_mesh *create(const mstar_mesh_options *opts, const char *entity)
{
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create(entity, opts, &mesh));
    return mesh;
}

/* A mesh for `entity` over ipc in the test's directory. */
static mstar_mesh *ipc_mesh(const char *entity)
{
    mstar_mesh_options opts = ipc_opts();
    return create(&opts, entity);
}

/* Receive one message within 10 s (plenty on a loaded CI machine), asserting success. */
static void recv_one(mstar_mesh *mesh, mstar_msg *out)
{
    assert_mstar_ok(mstar_mesh_recv(mesh, 10000, out));
}

/* INPUT_SIGNALS carrying one edge with one float32 [2, 3] descriptor numbered `n`. */
static void build_signals(mstar_msg *msg, int64_t n)
{
    mstar_msg_init(msg, MSTAR_MSG_INPUT_SIGNALS);
    msg->request_id = mstar_rid_from_int(n);
    snprintf(msg->graph_walk, sizeof(msg->graph_walk), "walk_%lld", (long long)n);
    mstar_tensor_info info;
    mstar_test_small_info(mstar_id_make(100, (uint64_t)n + 1), &info);
    mstar_edge edge;
    mstar_edge_init(&edge);
    snprintf(edge.next_node, sizeof(edge.next_node), "decoder");
    snprintf(edge.name, sizeof(edge.name), "hidden");
    assert_mstar_ok(mstar_edge_add_tensor(&edge, &info));
    assert_mstar_ok(mstar_msg_add_edge(msg, &edge));
    mstar_edge_clear(&edge);
    assert_mstar_ok(mstar_msg_add_kv(msg, "seq", n));
}

static void check_signals(const mstar_msg *msg, const char *from, int64_t n)
{
    assert_int_equal(msg->type, MSTAR_MSG_INPUT_SIGNALS);
    assert_string_equal(msg->from, from);
    assert_false(msg->request_id.is_str);
    assert_int_equal(msg->request_id.num, n);
    char walk[64];
    snprintf(walk, sizeof(walk), "walk_%lld", (long long)n);
    assert_string_equal(msg->graph_walk, walk);
    assert_string_equal(msg->text, "default");
    assert_int_equal(msg->nedges, 1);
    assert_string_equal(msg->edges[0].next_node, "decoder");
    assert_string_equal(msg->edges[0].name, "hidden");
    assert_int_equal(msg->edges[0].ntensors, 1);
    const mstar_tensor_info *info = &msg->edges[0].tensor_info[0];
    assert_int_equal(info->uuid, mstar_id_make(100, (uint64_t)n + 1));
    assert_int_equal(info->dtype, MSTAR_DTYPE_FLOAT32);
    assert_int_equal(info->ndim, 2);
    assert_int_equal(info->dims[1], 3);
    assert_int_equal(info->nbytes, 24);
    assert_string_equal(info->source_entity, "worker_0");
    assert_int_equal(mstar_msg_get_kv(msg, "seq", -1), n);
}

/* Returns false, having done nothing, when a TCP port of the pair is in use. */
static bool exchange_typed(const mstar_mesh_options *opts)
{
    mstar_mesh *a = NULL, *b = NULL;
    mstar_status st = mstar_mesh_create("conductor", opts, &a);
    if (st == MSTAR_OK)
        st = mstar_mesh_create("worker_0", opts, &b);
    if (st == MSTAR_EEXIST && opts->transport == MSTAR_MESH_TCP) {
        mstar_mesh_destroy(a);
        return false;
    }
    assert_mstar_ok(st);
    const int count = 200;
    for (int64_t i = 0; i < count; i++) {
        mstar_msg msg;
        build_signals(&msg, i);
        assert_mstar_ok(mstar_mesh_send(a, "worker_0", &msg));
        assert_string_equal(msg.from, "conductor"); /* filled by the send */
        mstar_msg_clear(&msg);
    }
    mstar_msg reply;
    mstar_msg_init(&reply, MSTAR_MSG_TENSOR_RECEIVED);
    reply.request_id = mstar_rid_from_int(7);
    assert_mstar_ok(mstar_msg_add_count(&reply, mstar_id_make(100, 1), 2));
    assert_mstar_ok(mstar_mesh_send(b, "conductor", &reply));
    mstar_msg_clear(&reply);

    for (int64_t i = 0; i < count; i++) {
        mstar_msg got;
        recv_one(b, &got);
        check_signals(&got, "conductor", i); /* in order, none lost */
        mstar_msg_clear(&got);
    }
    mstar_msg got;
    recv_one(a, &got);
    assert_int_equal(got.type, MSTAR_MSG_TENSOR_RECEIVED);
    assert_string_equal(got.from, "worker_0");
    assert_int_equal(got.request_id.num, 7);
    assert_int_equal(got.ncounts, 1);
    assert_int_equal(got.counts[0].uuid, mstar_id_make(100, 1));
    assert_int_equal(got.counts[0].count, 2);
    mstar_msg_clear(&got);
    /* Over tcp no ring: the ZeroMQ inbox's own EAGAIN says it, with the text made once. */
    assert_mstar_status(mstar_mesh_recv(b, 0, &got), MSTAR_EAGAIN);
    assert_string_equal(mstar_last_error(), "mesh worker_0: no message");
    assert_int_equal(mstar_mesh_dropped(a), 0);
    assert_int_equal(mstar_mesh_dropped(b), 0);
    mstar_mesh_destroy(a);
    mstar_mesh_destroy(b);
    return true;
}

static void test_typed_exchange_ipc(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    assert_true(exchange_typed(&opts));
}

static void test_typed_exchange_tcp(void **state)
{
    (void)state;
    /* A base port from the pid, moved on if a parallel run holds one of the two ports. */
    for (int attempt = 0; attempt < 20; attempt++) {
        mstar_mesh_options opts = { .transport = MSTAR_MESH_TCP,
                                    .tcp_base_port = 30000 + (getpid() + attempt * 211) % 30000 };
        if (exchange_typed(&opts))
            return;
    }
    fail_msg("no free TCP base port found");
}

static void test_garbage_is_logged_skipped_and_counted(void **state)
{
    (void)state;
    mstar_mesh *rx = ipc_mesh("worker_1");
    mstar_mesh *tx = ipc_mesh("worker_2");

    mstar_msg msg;
    build_signals(&msg, 1);
    snprintf(msg.from, sizeof(msg.from), "worker_2");
    void *valid;
    size_t valid_len;
    assert_mstar_ok(mstar_msg_encode(&msg, &valid, &valid_len));

    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    static const unsigned char junk[] = { 0xc1, 0xff, 0x00, 0x13, 0x37 };
    assert_mstar_ok(mstar_mesh_send_raw(tx, "worker_1", junk, sizeof(junk)));
    assert_mstar_ok(mstar_mesh_send_raw(tx, "worker_1", valid, valid_len / 2)); /* truncated */
    assert_mstar_ok(mstar_mesh_send_raw(tx, "worker_1", NULL, 0));              /* empty */
    /* A map32 header claiming 2^32-1 entries: must be rejected without allocating them. */
    static const unsigned char huge_map[] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    assert_mstar_ok(mstar_mesh_send_raw(tx, "worker_1", huge_map, sizeof(huge_map)));
    assert_mstar_ok(mstar_mesh_send(tx, "worker_1", &msg));

    mstar_msg got;
    recv_one(rx, &got); /* the four bad frames are skipped in one call */
    check_signals(&got, "worker_2", 1);
    mstar_msg_clear(&got);
    assert_int_equal(mstar_mesh_dropped(rx), 4);
    assert_int_equal(mstar_test_log_count("dropped a frame"), 4);
    assert_true(mstar_test_log_contains("worker_1"));
    mstar_test_log_capture_end();

    /* Garbage as the last frame: the receive drops it and reports nothing there. */
    assert_mstar_ok(mstar_mesh_send_raw(tx, "worker_1", junk, sizeof(junk)));
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    for (int i = 0; i < 1000 && mstar_mesh_dropped(rx) < 5; i++)
        assert_mstar_status(mstar_mesh_recv(rx, 10, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 5);
    mstar_test_log_capture_end();

    free(valid);
    mstar_msg_clear(&msg);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

static void test_multi_frame_messages_are_dropped(void **state)
{
    (void)state;
    mstar_mesh_options opts = ipc_opts();
    mstar_mesh *rx = create(&opts, "worker_4");
    char endpoint[256];
    assert_mstar_ok(mstar_mesh_endpoint(&opts, "worker_4", endpoint, sizeof(endpoint)));

    /* A peer that is not a mesh: a raw PUSH sending a three-part message, then a valid one. */
    void *ctx = zmq_ctx_new();
    void *push = zmq_socket(ctx, ZMQ_PUSH);
    int linger = 0;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof(linger));
    assert_int_equal(zmq_connect(push, endpoint), 0);
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_READS_DONE);
    msg.request_id = mstar_rid_from_int(42);
    snprintf(msg.from, sizeof(msg.from), "raw_peer");
    void *data;
    size_t len;
    assert_mstar_ok(mstar_msg_encode(&msg, &data, &len));
    assert_true(zmq_send(push, data, len, ZMQ_SNDMORE) >= 0); /* valid bytes, but multi-part */
    assert_true(zmq_send(push, "b", 1, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(push, data, len, 0) >= 0);
    assert_true(zmq_send(push, data, len, 0) >= 0);

    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    mstar_msg got;
    recv_one(rx, &got);
    assert_int_equal(got.type, MSTAR_MSG_READS_DONE);
    assert_string_equal(got.from, "raw_peer");
    assert_int_equal(got.request_id.num, 42);
    mstar_msg_clear(&got);
    assert_int_equal(mstar_mesh_dropped(rx), 3);
    assert_true(mstar_test_log_contains("multi-frame"));
    mstar_test_log_capture_end();

    free(data);
    zmq_close(push);
    zmq_ctx_term(ctx);
    mstar_mesh_destroy(rx);
}

static void test_oversized_frame_is_refused_and_the_receiver_goes_on(void **state)
{
    (void)state;
    mstar_mesh *rx = ipc_mesh("worker_12");
    mstar_mesh *tx = ipc_mesh("worker_13");
    /* One byte over the codec's limit: ZeroMQ refuses it before allocating, and drops that
     * connection; the sender reconnects and what it sends next arrives. Over a ring (the two
     * are on one host) the sender refuses it outright. */
    size_t big_len = (size_t)MSTAR_WIRE_MAX_MESSAGE + 1;
    char *big = calloc(1, big_len);
    assert_non_null(big);
    mstar_status sent = mstar_mesh_send_raw(tx, "worker_12", big, big_len);
    assert_true(sent == MSTAR_OK || sent == MSTAR_ERANGE);
    free(big);
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_READS_DONE);
    msg.request_id = mstar_rid_from_int(9);
    mstar_msg got;
    mstar_status st = MSTAR_EAGAIN;
    for (int i = 0; i < 200 && st == MSTAR_EAGAIN; i++) {
        assert_mstar_ok(mstar_mesh_send(tx, "worker_12", &msg));
        st = mstar_mesh_recv(rx, 50, &got);
    }
    assert_mstar_ok(st);
    assert_int_equal(got.type, MSTAR_MSG_READS_DONE);
    assert_string_equal(got.from, "worker_13");
    mstar_msg_clear(&got);
    assert_int_equal(mstar_mesh_dropped(rx), 0); /* never reached the decoder */
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

static void test_recv_times_out_with_eagain(void **state)
{
    (void)state;
    mstar_mesh *mesh = ipc_mesh("worker_5");
    mstar_msg got;
    mstar_msg_init(&got, MSTAR_MSG_INVALID);
    assert_mstar_status(mstar_mesh_recv(mesh, 0, &got), MSTAR_EAGAIN);
    assert_mstar_status(mstar_mesh_recv(mesh, 30, &got), MSTAR_EAGAIN);
    assert_non_null(strstr(mstar_last_error(), "30 ms"));
    assert_int_equal(got.type, MSTAR_MSG_INVALID); /* untouched */
    assert_mstar_status(mstar_mesh_recv(NULL, 0, &got), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_recv(mesh, 0, NULL), MSTAR_EINVAL);
    mstar_mesh_destroy(mesh);
}

static void *wake_later(void *arg)
{
    usleep(50 * 1000);
    return mstar_mesh_wake(arg) == MSTAR_OK ? NULL : (void *)1;
}

static void test_wake_ends_an_endless_wait(void **state)
{
    (void)state;
    mstar_mesh *mesh = ipc_mesh("worker_6");
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, wake_later, mesh), 0);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(mesh, -1, &got), MSTAR_EAGAIN);
    assert_non_null(strstr(mstar_last_error(), "woken"));
    void *ret;
    assert_int_equal(pthread_join(thread, &ret), 0);
    assert_null(ret);
    /* The wake stays pending until drained: a second wait returns at once too. */
    assert_mstar_status(mstar_mesh_recv(mesh, -1, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_wake_drain(mesh), 1);
    assert_mstar_status(mstar_mesh_recv(mesh, 10, &got), MSTAR_EAGAIN);
    assert_non_null(strstr(mstar_last_error(), "10 ms"));

    /* A message that is already there wins over a pending wake. */
    mstar_mesh *tx = ipc_mesh("worker_7");
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_DRAIN_REQUEST);
    msg.request_id = mstar_rid_from_int(3);
    assert_mstar_ok(mstar_mesh_send(tx, "worker_6", &msg));
    recv_one(mesh, &got);
    mstar_msg_clear(&got);
    assert_mstar_ok(mstar_mesh_send(tx, "worker_6", &msg));
    usleep(100 * 1000);
    assert_mstar_ok(mstar_mesh_wake(mesh));
    assert_mstar_ok(mstar_mesh_recv(mesh, -1, &got));
    assert_int_equal(got.type, MSTAR_MSG_DRAIN_REQUEST);
    mstar_msg_clear(&got);
    assert_int_equal(mstar_mesh_wake_drain(mesh), 1);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(mesh);
}

static void test_inbox_fd_signals_arrivals(void **state)
{
    (void)state;
    mstar_mesh *rx = ipc_mesh("worker_8");
    mstar_mesh *tx = ipc_mesh("worker_9");
    mstar_msg got;
    /* The loop's pattern: drain until EAGAIN, then poll the fd. */
    assert_mstar_status(mstar_mesh_recv(rx, 0, &got), MSTAR_EAGAIN);
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_SHUTDOWN);
    snprintf(msg.text, sizeof(msg.text), "done");
    assert_mstar_ok(mstar_mesh_send(tx, "worker_8", &msg));
    struct pollfd p = { .fd = mstar_mesh_inbox_fd(rx), .events = POLLIN };
    mstar_status st = MSTAR_EAGAIN;
    for (int i = 0; i < 100 && st == MSTAR_EAGAIN; i++) {
        assert_int_equal(poll(&p, 1, 10000), 1); /* readable, or the test fails */
        st = mstar_mesh_recv(rx, 0, &got);
    }
    assert_mstar_ok(st);
    assert_int_equal(got.type, MSTAR_MSG_SHUTDOWN);
    assert_string_equal(got.text, "done");
    mstar_msg_clear(&got);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

static void test_peer_that_binds_later_gets_the_message(void **state)
{
    (void)state;
    mstar_mesh *tx = ipc_mesh("conductor");
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_ABORT_REQUEST);
    msg.request_id = mstar_rid_from_int(11);
    snprintf(msg.text, sizeof(msg.text), "timeout");
    assert_mstar_ok(mstar_mesh_send(tx, "api_server", &msg)); /* queued: nobody there yet */
    mstar_mesh *rx = ipc_mesh("api_server");
    mstar_msg got;
    recv_one(rx, &got);
    assert_int_equal(got.type, MSTAR_MSG_ABORT_REQUEST);
    assert_string_equal(got.text, "timeout");
    mstar_msg_clear(&got);
    mstar_mesh_destroy(rx);
    mstar_mesh_destroy(tx);
}

static void test_invalid_message_is_not_sent(void **state)
{
    (void)state;
    mstar_mesh *rx = ipc_mesh("worker_10");
    mstar_mesh *tx = ipc_mesh("worker_11");
    mstar_msg msg;
    build_signals(&msg, 5);
    msg.edges[0].tensor_info[0].nbytes = 25; /* not 2 × 3 × 4 */
    assert_mstar_status(mstar_mesh_send(tx, "worker_10", &msg), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "worker_10"));
    assert_non_null(strstr(mstar_last_error(), "nbytes"));
    mstar_msg_clear(&msg);
    mstar_msg_init(&msg, MSTAR_MSG_INVALID);
    assert_mstar_status(mstar_mesh_send(tx, "worker_10", &msg), MSTAR_EINVAL);
    assert_mstar_status(mstar_mesh_send(tx, "worker_10", NULL), MSTAR_EINVAL);
    mstar_msg got;
    assert_mstar_status(mstar_mesh_recv(rx, 100, &got), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(rx), 0);
    mstar_mesh_destroy(tx);
    mstar_mesh_destroy(rx);
}

int main(void)
{
    ipc_dir = mstar_test_tmpdir("mesh-messages");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_typed_exchange_ipc, setup),
        cmocka_unit_test_setup(test_typed_exchange_tcp, setup),
        cmocka_unit_test_setup(test_garbage_is_logged_skipped_and_counted, setup),
        cmocka_unit_test_setup(test_multi_frame_messages_are_dropped, setup),
        cmocka_unit_test_setup(test_oversized_frame_is_refused_and_the_receiver_goes_on, setup),
        cmocka_unit_test_setup(test_recv_times_out_with_eagain, setup),
        cmocka_unit_test_setup(test_wake_ends_an_endless_wait, setup),
        cmocka_unit_test_setup(test_inbox_fd_signals_arrivals, setup),
        cmocka_unit_test_setup(test_peer_that_binds_later_gets_the_message, setup),
        cmocka_unit_test_setup(test_invalid_message_is_not_sent, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
