/*
 * test_comm_ucx.c — the communication manager over UCX on TCP (kind ucx-tcp), producer and
 * consumers in one process, each manager with its own UCX engine (so every byte crosses a
 * loopback socket): bytes and ACKs gated on the read's completion, the producer's memory
 * registered until the last ACK and no longer, a read in flight that cleanup must neither ACK
 * nor free (T-2; has_inflight_reads, I-7), a failed read reported once without poisoning later
 * polls (T-11), a strided output read contiguous (T-12), descriptors from the wire that are
 * refused, the remote key stamped at registration and by refresh_shm_placement so the get
 * protocol reads through the manager (T-4 over UCX), tensors in a backend's memory staged through
 * pinned host memory both ways, the protocol names, and a read landing in the caller's buffer
 * (mstar_comm_start_read_into).
 */
#include "comm_harness.h"
#include "ucx_test.h"

#include "tensors/comm_internal.h"
#include "tensors/ucx/ucx_transport.h"

#include <poll.h>
#include <unistd.h>

typedef comm_trio world;

static int setup(void **state)
{
    *state = comm_trio_new(MSTAR_TRANSPORT_UCX_TCP, NULL);
    return 0;
}

/* Wait for every completion of a read, then release the list. */
static void wait_list(mstar_completion_list *l, mstar_status want)
{
    for (uint32_t i = 0; i < l->n; i++)
        assert_int_equal(mstar_completion_wait(l->items[i], -1), want);
    mstar_completion_list_clear(l);
}

/* `c` reads edge `e` of `rid` (one tensor, `uuid`), waits for it to land, collects it and finds
 * the bytes of `want`. */
static void read_checked(mstar_comm *c, const mstar_rid *rid, const mstar_edge *e,
                         mstar_tensor_id uuid, const mstar_tensor *want)
{
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(c, rid, e, 1, &done));
    wait_list(&done, MSTAR_OK);
    mstar_ready_set set;
    expect_ready(c, &set, 1);
    check_bytes(c, uuid, want);
    mstar_ready_set_clear(&set);
}

/* Every dtype and shape, zero-size and 0-dim included, and a large tensor: the read is
 * asynchronous (a completion, the event fd), no ACK before it landed, the ACK frees the
 * producer's tensor and unregisters its memory. */
