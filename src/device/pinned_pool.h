/*
 * pinned_pool.h — a cache of pinned host buffers for the staged transport routes.
 *
 * Staging a device tensor through host memory (the files route, UCX) needs a pinned buffer per
 * tensor and per read; allocating and freeing pinned memory each time costs far more than the
 * copy of a small tensor. The pool hands out buffers in size classes (powers of two from 4 KiB)
 * and keeps returned ones for the next request of the same class, up to a byte cap; a buffer
 * that would push the cache past it is freed at once. Thread-safe: a read's buffer may come back
 * on another thread (a network engine's reader) than the one that took it.
 */
#ifndef MSTAR_DEVICE_PINNED_POOL_H
#define MSTAR_DEVICE_PINNED_POOL_H

#include "mstar/device.h"

#include <stdint.h>

typedef struct mstar__pinned_pool mstar__pinned_pool;

#define MSTAR__PINNED_POOL_MIN_CLASS 4096u
/* The default of MSTAR_PINNED_POOL_MB: 8 staged 64 MiB tensors in flight. */
#define MSTAR__PINNED_POOL_DEFAULT_MB 512

typedef struct mstar__pinned_pool_stats {
    uint64_t allocations;  /* buffers allocated from the backend */
    uint64_t reuses;       /* requests served from the cache */
    uint64_t frees;        /* buffers given back to the backend before destroy */
    uint64_t bytes_cached; /* bytes of buffers held for reuse */
    uint64_t bytes_out;    /* bytes of the size classes handed out and not yet returned */
    uint64_t cap_bytes;    /* the most bytes kept cached */
} mstar__pinned_pool_stats;

/* A pool over `backend`'s pinned host memory that caches at most `cap_bytes` (0: no caching,
 * every buffer is freed when it comes back). */
mstar_status mstar__pinned_pool_create(mstar_backend *backend, uint64_t cap_bytes,
                                       mstar__pinned_pool **out);
/* The same with the cap from MSTAR_PINNED_POOL_MB (docs/environment.md). */
mstar_status mstar__pinned_pool_create_from_env(mstar_backend *backend, mstar__pinned_pool **out);
/* Frees every buffer, cached or still out (those are logged: their holder outlived the pool). */
void mstar__pinned_pool_destroy(mstar__pinned_pool *p);
/* A pinned buffer of at least `nbytes` (0 allowed: a buffer of the smallest class). */
mstar_status mstar__pinned_pool_get(mstar__pinned_pool *p, uint64_t nbytes, void **out);
/* Give back a buffer from mstar__pinned_pool_get (NULL: nothing). Any thread. */
void mstar__pinned_pool_put(mstar__pinned_pool *p, void *ptr);
void mstar__pinned_pool_stats_get(mstar__pinned_pool *p, mstar__pinned_pool_stats *out);
/* The size class of a request: the smallest power of two >= nbytes and >= 4 KiB; 0 when none
 * fits in 64 bits. */
uint64_t mstar__pinned_pool_class(uint64_t nbytes);

#endif
