/*
 * cuda_ipc_transport.c — the device-to-device route between processes of one host (CUDA IPC),
 * as a transport that wraps the staged one (files or arena).
 *
 * Producer: staging a device tensor exports the allocation segment that holds it (once per
 * segment: the handle is cached by segment base). If the staging stream still has work queued,
 * it records one of this manager's interprocess events (used in turn, one per stage call) behind
 * that work, so a consumer that waits on it never reads before the producer's kernels have
 * written; if the stream is already idle the bytes are written, and the descriptor's event handle
 * is left all zero: nothing to wait for. That matters on a GPU shared by several processes: an
 * interprocess event's record runs on the compute engine, and each switch of that engine between
 * two processes' contexts cost about 130 us on an H200 (a handoff paid two). `stamp` puts
 * the segment handle, the event handle, where the bytes sit in the segment, this host's boot id and
 * the producer's pid into the descriptor's cuda_ipc map, and stage publishes all of it, the uuid
 * last, in the producer's registry (cuda_ipc_registry.h), whose entry release clears before the
 * block can be reused. With MSTAR_CUDA_IPC=AUTO the staged copy
 * is made as well, so a consumer that cannot use the route (no GPU, route off, a failed open) reads
 * that instead; with MSTAR_CUDA_IPC=1 only the route is offered and such a consumer fails clearly.
 *
 * Consumer: a descriptor with a route from this host is read only if the registry of the entity
 * and pid it names holds its uuid with the same route (so a handle is bound to its exporter, and
 * a tensor released since is not read), by opening the segment (cached per
 * producer entity and handle, so many tensors in one segment pay one open), checking the real
 * segment size against the descriptor, waiting for the producer's event, and copying device to
 * device into this process's memory. A small read then polls for its copies to land for up to
 * MSTAR_CUDA_IPC_SPIN_US (waking a sleeping loop costs more than the copy); otherwise they land
 * in the background, finished by the route's watcher thread (landing.h) when a probe event
 * recorded behind them fires; either way the registry must still hold the uuid once they have
 * landed. A view (mstar_comm_start_read_views) copies nothing: once the event has fired and the
 * registry holds the uuid, the node gets the producer's bytes in place in this process's mapping,
 * which stays open while the view lives; its ACK goes when the view is let go, so the producer
 * keeps the memory meanwhile, and mstar_comm_view_check asks the registry again.
 * The wait polls the event from the host, bounded by the
 * producer's liveness and MSTAR_CUDA_IPC_TIMEOUT_S, before anything is queued: a stream told to
 * wait on the event of a producer killed before it fired would wait forever, and every later
 * read on that stream with it; the read completes (and the ACK goes)
 * once the copy has landed and the producer was still alive when it did. Mappings of producers
 * that have exited are closed by `maintain` when no read is copying.
 *
 * The host backend's stand-in (device/ipc_host.c) lets all of this run without a GPU when
 * MSTAR_CUDA_IPC=1; AUTO turns the route on for CUDA backends only.
 */
#include "tensors/cuda_ipc/cuda_ipc.h"

#include "core/u64map.h"
#include "core/vec.h"
#include "device/backend.h"
#include "tensors/completion.h"
#include "tensors/cuda_ipc/cuda_ipc_registry.h"
#include "tensors/cuda_ipc/cuda_ipc_test_hooks.h"
#include "tensors/cuda_ipc/landing.h"
#include "tensors/cuda_ipc/nap.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A segment this process exported: base → handle. */
struct exported {
    void *base;
    uint64_t size;
    uint8_t handle[MSTAR__IPC_HANDLE_BYTES];
};

/* Another process's segment, open here. */
struct opened {
    uint64_t used; /* the tick of its last use: the least used one goes when the cache is full */
    char entity[MSTAR_NAME_MAX + 1];
    uint8_t handle[MSTAR__IPC_HANDLE_BYTES];
    void *base;
    uint64_t size;
    int32_t pid;
    uint32_t views; /* views into it still held here: it is neither evicted nor closed till 0 */
};

/* Another process's event, open here. */
struct opened_event {
    uint64_t used;
    char entity[MSTAR_NAME_MAX + 1];
    uint8_t handle[MSTAR__IPC_HANDLE_BYTES];
    mstar_event *event;
    int32_t pid;
    bool stuck; /* a wait for it timed out, and it has not been seen to fire since */
};

/* Another producer's registry, mapped here. */
struct peer {
    uint64_t used;
    mstar__ipc_peer_reg *reg; /* the cache's reference */
};

/* Interprocess events a producer uses in turn, one per stage call. An event answers only for its
 * latest record, so with a single one a consumer polling it while the producer keeps staging
 * behind a busy stream would wait for work staged after its tensor, and might never see it
 * done; with a ring it waits at most for the stages until the slot comes round again. */
#define EVENT_RING MSTAR__IPC_REG_EVENTS

/* How many segments, events and producers' registries a consumer keeps open; past that the least
 * recently used goes (after the copies queued so far have run). Only what a registry vouches for
 * is ever opened, so these hold real producers' exports: the bound is for a deployment with
 * more of them than a consumer reads from at once. */
#define CACHE_MAX 256

typedef struct ipc_transport {
    mstar__transport base;
    mstar__transport_ops ops; /* ipc_ops, adjusted to the inner transport */
    mstar__transport *inner;
    mstar__cuda_ipc_mode mode;
    double timeout_s; /* MSTAR_CUDA_IPC_TIMEOUT_S: how long a read waits for a producer's event */
    char host_id[MSTAR_HOST_ID_MAX + 1];
    /* producer */
    mstar_event *events[EVENT_RING]; /* each NULL until first used */
    uint8_t event_handles[EVENT_RING][MSTAR__IPC_HANDLE_BYTES];
    size_t event_next;          /* the slot this stage call records; the next one after it */
    mstar_event *idle_probe;    /* a plain event: has the staging stream run all it was given? */
    mstar__vec exported;        /* struct exported, valid while the backend generation is: */
    uint64_t exported_gen;      /* mstar__ipc_generation when `exported` was last emptied */
    mstar__u64map staged;       /* uuid → mstar_cuda_ipc_ref * (offset of the tensor's byte 0) */
    mstar__u64map inner_staged; /* uuid → 1 when the inner transport staged it too */
    mstar__ipc_registry *registry; /* what this producer exported, made with its first export */
    /* consumer */
    mstar__vec opened;        /* struct opened */
    mstar__vec opened_events; /* struct opened_event */
    mstar__vec peers;         /* struct peer */
    size_t cache_max;         /* CACHE_MAX (tests lower it) */
    uint64_t tick;            /* counts cache uses */
    mstar__landing *landing;  /* finishes the reads whose copies land in the background */
    double spin_us;           /* MSTAR_CUDA_IPC_SPIN_US: how long a read polls for its copies */
    uint64_t opens;           /* segments opened so far (tests: one open for many tensors) */
    uint64_t spins;           /* read calls that polled for their copies to land (tests) */
    unsigned fail_watch;      /* tests: hand-overs to `landing` still to fail as out of memory */
    bool warned_export;       /* note_unrouted said so for a failed export */
    bool noted_unexported;    /* ... and for memory the route does not export */
} ipc_transport;

/* ---- pure parts -------------------------------------------------------------------------- */

mstar_status mstar__cuda_ipc_mode_get(mstar__cuda_ipc_mode *out)
{
    static const char *const choices[] = { "0", "1", "AUTO" };
    size_t idx;
    mstar_status st = mstar_env_get_choice("MSTAR_CUDA_IPC", choices, 3, 2, &idx);
    if (st != MSTAR_OK)
        return st;
    *out = (mstar__cuda_ipc_mode)idx;
    return MSTAR_OK;
}

