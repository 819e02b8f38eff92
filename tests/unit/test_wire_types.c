/*
 * test_wire_types.c — the wire's C values without the codec: request ids, descriptor defaults and
 * validation, edges and message builders (ownership is checked by the ASan build).
 */
#include "mstar_test.h"
#include "wire_samples.h"

#include <stdio.h>
#include <string.h>

/* A valid float32 [2, 3] descriptor from worker_0. */
static mstar_tensor_info make_info(void)
{
    mstar_tensor_info info;
    mstar_test_small_info(mstar_id_make(100, 1), &info);
    return info;
}

static void test_rid(void **state)
{
    (void)state;
    mstar_rid a = mstar_rid_from_int(5), b, c;
    char buf[MSTAR_RID_STRLEN];
    assert_false(a.is_str);
    assert_string_equal(mstar_rid_format(&a, buf), "5");
    assert_mstar_ok(mstar_rid_from_str("5", &b));
    assert_true(b.is_str);
    assert_string_equal(mstar_rid_format(&b, buf), "5");
    assert_false(mstar_rid_equal(&a, &b)); /* 5 != "5", as in the reference */
    assert_mstar_ok(mstar_rid_from_str("req-1:a.b", &c));
    assert_string_equal(c.str, "req-1:a.b");
    mstar_rid c2;
    assert_mstar_ok(mstar_rid_from_str("req-1:a.b", &c2));
    assert_true(mstar_rid_equal(&c, &c2));
    assert_int_equal(mstar_rid_hash(&c), mstar_rid_hash(&c2));
    mstar_rid a2 = mstar_rid_from_int(5);
    assert_true(mstar_rid_equal(&a, &a2));
    assert_int_equal(mstar_rid_hash(&a), mstar_rid_hash(&a2));
    mstar_rid neg = mstar_rid_from_int(INT64_MIN);
    assert_string_equal(mstar_rid_format(&neg, buf), "-9223372036854775808");

    char longname[MSTAR_NAME_MAX + 2];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_mstar_status(mstar_rid_from_str(longname, &b), MSTAR_EINVAL);
    longname[MSTAR_NAME_MAX] = '\0';
    assert_mstar_ok(mstar_rid_from_str(longname, &b));
    assert_mstar_status(mstar_rid_from_str("a/b", &b), MSTAR_EINVAL);
    assert_mstar_status(mstar_rid_from_str("..", &b), MSTAR_EINVAL);
    assert_mstar_status(mstar_rid_from_str("", &b), MSTAR_EINVAL);
    assert_mstar_status(mstar_rid_from_str(NULL, &b), MSTAR_EINVAL);
}

static void test_info_defaults_and_valid(void **state)
{
    (void)state;
    mstar_tensor_info info;
    memset(&info, 0xab, sizeof(info));
    mstar_tensor_info_init(&info);
    assert_int_equal(info.source_tp_size, 1);
    assert_int_equal(info.source_tp_rank, 0);
    assert_int_equal(info.ndim, 0);
    assert_int_equal(info.remote_key_len, 0);
    assert_string_equal(info.shm_segment, "");
    /* No dtype and no entity yet. */
    assert_mstar_status(mstar_tensor_info_validate(&info), MSTAR_EPROTO);

    info = make_info();
    assert_mstar_ok(mstar_tensor_info_validate(&info));
    /* Zero-size and 0-dim tensors are valid. */
    info.dims[0] = 0;
    info.nbytes = 0;
    assert_mstar_ok(mstar_tensor_info_validate(&info));
    info.ndim = 0;
    info.nbytes = 4;
    assert_mstar_ok(mstar_tensor_info_validate(&info));
    info.nbytes = 0;
    assert_mstar_status(mstar_tensor_info_validate(&info), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "tensor_info.nbytes"));
}

/* Apply `mutate` to a valid descriptor; validation must fail naming `field`. */
static void expect_invalid(void (*mutate)(mstar_tensor_info *), const char *field)
{
    mstar_tensor_info info = make_info();
    mutate(&info);
    mstar_status st = mstar_tensor_info_validate(&info);
    if (st != MSTAR_EPROTO)
        fail_msg("%s: got %s", field, mstar_status_name(st));
    if (strstr(mstar_last_error(), field) == NULL)
        fail_msg("'%s' does not name %s", mstar_last_error(), field);
}

