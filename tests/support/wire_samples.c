/*
 * wire_samples.c — see wire_samples.h.
 */
#include "wire_samples.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void must(mstar_status st, const char *what)
{
    if (st != MSTAR_OK) {
        fprintf(stderr, "wire_samples: %s: %s\n", what, mstar_last_error());
        abort();
    }
}

void mstar_test_sample_info(mstar_test_info_kind kind, mstar_tensor_info *out)
{
    mstar_tensor_info_init(out);
    strcpy(out->source_entity, "worker_3");
    switch (kind) {
    case MSTAR_TEST_INFO_FULL:
        out->uuid = mstar_id_make(103, 7);
        out->dtype = MSTAR_DTYPE_BFLOAT16;
        out->ndim = 3;
        out->dims[0] = 2, out->dims[1] = 3, out->dims[2] = 4;
        out->stride[0] = 1, out->stride[1] = 2, out->stride[2] = 6; /* a transposed producer */
        out->nbytes = 2 * 3 * 4 * 2;
        out->address = UINT64_C(0x7f0000001000);
        out->offset = 96;
        out->source_tp_size = 4;
        out->source_tp_rank = 3;
        out->shm_offset = 4096;
        strcpy(out->source_session_id, "host-1:5000");
        strcpy(out->shm_segment, "mstar_arena_1234_0");
        strcpy(out->source_node_name, "vision_encoder");
        strcpy(out->source_graph_walk, "walk.main");
        out->remote_key_len = 100;
        for (uint32_t i = 0; i < out->remote_key_len; i++)
            out->remote_key[i] = (uint8_t)(i * 37 + 1);
        strcpy(out->cuda_ipc.host_id, "0b6f2c1e-7d4a-4c55-9a0e-3f1d2b8c9e71");
        for (int i = 0; i < MSTAR_IPC_HANDLE_BYTES; i++) {
            out->cuda_ipc.mem_handle[i] = (uint8_t)(i * 13 + 5);
            out->cuda_ipc.event_handle[i] = (uint8_t)(255 - i);
        }
        out->cuda_ipc.segment_size = 2u << 20;
        out->cuda_ipc.segment_offset = 1536;
        out->cuda_ipc.device = 1;
        out->cuda_ipc.pid = 4242;
        break;
    case MSTAR_TEST_INFO_MINIMAL:
        out->uuid = mstar_id_make(103, 8);
        out->dtype = MSTAR_DTYPE_FLOAT32;
        out->ndim = 1;
        out->dims[0] = 5;
        out->stride[0] = 1;
        out->nbytes = 20;
        break;
    case MSTAR_TEST_INFO_ZERO_DIM:
        out->uuid = mstar_id_make(103, 9);
        out->dtype = MSTAR_DTYPE_INT64;
        out->nbytes = 8;
        break;
    case MSTAR_TEST_INFO_ZERO_SIZE:
    case MSTAR_TEST_INFO_KINDS_:
        out->uuid = mstar_id_make(103, 10);
        out->dtype = MSTAR_DTYPE_FLOAT16;
        out->ndim = 2;
        out->dims[0] = 0, out->dims[1] = 7;
        out->stride[0] = 7, out->stride[1] = 1;
        out->nbytes = 0;
        break;
    }
}

void mstar_test_small_info(mstar_tensor_id uuid, mstar_tensor_info *out)
{
    mstar_tensor_info_init(out);
    out->uuid = uuid;
    out->dtype = MSTAR_DTYPE_FLOAT32;
    out->ndim = 2;
    out->dims[0] = 2, out->dims[1] = 3;
    out->stride[0] = 3, out->stride[1] = 1;
    out->nbytes = 24;
    strcpy(out->source_entity, "worker_0");
}

void mstar_test_sample_edge(uint32_t ntensors, mstar_edge *out)
{
    mstar_edge_init(out);
    strcpy(out->next_node, "decoder");
    strcpy(out->name, "hidden_states");
    out->persist = true;
    out->is_streaming = true;
    out->persist_for_loop = true;
    out->total_fanin = 2;
    out->shard_dim = 1;
    for (uint32_t i = 0; i < ntensors; i++) {
        mstar_tensor_info info;
        mstar_test_sample_info((mstar_test_info_kind)(i % MSTAR_TEST_INFO_KINDS_), &info);
        info.uuid = mstar_id_make(103, 100 + i);
        must(mstar_edge_add_tensor(out, &info), "edge_add_tensor");
    }
}

