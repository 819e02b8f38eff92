/*
 * arena_alloc.h — the allocator inside one arena segment (design.md "Transports").
 *
 * Offsets only: it never touches the segment's bytes. Requests are rounded up to a multiple of
 * 256 bytes (a zero-byte request still takes 256, so every live tensor has a distinct offset).
 * The free list is kept sorted by offset with neighbours always coalesced; reserve takes the
 * first block that fits and carves from its front. Freeing an offset that is not live is
 * refused (false), so a double free or a stale offset cannot corrupt the list.
 *
 * Not thread-safe: the segmented arena (arena.h) serialises access.
 */
#ifndef MSTAR_TENSORS_ARENA_ALLOC_H
#define MSTAR_TENSORS_ARENA_ALLOC_H

#include "core/u64map.h"
#include "core/vec.h"

#define MSTAR__ARENA_ALIGN 256

typedef struct mstar__arena_block {
    uint64_t off;
    uint64_t len;
} mstar__arena_block;

typedef struct mstar__arena_alloc {
    uint64_t size;
    uint64_t bytes_free;
    mstar__vec free;    /* mstar__arena_block, sorted by off, never adjacent */
    mstar__u64map live; /* off → aligned length */
} mstar__arena_alloc;

/* `size` must be a positive multiple of MSTAR__ARENA_ALIGN. */
mstar_status mstar__arena_alloc_init(mstar__arena_alloc *a, uint64_t size);
void mstar__arena_alloc_free(mstar__arena_alloc *a);

/* The aligned size a request of n bytes takes; false if it overflows. */
bool mstar__arena_aligned(uint64_t n, uint64_t *aligned);

/* MSTAR_OK with *off set; MSTAR_ENOSPC when no free block fits (no error message is set: the
 * caller decides whether that is an error); MSTAR_ENOMEM if bookkeeping could not grow. */
mstar_status mstar__arena_alloc_reserve(mstar__arena_alloc *a, uint64_t n, uint64_t *off);
/* Return the slot at `off`; false if no slot starts there. */
bool mstar__arena_alloc_release(mstar__arena_alloc *a, uint64_t off);

uint64_t mstar__arena_alloc_largest_free(const mstar__arena_alloc *a);

static inline size_t mstar__arena_alloc_live(const mstar__arena_alloc *a)
{
    return mstar__u64map_len(&a->live);
}

#endif