static void m_ndim9(mstar_tensor_info *i)
{
    i->ndim = 9;
}
static void m_ndim_neg(mstar_tensor_info *i)
{
    i->ndim = -1;
}
static void m_dim_neg(mstar_tensor_info *i)
{
    i->dims[1] = -3;
}
static void m_stride_neg(mstar_tensor_info *i)
{
    i->stride[0] = -1;
}
static void m_dtype(mstar_tensor_info *i)
{
    i->dtype = (mstar_dtype)99;
}
static void m_nbytes(mstar_tensor_info *i)
{
    i->nbytes = 25;
}
static void m_numel_overflow(mstar_tensor_info *i)
{
    i->dims[0] = INT64_C(1) << 40;
    i->dims[1] = INT64_C(1) << 30;
}
static void m_bytes_overflow(mstar_tensor_info *i)
{
    i->dims[0] = INT64_C(1) << 31;
    i->dims[1] = INT64_C(1) << 31; /* 2^62 elements fit, 2^64 bytes do not */
}
static void m_zero_hides_overflow(mstar_tensor_info *i)
{
    i->ndim = 3;
    i->dims[0] = INT64_C(1) << 40;
    i->dims[1] = 0;
    i->dims[2] = INT64_C(1) << 40;
    i->nbytes = 0;
}
static void m_offset_overflow(mstar_tensor_info *i)
{
    i->offset = UINT64_MAX - 10;
}
static void m_shm_offset_overflow(mstar_tensor_info *i)
{
    i->shm_offset = UINT64_MAX - 10;
}
static void m_address_overflow(mstar_tensor_info *i)
{
    i->address = UINT64_MAX - 4;
}
static void m_tp_size(mstar_tensor_info *i)
{
    i->source_tp_size = 0;
}
static void m_tp_rank(mstar_tensor_info *i)
{
    i->source_tp_size = 2;
    i->source_tp_rank = 2;
}
static void m_tp_rank_neg(mstar_tensor_info *i)
{
    i->source_tp_rank = -1;
}
static void m_entity_empty(mstar_tensor_info *i)
{
    i->source_entity[0] = '\0';
}
static void m_entity_slash(mstar_tensor_info *i)
{
    strcpy(i->source_entity, "worker/0");
}
static void m_segment_dotdot(mstar_tensor_info *i)
{
    strcpy(i->shm_segment, "mstar_..seg");
}
static void m_session_bad_byte(mstar_tensor_info *i)
{
    strcpy(i->source_session_id, "host\n:1");
}
static void m_node_unterminated(mstar_tensor_info *i)
{
    memset(i->source_node_name, 'n', sizeof(i->source_node_name));
}
static void m_walk_space(mstar_tensor_info *i)
{
    strcpy(i->source_graph_walk, "a walk");
}
static void m_remote_key(mstar_tensor_info *i)
{
    i->remote_key_len = MSTAR_REMOTE_KEY_MAX + 1;
}

static void test_info_invalid(void **state)
{
    (void)state;
    expect_invalid(m_ndim9, "tensor_info.dims: 9 entries, at most 8");
    expect_invalid(m_ndim_neg, "tensor_info.dims");
    expect_invalid(m_dim_neg, "tensor_info.dims[1]: -3");
    expect_invalid(m_stride_neg, "tensor_info.stride[0]");
    expect_invalid(m_dtype, "tensor_info.dtype");
    expect_invalid(m_nbytes, "tensor_info.nbytes: 25");
    expect_invalid(m_numel_overflow, "tensor_info.dims[1]");
    expect_invalid(m_bytes_overflow, "tensor_info.dims");
    expect_invalid(m_zero_hides_overflow, "tensor_info.dims[2]");
    expect_invalid(m_offset_overflow, "tensor_info.offset");
    expect_invalid(m_shm_offset_overflow, "tensor_info.shm_offset");
    expect_invalid(m_address_overflow, "tensor_info.address");
    expect_invalid(m_tp_size, "tensor_info.source_tp_size");
    expect_invalid(m_tp_rank, "tensor_info.source_tp_rank: 2, must be in 0..1");
    expect_invalid(m_tp_rank_neg, "tensor_info.source_tp_rank");
    expect_invalid(m_entity_empty, "tensor_info.source_entity is empty");
    expect_invalid(m_entity_slash, "tensor_info.source_entity has byte 0x2f");
    expect_invalid(m_segment_dotdot, "tensor_info.shm_segment contains '..'");
    expect_invalid(m_session_bad_byte, "tensor_info.source_session_id has byte 0x0a");
    expect_invalid(m_node_unterminated, "tensor_info._source_node_name: not NUL-terminated");
    expect_invalid(m_walk_space, "tensor_info._source_graph_walk has byte 0x20");
    expect_invalid(m_remote_key, "tensor_info.remote_key");
    assert_mstar_status(mstar_tensor_info_validate(NULL), MSTAR_EINVAL);
}

