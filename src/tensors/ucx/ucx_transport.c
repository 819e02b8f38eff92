/*
 * ucx_transport.c — the communication manager's remote transport over UCX (reference
 * MooncakeCommunicationManager; design.md "Transports"), kinds ucx-tcp and ucx-rdma.
 *
 * Producer: staging registers each tensor's bytes with the engine — a host tensor's own memory
 * (no copy), a tensor in the backend's memory through a pinned host copy (a buffer of the
 * manager's pinned pool, device/pinned_pool.h) made with a
 * device-to-host copy on the staging stream (synchronised before staging returns; Debian's UCX
 * has no CUDA transport). The stamp writes what a consumer needs onto every outgoing descriptor:
 * the session, the address of the registered bytes and their remote key (the get protocol and
 * RDMA need the key; the AM protocol checks it when present). Release — when the tensor is
 * collected — unregisters, which also waits out replies still sending, then frees the copy.
 *
 * Consumer: check validates what came from the wire (session id, key, range); read allocates a
 * buffer per descriptor and submits all of them to the engine's async reader as one list, whose
 * completion handle gates the ACK (the manager sends ACKs only for finished reads, and keeps
 * reads in flight out of cleanup, T-2). A failed read fails that handle only (T-11). Into the
 * backend's memory the reads land in one pinned host buffer (from the pool) first; the reader's
 * thread then copies them up on the read stream and the handle completes once those copies have
 * landed. The copies wait for an event recorded at submit on the staging stream (which is ordered
 * after the runtime's default stream): the destination buffers are not written before the work the
 * caller queued before the read — whoever last used that memory — has run, as the reference's
 * reader orders its copy stream.
 *
 * With the host backend the same staged path runs (host memory standing in for the device), so
 * CI exercises it.
 */
#include "tensors/ucx/ucx_transport.h"

#include "tensors/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

/* What staging registered for one uuid. */
typedef struct stage_rec {
    void *ptr; /* the registered bytes: the tensor's own memory, or `pinned` */
    uint64_t nbytes;
    bool pinned; /* ptr is a pinned copy this transport allocated from the backend */
} stage_rec;

typedef struct ucx_transport {
    mstar__transport base;
    mstar__ucx_engine *ue;
    mstar__u64map staged;              /* uuid → stage_rec * (tensors with bytes only) */
    atomic_uint_fast64_t pinned_bytes; /* staged copies and read buffers in flight */
} ucx_transport;

static ucx_transport *self(mstar__transport *t)
{
    return (ucx_transport *)t;
}

/* ---- pinned host memory --------------------------------------------------------------------- */

/* From the manager's pool of pinned buffers: a staged tensor or a read of a few KiB must not pay
 * for pinning fresh memory. The engine registration stays per tensor (stage_one): a buffer kept
 * registered across reuses would let a consumer holding a released tensor's key read whatever
 * the buffer holds next. */
static mstar_status pinned_alloc(ucx_transport *u, uint64_t n, void **out)
{
    mstar_status st = mstar__pinned_pool_get(u->base.env->pinned, n, out);
    if (st != MSTAR_OK)
        return mstar_error_wrap("ucx transport: %llu bytes of pinned host memory",
                                (unsigned long long)n);
    atomic_fetch_add(&u->pinned_bytes, n);
    return MSTAR_OK;
}

/* Any thread (a read's buffer is given back by the reader's thread). */
static void pinned_free(ucx_transport *u, void *ptr, uint64_t n)
{
    mstar__pinned_pool_put(u->base.env->pinned, ptr);
    atomic_fetch_sub(&u->pinned_bytes, n);
}

/* ---- producer ------------------------------------------------------------------------------- */

static void unstage(ucx_transport *u, mstar_tensor_id uuid)
{
    uint64_t v;
    if (!mstar__u64map_remove(&u->staged, uuid, &v))
        return;
    stage_rec *s = (stage_rec *)(uintptr_t)v;
    if (mstar__ucx_engine_unregister(u->ue, s->ptr) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "ucx transport: releasing tensor 0x%016llx: %s",
                  (unsigned long long)uuid, mstar_last_error());
    if (s->pinned)
        pinned_free(u, s->ptr, s->nbytes);
    free(s);
}

