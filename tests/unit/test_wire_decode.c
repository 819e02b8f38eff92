/*
 * test_wire_decode.c — the strict decoder: every class of bad input returns MSTAR_EPROTO with a
 * message naming the field, leaves the output cleared and leaks nothing (ASan build); and the
 * forms a peer may legitimately send (fields in another order, unknown keys, nil for None, the
 * signed int encodings) are accepted.
 *
 * Bad inputs are made by editing valid encodings: a small walker (below) finds each value of an
 * encoded message by its field path — the same path the decoder's errors print — and the tests
 * replace, remove, duplicate or insert map entries there. Because msgpack containers count
 * elements rather than bytes, such splices stay well-formed unless a test wants otherwise.
 */
#include "mstar_test.h"
#include "wire_samples.h"

#include "wire/codec.h"

#include <math.h>
#include <msgpuck.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- locating values by field path ------------------------------------------------------------
 */

typedef struct wnode {
    char path[320];
    size_t key;    /* offset of the entry's key in a map; == value for array elements and root */
    size_t value;  /* offset of the value */
    size_t end;    /* one past the value */
    size_t parent; /* offset of the enclosing container's header; SIZE_MAX for the root */
    bool is_bool;
} wnode;

#define MAX_NODES 4096
static wnode nodes[MAX_NODES];
static int nnodes;

/* Maps whose keys are data (uuids, signal names, metadata keys): their values are "[i]". */
static bool is_data_map(const char *key, uint32_t len)
{
    static const char *const data_maps[] = { "successful_tensors", "uuid_to_ref_count",
                                             "initial_signals",    "persist_signals",
                                             "request_info",       "input_metadata",
                                             "metadata",           "info" };
    for (size_t i = 0; i < sizeof(data_maps) / sizeof(data_maps[0]); i++) {
        if (strlen(data_maps[i]) == len && memcmp(data_maps[i], key, len) == 0)
            return true;
    }
    return false;
}

static void walk(const char *base, const char **p, const char *path, size_t key, size_t parent,
                 bool data_children, const char *type_name)
{
    assert_true(nnodes < MAX_NODES);
    int idx = nnodes++;
    wnode *n = &nodes[idx];
    snprintf(n->path, sizeof(n->path), "%s", path);
    n->key = key;
    n->value = (size_t)(*p - base);
    n->parent = parent;
    n->is_bool = mp_typeof(**p) == MP_BOOL;
    size_t hdr = (size_t)(*p - base);
    char child[320];
    if (mp_typeof(**p) == MP_MAP) {
        uint32_t count = mp_decode_map(p);
        for (uint32_t i = 0; i < count; i++) {
            size_t k = (size_t)(*p - base);
            const char *s = "";
            uint32_t len = 0;
            if (mp_typeof(**p) == MP_STR)
                s = mp_decode_str(p, &len);
            else
                mp_next(p);
            if (data_children)
                snprintf(child, sizeof(child), "%s[%u]", path, i);
            else if (strcmp(path, "message") == 0 && len == 4 && memcmp(s, "body", 4) == 0)
                snprintf(child, sizeof(child), "%s.body", type_name);
            else
                snprintf(child, sizeof(child), "%s.%.*s", path, (int)len, s);
            walk(base, p, child, k, hdr, !data_children && is_data_map(s, len), type_name);
        }
    } else if (mp_typeof(**p) == MP_ARRAY) {
        uint32_t count = mp_decode_array(p);
        for (uint32_t i = 0; i < count; i++) {
            snprintf(child, sizeof(child), "%s[%u]", path, i);
            walk(base, p, child, (size_t)(*p - base), hdr, false, type_name);
        }
    } else {
        mp_next(p);
    }
    nodes[idx].end = (size_t)(*p - base);
}

/* An encoded sample message and the index of its values. */
typedef struct sample {
    char *data;
    size_t len;
    mstar_msg msg;
} sample;

static sample load(mstar_msg_type type, bool full)
{
    sample s;
    mstar_test_sample_msg(type, full, &s.msg);
    assert_mstar_ok(mstar_msg_encode(&s.msg, (void **)&s.data, &s.len));
    nnodes = 0;
    const char *p = s.data;
    walk(s.data, &p, "message", 0, SIZE_MAX, false, mstar_msg_type_name(type));
    assert_ptr_equal(p, s.data + s.len);
    return s;
}

static void unload(sample *s)
{
    free(s->data);
    mstar_msg_clear(&s->msg);
}

static const wnode *find(const char *path)
{
    for (int i = 0; i < nnodes; i++) {
        if (strcmp(nodes[i].path, path) == 0)
            return &nodes[i];
    }
    fail_msg("no value at %s", path);
    return NULL;
}

/* ---- editing an encoding ----------------------------------------------------------------------
 */

typedef struct bytes {
    char data[2048];
    size_t len;
} bytes;

static bytes fmt(const char *format, ...)
{
    bytes b;
    va_list ap;
    va_start(ap, format);
    b.len = mp_vformat(b.data, sizeof(b.data), format, ap);
    va_end(ap);
    assert_true(b.len <= sizeof(b.data));
    return b;
}

static bytes raw(const void *data, size_t len)
{
    bytes b;
    assert_true(len <= sizeof(b.data));
    memcpy(b.data, data, len);
    b.len = len;
    return b;
}

static char *memdup(const void *data, size_t len)
{
    char *p = malloc(len ? len : 1);
    assert_non_null(p);
    memcpy(p, data, len);
    return p;
}

/* buf[0..from) + ins + buf[to..len), newly allocated. */
static char *splice(const char *buf, size_t len, size_t from, size_t to, const void *ins,
                    size_t inslen, size_t *outlen)
{
    *outlen = len - (to - from) + inslen;
    char *out = malloc(*outlen ? *outlen : 1);
    assert_non_null(out);
    memcpy(out, buf, from);
    memcpy(out + from, ins, inslen);
    memcpy(out + from + inslen, buf + to, len - to);
    return out;
}

static size_t header_len(unsigned char c)
{
    if ((c & 0xe0) == 0x80) /* fixmap, fixarray */
        return 1;
    return c == 0xdc || c == 0xde ? 3 : 5;
}

