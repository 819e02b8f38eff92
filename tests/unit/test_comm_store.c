/*
 * test_comm_store.c — the producer side of the communication manager on the local transport:
 * descriptors, ownership of handed-over memory, canonical layout, the batch columns, reference
 * counts and where collection happens, persist, set_output_ref_counts, and bad arguments.
 */
#include "comm_harness.h"

static int released;
static void count_release(void *ctx, void *data)
{
    (void)ctx;
    released++;
    free(data);
}

static mstar_comm *local_comm(void)
{
    static sender s;
    static bus b;
    s.b = &b;
    snprintf(s.entity, sizeof(s.entity), "worker_0");
    return make_comm("worker_0", MSTAR_TRANSPORT_LOCAL, NULL, &s);
}

static void test_descriptors(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    int64_t shape[2] = { 3, 5 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_BFLOAT16, 2, shape, 1);
    mstar_output o = output_of("hidden", t);
    mstar_store_params params = { "llm", "walk_a", 2, 1 };
    mstar_tensor_info info;
    mstar_rid rid = mstar_rid_from_int(7);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(c, &rid, &o, 1, &params, &info));
    assert_int_equal(mstar_id_entity(info.uuid), 100);
    assert_int_equal(mstar_id_counter(info.uuid), 1);
    assert_int_equal(info.dtype, MSTAR_DTYPE_BFLOAT16);
    assert_int_equal(info.ndim, 2);
    assert_int_equal(info.dims[0], 3);
    assert_int_equal(info.dims[1], 5);
    assert_int_equal(info.stride[0], 5);
    assert_int_equal(info.nbytes, 30);
    assert_int_equal(info.offset, 0);
    assert_int_equal(info.source_tp_size, 2);
    assert_int_equal(info.source_tp_rank, 1);
    assert_string_equal(info.source_entity, "worker_0");
    assert_string_equal(info.source_node_name, "llm");
    assert_string_equal(info.source_graph_walk, "walk_a");
    assert_string_equal(info.shm_segment, "");
    assert_mstar_ok(mstar_tensor_info_validate(&info));
    /* The manager copied the bytes (no release given): the caller's buffer is its own. */
    mstar_tensor view;
    assert_mstar_ok(mstar_comm_get_tensor(c, info.uuid, &view));
    assert_ptr_not_equal(view.data, t.data);
    assert_memory_equal(mstar_tensor_ptr(&view), t.data, 30);
    free(t.data);
    assert_int_equal(mstar_comm_num_tensors(c), 1);
    mstar_comm_destroy(c);
}

/* Handed-over memory: kept without a copy when contiguous, released when collected; released at
 * once when the manager had to copy (non-contiguous); never released on a failed store. */
static void test_ownership(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(1);
    int64_t shape[2] = { 4, 4 };
    released = 0;
    mstar_output o[2];
    o[0] = output_of("a", make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 2));
    o[0].release = count_release;
    o[1] = output_of("b", make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 3));
    o[1].release = count_release;
    o[1].tensor.strides[0] = 1; /* a transposed view: must be made contiguous */
    o[1].tensor.strides[1] = 4;
    void *b_bytes = o[1].tensor.data;
    uint8_t b_copy[64];
    memcpy(b_copy, b_bytes, 64);
    mstar_tensor_info info[2];
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(c, &rid, o, 2, NULL, info));
    assert_int_equal(released, 1); /* b was copied and released */
    mstar_tensor v;
    assert_mstar_ok(mstar_comm_get_tensor(c, info[0].uuid, &v));
    assert_ptr_equal(v.data, o[0].tensor.data); /* a was kept as is */
    assert_mstar_ok(mstar_comm_get_tensor(c, info[1].uuid, &v));
    assert_true(mstar_tensor_is_contiguous(&v));
    float *bf = (float *)mstar_tensor_ptr(&v), *src = (float *)b_copy;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            assert_true(bf[i * 4 + j] == src[j * 4 + i]);
    mstar_tensor_id ids[2] = { info[0].uuid, info[1].uuid };
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(c, ids, 2, 1));
    assert_mstar_ok(mstar_comm_dereference_batch_uniform(c, ids, 2, 1));
    assert_int_equal(released, 2);
    assert_int_equal(mstar_comm_num_tensors(c), 0);

    /* A failed store: the second output is invalid; nothing stored, nothing released. */
    released = 0;
    mstar_output bad[2];
    bad[0] = output_of("a", make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 4));
    bad[0].release = count_release;
    bad[1] = output_of("a/b", make_tensor(MSTAR_DTYPE_FLOAT32, 2, shape, 5));
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(c, &rid, bad, 2, NULL, info),
                        MSTAR_EINVAL);
    assert_int_equal(released, 0);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    bad[1].signal = "b";
    bad[1].tensor.dtype = (mstar_dtype)99;
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(c, &rid, bad, 2, NULL, info),
                        MSTAR_EINVAL);
    assert_int_equal(released, 0);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    free(bad[0].tensor.data);
    free(bad[1].tensor.data);
    mstar_comm_destroy(c);
}

