/*
 * vec.h — a growable array of fixed-size elements, and small helpers the whole library shares:
 * the monotonic clock and overflow-checked size arithmetic.
 */
#ifndef MSTAR_CORE_VEC_H
#define MSTAR_CORE_VEC_H

#include "mstar/core.h"

#include <time.h>

typedef struct mstar__vec {
    void *data;
    size_t len;
    size_t cap;
    size_t elsize;
} mstar__vec;

void mstar__vec_init(mstar__vec *v, size_t elsize);
void mstar__vec_free(mstar__vec *v);
mstar_status mstar__vec_reserve(mstar__vec *v, size_t n);
/* Append a copy of *elem. */
mstar_status mstar__vec_push(mstar__vec *v, const void *elem);
/* Append `n` zeroed elements; *first (may be NULL) points at the first. */
mstar_status mstar__vec_grow(mstar__vec *v, size_t n, void **first);
void mstar__vec_remove(mstar__vec *v, size_t index); /* order-preserving */

/* Zeroed room for `n` elements of `elsize` bytes for the length of one call: `local` (an array
 * of `local_size` bytes on the caller's stack) when they fit, else the heap. A call on a few
 * elements, the common case, then costs no allocation. Never NULL for n == 0; NULL (with no
 * error set) only when the heap is out of memory. Give it back with mstar__scratch_free. */
void *mstar__scratch_zalloc(void *local, size_t local_size, size_t n, size_t elsize);
void mstar__scratch_free(void *p, const void *local);

static inline void *mstar__vec_at(const mstar__vec *v, size_t i)
{
    return (char *)v->data + i * v->elsize;
}

/* Monotonic time in nanoseconds. */
static inline uint64_t mstar__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* For a wait that retries: whether `span_ns` has passed since the first call of the wait, which
 * starts the clock (*deadline 0 before it). A retry loop whose first try nearly always succeeds
 * so reads no clock until it must wait (a read costs about 27 ns on the VM the benchmarks run on).
 * A span of 0 has passed at the first call. */
static inline bool mstar__deadline_passed(uint64_t *deadline, uint64_t span_ns)
{
    uint64_t now = mstar__now_ns();
    if (*deadline == 0)
        *deadline = now + span_ns;
    return now >= *deadline;
}

/* a + b and a * b with overflow detection: false on overflow. */
static inline bool mstar__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
static inline bool mstar__mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

#endif
