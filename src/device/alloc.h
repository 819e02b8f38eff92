/*
 * alloc.h — a block-caching allocator over a backend's raw memory.
 *
 * One implementation serves two users: the backend's ordinary caching allocator and each graph
 * pool (pool.c). Segments come from the backend's raw allocator and are kept until the allocator
 * is finalised; blocks are carved from them best-fit, split, and merged with free neighbours when
 * freed. Each live block carries a tag (the capture that allocated it, 0 outside captures) and a
 * graph-owned mark, which is what gives a graph pool its capture semantics. Every segment is of
 * one kind, and a block only ever comes from a segment of the kind asked for: a graph pool keeps
 * what its graphs keep apart from the scratch their captures share (pool.c). Thread-safe.
 */
#ifndef MSTAR_DEVICE_ALLOC_H
#define MSTAR_DEVICE_ALLOC_H

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
    uint64_t reserved_kept; /* the part of `reserved` in MSTAR__SEG_KEPT segments */
    uint64_t allocated;
    uint64_t peak;
} mstar__allocator;

/* Block sizes are rounded up to this; every block is aligned to it. */
#define MSTAR__BLOCK_ROUND 512
/* Requests up to this share 2 MiB segments; larger ones get segments of a multiple of 2 MiB. */
#define MSTAR__SMALL_LIMIT   ((size_t)1 << 20)
#define MSTAR__SEGMENT_ROUND ((size_t)2 << 20)

/* What a segment's blocks are for. The caching allocator only has SHARED segments. */
typedef enum mstar__seg_kind {
    MSTAR__SEG_SHARED = 0, /* blocks freed again soon: a capture's scratch, eager tensors */
    MSTAR__SEG_KEPT = 1,   /* blocks expected to outlive their capture: a graph's outputs */
} mstar__seg_kind;

void mstar__allocator_init(mstar__allocator *a, mstar_backend *backend);
/* Return every segment to the backend. Live blocks are lost; returns how many there were. */
size_t mstar__allocator_fini(mstar__allocator *a);
/* A block of at least nbytes from a segment of `kind` (a new segment when none has room). */
mstar_status mstar__allocator_alloc(mstar__allocator *a, size_t nbytes, uint64_t tag,
                                    mstar__seg_kind kind, void **out);
/* MSTAR_ENOENT if `ptr` is not a live block here; MSTAR_ESTATE for a graph-owned block unless
 * `force`. */
mstar_status mstar__allocator_free(mstar__allocator *a, void *ptr, bool force);
bool mstar__allocator_owns(mstar__allocator *a, const void *ptr);
/* What a kept block of nbytes holds of the allocator, as mstar__allocator_adopt counts it. */
uint64_t mstar__allocator_kept_charge(size_t nbytes);
/* Mark the live blocks tagged `tag` as owned by a graph; append their pointers to `ptrs` (void *
 * elements) and add to *bytes what they hold of the allocator: a block over MSTAR__SMALL_LIMIT
 * counts as its size rounded up to MSTAR__SEGMENT_ROUND, the segment such a block is given. */
mstar_status mstar__allocator_adopt(mstar__allocator *a, uint64_t tag, mstar__vec *ptrs,
                                    uint64_t *bytes);
/* Free every live block tagged `tag` (a capture that failed). */
void mstar__allocator_release_tag(mstar__allocator *a, uint64_t tag);
void mstar__allocator_stats(mstar__allocator *a, mstar_alloc_stats *out);
/* Bytes reserved in MSTAR__SEG_KEPT segments. */
uint64_t mstar__allocator_reserved_kept(mstar__allocator *a);
/* Return every segment that holds no live block to the backend; the bytes released. */
uint64_t mstar__allocator_trim(mstar__allocator *a);
void mstar__allocator_reset_peak(mstar__allocator *a);

#endif
