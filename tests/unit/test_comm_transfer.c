/*
 * test_comm_transfer.c — producer and consumer managers in one process, over the per-uuid file
 * transport and over the arena (each test runs for both, from a table a remote transport can
 * join): bytes and ACKs, zero-size and 0-dim tensors, several consumers, re-delivery against a
 * legitimate re-send, the abort with a live reader, unstamped sharded clones and re-stamped
 * descriptors of registered uuids, late messages, every kind of bad descriptor, and that nothing
 * is left in the shm directory.
 */
#include "comm_harness.h"

#include "tensors/shm.h"

#include <dirent.h>

typedef comm_trio world;

static const mstar_transport_kind KINDS[] = { MSTAR_TRANSPORT_FILES, MSTAR_TRANSPORT_ARENA };

static int setup(void **state)
{
    *state = comm_trio_new(*(const mstar_transport_kind *)*state, mstar_test_tmpdir("xfer"));
    return 0;
}

/* Files that are not arena segments (per-uuid files and spills). */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, "mstar", 5) == 0 && strncmp(e->d_name, "mstar_arena_", 12) != 0;
    if (d != NULL)
        closedir(d);
    return n;
}

/* produce of one vector of `n` elements of `dtype` (bytes from `seed`); returns it (the caller
 * frees its data). */
static mstar_tensor produce_vector(world *w, const mstar_rid *rid, mstar_dtype dtype, int64_t n,
                                   uint32_t seed, int fanout, mstar_tensor_info *info)
{
    mstar_tensor t = make_vector(dtype, n, seed);
    produce(w->p, rid, &t, 1, fanout, info);
    return t;
}

/* `c` reads edge `e` of `rid`: the read lands inside the call (host transports) and the edge is
 * collected at once. */
static void read_edge(mstar_comm *c, const mstar_rid *rid, const mstar_edge *e)
{
    assert_mstar_ok(mstar_comm_start_read_tensors(c, rid, e, 1, NULL));
    collect_ready(c, 1);
}

/* Stores `t` as the output `signal` of `rid` the api-server way (store, register, persist, no
 * hold) and returns the edge that carries it to node `next`. */
static mstar_edge store_persisted(world *w, const mstar_rid *rid, const char *signal,
                                  const char *next, mstar_tensor t, mstar_tensor_info *info)
{
    mstar_output o = output_of(signal, t);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, rid, &o, 1, NULL, info));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, info, 1));
    assert_mstar_ok(mstar_comm_set_persist(w->p, info->uuid, true));
    return edge_of(signal, next, info, 1);
}

/* The consumer refuses to read an edge carrying these `n` descriptors (a protocol error). */
static void expect_read_refused(world *w, const mstar_rid *rid, const mstar_tensor_info *infos,
                                uint32_t n)
{
    mstar_edge e = edge_of("sig", "node", infos, n);
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, rid, &e, 1, NULL), MSTAR_EPROTO);
    mstar_edge_clear(&e);
}

/* Peer segments the consumer `c` has mapped (arena only). */
static uint64_t peer_segments(mstar_comm *c)
{
    mstar_arena_stats st;
    assert_mstar_ok(mstar_comm_arena_stats(c, &st));
    return st.peer_segments;
}

/* The arena of `p` holds exactly the `n` staged tensors of `infos`, each at most 256 bytes: one
 * 256-byte slot each, zero-byte ones included, every slot at an offset of its own. */
static void expect_own_slots(mstar_comm *p, const mstar_tensor_info *infos, int n)
{
    mstar_arena_stats st;
    assert_mstar_ok(mstar_comm_arena_stats(p, &st));
    assert_int_equal(st.live_slots, (uint64_t)n);
    assert_int_equal(st.total_bytes - st.free_bytes, (uint64_t)n * 256);
    for (int i = 0; i < n; i++) {
        assert_true(infos[i].nbytes <= 256);
        assert_string_not_equal(infos[i].shm_segment, "");
        for (int j = 0; j < i; j++)
            assert_false(strcmp(infos[i].shm_segment, infos[j].shm_segment) == 0 &&
                         infos[i].shm_offset == infos[j].shm_offset);
    }
}