static void test_roundtrip(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(1);
    int64_t s_a[3] = { 2, 3, 5 }, s_b[1] = { 0 }, s_d[2] = { 4, 0 }, s_big[2] = { 1024, 1024 };
    mstar_tensor ts[6] = {
        make_tensor(MSTAR_DTYPE_FLOAT32, 3, s_a, 1),  make_tensor(MSTAR_DTYPE_BOOL, 1, s_b, 2),
        make_tensor(MSTAR_DTYPE_FLOAT64, 0, NULL, 3), make_tensor(MSTAR_DTYPE_INT8, 2, s_d, 4),
        make_tensor(MSTAR_DTYPE_BFLOAT16, 3, s_a, 5), make_tensor(MSTAR_DTYPE_FLOAT32, 2, s_big, 6),
    };
    mstar_tensor_info infos[6];
    produce(w->p, &rid, ts, 6, 1, infos);
    assert_int_equal(regions_of(w->p), 4); /* the two zero-byte tensors need none */
    assert_string_equal(infos[0].source_session_id, mstar_comm_session_id(w->p));
    mstar_edge e = edge_of("sig", "node", infos, 6);
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, &done));
    assert_int_equal(done.n, 1);
    assert_true(mstar_comm_has_inflight_reads(w->c, &rid) ||
                mstar_completion_poll(done.items[0]) == MSTAR_OK);
    struct pollfd pfd = { mstar_comm_event_fd(w->c), POLLIN, 0 };
    assert_int_equal(poll(&pfd, 1, -1), 1); /* the finish wakes the loop */
    wait_list(&done, MSTAR_OK);
    mstar_comm_event_drain(w->c);
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_int_equal(bus_count(&w->b, "worker_0"), 0); /* no ACK before collection */
    mstar_ready_set set;
    expect_ready(w->c, &set, 1);
    for (int i = 0; i < 6; i++) {
        check_bytes(w->c, infos[i].uuid, &ts[i]);
        assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[i].uuid), 1);
    }
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(regions_of(w->p), 0); /* collected: unregistered */
    for (int i = 0; i < 6; i++)
        assert_mstar_ok(mstar_comm_dereference(w->c, infos[i].uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_ready_set_clear(&set);
    mstar_edge_clear(&e);
    for (int i = 0; i < 6; i++)
        free(ts[i].data);
}

/* A read into the caller's buffer over UCX: the network read lands at the caller's pointer
 * (which the node's tensor shows), the other descriptor as before; the manager never frees it. */
static void test_read_into_caller_buffer(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(21);
    mstar_tensor ts[2];
    mstar_tensor_info infos[2];
    mstar_edge e = produce_two_vectors(w->p, &rid, MSTAR_DTYPE_FLOAT32, 5000, MSTAR_DTYPE_INT8, 77,
                                       21, ts, infos);
    _Alignas(64) uint8_t buf[20000]; /* on the stack: a manager freeing it would abort */
    mstar_read_target tg = {
        .uuid = infos[0].uuid, .data = buf, .capacity = sizeof(buf), .stream = NULL
    };
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_into(w->c, &rid, &e, 1, &tg, 1, &done));
    wait_list(&done, MSTAR_OK);
    mstar_ready_set set;
    expect_ready(w->c, &set, 1);
    mstar_ready_set_clear(&set);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, infos[0].uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), buf);
    assert_memory_equal(buf, ts[0].data, sizeof(buf));
    check_bytes(w->c, infos[1].uuid, &ts[1]);
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    for (int i = 0; i < 2; i++)
        assert_mstar_ok(mstar_comm_dereference(w->c, infos[i].uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_memory_equal(buf, ts[0].data, sizeof(buf));
    mstar_edge_clear(&e);
    for (int i = 0; i < 2; i++)
        free(ts[i].data);
}

/* T-12 over UCX (the reference's Mooncake case: the consumer reads nbytes contiguous bytes
 * from a producer that kept a strided tensor): a transposed output is stored contiguous, so the
 * bytes read are its elements in row-major order. */
static void test_non_contiguous_output(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(9);
    int64_t shape[2] = { 4, 6 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 11);
    mstar_tensor view = t; /* the transpose of a [6, 4] buffer */
    view.strides[0] = 1;
    view.strides[1] = 4;
    mstar_tensor_info info;
    produce(w->p, &rid, &view, 1, 1, &info);
    mstar_edge e = edge_of("sig", "node", &info, 1);
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, &done));
    wait_list(&done, MSTAR_OK);
    mstar_ready_set set;
    expect_ready(w->c, &set, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, info.uuid, &got));
    assert_true(mstar_tensor_is_contiguous(&got));
    const float *dst = mstar_tensor_ptr(&got), *src = t.data;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            assert_true(dst[i * 6 + j] == src[j * 4 + i]);
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(regions_of(w->p), 0);
    mstar_edge_clear(&e);
    free(t.data);
}

/* Two consumers read the same tensors; the producer keeps them registered until both ACKed. */
static void test_two_consumers(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(2);
    int64_t shape[1] = { 100000 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_INT32, 1, shape, 9);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 2, &info);
    mstar_edge e = edge_of("sig", "node", &info, 1);
    mstar_comm *readers[2] = { w->c, w->d };
    for (int k = 0; k < 2; k++) {
        read_checked(readers[k], &rid, &e, info.uuid, &t);
        assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
        assert_int_equal(regions_of(w->p), k == 0 ? 1 : 0);
        assert_mstar_ok(mstar_comm_dereference(readers[k], info.uuid, 1));
    }
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    mstar_edge_clear(&e);
    free(t.data);
}

/* A read that cannot finish (its session is a socket that never answers): in flight, cleanup
 * neither ACKs nor frees it (T-2) and force cleanup is refused; when the socket goes away the
 * edge fails once, with the session in the message, and a later read works (T-11). */
