/*
 * message.c — the control message as a C value: type names, defaults, ownership of its arrays
 * and the builders that append to them.
 *
 * A message is one flat struct whatever its type (wire.h lists which fields each type uses), so
 * the mesh can receive into one value and dispatch on `type`. Builders copy their arguments;
 * mstar_msg_clear frees everything, including each edge's descriptors.
 */
#include "wire_internal.h"

#include <stdlib.h>
#include <string.h>

static const char *const type_names[MSTAR_MSG_TYPE_COUNT_] = {
    [MSTAR_MSG_INVALID] = NULL,
    [MSTAR_MSG_NEW_REQUEST] = "NEW_REQUEST",
    [MSTAR_MSG_INPUT_SIGNALS] = "INPUT_SIGNALS",
    [MSTAR_MSG_TENSOR_RECEIVED] = "TENSOR_RECEIVED",
    [MSTAR_MSG_UNPERSIST_TENSORS] = "UNPERSIST_TENSORS",
    [MSTAR_MSG_REMOVE_REQUEST] = "REMOVE_REQUEST",
    [MSTAR_MSG_CONDUCTOR_NEW_REQUEST] = "CONDUCTOR_NEW_REQUEST",
    [MSTAR_MSG_WORKER_GRAPHS_DONE] = "WORKER_GRAPHS_DONE",
    [MSTAR_MSG_RESULT_TENSORS] = "result_tensors",
    [MSTAR_MSG_REQUEST_COMPLETE] = "request_complete",
    [MSTAR_MSG_ABORT_REQUEST] = "ABORT_REQUEST",
    [MSTAR_MSG_FAIL_REQUESTS] = "FAIL_REQUESTS",
    [MSTAR_MSG_DRAIN_REQUEST] = "DRAIN_REQUEST",
    [MSTAR_MSG_READS_DONE] = "READS_DONE",
    [MSTAR_MSG_RANK_VALUES] = "RANK_VALUES",
    [MSTAR_MSG_HELLO] = "HELLO",
    [MSTAR_MSG_SHUTDOWN] = "SHUTDOWN",
};

const char *mstar_msg_type_name(mstar_msg_type type)
{
    if ((int)type <= MSTAR_MSG_INVALID || (int)type >= MSTAR_MSG_TYPE_COUNT_)
        return NULL;
    return type_names[type];
}

mstar_msg_type mstar__msg_type_from_name(const char *name, size_t len)
{
    for (int t = MSTAR_MSG_INVALID + 1; t < MSTAR_MSG_TYPE_COUNT_; t++) {
        if (strlen(type_names[t]) == len && memcmp(type_names[t], name, len) == 0)
            return (mstar_msg_type)t;
    }
    return MSTAR_MSG_INVALID;
}

void mstar__msg_set_type(mstar_msg *msg, mstar_msg_type type)
{
    msg->type = type;
    if (type == MSTAR_MSG_INPUT_SIGNALS)
        strcpy(msg->text, "default"); /* the reference's partition_name default */
}

void mstar_msg_init(mstar_msg *msg, mstar_msg_type type)
{
    memset(msg, 0, sizeof(*msg));
    mstar__msg_set_type(msg, type);
}

void mstar_msg_clear(mstar_msg *msg)
{
    for (uint32_t i = 0; i < msg->nedges; i++)
        free(msg->edges[i].tensor_info); /* the edges go with the array: no reset of each */
    free(msg->edges);
    free(msg->counts);
    free(msg->uuids);
    free(msg->names);
    free(msg->rids);
    free(msg->ints);
    free(msg->rx);
    free(msg->tx);
    free(msg->kv);
    mstar_msg_init(msg, MSTAR_MSG_INVALID);
}

/* Append a copy of `elem` to an array holding *n elements, at most `max`. */
static mstar_status append(void **arr, uint32_t *n, size_t elsize, uint32_t max, const char *what,
                           const void *elem)
{
    if (*n >= max)
        return mstar_error_set(MSTAR_ENOSPC, "message already holds %u %s, at most %u", *n, what,
                               max);
    mstar_status st = mstar__wire_grow(arr, *n, elsize);
    if (st != MSTAR_OK)
        return st;
    memcpy((char *)*arr + (size_t)*n * elsize, elem, elsize);
    (*n)++;
    return MSTAR_OK;
}