/* Bytes arrive intact for every dtype and shape, zero-size and 0-dim included (T-18); in the
 * arena a zero-byte tensor takes a 256-byte slot of its own and reading it maps no segment; the
 * ACK goes out when the edge is collected and frees the producer's copy (and its file or slot);
 * the node's release frees the consumer's. */
static void test_roundtrip(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(1);
    int64_t s_a[3] = { 2, 3, 5 }, s_b[1] = { 0 }, s_d[2] = { 4, 0 };
    mstar_tensor ts[5] = {
        make_tensor(MSTAR_DTYPE_FLOAT32, 3, s_a, 1),  make_tensor(MSTAR_DTYPE_BOOL, 1, s_b, 2),
        make_tensor(MSTAR_DTYPE_FLOAT64, 0, NULL, 3), make_tensor(MSTAR_DTYPE_INT8, 2, s_d, 4),
        make_tensor(MSTAR_DTYPE_BFLOAT16, 3, s_a, 5),
    };
    mstar_tensor_info infos[5];
    produce(w->p, &rid, ts, 5, 1, infos);
    assert_int_equal(count_files(w->dir), w->kind == MSTAR_TRANSPORT_FILES ? 5 : 0);
    if (w->kind == MSTAR_TRANSPORT_ARENA)
        expect_own_slots(w->p, infos, 5);
    /* The zero-byte tensors first, on an edge of their own: reading them maps nothing. */
    const mstar_tensor_info empty[2] = { infos[1], infos[3] },
                            full[3] = { infos[0], infos[2], infos[4] };
    mstar_edge e[2] = { edge_of("sig", "node", empty, 2), edge_of("sig", "node", full, 3) };
    for (int k = 0; k < 2; k++) {
        mstar_completion_list done;
        assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e[k], 1, &done));
        assert_int_equal(done.n, 0); /* host reads land inside the call */
        mstar_completion_list_clear(&done);
        if (w->kind == MSTAR_TRANSPORT_ARENA)
            assert_int_equal(peer_segments(w->c), k); /* 0 after the empty ones, then 1 */
    }
    assert_int_equal(bus_count(&w->b, "worker_0"), 0); /* no ACK before collection */
    mstar_ready_set set;
    expect_ready(w->c, &set, 2);
    assert_int_equal(set.nrequests, 1);
    assert_true(mstar_rid_equal(&set.rids[0], &rid));
    assert_int_equal(set.edge_start[1], 2);
    for (int i = 0; i < 5; i++) {
        check_bytes(w->c, infos[i].uuid, &ts[i]);
        assert_int_equal(bus_ack_count(&w->b, "worker_0", infos[i].uuid), 1);
    }
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(count_files(w->dir), 0);
    /* A peer ACKing the consumer's own copy (a mistake) cannot free it under its node. */
    mstar_msg stray;
    mstar_msg_init(&stray, MSTAR_MSG_TENSOR_RECEIVED);
    assert_mstar_ok(mstar_msg_add_count(&stray, infos[0].uuid, 5));
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_ok(mstar_comm_handle_message(w->c, &stray));
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("read from another entity"));
    mstar_msg_clear(&stray);
    assert_int_equal(mstar_comm_num_tensors(w->c), 5);
    if (w->kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats st;
        assert_mstar_ok(mstar_comm_arena_stats(w->p, &st));
        assert_int_equal(st.live_slots, 0);
    }
    /* The node consumed its inputs. */
    for (int i = 0; i < 5; i++)
        assert_mstar_ok(mstar_comm_dereference(w->c, infos[i].uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_rx_info *rx;
    uint32_t nrx;
    assert_mstar_ok(mstar_comm_get_rx_info(w->c, &rid, &rx, &nrx));
    assert_int_equal(nrx, 1);
    assert_int_equal(rx[0].count, 5);
    assert_string_equal(rx[0].source_entity, "worker_0");
    free(rx);
    mstar_ready_set_clear(&set);
    mstar_edge_clear(&e[0]);
    mstar_edge_clear(&e[1]);
    for (int i = 0; i < 5; i++)
        free(ts[i].data);
}

/* I-8: two consumers, two ACKs; freed only after both. */
static void test_two_consumers(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor_info info;
    mstar_tensor t = produce_vector(w, &rid, MSTAR_DTYPE_INT16, 1000, 7, 2, &info);
    mstar_edge e = edge_of("sig", "node", &info, 1);
    read_edge(w->c, &rid, &e);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 1); /* one consumer still to come */
    read_edge(w->d, &rid, &e);
    check_bytes(w->d, info.uuid, &t);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_mstar_ok(mstar_comm_dereference(w->d, info.uuid, 1));
    mstar_edge_clear(&e);
    free(t.data);
}