/* Register one item's bytes (through a pinned copy when they are in the backend's memory). */
static mstar_status stage_one(ucx_transport *u, mstar__stage_item *item)
{
    const mstar__transport_env *env = u->base.env;
    uint64_t nbytes = mstar_tensor_nbytes(&item->tensor);
    stage_rec *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport: staging record");
    s->nbytes = nbytes;
    s->ptr = mstar_tensor_ptr(&item->tensor);
    mstar_status st = MSTAR_OK;
    if (mstar__transport_on_device(env, &item->tensor)) {
        s->pinned = true;
        st = pinned_alloc(u, nbytes, &s->ptr);
        if (st == MSTAR_OK &&
            (st = mstar__transport_copy_to_host(env, &item->tensor, s->ptr)) != MSTAR_OK)
            pinned_free(u, s->ptr, nbytes);
        if (st != MSTAR_OK) {
            free(s);
            return st;
        }
    }
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
    st = mstar__ucx_engine_register(u->ue, s->ptr, nbytes, key, &key_len);
    if (st == MSTAR_OK &&
        (st = mstar__u64map_put(&u->staged, item->uuid, (uint64_t)(uintptr_t)s)) != MSTAR_OK)
        mstar__ucx_engine_unregister(u->ue, s->ptr);
    if (st != MSTAR_OK) {
        if (s->pinned)
            pinned_free(u, s->ptr, nbytes);
        free(s);
    }
    return st;
}

static mstar_status stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    ucx_transport *u = self(t);
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = mstar__now_ns(), nbytes = mstar_tensor_nbytes(&items[i].tensor);
        items[i].tx_bytes = nbytes;
        items[i].tx_time_s = 0;
        if (nbytes == 0)
            continue; /* nothing to read: a zero-byte read needs no region */
        mstar_status st = stage_one(u, &items[i]);
        if (st != MSTAR_OK) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", mstar_last_error());
            for (size_t j = 0; j < i; j++)
                unstage(u, items[j].uuid);
            return mstar_error_set(st, "staging tensor 0x%016llx: %s",
                                   (unsigned long long)items[i].uuid, msg);
        }
        items[i].tx_time_s = (double)(mstar__now_ns() - t0) / 1e9;
    }
    return MSTAR_OK;
}

static void stamp(mstar__transport *t, mstar_tensor_id uuid, mstar_tensor_info *info)
{
    ucx_transport *u = self(t);
    snprintf(info->source_session_id, sizeof(info->source_session_id), "%s",
             mstar__ucx_engine_session_id(u->ue));
    info->remote_key_len = 0;
    uint64_t v;
    if (!mstar__u64map_get(&u->staged, uuid, &v))
        return; /* no bytes: nothing to read, no key */
    const stage_rec *s = (const stage_rec *)(uintptr_t)v;
    info->address = (uint64_t)(uintptr_t)s->ptr;
    if (mstar__ucx_engine_key(u->ue, s->ptr, info->remote_key, &info->remote_key_len) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "ucx transport: tensor 0x%016llx has no key: %s",
                  (unsigned long long)uuid, mstar_last_error());
}

static void release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    (void)tensor;
    unstage(self(t), uuid);
}

/* ---- consumer ------------------------------------------------------------------------------- */

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

/* Reads into the backend's memory: they land in `bounce` (pinned), then go up by copies. */
typedef struct device_read {
    ucx_transport *u;
    mstar_event *ready; /* recorded at submit: the work before the read */
    uint8_t *bounce;
    uint64_t bounce_len;
    size_t n;
    struct {
        void *dst;
        uint64_t at; /* offset in bounce */
        uint64_t nbytes;
    } copies[];
} device_read;

#define BOUNCE_ALIGN 64

static void device_read_free(device_read *d)
{
    if (d->bounce != NULL)
        pinned_free(d->u, d->bounce, d->bounce_len);
    mstar_event_destroy(d->ready);
    free(d);
}

/* The reader's `then`: copy what landed up to the backend's memory and wait for it, so that
 * the handle completes only once nothing writes the destination buffers any more. */
static mstar_status land_on_device(void *ctx, mstar_status reads)
{
    device_read *d = ctx;
    mstar_stream *h2d = d->u->base.env->h2d;
    mstar_status st = reads;
    bool queued = false;
    if (st == MSTAR_OK)
        st = mstar_stream_wait_event(h2d, d->ready);
    for (size_t i = 0; i < d->n && st == MSTAR_OK; i++) {
        if (d->copies[i].nbytes == 0)
            continue;
        st = mstar_memcpy_async(h2d, d->copies[i].dst, d->bounce + d->copies[i].at,
                                (size_t)d->copies[i].nbytes, MSTAR_MEMCPY_H2D);
        queued = queued || st == MSTAR_OK;
    }
    if (st == MSTAR_OK && queued)
        st = mstar_event_record(d->ready, h2d);
    if (st == MSTAR_OK && queued)
        st = mstar_event_synchronize(d->ready);
    else if (queued)
        mstar_stream_synchronize(h2d); /* copies already queued read the bounce buffer */
    char msg[256] = "";
    if (st != MSTAR_OK)
        snprintf(msg, sizeof(msg), "%s%s", reads == MSTAR_OK ? "copying reads to the device: " : "",
                 mstar_last_error());
    device_read_free(d);
    return st == MSTAR_OK ? MSTAR_OK : mstar_error_set(st, "%s", msg);
}

