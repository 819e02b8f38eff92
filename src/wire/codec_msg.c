/*
 * codec_msg.c — control messages: the envelope {"v": 1, "type": "NAME", "from": "entity",
 * "body": {...}} and each type's body (the schema is in msg_body.c), both ways.
 *
 * The decoder reads the body only once it knows the version and the type. Our encoder writes the
 * envelope in that order, so the body is decoded where it stands; if a peer puts "body" first, it
 * is skipped (strictly) and decoded after the rest of the envelope, so that a message of another
 * version is reported as such rather than as a broken body.
 */
#include "msg_body.h"

#include <stdlib.h>
#include <string.h>

enum { E_V, E_TYPE, E_FROM, E_BODY, E_COUNT };

static const mstar__wkey envelope_keys[E_COUNT] = {
    [E_V] = { "v", 1 },
    [E_TYPE] = { "type", 4 },
    [E_FROM] = { "from", 4 },
    [E_BODY] = { "body", 4 },
};

#define ENVELOPE_ALL ((UINT64_C(1) << E_COUNT) - 1)

/* Smallest wire sizes of array elements and map entries, to check counts against the bytes
 * present before allocating: an edge map holds at least {"next_node": "", "name": "a"}; a
 * name-keyed signal at least "a": []; an rx record its six fields with one-byte values, a tx
 * record its five. */
#define EDGE_MIN_BYTES   19
#define SIGNAL_MIN_BYTES 3
#define RX_MIN_BYTES     64
#define TX_MIN_BYTES     48

/* ---- decoding the body's fields -------------------------------------------------------------- */

/* Allocate `n` zeroed edges and hand them to the message, which then owns them (a zeroed edge
 * owns nothing, so a failure part-way leaves the message safe to clear). Each is put in init
 * state by whoever reads it. */
static mstar_status alloc_edges(mstar_msg *msg, uint32_t n)
{
    mstar_status st = mstar__wire_alloc(n, sizeof(mstar_edge), (void **)&msg->edges);
    if (st == MSTAR_OK)
        msg->nedges = n;
    return st;
}

static mstar_status read_edge_list(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_EDGES, EDGE_MIN_BYTES, &n);
    if (st == MSTAR_OK)
        st = alloc_edges(msg, n);
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__edge_read(r, &pi, &msg->edges[i]);
    }
    return st;
}

static mstar_status read_one_edge(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    mstar_status st = alloc_edges(msg, 1);
    if (st != MSTAR_OK)
        return st;
    return mstar__edge_read(r, path, &msg->edges[0]);
}

/* {name: [descriptor]}: an edge per key, holding only its name and descriptors. */
static mstar_status read_signal_map(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_EDGES, SIGNAL_MIN_BYTES, &n);
    if (st == MSTAR_OK)
        st = alloc_edges(msg, n);
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        mstar_edge_init(&msg->edges[i]);
        st = mstar__rd_name(r, &pi, false, msg->edges[i].name);
        if (st == MSTAR_OK)
            st = mstar__infos_read(r, &pi, &msg->edges[i]);
    }
    return st;
}

static mstar_status read_counts(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_uuid_count), (void **)&msg->counts);
    if (st != MSTAR_OK)
        return st;
    msg->ncounts = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_uint(r, &pi, &msg->counts[i].uuid);
        if (st == MSTAR_OK)
            st = mstar__rd_int(r, &pi, &msg->counts[i].count);
    }
    return st;
}

static mstar_status read_uuids(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, 1, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_tensor_id), (void **)&msg->uuids);
    if (st != MSTAR_OK)
        return st;
    msg->nuuids = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_uint(r, &pi, &msg->uuids[i]);
    }
    return st;
}

static mstar_status read_ints(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, 1, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(int64_t), (void **)&msg->ints);
    if (st != MSTAR_OK)
        return st;
    msg->nints = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_int(r, &pi, &msg->ints[i]);
    }
    return st;
}

static mstar_status read_names(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(msg->names[0]), (void **)&msg->names);
    if (st != MSTAR_OK)
        return st;
    msg->nnames = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_name(r, &pi, false, msg->names[i]);
    }
    return st;
}