/* T-6: the same persisted input re-sent in a later walk, after the consumer freed its first
 * copy, is read again and freed again (no leak); a true re-delivery of an edge whose uuid is
 * still held passes through and takes one usage reference. Each delivery is ACKed once. */
static void test_redelivery_vs_resend(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(3);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT16, 64, 9);
    mstar_tensor_info info;
    mstar_edge e = store_persisted(w, &rid, "img", "enc", t, &info);
    /* Walk 1: read, deliver, consume → the consumer's copy is gone. */
    read_edge(w->c, &rid, &e);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    /* Walk 2: the conductor sends it again. */
    read_edge(w->c, &rid, &e);
    check_bytes(w->c, info.uuid, &t);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0); /* the reference leaks it here */
    /* A re-delivery while the copy is held: +1, passed through, released by its node. */
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    collect_ready(w->c, 2);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 1);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    /* Four deliveries, four ACKs (I-8): the producer's ref is -4; UNPERSIST{4} frees. */
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 4);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    mstar_msg un;
    mstar_msg_init(&un, MSTAR_MSG_UNPERSIST_TENSORS);
    assert_mstar_ok(mstar_msg_add_count(&un, info.uuid, 4));
    assert_mstar_ok(mstar_comm_handle_message(w->p, &un));
    mstar_msg_clear(&un);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(count_files(w->dir), 0);
    mstar_edge_clear(&e);
    free(t.data);
}

/* T-1: the request is aborted while a persisted input is still to be read by another rank.
 * Soft cleanup keeps it (the reference unlinked it under the reader); the reader reads it; only
 * after READS_DONE does force cleanup free it. */
static void test_abort_with_live_reader(void **state)
{
    world *w = *state;
    mstar_rid rid = rid_str("req-abort");
    int64_t shape[2] = { 16, 16 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 11);
    mstar_tensor_info info;
    mstar_edge e = store_persisted(w, &rid, "prompt", "enc", t, &info);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    /* Abort: soft cleanup everywhere. */
    assert_mstar_ok(mstar_comm_cleanup_request(w->p, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid)); /* ACKs and drops its landed read */
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 1);
    /* The other rank's scheduled read still finds the bytes. */
    read_edge(w->d, &rid, &e);
    check_bytes(w->d, info.uuid, &t);
    assert_mstar_ok(mstar_comm_cleanup_request(w->d, &rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->d, &rid)); /* drop the node's copy */
    assert_int_equal(mstar_comm_num_tensors(w->d), 0);
    /* Every reader drained: READS_DONE. ACKs alone do not free a persisted tensor. */
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    assert_false(mstar_comm_has_inflight_reads(w->d, &rid));
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(count_files(w->dir), 0);
    /* A read after the hard cleanup fails loudly instead of reading freed memory: the file is
     * gone, and the arena slot's stamp was cleared (the consumer still maps the segment). */
    assert_mstar_status(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL), MSTAR_ENOENT);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    mstar_edge_clear(&e);
    free(t.data);
}

/* T-4: sharded fan-out clones descriptors before staging; without refresh_shm_placement an
 * arena consumer would look for a per-uuid file that was never written. */