/* Lay the reads (some bytes in all) out in one pinned buffer and order its copies after the
 * caller's work. */
static mstar_status device_read_prepare(ucx_transport *u, mstar__read_item *items, size_t n,
                                        mstar__ucx_read_info *infos, device_read **out)
{
    const mstar__transport_env *env = u->base.env;
    device_read *d = calloc(1, sizeof(*d) + n * sizeof(d->copies[0]));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport: %zu device reads", n);
    d->u = u;
    d->n = n;
    uint64_t len = 0;
    for (size_t i = 0; i < n; i++) {
        d->copies[i].dst = items[i].buf->data;
        d->copies[i].at = len;
        d->copies[i].nbytes = items[i].info->nbytes;
        len += (items[i].info->nbytes + BOUNCE_ALIGN - 1) / BOUNCE_ALIGN * BOUNCE_ALIGN;
    }
    mstar_status st = pinned_alloc(u, len, (void **)&d->bounce);
    if (st == MSTAR_OK)
        d->bounce_len = len;
    else
        d->bounce = NULL;
    if (st == MSTAR_OK)
        st = mstar_event_create(env->backend, &d->ready);
    if (st == MSTAR_OK)
        st = mstar_event_record(d->ready, env->d2h);
    if (st != MSTAR_OK) {
        device_read_free(d);
        return st;
    }
    for (size_t i = 0; i < n; i++)
        infos[i].local_ptr = d->bounce + d->copies[i].at;
    *out = d;
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
    ucx_transport *u = self(t);
    const mstar__transport_env *env = t->env;
    mstar__ucx_read_info *infos = calloc(n > 0 ? n : 1, sizeof(*infos));
    if (infos == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport: %zu reads", n);
    mstar_status st = MSTAR_OK;
    size_t k = 0;
    uint64_t bytes = 0;
    for (; k < n && st == MSTAR_OK; k++) {
        const mstar_tensor_info *info = items[k].info;
        items[k].registered = false; /* reads land in plain memory: nothing to release */
        st = mstar__transport_read_dest(env, items[k].into, info->nbytes, &items[k].buf);
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
    device_read *d = NULL;
    if (st == MSTAR_OK && bytes > 0 && env->backend != NULL)
        st = device_read_prepare(u, items, n, infos, &d);
    mstar__ucx_reader *r = NULL;
    if (st == MSTAR_OK)
        st = mstar__ucx_engine_reader(u->ue, &r);
    *done = NULL;
    if (st == MSTAR_OK && bytes > 0)
        st = mstar__ucx_reader_submit_then(r, infos, n, env->notice,
                                           d != NULL ? land_on_device : NULL, d, done);
    free(infos);
    if (st != MSTAR_OK) {
        if (d != NULL)
            device_read_free(d); /* not submitted: its `then` never runs */
        free_bufs(items, k);
    }
    return st;
}

static void destroy(mstar__transport *t)
{
    ucx_transport *u = self(t);
    /* The manager collected every tensor first; anything left is released here all the same. */
    size_t it = 0;
    uint64_t uuid, v;
    while (mstar__u64map_next(&u->staged, &it, &uuid, &v)) {
        stage_rec *s = (stage_rec *)(uintptr_t)v;
        mstar__ucx_engine_unregister(u->ue, s->ptr);
        if (s->pinned)
            pinned_free(u, s->ptr, s->nbytes);
        free(s);
    }
    mstar__u64map_free(&u->staged);
    free(u); /* the engine belongs to the manager and goes after the transport */
}

static const mstar__transport_ops ucx_ops = {
    .name = "ucx",
    .needs_cpu_tensor = false,
    .stage = stage,
    .stamp = stamp,
    .release = release,
    .check = check,
    .read = read_items,
    .maintain = NULL,
    .arena_stats = NULL,
    .destroy = destroy,
};

mstar_status mstar__transport_ucx_create(const mstar__transport_env *env, mstar__transport **out)
{
    mstar__ucx_engine *ue = env->ucx;
    if (ue == NULL)
        return mstar_error_set(MSTAR_EINVAL, "ucx transport: the manager has no UCX engine");
    ucx_transport *u = calloc(1, sizeof(*u));
    if (u == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transport");
    u->base.ops = &ucx_ops;
    u->base.env = env;
    u->ue = ue;
    mstar__u64map_init(&u->staged);
    atomic_init(&u->pinned_bytes, 0);
    *out = &u->base;
    return MSTAR_OK;
}

uint64_t mstar__transport_ucx_pinned_bytes(mstar__transport *t)
{
    return t->ops == &ucx_ops ? (uint64_t)atomic_load(&self(t)->pinned_bytes) : 0;
}
