/*
 * backend.c — the public device calls (mstar/device.h), shared by every backend.
 *
 * Each call checks its arguments and the stream's capture state here, once, then goes through the
 * backend's vtable (backend.h). The bookkeeping that must agree across backends lives here too:
 * the registry of raw allocations (so a bad free is an error, not a crash, and the host backend can
 * hold allocations to its budget), pinned and registered ranges, and the count of capturing streams
 * that fences the caching allocator.
 */
#include "device/backend.h"

#include "device/lifetimes.h"

#include <stdlib.h>
#include <string.h>

static mstar_status check_stream(const mstar_stream *s, const char *fn)
{
    if (s == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: stream is NULL", fn);
    return MSTAR_OK;
}

/* ---- backends ------------------------------------------------------------------------------ */

/* The shared bookkeeping, once the allocator and the backend's own state are gone. */
static void free_backend(mstar_backend *b)
{
    mstar__u64map_free(&b->raw);
    mstar__u64map_free(&b->pinned);
    mstar__u64map_free(&b->registered);
    mstar__vec_free(&b->pools);
    pthread_mutex_destroy(&b->pools_lock);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

mstar_status mstar_backend_create(mstar_device device, mstar_backend **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_backend_create: out is NULL");
    if (device.type != MSTAR_DEVICE_CPU && device.type != MSTAR_DEVICE_CUDA)
        return mstar_error_set(
            MSTAR_EINVAL, "mstar_backend_create: device type %d is neither CPU (1) nor CUDA (2)",
            (int)device.type);
    if (device.index < 0)
        return mstar_error_set(MSTAR_EINVAL, "mstar_backend_create: device index %d is negative",
                               (int)device.index);
#ifndef MSTAR_HAVE_CUDA
    if (device.type == MSTAR_DEVICE_CUDA)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "cuda:%d: this libmstar was built without the CUDA backend "
                               "(configure with -DMSTAR_CUDA=ON on a machine with nvcc)",
                               (int)device.index);
#endif
    mstar_backend *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_backend_create: out of memory");
    b->device = device;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->pools_lock, NULL);
    mstar__u64map_init(&b->raw);
    mstar__u64map_init(&b->pinned);
    mstar__u64map_init(&b->registered);
    mstar__vec_init(&b->pools, sizeof(mstar__pool_entry));
    atomic_init(&b->capturing, 0);
    mstar__allocator_init(&b->caching, b);
    mstar_status st;
#ifdef MSTAR_HAVE_CUDA
    if (device.type == MSTAR_DEVICE_CUDA)
        st = mstar__cuda_backend_create(b);
    else
#endif
        st = mstar__host_backend_create(b);
    if (st != MSTAR_OK) {
        mstar__allocator_fini(&b->caching);
        free_backend(b);
        return st;
    }
    *out = b;
    return MSTAR_OK;
}

void mstar_backend_destroy(mstar_backend *b)
{
    if (b == NULL)
        return;
    size_t leaked = mstar__allocator_fini(&b->caching);
    if (leaked != 0)
        mstar_log(MSTAR_LOG_WARN, "%s backend destroyed with %zu live caching-allocator blocks",
                  b->ops->name, leaked);
    if (b->pools.len != 0)
        mstar_log(MSTAR_LOG_WARN, "%s backend destroyed with %zu graph pools still open",
                  b->ops->name, b->pools.len);
    size_t n = mstar__u64map_len(&b->raw) + mstar__u64map_len(&b->pinned) +
               mstar__u64map_len(&b->registered);
    if (n != 0)
        mstar_log(MSTAR_LOG_WARN,
                  "%s backend destroyed with %zu raw, pinned or registered ranges still held",
                  b->ops->name, n);
    b->ops->destroy(b);
    free_backend(b);
}

mstar_device mstar_backend_device(const mstar_backend *b)
{
    return b->device;
}

const char *mstar_backend_name(const mstar_backend *b)
{
    return b->ops->name;
}

int mstar_backend_capability(const mstar_backend *b)
{
    return b->capability;
}

mstar_status mstar_backend_set_memory_budget(mstar_backend *b, uint64_t bytes)
{
    if (b == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_backend_set_memory_budget: backend is NULL");
    if (b->device.type != MSTAR_DEVICE_CPU)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "mstar_backend_set_memory_budget: only the host backend has a "
                               "budget; a CUDA device reports its own memory");
    pthread_mutex_lock(&b->lock);
    b->budget = bytes;
    pthread_mutex_unlock(&b->lock);
    return MSTAR_OK;
}

