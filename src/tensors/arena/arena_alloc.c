/*
 * arena_alloc.c — see arena_alloc.h. The free list is an array: first fit scans it from the
 * front, and a free binary-searches its position and merges with at most two neighbours.
 */
#include "tensors/arena/arena_alloc.h"

#include <string.h>

mstar_status mstar__arena_alloc_init(mstar__arena_alloc *a, uint64_t size)
{
    memset(a, 0, sizeof(*a));
    if (size == 0 || size % MSTAR__ARENA_ALIGN != 0)
        return mstar_error_set(MSTAR_EINVAL,
                               "arena segment size %llu is not a positive multiple "
                               "of %d",
                               (unsigned long long)size, MSTAR__ARENA_ALIGN);
    mstar__vec_init(&a->free, sizeof(mstar__arena_block));
    mstar__u64map_init(&a->live);
    mstar__arena_block whole = { 0, size };
    mstar_status st = mstar__vec_push(&a->free, &whole);
    if (st != MSTAR_OK)
        return st;
    a->size = size;
    a->bytes_free = size;
    return MSTAR_OK;
}

void mstar__arena_alloc_free(mstar__arena_alloc *a)
{
    mstar__vec_free(&a->free);
    mstar__u64map_free(&a->live);
    memset(a, 0, sizeof(*a));
}

bool mstar__arena_aligned(uint64_t n, uint64_t *aligned)
{
    if (n == 0)
        n = 1;
    if (n > UINT64_MAX - (MSTAR__ARENA_ALIGN - 1))
        return false;
    *aligned = (n + MSTAR__ARENA_ALIGN - 1) & ~(uint64_t)(MSTAR__ARENA_ALIGN - 1);
    return true;
}

static mstar__arena_block *block(const mstar__arena_alloc *a, size_t i)
{
    return (mstar__arena_block *)mstar__vec_at(&a->free, i);
}

mstar_status mstar__arena_alloc_reserve(mstar__arena_alloc *a, uint64_t n, uint64_t *off)
{
    uint64_t need;
    if (!mstar__arena_aligned(n, &need) || need > a->bytes_free)
        return MSTAR_ENOSPC;
    for (size_t i = 0; i < a->free.len; i++) {
        mstar__arena_block *b = block(a, i);
        if (b->len < need)
            continue;
        uint64_t at = b->off;
        mstar_status st = mstar__u64map_put(&a->live, at, need);
        if (st != MSTAR_OK)
            return st;
        if (b->len == need) {
            mstar__vec_remove(&a->free, i);
        } else {
            b->off += need;
            b->len -= need;
        }
        a->bytes_free -= need;
        *off = at;
        return MSTAR_OK;
    }
    return MSTAR_ENOSPC;
}

/* Index of the first free block whose offset is greater than `off`. */
static size_t upper_bound(const mstar__arena_alloc *a, uint64_t off)
{
    size_t lo = 0, hi = a->free.len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (block(a, mid)->off <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool mstar__arena_alloc_release(mstar__arena_alloc *a, uint64_t off)
{
    uint64_t len;
    if (!mstar__u64map_get(&a->live, off, &len))
        return false;
    size_t i = upper_bound(a, off);
    bool merge_prev = i > 0 && block(a, i - 1)->off + block(a, i - 1)->len == off;
    bool merge_next = i < a->free.len && off + len == block(a, i)->off;
    if (merge_prev && merge_next) {
        block(a, i - 1)->len += len + block(a, i)->len;
        mstar__vec_remove(&a->free, i);
    } else if (merge_prev) {
        block(a, i - 1)->len += len;
    } else if (merge_next) {
        block(a, i)->off = off;
        block(a, i)->len += len;
    } else {
        /* Grow first, then shift: on ENOMEM the slot stays live rather than being lost. */
        void *first;
        if (mstar__vec_grow(&a->free, 1, &first) != MSTAR_OK)
            return false;
        memmove(block(a, i + 1), block(a, i), (a->free.len - 1 - i) * sizeof(mstar__arena_block));
        block(a, i)->off = off;
        block(a, i)->len = len;
    }
    mstar__u64map_remove(&a->live, off, NULL);
    a->bytes_free += len;
    return true;
}

uint64_t mstar__arena_alloc_largest_free(const mstar__arena_alloc *a)
{
    uint64_t best = 0;
    for (size_t i = 0; i < a->free.len; i++)
        if (block(a, i)->len > best)
            best = block(a, i)->len;
    return best;
}
