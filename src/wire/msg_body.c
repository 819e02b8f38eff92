/*
 * msg_body.c — the schema of each control message body and the rules of its fields, shared by
 * the encoder (MSTAR_EINVAL before anything is written) and the decoder (MSTAR_EPROTO after a
 * field is read), so that a peer never receives what it would reject.
 *
 * The body field names come from the reference dataclasses (design.md "Control messages") where
 * they exist; docs/wire-format.md lists them per type.
 */
#include "msg_body.h"

#include <math.h>
#include <string.h>

#define BIT(f) (UINT64_C(1) << (f))

const mstar__wkey mstar__body_keys[B_COUNT_] = {
    [B_REQUEST_ID] = { "request_id", 10 },
    [B_REQUEST_IDS] = { "request_ids", 11 },
    [B_GRAPH_WALK] = { "graph_walk", 10 },
    [B_PARTITION_NAME] = { "partition_name", 14 },
    [B_MODALITY] = { "modality", 8 },
    [B_GROUP] = { "group", 5 },
    [B_ROUND] = { "round", 5 },
    [B_RANK] = { "rank", 4 },
    [B_WORLD_SIZE] = { "world_size", 10 },
    [B_SOURCE] = { "source", 6 },
    [B_FORCE] = { "force", 5 },
    [B_INITIAL_INPUTS] = { "initial_inputs", 14 },
    [B_INPUTS] = { "inputs", 6 },
    [B_GRAPH_EDGE] = { "graph_edge", 10 },
    [B_INITIAL_SIGNALS] = { "initial_signals", 15 },
    [B_PERSIST_SIGNALS] = { "persist_signals", 15 },
    [B_SUCCESSFUL] = { "successful_tensors", 18 },
    [B_FAILED] = { "failed_tensor_ids", 17 },
    [B_UUID_TO_REF_COUNT] = { "uuid_to_ref_count", 17 },
    [B_PRODUCER_DONE] = { "producer_done", 13 },
    [B_LOOP_INDICES] = { "loop_indices", 12 },
    [B_VALUES] = { "values", 6 },
    [B_RX_INFO] = { "rx_info", 7 },
    [B_TX_INFO] = { "tx_info", 7 },
    [B_IS_FIRST_TP_RANK] = { "is_first_tp_rank", 16 },
    [B_REQUEST_INFO] = { "request_info", 12 },
    [B_INPUT_METADATA] = { "input_metadata", 14 },
    [B_METADATA] = { "metadata", 8 },
    [B_INFO] = { "info", 4 },
    [B_REASON] = { "reason", 6 },
};

const mstar__wkey mstar__prof_keys[P_COUNT_] = {
    [P_EDGE_NAME] = { "edge_name", 9 },      [P_SOURCE_ENTITY] = { "source_entity", 13 },
    [P_DEST_ENTITY] = { "dest_entity", 11 }, [P_COUNT] = { "count", 5 },
    [P_NUM_BYTES] = { "num_bytes", 9 },      [P_TIME] = { "time", 4 },
};