static void test_read_in_flight_then_failed(void **state)
{
    world *w = *state;
    char hole[MSTAR_NAME_MAX + 1];
    int fd = ucx_test_blackhole(hole);
    mstar_rid rid = mstar_rid_from_int(3);
    int64_t shape[1] = { 4096 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_UINT8, 1, shape, 4);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 1, &info);
    mstar_tensor_info stalled = info;
    snprintf(stalled.source_session_id, sizeof(stalled.source_session_id), "%s", hole);
    mstar_edge e = edge_of("sig", "node", &stalled, 1);
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, &done));
    assert_int_equal(done.n, 1);
    assert_true(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid));
    assert_int_equal(bus_count(&w->b, "worker_0"), 0); /* not ACKed while in flight */
    assert_int_equal(mstar_comm_num_tensors(w->c), 1); /* and not freed */
    assert_mstar_status(mstar_comm_force_cleanup_request(w->c, &rid), MSTAR_ESTATE);
    close(fd);
    wait_list(&done, MSTAR_EREMOTE);
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
    assert_int_equal(set.nedges, 0);
    assert_int_equal(set.nfailed, 1);
    assert_int_equal(set.failed[0].status, MSTAR_EREMOTE);
    assert_non_null(strstr(set.failed[0].message, hole));
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set)); /* reported once */
    assert_int_equal(set.nfailed, 0);
    mstar_ready_set_clear(&set);
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));

    /* The real descriptor still reads (a new request on the same consumer). */
    mstar_rid rid2 = mstar_rid_from_int(4);
    mstar_edge e2 = edge_of("sig", "node", &info, 1);
    read_checked(w->c, &rid2, &e2, info.uuid, &t);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid));
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid2));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(regions_of(w->p), 0);
    mstar_edge_clear(&e);
    mstar_edge_clear(&e2);
    free(t.data);
}

/* What another process could send: refused before anything is read, nothing kept; and an
 * address the producer never registered is refused by the producer, failing only that edge. */
static void test_bad_descriptors(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(5);
    int64_t shape[1] = { 64 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_UINT8, 1, shape, 5);
    mstar_tensor_info info;
    produce(w->p, &rid, &t, 1, 1, &info);
    mstar_tensor_info bad[4];
    for (int i = 0; i < 4; i++)
        bad[i] = info;
    snprintf(bad[0].source_session_id, sizeof(bad[0].source_session_id), "myhost"); /* shm's */
    snprintf(bad[1].shm_segment, sizeof(bad[1].shm_segment), "mstar_arena_1_2_3");
    bad[2].remote_key_len = 12;
    memcpy(bad[2].remote_key, "not-a-key!!!", 12);
    bad[3].address = UINT64_MAX - 10;
    for (int i = 0; i < 4; i++) {
        mstar_edge e = edge_of("sig", "node", &bad[i], 1);
        mstar_completion_list done;
        assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, &done), MSTAR_EPROTO);
        assert_int_equal(mstar_comm_num_tensors(w->c), 0);
        mstar_edge_clear(&e);
    }
    /* A well-formed descriptor whose range the producer never registered: with the producer's
     * key the consumer refuses the read itself (outside the key's region); without a key (as
     * the reference's descriptors come) the producer refuses it. Each fails only its edge. */
    mstar_tensor_info stray = info;
    uint8_t *unreg = malloc(64);
    stray.address = (uint64_t)(uintptr_t)unreg;
    for (int keyed = 1; keyed >= 0; keyed--) {
        if (!keyed)
            stray.remote_key_len = 0;
        mstar_edge e = edge_of("sig", "node", &stray, 1);
        mstar_completion_list done;
        mstar_test_log_capture_begin(MSTAR_LOG_WARN);
        assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, &done));
        wait_list(&done, keyed ? MSTAR_EPROTO : MSTAR_EREMOTE);
        mstar_test_log_capture_end();
        assert_int_equal(mstar_test_log_contains("refused a read"), !keyed);
        mstar_ready_set set;
        assert_mstar_ok(mstar_comm_get_ready_tensors(w->c, &set));
        assert_int_equal(set.nfailed, 1);
        assert_non_null(strstr(set.failed[0].message, keyed ? "outside the key's region"
                                                            : "no registered region holds the "
                                                              "range"));
        mstar_ready_set_clear(&set);
        assert_int_equal(mstar_comm_num_tensors(w->c), 0);
        mstar_edge_clear(&e);
    }
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_int_equal(regions_of(w->p), 0);
    free(unreg);
    free(t.data);
}