/* design.md "Sharding": a sharded signal is stored with its shard dim first; get_tensor undoes
 * it. */
static void test_canonical_layout(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = rid_str("req-a");
    const char *sigs[2] = { "x", "y" };
    int32_t dims[2] = { 2, -1 };
    mstar_sharding_config cfg = { 2, sigs, dims };
    assert_mstar_ok(mstar_comm_register_request(c, &rid, &cfg));
    int64_t shape[3] = { 2, 3, 4 };
    mstar_tensor t = make_tensor(MSTAR_DTYPE_INT32, 3, shape, 9);
    mstar_output o = output_of("x", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(c, &rid, &o, 1, NULL, &info));
    assert_int_equal(info.dims[0], 4);
    assert_int_equal(info.dims[1], 2);
    assert_int_equal(info.dims[2], 3);
    mstar_tensor v;
    assert_mstar_ok(mstar_comm_get_tensor(c, info.uuid, &v));
    assert_int_equal(v.shape[0], 2);
    assert_int_equal(v.shape[2], 4);
    int32_t back[24];
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(c, info.uuid, back, sizeof(back), &cp));
    assert_memory_equal(back, t.data, sizeof(back));
    assert_mstar_status(mstar_comm_get_tensor_copy(c, info.uuid, back, 10, &cp), MSTAR_ERANGE);
    /* A shard dim past the tensor's rank is refused. */
    int64_t s1[1] = { 5 };
    mstar_tensor t1 = make_tensor(MSTAR_DTYPE_INT32, 1, s1, 1);
    mstar_output o1 = output_of("x", t1);
    assert_mstar_status(mstar_comm_store_and_return_tensor_info(c, &rid, &o1, 1, NULL, &info),
                        MSTAR_EINVAL);
    free(t.data);
    free(t1.data);
    mstar_comm_destroy(c);
}

/* StoredOutputs: mint order request-major, then signal, then output order; unsignalled outputs
 * are not stored and their memory is released at once. */
static void test_batch_columns(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rids[2] = { mstar_rid_from_int(10), mstar_rid_from_int(11) };
    const char *signals[2] = { "s0", "s1" };
    int64_t shape[1] = { 2 };
    released = 0;
    mstar_output o[5];
    const char *names[5] = { "s1", "s0", "junk", "s1", "s0" };
    uint32_t reqs[5] = { 1, 1, 0, 0, 1 };
    for (int i = 0; i < 5; i++) {
        o[i] = output_of(names[i], make_tensor(MSTAR_DTYPE_INT64, 1, shape, (uint32_t)i));
        o[i].request = reqs[i];
        o[i].release = count_release;
    }
    mstar_stored_outputs so;
    assert_mstar_ok(
        mstar_comm_store_and_return_tensor_info_batch(c, rids, 2, o, 5, signals, 2, NULL, &so));
    assert_int_equal(released, 1); /* "junk" */
    assert_int_equal(so.n, 4);
    /* request 0: s0 none, s1 [3]; request 1: s0 [1, 4], s1 [0] */
    uint32_t want_num[4] = { 0, 1, 2, 1 };
    assert_memory_equal(so.num_tensors, want_num, sizeof(want_num));
    uint32_t want_rids[4] = { 0, 1, 1, 1 }, want_sig[4] = { 1, 0, 0, 1 };
    assert_memory_equal(so.flat_rids, want_rids, sizeof(want_rids));
    assert_memory_equal(so.signal_idxs, want_sig, sizeof(want_sig));
    int want_src[4] = { 3, 1, 4, 0 };
    for (int k = 0; k < 4; k++) {
        assert_int_equal(mstar_id_counter(so.flat_uuids[k]), (uint64_t)k + 1); /* mint order */
        mstar_tensor v;
        assert_mstar_ok(mstar_comm_get_tensor(c, so.flat_uuids[k], &v));
        assert_ptr_equal(v.data, o[want_src[k]].tensor.data);
    }
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(c, so.flat_uuids, so.n, 1));
    assert_mstar_ok(mstar_comm_dereference_batch_uniform(c, so.flat_uuids, so.n, 1));
    assert_int_equal(released, 5);
    mstar_stored_outputs_clear(&so);
    /* Bad batch: an output naming a request outside the array. */
    o[0] = output_of("s0", make_tensor(MSTAR_DTYPE_INT64, 1, shape, 1));
    o[0].request = 2;
    assert_mstar_status(
        mstar_comm_store_and_return_tensor_info_batch(c, rids, 2, o, 1, signals, 2, NULL, &so),
        MSTAR_EINVAL);
    free(o[0].tensor.data);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    mstar_comm_destroy(c);
}