static void test_unstamped_sharded_clones(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(5);
    mstar_tensor t;
    mstar_tensor_info info;
    mstar_edge e;
    mstar_fanout fo;
    store_sharded_fanout(w->p, &rid, &t, &info, &e, &fo);
    uint32_t count = 1;
    assert_mstar_ok(mstar_comm_register_for_send_uuids(w->p, &rid, 1, &count, &info.uuid));
    if (w->kind == MSTAR_TRANSPORT_ARENA) {
        assert_string_equal(fo.edges[1].tensor_info[0].shm_segment, "");
        mstar_status st = mstar_comm_start_read_tensors(w->d, &rid, &fo.edges[1], 1, NULL);
        assert_int_equal(st, MSTAR_ENOENT); /* the bug the refresh exists for */
    }
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, fo.edges, fo.n));
    if (w->kind == MSTAR_TRANSPORT_ARENA)
        assert_string_not_equal(fo.edges[1].tensor_info[0].shm_segment, "");
    /* Only the placement moved: the slice's geometry is untouched. */
    assert_int_equal(fo.edges[1].tensor_info[0].dims[0], 4);
    assert_int_equal(fo.edges[1].tensor_info[0].offset, 4 * 4 * 4);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->d, &rid, &fo.edges[1], 1, NULL));
    mstar_ready_set set;
    expect_ready(w->d, &set, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->d, info.uuid, &got));
    assert_int_equal(got.shape[0], 4);
    assert_memory_equal(mstar_tensor_ptr(&got), (char *)t.data + 64, 64);
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->d, &rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->p, &rid));
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
    free(t.data);
}

/* T-4, its other half: descriptors of a uuid that is already registered (objects the worker
 * built after the first registration, or kept when it de-duplicated by uuid) are stamped again by
 * register_for_send, without staging the bytes again; each consumer reads through its own. */
static void test_registered_uuid_clones_are_stamped(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(9);
    mstar_tensor_info info;
    mstar_tensor t = produce_vector(w, &rid, MSTAR_DTYPE_INT32, 48, 21, 2, &info);
    mstar_tensor_info clones[2] = { info, info };
    for (int i = 0; i < 2; i++) {
        clones[i].shm_segment[0] = '\0'; /* as built from the store, before any stamp */
        clones[i].shm_offset = 4096 * (uint64_t)(i + 1);
    }
    assert_mstar_ok(mstar_comm_register_for_send(w->p, &rid, clones, 2));
    for (int i = 0; i < 2; i++) {
        assert_string_equal(clones[i].shm_segment, info.shm_segment);
        if (w->kind == MSTAR_TRANSPORT_ARENA)
            assert_int_equal(clones[i].shm_offset, info.shm_offset);
    }
    if (w->kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats st;
        assert_mstar_ok(mstar_comm_arena_stats(w->p, &st));
        assert_int_equal(st.live_slots, 1); /* not staged again */
    } else {
        assert_int_equal(count_files(w->dir), 1);
    }
    mstar_comm *readers[2] = { w->c, w->d };
    for (int i = 0; i < 2; i++) {
        mstar_edge e = edge_of("sig", "node", &clones[i], 1);
        read_edge(readers[i], &rid, &e);
        check_bytes(readers[i], info.uuid, &t);
        assert_mstar_ok(mstar_comm_dereference(readers[i], info.uuid, 1));
        mstar_edge_clear(&e);
    }
    assert_int_equal(bus_ack_count(&w->b, "worker_0", info.uuid), 2);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    free(t.data);
}

/* Issue item 6: every bad descriptor is refused before anything is read or held; neither side
 * changes. */