/* Add `delta` to the count of the container whose header is at `hdr`, keeping its width. */
static void add_count(char *buf, size_t hdr, int delta)
{
    unsigned char c = (unsigned char)buf[hdr];
    const char *p = buf + hdr;
    bool map = mp_typeof(*p) == MP_MAP;
    uint32_t n = (map ? mp_decode_map(&p) : mp_decode_array(&p)) + delta;
    if ((c & 0xe0) == 0x80) {
        assert_true(n <= 15);
        buf[hdr] = (char)((c & 0xf0) | n);
    } else if (c == 0xdc || c == 0xde) {
        mp_store_u16(buf + hdr + 1, (uint16_t)n);
    } else {
        mp_store_u32(buf + hdr + 1, n);
    }
}

static char *replace_value(const sample *s, const char *path, bytes with, size_t *len)
{
    const wnode *n = find(path);
    return splice(s->data, s->len, n->value, n->end, with.data, with.len, len);
}

static char *replace_key(const sample *s, const char *path, bytes with, size_t *len)
{
    const wnode *n = find(path);
    return splice(s->data, s->len, n->key, n->value, with.data, with.len, len);
}

static char *remove_entry(const sample *s, const char *path, size_t *len)
{
    const wnode *n = find(path);
    char *out = splice(s->data, s->len, n->key, n->end, "", 0, len);
    add_count(out, n->parent, -1);
    return out;
}

static char *duplicate_entry(const sample *s, const char *path, size_t *len)
{
    const wnode *n = find(path);
    char *out = splice(s->data, s->len, n->end, n->end, s->data + n->key, n->end - n->key, len);
    add_count(out, n->parent, +1);
    return out;
}

/* Insert a whole entry (key and value bytes, or one array element) first in a container. */
static char *insert_entry(const sample *s, const char *container, bytes entry, size_t *len)
{
    const wnode *n = find(container);
    size_t at = n->value + header_len((unsigned char)s->data[n->value]);
    char *out = splice(s->data, s->len, at, at, entry.data, entry.len, len);
    add_count(out, n->value, +1);
    return out;
}

/* ---- expectations -----------------------------------------------------------------------------
 */

static void assert_cleared(const mstar_msg *m)
{
    assert_int_equal(m->type, MSTAR_MSG_INVALID);
    assert_int_equal(m->nedges + m->ncounts + m->nuuids + m->nnames + m->nrids + m->nints + m->nrx +
                         m->ntx + m->nkv,
                     0);
    assert_null(m->edges);
    assert_null(m->counts);
    assert_null(m->kv);
    assert_string_equal(m->from, "");
}

/* Decoding `buf` fails with MSTAR_EPROTO, naming `needle`; takes ownership of buf. */
static void expect_eproto(char *buf, size_t len, const char *needle)
{
    mstar_msg out;
    memset(&out, 0x5a, sizeof(out));
    mstar_status st = mstar_msg_decode(buf, len, &out);
    if (st != MSTAR_EPROTO)
        fail_msg("expected MSTAR_EPROTO naming '%s', got %s (%s)", needle, mstar_status_name(st),
                 mstar_last_error());
    if (strstr(mstar_last_error(), needle) == NULL)
        fail_msg("error '%s' does not contain '%s'", mstar_last_error(), needle);
    assert_cleared(&out);
    free(buf);
}

/* Decoding `buf` succeeds; returns the message (the caller clears it); takes ownership of buf. */
static mstar_msg expect_ok(char *buf, size_t len)
{
    mstar_msg out;
    mstar_status st = mstar_msg_decode(buf, len, &out);
    if (st != MSTAR_OK)
        fail_msg("decode failed: %s", mstar_last_error());
    free(buf);
    return out;
}

static void expect_same(char *buf, size_t len, const mstar_msg *want, const char *what)
{
    mstar_msg got = expect_ok(buf, len);
    const char *diff = mstar_test_msg_diff(want, &got);
    if (diff != NULL)
        fail_msg("%s: field %s differs", what, diff);
    mstar_msg_clear(&got);
}

#define D "INPUT_SIGNALS.body.inputs[0].tensor_info[0]"
#define E "INPUT_SIGNALS.body.inputs[0]"

/* ---- truncation -------------------------------------------------------------------------------
 */

static void test_truncated_every_offset(void **state)
{
    (void)state;
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        sample s = load((mstar_msg_type)t, true);
        for (size_t k = 0; k < s.len; k++) {
            char *prefix = malloc(k ? k : 1);
            memcpy(prefix, s.data, k);
            expect_eproto(prefix, k, k == 0 ? "message: empty input" : "truncated");
        }
        unload(&s);
    }
}

/* The same for the descriptor and edge readers on their own. */
static void test_truncated_reader_alone(void **state)
{
    (void)state;
    mstar_tensor_info info, out;
    mstar_test_sample_info(MSTAR_TEST_INFO_FULL, &info);
    void *buf;
    size_t len;
    assert_mstar_ok(mstar_tensor_info_encode(&info, &buf, &len));
    mstar__wpath root = mstar__wpath_key(NULL, "tensor_info");
    for (size_t k = 0; k < len; k++) {
        char *prefix = malloc(k ? k : 1);
        memcpy(prefix, buf, k);
        mstar__rd r;
        mstar__rd_init(&r, prefix, k);
        assert_int_equal(mstar__info_read(&r, &root, &out), MSTAR_EPROTO);
        assert_non_null(strstr(mstar_last_error(), "tensor_info"));
        free(prefix);
    }
    free(buf);

    mstar_edge edge, eout;
    mstar_test_sample_edge(3, &edge);
    assert_mstar_ok(mstar_edge_encode(&edge, &buf, &len));
    mstar_edge_clear(&edge);
    root = mstar__wpath_key(NULL, "edge");
    for (size_t k = 0; k < len; k++) {
        char *prefix = malloc(k ? k : 1);
        memcpy(prefix, buf, k);
        mstar__rd r;
        mstar__rd_init(&r, prefix, k);
        assert_int_equal(mstar__edge_read(&r, &root, &eout), MSTAR_EPROTO);
        assert_null(eout.tensor_info); /* a failed edge owns nothing */
        free(prefix);
    }
    free(buf);
}

