/*
 * test_wire_codec.c — round trips of the wire format: descriptors (every kind, int and string
 * request ids, zero-size and 0-dim tensors, remote keys), edges, and every message type with
 * every field populated and with defaults; the encoder's own rejections (MSTAR_EINVAL).
 *
 * With MSTAR_WIRE_CORPUS_DIR set, the encoded samples are also written there: that is how the
 * seed corpus of tests/fuzz/fuzz_wire_decode.c (tests/fuzz/corpus/fuzz_wire_decode/) is made.
 */
#include "mstar_test.h"
#include "wire/wire_internal.h"
#include "wire_samples.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void assert_no_diff(const char *diff, const char *what)
{
    if (diff != NULL)
        fail_msg("%s: field %s differs after a round trip", what, diff);
}

/* `info` encodes, and decodes to what it was; returns the encoded length. *has_stride (may be
 * NULL) says whether the encoding carries strides. */
static size_t info_roundtrip(const mstar_tensor_info *info, const char *what, bool *has_stride)
{
    mstar_tensor_info back;
    void *buf;
    size_t len;
    assert_mstar_ok(mstar_tensor_info_encode(info, &buf, &len));
    assert_mstar_ok(mstar_tensor_info_decode(buf, len, &back));
    assert_no_diff(mstar_test_info_diff(info, &back), what);
    if (has_stride != NULL)
        *has_stride = memmem(buf, len, "stride", 6) != NULL;
    free(buf);
    return len;
}

static void test_info_roundtrip(void **state)
{
    (void)state;
    for (int k = 0; k < MSTAR_TEST_INFO_KINDS_; k++) {
        mstar_tensor_info info;
        mstar_test_sample_info((mstar_test_info_kind)k, &info);
        bool has_stride;
        info_roundtrip(&info, "tensor_info", &has_stride);
        /* Strides travel only when they are not the contiguous layout of dims. */
        assert_int_equal(has_stride, k == MSTAR_TEST_INFO_FULL);
    }
}

/* The smallest descriptor the format allows is 48 bytes: the decoder's count check assumes no
 * descriptor is shorter. */
static void test_info_smallest(void **state)
{
    (void)state;
    mstar_tensor_info info;
    mstar_tensor_info_init(&info);
    info.dtype = MSTAR_DTYPE_BOOL;
    info.nbytes = 1;
    strcpy(info.source_entity, "a");
    assert_int_equal(info_roundtrip(&info, "smallest tensor_info", NULL), 48);
}

static void test_info_extremes(void **state)
{
    (void)state;
    mstar_tensor_info info;
    mstar_test_sample_info(MSTAR_TEST_INFO_FULL, &info);
    info.uuid = UINT64_MAX;
    info.remote_key_len = MSTAR_REMOTE_KEY_MAX;
    memset(info.remote_key, 0xff, sizeof(info.remote_key));
    info.address = UINT64_MAX - info.offset - info.nbytes; /* the last address that fits */
    info.shm_offset = info.address;
    memset(info.source_node_name, 'n', MSTAR_NAME_MAX);
    info.source_node_name[MSTAR_NAME_MAX] = '\0';
    info.ndim = MSTAR_MAX_NDIM;
    for (int i = 0; i < MSTAR_MAX_NDIM; i++)
        info.dims[i] = 1, info.stride[i] = 1000 + i;
    info.dims[0] = 24;
    info.nbytes = 48;
    info.address = 0;
    info.shm_offset = UINT64_MAX - info.offset - info.nbytes;
    info_roundtrip(&info, "extreme tensor_info", NULL);
}

