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

static const mstar__wmap envelope_map = { envelope_keys, E_COUNT, ENVELOPE_ALL, ENVELOPE_ALL };

/* ---- decoding the body's fields -------------------------------------------------------------- */

/* Reads one element of an array-shaped field (or one entry, key and value, of a map-shaped one)
 * into its place in the message's array. */
typedef mstar_status (*read_elem_fn)(mstar__rd *r, const mstar__wpath *path, void *elem);

typedef struct list_kind {
    bool is_map;
    uint32_t max;
    uint32_t min_bytes; /* the smallest element (or entry) on the wire */
    size_t elsize;
    read_elem_fn read;
} list_kind;

/* Read an array- or map-shaped field into a new array that the message owns from the start
 * (*arr, *count), so a failure part-way leaves it safe to clear: elements are zeroed, and a
 * zeroed element owns nothing. */
static mstar_status read_list(mstar__rd *r, const mstar__wpath *path, const list_kind *kind,
                              void **arr, uint32_t *count)
{
    uint32_t n;
    mstar_status st = kind->is_map ? mstar__rd_map(r, path, kind->max, kind->min_bytes, &n)
                                   : mstar__rd_array(r, path, kind->max, kind->min_bytes, &n);
    if (st == MSTAR_OK)
        st = mstar__wire_alloc(n, kind->elsize, arr);
    if (st != MSTAR_OK)
        return st;
    *count = n;
    for (uint32_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar__wpath pi = mstar__wpath_index(path, i);
        st = kind->read(r, &pi, (char *)*arr + (size_t)i * kind->elsize);
    }
    return st;
}

static mstar_status read_edge_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    return mstar__edge_read(r, path, elem);
}

/* {name: [descriptor]}: an edge per entry, holding only its name and descriptors. */
static mstar_status read_signal_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    mstar_edge *edge = elem;
    mstar_edge_init(edge);
    mstar_status st = mstar__rd_name(r, path, false, edge->name);
    if (st == MSTAR_OK)
        st = mstar__infos_read(r, path, edge);
    return st;
}

static mstar_status read_count_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    mstar_uuid_count *c = elem;
    mstar_status st = mstar__rd_uint(r, path, &c->uuid);
    if (st == MSTAR_OK)
        st = mstar__rd_int(r, path, &c->count);
    return st;
}

static mstar_status read_uuid_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    return mstar__rd_uint(r, path, elem);
}

static mstar_status read_int_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    return mstar__rd_int(r, path, elem);
}

static mstar_status read_name_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    return mstar__rd_name(r, path, false, elem);
}

static mstar_status read_rid_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    return mstar__rd_rid(r, path, elem);
}

static mstar_status read_kv_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    mstar_kv *kv = elem;
    const char *s;
    uint32_t len;
    mstar_status st = mstar__rd_str(r, path, &s, &len);
    if (st == MSTAR_OK && len >= sizeof(kv->key))
        st = mstar__wire_fail(MSTAR_EPROTO, path, "key of %u bytes, at most %zu", len,
                              sizeof(kv->key) - 1);
    if (st == MSTAR_OK)
        st = mstar__wire_check_name(MSTAR_EPROTO, path, s, len);
    if (st != MSTAR_OK)
        return st;
    memcpy(kv->key, s, len);
    return mstar__rd_int(r, path, &kv->value);
}

/* Where the fields of one rx or tx record being read go; dest is NULL for tx. */
typedef struct prof_fields {
    char *edge_name, *source, *dest;
    int64_t *count, *num_bytes;
    double *time_s;
} prof_fields;