static mstar_status read_rids(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, 1, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_rid), (void **)&msg->rids);
    if (st != MSTAR_OK)
        return st;
    msg->nrids = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = mstar__rd_rid(r, &pi, &msg->rids[i]);
    }
    return st;
}

static mstar_status read_kv(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_KV, 3, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_kv), (void **)&msg->kv);
    if (st != MSTAR_OK)
        return st;
    msg->nkv = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        const char *s;
        uint32_t len;
        st = mstar__rd_str(r, &pi, &s, &len);
        if (st == MSTAR_OK && len >= sizeof(msg->kv[i].key))
            st = mstar__wire_fail(MSTAR_EPROTO, &pi, "key of %u bytes, at most %zu", len,
                                  sizeof(msg->kv[i].key) - 1);
        if (st == MSTAR_OK)
            st = mstar__wire_check_name(MSTAR_EPROTO, &pi, s, len);
        if (st != MSTAR_OK)
            break;
        memcpy(msg->kv[i].key, s, len);
        st = mstar__rd_int(r, &pi, &msg->kv[i].value);
    }
    return st;
}

/* One rx (dest != NULL) or tx (dest == NULL) record into the given fields. */
static mstar_status read_prof(mstar__rd *r, const mstar__wpath *path, char *edge_name, char *source,
                              char *dest, int64_t *count, int64_t *num_bytes, double *time_s)
{
    uint64_t all = (UINT64_C(1) << P_COUNT_) - 1;
    if (dest == NULL)
        all &= ~(UINT64_C(1) << P_DEST_ENTITY);
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    mstar__rd_keys km = mstar__rd_keys_of(mstar__prof_keys, P_COUNT_, all);
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        int f;
        st = mstar__rd_key(r, path, &km, &f);
        if (st != MSTAR_OK)
            break;
        if (f < 0) {
            st = mstar__rd_skip(r, path);
            continue;
        }
        mstar__wpath pf = mstar__wpath_key(path, mstar__prof_keys[f].name);
        switch ((mstar__prof_field)f) {
        case P_EDGE_NAME:
            st = mstar__rd_name(r, &pf, false, edge_name);
            break;
        case P_SOURCE_ENTITY:
            st = mstar__rd_name(r, &pf, false, source);
            break;
        case P_DEST_ENTITY:
            st = mstar__rd_name(r, &pf, false, dest);
            break;
        case P_COUNT:
            st = mstar__rd_int(r, &pf, count);
            break;
        case P_NUM_BYTES:
            st = mstar__rd_int(r, &pf, num_bytes);
            break;
        case P_TIME:
            st = mstar__rd_double(r, &pf, time_s);
            break;
        case P_COUNT_:
            break;
        }
    }
    if (st != MSTAR_OK)
        return st;
    return mstar__rd_require(path, &km, all);
}

static mstar_status read_rx(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, RX_MIN_BYTES, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_rx_info), (void **)&msg->rx);
    if (st != MSTAR_OK)
        return st;
    msg->nrx = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar_rx_info *rx = &msg->rx[i];
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = read_prof(r, &pi, rx->edge_name, rx->source_entity, rx->dest_entity, &rx->count,
                       &rx->num_bytes, &rx->time_s);
    }
    return st;
}

static mstar_status read_tx(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    uint32_t n;
    mstar_status st = mstar__rd_array(r, path, MSTAR_WIRE_MAX_ENTRIES, TX_MIN_BYTES, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, sizeof(mstar_tx_info), (void **)&msg->tx);
    if (st != MSTAR_OK)
        return st;
    msg->ntx = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar_tx_info *tx = &msg->tx[i];
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = read_prof(r, &pi, tx->edge_name, tx->source_entity, NULL, &tx->count, &tx->num_bytes,
                       &tx->time_s);
    }
    return st;
}