/* A world whose consumers read with the get protocol: ucp_get_nbx with the descriptor's remote
 * key (over TCP UCX emulates it; over RDMA the NIC reads). */
static int setup_get(void **state)
{
    setenv("MSTAR_UCX_READ_PROTOCOL", "get", 1);
    int rc = setup(state);
    unsetenv("MSTAR_UCX_READ_PROTOCOL");
    return rc;
}

/* Registration stamps the key onto the descriptors it is given, and the get protocol reads
 * through the manager with it; a sharded clone made before staging has none (T-4 over UCX:
 * get cannot read it) until refresh_shm_placement stamps session, address and key — only those. */
static void test_get_protocol_and_clones(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(6);
    int64_t s_big[1] = { 1 << 18 };
    mstar_tensor big = make_tensor(MSTAR_DTYPE_FLOAT32, 1, s_big, 8);
    mstar_tensor_info info;
    produce(w->p, &rid, &big, 1, 1, &info);
    assert_true(info.remote_key_len > 0);
    mstar_tensor held;
    assert_mstar_ok(mstar_comm_get_tensor(w->p, info.uuid, &held));
    assert_int_equal(info.address, (uint64_t)(uintptr_t)mstar_tensor_ptr(&held));
    mstar_edge e = edge_of("sig", "node", &info, 1);
    read_checked(w->c, &rid, &e, info.uuid, &big);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(regions_of(w->p), 0);
    mstar_edge_clear(&e);

    /* The sharded clone. */
    mstar_tensor t;
    mstar_fanout fo;
    store_sharded_fanout(w->p, &rid, &t, &info, &e, &fo);
    uint32_t count = 1;
    assert_mstar_ok(mstar_comm_register_for_send_uuids(w->p, &rid, 1, &count, &info.uuid));
    assert_int_equal(fo.edges[1].tensor_info[0].remote_key_len, 0);
    mstar_completion_list done;
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->d, &rid, &fo.edges[1], 1, &done));
    wait_list(&done, MSTAR_EPROTO);
    assert_mstar_ok(mstar_comm_get_ready_tensors(w->d, &set));
    assert_int_equal(set.nfailed, 1);
    assert_non_null(strstr(set.failed[0].message, "remote_key is missing"));
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, fo.edges, fo.n));
    assert_true(fo.edges[1].tensor_info[0].remote_key_len > 0);
    assert_int_equal(fo.edges[1].tensor_info[0].dims[0], 4); /* the slice is untouched */
    assert_int_equal(fo.edges[1].tensor_info[0].offset, 4 * 4 * 4);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->d, &rid, &fo.edges[1], 1, &done));
    wait_list(&done, MSTAR_OK);
    expect_ready(w->d, &set, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->d, info.uuid, &got));
    assert_int_equal(got.shape[0], 4);
    assert_memory_equal(mstar_tensor_ptr(&got), (char *)t.data + 64, 64);
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->d, &rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_int_equal(regions_of(w->p), 0);
    bus_clear(&w->b);
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
    free(t.data);
    free(big.data);
}

/* With a backend, tensors in its memory are staged through a pinned host copy (registered in
 * their place: the descriptor's address is the copy's) and reads into its memory land in a
 * pinned buffer first, copied up by the reader's thread before the handle completes. The host
 * backend runs the same path as CUDA; every pinned byte is given back, on a failed read too,
 * and the buffers are the managers' pooled ones, reused by the next handoff. */