static mstar_tensor_id store_one(mstar_comm *c, const mstar_rid *rid, const char *signal)
{
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 8, 1);
    mstar_output o = output_of(signal, t);
    o.release = count_release;
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(c, rid, &o, 1, NULL, &info));
    return info.uuid;
}

/* store_one, persisted. */
static mstar_tensor_id store_persisted(mstar_comm *c, const mstar_rid *rid, const char *signal)
{
    mstar_tensor_id u = store_one(c, rid, signal);
    assert_mstar_ok(mstar_comm_set_persist(c, u, true));
    return u;
}

/* The conductor's UNPERSIST_TENSORS{uuid: k}, handled by `c`. */
static void unpersist(mstar_comm *c, mstar_tensor_id uuid, int64_t k)
{
    mstar_msg un;
    mstar_msg_init(&un, MSTAR_MSG_UNPERSIST_TENSORS);
    assert_mstar_ok(mstar_msg_add_count(&un, uuid, k));
    assert_mstar_ok(mstar_comm_handle_message(c, &un));
    mstar_msg_clear(&un);
}

/* I-2 / design.md "Tensor lifecycle": set_output_ref_counts moves the safety hold to the routed
 * count; persist edges do not count (T-7, the persist reference leak). */
static void test_output_ref_counts(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(3);
    released = 0;
    mstar_tensor_id a = store_one(c, &rid, "a"); /* routed to 2 edges + a persist edge */
    mstar_tensor_id b = store_one(c, &rid, "b"); /* routed nowhere, persisted */
    mstar_tensor_id d = store_one(c, &rid, "d"); /* routed nowhere */
    mstar_tensor_id held[3] = { a, b, d };
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(c, held, 3, 1));
    assert_mstar_ok(mstar_comm_set_persist(c, a, true));
    assert_mstar_ok(mstar_comm_set_persist(c, b, true));
    mstar_tensor_info ia, ib;
    assert_mstar_ok(mstar_comm_tensor_info(c, a, &ia));
    assert_mstar_ok(mstar_comm_tensor_info(c, b, &ib));
    mstar_edge routed[3];
    routed[0] = edge_of("a", "n1", &ia, 1);
    routed[1] = edge_of("a", "n2", &ia, 1);
    routed[2] = edge_of("a", "conductor", &ia, 1);
    routed[2].persist = true;
    assert_mstar_ok(mstar_comm_set_output_ref_counts(c, held, 3, routed, 3));
    assert_int_equal(released, 1); /* d: count 0, not persisted → freed here */
    assert_int_equal(mstar_comm_num_tensors(c), 2);
    /* a: two consumer releases, then unpersist with K = 0 (never sent on) frees it. */
    assert_mstar_ok(mstar_comm_dereference(c, a, 1));
    assert_mstar_ok(mstar_comm_dereference(c, a, 1));
    assert_int_equal(released, 1); /* still persisted */
    assert_mstar_ok(mstar_comm_set_persist(c, a, false));
    assert_int_equal(released, 2);
    /* b: held by its marker at ref 0. */
    assert_mstar_ok(mstar_comm_set_persist(c, b, false));
    assert_int_equal(released, 3);
    for (int i = 0; i < 3; i++)
        mstar_edge_clear(&routed[i]);
    mstar_comm_destroy(c);
}