const mstar__body_schema mstar__body_schemas[MSTAR_MSG_TYPE_COUNT_] = {
    [MSTAR_MSG_NEW_REQUEST] = { BIT(B_REQUEST_ID) | BIT(B_GRAPH_WALK) | BIT(B_INITIAL_INPUTS) |
                                    BIT(B_REQUEST_INFO),
                                BIT(B_REQUEST_ID) },
    [MSTAR_MSG_INPUT_SIGNALS] = { BIT(B_REQUEST_ID) | BIT(B_GRAPH_WALK) | BIT(B_PARTITION_NAME) |
                                      BIT(B_INPUTS) | BIT(B_PRODUCER_DONE) | BIT(B_REQUEST_INFO),
                                  BIT(B_REQUEST_ID) },
    [MSTAR_MSG_TENSOR_RECEIVED] = { BIT(B_REQUEST_ID) | BIT(B_SUCCESSFUL) | BIT(B_FAILED),
                                    BIT(B_REQUEST_ID) },
    [MSTAR_MSG_UNPERSIST_TENSORS] = { BIT(B_REQUEST_ID) | BIT(B_UUID_TO_REF_COUNT),
                                      BIT(B_REQUEST_ID) },
    [MSTAR_MSG_REMOVE_REQUEST] = { BIT(B_REQUEST_ID) | BIT(B_SOURCE) | BIT(B_FORCE),
                                   BIT(B_REQUEST_ID) },
    [MSTAR_MSG_CONDUCTOR_NEW_REQUEST] = { BIT(B_REQUEST_ID) | BIT(B_GRAPH_WALK) |
                                              BIT(B_INITIAL_SIGNALS) | BIT(B_INPUT_METADATA),
                                          BIT(B_REQUEST_ID) },
    [MSTAR_MSG_WORKER_GRAPHS_DONE] = { BIT(B_REQUEST_ID) | BIT(B_PERSIST_SIGNALS) | BIT(B_RX_INFO) |
                                           BIT(B_TX_INFO) | BIT(B_IS_FIRST_TP_RANK),
                                       BIT(B_REQUEST_ID) },
    [MSTAR_MSG_RESULT_TENSORS] = { BIT(B_REQUEST_ID) | BIT(B_MODALITY) | BIT(B_GRAPH_EDGE) |
                                       BIT(B_LOOP_INDICES) | BIT(B_METADATA),
                                   BIT(B_REQUEST_ID) | BIT(B_MODALITY) | BIT(B_GRAPH_EDGE) },
    [MSTAR_MSG_REQUEST_COMPLETE] = { BIT(B_REQUEST_ID) | BIT(B_RX_INFO) | BIT(B_TX_INFO) |
                                         BIT(B_METADATA),
                                     BIT(B_REQUEST_ID) },
    [MSTAR_MSG_ABORT_REQUEST] = { BIT(B_REQUEST_ID) | BIT(B_REASON), BIT(B_REQUEST_ID) },
    [MSTAR_MSG_FAIL_REQUESTS] = { BIT(B_REQUEST_IDS) | BIT(B_REASON), BIT(B_REQUEST_IDS) },
    [MSTAR_MSG_DRAIN_REQUEST] = { BIT(B_REQUEST_ID), BIT(B_REQUEST_ID) },
    [MSTAR_MSG_READS_DONE] = { BIT(B_REQUEST_ID), BIT(B_REQUEST_ID) },
    [MSTAR_MSG_RANK_VALUES] = { BIT(B_GROUP) | BIT(B_ROUND) | BIT(B_RANK) | BIT(B_WORLD_SIZE) |
                                    BIT(B_VALUES),
                                BIT(B_GROUP) | BIT(B_ROUND) | BIT(B_RANK) | BIT(B_WORLD_SIZE) },
    [MSTAR_MSG_HELLO] = { BIT(B_INFO), 0 },
    [MSTAR_MSG_SHUTDOWN] = { BIT(B_REASON), 0 },
};

bool mstar__body_has(const mstar_msg *msg, mstar__body_field field)
{
    switch (field) {
    case B_REQUEST_ID:
        return true;
    case B_REQUEST_IDS:
        return msg->nrids > 0;
    case B_GRAPH_WALK:
        return msg->graph_walk[0] != '\0';
    case B_MODALITY:
    case B_GROUP:
    case B_REASON:
        return msg->text[0] != '\0';
    case B_PARTITION_NAME:
        return strcmp(msg->text, "default") != 0;
    case B_ROUND:
        return msg->round != 0;
    case B_RANK:
        return msg->rank != 0;
    case B_WORLD_SIZE:
        return msg->world_size != 0;
    case B_SOURCE:
        return msg->remove_source != MSTAR_REMOVE_FROM_CONDUCTOR;
    case B_FORCE:
        return msg->force;
    case B_INITIAL_INPUTS:
    case B_INPUTS:
    case B_GRAPH_EDGE:
    case B_INITIAL_SIGNALS:
    case B_PERSIST_SIGNALS:
        return msg->nedges > 0;
    case B_SUCCESSFUL:
    case B_UUID_TO_REF_COUNT:
        return msg->ncounts > 0;
    case B_FAILED:
        return msg->nuuids > 0;
    case B_PRODUCER_DONE:
        return msg->nnames > 0;
    case B_LOOP_INDICES:
    case B_VALUES:
        return msg->nints > 0;
    case B_RX_INFO:
        return msg->nrx > 0;
    case B_TX_INFO:
        return msg->ntx > 0;
    case B_IS_FIRST_TP_RANK:
        return msg->is_first_tp_rank;
    case B_REQUEST_INFO:
    case B_INPUT_METADATA:
    case B_METADATA:
    case B_INFO:
        return msg->nkv > 0;
    case B_COUNT_:
        break;
    }
    return false;
}