static void test_empty_trailing_oversized(void **state)
{
    (void)state;
    sample s = load(MSTAR_MSG_READS_DONE, true);
    size_t len;
    char *longer = splice(s.data, s.len, s.len, s.len, "\xc0", 1, &len);
    expect_eproto(longer, len, "message: 1 bytes after the end of the value");
    expect_eproto(malloc(1), 0, "message: empty input");
    mstar_msg out;
    assert_mstar_status(mstar_msg_decode(s.data, (size_t)MSTAR_WIRE_MAX_MESSAGE + 1, &out),
                        MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "at most"));
    assert_cleared(&out);
    assert_mstar_status(mstar_msg_decode(NULL, 5, &out), MSTAR_EINVAL);
    assert_mstar_status(mstar_msg_decode(s.data, s.len, NULL), MSTAR_EINVAL);
    /* Not a map at all. */
    expect_eproto(memdup("\x93\x01\x02\x03", 4), 4, "message: expected a map, got an array");
    unload(&s);

    /* A valid edge or descriptor followed by more bytes: the decoded value is released and the
     * output cleared (a fuzzer finding). */
    mstar_edge edge, eout;
    mstar_test_sample_edge(2, &edge);
    char *buf;
    assert_mstar_ok(mstar_edge_encode(&edge, (void **)&buf, &len));
    mstar_edge_clear(&edge);
    char *padded = splice(buf, len, len, len, "\x01\x02", 2, &len);
    assert_mstar_status(mstar_edge_decode(padded, len, &eout), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "edge: 2 bytes after the end of the value"));
    assert_null(eout.tensor_info);
    assert_int_equal(eout.ntensors, 0);
    assert_string_equal(eout.name, "");
    free(buf);
    free(padded);
    mstar_tensor_info info, iout;
    mstar_test_sample_info(MSTAR_TEST_INFO_FULL, &info);
    assert_mstar_ok(mstar_tensor_info_encode(&info, (void **)&buf, &len));
    padded = splice(buf, len, len, len, "\xc0", 1, &len);
    assert_mstar_status(mstar_tensor_info_decode(padded, len, &iout), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "tensor_info: 1 bytes after the end of the value"));
    assert_int_equal(iout.nbytes, 0);
    assert_string_equal(iout.source_entity, "");
    free(buf);
    free(padded);
}

/* ---- wrong types --------------------------------------------------------------------------------
 */

/* Every value of every message, replaced by a value of another type (true, or 1 for a bool),
 * fails naming that value's path. */
static void test_wrong_type_every_field(void **state)
{
    (void)state;
    int checked = 0;
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        sample s = load((mstar_msg_type)t, true);
        for (int i = 1; i < nnodes; i++) {
            wnode n = nodes[i];
            bytes with = n.is_bool ? fmt("%u", 1u) : fmt("%b", true);
            size_t len;
            char *buf = replace_value(&s, n.path, with, &len);
            char needle[400];
            snprintf(needle, sizeof(needle), "%s: expected", n.path);
            expect_eproto(buf, len, needle);
            checked++;
        }
        unload(&s);
    }
    assert_true(checked > 300);
}

static void test_non_string_key(void **state)
{
    (void)state;
    sample s = load(MSTAR_MSG_INPUT_SIGNALS, true);
    size_t len;
    char *buf = insert_entry(&s, "INPUT_SIGNALS.body", fmt("%u%u", 7u, 7u), &len);
    expect_eproto(buf, len, "INPUT_SIGNALS.body: a key is an unsigned integer, expected a string");
    buf = insert_entry(&s, D, fmt("NIL%u", 7u), &len);
    expect_eproto(buf, len, D ": a key is nil");
    unload(&s);
}

/* ---- out-of-range values -----------------------------------------------------------------------
 */

static void expect_replaced(mstar_msg_type type, const char *path, bytes with, const char *needle)
{
    sample s = load(type, true);
    size_t len;
    char *buf = replace_value(&s, path, with, &len);
    expect_eproto(buf, len, needle);
    unload(&s);
}

static void test_descriptor_ranges(void **state)
{
    (void)state;
    const mstar_msg_type T = MSTAR_MSG_INPUT_SIGNALS;
    expect_replaced(T, D ".dims", fmt("[%d%d%d%d%d%d%d%d%d]", 1, 1, 1, 1, 1, 1, 1, 1, 1),
                    D ".dims: 9 entries, at most 8");
    expect_replaced(T, D ".dims", fmt("[%d%d%d]", -1, 3, 4), D ".dims[0]: -1, must be >= 0");
    expect_replaced(T, D ".dims", fmt("[%lld%lld%d]", 1LL << 40, 1LL << 40, 1),
                    D ".dims[1]: the shape's element count overflows");
    expect_replaced(T, D ".dims", fmt("[%lld%lld%d]", 1LL << 31, 1LL << 31, 1),
                    D ".dims: the byte size (elements × 2) overflows");
    expect_replaced(T, D ".dims", fmt("[%lld%d%lld]", 1LL << 40, 0, 1LL << 40),
                    D ".dims[2]: the shape's element count overflows");
    expect_replaced(T, D ".nbytes", fmt("%u", 47u), D ".nbytes: 47, but dims × bfloat16 make 48");
    expect_replaced(T, D ".nbytes", fmt("%llu", (unsigned long long)UINT64_MAX),
                    D ".nbytes: 18446744073709551615");
    expect_replaced(T, D ".offset", fmt("%llu", (unsigned long long)UINT64_MAX - 8),
                    D ".offset: 18446744073709551607 + nbytes 48 overflows");
    expect_replaced(T, D ".shm_offset", fmt("%llu", (unsigned long long)UINT64_MAX - 100),
                    D ".shm_offset:");
    expect_replaced(T, D ".address", fmt("%llu", (unsigned long long)UINT64_MAX - 100),
                    D ".address:");
    expect_replaced(T, D ".source_tp_rank", fmt("%d", 4), D ".source_tp_rank: 4, must be in 0..3");
    expect_replaced(T, D ".source_tp_rank", fmt("%d", -1), D ".source_tp_rank: -1");
    expect_replaced(T, D ".source_tp_size", fmt("%d", 0), D ".source_tp_size: 0");
    expect_replaced(T, D ".source_tp_size", fmt("%lld", 1LL << 40),
                    D ".source_tp_size: 1099511627776");
    expect_replaced(T, D ".uuid", fmt("%d", -1), D ".uuid: -1, must be >= 0");
    expect_replaced(T, D ".stride", fmt("[%d%d]", 1, 2), D ".stride: 2 entries, but dims has 3");
    expect_replaced(T, D ".stride", fmt("[%d%d%d]", 1, -2, 6), D ".stride[1]: -2, must be >= 0");
    expect_replaced(T, D ".dtype", fmt("%s", "float33"), D ".dtype: unknown dtype 'float33'");
    expect_replaced(T, D ".dtype", fmt("%s", ""), D ".dtype: unknown dtype ''");
    char key[MSTAR_REMOTE_KEY_MAX + 1 + 5];
    char *p = mp_encode_binl(key, MSTAR_REMOTE_KEY_MAX + 1);
    memset(p, 7, MSTAR_REMOTE_KEY_MAX + 1);
    expect_replaced(T, D ".remote_key", raw(key, (size_t)(p - key) + MSTAR_REMOTE_KEY_MAX + 1),
                    D ".remote_key: 1025 bytes, at most 1024");
}

