/*
 * ucx_transport.c — the communication manager's remote transport over UCX (reference
 * MooncakeCommunicationManager; transport-spec §4), kinds ucx-tcp and ucx-rdma.
 *
 * Producer: staging registers each tensor's own memory with the engine (no copy: the bytes are
 * read where the store keeps them) and release — when the tensor is collected — unregisters it,
 * which also waits out replies still sending from it. The descriptor needs nothing stamped: its
 * address and session id were written at store time, and the AM protocol finds the region by
 * address, as Mooncake's engine does.
 *
 * Consumer: check validates what came from the wire (session id, key, range); read allocates a
 * buffer per descriptor and submits all of them to the engine's async reader as one list, whose
 * completion handle gates the ACK (the manager sends ACKs only for finished reads, and keeps
 * reads in flight out of cleanup, §8.2). A failed read fails that handle only (§8.11).
 *
 * Host memory only: a tensor in CUDA memory needs staging through pinned host memory, which is
 * not built yet, and is refused with MSTAR_ENOTSUP.
 */
#include "tensors/ucx/ucx_internal.h"

#include "tensors/transport.h"

#include <stdlib.h>
#include <string.h>

typedef struct ucx_transport {
    mstar__transport base;
    mstar__ucx_engine *ue;
} ucx_transport;

static mstar__ucx_engine *engine_of(mstar__transport *t)
{
    return ((ucx_transport *)t)->ue;
}

static mstar_status refuse_device(const char *what, mstar_device d)
{
    return mstar_error_set(MSTAR_ENOTSUP,
                           "ucx transport: %s is in CUDA memory (device %d); UCX reads host "
                           "memory only (staging through pinned memory is not built yet)",
                           what, (int)d.index);
}

static void unregister_all(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (mstar_tensor_nbytes(&items[i].tensor) > 0)
            mstar__ucx_engine_unregister(engine_of(t), mstar_tensor_ptr(&items[i].tensor));
}

static mstar_status stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (items[i].tensor.device.type == MSTAR_DEVICE_CUDA) {
            mstar_status st = refuse_device("a staged tensor", items[i].tensor.device);
            unregister_all(t, items, i);
            return st;
        }
        uint64_t t0 = mstar__now_ns(), nbytes = mstar_tensor_nbytes(&items[i].tensor);
        items[i].tx_bytes = nbytes;
        items[i].tx_time_s = 0;
        if (nbytes == 0)
            continue; /* nothing to read: a zero-byte read needs no region */
        uint8_t key[MSTAR_REMOTE_KEY_MAX];
        uint32_t key_len;
        mstar_status st = mstar__ucx_engine_register(
            engine_of(t), mstar_tensor_ptr(&items[i].tensor), nbytes, key, &key_len);
        if (st != MSTAR_OK) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", mstar_last_error());
            unregister_all(t, items, i);
            return mstar_error_set(st, "staging tensor 0x%016llx: %s",
                                   (unsigned long long)items[i].uuid, msg);
        }
        items[i].tx_time_s = (double)(mstar__now_ns() - t0) / 1e9;
    }
    return MSTAR_OK;
}

static void release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    if (mstar_tensor_nbytes(tensor) == 0)
        return;
    if (mstar__ucx_engine_unregister(engine_of(t), mstar_tensor_ptr(tensor)) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "ucx transport: releasing tensor 0x%016llx: %s",
                  (unsigned long long)uuid, mstar_last_error());
}

static mstar_status check(mstar__transport *t, const mstar_tensor_info *info)
{
    (void)t;
    if (info->shm_segment[0] != '\0')
        return mstar_error_set(MSTAR_EPROTO,
                               "descriptor 0x%016llx was staged in shared-memory segment '%s'; "
                               "this consumer reads over UCX (every entity must use the same "
                               "tensor comm protocol)",
                               (unsigned long long)info->uuid, info->shm_segment);
    struct sockaddr_storage sa;
    socklen_t sa_len;
    mstar_status st = mstar__ucx_session_parse(info->source_session_id,
                                               "descriptor source_session_id", &sa, &sa_len);
    if (st != MSTAR_OK)
        return st;
    uint64_t addr, end;
    if (!mstar__add_u64(info->address, info->offset, &addr) ||
        !mstar__add_u64(addr, info->nbytes, &end))
        return mstar_error_set(MSTAR_EPROTO,
                               "descriptor 0x%016llx: address 0x%llx + offset %llu + nbytes %llu "
                               "overflows",
                               (unsigned long long)info->uuid, (unsigned long long)info->address,
                               (unsigned long long)info->offset, (unsigned long long)info->nbytes);
    if (info->remote_key_len > 0) {
        mstar__ucx_key_view v;
        return mstar__ucx_key_parse(info->remote_key, info->remote_key_len, "descriptor remote_key",
                                    &v);
    }
    return MSTAR_OK;
}

static void free_bufs(mstar__read_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mstar__buf_release(items[i].buf);
        items[i].buf = NULL;
    }
}

static mstar_status read_items(mstar__transport *t, mstar__read_item *items, size_t n,
                               mstar_completion **done)
{
    const mstar__transport_env *env = t->env;
    if (env->backend != NULL && mstar_backend_device(env->backend).type == MSTAR_DEVICE_CUDA)
        return refuse_device("the read buffer", mstar_backend_device(env->backend));
    mstar__ucx_read_info *infos = calloc(n > 0 ? n : 1, sizeof(*infos));
    if (infos == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport: %zu reads", n);
    mstar_status st = MSTAR_OK;
    size_t k = 0, bytes = 0;
    for (; k < n && st == MSTAR_OK; k++) {
        const mstar_tensor_info *info = items[k].info;
        items[k].registered = false; /* reads land in plain memory: nothing to release */
        st = mstar__transport_alloc_dest(env, info->nbytes, &items[k].buf);
        if (st != MSTAR_OK)
            break;
        infos[k].session = info->source_session_id;
        infos[k].local_ptr = items[k].buf->data;
        infos[k].remote_addr = info->address + info->offset;
        infos[k].nbytes = info->nbytes;
        infos[k].remote_key = info->remote_key;
        infos[k].remote_key_len = info->remote_key_len;
        bytes += info->nbytes;
    }
    mstar__ucx_reader *r = NULL;
    if (st == MSTAR_OK)
        st = mstar__ucx_engine_reader(engine_of(t), &r);
    *done = NULL;
    if (st == MSTAR_OK && bytes > 0)
        st = mstar__ucx_reader_submit(r, infos, n, env->wake_fd, done);
    free(infos);
    if (st != MSTAR_OK)
        free_bufs(items, k);
    return st;
}

static void destroy(mstar__transport *t)
{
    free(t); /* the engine belongs to the manager and goes after the transport */
}

static const mstar__transport_ops ucx_ops = {
    .name = "ucx",
    .stamps_shm_placement = false,
    .needs_cpu_tensor = false,
    .stage = stage,
    .placement = NULL,
    .release = release,
    .check = check,
    .read = read_items,
    .maintain = NULL,
    .arena_stats = NULL,
    .destroy = destroy,
};

mstar_status mstar__transport_ucx_create(const mstar__transport_env *env, mstar__transport **out)
{
    mstar__ucx_engine *ue = mstar__ucx_transfer_engine_ucx(env->engine);
    if (ue == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx transport: the manager's engine is not UCX");
    ucx_transport *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport");
    t->base.ops = &ucx_ops;
    t->base.env = env;
    t->ue = ue;
    *out = &t->base;
    return MSTAR_OK;
}