/* ---- checks of array fields ------------------------------------------------------------------ */

static mstar_status check_len(mstar_status code, const mstar__wpath *path, uint32_t n, uint32_t max)
{
    if (n > max)
        return mstar__wire_fail(code, path, "%u entries, at most %u", n, max);
    return MSTAR_OK;
}

/* A duplicate found by mstar__wire_find_dup_* is reported at its index. */
static mstar_status report_dup(mstar_status code, const mstar__wpath *path, mstar_status st,
                               int64_t dup, const char *what)
{
    if (st != MSTAR_OK || dup < 0)
        return st;
    mstar__wpath pi = mstar__wpath_index(path, dup);
    return mstar__wire_fail(code, &pi, "duplicate %s", what);
}

/* A set of names held in an array: element i's name is at base + i * stride + offset, in a
 * buffer of `cap` bytes. At most `max`, each valid (when `names`), none repeated. */
typedef struct name_set {
    const void *base;
    uint32_t n;
    size_t stride;
    size_t offset;
    size_t cap;
    uint32_t max;
    const char *what; /* for the duplicate message */
} name_set;

static mstar_status check_name_set(mstar_status code, const mstar__wpath *path, const name_set *set,
                                   bool names)
{
    mstar_status st = check_len(code, path, set->n, set->max);
    for (uint32_t i = 0; names && st == MSTAR_OK && i < set->n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        const char *name = (const char *)set->base + (size_t)i * set->stride + set->offset;
        st = mstar__wire_check_cname(code, &pi, name, set->cap, false);
    }
    if (st != MSTAR_OK)
        return st;
    int64_t dup;
    st = mstar__wire_find_dup_name(set->base, set->n, set->stride, set->offset, &dup);
    return report_dup(code, path, st, dup, set->what);
}

static mstar_status check_counts(mstar_status code, const mstar__wpath *path, const mstar_msg *msg,
                                 int64_t min)
{
    mstar_status st = check_len(code, path, msg->ncounts, MSTAR_WIRE_MAX_ENTRIES);
    for (uint32_t i = 0; st == MSTAR_OK && i < msg->ncounts; i++) {
        if (msg->counts[i].count < min) {
            char id[MSTAR_ID_STRLEN];
            mstar__wpath pi = mstar__wpath_index(path, i);
            mstar_id_format(msg->counts[i].uuid, id);
            return mstar__wire_fail(code, &pi, "count %lld for uuid %s, must be >= %lld",
                                    (long long)msg->counts[i].count, id, (long long)min);
        }
    }
    if (st != MSTAR_OK)
        return st;
    int64_t dup;
    st = mstar__wire_find_dup_u64(msg->counts, msg->ncounts, sizeof(mstar_uuid_count),
                                  offsetof(mstar_uuid_count, uuid), &dup);
    return report_dup(code, path, st, dup, "uuid");
}

static mstar_status check_rids(mstar_status code, const mstar__wpath *path, const mstar_msg *msg,
                               bool names)
{
    if (msg->nrids == 0)
        return mstar__wire_fail(code, path, "empty, at least one request id");
    mstar_status st = check_len(code, path, msg->nrids, MSTAR_WIRE_MAX_ENTRIES);
    for (uint32_t i = 0; names && st == MSTAR_OK && i < msg->nrids; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__wire_check_rid(code, &pi, &msg->rids[i]);
    }
    return st;
}