static mstar_status read_prof_field(mstar__rd *r, const mstar__wpath *path, int field, void *ctx)
{
    prof_fields *p = ctx;
    switch ((mstar__prof_field)field) {
    case P_EDGE_NAME:
        return mstar__rd_name(r, path, false, p->edge_name);
    case P_SOURCE_ENTITY:
        return mstar__rd_name(r, path, false, p->source);
    case P_DEST_ENTITY:
        return mstar__rd_name(r, path, false, p->dest);
    case P_COUNT:
        return mstar__rd_int(r, path, p->count);
    case P_NUM_BYTES:
        return mstar__rd_int(r, path, p->num_bytes);
    case P_TIME:
        return mstar__rd_double(r, path, p->time_s);
    case P_COUNT_:
        break;
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

/* Every field of a record is required: rx has them all, tx all but dest_entity. */
static mstar_status read_prof(mstar__rd *r, const mstar__wpath *path, prof_fields *p)
{
    uint64_t all = (UINT64_C(1) << P_COUNT_) - 1;
    if (p->dest == NULL)
        all &= ~(UINT64_C(1) << P_DEST_ENTITY);
    mstar__wmap map = { mstar__prof_keys, P_COUNT_, all, all };
    return mstar__rd_fields(r, path, &map, read_prof_field, p);
}

static mstar_status read_rx_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    mstar_rx_info *rx = elem;
    prof_fields p = { rx->edge_name, rx->source_entity, rx->dest_entity,
                      &rx->count,    &rx->num_bytes,    &rx->time_s };
    return read_prof(r, path, &p);
}

static mstar_status read_tx_elem(mstar__rd *r, const mstar__wpath *path, void *elem)
{
    mstar_tx_info *tx = elem;
    prof_fields p = { tx->edge_name, tx->source_entity, NULL,
                      &tx->count,    &tx->num_bytes,    &tx->time_s };
    return read_prof(r, path, &p);
}

/* Smallest wire sizes of elements, to check counts against the bytes present before allocating:
 * an edge map holds at least {"next_node": "", "name": "a"}; a signal entry at least "a": [];
 * an rx record its six fields with one-byte values, a tx record its five; a name two bytes; a
 * metadata entry three; any other element one. */
static const list_kind edge_list = { false, MSTAR_WIRE_MAX_EDGES, 19, sizeof(mstar_edge),
                                     read_edge_elem };
static const list_kind signal_map = { true, MSTAR_WIRE_MAX_EDGES, 3, sizeof(mstar_edge),
                                      read_signal_elem };
static const list_kind count_map = { true, MSTAR_WIRE_MAX_ENTRIES, 2, sizeof(mstar_uuid_count),
                                     read_count_elem };
static const list_kind uuid_list = { false, MSTAR_WIRE_MAX_ENTRIES, 1, sizeof(mstar_tensor_id),
                                     read_uuid_elem };
static const list_kind int_list = { false, MSTAR_WIRE_MAX_ENTRIES, 1, sizeof(int64_t),
                                    read_int_elem };
static const list_kind name_list = { false, MSTAR_WIRE_MAX_ENTRIES, 2, MSTAR_NAME_MAX + 1,
                                     read_name_elem };
static const list_kind rid_list = { false, MSTAR_WIRE_MAX_ENTRIES, 1, sizeof(mstar_rid),
                                    read_rid_elem };
static const list_kind kv_map = { true, MSTAR_WIRE_MAX_KV, 3, sizeof(mstar_kv), read_kv_elem };
static const list_kind rx_list = { false, MSTAR_WIRE_MAX_ENTRIES, 64, sizeof(mstar_rx_info),
                                   read_rx_elem };
static const list_kind tx_list = { false, MSTAR_WIRE_MAX_ENTRIES, 48, sizeof(mstar_tx_info),
                                   read_tx_elem };

static mstar_status read_one_edge(mstar__rd *r, const mstar__wpath *path, mstar_msg *msg)
{
    mstar_status st = mstar__wire_alloc(1, sizeof(mstar_edge), (void **)&msg->edges);
    if (st != MSTAR_OK)
        return st;
    msg->nedges = 1;
    return mstar__edge_read(r, path, &msg->edges[0]);
}

static mstar_status read_body_value(mstar__rd *r, const mstar__wpath *path, mstar__body_field field,
                                    mstar_msg *msg)
{
    int32_t source;
    mstar_status st;
    switch (field) {
    case B_REQUEST_ID:
        return mstar__rd_rid(r, path, &msg->request_id);
    case B_REQUEST_IDS:
        return read_list(r, path, &rid_list, (void **)&msg->rids, &msg->nrids);
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
        return read_list(r, path, &edge_list, (void **)&msg->edges, &msg->nedges);
    case B_GRAPH_EDGE:
        return read_one_edge(r, path, msg);
    case B_INITIAL_SIGNALS:
    case B_PERSIST_SIGNALS:
        return read_list(r, path, &signal_map, (void **)&msg->edges, &msg->nedges);
    case B_SUCCESSFUL:
    case B_UUID_TO_REF_COUNT:
        return read_list(r, path, &count_map, (void **)&msg->counts, &msg->ncounts);
    case B_FAILED:
        return read_list(r, path, &uuid_list, (void **)&msg->uuids, &msg->nuuids);
    case B_PRODUCER_DONE:
        return read_list(r, path, &name_list, (void **)&msg->names, &msg->nnames);
    case B_LOOP_INDICES:
    case B_VALUES:
        return read_list(r, path, &int_list, (void **)&msg->ints, &msg->nints);
    case B_RX_INFO:
        return read_list(r, path, &rx_list, (void **)&msg->rx, &msg->nrx);
    case B_TX_INFO:
        return read_list(r, path, &tx_list, (void **)&msg->tx, &msg->ntx);
    case B_REQUEST_INFO:
    case B_INPUT_METADATA:
    case B_METADATA:
    case B_INFO:
        return read_list(r, path, &kv_map, (void **)&msg->kv, &msg->nkv);
    case B_COUNT_:
        break;
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

/* A field's value, then the field's rules. */
static mstar_status read_body_field(mstar__rd *r, const mstar__wpath *path, int field, void *ctx)
{
    mstar_msg *msg = ctx;
    mstar_status st = read_body_value(r, path, (mstar__body_field)field, msg);
    if (st == MSTAR_OK)
        st = mstar__body_check_field(MSTAR_EPROTO, path, msg, (mstar__body_field)field, false);
    return st;
}

/* The body of msg's type (already set), named "<TYPE>.body" in errors. */
static mstar_status read_body(mstar__rd *r, mstar_msg *msg)
{
    const mstar__body_schema *schema = &mstar__body_schemas[msg->type];
    mstar__wmap map = { mstar__body_keys, B_COUNT_, schema->fields, schema->required };
    mstar__wpath typed = mstar__wpath_key(NULL, mstar_msg_type_name(msg->type));
    mstar__wpath path = mstar__wpath_key(&typed, "body");
    mstar_status st = mstar__rd_fields(r, &path, &map, read_body_field, msg);
    if (st == MSTAR_OK)
        st = mstar__body_check_all(MSTAR_EPROTO, &path, msg);
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

/* The envelope being read: the body is read once the version and the type are known. The
 * message's fields are read in place (a failed decode clears it). */
typedef struct envelope {
    mstar_msg *msg;
    bool have_version, have_type;
    const char *body_at; /* where a body that came before them starts */
    bool body_done;
} envelope;

static mstar_status read_envelope_field(mstar__rd *r, const mstar__wpath *path, int field,
                                        void *ctx)
{
    envelope *e = ctx;
    mstar_msg_type type;
    mstar_status st;
    switch (field) {
    case E_V:
        st = read_version(r, path);
        e->have_version = st == MSTAR_OK;
        return st;
    case E_TYPE:
        if ((st = read_type(r, path, &type)) == MSTAR_OK)
            mstar__msg_set_type(e->msg, type); /* still in init state: no body read yet */
        e->have_type = st == MSTAR_OK;
        return st;
    case E_FROM:
        return mstar__rd_name(r, path, false, e->msg->from);
    case E_BODY:
        if (e->have_version && e->have_type) {
            e->body_done = true;
            return read_body(r, e->msg);
        }
        e->body_at = r->p;
        return mstar__rd_skip(r, path);
    }
    return mstar__wire_fail(MSTAR_EPROTO, path, "unhandled field");
}

static mstar_status read_message(mstar__rd *r, const mstar__wpath *root, void *out)
{
    envelope e = { .msg = out };
    mstar_status st = mstar__rd_fields(r, root, &envelope_map, read_envelope_field, &e);
    if (st == MSTAR_OK && !e.body_done) {
        mstar__rd late = *r;
        late.p = e.body_at;
        st = read_body(&late, e.msg);
    }
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

static mstar_status write_body_field(mstar__wr *w, const mstar__wpath *path, int field,
                                     const void *value)
{
    const mstar_msg *msg = value;
    switch ((mstar__body_field)field) {
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
    /* A type has a few of the 30 fields: only those (set bits, lowest first) are visited. */
    uint64_t fields = schema->required;
    for (uint64_t m = schema->fields & ~schema->required; m != 0; m &= m - 1) {
        int f = __builtin_ctzll(m);
        if (mstar__body_has(msg, (mstar__body_field)f))
            fields |= UINT64_C(1) << f;
    }
    /* The body's own fields are checked before any is written; edges and descriptors as they are
     * written (a failure discards the buffer either way). */
    mstar_status st = MSTAR_OK;
    for (uint64_t m = fields; st == MSTAR_OK && m != 0; m &= m - 1) {
        int f = __builtin_ctzll(m);
        mstar__wpath pf = mstar__wpath_key(path, mstar__body_keys[f].name);
        st = mstar__body_check_field(MSTAR_EINVAL, &pf, msg, (mstar__body_field)f, true);
    }
    if (st == MSTAR_OK)
        st = mstar__body_check_all(MSTAR_EINVAL, path, msg);
    if (st != MSTAR_OK)
        return st;
    mstar__wmap map = { mstar__body_keys, B_COUNT_, schema->fields, schema->required };
    return mstar__wr_fields(w, path, &map, fields, write_body_field, msg);
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

mstar_status mstar__msg_encode_into(const mstar_msg *msg, void **buf, size_t *cap, size_t *len)
{
    return mstar__encode_root_into("message", write_message, msg, buf, cap, len);
}