static void test_edge_roundtrip(void **state)
{
    (void)state;
    mstar_edge edge, back;
    for (uint32_t n = 0; n < 6; n++) {
        mstar_test_sample_edge(n, &edge);
        void *buf;
        size_t len;
        assert_mstar_ok(mstar_edge_encode(&edge, &buf, &len));
        assert_mstar_ok(mstar_edge_decode(buf, len, &back));
        assert_no_diff(mstar_test_edge_diff(&edge, &back), "edge");
        free(buf);
        mstar_edge_clear(&back);
        mstar_edge_clear(&edge);
    }
    /* Defaults: a signal-only edge to EMPTY_DESTINATION. */
    mstar_edge_init(&edge);
    strcpy(edge.name, "eos");
    void *buf;
    size_t len;
    assert_mstar_ok(mstar_edge_encode(&edge, &buf, &len));
    assert_mstar_ok(mstar_edge_decode(buf, len, &back));
    assert_no_diff(mstar_test_edge_diff(&edge, &back), "default edge");
    assert_int_equal(back.total_fanin, 1);
    assert_int_equal(back.shard_dim, -1);
    assert_null(back.tensor_info);
    free(buf);
    mstar_edge_clear(&back);
}

/* Encode, decode, compare, and encode again: the bytes must be identical. */
static void roundtrip_msg(const mstar_msg *m, const char *what)
{
    void *buf, *buf2;
    size_t len, len2;
    mstar_msg back;
    assert_mstar_ok(mstar_msg_encode(m, &buf, &len));
    assert_mstar_ok(mstar_msg_decode(buf, len, &back));
    const char *diff = mstar_test_msg_diff(m, &back);
    if (diff != NULL)
        fail_msg("%s: field %s differs after a round trip", what, diff);
    assert_mstar_ok(mstar_msg_encode(&back, &buf2, &len2));
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    free(buf);
    free(buf2);
    mstar_msg_clear(&back);
}

static void test_msg_roundtrip_every_type(void **state)
{
    (void)state;
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        for (int full = 0; full <= 1; full++) {
            mstar_msg m;
            char what[64];
            mstar_test_sample_msg((mstar_msg_type)t, full, &m);
            snprintf(what, sizeof(what), "%s (%s)", mstar_msg_type_name((mstar_msg_type)t),
                     full ? "every field" : "defaults");
            roundtrip_msg(&m, what);
            mstar_msg_clear(&m);
        }
    }
}

static void test_msg_rids(void **state)
{
    (void)state;
    static const int64_t nums[] = { 0, 1, -1, 127, 128, -33, INT64_MAX, INT64_MIN };
    mstar_msg m;
    mstar_test_sample_msg(MSTAR_MSG_TENSOR_RECEIVED, true, &m);
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        m.request_id = mstar_rid_from_int(nums[i]);
        roundtrip_msg(&m, "integer request id");
    }
    char longest[MSTAR_NAME_MAX + 1];
    memset(longest, 'r', MSTAR_NAME_MAX);
    longest[MSTAR_NAME_MAX] = '\0';
    const char *strs[] = { "a", "5", "req-1:part.2", longest };
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
        assert_mstar_ok(mstar_rid_from_str(strs[i], &m.request_id));
        roundtrip_msg(&m, "string request id");
    }
    /* "5" and 5 stay distinct through the wire. */
    void *buf;
    size_t len;
    mstar_msg back;
    assert_mstar_ok(mstar_rid_from_str("5", &m.request_id));
    assert_mstar_ok(mstar_msg_encode(&m, &buf, &len));
    assert_mstar_ok(mstar_msg_decode(buf, len, &back));
    mstar_rid five = mstar_rid_from_int(5);
    assert_false(mstar_rid_equal(&back.request_id, &five));
    assert_true(back.request_id.is_str);
    free(buf);
    mstar_msg_clear(&back);
    mstar_msg_clear(&m);
}

