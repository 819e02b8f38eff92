/*
 * alloc.c — the block-caching allocator (see alloc.h).
 *
 * Deliberately simple: a segment list, an unordered free list searched best-fit, and address
 * neighbours per block for merging. The number of live blocks a step holds is small (tens), and
 * what matters for graph pools is exact accounting — which bytes are reserved, which are live,
 * which a graph keeps — not allocation speed.
 */
#include "device/alloc.h"

#include "device/backend.h"

#include <stdlib.h>

struct mstar__block {
    char *ptr;
    size_t size;
    bool used;
    bool graph_owned;
    mstar__seg_kind kind; /* its segment's */
    uint64_t tag;
    mstar__block *prev; /* address neighbours inside the segment */
    mstar__block *next;
    mstar__block *free_prev; /* free list links, while free */
    mstar__block *free_next;
};

struct segment {
    void *ptr;
    size_t size;
    mstar__block *first;
};

void mstar__allocator_init(mstar__allocator *a, mstar_backend *backend)
{
    a->backend = backend;
    pthread_mutex_init(&a->lock, NULL);
    mstar__vec_init(&a->segments, sizeof(struct segment));
    mstar__u64map_init(&a->live);
    a->free_head = NULL;
    a->reserved = a->reserved_kept = a->allocated = a->peak = 0;
}

size_t mstar__allocator_fini(mstar__allocator *a)
{
    size_t leaked = mstar__u64map_len(&a->live);
    for (size_t i = 0; i < a->segments.len; i++) {
        struct segment *seg = mstar__vec_at(&a->segments, i);
        mstar__block *b = seg->first;
        while (b != NULL) {
            mstar__block *next = b->next;
            free(b);
            b = next;
        }
        mstar__raw_free(a->backend, seg->ptr);
    }
    mstar__vec_free(&a->segments);
    mstar__u64map_free(&a->live);
    pthread_mutex_destroy(&a->lock);
    a->free_head = NULL;
    return leaked;
}

static void free_list_push(mstar__allocator *a, mstar__block *b)
{
    b->free_prev = NULL;
    b->free_next = a->free_head;
    if (a->free_head != NULL)
        a->free_head->free_prev = b;
    a->free_head = b;
}

static void free_list_remove(mstar__allocator *a, mstar__block *b)
{
    if (b->free_prev != NULL)
        b->free_prev->free_next = b->free_next;
    else
        a->free_head = b->free_next;
    if (b->free_next != NULL)
        b->free_next->free_prev = b->free_prev;
    b->free_prev = b->free_next = NULL;
}

static size_t whole_segments(size_t size)
{
    return (size + MSTAR__SEGMENT_ROUND - 1) / MSTAR__SEGMENT_ROUND * MSTAR__SEGMENT_ROUND;
}

static mstar_status add_segment(mstar__allocator *a, size_t size, mstar__seg_kind kind,
                                mstar__block **out)
{
    size_t seg_size = size <= MSTAR__SMALL_LIMIT ? MSTAR__SEGMENT_ROUND : whole_segments(size);
    mstar__block *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "allocator: no memory for a block record");
    void *ptr;
    mstar_status st = mstar__raw_alloc(a->backend, seg_size, &ptr);
    if (st != MSTAR_OK) {
        free(b);
        return st;
    }
    struct segment seg = { ptr, seg_size, b };
    st = mstar__vec_push(&a->segments, &seg);
    if (st != MSTAR_OK) {
        mstar__raw_free(a->backend, ptr);
        free(b);
        return st;
    }
    b->ptr = ptr;
    b->size = seg_size;
    b->kind = kind;
    a->reserved += seg_size;
    if (kind == MSTAR__SEG_KEPT)
        a->reserved_kept += seg_size;
    free_list_push(a, b);
    *out = b;
    return MSTAR_OK;
}