mstar_status mstar_mem_info(mstar_backend *b, uint64_t *free_bytes, uint64_t *total_bytes)
{
    if (b == NULL || free_bytes == NULL || total_bytes == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mem_info: backend, free_bytes and total_bytes "
                                             "must not be NULL");
    return b->ops->mem_info(b, free_bytes, total_bytes);
}

mstar_status mstar__backend_add_pool(mstar_backend *b, mstar_graph_pool *pool,
                                     const mstar__pool_hooks *hooks)
{
    mstar__pool_entry entry = { pool, hooks };
    pthread_mutex_lock(&b->pools_lock);
    mstar_status st = mstar__vec_push(&b->pools, &entry);
    pthread_mutex_unlock(&b->pools_lock);
    return st;
}

void mstar__backend_remove_pool(mstar_backend *b, mstar_graph_pool *pool)
{
    pthread_mutex_lock(&b->pools_lock);
    for (size_t i = 0; i < b->pools.len; i++) {
        if (((mstar__pool_entry *)mstar__vec_at(&b->pools, i))->pool == pool) {
            mstar__vec_remove(&b->pools, i);
            break;
        }
    }
    pthread_mutex_unlock(&b->pools_lock);
}

/* ---- raw, pinned and registered memory ------------------------------------------------------ */