bool mstar__cuda_ipc_wanted(mstar__cuda_ipc_mode mode, const mstar_backend *backend)
{
    if (backend == NULL || mode == MSTAR__CUDA_IPC_OFF || backend->ops->ipc_mem_export == NULL)
        return false;
    return mode == MSTAR__CUDA_IPC_ON || mstar_backend_device(backend).type == MSTAR_DEVICE_CUDA;
}

bool mstar__cuda_ipc_usable(const char *host_id, const mstar_tensor_info *info)
{
    return info->cuda_ipc.host_id[0] != '\0' && host_id[0] != '\0' &&
           strcmp(info->cuda_ipc.host_id, host_id) == 0;
}

mstar_status mstar__host_id_read(const char *path, char *out)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return mstar_error_set(MSTAR_EIO, "reading the host identity from %s: %s", path,
                               strerror(errno));
    char line[MSTAR_HOST_ID_MAX + 2] = { 0 };
    bool got = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    size_t n = got ? strcspn(line, "\n") : 0;
    line[n] = '\0';
    if (n == 0 || n > MSTAR_HOST_ID_MAX ||
        mstar_name_validate(line, n, "host identity") != MSTAR_OK)
        return mstar_error_set(MSTAR_EPROTO, "the host identity in %s is not a name of 1-%d bytes",
                               path, MSTAR_HOST_ID_MAX);
    memcpy(out, line, n + 1);
    return MSTAR_OK;
}