static void test_staged_through_pinned_memory(void **state)
{
    (void)state;
    mstar_backend *bp, *bc;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &bp));
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &bc));
    world w;
    memset(&w, 0, sizeof(w));
    w.sp = (sender){ &w.b, "worker_0" };
    w.sc = (sender){ &w.b, "worker_1" };
    w.p = make_comm_with("worker_0", MSTAR_TRANSPORT_UCX_TCP, NULL, &w.sp, bp);
    w.c = make_comm_with("worker_1", MSTAR_TRANSPORT_UCX_TCP, NULL, &w.sc, bc);
    mstar_rid rid = mstar_rid_from_int(7);
    int64_t s_a[2] = { 64, 1024 }, s_e[1] = { 0 }, s_b[1] = { 3 << 20 };
    mstar_tensor ts[3] = { make_tensor(MSTAR_DTYPE_BFLOAT16, 2, s_a, 1),
                           make_tensor(MSTAR_DTYPE_FLOAT32, 1, s_e, 2),
                           make_tensor(MSTAR_DTYPE_UINT8, 1, s_b, 3) };
    mstar_tensor_info infos[3];
    produce(w.p, &rid, ts, 3, 1, infos);
    uint64_t staged = 64 * 1024 * 2 + (3 << 20);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.p->transport), staged);
    assert_int_equal(regions_of(w.p), 2);
    mstar_tensor held;
    assert_mstar_ok(mstar_comm_get_tensor(w.p, infos[0].uuid, &held));
    assert_true(infos[0].address != (uint64_t)(uintptr_t)mstar_tensor_ptr(&held));
    mstar_edge e = edge_of("sig", "node", infos, 3);
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(w.c, &rid, &e, 1, &done));
    wait_list(&done, MSTAR_OK);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.c->transport), 0);
    mstar_ready_set set;
    expect_ready(w.c, &set, 1);
    for (int i = 0; i < 3; i++) {
        mstar_tensor got;
        assert_mstar_ok(mstar_comm_get_tensor(w.c, infos[i].uuid, &got));
        assert_int_equal(got.device.type, MSTAR_DEVICE_CPU);
        check_bytes(w.c, infos[i].uuid, &ts[i]);
        assert_mstar_ok(mstar_comm_dereference(w.c, infos[i].uuid, 1));
    }
    mstar_ready_set_clear(&set);
    assert_int_equal(bus_deliver(&w.b, "worker_0", w.p), 1);
    assert_int_equal(mstar_comm_num_tensors(w.p), 0);
    assert_int_equal(regions_of(w.p), 0);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.p->transport), 0);
    mstar_edge_clear(&e);

    /* The same handoff again: the staged copies and the read's buffer come from the managers'
     * pinned pools, so nothing new is allocated on either side. */
    mstar__pinned_pool_stats sp, sc;
    mstar__pinned_pool_stats_get(w.p->env.pinned, &sp);
    mstar__pinned_pool_stats_get(w.c->env.pinned, &sc);
    assert_int_equal(sp.allocations, 2);
    assert_int_equal(sc.allocations, 1);
    mstar_rid again = mstar_rid_from_int(9);
    produce(w.p, &again, ts, 3, 1, infos);
    e = edge_of("sig", "node", infos, 3);
    assert_mstar_ok(mstar_comm_start_read_tensors(w.c, &again, &e, 1, &done));
    wait_list(&done, MSTAR_OK);
    expect_ready(w.c, &set, 1);
    for (int i = 0; i < 3; i++) {
        check_bytes(w.c, infos[i].uuid, &ts[i]);
        assert_mstar_ok(mstar_comm_dereference(w.c, infos[i].uuid, 1));
    }
    mstar_ready_set_clear(&set);
    assert_int_equal(bus_deliver(&w.b, "worker_0", w.p), 1);
    mstar__pinned_pool_stats_get(w.p->env.pinned, &sp);
    mstar__pinned_pool_stats_get(w.c->env.pinned, &sc);
    assert_int_equal(sp.allocations, 2);
    assert_int_equal(sp.reuses, 2);
    assert_int_equal(sc.allocations, 1);
    assert_int_equal(sc.reuses, 1);
    assert_int_equal(sp.bytes_out + sc.bytes_out, 0);
    mstar_edge_clear(&e);

    /* A read that fails (a socket that never answers, then goes): the pinned buffer goes too. */
    char hole[MSTAR_NAME_MAX + 1];
    int fd = ucx_test_blackhole(hole);
    mstar_rid rid2 = mstar_rid_from_int(8);
    produce(w.p, &rid2, &ts[2], 1, 1, infos);
    snprintf(infos[0].source_session_id, sizeof(infos[0].source_session_id), "%s", hole);
    e = edge_of("sig", "node", infos, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w.c, &rid2, &e, 1, &done));
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.c->transport), 3 << 20);
    close(fd);
    wait_list(&done, MSTAR_EREMOTE);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.c->transport), 0);
    mstar__pinned_pool_stats_get(w.c->env.pinned, &sc);
    assert_int_equal(sc.bytes_out, 0); /* back in the pool, from the reader's thread */
    assert_int_equal(sc.allocations, 1);
    assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &set));
    assert_int_equal(set.nfailed, 1);
    mstar_ready_set_clear(&set);
    assert_int_equal(mstar_comm_num_tensors(w.c), 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w.p, &rid2));
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.p->transport), 0);
    mstar__pinned_pool_stats_get(w.p->env.pinned, &sp);
    assert_int_equal(sp.bytes_out, 0); /* the aborted tensor's copy is back in the pool */
    assert_int_equal(sp.allocations, 2);
    mstar_edge_clear(&e);
    mstar_comm_destroy(w.c);
    mstar_comm_destroy(w.p);
    bus_clear(&w.b);
    mstar_backend_destroy(bc);
    mstar_backend_destroy(bp);
    for (int i = 0; i < 3; i++)
        free(ts[i].data);
}