static mstar_status read_field(mstar__rd *r, const mstar__wpath *path, mstar__body_field field,
                               mstar_msg *msg)
{
    int32_t source;
    mstar_status st;
    switch (field) {
    case B_REQUEST_ID:
        return mstar__rd_rid(r, path, &msg->request_id);
    case B_REQUEST_IDS:
        return read_rids(r, path, msg);
    case B_GRAPH_WALK:
        return mstar__rd_name(r, path, true, msg->graph_walk);
    case B_PARTITION_NAME:
    case B_MODALITY:
    case B_GROUP:
        return mstar__rd_name(r, path, false, msg->text);
    case B_REASON:
        return mstar__rd_text(r, path, msg->text);
    case B_ROUND:
        return mstar__rd_int(r, path, &msg->round);
    case B_RANK:
        return mstar__rd_int32(r, path, 0, INT32_MAX, &msg->rank);
    case B_WORLD_SIZE:
        return mstar__rd_int32(r, path, 1, INT32_MAX, &msg->world_size);
    case B_SOURCE:
        st = mstar__rd_int32(r, path, MSTAR_REMOVE_FROM_CONDUCTOR, MSTAR_REMOVE_FROM_SELF, &source);
        msg->remove_source = (mstar_remove_source)source;
        return st;
    case B_FORCE:
        return mstar__rd_bool(r, path, &msg->force);
    case B_IS_FIRST_TP_RANK:
        return mstar__rd_bool(r, path, &msg->is_first_tp_rank);
    case B_INITIAL_INPUTS:
    case B_INPUTS:
        return read_edge_list(r, path, msg);
    case B_GRAPH_EDGE:
        return read_one_edge(r, path, msg);
    case B_INITIAL_SIGNALS:
    case B_PERSIST_SIGNALS:
        return read_signal_map(r, path, msg);
    case B_SUCCESSFUL:
    case B_UUID_TO_REF_COUNT:
        return read_counts(r, path, msg);
    case B_FAILED:
        return read_uuids(r, path, msg);
    case B_PRODUCER_DONE:
        return read_names(r, path, msg);
    case B_LOOP_INDICES:
    case B_VALUES:
        return read_ints(r, path, msg);
    case B_RX_INFO:
        return read_rx(r, path, msg);
    case B_TX_INFO:
        return read_tx(r, path, msg);
    case B_REQUEST_INFO:
    case B_INPUT_METADATA:
    case B_METADATA:
    case B_INFO:
        return read_kv(r, path, msg);
    case B_COUNT_:
        break;
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

static mstar_status read_body(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    const mstar__body_schema *schema = &mstar__body_schemas[msg->type];
    uint32_t n;
    mstar_status st = mstar__rd_map(r, path, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    mstar__rd_keys km = mstar__rd_keys_of(mstar__body_keys, B_COUNT_, schema->fields);
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        int f;
        st = mstar__rd_key(r, path, &km, &f);
        if (st != MSTAR_OK)
            break;
        if (f < 0) {
            st = mstar__rd_skip(r, path);
            continue;
        }
        mstar__wpath pf = mstar__wpath_key(path, mstar__body_keys[f].name);
        st = read_field(r, &pf, (mstar__body_field)f, msg);
        if (st == MSTAR_OK)
            st = mstar__body_check_field(MSTAR_EPROTO, &pf, msg, (mstar__body_field)f, false);
    }
    if (st == MSTAR_OK)
        st = mstar__rd_require(path, &km, schema->required);
    if (st == MSTAR_OK)
        st = mstar__body_check_all(MSTAR_EPROTO, path, msg);
    return st;
}

/* ---- decoding the envelope ------------------------------------------------------------------- */

static mstar_status read_type(mstar__rd *r, const mstar__wpath *path, mstar_msg_type *out)
{
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st != MSTAR_OK)
        return st;
    *out = mstar__msg_type_from_name(s, len);
    if (*out != MSTAR_MSG_INVALID)
        return MSTAR_OK;
    if (mstar_name_validate(s, len, "type") != MSTAR_OK)
        return mstar__wire_fail(MSTAR_EPROTO, path, "unknown message type (%u bytes, not a name)",
                                len);
    return mstar__wire_fail(MSTAR_EPROTO, path, "unknown message type '%.*s'", (int)len, s);
}

static mstar_status read_version(mstar__rd *r, const mstar__wpath *path)
{
    uint64_t v;
    mstar_status st = mstar__rd_uint(r, path, &v);
    if (st == MSTAR_OK && v != MSTAR_WIRE_VERSION)
        st = mstar__wire_fail(MSTAR_EPROTO, path, "version %llu, this build speaks %d",
                              (unsigned long long)v, MSTAR_WIRE_VERSION);
    return st;
}

static mstar_status read_message(mstar__rd *r, const mstar__wpath *root, void *out)
{
    mstar_msg *msg = out;
    char from[MSTAR_NAME_MAX + 1] = "";
    const char *body_at = NULL;
    bool body_done = false;
    uint32_t n;
    mstar_status st = mstar__rd_map(r, root, MSTAR_WIRE_MAX_ENTRIES, 2, &n);
    mstar__rd_keys km = mstar__rd_keys_of(envelope_keys, E_COUNT, ENVELOPE_ALL);
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        int f;
        mstar_msg_type type;
        st = mstar__rd_key(r, root, &km, &f);
        if (st != MSTAR_OK)
            break;
        mstar__wpath pf = mstar__wpath_key(root, f >= 0 ? envelope_keys[f].name : "");
        switch (f) {
        case E_V:
            st = read_version(r, &pf);
            break;
        case E_TYPE:
            if ((st = read_type(r, &pf, &type)) == MSTAR_OK)
                mstar__msg_set_type(msg, type); /* still in init state: no body read yet */
            break;
        case E_FROM:
            st = mstar__rd_name(r, &pf, false, from);
            break;
        case E_BODY:
            if ((km.seen & ((1u << E_V) | (1u << E_TYPE))) == ((1u << E_V) | (1u << E_TYPE))) {
                mstar__wpath typed = mstar__wpath_key(NULL, mstar_msg_type_name(msg->type));
                mstar__wpath pb = mstar__wpath_key(&typed, "body");
                st = read_body(r, &pb, msg);
                body_done = true;
            } else {
                body_at = r->p;
                st = mstar__rd_skip(r, &pf);
            }
            break;
        default:
            st = mstar__rd_skip(r, root);
            break;
        }
    }
    if (st == MSTAR_OK)
        st = mstar__rd_require(root, &km, ENVELOPE_ALL);
    if (st == MSTAR_OK && !body_done) {
        mstar__rd late = *r;
        late.p = body_at;
        mstar__wpath typed = mstar__wpath_key(NULL, mstar_msg_type_name(msg->type));
        mstar__wpath pb = mstar__wpath_key(&typed, "body");
        st = read_body(&late, &pb, msg);
    }
    if (st == MSTAR_OK)
        memcpy(msg->from, from, sizeof(from));
    return st;
}