static void test_edge(void **state)
{
    (void)state;
    mstar_edge e, copy;
    memset(&e, 0x5a, sizeof(e));
    mstar_edge_init(&e);
    assert_int_equal(e.total_fanin, 1);
    assert_int_equal(e.shard_dim, -1);
    assert_null(e.tensor_info);
    assert_int_equal(e.ntensors, 0);
    strcpy(e.name, "hidden");
    strcpy(e.next_node, "decoder");
    e.persist = true;
    e.total_fanin = 2;
    e.shard_dim = 1;

    /* Copy of a signal-only edge allocates nothing. */
    assert_mstar_ok(mstar_edge_copy(&copy, &e));
    assert_null(copy.tensor_info);
    assert_string_equal(copy.name, "hidden");
    mstar_edge_clear(&copy);

    mstar_tensor_info info = make_info();
    for (uint32_t i = 0; i < 37; i++) {
        info.uuid = mstar_id_make(100, i + 1);
        assert_mstar_ok(mstar_edge_add_tensor(&e, &info));
    }
    assert_int_equal(e.ntensors, 37);
    assert_mstar_ok(mstar_edge_copy(&copy, &e));
    assert_ptr_not_equal(copy.tensor_info, e.tensor_info);
    assert_int_equal(copy.ntensors, 37);
    assert_int_equal(copy.total_fanin, 2);
    assert_int_equal(copy.shard_dim, 1);
    assert_true(copy.persist);
    for (uint32_t i = 0; i < 37; i++)
        assert_int_equal(copy.tensor_info[i].uuid, mstar_id_make(100, i + 1));
    /* The copy can grow on its own. */
    assert_mstar_ok(mstar_edge_add_tensor(&copy, &info));
    assert_int_equal(copy.ntensors, 38);
    copy.tensor_info[0].nbytes = 0;
    assert_int_equal(e.tensor_info[0].nbytes, 24);
    mstar_edge_clear(&copy);
    assert_int_equal(copy.ntensors, 0);
    assert_null(copy.tensor_info);
    mstar_edge_clear(&e);
    assert_int_equal(e.total_fanin, 1);
    assert_string_equal(e.name, "");
}

static void test_msg_type_names(void **state)
{
    (void)state;
    assert_null(mstar_msg_type_name(MSTAR_MSG_INVALID));
    assert_null(mstar_msg_type_name(MSTAR_MSG_TYPE_COUNT_));
    assert_null(mstar_msg_type_name((mstar_msg_type)-1));
    assert_string_equal(mstar_msg_type_name(MSTAR_MSG_INPUT_SIGNALS), "INPUT_SIGNALS");
    assert_string_equal(mstar_msg_type_name(MSTAR_MSG_RESULT_TENSORS), "result_tensors");
    assert_string_equal(mstar_msg_type_name(MSTAR_MSG_REQUEST_COMPLETE), "request_complete");
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        const char *name = mstar_msg_type_name((mstar_msg_type)t);
        assert_non_null(name);
        for (int u = 1; u < t; u++)
            assert_string_not_equal(name, mstar_msg_type_name((mstar_msg_type)u));
    }
}