/* The CUDA IPC reference: handles of exactly 64 bytes, a host name, a device and pid in range,
 * and a slice inside the segment; every key required. */
static void test_descriptor_cuda_ipc(void **state)
{
    (void)state;
    const mstar_msg_type T = MSTAR_MSG_INPUT_SIGNALS;
    char h[80];
    char *p = mp_encode_binl(h, MSTAR_IPC_HANDLE_BYTES - 1);
    memset(p, 1, MSTAR_IPC_HANDLE_BYTES - 1);
    expect_replaced(T, D ".cuda_ipc.mem", raw(h, (size_t)(p - h) + MSTAR_IPC_HANDLE_BYTES - 1),
                    D ".cuda_ipc.mem: 63 bytes, must be 64");
    p = mp_encode_binl(h, MSTAR_IPC_HANDLE_BYTES + 1);
    memset(p, 1, MSTAR_IPC_HANDLE_BYTES + 1);
    expect_replaced(T, D ".cuda_ipc.event", raw(h, (size_t)(p - h) + MSTAR_IPC_HANDLE_BYTES + 1),
                    D ".cuda_ipc.event: 65 bytes, must be 64");
    expect_replaced(T, D ".cuda_ipc.host", fmt("%s", ""), D ".cuda_ipc.host is empty");
    expect_replaced(T, D ".cuda_ipc.host", fmt("%s", "../boot"), D ".cuda_ipc.host");
    char longhost[MSTAR_HOST_ID_MAX + 2];
    memset(longhost, 'h', MSTAR_HOST_ID_MAX + 1);
    longhost[MSTAR_HOST_ID_MAX + 1] = '\0';
    expect_replaced(T, D ".cuda_ipc.host", fmt("%s", longhost),
                    D ".cuda_ipc.host: 64 bytes, at most 63");
    expect_replaced(T, D ".cuda_ipc.device", fmt("%d", -1), D ".cuda_ipc.device: -1");
    expect_replaced(T, D ".cuda_ipc.pid", fmt("%d", 0), D ".cuda_ipc.pid: 0");
    /* The sample's slice is offset 96 + nbytes 48 at segment_offset 1536 of 2 MiB. */
    expect_replaced(T, D ".cuda_ipc.segment_offset",
                    fmt("%llu", (unsigned long long)(2u << 20) - 143),
                    D ".cuda_ipc.segment_offset: 2097009 + offset 96 + nbytes 48 runs past");
    expect_replaced(T, D ".cuda_ipc.segment_offset",
                    fmt("%llu", (unsigned long long)UINT64_MAX - 100),
                    D ".cuda_ipc.segment_offset:");
    expect_replaced(T, D ".cuda_ipc.segment_size", fmt("%u", 1000u),
                    D ".cuda_ipc.segment_offset: 1536 + offset 96 + nbytes 48 runs past the "
                      "segment's 1000 bytes");
    /* The last byte of the slice on the segment's last byte is fine. */
    sample s = load(T, true);
    size_t len;
    char *buf = replace_value(&s, D ".cuda_ipc.segment_offset",
                              fmt("%llu", (unsigned long long)(2u << 20) - 144), &len);
    mstar_msg m = expect_ok(buf, len);
    assert_int_equal(m.edges[0].tensor_info[0].cuda_ipc.segment_offset, (2u << 20) - 144);
    mstar_msg_clear(&m);
    unload(&s);
}