static mstar__block *best_fit(mstar__allocator *a, size_t size, mstar__seg_kind kind)
{
    mstar__block *best = NULL;
    for (mstar__block *b = a->free_head; b != NULL; b = b->free_next) {
        if (b->kind == kind && b->size >= size && (best == NULL || b->size < best->size))
            best = b;
    }
    return best;
}

/* Give back every segment that is one free block. Caller holds the lock. */
static uint64_t trim_locked(mstar__allocator *a)
{
    uint64_t released = 0;
    size_t keep = 0;
    for (size_t i = 0; i < a->segments.len; i++) {
        struct segment *seg = mstar__vec_at(&a->segments, i);
        mstar__block *b = seg->first;
        if (!b->used && b->next == NULL) {
            if (b->kind == MSTAR__SEG_KEPT)
                a->reserved_kept -= seg->size;
            free_list_remove(a, b);
            free(b);
            mstar__raw_free(a->backend, seg->ptr);
            a->reserved -= seg->size;
            released += seg->size;
            continue;
        }
        if (keep != i)
            *(struct segment *)mstar__vec_at(&a->segments, keep) = *seg;
        keep++;
    }
    a->segments.len = keep;
    return released;
}

uint64_t mstar__allocator_trim(mstar__allocator *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t released = trim_locked(a);
    pthread_mutex_unlock(&a->lock);
    return released;
}