mstar_status mstar_msg_decode(const void *data, size_t len, mstar_msg *out)
{
    if (out != NULL)
        mstar_msg_init(out, MSTAR_MSG_INVALID);
    mstar_status st = mstar__decode_root("message", read_message, data, len, out);
    if (st != MSTAR_OK && out != NULL)
        mstar_msg_clear(out);
    return st;
}

/* ---- encoding -------------------------------------------------------------------------------- */

static mstar_status write_edges(mstar__wr *w, const mstar__wpath *path, const mstar_msg *msg)
{
    mstar__wr_array(w, msg->nedges);
    for (uint32_t i = 0; i < msg->nedges; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        mstar_status st = mstar__edge_write(w, &pi, &msg->edges[i]);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

static mstar_status write_signal_map(mstar__wr *w, const mstar__wpath *path, const mstar_msg *msg)
{
    mstar__wr_map(w, msg->nedges);
    for (uint32_t i = 0; i < msg->nedges; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        mstar__wr_cstr(w, msg->edges[i].name);
        mstar_status st = mstar__infos_write(w, &pi, &msg->edges[i]);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

static void write_counts(mstar__wr *w, const mstar_msg *msg)
{
    mstar__wr_map(w, msg->ncounts);
    for (uint32_t i = 0; i < msg->ncounts; i++) {
        mstar__wr_uint(w, msg->counts[i].uuid);
        mstar__wr_int(w, msg->counts[i].count);
    }
}

static void write_kv(mstar__wr *w, const mstar_msg *msg)
{
    mstar__wr_map(w, msg->nkv);
    for (uint32_t i = 0; i < msg->nkv; i++) {
        mstar__wr_cstr(w, msg->kv[i].key);
        mstar__wr_int(w, msg->kv[i].value);
    }
}

static void write_prof(mstar__wr *w, const char *edge_name, const char *source, const char *dest,
                       int64_t count, int64_t num_bytes, double time_s)
{
    mstar__wr_map(w, dest != NULL ? 6 : 5);
    mstar__wr_key(w, &mstar__prof_keys[P_EDGE_NAME]);
    mstar__wr_cstr(w, edge_name);
    mstar__wr_key(w, &mstar__prof_keys[P_SOURCE_ENTITY]);
    mstar__wr_cstr(w, source);
    if (dest != NULL) {
        mstar__wr_key(w, &mstar__prof_keys[P_DEST_ENTITY]);
        mstar__wr_cstr(w, dest);
    }
    mstar__wr_key(w, &mstar__prof_keys[P_COUNT]);
    mstar__wr_int(w, count);
    mstar__wr_key(w, &mstar__prof_keys[P_NUM_BYTES]);
    mstar__wr_int(w, num_bytes);
    mstar__wr_key(w, &mstar__prof_keys[P_TIME]);
    mstar__wr_double(w, time_s);
}

static mstar_status write_field(mstar__wr *w, const mstar__wpath *path, mstar__body_field field,
                                const mstar_msg *msg)
{
    switch (field) {
    case B_REQUEST_ID:
        mstar__wr_rid(w, &msg->request_id);
        break;
    case B_REQUEST_IDS:
        mstar__wr_array(w, msg->nrids);
        for (uint32_t i = 0; i < msg->nrids; i++)
            mstar__wr_rid(w, &msg->rids[i]);
        break;
    case B_GRAPH_WALK:
        mstar__wr_cstr(w, msg->graph_walk);
        break;
    case B_PARTITION_NAME:
    case B_MODALITY:
    case B_GROUP:
    case B_REASON:
        mstar__wr_cstr(w, msg->text);
        break;
    case B_ROUND:
        mstar__wr_int(w, msg->round);
        break;
    case B_RANK:
        mstar__wr_int(w, msg->rank);
        break;
    case B_WORLD_SIZE:
        mstar__wr_int(w, msg->world_size);
        break;
    case B_SOURCE:
        mstar__wr_int(w, msg->remove_source);
        break;
    case B_FORCE:
        mstar__wr_bool(w, msg->force);
        break;
    case B_IS_FIRST_TP_RANK:
        mstar__wr_bool(w, msg->is_first_tp_rank);
        break;
    case B_INITIAL_INPUTS:
    case B_INPUTS:
    case B_GRAPH_EDGE:
        if (field == B_GRAPH_EDGE)
            return mstar__edge_write(w, path, &msg->edges[0]);
        return write_edges(w, path, msg);
    case B_INITIAL_SIGNALS:
    case B_PERSIST_SIGNALS:
        return write_signal_map(w, path, msg);
    case B_SUCCESSFUL:
    case B_UUID_TO_REF_COUNT:
        write_counts(w, msg);
        break;
    case B_FAILED:
        mstar__wr_array(w, msg->nuuids);
        for (uint32_t i = 0; i < msg->nuuids; i++)
            mstar__wr_uint(w, msg->uuids[i]);
        break;
    case B_PRODUCER_DONE:
        mstar__wr_array(w, msg->nnames);
        for (uint32_t i = 0; i < msg->nnames; i++)
            mstar__wr_cstr(w, msg->names[i]);
        break;
    case B_LOOP_INDICES:
    case B_VALUES:
        mstar__wr_array(w, msg->nints);
        for (uint32_t i = 0; i < msg->nints; i++)
            mstar__wr_int(w, msg->ints[i]);
        break;
    case B_RX_INFO:
        mstar__wr_array(w, msg->nrx);
        for (uint32_t i = 0; i < msg->nrx; i++) {
            const mstar_rx_info *rx = &msg->rx[i];
            write_prof(w, rx->edge_name, rx->source_entity, rx->dest_entity, rx->count,
                       rx->num_bytes, rx->time_s);
        }
        break;
    case B_TX_INFO:
        mstar__wr_array(w, msg->ntx);
        for (uint32_t i = 0; i < msg->ntx; i++) {
            const mstar_tx_info *tx = &msg->tx[i];
            write_prof(w, tx->edge_name, tx->source_entity, NULL, tx->count, tx->num_bytes,
                       tx->time_s);
        }
        break;
    case B_REQUEST_INFO:
    case B_INPUT_METADATA:
    case B_METADATA:
    case B_INFO:
        write_kv(w, msg);
        break;
    case B_COUNT_:
        break;
    }
    return MSTAR_OK;
}

static mstar_status write_body(mstar__wr *w, const mstar__wpath *path, const mstar_msg *msg)
{
    const mstar__body_schema *schema = &mstar__body_schemas[msg->type];
    uint64_t fields = schema->required;
    for (int f = 0; f < B_COUNT_; f++) {
        if ((schema->fields >> f & 1) && mstar__body_has(msg, (mstar__body_field)f))
            fields |= UINT64_C(1) << f;
    }
    /* The body's own fields are checked before any is written; edges and descriptors as they are
     * written (a failure discards the buffer either way). */
    mstar_status st = MSTAR_OK;
    for (int f = 0; st == MSTAR_OK && f < B_COUNT_; f++) {
        mstar__wpath pf = mstar__wpath_key(path, mstar__body_keys[f].name);
        if (fields >> f & 1)
            st = mstar__body_check_field(MSTAR_EINVAL, &pf, msg, (mstar__body_field)f, true);
    }
    if (st == MSTAR_OK)
        st = mstar__body_check_all(MSTAR_EINVAL, path, msg);
    if (st != MSTAR_OK)
        return st;
    mstar__wr_map(w, (uint32_t)__builtin_popcountll(fields));
    for (int f = 0; st == MSTAR_OK && f < B_COUNT_; f++) {
        if ((fields >> f & 1) == 0)
            continue;
        mstar__wpath pf = mstar__wpath_key(path, mstar__body_keys[f].name);
        mstar__wr_key(w, &mstar__body_keys[f]);
        st = write_field(w, &pf, (mstar__body_field)f, msg);
    }
    return st;
}

static mstar_status write_message(mstar__wr *w, const mstar__wpath *root, const void *value)
{
    const mstar_msg *msg = value;
    const char *type = mstar_msg_type_name(msg->type);
    if (type == NULL) {
        mstar__wpath pf = mstar__wpath_key(root, "type");
        return mstar__wire_fail(MSTAR_EINVAL, &pf, "invalid message type %d", (int)msg->type);
    }
    mstar__wpath typed = mstar__wpath_key(NULL, type);
    mstar__wpath pf = mstar__wpath_key(&typed, "from");
    mstar_status st =
        mstar__wire_check_cname(MSTAR_EINVAL, &pf, msg->from, sizeof(msg->from), false);
    if (st != MSTAR_OK)
        return st;
    mstar__wr_map(w, E_COUNT);
    mstar__wr_key(w, &envelope_keys[E_V]);
    mstar__wr_uint(w, MSTAR_WIRE_VERSION);
    mstar__wr_key(w, &envelope_keys[E_TYPE]);
    mstar__wr_cstr(w, type);
    mstar__wr_key(w, &envelope_keys[E_FROM]);
    mstar__wr_cstr(w, msg->from);
    mstar__wr_key(w, &envelope_keys[E_BODY]);
    mstar__wpath pb = mstar__wpath_key(&typed, "body");
    return write_body(w, &pb, msg);
}

mstar_status mstar_msg_encode(const mstar_msg *msg, void **data, size_t *len)
{
    return mstar__encode_root("message", write_message, msg, data, len);
}
