/*
 * alloc.h — a block-caching allocator over a backend's raw memory.
 *
 * One implementation serves two users: the backend's ordinary caching allocator and each graph
 * pool (pool.c). Segments come from the backend's raw allocator and are kept until the allocator
 * is finalised; blocks are carved from them best-fit, split, and merged with free neighbours when
 * freed. Each live block carries a tag (the capture that allocated it, 0 outside captures) and a
 * graph-owned mark, which is what gives a graph pool its capture semantics. Thread-safe.
 */
#ifndef MSTAR_GRAPHS_ALLOC_H
#define MSTAR_GRAPHS_ALLOC_H

#include "mstar/device.h"

#include "core/u64map.h"
#include "core/vec.h"

#include <pthread.h>

typedef struct mstar__block mstar__block;

typedef struct mstar__allocator {
    mstar_backend *backend;
    pthread_mutex_t lock;
    mstar__vec segments;     /* struct segment */
    mstar__u64map live;      /* block pointer → mstar__block * */
    mstar__block *free_head; /* free blocks, unordered */
    uint64_t reserved;
    uint64_t allocated;
    uint64_t peak;
} mstar__allocator;

/* Block sizes are rounded up to this; every block is aligned to it. */
#define MSTAR__BLOCK_ROUND 512

void mstar__allocator_init(mstar__allocator *a, mstar_backend *backend);
/* Return every segment to the backend. Live blocks are lost; returns how many there were. */
size_t mstar__allocator_fini(mstar__allocator *a);
mstar_status mstar__allocator_alloc(mstar__allocator *a, size_t nbytes, uint64_t tag, void **out);
/* MSTAR_ENOENT if `ptr` is not a live block here; MSTAR_ESTATE for a graph-owned block unless
 * `force`. */
mstar_status mstar__allocator_free(mstar__allocator *a, void *ptr, bool force);
bool mstar__allocator_owns(mstar__allocator *a, const void *ptr);
/* Mark the live blocks tagged `tag` as owned by a graph; append their pointers to `ptrs` (void *
 * elements) and add their bytes to *bytes. */
mstar_status mstar__allocator_adopt(mstar__allocator *a, uint64_t tag, mstar__vec *ptrs,
                                    uint64_t *bytes);
/* Free every live block tagged `tag` (a capture that failed). */
void mstar__allocator_release_tag(mstar__allocator *a, uint64_t tag);
void mstar__allocator_stats(mstar__allocator *a, mstar_alloc_stats *out);
/* Return every segment that holds no live block to the backend; the bytes released. */
uint64_t mstar__allocator_trim(mstar__allocator *a);
void mstar__allocator_reset_peak(mstar__allocator *a);

#endif