/* One profiling record; `dest` is NULL for tx; names are checked only with `check_names`. */
static mstar_status check_prof(mstar_status code, const mstar__wpath *path, bool check_names,
                               const char *edge_name, const char *source, const char *dest,
                               int64_t count, int64_t num_bytes, double time_s)
{
    const char *names[3] = { edge_name, source, dest };
    for (int f = P_EDGE_NAME; check_names && f <= P_DEST_ENTITY; f++) {
        if (names[f] == NULL)
            continue;
        mstar__wpath pf = mstar__wpath_key(path, mstar__prof_keys[f].name);
        mstar_status st = mstar__wire_check_cname(code, &pf, names[f], MSTAR_NAME_MAX + 1, false);
        if (st != MSTAR_OK)
            return st;
    }
    mstar__wpath pf = mstar__wpath_key(path, mstar__prof_keys[P_COUNT].name);
    if (count < 0)
        return mstar__wire_fail(code, &pf, "%lld, must be >= 0", (long long)count);
    pf = mstar__wpath_key(path, mstar__prof_keys[P_NUM_BYTES].name);
    if (num_bytes < 0)
        return mstar__wire_fail(code, &pf, "%lld, must be >= 0", (long long)num_bytes);
    pf = mstar__wpath_key(path, mstar__prof_keys[P_TIME].name);
    if (!isfinite(time_s) || time_s < 0)
        return mstar__wire_fail(code, &pf, "%g, must be a finite number >= 0", time_s);
    return MSTAR_OK;
}

static mstar_status check_rx(mstar_status code, const mstar__wpath *path, const mstar_msg *msg,
                             bool names)
{
    mstar_status st = check_len(code, path, msg->nrx, MSTAR_WIRE_MAX_ENTRIES);
    for (uint32_t i = 0; st == MSTAR_OK && i < msg->nrx; i++) {
        const mstar_rx_info *rx = &msg->rx[i];
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = check_prof(code, &pi, names, rx->edge_name, rx->source_entity, rx->dest_entity,
                        rx->count, rx->num_bytes, rx->time_s);
    }
    return st;
}

static mstar_status check_tx(mstar_status code, const mstar__wpath *path, const mstar_msg *msg,
                             bool names)
{
    mstar_status st = check_len(code, path, msg->ntx, MSTAR_WIRE_MAX_ENTRIES);
    for (uint32_t i = 0; st == MSTAR_OK && i < msg->ntx; i++) {
        const mstar_tx_info *tx = &msg->tx[i];
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = check_prof(code, &pi, names, tx->edge_name, tx->source_entity, NULL, tx->count,
                        tx->num_bytes, tx->time_s);
    }
    return st;
}

static mstar_status check_reason(mstar_status code, const mstar__wpath *path, const mstar_msg *msg)
{
    size_t len = strnlen(msg->text, sizeof(msg->text));
    if (len == sizeof(msg->text))
        return mstar__wire_fail(code, path, "not NUL-terminated within %zu bytes",
                                sizeof(msg->text));
    return mstar__wire_check_text(code, path, msg->text, len);
}