mstar_status mstar__allocator_alloc(mstar__allocator *a, size_t nbytes, uint64_t tag,
                                    mstar__seg_kind kind, void **out)
{
    if (nbytes == 0)
        nbytes = 1;
    if (nbytes > SIZE_MAX / 2)
        return mstar_error_set(MSTAR_ENOMEM, "allocation of %zu bytes is too large", nbytes);
    size_t size = (nbytes + MSTAR__BLOCK_ROUND - 1) / MSTAR__BLOCK_ROUND * MSTAR__BLOCK_ROUND;
    pthread_mutex_lock(&a->lock);
    mstar_status st = MSTAR_OK;
    mstar__block *b = best_fit(a, size, kind);
    if (b == NULL)
        st = add_segment(a, size, kind, &b);
    if (st == MSTAR_ENOMEM && atomic_load(&a->backend->capturing) == 0 && trim_locked(a) > 0) {
        /* Cached segments nothing uses stand in the way of this one: give them back and try
         * again, as torch's caching allocator does before it reports out of memory (never while
         * capturing: a capture cannot free device memory). */
        mstar_error_clear();
        st = add_segment(a, size, kind, &b);
    }
    if (st == MSTAR_OK && b->size - size >= MSTAR__BLOCK_ROUND) {
        mstar__block *rest = calloc(1, sizeof(*rest));
        if (rest != NULL) {
            rest->ptr = b->ptr + size;
            rest->size = b->size - size;
            rest->kind = b->kind;
            rest->prev = b;
            rest->next = b->next;
            if (b->next != NULL)
                b->next->prev = rest;
            b->next = rest;
            b->size = size;
            free_list_push(a, rest);
        } /* without a record the block is simply handed out whole */
    }
    if (st == MSTAR_OK)
        st = mstar__u64map_put(&a->live, (uint64_t)(uintptr_t)b->ptr, (uint64_t)(uintptr_t)b);
    if (st == MSTAR_OK) {
        free_list_remove(a, b);
        b->used = true;
        b->graph_owned = false;
        b->tag = tag;
        a->allocated += b->size;
        if (a->allocated > a->peak)
            a->peak = a->allocated;
        *out = b->ptr;
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

/* Merge `b` into its free predecessor or absorb a free successor. Caller holds the lock. */
static void release_block(mstar__allocator *a, mstar__block *b)
{
    b->used = false;
    b->graph_owned = false;
    a->allocated -= b->size;
    mstar__block *n = b->next;
    if (n != NULL && !n->used) {
        free_list_remove(a, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next != NULL)
            n->next->prev = b;
        free(n);
    }
    mstar__block *p = b->prev;
    if (p != NULL && !p->used) {
        p->size += b->size;
        p->next = b->next;
        if (b->next != NULL)
            b->next->prev = p;
        free(b);
        return; /* p is already on the free list */
    }
    free_list_push(a, b);
}

mstar_status mstar__allocator_free(mstar__allocator *a, void *ptr, bool force)
{
    pthread_mutex_lock(&a->lock);
    uint64_t v;
    mstar_status st = MSTAR_OK;
    if (!mstar__u64map_get(&a->live, (uint64_t)(uintptr_t)ptr, &v)) {
        st = mstar_error_set(MSTAR_ENOENT, "pointer %p is not a live block of this allocator", ptr);
    } else {
        mstar__block *b = (mstar__block *)(uintptr_t)v;
        if (b->graph_owned && !force) {
            st = mstar_error_set(MSTAR_ESTATE,
                                 "block %p belongs to a captured graph; it is released with the "
                                 "graph (mstar_graph_destroy)",
                                 ptr);
        } else {
            mstar__u64map_remove(&a->live, (uint64_t)(uintptr_t)ptr, NULL);
            release_block(a, b);
        }
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

bool mstar__allocator_owns(mstar__allocator *a, const void *ptr)
{
    pthread_mutex_lock(&a->lock);
    bool owns = mstar__u64map_find(&a->live, (uint64_t)(uintptr_t)ptr) != NULL;
    pthread_mutex_unlock(&a->lock);
    return owns;
}

uint64_t mstar__allocator_kept_charge(size_t nbytes)
{
    size_t size = nbytes == 0 ? 1 : nbytes;
    size = (size + MSTAR__BLOCK_ROUND - 1) / MSTAR__BLOCK_ROUND * MSTAR__BLOCK_ROUND;
    return size > MSTAR__SMALL_LIMIT ? whole_segments(size) : size;
}

mstar_status mstar__allocator_adopt(mstar__allocator *a, uint64_t tag, mstar__vec *ptrs,
                                    uint64_t *bytes)
{
    mstar_status st = MSTAR_OK;
    pthread_mutex_lock(&a->lock);
    size_t it = 0;
    uint64_t k, v;
    while (st == MSTAR_OK && mstar__u64map_next(&a->live, &it, &k, &v)) {
        mstar__block *b = (mstar__block *)(uintptr_t)v;
        if (b->tag != tag || b->graph_owned)
            continue;
        void *p = b->ptr;
        st = mstar__vec_push(ptrs, &p);
        if (st == MSTAR_OK) {
            b->graph_owned = true;
            *bytes += mstar__allocator_kept_charge(b->size);
        }
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

void mstar__allocator_release_tag(mstar__allocator *a, uint64_t tag)
{
    pthread_mutex_lock(&a->lock);
    bool again = true;
    while (again) { /* removing while iterating may skip entries: restart after each removal */
        again = false;
        size_t it = 0;
        uint64_t k, v;
        while (mstar__u64map_next(&a->live, &it, &k, &v)) {
            mstar__block *b = (mstar__block *)(uintptr_t)v;
            if (b->tag == tag && !b->graph_owned) {
                mstar__u64map_remove(&a->live, k, NULL);
                release_block(a, b);
                again = true;
                break;
            }
        }
    }
    pthread_mutex_unlock(&a->lock);
}

void mstar__allocator_stats(mstar__allocator *a, mstar_alloc_stats *out)
{
    pthread_mutex_lock(&a->lock);
    out->reserved = a->reserved;
    out->allocated = a->allocated;
    out->peak = a->peak;
    out->segments = a->segments.len;
    pthread_mutex_unlock(&a->lock);
}

uint64_t mstar__allocator_reserved_kept(mstar__allocator *a)
{
    pthread_mutex_lock(&a->lock);
    uint64_t bytes = a->reserved_kept;
    pthread_mutex_unlock(&a->lock);
    return bytes;
}

void mstar__allocator_reset_peak(mstar__allocator *a)
{
    pthread_mutex_lock(&a->lock);
    a->peak = a->allocated;
    pthread_mutex_unlock(&a->lock);
}