/* T-8: ACKs before UNPERSIST drive the ref negative; UNPERSIST{K} then frees it. */
static void test_negative_refs_and_unpersist(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(4);
    released = 0;
    mstar_tensor_id u = store_persisted(c, &rid, "in");
    mstar_msg ack;
    mstar_msg_init(&ack, MSTAR_MSG_TENSOR_RECEIVED);
    ack.request_id = rid;
    assert_mstar_ok(mstar_msg_add_count(&ack, u, 2));
    assert_mstar_ok(mstar_comm_handle_message(c, &ack));
    assert_mstar_ok(mstar_comm_handle_message(c, &ack));
    assert_int_equal(released, 0);
    unpersist(c, u, 4); /* the conductor sent it 4 times */
    assert_int_equal(released, 1);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    /* UNPERSIST before the ACKs: held by the refs until the last ACK. */
    u = store_persisted(c, &rid, "in");
    unpersist(c, u, 4);
    ack.counts[0].uuid = u;
    assert_mstar_ok(mstar_comm_handle_message(c, &ack));
    assert_int_equal(released, 1);
    assert_mstar_ok(mstar_comm_handle_message(c, &ack));
    assert_int_equal(released, 2);
    mstar_msg_clear(&ack);
    mstar_comm_destroy(c);
}

/* A TENSOR_RECEIVED{uuid: count} from `from`, handled by `c`. */
static void ack_from(mstar_comm *c, const char *from, mstar_tensor_id uuid, int64_t count)
{
    mstar_msg ack;
    mstar_msg_init(&ack, MSTAR_MSG_TENSOR_RECEIVED);
    snprintf(ack.from, sizeof(ack.from), "%s", from);
    assert_mstar_ok(mstar_msg_add_count(&ack, uuid, count));
    assert_mstar_ok(mstar_comm_handle_message(c, &ack));
    mstar_msg_clear(&ack);
}

/* The ACK ledger learns that `uuid` went to `peer` (one delivery). */
static void sent_to(mstar_comm *c, const char *peer, mstar_tensor_id uuid)
{
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_tensor_info(c, uuid, &info));
    mstar_edge e = edge_of("in", "node", &info, 1);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    assert_mstar_ok(mstar_msg_add_edge(&m, &e));
    assert_mstar_ok(mstar_comm_note_sent(c, peer, &m));
    mstar_msg_clear(&m);
    mstar_edge_clear(&e);
}

static uint64_t acks_dropped(mstar_comm *c)
{
    mstar_comm_security_stats s;
    assert_mstar_ok(mstar_comm_get_security_stats(c, &s));
    return s.acks_dropped;
}

/* A persisted tensor is sent to the conductor, which hands it on to workers the producer never
 * sent it to. Their ACKs may land after the UNPERSIST K that cleared the marker: K of them are
 * applied from any expected peer, no more, and ACKs that came in while it was persisted from
 * peers the ledger did not cover use up that grant, so a replay cannot free it under a reader. */
static void test_unpersist_grants_acks(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(6);
    released = 0;
    /* The forwarded reader's ACK lands after UNPERSIST 1: it frees the tensor. */
    mstar_tensor_id u = store_persisted(c, &rid, "in");
    sent_to(c, "conductor", u);
    unpersist(c, u, 1);
    assert_int_equal(mstar_comm_num_tensors(c), 1);
    ack_from(c, "worker_1", u, 1);
    assert_int_equal(released, 1);
    assert_int_equal(acks_dropped(c), 0);

    /* Bounded by K: a direct reader (worker_2) holds one count besides the persisted hand-offs;
     * the forwarded readers' ACKs past K = 2 are dropped and the tensor stays for worker_2. */
    u = store_persisted(c, &rid, "in");
    assert_mstar_ok(mstar_comm_increment_ref(c, u, 1));
    sent_to(c, "conductor", u);
    sent_to(c, "worker_2", u);
    unpersist(c, u, 2);
    ack_from(c, "worker_1", u, 5); /* 2 applied, the rest dropped */
    assert_int_equal(acks_dropped(c), 1);
    ack_from(c, "worker_3", u, 1);
    assert_int_equal(acks_dropped(c), 2);
    assert_int_equal(released, 1);
    ack_from(c, "worker_2", u, 1);
    assert_int_equal(released, 2);

    /* A forwarded reader that ACKed while the tensor was persisted used its part of K: its
     * replay after UNPERSIST is dropped and worker_2's read is not cut short. */
    u = store_persisted(c, &rid, "in");
    assert_mstar_ok(mstar_comm_increment_ref(c, u, 1));
    sent_to(c, "conductor", u);
    sent_to(c, "worker_2", u);
    ack_from(c, "worker_1", u, 1);
    unpersist(c, u, 1);
    ack_from(c, "worker_1", u, 1);
    assert_int_equal(acks_dropped(c), 3);
    assert_int_equal(released, 2);
    ack_from(c, "worker_2", u, 1);
    assert_int_equal(released, 3);

    /* With the entities named, a granted ACK comes only from one of them. */
    const char *expected[2] = { "conductor", "worker_1" };
    assert_mstar_ok(mstar_comm_expect_entities(c, expected, 2));
    u = store_persisted(c, &rid, "in");
    sent_to(c, "conductor", u);
    unpersist(c, u, 1);
    ack_from(c, "intruder", u, 1);
    assert_int_equal(acks_dropped(c), 4);
    assert_int_equal(released, 3);
    ack_from(c, "worker_1", u, 1);
    assert_int_equal(released, 4);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    mstar_comm_destroy(c);
}