/* An edge carrying only a name and descriptors ({name: [descriptor]} bodies). */
static void add_signal(mstar_msg *m, const char *name, uint32_t ntensors, uint64_t first_counter)
{
    mstar_edge e;
    mstar_edge_init(&e);
    strcpy(e.name, name);
    for (uint32_t i = 0; i < ntensors; i++) {
        mstar_tensor_info info;
        mstar_test_sample_info((mstar_test_info_kind)(i % MSTAR_TEST_INFO_KINDS_), &info);
        info.uuid = mstar_id_make(103, first_counter + i);
        must(mstar_edge_add_tensor(&e, &info), "edge_add_tensor");
    }
    must(mstar_msg_add_edge(m, &e), "msg_add_edge");
    mstar_edge_clear(&e);
}

static void add_edges(mstar_msg *m)
{
    mstar_edge e;
    mstar_test_sample_edge(3, &e);
    must(mstar_msg_add_edge(m, &e), "msg_add_edge");
    mstar_edge_clear(&e);
    /* A signal-only edge to EMPTY_DESTINATION with every other field at its default. */
    mstar_edge_init(&e);
    strcpy(e.name, "done");
    must(mstar_msg_add_edge(m, &e), "msg_add_edge");
}

static void add_profiles(mstar_msg *m)
{
    mstar_rx_info rx = { "hidden_states", "worker_1", "worker_0", 3, 4096, 0.00125 };
    mstar_tx_info tx = { "logits", "worker_0", 2, 1 << 20, 0.5 };
    must(mstar_msg_add_rx(m, &rx), "add_rx");
    strcpy(rx.edge_name, "image");
    rx.count = 0, rx.num_bytes = 0, rx.time_s = 0;
    must(mstar_msg_add_rx(m, &rx), "add_rx");
    must(mstar_msg_add_tx(m, &tx), "add_tx");
    strcpy(tx.source_entity, "worker_1");
    must(mstar_msg_add_tx(m, &tx), "add_tx");
}

static void add_kvs(mstar_msg *m)
{
    must(mstar_msg_add_kv(m, "prompt_len", 17), "add_kv");
    must(mstar_msg_add_kv(m, "seed", -42), "add_kv");
    must(mstar_msg_add_kv(m, "max_tokens", INT64_MAX), "add_kv");
}

static void full_fields(mstar_msg_type type, mstar_msg *m)
{
    mstar_rid rid;
    switch (type) {
    case MSTAR_MSG_NEW_REQUEST:
        strcpy(m->graph_walk, "walk.main");
        add_edges(m);
        add_kvs(m);
        break;
    case MSTAR_MSG_INPUT_SIGNALS:
        strcpy(m->graph_walk, "walk.main");
        strcpy(m->text, "partition_1");
        add_edges(m);
        must(mstar_msg_add_name(m, "worker_1"), "add_name");
        must(mstar_msg_add_name(m, "worker_2"), "add_name");
        add_kvs(m);
        break;
    case MSTAR_MSG_TENSOR_RECEIVED:
        must(mstar_msg_add_count(m, mstar_id_make(103, 1), 1), "add_count");
        must(mstar_msg_add_count(m, mstar_id_make(103, 2), 3), "add_count");
        must(mstar_msg_add_count(m, UINT64_MAX, INT64_MAX), "add_count");
        must(mstar_msg_add_uuid(m, mstar_id_make(103, 4)), "add_uuid");
        must(mstar_msg_add_uuid(m, 0), "add_uuid");
        break;
    case MSTAR_MSG_UNPERSIST_TENSORS:
        must(mstar_msg_add_count(m, mstar_id_make(103, 1), 0), "add_count");
        must(mstar_msg_add_count(m, mstar_id_make(103, 2), 5), "add_count");
        break;
    case MSTAR_MSG_REMOVE_REQUEST:
        m->remove_source = MSTAR_REMOVE_FROM_SELF;
        m->force = true;
        break;
    case MSTAR_MSG_CONDUCTOR_NEW_REQUEST:
        strcpy(m->graph_walk, "walk.preprocess");
        add_signal(m, "image", 2, 200);
        add_signal(m, "text", 1, 300);
        add_signal(m, "empty_signal", 0, 0);
        add_kvs(m);
        break;
    case MSTAR_MSG_WORKER_GRAPHS_DONE:
        add_signal(m, "kv_cache", 4, 400);
        add_profiles(m);
        m->is_first_tp_rank = true;
        break;
    case MSTAR_MSG_RESULT_TENSORS:
        strcpy(m->text, "image");
        add_edges(m);
        mstar_edge_clear(&m->edges[1]); /* exactly one edge */
        m->nedges = 1;
        must(mstar_msg_add_int(m, 0), "add_int");
        must(mstar_msg_add_int(m, 3), "add_int");
        must(mstar_msg_add_int(m, -1), "add_int");
        add_kvs(m);
        break;
    case MSTAR_MSG_REQUEST_COMPLETE:
        add_profiles(m);
        add_kvs(m);
        break;
    case MSTAR_MSG_ABORT_REQUEST:
        strcpy(m->text, "client went away: timeout (30 s)");
        break;
    case MSTAR_MSG_FAIL_REQUESTS:
        rid = mstar_rid_from_int(-7);
        must(mstar_msg_add_rid(m, &rid), "add_rid");
        must(mstar_rid_from_str("req-xyz", &rid), "rid_from_str");
        must(mstar_msg_add_rid(m, &rid), "add_rid");
        strcpy(m->text, "worker_2 lost its GPU");
        break;
    case MSTAR_MSG_RANK_VALUES:
        strcpy(m->text, "tp_group_0");
        m->round = 7;
        m->rank = 3;
        m->world_size = 4;
        must(mstar_msg_add_int(m, 1), "add_int");
        must(mstar_msg_add_int(m, INT64_MIN), "add_int");
        must(mstar_msg_add_int(m, INT64_MAX), "add_int");
        break;
    case MSTAR_MSG_HELLO:
        add_kvs(m);
        break;
    case MSTAR_MSG_SHUTDOWN:
        strcpy(m->text, "drained");
        break;
    default:
        break;
    }
}