static void test_protocols_and_options(void **state)
{
    (void)state;
    mstar_transport_kind k;
    assert_mstar_ok(mstar_transport_kind_from_protocol("tcp", &k));
    assert_int_equal(k, MSTAR_TRANSPORT_UCX_TCP);
    assert_mstar_ok(mstar_transport_kind_from_protocol("RDMA", &k));
    assert_int_equal(k, MSTAR_TRANSPORT_UCX_RDMA);
    assert_mstar_ok(mstar_transport_kind_from_protocol("shm", &k));
    assert_int_equal(k, MSTAR_TRANSPORT_DEFAULT);
    assert_mstar_status(mstar_transport_kind_from_protocol("ib", &k), MSTAR_EINVAL);
    assert_mstar_status(mstar_transport_kind_from_protocol(NULL, &k), MSTAR_EINVAL);
    assert_string_equal(mstar_transport_kind_name(MSTAR_TRANSPORT_UCX_TCP), "ucx-tcp");
    assert_mstar_ok(mstar_transport_kind_from_name("ucx-rdma", &k));
    assert_int_equal(k, MSTAR_TRANSPORT_UCX_RDMA);

    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "worker_5";
    o.transport = MSTAR_TRANSPORT_UCX_TCP;
    o.session_id = "somehost:1";
    mstar_comm *c = NULL;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "session_id"));
    o.session_id = NULL;
    if (mstar_test_count_dir("/sys/class/infiniband") <= 0) {
        o.transport = MSTAR_TRANSPORT_UCX_RDMA;
        assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_ENOTSUP);
        assert_non_null(strstr(mstar_last_error(), "no RDMA verbs device"));
    }
    assert_null(c);
    o.transport = MSTAR_TRANSPORT_UCX_TCP;
    assert_mstar_ok(mstar_comm_create(&o, &c));
    assert_false(mstar_comm_needs_cpu_tensor(c));
    assert_true(mstar_comm_stamps_shm_placement(c)); /* session, address and remote key */
    assert_non_null(strstr(mstar_comm_session_id(c), "127.0.0.1:"));
    mstar_comm_destroy(c);
}

#define IN_WORLD(fn)     cmocka_unit_test_setup_teardown(fn, setup, comm_trio_teardown)
#define IN_GET_WORLD(fn) cmocka_unit_test_setup_teardown(fn, setup_get, comm_trio_teardown)

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        IN_WORLD(test_roundtrip),
        IN_WORLD(test_two_consumers),
        IN_WORLD(test_non_contiguous_output),
        IN_WORLD(test_read_into_caller_buffer),
        IN_WORLD(test_read_in_flight_then_failed),
        IN_WORLD(test_bad_descriptors),
        IN_GET_WORLD(test_get_protocol_and_clones),
        cmocka_unit_test(test_staged_through_pinned_memory),
        cmocka_unit_test(test_protocols_and_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