mstar_status mstar_msg_add_edge(mstar_msg *msg, const mstar_edge *edge)
{
    if (msg->nedges >= MSTAR_WIRE_MAX_EDGES)
        return mstar_error_set(MSTAR_ENOSPC, "message already holds %d edges",
                               MSTAR_WIRE_MAX_EDGES);
    mstar_edge copy;
    mstar_status st = mstar_edge_copy(&copy, edge);
    if (st != MSTAR_OK)
        return st;
    st = append((void **)&msg->edges, &msg->nedges, sizeof(copy), MSTAR_WIRE_MAX_EDGES, "edges",
                &copy);
    if (st != MSTAR_OK)
        mstar_edge_clear(&copy);
    return st;
}

mstar_status mstar_msg_add_count(mstar_msg *msg, mstar_tensor_id uuid, int64_t count)
{
    mstar_uuid_count c = { uuid, count };
    return append((void **)&msg->counts, &msg->ncounts, sizeof(c), MSTAR_WIRE_MAX_ENTRIES, "counts",
                  &c);
}

mstar_status mstar_msg_add_uuid(mstar_msg *msg, mstar_tensor_id uuid)
{
    return append((void **)&msg->uuids, &msg->nuuids, sizeof(uuid), MSTAR_WIRE_MAX_ENTRIES, "uuids",
                  &uuid);
}

mstar_status mstar_msg_add_name(mstar_msg *msg, const char *name)
{
    char copy[MSTAR_NAME_MAX + 1] = { 0 };
    mstar_status st = mstar__wire_copy_name(copy, name, "name");
    if (st != MSTAR_OK)
        return st;
    return append((void **)&msg->names, &msg->nnames, sizeof(copy), MSTAR_WIRE_MAX_ENTRIES, "names",
                  copy);
}

mstar_status mstar_msg_add_rid(mstar_msg *msg, const mstar_rid *rid)
{
    mstar__wpath path = mstar__wpath_key(NULL, "request id");
    mstar_status st = mstar__wire_check_rid(MSTAR_EINVAL, &path, rid);
    if (st != MSTAR_OK)
        return st;
    return append((void **)&msg->rids, &msg->nrids, sizeof(*rid), MSTAR_WIRE_MAX_ENTRIES,
                  "request ids", rid);
}

mstar_status mstar_msg_add_int(mstar_msg *msg, int64_t value)
{
    return append((void **)&msg->ints, &msg->nints, sizeof(value), MSTAR_WIRE_MAX_ENTRIES, "ints",
                  &value);
}

mstar_status mstar_msg_add_rx(mstar_msg *msg, const mstar_rx_info *rx)
{
    return append((void **)&msg->rx, &msg->nrx, sizeof(*rx), MSTAR_WIRE_MAX_ENTRIES, "rx infos",
                  rx);
}

mstar_status mstar_msg_add_tx(mstar_msg *msg, const mstar_tx_info *tx)
{
    return append((void **)&msg->tx, &msg->ntx, sizeof(*tx), MSTAR_WIRE_MAX_ENTRIES, "tx infos",
                  tx);
}

static mstar_kv *find_kv(const mstar_msg *msg, const char *key)
{
    for (uint32_t i = 0; i < msg->nkv; i++) {
        if (strcmp(msg->kv[i].key, key) == 0)
            return &msg->kv[i];
    }
    return NULL;
}

mstar_status mstar_msg_add_kv(mstar_msg *msg, const char *key, int64_t value)
{
    if (key == NULL)
        return mstar_error_set(MSTAR_EINVAL, "metadata key is NULL");
    mstar_kv kv = { { 0 }, value };
    size_t len = strnlen(key, sizeof(kv.key));
    if (len == sizeof(kv.key))
        return mstar_error_set(MSTAR_EINVAL, "metadata key is longer than %zu bytes",
                               sizeof(kv.key) - 1);
    mstar_status st = mstar_name_validate(key, len, "metadata key");
    if (st != MSTAR_OK)
        return st;
    mstar_kv *existing = find_kv(msg, key);
    if (existing != NULL) {
        existing->value = value;
        return MSTAR_OK;
    }
    memcpy(kv.key, key, len);
    return append((void **)&msg->kv, &msg->nkv, sizeof(kv), MSTAR_WIRE_MAX_KV, "metadata entries",
                  &kv);
}

int64_t mstar_msg_get_kv(const mstar_msg *msg, const char *key, int64_t def)
{
    const mstar_kv *kv = key != NULL ? find_kv(msg, key) : NULL;
    return kv != NULL ? kv->value : def;
}