static void test_edge_and_message_ranges(void **state)
{
    (void)state;
    expect_replaced(MSTAR_MSG_INPUT_SIGNALS, E "._total_fanin", fmt("%d", 0), E "._total_fanin: 0");
    expect_replaced(MSTAR_MSG_INPUT_SIGNALS, E "._shard_dim", fmt("%d", 8),
                    E "._shard_dim: 8, must be in 0..7");
    expect_replaced(MSTAR_MSG_INPUT_SIGNALS, E "._shard_dim", fmt("%d", -1), E "._shard_dim: -1");
    expect_replaced(MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED.body.successful_tensors[1]",
                    fmt("%d", 0),
                    "TENSOR_RECEIVED.body.successful_tensors[1]: count 0 for uuid "
                    "0x0067000000000002, must be >= 1");
    expect_replaced(MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED.body.failed_tensor_ids[0]",
                    fmt("%d", -3), "TENSOR_RECEIVED.body.failed_tensor_ids[0]: -3, must be >= 0");
    expect_replaced(MSTAR_MSG_UNPERSIST_TENSORS, "UNPERSIST_TENSORS.body.uuid_to_ref_count[0]",
                    fmt("%d", -1), "UNPERSIST_TENSORS.body.uuid_to_ref_count[0]: count -1");
    expect_replaced(MSTAR_MSG_REMOVE_REQUEST, "REMOVE_REQUEST.body.source", fmt("%d", 3),
                    "REMOVE_REQUEST.body.source: 3, must be in 0..2");
    expect_replaced(MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.world_size", fmt("%d", 0),
                    "RANK_VALUES.body.world_size: 0");
    expect_replaced(MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.rank", fmt("%d", 4),
                    "RANK_VALUES.body.rank: 4, must be below world_size 4");
    expect_replaced(MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.round", fmt("%d", -1),
                    "RANK_VALUES.body.round: -1, must be >= 0");
    expect_replaced(MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.rx_info[0].count",
                    fmt("%d", -1), "WORKER_GRAPHS_DONE.body.rx_info[0].count: -1");
    expect_replaced(MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.rx_info[0].time",
                    fmt("%lf", -0.5), "WORKER_GRAPHS_DONE.body.rx_info[0].time: -0.5");
    expect_replaced(MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.tx_info[1].time",
                    fmt("%lf", NAN), "WORKER_GRAPHS_DONE.body.tx_info[1].time: nan");
    expect_replaced(MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.tx_info[0].num_bytes",
                    fmt("%d", -2), "WORKER_GRAPHS_DONE.body.tx_info[0].num_bytes: -2");
    expect_replaced(MSTAR_MSG_NEW_REQUEST, "NEW_REQUEST.body.request_id", fmt("%llu", 1ULL << 63),
                    "NEW_REQUEST.body.request_id: 9223372036854775808 does not fit");
    expect_replaced(MSTAR_MSG_FAIL_REQUESTS, "FAIL_REQUESTS.body.request_ids", fmt("[]"),
                    "FAIL_REQUESTS.body.request_ids: empty");
    expect_replaced(MSTAR_MSG_RESULT_TENSORS, "result_tensors.body.modality", fmt("%s", ""),
                    "result_tensors.body.modality is empty");
    expect_replaced(MSTAR_MSG_READS_DONE, "message.v", fmt("%u", 2u),
                    "message.v: version 2, this build speaks 1");
    expect_replaced(MSTAR_MSG_READS_DONE, "message.v", fmt("%u", 0u), "message.v: version 0");
    expect_replaced(MSTAR_MSG_READS_DONE, "message.type", fmt("%s", "NOPE"),
                    "message.type: unknown message type 'NOPE'");
    expect_replaced(MSTAR_MSG_READS_DONE, "message.type", fmt("%s", "a/b\n"),
                    "message.type: unknown message type (4 bytes, not a name)");

    /* At most MSTAR_WIRE_MAX_KV metadata entries. */
    char kv[2048];
    char *p = mp_encode_map(kv, MSTAR_WIRE_MAX_KV + 1);
    for (int i = 0; i <= MSTAR_WIRE_MAX_KV; i++) {
        char k[16];
        snprintf(k, sizeof(k), "k%d", i);
        p = mp_encode_str(p, k, (uint32_t)strlen(k));
        p = mp_encode_uint(p, (uint64_t)i);
    }
    expect_replaced(MSTAR_MSG_HELLO, "HELLO.body.info", raw(kv, (size_t)(p - kv)),
                    "HELLO.body.info: 65 entries, at most 64");
    char longkey[65];
    memset(longkey, 'k', 64);
    longkey[64] = '\0';
    expect_replaced(MSTAR_MSG_HELLO, "HELLO.body.info", fmt("{%s%d}", longkey, 1),
                    "HELLO.body.info[0]: key of 64 bytes, at most 63");
}

/* Container headers that claim more than the input holds: nothing is allocated for them. */
static void test_huge_counts(void **state)
{
    (void)state;
    /* A hostile 6-byte input (design.md "Dependencies"): a map32 claiming 176 M entries. */
    expect_eproto(memdup("\xdf\x0a\x7d\x8c\x00\x80", 6), 6, "message: 176000000 entries, at most");
    /* Headers that msgpuck's mp_check miscounts (its pending count is an int: 2^31 map entries
     * wrap it to zero, an array of 2^31 - 1 overflows it). */
    expect_eproto(memdup("\xdf\x80\x00\x00\x00", 5), 5, "message: 2147483648 entries, at most");
    expect_eproto(memdup("\xdd\x7f\xff\xff\xff", 5), 5, "message: expected a map, got an array");
    expect_replaced(MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED.body.successful_tensors",
                    raw("\xdf\x80\x00\x00\x00", 5),
                    "TENSOR_RECEIVED.body.successful_tensors: 2147483648 entries, at most 65536");
    expect_replaced(MSTAR_MSG_HELLO, "HELLO.body.info", raw("\xdf\x80\x00\x00\x00", 5),
                    "HELLO.body.info: 2147483648 entries, at most 64");
    /* Inside the limit, more than the bytes present. */
    expect_replaced(MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED.body.failed_tensor_ids",
                    raw("\xdc\xea\x60\x01", 4),
                    "TENSOR_RECEIVED.body.failed_tensor_ids: claims 60000 entries but only");
    expect_replaced(MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.inputs",
                    raw("\xdc\x0f\xa0\x80", 4),
                    "INPUT_SIGNALS.body.inputs: claims 4000 entries but only");

    /* The reader alone: a count within the limit that the bytes present cannot hold. */
    char buf[128] = { 0 };
    char *p = mp_encode_array(buf, 60000);
    memset(p, 0x01, sizeof(buf) - (size_t)(p - buf));
    mstar__rd r;
    mstar__rd_init(&r, buf, sizeof(buf));
    mstar__wpath root = mstar__wpath_key(NULL, "inputs[0].tensor_info");
    mstar_edge edge;
    mstar_edge_init(&edge);
    assert_int_equal(mstar__infos_read(&r, &root, &edge), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "inputs[0].tensor_info: claims 60000 entries but "
                                               "only 125 bytes follow"));
    assert_null(edge.tensor_info);
    /* Over the per-message descriptor budget. */
    char big[512] = { 0 };
    mp_encode_array(big, 4);
    mstar__rd_init(&r, big, sizeof(big));
    r.tensors_left = 3;
    assert_int_equal(mstar__infos_read(&r, &root, &edge), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "past the message's limit of 65536"));
    assert_null(edge.tensor_info);
    /* An unknown key's value is skipped as strictly. */
    sample s = load(MSTAR_MSG_INPUT_SIGNALS, true);
    size_t len;
    char entry[16];
    p = mp_encode_str(entry, "zz", 2);
    memcpy(p, "\xdd\x7f\xff\xff\xff", 5);
    char *bad = insert_entry(&s, "INPUT_SIGNALS.body", raw(entry, (size_t)(p - entry) + 5), &len);
    expect_eproto(bad, len, "INPUT_SIGNALS.body: an array claims 2147483647 entries but only");
    unload(&s);
    mstar__rd_init(&r, "\x91\x81\xa1k\xdf\xff\xff\xff\xf0\x01", 10);
    root = mstar__wpath_key(NULL, "skipped");
    assert_int_equal(mstar__rd_skip(&r, &root), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "skipped: a map claims 4294967280 entries"));
    /* Extension types are not part of the format, even in an unknown field. */
    s = load(MSTAR_MSG_INPUT_SIGNALS, true);
    p = mp_encode_str(entry, "zz", 2);
    memcpy(p, "\xd4\x01\x02", 3);
    bad = insert_entry(&s, "INPUT_SIGNALS.body", raw(entry, (size_t)(p - entry) + 3), &len);
    expect_eproto(bad, len, "INPUT_SIGNALS.body: byte 0xd4: an extension or reserved byte");
    unload(&s);
    /* The input the fuzzer found: its tail held an array32 of 2^31 - 1 entries. */
    s = load(MSTAR_MSG_RESULT_TENSORS, true);
    char *grown = splice(s.data, s.len, s.len, s.len, "\xdd\x7f\xff\xff\xff", 5, &len);
    expect_eproto(grown, len, "message: 5 bytes after the end of the value");
    unload(&s);
}