mstar_status mstar__body_check_field(mstar_status code, const mstar__wpath *path,
                                     const mstar_msg *msg, mstar__body_field field, bool names)
{
    switch (field) {
    case B_REQUEST_ID:
        return names ? mstar__wire_check_rid(code, path, &msg->request_id) : MSTAR_OK;
    case B_REQUEST_IDS:
        return check_rids(code, path, msg, names);
    case B_GRAPH_WALK:
        if (!names)
            return MSTAR_OK;
        return mstar__wire_check_cname(code, path, msg->graph_walk, sizeof(msg->graph_walk), true);
    case B_PARTITION_NAME:
    case B_MODALITY:
    case B_GROUP:
        if (!names)
            return MSTAR_OK;
        return mstar__wire_check_cname(code, path, msg->text, sizeof(msg->text), false);
    case B_REASON:
        return names ? check_reason(code, path, msg) : MSTAR_OK;
    case B_ROUND:
        if (msg->round < 0)
            return mstar__wire_fail(code, path, "%lld, must be >= 0", (long long)msg->round);
        return MSTAR_OK;
    case B_RANK:
        if (msg->rank < 0)
            return mstar__wire_fail(code, path, "%d, must be >= 0", (int)msg->rank);
        return MSTAR_OK;
    case B_WORLD_SIZE:
        if (msg->world_size < 1)
            return mstar__wire_fail(code, path, "%d, must be >= 1", (int)msg->world_size);
        return MSTAR_OK;
    case B_SOURCE:
        if ((int)msg->remove_source < MSTAR_REMOVE_FROM_CONDUCTOR ||
            (int)msg->remove_source > MSTAR_REMOVE_FROM_SELF)
            return mstar__wire_fail(code, path,
                                    "%d, must be 0 (conductor), 1 (TP rank 0) or 2 "
                                    "(self)",
                                    (int)msg->remove_source);
        return MSTAR_OK;
    case B_INITIAL_INPUTS:
    case B_INPUTS:
        return check_len(code, path, msg->nedges, MSTAR_WIRE_MAX_EDGES);
    case B_GRAPH_EDGE:
        if (msg->nedges != 1)
            return mstar__wire_fail(code, path, "%u edges, exactly one", msg->nedges);
        return MSTAR_OK;
    case B_INITIAL_SIGNALS:
    case B_PERSIST_SIGNALS: {
        /* {name: [descriptor]}: the edges' names are the map's keys. */
        name_set set = { .base = msg->edges,
                         .n = msg->nedges,
                         .stride = sizeof(mstar_edge),
                         .offset = offsetof(mstar_edge, name),
                         .cap = MSTAR_NAME_MAX + 1,
                         .max = MSTAR_WIRE_MAX_EDGES,
                         .what = "signal name" };
        return check_name_set(code, path, &set, names);
    }
    case B_SUCCESSFUL:
        return check_counts(code, path, msg, 1);
    case B_UUID_TO_REF_COUNT:
        return check_counts(code, path, msg, 0);
    case B_FAILED:
        return check_len(code, path, msg->nuuids, MSTAR_WIRE_MAX_ENTRIES);
    case B_PRODUCER_DONE: {
        name_set set = { .base = msg->names,
                         .n = msg->nnames,
                         .stride = MSTAR_NAME_MAX + 1,
                         .offset = 0,
                         .cap = MSTAR_NAME_MAX + 1,
                         .max = MSTAR_WIRE_MAX_ENTRIES,
                         .what = "name" };
        return check_name_set(code, path, &set, names);
    }
    case B_LOOP_INDICES:
    case B_VALUES:
        return check_len(code, path, msg->nints, MSTAR_WIRE_MAX_ENTRIES);
    case B_RX_INFO:
        return check_rx(code, path, msg, names);
    case B_TX_INFO:
        return check_tx(code, path, msg, names);
    case B_REQUEST_INFO:
    case B_INPUT_METADATA:
    case B_METADATA:
    case B_INFO: {
        name_set set = { .base = msg->kv,
                         .n = msg->nkv,
                         .stride = sizeof(mstar_kv),
                         .offset = offsetof(mstar_kv, key),
                         .cap = sizeof(msg->kv[0].key),
                         .max = MSTAR_WIRE_MAX_KV,
                         .what = "key" };
        return check_name_set(code, path, &set, names);
    }
    case B_FORCE:
    case B_IS_FIRST_TP_RANK:
    case B_COUNT_:
        break;
    }
    return MSTAR_OK;
}

mstar_status mstar__body_check_all(mstar_status code, const mstar__wpath *path,
                                   const mstar_msg *msg)
{
    if (msg->type == MSTAR_MSG_RANK_VALUES && msg->rank >= msg->world_size) {
        mstar__wpath pf = mstar__wpath_key(path, mstar__body_keys[B_RANK].name);
        return mstar__wire_fail(code, &pf, "%d, must be below world_size %d", (int)msg->rank,
                                (int)msg->world_size);
    }
    return MSTAR_OK;
}