static void minimal_fields(mstar_msg_type type, mstar_msg *m)
{
    mstar_rid rid;
    mstar_edge e;
    switch (type) {
    case MSTAR_MSG_RESULT_TENSORS:
        strcpy(m->text, "text");
        mstar_edge_init(&e);
        strcpy(e.name, "text_output");
        must(mstar_msg_add_edge(m, &e), "msg_add_edge");
        break;
    case MSTAR_MSG_FAIL_REQUESTS:
        rid = mstar_rid_from_int(0);
        must(mstar_msg_add_rid(m, &rid), "add_rid");
        break;
    case MSTAR_MSG_RANK_VALUES:
        strcpy(m->text, "g");
        m->world_size = 1;
        break;
    default:
        break;
    }
}

void mstar_test_sample_msg(mstar_msg_type type, bool full, mstar_msg *out)
{
    mstar_msg_init(out, type);
    strcpy(out->from, "worker_0");
    if (full) {
        /* Alternate string and integer request ids across types. */
        if (type % 2 == 0)
            must(mstar_rid_from_str("req-0123456789abcdef", &out->request_id), "rid_from_str");
        else
            out->request_id = mstar_rid_from_int(INT64_C(1) << 40);
        full_fields(type, out);
    } else {
        minimal_fields(type, out);
    }
    bool uses_rid = type != MSTAR_MSG_FAIL_REQUESTS && type != MSTAR_MSG_RANK_VALUES &&
                    type != MSTAR_MSG_HELLO && type != MSTAR_MSG_SHUTDOWN;
    if (!uses_rid)
        out->request_id = mstar_rid_from_int(0);
}

/* ---- comparisons ----------------------------------------------------------------------------- */

#define DIFF_SCALAR(a, b, field)      \
    do {                              \
        if ((a)->field != (b)->field) \
            return #field;            \
    } while (0)
#define DIFF_STR(a, b, field)                    \
    do {                                         \
        if (strcmp((a)->field, (b)->field) != 0) \
            return #field;                       \
    } while (0)

const char *mstar_test_info_diff(const mstar_tensor_info *a, const mstar_tensor_info *b)
{
    DIFF_SCALAR(a, b, uuid);
    DIFF_SCALAR(a, b, dtype);
    DIFF_SCALAR(a, b, ndim);
    for (int32_t i = 0; i < a->ndim; i++) {
        if (a->dims[i] != b->dims[i])
            return "dims";
        if (a->stride[i] != b->stride[i])
            return "stride";
    }
    DIFF_SCALAR(a, b, nbytes);
    DIFF_SCALAR(a, b, address);
    DIFF_SCALAR(a, b, offset);
    DIFF_SCALAR(a, b, source_tp_size);
    DIFF_SCALAR(a, b, source_tp_rank);
    DIFF_SCALAR(a, b, shm_offset);
    DIFF_STR(a, b, source_session_id);
    DIFF_STR(a, b, source_entity);
    DIFF_STR(a, b, shm_segment);
    DIFF_STR(a, b, source_node_name);
    DIFF_STR(a, b, source_graph_walk);
    DIFF_SCALAR(a, b, remote_key_len);
    if (memcmp(a->remote_key, b->remote_key, a->remote_key_len) != 0)
        return "remote_key";
    if (memcmp(&a->cuda_ipc, &b->cuda_ipc, sizeof(a->cuda_ipc)) != 0)
        return "cuda_ipc";
    return NULL;
}