static void test_bad_descriptors(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(6);
    mstar_tensor_info good;
    mstar_tensor t = produce_vector(w, &rid, MSTAR_DTYPE_UINT8, 256, 15, 1, &good);
    mstar_tensor_info bad;
    mstar_status st;
    const char *segments[] = { "mstar_arena_worker_0_1_00000000.seg0/../x",
                               "../../etc/passwd",
                               "mstar_arena_..worker_0_1_0a0b0c0d.seg0",
                               "arena_worker_0_1_0a0b0c0d.seg0",
                               "mstar_arena_worker_1_1_0a0b0c0d.seg0", /* not the source's */
                               "mstar_arena_worker_0_1_0a0b0c0d.segX" };
    for (size_t i = 0; i < sizeof(segments) / sizeof(segments[0]); i++) {
        bad = good;
        snprintf(bad.shm_segment, sizeof(bad.shm_segment), "%s", segments[i]);
        mstar_edge e = edge_of("sig", "node", &bad, 1);
        st = mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL);
        if (st != MSTAR_EPROTO)
            fail_msg("segment '%s' gave %s", segments[i], mstar_status_name(st));
        mstar_edge_clear(&e);
    }
    /* Ranges past the end of the file or the mapped segment (within a segment, the consumer
     * cannot know slot boundaries: the mapping's size is the bound). */
    bad = good;
    bad.offset = 1; /* [1, 257) of 256 bytes */
    if (w->kind == MSTAR_TRANSPORT_FILES)
        expect_read_refused(w, &rid, &bad, 1);
    if (w->kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats as;
        assert_mstar_ok(mstar_comm_arena_stats(w->p, &as));
        bad = good;
        bad.shm_offset = as.total_bytes - 128;
        expect_read_refused(w, &rid, &bad, 1);
        bad.shm_offset = UINT64_MAX - 8; /* wraps */
        expect_read_refused(w, &rid, &bad, 1);
    }
    /* nbytes that disagrees with dims × dtype; a bad dtype; too many dims; a bad entity. */
    bad = good;
    bad.nbytes = 255;
    expect_read_refused(w, &rid, &bad, 1);
    bad = good;
    bad.dtype = (mstar_dtype)77;
    expect_read_refused(w, &rid, &bad, 1);
    bad = good;
    bad.ndim = 9;
    expect_read_refused(w, &rid, &bad, 1);
    bad = good;
    snprintf(bad.source_entity, sizeof(bad.source_entity), "../worker_0");
    expect_read_refused(w, &rid, &bad, 1);
    /* A good descriptor next to a bad one: all or nothing. */
    mstar_tensor_info pair[2] = { good, good };
    pair[1].nbytes = 1;
    expect_read_refused(w, &rid, pair, 2);
    /* Nothing was read, held, pending or ACKed; the producer's copy is intact. */
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_false(mstar_comm_has_inflight_reads(w->c, &rid));
    collect_ready(w->c, 0);
    assert_int_equal(bus_count(&w->b, "worker_0"), 0);
    mstar_edge e = edge_of("sig", "node", &good, 1);
    read_edge(w->c, &rid, &e);
    check_bytes(w->c, good.uuid, &t);
    mstar_edge_clear(&e);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_mstar_ok(mstar_comm_dereference(w->c, good.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->p) + mstar_comm_num_tensors(w->c), 0);
    free(t.data);
}

/* T-19: result tensors for a request already removed are ACKed unread; a late ACK after the
 * producer's soft cleanup still frees (and unlinks); reads for a request the consumer never
 * registered work. */
static void test_late_messages(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(7);
    mstar_tensor_info info;
    mstar_tensor t = produce_vector(w, &rid, MSTAR_DTYPE_INT64, 10, 17, 2, &info);
    assert_mstar_ok(mstar_comm_cleanup_request(w->p, &rid)); /* deferred: two refs out */
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    mstar_edge e = edge_of("sig", "emit", &info, 1);
    assert_mstar_ok(mstar_comm_ack_unread_tensors(w->c, &rid, &e, 1));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    read_edge(w->d, &rid, &e); /* never registered */
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(count_files(w->dir), 0);
    assert_mstar_ok(mstar_comm_dereference(w->d, info.uuid, 1));
    mstar_edge_clear(&e);
    free(t.data);
}

/* Soft cleanup on a consumer with reads that landed but were never collected: they are ACKed
 * (the producer counted them) and nothing is left on either side. */
static void test_consumer_cleanup_acks_landed(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_tensor ts[2];
    mstar_tensor_info infos[2];
    mstar_edge e = produce_two_vectors(w->p, &rid, MSTAR_DTYPE_FLOAT32, 3, MSTAR_DTYPE_FLOAT32, 3,
                                       19, ts, infos);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &e, 1, NULL));
    assert_int_equal(mstar_comm_num_tensors(w->c), 2);
    assert_mstar_ok(mstar_comm_cleanup_request(w->c, &rid));
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    bus_deliver(&w->b, "worker_0", w->p);
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    collect_ready(w->c, 0);
    mstar_edge_clear(&e);
    free(ts[0].data);
    free(ts[1].data);
}

/* design.md "Sharding": an edge a producer sends to itself needs no read; a slice of its own
 * sharded output is cut without a copy under a new uuid, and the producer's reference for it moves
 * there. */