/* ---- names --------------------------------------------------------------------------------------
 */

static void test_bad_names(void **state)
{
    (void)state;
    static const struct {
        mstar_msg_type type;
        const char *path;
        bool may_be_empty;
    } fields[] = {
        { MSTAR_MSG_INPUT_SIGNALS, "message.from", false },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.request_id", false },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.graph_walk", true },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.partition_name", false },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.producer_done[1]", false },
        { MSTAR_MSG_INPUT_SIGNALS, D ".source_entity", false },
        { MSTAR_MSG_INPUT_SIGNALS, D ".source_session_id", true },
        { MSTAR_MSG_INPUT_SIGNALS, D ".shm_segment", true },
        { MSTAR_MSG_INPUT_SIGNALS, D "._source_node_name", true },
        { MSTAR_MSG_INPUT_SIGNALS, D "._source_graph_walk", true },
        { MSTAR_MSG_INPUT_SIGNALS, E ".next_node", true },
        { MSTAR_MSG_INPUT_SIGNALS, E ".name", false },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.rx_info[0].dest_entity", false },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.tx_info[1].edge_name", false },
        { MSTAR_MSG_RESULT_TENSORS, "result_tensors.body.modality", false },
        { MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.group", false },
        { MSTAR_MSG_FAIL_REQUESTS, "FAIL_REQUESTS.body.request_ids[1]", false },
    };
    char longest[MSTAR_NAME_MAX + 2];
    memset(longest, 'n', sizeof(longest) - 1);
    longest[sizeof(longest) - 1] = '\0';
    static const struct {
        const char *value;
        size_t len;
        const char *says;
    } bad[] = {
        { "a/b", 3, "has byte 0x2f at 1" },
        { "..", 2, "contains '..'" },
        { "x..y", 4, "contains '..'" },
        { ".", 1, "is '.'" },
        { "a b", 3, "has byte 0x20" },
        { "a\0b", 3, "has byte 0x00" },
        { "\xff", 1, "has byte 0xff" },
        { "", 0, "is empty" },
        { NULL, 0, "is 256 bytes, at most 255" },
    };
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
        for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            if (bad[b].len == 0 && bad[b].value != NULL && fields[f].may_be_empty)
                continue;
            sample s = load(fields[f].type, true);
            bytes with = bad[b].value != NULL ? fmt("%.*s", (int)bad[b].len, bad[b].value)
                                              : fmt("%s", longest);
            size_t len;
            char *buf = replace_value(&s, fields[f].path, with, &len);
            char needle[400];
            snprintf(needle, sizeof(needle), "%s %s", fields[f].path, bad[b].says);
            expect_eproto(buf, len, needle);
            unload(&s);
        }
    }
    /* Names that are map keys. */
    sample s = load(MSTAR_MSG_WORKER_GRAPHS_DONE, true);
    size_t len;
    char *buf =
        replace_key(&s, "WORKER_GRAPHS_DONE.body.persist_signals[0]", fmt("%s", "../x"), &len);
    expect_eproto(buf, len, "WORKER_GRAPHS_DONE.body.persist_signals[0] contains '..'");
    unload(&s);
    s = load(MSTAR_MSG_INPUT_SIGNALS, true);
    buf = replace_key(&s, "INPUT_SIGNALS.body.request_info[2]", fmt("%s", "a/b"), &len);
    expect_eproto(buf, len, "INPUT_SIGNALS.body.request_info[2] has byte 0x2f");
    unload(&s);
    /* Reasons are free text, but printable. */
    s = load(MSTAR_MSG_ABORT_REQUEST, true);
    buf = replace_value(&s, "ABORT_REQUEST.body.reason", fmt("%s", "line\nbreak"), &len);
    expect_eproto(buf, len, "ABORT_REQUEST.body.reason: byte 0x0a at 4");
    buf = replace_value(&s, "ABORT_REQUEST.body.reason", fmt("%s", longest), &len);
    expect_eproto(buf, len, "ABORT_REQUEST.body.reason: 256 bytes, at most 255");
    unload(&s);
}

/* ---- duplicates and missing fields --------------------------------------------------------------
 */

/* A full sample of `type` edited at `path`, and the part of the error that names the edit. */
typedef struct edit_case {
    mstar_msg_type type;
    const char *path;
    const char *needle;
} edit_case;

/* For each case, the decoder refuses the sample `edit` made (MSTAR_EPROTO naming the needle). */
static void expect_each_refused(char *(*edit)(const sample *s, const char *path, size_t *len),
                                const edit_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sample s = load(cases[i].type, true);
        size_t len;
        char *buf = edit(&s, cases[i].path, &len);
        expect_eproto(buf, len, cases[i].needle);
        unload(&s);
    }
}