/* A message with many descriptors and large arrays (the hash-map duplicate checks). */
static void test_msg_large(void **state)
{
    (void)state;
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_TENSOR_RECEIVED);
    strcpy(m.from, "worker_7");
    for (int i = 0; i < 5000; i++) {
        assert_mstar_ok(mstar_msg_add_count(&m, mstar_id_make(107, (uint64_t)i + 1), i % 3 + 1));
        assert_mstar_ok(mstar_msg_add_uuid(&m, mstar_id_make(108, (uint64_t)i + 1)));
    }
    roundtrip_msg(&m, "5000-entry TENSOR_RECEIVED");
    mstar_msg_clear(&m);

    mstar_msg_init(&m, MSTAR_MSG_WORKER_GRAPHS_DONE);
    strcpy(m.from, "worker_7");
    mstar_edge e;
    mstar_edge_init(&e);
    mstar_tensor_info info;
    mstar_test_sample_info(MSTAR_TEST_INFO_MINIMAL, &info);
    for (int s = 0; s < 40; s++) {
        snprintf(e.name, sizeof(e.name), "signal_%d", s);
        assert_mstar_ok(mstar_msg_add_edge(&m, &e));
        for (int i = 0; i < 50; i++) {
            info.uuid = mstar_id_make(107, (uint64_t)(s * 50 + i + 1));
            assert_mstar_ok(mstar_edge_add_tensor(&m.edges[s], &info));
        }
    }
    roundtrip_msg(&m, "2000-descriptor WORKER_GRAPHS_DONE");
    mstar_msg_clear(&m);
}

/* Encoding into a kept buffer (mstar__msg_encode_into, the mesh's) gives mstar_msg_encode's
 * bytes; the buffer grows for a larger message, is reused as it is for a smaller one, and stays
 * the caller's, unchanged, when the encoder refuses a message. */
static void test_msg_encode_into(void **state)
{
    (void)state;
    mstar_msg small, big;
    mstar_test_sample_msg(MSTAR_MSG_TENSOR_RECEIVED, true, &small);
    mstar_msg_init(&big, MSTAR_MSG_TENSOR_RECEIVED);
    strcpy(big.from, "worker_7");
    for (int i = 0; i < 1000; i++)
        assert_mstar_ok(mstar_msg_add_count(&big, mstar_id_make(107, (uint64_t)i + 1), 1));
    const mstar_msg *order[3] = { &small, &big, &small };
    size_t caps[3];
    void *buf = NULL;
    size_t cap = 0;
    for (int k = 0; k < 3; k++) {
        void *want;
        size_t len, want_len;
        assert_mstar_ok(mstar__msg_encode_into(order[k], &buf, &cap, &len));
        assert_mstar_ok(mstar_msg_encode(order[k], &want, &want_len));
        assert_int_equal(len, want_len);
        assert_memory_equal(buf, want, len);
        free(want);
        caps[k] = cap;
    }
    assert_true(caps[1] > caps[0]);
    assert_int_equal(caps[2], caps[1]);
    void *kept = buf;
    size_t len;
    small.counts[1].count = 0;
    assert_mstar_status(mstar__msg_encode_into(&small, &buf, &cap, &len), MSTAR_EINVAL);
    assert_ptr_equal(buf, kept);
    assert_int_equal(cap, caps[1]);
    free(buf);
    mstar_msg_clear(&small);
    mstar_msg_clear(&big);
}

/* Appending to a decoded message works (the decoder allocates by the builders' growth rule). */
static void test_decoded_msg_grows(void **state)
{
    (void)state;
    mstar_msg m, back;
    mstar_test_sample_msg(MSTAR_MSG_INPUT_SIGNALS, true, &m);
    void *buf;
    size_t len;
    assert_mstar_ok(mstar_msg_encode(&m, &buf, &len));
    assert_mstar_ok(mstar_msg_decode(buf, len, &back));
    free(buf);
    for (int i = 0; i < 20; i++) {
        assert_mstar_ok(mstar_msg_add_edge(&back, &m.edges[0]));
        assert_mstar_ok(mstar_edge_add_tensor(&back.edges[0], &m.edges[0].tensor_info[0]));
        char name[32];
        snprintf(name, sizeof(name), "extra_%d", i);
        assert_mstar_ok(mstar_msg_add_name(&back, name));
        assert_mstar_ok(mstar_msg_add_kv(&back, name, i));
    }
    assert_int_equal(back.nedges, m.nedges + 20);
    assert_int_equal(back.edges[0].ntensors, m.edges[0].ntensors + 20);
    mstar_msg_clear(&back);
    mstar_msg_clear(&m);
}

