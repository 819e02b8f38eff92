/*
 * pinned_pool.c — the cache of pinned host buffers in size classes (pinned_pool.h says why).
 *
 * A cached buffer is idle host memory, so the free list of its class runs through the buffers
 * themselves (the next pointer in their first bytes): giving a buffer back allocates nothing
 * and cannot fail. The buffers handed out are in a map (pointer → class) so that one coming
 * back is known for what it is, and so that destroy can free those whose holder never returned
 * them.
 */
#include "device/pinned_pool.h"

#include "core/u64map.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NCLASSES 52 /* 2^12 .. 2^63 */
#define MIN_LOG2 12

struct mstar__pinned_pool {
    mstar_backend *backend;
    pthread_mutex_t lock;
    void *free_head[NCLASSES]; /* cached buffers of each class, linked through their bytes */
    mstar__u64map out;         /* buffer handed out → its class */
    mstar__pinned_pool_stats stats;
};

uint64_t mstar__pinned_pool_class(uint64_t nbytes)
{
    uint64_t c = MSTAR__PINNED_POOL_MIN_CLASS;
    while (c < nbytes) {
        if (c > UINT64_MAX / 2)
            return 0;
        c *= 2;
    }
    return c;
}

static int class_index(uint64_t cls)
{
    return __builtin_ctzll(cls) - MIN_LOG2;
}

static void *next_of(void *buf)
{
    void *next;
    memcpy(&next, buf, sizeof(next));
    return next;
}

static void set_next(void *buf, void *next)
{
    memcpy(buf, &next, sizeof(next));
}

mstar_status mstar__pinned_pool_create(mstar_backend *backend, uint64_t cap_bytes,
                                       mstar__pinned_pool **out)
{
    if (backend == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "pinned pool: backend and out are required");
    mstar__pinned_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "pinned pool");
    p->backend = backend;
    pthread_mutex_init(&p->lock, NULL);
    mstar__u64map_init(&p->out);
    p->stats.cap_bytes = cap_bytes;
    *out = p;
    return MSTAR_OK;
}

mstar_status mstar__pinned_pool_create_from_env(mstar_backend *backend, mstar__pinned_pool **out)
{
    int64_t mb;
    mstar_status st = mstar_env_get_int("MSTAR_PINNED_POOL_MB", MSTAR__PINNED_POOL_DEFAULT_MB, 0,
                                        INT64_C(1) << 40, &mb);
    if (st != MSTAR_OK)
        return st;
    return mstar__pinned_pool_create(backend, (uint64_t)mb << 20, out);
}

static void free_buffer(mstar__pinned_pool *p, void *buf)
{
    if (mstar_host_free_pinned(p->backend, buf) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "pinned pool: %s", mstar_last_error());
}

void mstar__pinned_pool_destroy(mstar__pinned_pool *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < NCLASSES; i++) {
        for (void *b = p->free_head[i]; b != NULL;) {
            void *next = next_of(b);
            free_buffer(p, b);
            b = next;
        }
    }
    size_t it = 0;
    uint64_t ptr, cls;
    if (mstar__u64map_len(&p->out) > 0)
        mstar_log(MSTAR_LOG_WARN, "pinned pool destroyed with %zu buffers (%llu bytes) still out",
                  mstar__u64map_len(&p->out), (unsigned long long)p->stats.bytes_out);
    while (mstar__u64map_next(&p->out, &it, &ptr, &cls))
        free_buffer(p, (void *)(uintptr_t)ptr);
    mstar__u64map_free(&p->out);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* A cached buffer of class `cls`, or NULL. Under the lock. */
static void *take_cached(mstar__pinned_pool *p, uint64_t cls)
{
    int i = class_index(cls);
    void *b = p->free_head[i];
    if (b == NULL)
        return NULL;
    p->free_head[i] = next_of(b);
    p->stats.bytes_cached -= cls;
    p->stats.reuses++;
    return b;
}

mstar_status mstar__pinned_pool_get(mstar__pinned_pool *p, uint64_t nbytes, void **out)
{
    uint64_t cls = mstar__pinned_pool_class(nbytes);
    if (cls == 0 || cls > SIZE_MAX)
        return mstar_error_set(MSTAR_ENOMEM, "pinned pool: a buffer of %llu bytes",
                               (unsigned long long)nbytes);
    pthread_mutex_lock(&p->lock);
    void *b = take_cached(p, cls);
    bool fresh = b == NULL;
    pthread_mutex_unlock(&p->lock);
    /* A fresh buffer is allocated outside the lock: pinning is slow, and another thread's
     * reuse need not wait for it. */
    if (fresh && mstar_host_alloc_pinned(p->backend, (size_t)cls, &b) != MSTAR_OK)
        return mstar_error_wrap("pinned pool: %llu bytes of pinned host memory",
                                (unsigned long long)cls);
    pthread_mutex_lock(&p->lock);
    mstar_status st = mstar__u64map_put(&p->out, (uint64_t)(uintptr_t)b, cls);
    if (st == MSTAR_OK) {
        p->stats.bytes_out += cls;
        p->stats.allocations += fresh;
    } else if (!fresh) {
        set_next(b, p->free_head[class_index(cls)]); /* back where it was */
        p->free_head[class_index(cls)] = b;
        p->stats.bytes_cached += cls;
        p->stats.reuses--;
    }
    pthread_mutex_unlock(&p->lock);
    if (st != MSTAR_OK) {
        if (fresh)
            free_buffer(p, b);
        return mstar_error_set(MSTAR_ENOMEM, "pinned pool: tracking a buffer");
    }
    *out = b;
    return MSTAR_OK;
}

void mstar__pinned_pool_put(mstar__pinned_pool *p, void *ptr)
{
    if (ptr == NULL)
        return;
    uint64_t cls;
    pthread_mutex_lock(&p->lock);
    if (!mstar__u64map_remove(&p->out, (uint64_t)(uintptr_t)ptr, &cls)) {
        pthread_mutex_unlock(&p->lock);
        mstar_log(MSTAR_LOG_ERROR, "pinned pool: %p was not handed out by this pool", ptr);
        return;
    }
    p->stats.bytes_out -= cls;
    bool keep = p->stats.bytes_cached + cls <= p->stats.cap_bytes;
    if (keep) {
        set_next(ptr, p->free_head[class_index(cls)]);
        p->free_head[class_index(cls)] = ptr;
        p->stats.bytes_cached += cls;
    } else {
        p->stats.frees++;
    }
    pthread_mutex_unlock(&p->lock);
    if (!keep)
        free_buffer(p, ptr);
}

void mstar__pinned_pool_stats_get(mstar__pinned_pool *p, mstar__pinned_pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->stats;
    pthread_mutex_unlock(&p->lock);
}