static void test_msg_builders(void **state)
{
    (void)state;
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    assert_string_equal(m.text, "default");
    mstar_msg_clear(&m);
    assert_int_equal(m.type, MSTAR_MSG_INVALID);
    assert_string_equal(m.text, "");

    mstar_msg_init(&m, MSTAR_MSG_WORKER_GRAPHS_DONE);
    assert_string_equal(m.text, "");
    mstar_edge e;
    mstar_edge_init(&e);
    strcpy(e.name, "out");
    mstar_tensor_info info = make_info();
    assert_mstar_ok(mstar_edge_add_tensor(&e, &info));
    assert_mstar_ok(mstar_msg_add_edge(&m, &e));
    mstar_edge_clear(&e); /* the message holds its own copy */
    assert_int_equal(m.nedges, 1);
    assert_int_equal(m.edges[0].ntensors, 1);
    assert_int_equal(m.edges[0].tensor_info[0].nbytes, 24);

    for (int i = 0; i < 300; i++) {
        assert_mstar_ok(mstar_msg_add_count(&m, (mstar_tensor_id)i, i + 1));
        assert_mstar_ok(mstar_msg_add_uuid(&m, (mstar_tensor_id)i * 7));
        assert_mstar_ok(mstar_msg_add_int(&m, -i));
    }
    for (int i = 0; i < 300; i++) {
        assert_int_equal(m.counts[i].uuid, i);
        assert_int_equal(m.counts[i].count, i + 1);
        assert_int_equal(m.uuids[i], (uint64_t)i * 7);
        assert_int_equal(m.ints[i], -i);
    }
    assert_mstar_ok(mstar_msg_add_name(&m, "producer_a"));
    assert_mstar_status(mstar_msg_add_name(&m, "bad/name"), MSTAR_EINVAL);
    assert_mstar_status(mstar_msg_add_name(&m, NULL), MSTAR_EINVAL);
    assert_int_equal(m.nnames, 1);
    assert_string_equal(m.names[0], "producer_a");

    mstar_rid rid = mstar_rid_from_int(9), bad;
    assert_mstar_ok(mstar_msg_add_rid(&m, &rid));
    assert_mstar_ok(mstar_rid_from_str("req_2", &rid));
    assert_mstar_ok(mstar_msg_add_rid(&m, &rid));
    bad = rid;
    strcpy(bad.str, "x y");
    assert_mstar_status(mstar_msg_add_rid(&m, &bad), MSTAR_EINVAL);
    assert_int_equal(m.nrids, 2);
    assert_true(m.rids[1].is_str);

    mstar_rx_info rx = { "sig", "worker_1", "worker_0", 2, 48, 0.5 };
    mstar_tx_info tx = { "sig", "worker_0", 1, 24, 0.25 };
    assert_mstar_ok(mstar_msg_add_rx(&m, &rx));
    assert_mstar_ok(mstar_msg_add_tx(&m, &tx));
    assert_string_equal(m.rx[0].dest_entity, "worker_0");
    assert_int_equal(m.tx[0].num_bytes, 24);

    assert_int_equal(mstar_msg_get_kv(&m, "seed", -1), -1);
    assert_mstar_ok(mstar_msg_add_kv(&m, "seed", 42));
    assert_mstar_ok(mstar_msg_add_kv(&m, "prompt_len", 7));
    assert_mstar_ok(mstar_msg_add_kv(&m, "seed", 43)); /* replaces */
    assert_int_equal(m.nkv, 2);
    assert_int_equal(mstar_msg_get_kv(&m, "seed", -1), 43);
    assert_int_equal(mstar_msg_get_kv(&m, "prompt_len", -1), 7);
    assert_int_equal(mstar_msg_get_kv(&m, NULL, -5), -5);
    char longkey[80];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    assert_mstar_status(mstar_msg_add_kv(&m, longkey, 1), MSTAR_EINVAL);
    longkey[64] = '\0';
    assert_mstar_status(mstar_msg_add_kv(&m, longkey, 1), MSTAR_EINVAL);
    longkey[63] = '\0'; /* 63 bytes: the longest key */
    assert_mstar_ok(mstar_msg_add_kv(&m, longkey, 1));
    assert_mstar_status(mstar_msg_add_kv(&m, "a..b", 1), MSTAR_EINVAL);
    for (int i = (int)m.nkv; i < MSTAR_WIRE_MAX_KV; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_mstar_ok(mstar_msg_add_kv(&m, key, i));
    }
    assert_mstar_status(mstar_msg_add_kv(&m, "one_more", 1), MSTAR_ENOSPC);
    assert_mstar_ok(mstar_msg_add_kv(&m, "seed", 44)); /* replacing needs no room */
    mstar_msg_clear(&m);
    assert_int_equal(m.nedges, 0);
    assert_null(m.edges);
    assert_null(m.kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rid),
        cmocka_unit_test(test_info_defaults_and_valid),
        cmocka_unit_test(test_info_invalid),
        cmocka_unit_test(test_edge),
        cmocka_unit_test(test_msg_type_names),
        cmocka_unit_test(test_msg_builders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