/* Whether process `pid` still exists (EPERM: it does, owned by someone else). */
static bool process_alive(int32_t pid)
{
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* Whether process `pid` is gone for good: no such process, or a zombie that its parent has not
 * reaped yet (its CUDA context is already torn down, so its events never fire). */
static bool process_gone(int32_t pid)
{
    if (!process_alive(pid))
        return true;
    char path[64], stat[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return errno == ENOENT;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* "pid (comm) state ...": comm may hold spaces and parentheses, so the state follows the
     * last ')'. */
    const char *close = strrchr(stat, ')');
    return close != NULL && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

mstar_status mstar__cuda_ipc_wait_event(mstar_event *event, int32_t pid, double timeout_s,
                                        const char *what)
{
    uint64_t start = mstar__now_ns();
    uint64_t limit = timeout_s > 0 ? (uint64_t)(timeout_s * 1e9) : 0;
    long nap_ns = 0;
    for (;;) {
        mstar_status st = mstar_event_query(event);
        if (st == MSTAR_OK)
            return MSTAR_OK;
        uint64_t waited = mstar__now_ns() - start;
        nap_ns = st == MSTAR_EAGAIN ? mstar__cuda_ipc_nap_ns(waited, nap_ns) : nap_ns;
        /* Liveness is read from /proc, so only once the spinning is over. */
        if ((nap_ns > 0 || st != MSTAR_EAGAIN) && process_gone(pid))
            return mstar_error_set(MSTAR_ECLOSED,
                                   "%s: its producer (pid %d) exited before its event fired", what,
                                   (int)pid);
        if (st != MSTAR_EAGAIN)
            return mstar_error_wrap("%s: waiting for its producer's event", what);
        if (limit > 0 && waited >= limit)
            return mstar_error_set(MSTAR_ETIMEDOUT,
                                   "%s: its producer (pid %d) is alive but its event has not fired "
                                   "within %g s (MSTAR_CUDA_IPC_TIMEOUT_S)",
                                   what, (int)pid, timeout_s);
        mstar__cuda_ipc_pause(nap_ns);
    }
}

/* ---- producer ---------------------------------------------------------------------------- */

static ipc_transport *ipc_of(mstar__transport *t)
{
    return (ipc_transport *)t;
}

/* The exported segment that holds the item's bytes (exported now if it is new here). */
static mstar_status export_segment(ipc_transport *it, const mstar_tensor *tensor,
                                   const struct exported **out)
{
    const mstar__transport_env *env = it->base.env;
    uint64_t n = mstar_tensor_nbytes(tensor);
    uintptr_t p = (uintptr_t)mstar_tensor_ptr(tensor);
    uint64_t gen = mstar__ipc_generation(env->backend);
    if (gen != it->exported_gen) { /* a segment went back: its address may now be another's */
        it->exported.len = 0;
        it->exported_gen = gen;
    }
    for (size_t i = 0; i < it->exported.len; i++) {
        const struct exported *e = mstar__vec_at(&it->exported, i);
        uintptr_t b = (uintptr_t)e->base;
        if (p >= b && p - b <= e->size && n <= e->size - (p - b)) {
            *out = e;
            return MSTAR_OK;
        }
    }
    mstar__ipc_segment seg;
    mstar_status st = mstar__ipc_export(env->backend, (const void *)p, n, &seg);
    if (st != MSTAR_OK)
        return st;
    struct exported e = { seg.base, seg.size, { 0 } };
    memcpy(e.handle, seg.handle, sizeof(e.handle));
    if ((st = mstar__vec_push(&it->exported, &e)) != MSTAR_OK)
        return st;
    *out = mstar__vec_at(&it->exported, it->exported.len - 1);
    return MSTAR_OK;
}

/* This producer's registry (cuda_ipc_registry.h), made on first use. */
static mstar_status ensure_registry(ipc_transport *it)
{
    const mstar__transport_env *env = it->base.env;
    if (it->registry != NULL)
        return MSTAR_OK;
    return mstar__ipc_registry_create(env->dir, env->entity, &it->registry);
}

/* Note the route of one device item: its segment exported, its reference kept by uuid and
 * published in the registry, with event `event` of the ring (MSTAR__IPC_REG_NO_EVENT: the bytes
 * are written already, nothing to wait for). */
static mstar_status export_item(ipc_transport *it, mstar__stage_item *item, uint32_t event)
{
    /* Only blocks of the caching allocator, whose segments live until the allocator is trimmed
     * or finalised: a graph pool's or a raw allocation may be freed while a consumer maps it,
     * which CUDA leaves undefined. */
    mstar_backend *b = it->base.env->backend;
    if (!mstar__allocator_owns(&b->caching, item->tensor.data))
        return mstar_error_set(MSTAR_ENOENT,
                               "tensor %llu is not a block of the caching allocator, so it is not "
                               "exported",
                               (unsigned long long)item->uuid);
    const struct exported *seg;
    mstar_status st = ensure_registry(it);
    if (st == MSTAR_OK)
        st = export_segment(it, &item->tensor, &seg);
    if (st != MSTAR_OK)
        return st;
    mstar_cuda_ipc_ref *ref = calloc(1, sizeof(*ref));
    if (ref == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    memcpy(ref->host_id, it->host_id, sizeof(ref->host_id));
    memcpy(ref->mem_handle, seg->handle, sizeof(ref->mem_handle));
    if (event != MSTAR__IPC_REG_NO_EVENT)
        memcpy(ref->event_handle, it->event_handles[event], sizeof(ref->event_handle));
    ref->segment_size = seg->size;
    ref->segment_offset =
        (uint64_t)((uintptr_t)mstar_tensor_ptr(&item->tensor) - (uintptr_t)seg->base);
    ref->device = it->base.env->backend->device.index;
    ref->pid = (int32_t)getpid();
    uint64_t old = 0;
    if (mstar__u64map_get(&it->staged, item->uuid, &old))
        free((void *)(uintptr_t)old);
    st = mstar__u64map_put(&it->staged, item->uuid, (uint64_t)(uintptr_t)ref);
    if (st != MSTAR_OK) {
        free(ref);
        return st;
    }
    /* Last: a reader takes the bytes only once the registry vouches for them. */
    if ((st = mstar__ipc_registry_publish(it->registry, item->uuid, ref, event)) != MSTAR_OK &&
        mstar__u64map_remove(&it->staged, item->uuid, &old))
        free(ref);
    return st;
}

/* Take a tensor off the route: its registry entry is cleared before its block can be reused. */
static void forget_staged(ipc_transport *it, mstar_tensor_id uuid)
{
    uint64_t v = 0;
    if (mstar__u64map_remove(&it->staged, uuid, &v)) {
        free((void *)(uintptr_t)v);
        mstar__ipc_registry_withdraw(it->registry, uuid);
    }
}

/* Say once per manager why a device tensor went the staged way (MSTAR_LOG=info for memory the
 * route never exports, a warning for a failed export): otherwise AUTO falls back silently. */
static void note_unrouted(ipc_transport *it, mstar_status st)
{
    bool unexpected = st != MSTAR_ENOENT;
    if (unexpected ? it->warned_export : it->noted_unexported)
        return;
    *(unexpected ? &it->warned_export : &it->noted_unexported) = true;
    mstar_log(unexpected ? MSTAR_LOG_WARN : MSTAR_LOG_INFO,
              "CUDA IPC route not offered, the staged route carries the tensor (said once): %s",
              mstar_last_error());
}

/* A zero-size tensor has no bytes to reach: the staged route carries it for nothing. */
static bool routable(const mstar__transport_env *env, const mstar__stage_item *item)
{
    return mstar__transport_on_device(env, &item->tensor) && mstar_tensor_nbytes(&item->tensor) > 0;
}

/* Whether the staging stream has run everything it was given, so a tensor staged now is written
 * already: a plain event recorded and asked at once. Any failure says no, and the interprocess
 * event is recorded as before. */
static bool staging_idle(ipc_transport *it, const mstar__stage_item *items, size_t n)
{
    const mstar__transport_env *env = it->base.env;
    bool any = false;
    for (size_t i = 0; i < n && !any; i++)
        any = routable(env, &items[i]);
    if (!any)
        return false;
    if (it->idle_probe == NULL && mstar_event_create(env->backend, &it->idle_probe) != MSTAR_OK)
        return false;
    return mstar_event_record(it->idle_probe, env->d2h) == MSTAR_OK &&
           mstar_event_query(it->idle_probe) == MSTAR_OK;
}

/* Which items the route carries: device tensors in blocks of the caching allocator. Other memory
 * (MSTAR_ENOENT: a caller's tensor stored without a copy, a graph pool's block, a raw
 * allocation) is not exported, as it may be freed or reused while a consumer has it mapped: the
 * staged route carries it. Any other failed export does the same in AUTO and is an error with
 * the route forced. */
static mstar_status export_items(ipc_transport *it, mstar__stage_item *items, size_t n,
                                 uint32_t event, bool *routed)
{
    const mstar__transport_env *env = it->base.env;
    for (size_t i = 0; i < n; i++) {
        routed[i] = false;
        if (!routable(env, &items[i]))
            continue;
        mstar_status st = export_item(it, &items[i], event);
        if (st == MSTAR_OK) {
            routed[i] = true;
        } else if (it->mode != MSTAR__CUDA_IPC_ON || st == MSTAR_ENOENT || st == MSTAR_ENOSPC) {
            note_unrouted(it, st);
        } else {
            for (size_t j = 0; j < i; j++)
                if (routed[j])
                    forget_staged(it, items[j].uuid);
            return mstar_error_wrap("MSTAR_CUDA_IPC=1: tensor %llu",
                                    (unsigned long long)items[i].uuid);
        }
    }
    return MSTAR_OK;
}

/* The interprocess event of this stage call, made on first use: its handle goes into the
 * references the call makes, and into the registry before that. */
static mstar_status ensure_event(ipc_transport *it)
{
    size_t k = it->event_next;
    if (it->events[k] != NULL)
        return MSTAR_OK;
    mstar_status st = ensure_registry(it);
    if (st == MSTAR_OK)
        st = mstar__ipc_event_create(it->base.env->backend, &it->events[k], it->event_handles[k]);
    if (st == MSTAR_OK)
        mstar__ipc_registry_set_event(it->registry, (uint32_t)k, it->event_handles[k]);
    return st;
}

/* Stage on the inner transport the items it must carry (all in AUTO, the unrouted ones with the
 * route forced), and mark which it took. */
static mstar_status stage_inner(ipc_transport *it, mstar__stage_item *items, size_t n,
                                const bool *routed)
{
    mstar__stage_item *sub = malloc((n == 0 ? 1 : n) * sizeof(*sub));
    if (sub == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!routed[i] || it->mode != MSTAR__CUDA_IPC_ON)
            sub[k++] = items[i];
    mstar_status st = k > 0 ? it->inner->ops->stage(it->inner, sub, k) : MSTAR_OK;
    for (size_t i = 0, j = 0; st == MSTAR_OK && i < n; i++) {
        if (routed[i] && it->mode == MSTAR__CUDA_IPC_ON)
            continue;
        items[i].tx_bytes = sub[j].tx_bytes;
        items[i].tx_time_s = sub[j].tx_time_s;
        j++;
        st = mstar__u64map_put(&it->inner_staged, items[i].uuid, 1);
    }
    free(sub);
    return st;
}

static mstar_status ipc_stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    ipc_transport *it = ipc_of(t);
    uint64_t t0 = mstar__now_ns();
    bool *routed = calloc(n == 0 ? 1 : n, sizeof(*routed));
    if (routed == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    bool idle = staging_idle(it, items, n);
    mstar_status st = idle ? MSTAR_OK : ensure_event(it);
    if (st == MSTAR_OK)
        st = export_items(it, items, n, idle ? MSTAR__IPC_REG_NO_EVENT : (uint32_t)it->event_next,
                          routed);
    bool any = false;
    for (size_t i = 0; i < n; i++)
        any |= routed[i];
    /* After everything the staging stream has queued (as the staged route copies there). */
    if (st == MSTAR_OK && any && !idle) {
        st = mstar_event_record(it->events[it->event_next], it->base.env->d2h);
        it->event_next = (it->event_next + 1) % EVENT_RING;
    }
    if (st == MSTAR_OK)
        st = stage_inner(it, items, n, routed);
    double dt = (double)(mstar__now_ns() - t0) * 1e-9;
    for (size_t i = 0; i < n; i++) {
        if (st != MSTAR_OK && routed[i])
            forget_staged(it, items[i].uuid);
        if (st == MSTAR_OK && routed[i] && it->mode == MSTAR__CUDA_IPC_ON) {
            items[i].tx_bytes = mstar_tensor_nbytes(&items[i].tensor);
            items[i].tx_time_s = dt;
        }
    }
    free(routed);
    return st;
}

static void ipc_stamp(mstar__transport *t, mstar_tensor_id uuid, mstar_tensor_info *info)
{
    ipc_transport *it = ipc_of(t);
    if (it->inner->ops->stamp != NULL && mstar__u64map_find(&it->inner_staged, uuid) != NULL)
        it->inner->ops->stamp(it->inner, uuid, info);
    uint64_t v = 0;
    if (mstar__u64map_get(&it->staged, uuid, &v))
        info->cuda_ipc = *(const mstar_cuda_ipc_ref *)(uintptr_t)v;
    else
        memset(&info->cuda_ipc, 0, sizeof(info->cuda_ipc));
}

static void ipc_release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    ipc_transport *it = ipc_of(t);
    /* The inner transport undoes what it staged, and registered reads (which it made too):
     * everything but what only the route carried. */
    uint64_t v;
    bool inner = mstar__u64map_remove(&it->inner_staged, uuid, &v);
    bool routed = mstar__u64map_find(&it->staged, uuid) != NULL;
    forget_staged(it, uuid);
    if (inner || !routed)
        it->inner->ops->release(it->inner, uuid, tensor);
}

/* ---- consumer ---------------------------------------------------------------------------- */

/* CUDA refuses to open a handle in the process that exported it, so a descriptor of this very
 * process (two managers in one process) takes the staged route; the host stand-in works only
 * inside one process, so it is exempt. */
static bool routed_here(ipc_transport *it, const mstar_tensor_info *info)
{
    if (!mstar__cuda_ipc_usable(it->host_id, info))
        return false;
    return info->cuda_ipc.pid != (int32_t)getpid() ||
           mstar_backend_device(it->base.env->backend).type != MSTAR_DEVICE_CUDA;
}

static mstar_status ipc_check(mstar__transport *t, const mstar_tensor_info *info)
{
    ipc_transport *it = ipc_of(t);
    if (routed_here(it, info))
        return MSTAR_OK; /* checked when read; the staged copy is checked if it is the fallback */
    return it->inner->ops->check(it->inner, info);
}

/* The size a descriptor claims for its segment is the segment's real size. */
static mstar_status check_size(const mstar_tensor_info *info, uint64_t size)
{
    if (size == info->cuda_ipc.segment_size)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EPROTO,
                           "tensor %llu from '%s': cuda_ipc.segment_size says %llu bytes, the "
                           "segment the handle opens has %llu",
                           (unsigned long long)info->uuid, info->source_entity,
                           (unsigned long long)info->cuda_ipc.segment_size,
                           (unsigned long long)size);
}

/* The index of the least used entry of a cache (each entry starts with its `used` tick) that
 * `held` (may be NULL) does not say is in use; SIZE_MAX if there is none. */
static size_t least_used(const mstar__vec *v, bool (*held)(const void *entry))
{
    size_t best = SIZE_MAX;
    uint64_t min = UINT64_MAX;
    for (size_t i = 0; i < v->len; i++) {
        const void *e = mstar__vec_at(v, i);
        uint64_t used = *(const uint64_t *)e;
        if ((held == NULL || !held(e)) && used < min) {
            min = used;
            best = i;
        }
    }
    return best;
}

static bool segment_viewed(const void *entry)
{
    return ((const struct opened *)entry)->views > 0;
}

/* Make room in a full cache of segments or events: the least used ones go, once no copy queued
 * so far can still be using them. A segment that views still show stays: while every cached one
 * does, the cache grows past its bound (the views bound it), and shrinks back at later opens. */
static void evict_device(ipc_transport *it, mstar__vec *v, bool events)
{
    bool synced = false;
    while (v->len >= it->cache_max) {
        size_t i = least_used(v, events ? NULL : segment_viewed);
        if (i == SIZE_MAX)
            return;
        if (!synced)
            mstar_stream_synchronize(it->base.env->h2d);
        synced = true;
        if (events)
            mstar_event_destroy(((struct opened_event *)mstar__vec_at(v, i))->event);
        else
            mstar__ipc_close(it->base.env->backend, ((struct opened *)mstar__vec_at(v, i))->base);
        mstar__vec_remove(v, i);
    }
}

/* The registry of the producer a descriptor names (entity and pid), from the cache (*cached) or
 * mapped now. */
static mstar_status open_peer(ipc_transport *it, const mstar_tensor_info *info,
                              mstar__ipc_peer_reg **out, bool *cached)
{
    *cached = true;
    for (size_t i = 0; i < it->peers.len; i++) {
        struct peer *p = mstar__vec_at(&it->peers, i);
        if (p->reg->pid == info->cuda_ipc.pid && strcmp(p->reg->entity, info->source_entity) == 0) {
            p->used = ++it->tick;
            *out = p->reg;
            return MSTAR_OK;
        }
    }
    *cached = false;
    struct peer p = { ++it->tick, NULL };
    mstar_status st = mstar__ipc_peer_reg_open(it->base.env->dir, info->source_entity,
                                               info->cuda_ipc.pid, &p.reg);
    if (st != MSTAR_OK)
        return mstar_error_wrap("tensor %llu from '%s'", (unsigned long long)info->uuid,
                                info->source_entity);
    if (it->peers.len >= it->cache_max) { /* reads and views hold references of their own */
        size_t i = least_used(&it->peers, NULL);
        mstar__ipc_peer_reg_release(((struct peer *)mstar__vec_at(&it->peers, i))->reg);
        mstar__vec_remove(&it->peers, i);
    }
    if ((st = mstar__vec_push(&it->peers, &p)) != MSTAR_OK) {
        mstar__ipc_peer_reg_release(p.reg);
        return st;
    }
    *out = p.reg;
    return MSTAR_OK;
}

/* The entry of a descriptor's tensor in its producer's registry (entity and pid), mapped from the
 * cache or now: a descriptor whose entity exported nothing as that pid, or not this tensor, goes
 * no further. A cached registry that lacks the tensor is mapped again if its name now holds
 * another file (a manager of that entity restarted in the same process). */
static mstar_status find_entry(ipc_transport *it, const mstar_tensor_info *info,
                               mstar__ipc_peer_reg **reg, uint32_t *slot)
{
    bool cached = true;
    mstar_status st = open_peer(it, info, reg, &cached);
    if (st == MSTAR_OK)
        st = mstar__ipc_peer_reg_find(*reg, info, slot);
    if (st != MSTAR_ENOENT || !cached || mstar__ipc_peer_reg_current(it->base.env->dir, *reg))
        return st;
    for (size_t i = 0; i < it->peers.len; i++) {
        struct peer *p = mstar__vec_at(&it->peers, i);
        if (p->reg == *reg) {
            mstar__ipc_peer_reg_release(p->reg);
            mstar__vec_remove(&it->peers, i);
            break;
        }
    }
    if ((st = open_peer(it, info, reg, &cached)) == MSTAR_OK)
        st = mstar__ipc_peer_reg_find(*reg, info, slot);
    return st;
}

/* The producer's segment, open here: from the cache, or opened now; either way checked against
 * the descriptor's size (a handle that names another, smaller segment is refused, and a mapping
 * opened for it closed again). */
static mstar_status open_segment(ipc_transport *it, const mstar_tensor_info *info,
                                 struct opened **out)
{
    const mstar_cuda_ipc_ref *ref = &info->cuda_ipc;
    for (size_t i = 0; i < it->opened.len; i++) {
        struct opened *o = mstar__vec_at(&it->opened, i);
        if (strcmp(o->entity, info->source_entity) == 0 &&
            memcmp(o->handle, ref->mem_handle, sizeof(o->handle)) == 0) {
            o->used = ++it->tick;
            *out = o;
            return check_size(info, o->size);
        }
    }
    mstar_backend *b = it->base.env->backend;
    struct opened o = { .used = ++it->tick, .pid = ref->pid };
    memcpy(o.entity, info->source_entity, sizeof(o.entity));
    memcpy(o.handle, ref->mem_handle, sizeof(o.handle));
    mstar_status st = mstar__ipc_open(b, ref->mem_handle, &o.base, &o.size);
    if (st != MSTAR_OK)
        return mstar_error_wrap("tensor %llu from '%s': opening its segment",
                                (unsigned long long)info->uuid, info->source_entity);
    st = check_size(info, o.size);
    if (st == MSTAR_OK) {
        evict_device(it, &it->opened, false);
        st = mstar__vec_push(&it->opened, &o);
    }
    if (st != MSTAR_OK) {
        mstar__ipc_close(b, o.base);
        return st;
    }
    it->opens++;
    *out = mstar__vec_at(&it->opened, it->opened.len - 1);
    return MSTAR_OK;
}

static mstar_status open_event(ipc_transport *it, const mstar_tensor_info *info,
                               struct opened_event **out)
{
    const uint8_t *h = info->cuda_ipc.event_handle;
    for (size_t i = 0; i < it->opened_events.len; i++) {
        struct opened_event *o = mstar__vec_at(&it->opened_events, i);
        if (strcmp(o->entity, info->source_entity) == 0 &&
            memcmp(o->handle, h, sizeof(o->handle)) == 0) {
            o->used = ++it->tick;
            *out = o;
            return MSTAR_OK;
        }
    }
    struct opened_event o = { .used = ++it->tick, .pid = info->cuda_ipc.pid };
    memcpy(o.entity, info->source_entity, sizeof(o.entity));
    memcpy(o.handle, h, sizeof(o.handle));
    mstar_status st = mstar__ipc_event_open(it->base.env->backend, h, &o.event);
    if (st != MSTAR_OK)
        return mstar_error_wrap("tensor %llu from '%s': opening its event",
                                (unsigned long long)info->uuid, info->source_entity);
    evict_device(it, &it->opened_events, true);
    if ((st = mstar__vec_push(&it->opened_events, &o)) != MSTAR_OK) {
        mstar_event_destroy(o.event);
        return st;
    }
    *out = mstar__vec_at(&it->opened_events, it->opened_events.len - 1);
    return MSTAR_OK;
}

/* Wait for the producer's event within what is left of the read call's time (`deadline`, 0: no
 * limit). An event that has timed out once is only asked after that until it is seen to fire, so
 * a producer whose work never finishes costs the reading thread one timeout, not one per
 * message. */
static mstar_status wait_producer(ipc_transport *it, const mstar_tensor_info *info,
                                  struct opened_event *ev, uint64_t deadline)
{
    char what[MSTAR_NAME_MAX + 48];
    snprintf(what, sizeof(what), "tensor %llu from '%s'", (unsigned long long)info->uuid,
             info->source_entity);
    if (ev->stuck) {
        mstar_status st = mstar_event_query(ev->event);
        if (st == MSTAR_EAGAIN)
            return mstar_error_set(MSTAR_ETIMEDOUT,
                                   "%s: its producer's event (pid %d) has still not fired since a "
                                   "wait for it timed out (MSTAR_CUDA_IPC_TIMEOUT_S)",
                                   what, (int)info->cuda_ipc.pid);
        if (st != MSTAR_OK)
            return mstar_error_wrap("%s: waiting for its producer's event", what);
        ev->stuck = false;
        return MSTAR_OK;
    }
    uint64_t now = mstar__now_ns();
    double left = deadline == 0 ? 0 : deadline > now ? (double)(deadline - now) * 1e-9 : 1e-9;
    mstar_status st = mstar__cuda_ipc_wait_event(ev->event, info->cuda_ipc.pid, left, what);
    ev->stuck = st == MSTAR_ETIMEDOUT;
    return st;
}

/* A descriptor whose event handle is all zero was staged with its bytes written already (its
 * producer's registry says so too: mstar__ipc_peer_reg_find refuses it otherwise). */
static bool written_at_stage(const mstar_cuda_ipc_ref *ref)
{
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    return memcmp(ref->event_handle, none, sizeof(none)) == 0;
}

/* What a routed read checks once its copy has landed: its producer is alive, and its registry
 * entry still holds the tensor (so the block held it throughout). */
struct route_check {
    mstar__ipc_peer_reg *reg; /* a reference */
    uint32_t slot;
    uint64_t uuid;
    int32_t pid;
};

/* Whether the producer a check names is alive and its registry still holds the tensor, so the
 * bytes read (or viewed) came from memory that held them throughout: MSTAR_ECLOSED if it has
 * exited, MSTAR_ENOENT if it released the tensor (its bytes may be another's now). */
static mstar_status route_check_run(const struct route_check *c)
{
    if (!process_alive(c->pid))
        return mstar_error_set(
            MSTAR_ECLOSED, "the producer (pid %d) exited while its tensor was read", (int)c->pid);
    return mstar__ipc_peer_reg_check(c->reg, c->slot, c->uuid);
}

/* ---- views (mstar_comm_start_read_views) -------------------------------------------------- */

/* A consumer's view of a producer's tensor in place, in this process's mapping of its segment.
 * The mapping stays open while the view lives (segment_viewed), and the registry entry it was
 * read from says at any time whether the producer still holds the tensor (ipc_view_check). */
typedef struct ipc_view {
    ipc_transport *it;
    void *segment; /* the mapping's base, which finds its cache entry when the view goes */
    struct route_check check;
} ipc_view;

static void view_free(void *ctx, void *data)
{
    ipc_view *v = ctx;
    (void)data;
    for (size_t i = 0; i < v->it->opened.len; i++) {
        struct opened *o = mstar__vec_at(&v->it->opened, i);
        if (o->base == v->segment) {
            o->views--;
            break;
        }
    }
    mstar__ipc_peer_reg_release(v->check.reg);
    free(v);
}

/* The bytes at `src` in segment `seg` as a view for the tensor `check` names (it takes the
 * check's registry reference). The producer's event has fired: its bytes are written. */
static mstar_status view_of(ipc_transport *it, struct opened *seg, void *src, uint64_t nbytes,
                            const struct route_check *check, mstar__buf **out)
{
    ipc_view *v = malloc(sizeof(*v));
    if (v == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC view");
    *v = (ipc_view){ it, seg->base, *check };
    mstar_status st = mstar__buf_wrap(src, nbytes, mstar_backend_device(it->base.env->backend),
                                      view_free, v, out);
    if (st != MSTAR_OK) {
        free(v);
        return st;
    }
    mstar__ipc_peer_reg_retain(check->reg);
    seg->views++;
    return MSTAR_OK;
}

static mstar_status ipc_view_check(mstar__transport *t, const mstar__buf *buf)
{
    ipc_transport *it = ipc_of(t);
    if (buf != NULL && buf->release == view_free && ((const ipc_view *)buf->release_ctx)->it == it)
        return route_check_run(&((const ipc_view *)buf->release_ctx)->check);
    if (it->inner->ops->view_check == NULL)
        return mstar_error_set(MSTAR_EINVAL, "not a view of this manager's transport");
    return it->inner->ops->view_check(it->inner, buf);
}

/* ---- reads ------------------------------------------------------------------------------- */

/* Queue one routed read: check the descriptor against its producer's registry, wait for the
 * producer's event, then copy its bytes into `into` or a new buffer, or, for `item->view`, hand
 * out a view of them in place (only where the producer's tensor lives on this process's device:
 * the view's memory is that device's). `deadline` bounds the waits of the whole read call. On
 * success *check holds what to check once the copy has landed (a view was checked already). */
static mstar_status read_one(ipc_transport *it, mstar__read_item *item, uint64_t deadline,
                             struct route_check *check)
{
    const mstar__transport_env *env = it->base.env;
    const mstar_tensor_info *info = item->info;
    const mstar_cuda_ipc_ref *ref = &info->cuda_ipc;
    if (!process_alive(ref->pid))
        return mstar_error_set(MSTAR_ECLOSED,
                               "tensor %llu from '%s': its producer (pid %d) has exited",
                               (unsigned long long)info->uuid, info->source_entity, (int)ref->pid);
    /* Only what the named producer exported, and still holds, is opened (I-26 on this route). */
    mstar__ipc_peer_reg *reg = NULL;
    uint32_t slot = 0;
    mstar_status st = find_entry(it, info, &reg, &slot);
    struct opened *seg = NULL;
    struct opened_event *ev = NULL;
    if (st == MSTAR_OK)
        st = open_segment(it, info, &seg);
    if (st == MSTAR_OK && !written_at_stage(ref))
        st = open_event(it, info, &ev);
    if (st != MSTAR_OK)
        return st;
    /* The decoder checked the range against segment_size, open_segment the size against the
     * segment; checked again here because the copy trusts it. */
    uint64_t start, end;
    if (!mstar__add_u64(ref->segment_offset, info->offset, &start) ||
        !mstar__add_u64(start, info->nbytes, &end) || end > seg->size)
        return mstar_error_set(MSTAR_EPROTO,
                               "tensor %llu from '%s': bytes %llu + %llu run past its segment "
                               "of %llu bytes",
                               (unsigned long long)info->uuid, info->source_entity,
                               (unsigned long long)start, (unsigned long long)info->nbytes,
                               (unsigned long long)seg->size);
    void *src = (char *)seg->base + start;
    if (ev != NULL && (st = wait_producer(it, info, ev, deadline)) != MSTAR_OK)
        return st;
    struct route_check c = { reg, slot, info->uuid, ref->pid };
    mstar_device here = mstar_backend_device(env->backend);
    if (item->view && item->into == NULL && info->nbytes > 0 && ref->device == here.index) {
        if ((st = route_check_run(&c)) == MSTAR_OK &&
            (st = view_of(it, seg, src, info->nbytes, &c, &item->buf)) == MSTAR_OK)
            item->viewed = true;
        return st;
    }
    mstar__buf *buf;
    if ((st = mstar__transport_read_dest(env, item->into, info->nbytes, &buf)) != MSTAR_OK)
        return st;
    /* Already fired; queued too so the copy is ordered after it on every backend. */
    st = ev != NULL ? mstar_stream_wait_event(env->h2d, ev->event) : MSTAR_OK;
    /* Both ends on this process's device: a small tensor is copied by a kernel, whose launch
     * costs a third of a cudaMemcpyAsync's host time (device/backend.h). The source range was
     * checked against the mapping above; a producer that names another device gets the copy
     * engines. */
    bool on_device = ref->device == here.index && buf->device.type == here.type &&
                     buf->device.index == here.index;
    if (st == MSTAR_OK && info->nbytes > 0)
        st = on_device
                 ? mstar__memcpy_on_device_async(env->h2d, buf->data, src, (size_t)info->nbytes)
                 : mstar_memcpy_async(env->h2d, buf->data, src, (size_t)info->nbytes,
                                      MSTAR_MEMCPY_D2D);
    if (st != MSTAR_OK) {
        mstar_stream_synchronize(env->h2d); /* the copy must not land in a freed buffer */
        mstar__buf_release(buf);
        return mstar_error_wrap("tensor %llu from '%s': device-to-device copy",
                                (unsigned long long)info->uuid, info->source_entity);
    }
    *check = c;
    mstar__ipc_peer_reg_retain(reg);
    item->buf = buf;
    return MSTAR_OK;
}

static void checks_release(struct route_check *checks, size_t n)
{
    for (size_t i = 0; checks != NULL && i < n; i++) {
        mstar__ipc_peer_reg_release(checks[i].reg);
        checks[i].reg = NULL;
    }
}

/* What finishing a read checks: the producers were alive when the copies had run, and still held
 * the tensors, so the bytes came from memory that held them throughout. It holds a reference to
 * the read's completion, and its checks' references to the registries. */
struct landed {
    mstar_completion *done;
    size_t n;
    struct route_check checks[];
};

static struct landed *landed_new(mstar_completion *done, const struct route_check *checks, size_t n,
                                 const bool *routed)
{
    struct landed *l = malloc(sizeof(*l) + n * sizeof(struct route_check));
    if (l == NULL)
        return NULL;
    l->n = 0;
    for (size_t i = 0; i < n; i++) {
        if (!routed[i] || checks[i].reg == NULL) /* a view was checked as it was made */
            continue;
        l->checks[l->n] = checks[i];
        mstar__ipc_peer_reg_retain(checks[i].reg);
        l->n++;
    }
    l->done = mstar__completion_retain(done);
    return l;
}

static void landed_free(struct landed *l)
{
    checks_release(l->checks, l->n);
    mstar_completion_release(l->done);
    free(l);
}

/* Finish the read once its copies have landed: with MSTAR_ECLOSED if a producer has exited,
 * MSTAR_ENOENT if one released a tensor while it was copied (its bytes may be another's). */
static void finish_landed(const struct landed *l)
{
    for (size_t i = 0; i < l->n; i++) {
        mstar_status st = route_check_run(&l->checks[i]);
        if (st != MSTAR_OK) {
            mstar__completion_finish(l->done, st, mstar_last_error());
            return;
        }
    }
    mstar__completion_finish(l->done, MSTAR_OK, NULL);
}

/* The watcher's side (landing.h): the probe behind the copies fired, or asking it failed. */
static void ipc_landed(void *ctx, mstar_status status)
{
    struct landed *l = ctx;
    if (status == MSTAR_OK)
        finish_landed(l);
    else
        mstar__completion_finish(l->done, status, mstar_last_error());
    landed_free(l);
}

/* Whether the copy stream has run everything it was given (this read call's copies last) within
 * MSTAR_CUDA_IPC_SPIN_US, polled from here: asking the stream costs less than recording an event
 * behind the copies and asking that, and the copies cannot have run before what they wait for. */
static bool landed_within_spin(ipc_transport *it)
{
    it->spins++;
    uint64_t start = mstar__now_ns(), limit = (uint64_t)(it->spin_us * 1e3);
    for (;;) {
        mstar_status st = mstar_stream_query(it->base.env->h2d);
        if (st != MSTAR_EAGAIN)
            return st == MSTAR_OK;
        if (mstar__now_ns() - start >= limit)
            return false;
    }
}

/* Let the read land in the background: the watcher finishes it once `probe`, recorded behind
 * its copies, has fired. A read the watcher cannot take (memory running out; a test may make it
 * so, mstar__transport_cuda_ipc_fail_watch) waits for its copies here instead. */
static mstar_status land_later(ipc_transport *it, mstar_event *probe,
                               const struct route_check *checks, size_t n, const bool *routed,
                               mstar_completion *c)
{
    struct landed *l = landed_new(c, checks, n, routed);
    if (l == NULL) {
        mstar__landing_probe_give(it->landing, probe);
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    }
    mstar_status st;
    if (it->fail_watch > 0) {
        it->fail_watch--;
        st = mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory (test)");
    } else {
        st = mstar__landing_add(it->landing, probe, ipc_landed, l);
    }
    if (st == MSTAR_OK)
        return MSTAR_OK;
    mstar__landing_probe_give(it->landing, probe);
    st = mstar_stream_synchronize(it->base.env->h2d);
    ipc_landed(l, st);
    return MSTAR_OK;
}

/* The completion of one read call: finished here if it queued no copy (views only), or if its
 * copies are small and land within the spin (a handoff's latency), else left to land in the
 * background (so the copies of many reads in flight overlap). Not spun for while earlier reads are
 * still landing: the spin asks the copy stream, so it would wait for their copies too, and with
 * reads in flight the caller has other work (a stream of 4 KiB reads with eight in flight ran at a
 * tenth of a copy's speed). */
static mstar_status landed_completion(ipc_transport *it, mstar__read_item *items,
                                      const struct route_check *checks, size_t n,
                                      const bool *routed, mstar_completion **out)
{
    const mstar__transport_env *env = it->base.env;
    uint64_t bytes = 0;
    size_t copies = 0;
    for (size_t i = 0; i < n; i++) {
        if (routed[i] && !items[i].viewed) {
            bytes += items[i].info->nbytes;
            copies++;
        }
    }
    bool now = copies == 0 || (it->spin_us > 0 && bytes <= MSTAR__CUDA_IPC_SPIN_MAX_BYTES &&
                               mstar__landing_pending(it->landing) == 0 && landed_within_spin(it));
    /* A read finished before its call returns is ready as a host read is, so it tells nobody:
     * an eventfd write (a system call) and a loop's spin ended for a read the loop has. */
    mstar_completion *c;
    mstar_status st = mstar__completion_create(now ? NULL : env->notice, &c);
    if (st != MSTAR_OK)
        return st;
    if (now) {
        struct landed *l = landed_new(c, checks, n, routed);
        if (l == NULL) {
            st = mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
        } else {
            finish_landed(l);
            landed_free(l);
        }
    } else {
        /* Recorded now, behind everything the copy stream has queued, these copies included. */
        mstar_event *probe = NULL;
        st = mstar__landing_probe_take(it->landing, &probe);
        if (st == MSTAR_OK && (st = mstar_event_record(probe, env->h2d)) != MSTAR_OK)
            mstar__landing_probe_give(it->landing, probe);
        if (st == MSTAR_OK)
            st = land_later(it, probe, checks, n, routed, c);
    }
    if (st != MSTAR_OK) {
        mstar_completion_release(c);
        return mstar_error_wrap("CUDA IPC read");
    }
    *out = c;
    return MSTAR_OK;
}

/* The reads of this route finish on the watcher's thread; the staged route's may need a poll. */
static void ipc_poll(mstar__transport *t)
{
    ipc_transport *it = ipc_of(t);
    if (it->inner->ops->poll != NULL)
        it->inner->ops->poll(it->inner);
}

static void drop_bufs(mstar__read_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mstar__buf_release(items[i].buf);
        items[i].buf = NULL;
    }
}

/* Whether to read this descriptor over the route: it comes from this host with one, and in
 * AUTO its staged copy is the fallback if opening fails (read_routed says so). */
static mstar_status read_routed(ipc_transport *it, mstar__read_item *items, size_t n, bool *routed,
                                struct route_check *checks)
{
    /* One bound for the waits of the whole call (MSTAR_CUDA_IPC_TIMEOUT_S), not one per item. */
    uint64_t deadline = it->timeout_s > 0 ? mstar__now_ns() + (uint64_t)(it->timeout_s * 1e9) : 0;
    for (size_t i = 0; i < n; i++) {
        items[i].buf = NULL;
        items[i].registered = false;
        items[i].viewed = false;
        routed[i] = false;
        if (!routed_here(it, items[i].info))
            continue;
        mstar_status st = read_one(it, &items[i], deadline, &checks[i]);
        if (st == MSTAR_OK) {
            routed[i] = true;
            continue;
        }
        /* In AUTO the staged copy is the fallback, if the producer made one (it did in AUTO). */
        char why[256];
        snprintf(why, sizeof(why), "%s", mstar_last_error());
        bool fallback = it->mode != MSTAR__CUDA_IPC_ON &&
                        it->inner->ops->check(it->inner, items[i].info) == MSTAR_OK;
        if (!fallback) {
            mstar_error_set(st, "%s", why);
            mstar_stream_synchronize(it->base.env->h2d);
            drop_bufs(items, i);
            return st;
        }
        mstar_log(MSTAR_LOG_WARN, "CUDA IPC route unusable, reading the staged copy: %s", why);
    }
    return MSTAR_OK;
}

static mstar_status ipc_read(mstar__transport *t, mstar__read_item *items, size_t n,
                             mstar_completion **done)
{
    ipc_transport *it = ipc_of(t);
    *done = NULL;
    bool *routed = calloc(n == 0 ? 1 : n, sizeof(*routed));
    mstar__read_item *rest = malloc((n == 0 ? 1 : n) * sizeof(*rest));
    struct route_check *checks = calloc(n == 0 ? 1 : n, sizeof(*checks));
    mstar_status st = routed != NULL && rest != NULL && checks != NULL
                          ? read_routed(it, items, n, routed, checks)
                          : mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    size_t k = 0, nrouted = 0;
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        if (routed[i])
            nrouted++;
        else
            rest[k++] = items[i];
    }
    mstar_completion *inner_done = NULL;
    if (st == MSTAR_OK && k > 0) {
        st = it->inner->ops->read(it->inner, rest, k, &inner_done);
        for (size_t i = 0, j = 0; i < n; i++)
            if (!routed[i])
                items[i] = rest[j++];
    }
    if (st == MSTAR_OK && nrouted > 0) {
        /* A mixed batch whose staged part is still copying: let it land first, so one handle
         * covers both (rare: a producer offers one route for all its device tensors). */
        if (inner_done != NULL) {
            st = mstar_completion_wait(inner_done, -1);
            mstar_completion_release(inner_done);
            inner_done = NULL;
        }
        if (st == MSTAR_OK)
            st = landed_completion(it, items, checks, n, routed, done);
        if (st != MSTAR_OK) {
            mstar_stream_synchronize(it->base.env->h2d);
            drop_bufs(items, n);
        }
    } else if (st == MSTAR_OK) {
        *done = inner_done;
    } else if (routed != NULL && nrouted > 0) {
        mstar_stream_synchronize(it->base.env->h2d);
        for (size_t i = 0; i < n; i++)
            if (routed[i]) {
                mstar__buf_release(items[i].buf);
                items[i].buf = NULL;
            }
    }
    checks_release(checks, n); /* a read left to land holds references of its own */
    free(checks);
    free(routed);
    free(rest);
    return st;
}

/* ---- upkeep ------------------------------------------------------------------------------ */

/* Close the mappings and events of producers that have exited (no copy may be using them, and
 * no view). */
static void close_dead(ipc_transport *it)
{
    mstar_backend *b = it->base.env->backend;
    for (size_t i = it->opened.len; i-- > 0;) {
        struct opened *o = mstar__vec_at(&it->opened, i);
        if (o->views > 0 || process_alive(o->pid))
            continue; /* a view still shows it: it goes after the view (ipc_view_check fails) */
        mstar__ipc_close(b, o->base);
        mstar__vec_remove(&it->opened, i);
    }
    for (size_t i = it->opened_events.len; i-- > 0;) {
        struct opened_event *o = mstar__vec_at(&it->opened_events, i);
        if (process_alive(o->pid))
            continue;
        mstar_event_destroy(o->event);
        mstar__vec_remove(&it->opened_events, i);
    }
    for (size_t i = it->peers.len; i-- > 0;) {
        struct peer *p = mstar__vec_at(&it->peers, i);
        if (process_alive(p->reg->pid))
            continue;
        mstar__ipc_peer_reg_release(p->reg);
        mstar__vec_remove(&it->peers, i);
    }
}

static void ipc_maintain(mstar__transport *t, bool reads_idle)
{
    ipc_transport *it = ipc_of(t);
    if (reads_idle)
        close_dead(it);
    if (it->inner->ops->maintain != NULL)
        it->inner->ops->maintain(it->inner, reads_idle);
}

/* Loans are host memory of the inner transport (the arena's slots): the route, which carries
 * device tensors only, passes them through, so a producer with a CUDA backend computes host
 * outputs straight into pinned slots. */
static mstar_status ipc_loan(mstar__transport *t, uint64_t n, mstar__buf **out)
{
    ipc_transport *it = ipc_of(t);
    return it->inner->ops->loan(it->inner, n, out);
}

static void ipc_arena_stats(mstar__transport *t, mstar_arena_stats *out)
{
    ipc_transport *it = ipc_of(t);
    it->inner->ops->arena_stats(it->inner, out);
}

static void free_staged(mstar__u64map *m)
{
    size_t i = 0;
    uint64_t k, v;
    while (mstar__u64map_next(m, &i, &k, &v))
        free((void *)(uintptr_t)v);
    mstar__u64map_free(m);
}

static void ipc_destroy(mstar__transport *t)
{
    ipc_transport *it = ipc_of(t);
    mstar_backend *b = it->base.env->backend;
    if (it->opened.len > 0 || it->opened_events.len > 0)
        mstar_stream_synchronize(it->base.env->h2d);
    mstar__landing_destroy(it->landing);         /* every read handed to it has finished */
    mstar_stream_synchronize(it->base.env->d2h); /* no record of our events is still queued */
    for (size_t i = 0; i < it->opened.len; i++)
        mstar__ipc_close(b, ((struct opened *)mstar__vec_at(&it->opened, i))->base);
    for (size_t i = 0; i < it->opened_events.len; i++)
        mstar_event_destroy(((struct opened_event *)mstar__vec_at(&it->opened_events, i))->event);
    for (size_t i = 0; i < it->peers.len; i++)
        mstar__ipc_peer_reg_release(((struct peer *)mstar__vec_at(&it->peers, i))->reg);
    mstar__vec_free(&it->opened);
    mstar__vec_free(&it->opened_events);
    mstar__vec_free(&it->peers);
    mstar__vec_free(&it->exported);
    free_staged(&it->staged);
    mstar__u64map_free(&it->inner_staged);
    for (size_t i = 0; i < EVENT_RING; i++)
        mstar_event_destroy(it->events[i]);
    mstar_event_destroy(it->idle_probe);
    mstar__ipc_registry_destroy(it->registry);
    it->inner->ops->destroy(it->inner);
    free(it);
}

static const mstar__transport_ops ipc_ops = {
    .name = "cuda_ipc",
    .stage = ipc_stage,
    .stamp = ipc_stamp,
    .release = ipc_release,
    .check = ipc_check,
    .read = ipc_read,
    .poll = ipc_poll,
    .maintain = ipc_maintain,
    .loan = ipc_loan,
    .view_check = ipc_view_check,
    .arena_stats = ipc_arena_stats,
    .destroy = ipc_destroy,
};

mstar_status mstar__transport_cuda_ipc_wrap(const mstar__transport_env *env,
                                            mstar__cuda_ipc_mode mode, mstar__transport *inner,
                                            mstar__transport **out)
{
    ipc_transport *it = calloc(1, sizeof(*it));
    if (it == NULL) {
        inner->ops->destroy(inner);
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC route: out of memory");
    }
    mstar_status st =
        mstar_env_get_double("MSTAR_CUDA_IPC_TIMEOUT_S", 60, 0, 86400, &it->timeout_s);
    if (st == MSTAR_OK)
        st = mstar_env_get_double("MSTAR_CUDA_IPC_SPIN_US", 200, 0, 1e6, &it->spin_us);
    if (st != MSTAR_OK) {
        free(it);
        inner->ops->destroy(inner);
        return st;
    }
    st = mstar__host_id_read("/proc/sys/kernel/random/boot_id", it->host_id);
    if (st != MSTAR_OK) {
        free(it);
        inner->ops->destroy(inner);
        return mstar_error_wrap("MSTAR_CUDA_IPC needs the host's boot id");
    }
    if ((st = mstar__landing_create(env->backend, &it->landing)) != MSTAR_OK) {
        free(it);
        inner->ops->destroy(inner);
        return st;
    }
    /* Host copies help only while the staged route carries device tensors too (AUTO), and
     * arena statistics exist only over the arena. */
    it->ops = ipc_ops;
    it->ops.needs_cpu_tensor = inner->ops->needs_cpu_tensor && mode != MSTAR__CUDA_IPC_ON;
    if (inner->ops->arena_stats == NULL)
        it->ops.arena_stats = NULL;
    if (inner->ops->loan == NULL)
        it->ops.loan = NULL;
    it->base.ops = &it->ops;
    it->base.env = env;
    it->inner = inner;
    it->mode = mode;
    mstar__vec_init(&it->exported, sizeof(struct exported));
    mstar__vec_init(&it->opened, sizeof(struct opened));
    mstar__vec_init(&it->opened_events, sizeof(struct opened_event));
    mstar__vec_init(&it->peers, sizeof(struct peer));
    it->cache_max = CACHE_MAX;
    mstar__u64map_init(&it->staged);
    mstar__u64map_init(&it->inner_staged);
    *out = &it->base;
    return MSTAR_OK;
}

void mstar__transport_cuda_ipc_counts(mstar__transport *t, uint64_t *opens, uint64_t *mapped)
{
    bool ipc = t->ops->destroy == ipc_destroy;
    *opens = ipc ? ipc_of(t)->opens : 0;
    *mapped = ipc ? ipc_of(t)->opened.len : 0;
}

void mstar__transport_cuda_ipc_set_mode(mstar__transport *t, mstar__cuda_ipc_mode mode)
{
    if (t->ops->destroy != ipc_destroy)
        return;
    ipc_transport *it = ipc_of(t);
    it->mode = mode;
    it->ops.needs_cpu_tensor = it->inner->ops->needs_cpu_tensor && mode != MSTAR__CUDA_IPC_ON;
}

unsigned mstar__transport_cuda_ipc_fail_watch(mstar__transport *t, unsigned n)
{
    if (t->ops->destroy != ipc_destroy)
        return 0;
    ipc_transport *it = ipc_of(t);
    unsigned left = it->fail_watch;
    it->fail_watch = n;
    return left;
}

size_t mstar__transport_cuda_ipc_watching(mstar__transport *t)
{
    return t->ops->destroy == ipc_destroy ? mstar__landing_pending(ipc_of(t)->landing) : 0;
}

uint64_t mstar__transport_cuda_ipc_spins(mstar__transport *t)
{
    return t->ops->destroy == ipc_destroy ? ipc_of(t)->spins : 0;
}

size_t mstar__transport_cuda_ipc_cached(mstar__transport *t)
{
    if (t->ops->destroy != ipc_destroy)
        return 0;
    ipc_transport *it = ipc_of(t);
    return it->opened.len + it->opened_events.len + it->peers.len;
}

void mstar__transport_cuda_ipc_set_cache_max(mstar__transport *t, size_t n)
{
    if (t->ops->destroy == ipc_destroy && n > 0)
        ipc_of(t)->cache_max = n;
}