/* ---- the encoder refuses what a decoder would reject ------------------------------------------
 */

static void expect_einval(const mstar_msg *m, const char *needle)
{
    void *buf = (void *)0x1;
    size_t len = 0;
    assert_mstar_status(mstar_msg_encode(m, &buf, &len), MSTAR_EINVAL);
    if (strstr(mstar_last_error(), needle) == NULL)
        fail_msg("'%s' does not name '%s'", mstar_last_error(), needle);
    assert_ptr_equal(buf, (void *)0x1); /* nothing handed out */
}

static void test_encode_rejects(void **state)
{
    (void)state;
    mstar_msg m;

    mstar_test_sample_msg(MSTAR_MSG_TENSOR_RECEIVED, true, &m);
    m.counts[1].count = 0;
    expect_einval(&m, "TENSOR_RECEIVED.body.successful_tensors[1]: count 0");
    m.counts[1].count = 1;
    m.counts[2].uuid = m.counts[0].uuid;
    expect_einval(&m, "TENSOR_RECEIVED.body.successful_tensors[2]: duplicate uuid");
    m.counts[2].uuid = 99;
    m.from[0] = '\0';
    expect_einval(&m, "TENSOR_RECEIVED.from is empty");
    strcpy(m.from, "worker_0");
    m.type = (mstar_msg_type)99;
    expect_einval(&m, "message.type: invalid message type 99");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_UNPERSIST_TENSORS, true, &m);
    m.counts[0].count = -1;
    expect_einval(&m, "UNPERSIST_TENSORS.body.uuid_to_ref_count[0]: count -1");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_INPUT_SIGNALS, true, &m);
    m.edges[0].tensor_info[1].nbytes += 1;
    expect_einval(&m, "INPUT_SIGNALS.body.inputs[0].tensor_info[1].nbytes");
    m.edges[0].tensor_info[1].nbytes -= 1;
    m.edges[1].shard_dim = 8;
    expect_einval(&m, "INPUT_SIGNALS.body.inputs[1]._shard_dim");
    m.edges[1].shard_dim = -1;
    strcpy(m.names[1], m.names[0]);
    expect_einval(&m, "INPUT_SIGNALS.body.producer_done[1]: duplicate name");
    strcpy(m.names[1], "x");
    m.text[0] = '\0';
    expect_einval(&m, "INPUT_SIGNALS.body.partition_name is empty");
    strcpy(m.text, "default");
    strcpy(m.kv[1].key, m.kv[0].key);
    expect_einval(&m, "INPUT_SIGNALS.body.request_info[1]: duplicate key");
    strcpy(m.kv[1].key, "k/1");
    expect_einval(&m, "INPUT_SIGNALS.body.request_info[1] has byte 0x2f");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_RESULT_TENSORS, true, &m);
    m.nedges = 0;
    expect_einval(&m, "result_tensors.body.graph_edge: 0 edges, exactly one");
    m.nedges = 1;
    m.text[0] = '\0';
    expect_einval(&m, "result_tensors.body.modality is empty");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_WORKER_GRAPHS_DONE, true, &m);
    m.rx[0].time_s = -1;
    expect_einval(&m, "WORKER_GRAPHS_DONE.body.rx_info[0].time");
    m.rx[0].time_s = 0;
    m.tx[1].num_bytes = -5;
    expect_einval(&m, "WORKER_GRAPHS_DONE.body.tx_info[1].num_bytes");
    m.tx[1].num_bytes = 0;
    mstar_edge dup;
    assert_mstar_ok(mstar_edge_copy(&dup, &m.edges[0]));
    assert_mstar_ok(mstar_msg_add_edge(&m, &dup));
    mstar_edge_clear(&dup);
    expect_einval(&m, "WORKER_GRAPHS_DONE.body.persist_signals[1]: duplicate signal name");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_FAIL_REQUESTS, false, &m);
    m.nrids = 0;
    expect_einval(&m, "FAIL_REQUESTS.body.request_ids: empty");
    m.nrids = 1;
    strcpy(m.text, "tab\there");
    expect_einval(&m, "FAIL_REQUESTS.body.reason: byte 0x09");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_RANK_VALUES, true, &m);
    m.rank = 4;
    expect_einval(&m, "RANK_VALUES.body.rank: 4, must be below world_size 4");
    m.world_size = 0;
    m.rank = 0;
    expect_einval(&m, "RANK_VALUES.body.world_size: 0");
    mstar_msg_clear(&m);

    mstar_test_sample_msg(MSTAR_MSG_REMOVE_REQUEST, true, &m);
    m.remove_source = (mstar_remove_source)3;
    expect_einval(&m, "REMOVE_REQUEST.body.source: 3");
    m.remove_source = MSTAR_REMOVE_FROM_CONDUCTOR;
    m.request_id.is_str = true;
    strcpy(m.request_id.str, "a..b");
    expect_einval(&m, "REMOVE_REQUEST.body.request_id contains '..'");
    mstar_msg_clear(&m);

    mstar_tensor_info info;
    mstar_test_sample_info(MSTAR_TEST_INFO_FULL, &info);
    info.source_tp_rank = 4;
    void *buf;
    size_t len;
    assert_mstar_status(mstar_tensor_info_encode(&info, &buf, &len), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "tensor_info.source_tp_rank: 4"));
    mstar_edge edge;
    mstar_test_sample_edge(2, &edge);
    edge.total_fanin = 0;
    assert_mstar_status(mstar_edge_encode(&edge, &buf, &len), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "edge._total_fanin: 0"));
    mstar_edge_clear(&edge);
    assert_mstar_status(mstar_edge_encode(NULL, &buf, &len), MSTAR_EINVAL);
    assert_mstar_status(mstar_msg_encode(NULL, &buf, &len), MSTAR_EINVAL);
}