/* Issue item 6: ACKs for unknown uuids, duplicate ACKs, counts of zero or below — logged no-ops;
 * nothing freed early. */
static void test_bad_acks(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(5);
    released = 0;
    mstar_tensor_id u = store_one(c, &rid, "x");
    assert_mstar_ok(mstar_comm_increment_ref(c, u, 2));
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_TENSOR_RECEIVED);
    m.request_id = rid;
    assert_mstar_ok(mstar_msg_add_count(&m, u, 0));
    assert_mstar_ok(mstar_msg_add_count(&m, u + 1000, 1));
    assert_mstar_ok(mstar_msg_add_count(&m, u, -3));
    mstar_test_log_capture_begin(MSTAR_LOG_DEBUG);
    assert_mstar_ok(mstar_comm_handle_message(c, &m));
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("count 0 for"));
    assert_true(mstar_test_log_contains("count -3 for"));
    assert_true(mstar_test_log_contains("unknown tensor"));
    assert_int_equal(released, 0);
    mstar_msg_clear(&m);
    /* Two ACKs of one each: freed by the second only. */
    mstar_msg_init(&m, MSTAR_MSG_TENSOR_RECEIVED);
    assert_mstar_ok(mstar_msg_add_count(&m, u, 1));
    assert_mstar_ok(mstar_comm_handle_message(c, &m));
    assert_int_equal(released, 0);
    assert_mstar_ok(mstar_comm_handle_message(c, &m));
    assert_int_equal(released, 1);
    /* A duplicate after collection is an unknown uuid: no-op. */
    assert_mstar_ok(mstar_comm_handle_message(c, &m));
    assert_int_equal(released, 1);
    mstar_msg_clear(&m);
    /* UNPERSIST with a negative K is skipped. */
    mstar_tensor_id p = store_persisted(c, &rid, "y");
    unpersist(c, p, -1);
    assert_int_equal(mstar_comm_num_tensors(c), 1);
    /* Other message types are not the manager's. */
    mstar_msg_init(&m, MSTAR_MSG_NEW_REQUEST);
    assert_mstar_status(mstar_comm_handle_message(c, &m), MSTAR_EINVAL);
    mstar_msg_clear(&m);
    /* Counts below one through the API are errors. */
    assert_mstar_status(mstar_comm_dereference(c, p, 0), MSTAR_EINVAL);
    assert_mstar_status(mstar_comm_dereference(c, p, -1), MSTAR_EINVAL);
    assert_mstar_status(mstar_comm_increment_ref(c, p, 0), MSTAR_EINVAL);
    int64_t counts[2] = { 1, 0 };
    mstar_tensor_id two[2] = { p, p };
    assert_mstar_status(mstar_comm_dereference_batch(c, two, counts, 2), MSTAR_EINVAL);
    assert_int_equal(mstar_comm_num_tensors(c), 1);
    /* Unknown uuids through the API: logged no-ops. */
    assert_mstar_ok(mstar_comm_dereference(c, 12345, 1));
    assert_mstar_ok(mstar_comm_set_persist(c, 12345, false));
    mstar_comm_destroy(c);
}

/* design.md "Teardown and the drain" soft cleanup defers persisted and referenced tensors; a late
 * ACK still frees (T-19); force cleanup frees everything. */