static void test_duplicates(void **state)
{
    (void)state;
    static const edit_case cases[] = {
        { MSTAR_MSG_INPUT_SIGNALS, "message.v", "message: duplicate key 'v'" },
        { MSTAR_MSG_INPUT_SIGNALS, "message.type", "message: duplicate key 'type'" },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.request_id",
          "INPUT_SIGNALS.body: duplicate key 'request_id'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".dims", D ": duplicate key 'dims'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".shm_segment", D ": duplicate key 'shm_segment'" },
        { MSTAR_MSG_INPUT_SIGNALS, E ".name", E ": duplicate key 'name'" },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.rx_info[0].count",
          "WORKER_GRAPHS_DONE.body.rx_info[0]: duplicate key 'count'" },
        { MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED.body.successful_tensors[1]",
          "TENSOR_RECEIVED.body.successful_tensors[2]: duplicate uuid" },
        { MSTAR_MSG_UNPERSIST_TENSORS, "UNPERSIST_TENSORS.body.uuid_to_ref_count[0]",
          "UNPERSIST_TENSORS.body.uuid_to_ref_count[1]: duplicate uuid" },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.request_info[0]",
          "INPUT_SIGNALS.body.request_info[1]: duplicate key" },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.persist_signals[0]",
          "WORKER_GRAPHS_DONE.body.persist_signals[1]: duplicate signal name" },
        { MSTAR_MSG_CONDUCTOR_NEW_REQUEST, "CONDUCTOR_NEW_REQUEST.body.initial_signals[2]",
          "CONDUCTOR_NEW_REQUEST.body.initial_signals[3]: duplicate signal name" },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS.body.producer_done[0]",
          "INPUT_SIGNALS.body.producer_done[1]: duplicate name" },
    };
    expect_each_refused(duplicate_entry, cases, sizeof(cases) / sizeof(cases[0]));
    /* 40 signal names: the hash-map path of the duplicate check. */
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_WORKER_GRAPHS_DONE);
    strcpy(m.from, "worker_1");
    mstar_edge e;
    mstar_edge_init(&e);
    for (int i = 0; i < 40; i++) {
        snprintf(e.name, sizeof(e.name), "s%d", i);
        assert_mstar_ok(mstar_msg_add_edge(&m, &e));
    }
    strcpy(m.edges[39].name, "dup");
    strcpy(m.edges[38].name, "dup");
    char *buf;
    size_t len;
    assert_mstar_status(mstar_msg_encode(&m, (void **)&buf, &len), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "persist_signals[39]: duplicate signal name"));
    mstar_msg_clear(&m);
}

static void test_missing_required(void **state)
{
    (void)state;
    static const edit_case cases[] = {
        { MSTAR_MSG_READS_DONE, "message.v", "message: missing required field 'v'" },
        { MSTAR_MSG_READS_DONE, "message.type", "message: missing required field 'type'" },
        { MSTAR_MSG_READS_DONE, "message.from", "message: missing required field 'from'" },
        { MSTAR_MSG_READS_DONE, "READS_DONE.body", "message: missing required field 'body'" },
        { MSTAR_MSG_READS_DONE, "READS_DONE.body.request_id",
          "READS_DONE.body: missing required field 'request_id'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".uuid", D ": missing required field 'uuid'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".dims", D ": missing required field 'dims'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".dtype", D ": missing required field 'dtype'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".nbytes", D ": missing required field 'nbytes'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".source_entity",
          D ": missing required field 'source_entity'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".cuda_ipc.mem", D ".cuda_ipc: missing required field 'mem'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".cuda_ipc.pid", D ".cuda_ipc: missing required field 'pid'" },
        { MSTAR_MSG_INPUT_SIGNALS, D ".cuda_ipc.segment_size",
          D ".cuda_ipc: missing required field 'segment_size'" },
        { MSTAR_MSG_INPUT_SIGNALS, E ".next_node", E ": missing required field 'next_node'" },
        { MSTAR_MSG_INPUT_SIGNALS, E ".name", E ": missing required field 'name'" },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.rx_info[1].dest_entity",
          "WORKER_GRAPHS_DONE.body.rx_info[1]: missing required field 'dest_entity'" },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE.body.tx_info[0].time",
          "WORKER_GRAPHS_DONE.body.tx_info[0]: missing required field 'time'" },
        { MSTAR_MSG_RESULT_TENSORS, "result_tensors.body.modality",
          "result_tensors.body: missing required field 'modality'" },
        { MSTAR_MSG_RESULT_TENSORS, "result_tensors.body.graph_edge",
          "result_tensors.body: missing required field 'graph_edge'" },
        { MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.group",
          "RANK_VALUES.body: missing required field 'group'" },
        { MSTAR_MSG_RANK_VALUES, "RANK_VALUES.body.world_size",
          "RANK_VALUES.body: missing required field 'world_size'" },
        { MSTAR_MSG_FAIL_REQUESTS, "FAIL_REQUESTS.body.request_ids",
          "FAIL_REQUESTS.body: missing required field 'request_ids'" },
    };
    expect_each_refused(remove_entry, cases, sizeof(cases) / sizeof(cases[0]));
}

/* ---- what peers may legitimately send
 * ------------------------------------------------------------ */

/* The body before the version and type: decoded after them (and equal). */
static void test_body_first(void **state)
{
    (void)state;
    for (int t = 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        sample s = load((mstar_msg_type)t, true);
        char path[64];
        snprintf(path, sizeof(path), "%s.body", mstar_msg_type_name((mstar_msg_type)t));
        const wnode *body = find(path);
        bytes entry = raw(s.data + body->key, body->end - body->key);
        size_t len1, len2;
        char *without = remove_entry(&s, path, &len1);
        size_t at = header_len((unsigned char)without[0]); /* first in the root map */
        char *reordered = splice(without, len1, at, at, entry.data, entry.len, &len2);
        add_count(reordered, 0, +1);
        free(without);
        expect_same(reordered, len2, &s.msg, path);
        unload(&s);
    }
    /* A message of another version is reported as such even when its body comes first and
     * would not parse as this version's body. */
    bytes b = fmt("{%s[%d%d%d]%s%u%s%s%s%s}", "body", 1, 2, 3, "v", 2u, "type", "READS_DONE",
                  "from", "worker_0");
    expect_eproto(memdup(b.data, b.len), b.len, "message.v: version 2, this build speaks 1");
    /* With the right version the same body is reported against its type. */
    b = fmt("{%s[%d%d%d]%s%u%s%s%s%s}", "body", 1, 2, 3, "v", 1u, "type", "READS_DONE", "from",
            "worker_0");
    expect_eproto(memdup(b.data, b.len), b.len, "READS_DONE.body: expected a map, got an array");
}