/* ---- the seed corpus ------------------------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const void *buf, size_t len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

/* Every sample encodes; with MSTAR_WIRE_CORPUS_DIR set they are written out as the corpus. */
static void test_samples_as_corpus(void **state)
{
    (void)state;
    const char *dir = getenv("MSTAR_WIRE_CORPUS_DIR");
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        for (int full = 0; full <= 1; full++) {
            mstar_msg m;
            void *buf;
            size_t len;
            mstar_test_sample_msg((mstar_msg_type)t, full, &m);
            assert_mstar_ok(mstar_msg_encode(&m, &buf, &len));
            if (dir != NULL && dir[0] != '\0') {
                char name[64];
                snprintf(name, sizeof(name), "%s_%s", mstar_msg_type_name((mstar_msg_type)t),
                         full ? "full" : "min");
                write_file(dir, name, buf, len);
            }
            free(buf);
            mstar_msg_clear(&m);
        }
    }
    /* The stand-alone descriptor and edge encodings seed their decoders too. */
    mstar_tensor_info info;
    mstar_edge edge;
    void *buf;
    size_t len;
    mstar_test_sample_info(MSTAR_TEST_INFO_FULL, &info);
    assert_mstar_ok(mstar_tensor_info_encode(&info, &buf, &len));
    if (dir != NULL && dir[0] != '\0')
        write_file(dir, "tensor_info_full", buf, len);
    free(buf);
    mstar_test_sample_edge(2, &edge);
    assert_mstar_ok(mstar_edge_encode(&edge, &buf, &len));
    if (dir != NULL && dir[0] != '\0')
        write_file(dir, "edge_full", buf, len);
    free(buf);
    mstar_edge_clear(&edge);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_roundtrip),
        cmocka_unit_test(test_info_smallest),
        cmocka_unit_test(test_info_extremes),
        cmocka_unit_test(test_edge_roundtrip),
        cmocka_unit_test(test_msg_roundtrip_every_type),
        cmocka_unit_test(test_msg_rids),
        cmocka_unit_test(test_msg_large),
        cmocka_unit_test(test_decoded_msg_grows),
        cmocka_unit_test(test_msg_encode_into),
        cmocka_unit_test(test_encode_rejects),
        cmocka_unit_test(test_samples_as_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