static void test_self_delivery_and_local_slice(void **state)
{
    world *w = *state;
    mstar_rid rid = mstar_rid_from_int(9);
    const char *sigs[1] = { "h" };
    int32_t dims[1] = { 1 };
    mstar_sharding_config cfg = { 1, sigs, dims };
    assert_mstar_ok(mstar_comm_register_request(w->p, &rid, &cfg));
    int64_t shape[2] = { 3, 8 }; /* shard dim 1: canonical [8, 3] */
    mstar_tensor t = make_tensor(MSTAR_DTYPE_INT16, 2, shape, 21);
    mstar_output o = output_of("h", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->p, &rid, &o, 1, NULL, &info));
    mstar_edge e = edge_of("h", "mlp", &info, 1);
    const char *workers[2] = { "worker_0", "worker_1" };
    mstar_shard_group dst = { 2, workers };
    mstar_fanout fo;
    assert_mstar_ok(mstar_edge_fanout(&e, 1, NULL, 0, &dst, &fo));
    assert_int_equal(fo.n, 2);
    assert_string_equal(fo.workers[0], "worker_0");
    /* Routed to both ranks: hold 1 → 2. */
    assert_mstar_ok(mstar_comm_increment_ref(w->p, info.uuid, 1));
    assert_mstar_ok(mstar_comm_set_output_ref_counts(w->p, &info.uuid, 1, fo.edges, 2));
    assert_mstar_ok(mstar_comm_register_for_send(w->p, &rid, &info, 1));
    assert_mstar_ok(mstar_comm_refresh_shm_placement(w->p, fo.edges, 2));
    /* Rank 0 is the producer itself. */
    assert_mstar_ok(mstar_comm_start_read_tensors(w->p, &rid, &fo.edges[0], 1, NULL));
    mstar_ready_set set;
    expect_ready(w->p, &set, 1);
    mstar_tensor_id slice = set.edges[0].tensor_info[0].uuid;
    assert_int_not_equal(slice, info.uuid);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->p, slice, &got));
    assert_int_equal(got.shape[0], 3);
    assert_int_equal(got.shape[1], 4); /* real layout: [3, 4] of columns 0..3 */
    int16_t back[12];
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(w->p, slice, back, sizeof(back), &cp));
    int16_t *src = t.data;
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            assert_int_equal(back[r * 4 + c], src[r * 8 + c]);
    assert_int_equal(bus_count(&w->b, "worker_0"), 0); /* no ACK to oneself */
    mstar_ready_set_clear(&set);
    /* Rank 1 reads columns 4..7 across processes. */
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, &rid, &fo.edges[1], 1, NULL));
    expect_ready(w->c, &set, 1);
    assert_mstar_ok(mstar_comm_get_tensor_copy(w->c, info.uuid, back, sizeof(back), &cp));
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            assert_int_equal(back[r * 4 + c], src[r * 8 + 4 + c]);
    mstar_ready_set_clear(&set);
    bus_deliver(&w->b, "worker_0", w->p);
    /* The producer's tensor went when both its destinations were served; the slice stays until
     * its node releases it (it shares the storage). */
    assert_int_equal(mstar_comm_num_tensors(w->p), 1);
    assert_mstar_ok(mstar_comm_dereference(w->p, slice, 1));
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_mstar_ok(mstar_comm_dereference(w->c, info.uuid, 1));
    mstar_fanout_clear(&fo);
    mstar_edge_clear(&e);
    free(t.data);
}

#define BOTH(fn)                                                                                \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, comm_trio_teardown, (void *)&KINDS[0]), \
        cmocka_unit_test_prestate_setup_teardown(fn, setup, comm_trio_teardown, (void *)&KINDS[1])

int main(void)
{
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1", 1);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "4", 1);
    const struct CMUnitTest tests[] = {
        BOTH(test_roundtrip),
        BOTH(test_two_consumers),
        BOTH(test_redelivery_vs_resend),
        BOTH(test_abort_with_live_reader),
        BOTH(test_unstamped_sharded_clones),
        BOTH(test_registered_uuid_clones_are_stamped),
        BOTH(test_bad_descriptors),
        BOTH(test_late_messages),
        BOTH(test_consumer_cleanup_acks_landed),
        BOTH(test_self_delivery_and_local_slice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