static void test_unknown_keys_skipped(void **state)
{
    (void)state;
    static const char *const maps[] = {
        "message", "INPUT_SIGNALS.body", D, E, "INPUT_SIGNALS.body.inputs[1]",
    };
    /* A future field with a nested value of every kind. */
    char future[256];
    char *p = mp_encode_str(future, "zz_future", 9);
    p = mp_encode_map(p, 2);
    p = mp_encode_str(p, "a", 1);
    p = mp_encode_array(p, 6);
    p = mp_encode_uint(p, 1);
    p = mp_encode_double(p, 2.5);
    p = mp_encode_nil(p);
    p = mp_encode_str(p, "x", 1);
    p = mp_encode_bin(p, "\x00\x01", 2);
    p = mp_encode_map(p, 1);
    p = mp_encode_str(p, "b", 1);
    p = mp_encode_bool(p, true);
    p = mp_encode_str(p, "c", 1);
    p = mp_encode_int(p, -5);
    bytes entry = raw(future, (size_t)(p - future));
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        sample s = load(MSTAR_MSG_INPUT_SIGNALS, true);
        size_t len;
        char *buf = insert_entry(&s, maps[i], entry, &len);
        expect_same(buf, len, &s.msg, maps[i]);
        unload(&s);
    }
    sample s = load(MSTAR_MSG_WORKER_GRAPHS_DONE, true);
    size_t len;
    char *buf = insert_entry(&s, "WORKER_GRAPHS_DONE.body.rx_info[0]", entry, &len);
    expect_same(buf, len, &s.msg, "rx_info");
    /* A field another type has is unknown here, and skipped too. */
    buf = insert_entry(&s, "WORKER_GRAPHS_DONE.body", fmt("%s%s", "modality", "image"), &len);
    expect_same(buf, len, &s.msg, "another type's field");
    unload(&s);
}

static void test_peer_encodings_accepted(void **state)
{
    (void)state;
    sample s = load(MSTAR_MSG_INPUT_SIGNALS, true);
    size_t len;
    char *buf;
    /* Positive values in the signed int family, and small ones in wide forms. */
    buf = replace_value(&s, D ".nbytes", raw("\xd3\x00\x00\x00\x00\x00\x00\x00\x30", 9), &len);
    expect_same(buf, len, &s.msg, "int64-encoded nbytes");
    buf = replace_value(&s, D ".source_tp_rank", raw("\xcf\x00\x00\x00\x00\x00\x00\x00\x03", 9),
                        &len);
    expect_same(buf, len, &s.msg, "uint64-encoded rank");
    /* torch's repr of a dtype. */
    buf = replace_value(&s, D ".dtype", fmt("%s", "torch.bfloat16"), &len);
    expect_same(buf, len, &s.msg, "torch.bfloat16");
    /* partition_name "default" spelled out equals its absence. */
    buf = replace_value(&s, "INPUT_SIGNALS.body.partition_name", fmt("%s", "default"), &len);
    mstar_msg got = expect_ok(buf, len);
    assert_string_equal(got.text, "default");
    mstar_msg_clear(&got);
    buf = remove_entry(&s, "INPUT_SIGNALS.body.partition_name", &len);
    got = expect_ok(buf, len);
    assert_string_equal(got.text, "default");
    mstar_msg_clear(&got);
    /* None for the optional names and the shard dim. */
    buf = replace_value(&s, D ".shm_segment", fmt("NIL"), &len);
    got = expect_ok(buf, len);
    assert_string_equal(got.edges[0].tensor_info[0].shm_segment, "");
    mstar_msg_clear(&got);
    buf = replace_value(&s, D "._source_node_name", fmt("NIL"), &len);
    got = expect_ok(buf, len);
    assert_string_equal(got.edges[0].tensor_info[0].source_node_name, "");
    mstar_msg_clear(&got);
    buf = replace_value(&s, E "._shard_dim", fmt("NIL"), &len);
    got = expect_ok(buf, len);
    assert_int_equal(got.edges[0].shard_dim, -1);
    mstar_msg_clear(&got);
    /* A string request id of the longest length, an int one in the int family. */
    buf = replace_value(&s, "INPUT_SIGNALS.body.request_id", raw("\xd0\xf0", 2), &len);
    got = expect_ok(buf, len);
    assert_false(got.request_id.is_str);
    assert_int_equal(got.request_id.num, -16);
    mstar_msg_clear(&got);
    unload(&s);

    /* Times as float32 and as integers. */
    s = load(MSTAR_MSG_WORKER_GRAPHS_DONE, true);
    buf = replace_value(&s, "WORKER_GRAPHS_DONE.body.rx_info[0].time", fmt("%f", 0.5f), &len);
    got = expect_ok(buf, len);
    assert_true(got.rx[0].time_s == 0.5);
    mstar_msg_clear(&got);
    buf = replace_value(&s, "WORKER_GRAPHS_DONE.body.tx_info[0].time", fmt("%d", 3), &len);
    got = expect_ok(buf, len);
    assert_true(got.tx[0].time_s == 3.0);
    mstar_msg_clear(&got);
    unload(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_every_offset),
        cmocka_unit_test(test_truncated_reader_alone),
        cmocka_unit_test(test_empty_trailing_oversized),
        cmocka_unit_test(test_wrong_type_every_field),
        cmocka_unit_test(test_non_string_key),
        cmocka_unit_test(test_descriptor_ranges),
        cmocka_unit_test(test_descriptor_cuda_ipc),
        cmocka_unit_test(test_edge_and_message_ranges),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_names),
        cmocka_unit_test(test_duplicates),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_body_first),
        cmocka_unit_test(test_unknown_keys_skipped),
        cmocka_unit_test(test_peer_encodings_accepted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