static void test_soft_and_force_cleanup(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(6);
    released = 0;
    mstar_tensor_id free_now = store_one(c, &rid, "a");
    mstar_tensor_id persisted = store_one(c, &rid, "b");
    mstar_tensor_id referenced = store_one(c, &rid, "c");
    (void)free_now;
    assert_mstar_ok(mstar_comm_set_persist(c, persisted, true));
    assert_mstar_ok(mstar_comm_increment_ref(c, referenced, 1));
    assert_mstar_ok(mstar_comm_cleanup_request(c, &rid));
    assert_int_equal(released, 1);
    assert_int_equal(mstar_comm_num_tensors(c), 2);
    /* The late ACK of the referenced one frees it. */
    assert_mstar_ok(mstar_comm_dereference(c, referenced, 1));
    assert_int_equal(released, 2);
    /* Soft again is idempotent; force drops the persisted one. */
    assert_mstar_ok(mstar_comm_cleanup_request(c, &rid));
    assert_int_equal(mstar_comm_num_tensors(c), 1);
    assert_mstar_ok(mstar_comm_force_cleanup_request(c, &rid));
    assert_int_equal(released, 3);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    /* Unknown requests are fine. */
    mstar_rid other = mstar_rid_from_int(999);
    assert_mstar_ok(mstar_comm_cleanup_request(c, &other));
    assert_mstar_ok(mstar_comm_force_cleanup_request(c, &other));
    mstar_comm_destroy(c);
}

static void test_bad_options(void **state)
{
    (void)state;
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    mstar_comm *c;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    o.entity = "../x";
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    o.entity = "custom_entity"; /* no fixed index */
    o.transport = MSTAR_TRANSPORT_LOCAL;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    o.entity_index = 1234;
    assert_mstar_ok(mstar_comm_create(&o, &c));
    mstar_comm_destroy(c);
    o.transport = (mstar_transport_kind)17;
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    o.transport = MSTAR_TRANSPORT_DEFAULT;
    setenv("MSTAR_SHM_ARENA", "maybe", 1);
    assert_mstar_status(mstar_comm_create(&o, &c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_SHM_ARENA"));
    unsetenv("MSTAR_SHM_ARENA");
    mstar_transport_kind k;
    assert_mstar_ok(mstar_transport_kind_from_name("Arena", &k));
    assert_int_equal(k, MSTAR_TRANSPORT_ARENA);
    assert_mstar_status(mstar_transport_kind_from_name("ucx", &k), MSTAR_EINVAL);
    /* A bad sharding config. */
    o.transport = MSTAR_TRANSPORT_LOCAL;
    assert_mstar_ok(mstar_comm_create(&o, &c));
    const char *sigs[1] = { "x" };
    int32_t dims[1] = { 9 };
    mstar_sharding_config cfg = { 1, sigs, dims };
    mstar_rid rid = mstar_rid_from_int(1);
    assert_mstar_status(mstar_comm_register_request(c, &rid, &cfg), MSTAR_EINVAL);
    assert_mstar_status(mstar_comm_arena_stats(c, &(mstar_arena_stats){ 0 }), MSTAR_ENOTSUP);
    mstar_comm_destroy(c);
}

/* design.md "Transfer statistics": TX records per edge name at registration. */
static void test_tx_info(void **state)
{
    (void)state;
    mstar_comm *c = local_comm();
    mstar_rid rid = mstar_rid_from_int(8);
    released = 0;
    mstar_tensor_id u = store_one(c, &rid, "sig");
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_tensor_info(c, u, &info));
    assert_mstar_ok(mstar_comm_register_for_send(c, &rid, &info, 1));
    assert_mstar_ok(mstar_comm_register_for_send(c, &rid, &info, 1)); /* once per uuid */
    mstar_tx_info *tx;
    uint32_t n;
    assert_mstar_ok(mstar_comm_get_tx_info(c, &rid, &tx, &n));
    assert_int_equal(n, 1);
    assert_string_equal(tx[0].edge_name, "sig");
    assert_int_equal(tx[0].count, 1);
    assert_int_equal(tx[0].num_bytes, 8);
    free(tx);
    mstar_tensor_id missing = u + 77;
    info.uuid = missing;
    assert_mstar_status(mstar_comm_register_for_send(c, &rid, &info, 1), MSTAR_ENOENT);
    mstar_comm_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors),
        cmocka_unit_test(test_ownership),
        cmocka_unit_test(test_canonical_layout),
        cmocka_unit_test(test_batch_columns),
        cmocka_unit_test(test_output_ref_counts),
        cmocka_unit_test(test_negative_refs_and_unpersist),
        cmocka_unit_test(test_bad_acks),
        cmocka_unit_test(test_unpersist_grants_acks),
        cmocka_unit_test(test_soft_and_force_cleanup),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_tx_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