const char *mstar_test_edge_diff(const mstar_edge *a, const mstar_edge *b)
{
    DIFF_STR(a, b, next_node);
    DIFF_STR(a, b, name);
    DIFF_SCALAR(a, b, ntensors);
    for (uint32_t i = 0; i < a->ntensors; i++) {
        const char *d = mstar_test_info_diff(&a->tensor_info[i], &b->tensor_info[i]);
        if (d != NULL)
            return d;
    }
    DIFF_SCALAR(a, b, persist);
    DIFF_SCALAR(a, b, is_streaming);
    DIFF_SCALAR(a, b, persist_for_loop);
    DIFF_SCALAR(a, b, total_fanin);
    DIFF_SCALAR(a, b, shard_dim);
    return NULL;
}

const char *mstar_test_msg_diff(const mstar_msg *a, const mstar_msg *b)
{
    DIFF_SCALAR(a, b, type);
    DIFF_STR(a, b, from);
    if (!mstar_rid_equal(&a->request_id, &b->request_id))
        return "request_id";
    DIFF_STR(a, b, graph_walk);
    DIFF_STR(a, b, text);
    DIFF_SCALAR(a, b, remove_source);
    DIFF_SCALAR(a, b, force);
    DIFF_SCALAR(a, b, is_first_tp_rank);
    DIFF_SCALAR(a, b, round);
    DIFF_SCALAR(a, b, rank);
    DIFF_SCALAR(a, b, world_size);
    DIFF_SCALAR(a, b, nedges);
    for (uint32_t i = 0; i < a->nedges; i++) {
        const char *d = mstar_test_edge_diff(&a->edges[i], &b->edges[i]);
        if (d != NULL)
            return d;
    }
    DIFF_SCALAR(a, b, ncounts);
    for (uint32_t i = 0; i < a->ncounts; i++) {
        if (a->counts[i].uuid != b->counts[i].uuid || a->counts[i].count != b->counts[i].count)
            return "counts";
    }
    DIFF_SCALAR(a, b, nuuids);
    if (a->nuuids && memcmp(a->uuids, b->uuids, a->nuuids * sizeof(a->uuids[0])) != 0)
        return "uuids";
    DIFF_SCALAR(a, b, nnames);
    for (uint32_t i = 0; i < a->nnames; i++) {
        if (strcmp(a->names[i], b->names[i]) != 0)
            return "names";
    }
    DIFF_SCALAR(a, b, nrids);
    for (uint32_t i = 0; i < a->nrids; i++) {
        if (!mstar_rid_equal(&a->rids[i], &b->rids[i]))
            return "rids";
    }
    DIFF_SCALAR(a, b, nints);
    if (a->nints && memcmp(a->ints, b->ints, a->nints * sizeof(a->ints[0])) != 0)
        return "ints";
    DIFF_SCALAR(a, b, nrx);
    for (uint32_t i = 0; i < a->nrx; i++) {
        const mstar_rx_info *x = &a->rx[i], *y = &b->rx[i];
        if (strcmp(x->edge_name, y->edge_name) || strcmp(x->source_entity, y->source_entity) ||
            strcmp(x->dest_entity, y->dest_entity) || x->count != y->count ||
            x->num_bytes != y->num_bytes || x->time_s != y->time_s)
            return "rx";
    }
    DIFF_SCALAR(a, b, ntx);
    for (uint32_t i = 0; i < a->ntx; i++) {
        const mstar_tx_info *x = &a->tx[i], *y = &b->tx[i];
        if (strcmp(x->edge_name, y->edge_name) || strcmp(x->source_entity, y->source_entity) ||
            x->count != y->count || x->num_bytes != y->num_bytes || x->time_s != y->time_s)
            return "tx";
    }
    DIFF_SCALAR(a, b, nkv);
    for (uint32_t i = 0; i < a->nkv; i++) {
        if (strcmp(a->kv[i].key, b->kv[i].key) != 0 || a->kv[i].value != b->kv[i].value)
            return "kv";
    }
    return NULL;
}