mstar_status mstar__raw_alloc(mstar_backend *b, size_t nbytes, void **out)
{
    pthread_mutex_lock(&b->lock);
    if (b->budget != 0 && (nbytes > b->budget || b->raw_bytes > b->budget - nbytes)) {
        uint64_t held = b->raw_bytes, budget = b->budget;
        pthread_mutex_unlock(&b->lock);
        return mstar_error_set(MSTAR_ENOMEM,
                               "%s: %zu bytes do not fit the memory budget (%llu of %llu bytes "
                               "held; MSTAR_HOST_MEMORY_BUDGET_MB)",
                               b->ops->name, nbytes, (unsigned long long)held,
                               (unsigned long long)budget);
    }
    pthread_mutex_unlock(&b->lock);
    void *p = NULL;
    mstar_status st = b->ops->raw_alloc(b, nbytes, &p);
    if (st != MSTAR_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    st = mstar__u64map_put(&b->raw, (uint64_t)(uintptr_t)p, nbytes);
    if (st == MSTAR_OK)
        b->raw_bytes += nbytes;
    pthread_mutex_unlock(&b->lock);
    if (st != MSTAR_OK) {
        b->ops->raw_free(b, p);
        return st;
    }
    *out = p;
    return MSTAR_OK;
}

void mstar__raw_free(mstar_backend *b, void *ptr)
{
    uint64_t size = 0;
    pthread_mutex_lock(&b->lock);
    bool known = mstar__u64map_remove(&b->raw, (uint64_t)(uintptr_t)ptr, &size);
    if (known) {
        b->raw_bytes -= size;
        b->raw_frees++;
    }
    pthread_mutex_unlock(&b->lock);
    if (known)
        b->ops->raw_free(b, ptr);
}

mstar_status mstar_device_alloc(mstar_backend *b, size_t nbytes, void **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_device_alloc: backend and out must not be NULL");
    return mstar__raw_alloc(b, nbytes == 0 ? 1 : nbytes, out);
}

mstar_status mstar_device_free(mstar_backend *b, void *ptr)
{
    if (b == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_device_free: backend is NULL");
    if (ptr == NULL)
        return MSTAR_OK;
    pthread_mutex_lock(&b->lock);
    bool known = mstar__u64map_find(&b->raw, (uint64_t)(uintptr_t)ptr) != NULL;
    pthread_mutex_unlock(&b->lock);
    if (!known)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_device_free: %p was not returned by mstar_device_alloc on "
                               "this backend (or was freed already)",
                               ptr);
    mstar__raw_free(b, ptr);
    return MSTAR_OK;
}

mstar_status mstar_host_alloc_pinned(mstar_backend *b, size_t nbytes, void **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_host_alloc_pinned: backend and out must not be NULL");
    void *p = NULL;
    mstar_status st = b->ops->host_alloc_pinned(b, nbytes == 0 ? 1 : nbytes, &p);
    if (st != MSTAR_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    st = mstar__u64map_put(&b->pinned, (uint64_t)(uintptr_t)p, nbytes);
    pthread_mutex_unlock(&b->lock);
    if (st != MSTAR_OK) {
        b->ops->host_free_pinned(b, p);
        return st;
    }
    *out = p;
    return MSTAR_OK;
}

mstar_status mstar_host_free_pinned(mstar_backend *b, void *ptr)
{
    if (b == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_host_free_pinned: backend is NULL");
    if (ptr == NULL)
        return MSTAR_OK;
    pthread_mutex_lock(&b->lock);
    bool known = mstar__u64map_remove(&b->pinned, (uint64_t)(uintptr_t)ptr, NULL);
    pthread_mutex_unlock(&b->lock);
    if (!known)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_host_free_pinned: %p was not returned by "
                               "mstar_host_alloc_pinned on this backend (or was freed already)",
                               ptr);
    b->ops->host_free_pinned(b, ptr);
    return MSTAR_OK;
}

/* True when [p, p+n) overlaps a registered range. Caller holds the lock. */
static bool overlaps_registered(mstar_backend *b, const char *p, size_t n)
{
    size_t it = 0;
    uint64_t k, v;
    while (mstar__u64map_next(&b->registered, &it, &k, &v)) {
        const char *start = (const char *)(uintptr_t)k;
        if (p < start + v && start < p + n)
            return true;
    }
    return false;
}

mstar_status mstar_host_register(mstar_backend *b, void *ptr, size_t nbytes, unsigned flags)
{
    if (b == NULL || ptr == NULL || nbytes == 0)
        return mstar_error_set(MSTAR_EINVAL, "mstar_host_register: backend and ptr must not be "
                                             "NULL and nbytes must be positive");
    pthread_mutex_lock(&b->lock);
    bool overlap = overlaps_registered(b, ptr, nbytes);
    pthread_mutex_unlock(&b->lock);
    if (overlap)
        return mstar_error_set(
            MSTAR_EEXIST, "mstar_host_register: [%p, +%zu) overlaps a range already registered",
            ptr, nbytes);
    if ((flags & ~MSTAR_HOST_REGISTER_READ_ONLY) != 0)
        return mstar_error_set(MSTAR_EINVAL, "mstar_host_register: unknown flags 0x%x", flags);
    mstar_status st = b->ops->host_register(b, ptr, nbytes, flags);
    if (st != MSTAR_OK)
        return st;
    pthread_mutex_lock(&b->lock);
    st = mstar__u64map_put(&b->registered, (uint64_t)(uintptr_t)ptr, nbytes);
    pthread_mutex_unlock(&b->lock);
    if (st != MSTAR_OK)
        b->ops->host_unregister(b, ptr);
    return st;
}

mstar_status mstar_host_unregister(mstar_backend *b, void *ptr)
{
    if (b == NULL || ptr == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_host_unregister: backend and ptr must not be NULL");
    pthread_mutex_lock(&b->lock);
    bool known = mstar__u64map_remove(&b->registered, (uint64_t)(uintptr_t)ptr, NULL);
    pthread_mutex_unlock(&b->lock);
    if (!known)
        return mstar_error_set(
            MSTAR_EINVAL, "mstar_host_unregister: %p is not the start of a registered range", ptr);
    return b->ops->host_unregister(b, ptr);
}

/* ---- the caching allocator and the current allocator ---------------------------------------- */

static mstar_status refuse_while_capturing(mstar_backend *b, const char *what, size_t nbytes)
{
    if (atomic_load(&b->capturing) == 0)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_ESTATE,
                           "%s of %zu bytes while a stream of the %s backend captures: this is "
                           "lazy initialisation inside a capture; allocate it before capturing "
                           "(in a warm-up), or use mstar_alloc on the capturing stream",
                           what, nbytes, b->ops->name);
}

mstar_status mstar_caching_alloc(mstar_backend *b, size_t nbytes, void **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_caching_alloc: backend and out must not be NULL");
    mstar_status st = refuse_while_capturing(b, "caching-allocator allocation", nbytes);
    if (st != MSTAR_OK)
        return st;
    return mstar__allocator_alloc(&b->caching, nbytes, 0, MSTAR__SEG_SHARED, out);
}

mstar_status mstar_caching_free(mstar_backend *b, void *ptr)
{
    if (b == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_caching_free: backend is NULL");
    if (ptr == NULL)
        return MSTAR_OK;
    mstar_status st = refuse_while_capturing(b, "caching-allocator free", 0);
    if (st != MSTAR_OK)
        return st;
    st = mstar__allocator_free(&b->caching, ptr, false);
    if (st == MSTAR_ENOENT)
        return mstar_error_set(
            MSTAR_EINVAL, "mstar_caching_free: %p is not a live block of the caching allocator",
            ptr);
    return st;
}

void mstar_caching_stats(mstar_backend *b, mstar_alloc_stats *out)
{
    mstar__allocator_stats(&b->caching, out);
}

void mstar_caching_reset_peak(mstar_backend *b)
{
    mstar__allocator_reset_peak(&b->caching);
}

mstar_status mstar_caching_trim(mstar_backend *b, uint64_t *released)
{
    if (b == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_caching_trim: backend is NULL");
    if (atomic_load(&b->capturing) > 0)
        return mstar_error_set(MSTAR_ESTATE, "mstar_caching_trim: a stream of the backend is "
                                             "capturing");
    uint64_t bytes = mstar__allocator_trim(&b->caching);
    if (released != NULL)
        *released = bytes;
    return MSTAR_OK;
}

mstar_status mstar_alloc(mstar_stream *s, size_t nbytes, void **out)
{
    mstar_status st = check_stream(s, "mstar_alloc");
    if (st != MSTAR_OK)
        return st;
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_alloc: out is NULL");
    if (s->pool != NULL)
        return s->pool_hooks->capture_alloc(s->pool, nbytes, mstar__lifetimes_next_kind(s, nbytes),
                                            out);
    st = mstar_caching_alloc(s->backend, nbytes, out);
    if (st == MSTAR_OK)
        mstar__lifetimes_note_alloc(s, nbytes, *out);
    return st;
}

mstar_status mstar_free(mstar_stream *s, void *ptr)
{
    mstar_status st = check_stream(s, "mstar_free");
    if (st != MSTAR_OK || ptr == NULL)
        return st;
    if (s->pool != NULL)
        return s->pool_hooks->capture_free(s->pool, ptr);
    mstar_backend *b = s->backend;
    if (mstar__allocator_owns(&b->caching, ptr)) {
        st = mstar_caching_free(b, ptr);
        if (st == MSTAR_OK)
            mstar__lifetimes_note_free(s, ptr);
        return st;
    }
    /* A pool block outside its capture: the pool knows whether a graph owns it. */
    mstar__pool_entry owner = { NULL, NULL };
    pthread_mutex_lock(&b->pools_lock);
    for (size_t i = 0; i < b->pools.len && owner.pool == NULL; i++) {
        mstar__pool_entry *e = mstar__vec_at(&b->pools, i);
        if (e->hooks->owns(e->pool, ptr))
            owner = *e;
    }
    pthread_mutex_unlock(&b->pools_lock);
    if (owner.pool != NULL)
        return owner.hooks->free_outside_capture(owner.pool, ptr);
    return mstar_error_set(MSTAR_EINVAL,
                           "mstar_free: %p was not allocated by mstar_alloc on this backend (or "
                           "was freed already)",
                           ptr);
}

mstar_status mstar_tensor_alloc(mstar_stream *s, mstar_dtype dtype, int32_t ndim,
                                const int64_t *shape, mstar_tensor *out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_tensor_alloc: out is NULL");
    mstar_tensor t;
    mstar_status st =
        mstar_tensor_init(&t, NULL, mstar_backend_device(s->backend), dtype, ndim, shape);
    if (st != MSTAR_OK)
        return st;
    st = mstar_alloc(s, (size_t)mstar_tensor_nbytes(&t), &t.data);
    if (st != MSTAR_OK)
        return st;
    *out = t;
    return MSTAR_OK;
}

mstar_status mstar_tensor_free(mstar_stream *s, mstar_tensor *t)
{
    if (t == NULL || t->data == NULL)
        return MSTAR_OK;
    mstar_status st = mstar_free(s, t->data);
    if (st == MSTAR_OK)
        t->data = NULL;
    return st;
}

/* ---- streams and events -----------------------------------------------------------------------
 */

/* A zeroed stream of `b` with its lock, or NULL when out of memory. */
static mstar_stream *stream_new(mstar_backend *b, unsigned flags)
{
    mstar_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->backend = b;
    s->flags = flags;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    return s;
}

mstar_status mstar_stream_create(mstar_backend *b, unsigned flags, mstar_stream **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_stream_create: backend and out must not be NULL");
    if (flags & ~(unsigned)MSTAR_STREAM_NON_BLOCKING)
        return mstar_error_set(MSTAR_EINVAL, "mstar_stream_create: unknown flags 0x%x", flags);
    mstar_stream *s = stream_new(b, flags);
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_create: out of memory");
    mstar_status st = b->ops->stream_create(s);
    if (st != MSTAR_OK) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return st;
    }
    *out = s;
    return MSTAR_OK;
}

mstar_status mstar_stream_wrap(mstar_backend *b, void *native, mstar_stream **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_stream_wrap: backend and out must not be NULL");
    if (b->device.type != MSTAR_DEVICE_CUDA)
        return mstar_error_set(MSTAR_ENOTSUP,
                               "mstar_stream_wrap: the %s backend has no native streams",
                               mstar_backend_name(b));
    mstar_stream *s = stream_new(b, MSTAR_STREAM_DEFAULT);
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_stream_wrap: out of memory");
    s->native = native;
    s->wrapped = true;
    *out = s;
    return MSTAR_OK;
}

void mstar_stream_destroy(mstar_stream *s)
{
    if (s == NULL)
        return;
    if (s->wrapped) { /* another library's stream: only the wrapper goes */
        pthread_mutex_destroy(&s->lock);
        free(s);
        return;
    }
    if (s->capturing) {
        mstar_graph *g = NULL;
        mstar_log(MSTAR_LOG_WARN, "stream destroyed while capturing; the capture is discarded");
        if (mstar_stream_end_capture(s, &g) == MSTAR_OK)
            mstar_graph_destroy(g);
    }
    s->backend->ops->stream_destroy(s);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

mstar_backend *mstar_stream_backend(const mstar_stream *s)
{
    return s->backend;
}

void *mstar_stream_native(const mstar_stream *s)
{
    return s->native;
}

/* A stream whose work can be waited for or asked about: not NULL, and not capturing (a capture
 * records work; none of it runs until a graph is launched). */
static mstar_status check_stream_runs(const mstar_stream *s, const char *fn)
{
    mstar_status st = check_stream(s, fn);
    if (st == MSTAR_OK && s->capturing)
        st = mstar_error_set(MSTAR_ESTATE,
                             "%s: the stream is capturing; its work is recorded, not run", fn);
    return st;
}

mstar_status mstar_stream_synchronize(mstar_stream *s)
{
    mstar_status st = check_stream_runs(s, "mstar_stream_synchronize");
    return st == MSTAR_OK ? s->backend->ops->stream_synchronize(s) : st;
}

mstar_status mstar_stream_query(mstar_stream *s)
{
    mstar_status st = check_stream_runs(s, "mstar_stream_query");
    return st == MSTAR_OK ? s->backend->ops->stream_query(s) : st;
}

mstar_status mstar_stream_wait_event(mstar_stream *s, mstar_event *e)
{
    mstar_status st = check_stream(s, "mstar_stream_wait_event");
    if (st != MSTAR_OK)
        return st;
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_stream_wait_event: event is NULL");
    if (e->backend != s->backend)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_stream_wait_event: the event and the stream belong to "
                               "different backends");
    st = s->backend->ops->stream_wait_event(s, e);
    if (st == MSTAR_OK) {
        s->last_waited = e;
        s->waits++;
    }
    return st;
}

mstar_status mstar_event_create(mstar_backend *b, mstar_event **out)
{
    if (b == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_event_create: backend and out must not be NULL");
    mstar_event *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_event_create: out of memory");
    e->backend = b;
    mstar_status st = b->ops->event_create(e);
    if (st != MSTAR_OK) {
        free(e);
        return st;
    }
    *out = e;
    return MSTAR_OK;
}

void mstar_event_destroy(mstar_event *e)
{
    if (e == NULL)
        return;
    e->backend->ops->event_destroy(e);
    free(e);
}

mstar_status mstar_event_record(mstar_event *e, mstar_stream *s)
{
    mstar_status st = check_stream(s, "mstar_event_record");
    if (st != MSTAR_OK)
        return st;
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_event_record: event is NULL");
    if (e->backend != s->backend)
        return mstar_error_set(MSTAR_EINVAL, "mstar_event_record: the event and the stream belong "
                                             "to different backends");
    st = s->backend->ops->event_record(e, s);
    if (st == MSTAR_OK)
        e->last_stream = s;
    return st;
}

mstar_status mstar__event_record_in_capture(mstar_event *e, mstar_stream *s)
{
    mstar_status st = check_stream(s, "mstar__event_record_in_capture");
    if (st != MSTAR_OK)
        return st;
    if (e == NULL || e->backend != s->backend)
        return mstar_error_set(MSTAR_EINVAL, "recording an event into a capture: the event is "
                                             "NULL or belongs to another backend");
    if (!s->capturing)
        return mstar_error_set(MSTAR_ESTATE, "recording an event into a capture: the stream "
                                             "does not capture");
    return s->backend->ops->event_record_in_capture(e, s);
}

mstar_status mstar_event_query(mstar_event *e)
{
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_event_query: event is NULL");
    return e->backend->ops->event_query(e);
}

mstar_status mstar_event_synchronize(mstar_event *e)
{
    if (e == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_event_synchronize: event is NULL");
    return e->backend->ops->event_synchronize(e);
}

void *mstar_event_native(const mstar_event *e)
{
    return e->native;
}

/* ---- copies and host work ---------------------------------------------------------------------
 */

mstar_status mstar_memcpy_async(mstar_stream *s, void *dst, const void *src, size_t nbytes,
                                mstar_memcpy_kind kind)
{
    mstar_status st = check_stream(s, "mstar_memcpy_async");
    if (st != MSTAR_OK)
        return st;
    if ((unsigned)kind > MSTAR_MEMCPY_H2H)
        return mstar_error_set(MSTAR_EINVAL, "mstar_memcpy_async: unknown kind %d", (int)kind);
    if (nbytes == 0)
        return MSTAR_OK;
    if (dst == NULL || src == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_memcpy_async: %s is NULL for %zu bytes",
                               dst == NULL ? "dst" : "src", nbytes);
    st = s->backend->ops->memcpy_async(s, dst, src, nbytes, kind);
    if (st == MSTAR_OK)
        s->enqueued++;
    return st;
}

mstar_status mstar__memcpy_on_device_async(mstar_stream *s, void *dst, const void *src,
                                           size_t nbytes)
{
    if (s == NULL || nbytes > MSTAR__KERNEL_COPY_MAX || s->backend->ops->copy_on_device == NULL)
        return mstar_memcpy_async(s, dst, src, nbytes, MSTAR_MEMCPY_D2D);
    mstar_status st = check_stream(s, "mstar__memcpy_on_device_async");
    if (st != MSTAR_OK || nbytes == 0)
        return st;
    if (dst == NULL || src == NULL)
        return mstar_error_set(MSTAR_EINVAL, "a device copy of %zu bytes: %s is NULL", nbytes,
                               dst == NULL ? "dst" : "src");
    st = s->backend->ops->copy_on_device(s, dst, src, nbytes);
    if (st == MSTAR_OK)
        s->enqueued++;
    return st;
}

mstar_status mstar__capture_copy_node(mstar_stream *s, void *dst, uint32_t *index)
{
    mstar_status st = check_stream(s, "mstar__capture_copy_node");
    if (st != MSTAR_OK)
        return st;
    if (!s->capturing)
        return mstar_error_set(MSTAR_ESTATE, "a copy node: the stream does not capture");
    if (s->backend->ops->capture_copy_node == NULL)
        return mstar_error_set(MSTAR_ENOTSUP, "the %s backend has no copy nodes",
                               s->backend->ops->name);
    mstar__copy_node node = { NULL, dst, dst, 0 };
    st = s->backend->ops->capture_copy_node(s, dst, &node.native);
    if (st == MSTAR_OK)
        st = mstar__vec_push(&s->capture_copies, &node);
    if (st == MSTAR_OK)
        *index = (uint32_t)(s->capture_copies.len - 1);
    return st;
}

mstar_status mstar__graph_set_copy(mstar_graph *g, uint32_t index, void *dst, const void *src,
                                   size_t nbytes)
{
    if (g == NULL || !g->instantiated || index >= g->copy_nodes.len)
        return mstar_error_set(MSTAR_EINVAL, "copy node %u: no such node in an instantiated graph",
                               (unsigned)index);
    if (nbytes > MSTAR__KERNEL_COPY_MAX || (nbytes > 0 && (dst == NULL || src == NULL)))
        return mstar_error_set(MSTAR_EINVAL, "copy node %u: %zu bytes from %p to %p",
                               (unsigned)index, nbytes, src, dst);
    mstar__copy_node *c = mstar__vec_at(&g->copy_nodes, index);
    if (c->dst == dst && c->src == src && c->nbytes == nbytes)
        return MSTAR_OK;
    mstar_status st = g->backend->ops->graph_set_copy(g, c->native, dst, src, nbytes);
    if (st == MSTAR_OK)
        *c = (mstar__copy_node){ c->native, dst, src, nbytes };
    return st;
}

mstar_status mstar_memset_async(mstar_stream *s, void *dst, int value, size_t nbytes)
{
    mstar_status st = check_stream(s, "mstar_memset_async");
    if (st != MSTAR_OK)
        return st;
    if (nbytes == 0)
        return MSTAR_OK;
    if (dst == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_memset_async: dst is NULL for %zu bytes",
                               nbytes);
    st = s->backend->ops->memset_async(s, dst, value, nbytes);
    if (st == MSTAR_OK)
        s->enqueued++;
    return st;
}

mstar_status mstar_launch(mstar_stream *s, mstar_host_fn fn, const void *args, size_t args_size)
{
    mstar_status st = check_stream(s, "mstar_launch");
    if (st != MSTAR_OK)
        return st;
    if (fn == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_launch: fn is NULL");
    if (args_size > MSTAR_LAUNCH_ARGS_MAX)
        return mstar_error_set(MSTAR_EINVAL, "mstar_launch: args_size %zu exceeds %d bytes",
                               args_size, MSTAR_LAUNCH_ARGS_MAX);
    if (args_size != 0 && args == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_launch: args is NULL for %zu bytes", args_size);
    st = s->backend->ops->launch(s, fn, args, args_size);
    if (st == MSTAR_OK)
        s->enqueued++;
    return st;
}

/* ---- raw capture and graphs -------------------------------------------------------------------
 */

mstar_status mstar_stream_begin_capture(mstar_stream *s)
{
    mstar_status st = check_stream(s, "mstar_stream_begin_capture");
    if (st != MSTAR_OK)
        return st;
    if (s->capturing)
        return mstar_error_set(MSTAR_ESTATE, "mstar_stream_begin_capture: the stream already "
                                             "captures; end that capture first");
    st = s->backend->ops->capture_begin(s);
    if (st != MSTAR_OK)
        return st;
    mstar__vec_init(&s->capture_copies, sizeof(mstar__copy_node));
    s->capturing = true;
    atomic_fetch_add(&s->backend->capturing, 1);
    return MSTAR_OK;
}

mstar_status mstar_stream_end_capture(mstar_stream *s, mstar_graph **out)
{
    mstar_status st = check_stream(s, "mstar_stream_end_capture");
    if (st != MSTAR_OK)
        return st;
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_stream_end_capture: out is NULL");
    if (!s->capturing)
        return mstar_error_set(MSTAR_ESTATE,
                               "mstar_stream_end_capture: the stream is not capturing");
    mstar_graph *g = calloc(1, sizeof(*g));
    if (g != NULL) {
        g->backend = s->backend;
        g->copy_nodes = s->capture_copies;
        mstar__vec_init(&s->capture_copies, sizeof(mstar__copy_node));
        mstar__vec_init(&g->host_calls, sizeof(void *));
        mstar__vec_init(&g->pool_blocks, sizeof(void *));
        mstar__vec_init(&g->caching_blocks, sizeof(void *));
        st = s->backend->ops->capture_end(s, g);
    } else {
        /* Still end the capture so the stream is usable; the graph is lost. */
        mstar_graph scratch = { .backend = s->backend };
        mstar__vec_init(&scratch.host_calls, sizeof(void *));
        if (s->backend->ops->capture_end(s, &scratch) == MSTAR_OK)
            s->backend->ops->graph_release(&scratch);
        mstar__vec_free(&scratch.host_calls);
        st = mstar_error_set(MSTAR_ENOMEM, "mstar_stream_end_capture: out of memory");
    }
    s->capturing = false;
    s->capture_state = NULL;
    mstar__vec_free(&s->capture_copies);
    atomic_fetch_sub(&s->backend->capturing, 1);
    if (st != MSTAR_OK) {
        if (g != NULL) {
            mstar__vec_free(&g->copy_nodes);
            mstar__vec_free(&g->host_calls);
            mstar__vec_free(&g->pool_blocks);
            mstar__vec_free(&g->caching_blocks);
            free(g);
        }
        return st;
    }
    *out = g;
    return MSTAR_OK;
}

bool mstar_stream_is_capturing(const mstar_stream *s)
{
    return s != NULL && s->capturing;
}

mstar_status mstar_graph_instantiate(mstar_graph *g, bool keep_graph)
{
    if (g == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_instantiate: graph is NULL");
    if (g->instantiated)
        return mstar_error_set(MSTAR_ESTATE, "mstar_graph_instantiate: already instantiated");
    /* Copy nodes are named through the graph they were captured into. */
    mstar_status st = g->backend->ops->graph_instantiate(g, keep_graph || g->copy_nodes.len > 0);
    if (st == MSTAR_OK)
        g->instantiated = true;
    return st;
}

mstar_status mstar_graph_launch(mstar_graph *g, mstar_stream *s)
{
    mstar_status st = check_stream(s, "mstar_graph_launch");
    if (st != MSTAR_OK)
        return st;
    if (g == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_launch: graph is NULL");
    if (!g->instantiated)
        return mstar_error_set(MSTAR_ESTATE, "mstar_graph_launch: the graph is not instantiated");
    if (g->backend != s->backend)
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_launch: the graph and the stream belong "
                                             "to different backends");
    if (s->capturing)
        return mstar_error_set(MSTAR_ESTATE, "mstar_graph_launch: the stream is capturing");
    return g->backend->ops->graph_launch(g, s);
}

mstar_status mstar__graph_exec_copy(mstar_graph *g, void **copy)
{
    if (g == NULL || g->native == NULL)
        return mstar_error_set(MSTAR_EINVAL, "executable copy: the graph was not kept "
                                             "(instantiate it with keep_graph)");
    if (g->backend->ops->graph_exec_copy == NULL)
        return mstar_error_set(MSTAR_ENOTSUP, "executable copy: this backend has no executables");
    return g->backend->ops->graph_exec_copy(g, copy);
}

void mstar__graph_exec_copy_destroy(mstar_backend *b, void *copy)
{
    if (copy != NULL && b->ops->graph_exec_copy_destroy != NULL)
        b->ops->graph_exec_copy_destroy(b, copy);
}

size_t mstar_graph_node_count(const mstar_graph *g)
{
    return g == NULL ? 0 : g->nodes;
}

void *mstar_graph_native(const mstar_graph *g)
{
    return g == NULL || g->backend->device.type != MSTAR_DEVICE_CUDA ? NULL : g->native;
}

mstar_backend *mstar_graph_backend(const mstar_graph *g)
{
    return g->backend;
}

/* Give back what `g` owns beyond its native parts: output buffers from the caching allocator, and
 * through its pool's hooks the pool blocks it kept. */
static void graph_release_owned(mstar_graph *g)
{
    for (size_t i = 0; i < g->caching_blocks.len; i++) {
        void *ptr = *(void **)mstar__vec_at(&g->caching_blocks, i);
        mstar__allocator_free(&g->backend->caching, ptr, true);
    }
    g->caching_blocks.len = 0;
    if (g->pool != NULL)
        g->pool_hooks->release_graph_blocks(g);
}

void mstar_graph_destroy(mstar_graph *g)
{
    if (g == NULL)
        return;
    g->backend->ops->graph_release(g);
    graph_release_owned(g);
    mstar__vec_free(&g->copy_nodes);
    mstar__vec_free(&g->host_calls);
    mstar__vec_free(&g->pool_blocks);
    mstar__vec_free(&g->caching_blocks);
    free(g);
}
