/*
 * fail_alloc.h — running a test program out of memory on demand, SQLite's way: each allocation
 * the test arms is made to fail in turn.
 *
 * Included by one file of a test executable, it defines that executable's malloc, calloc,
 * realloc and free: they pass to glibc's, but for the k-th allocation of the calling thread after
 * mstar_fail_alloc_arm(k), which fails with ENOMEM (other threads, a transport's, never fail),
 * and they count the blocks live, so a failed call can be seen to leak nothing. The sanitizer
 * builds own malloc: there MSTAR_FAIL_ALLOC_SANITIZED is defined, nothing is interposed, and the
 * tests that need this skip.
 */
#ifndef MSTAR_TEST_FAIL_ALLOC_H
#define MSTAR_TEST_FAIL_ALLOC_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "sanitized.h"

#ifdef MSTAR_TEST_SANITIZED
#define MSTAR_FAIL_ALLOC_SANITIZED 1
#endif

#ifndef MSTAR_FAIL_ALLOC_SANITIZED

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

/* Allocations of this thread to let through before the one that fails (-1: none fails), whether
 * one failed since the last arm, and the blocks allocated and not freed (all threads). */
static _Thread_local long fail_alloc_in = -1;
static _Thread_local bool fail_alloc_failed;
static atomic_long fail_alloc_live;

static bool fail_alloc_now(void)
{
    if (fail_alloc_in < 0 || fail_alloc_in-- > 0)
        return false;
    fail_alloc_failed = true;
    errno = ENOMEM;
    return true;
}

void *malloc(size_t n)
{
    void *p = fail_alloc_now() ? NULL : __libc_malloc(n);
    if (p != NULL)
        atomic_fetch_add(&fail_alloc_live, 1);
    return p;
}

void *calloc(size_t n, size_t size)
{
    void *p = fail_alloc_now() ? NULL : __libc_calloc(n, size);
    if (p != NULL)
        atomic_fetch_add(&fail_alloc_live, 1);
    return p;
}

void *realloc(void *p, size_t n)
{
    bool fail = fail_alloc_now();
    void *q = fail ? NULL : __libc_realloc(p, n);
    if (p == NULL && q != NULL)
        atomic_fetch_add(&fail_alloc_live, 1);
    else if (p != NULL && n == 0 && !fail) /* glibc's realloc(p, 0) frees p */
        atomic_fetch_sub(&fail_alloc_live, 1);
    return q;
}

void free(void *p)
{
    if (p != NULL)
        atomic_fetch_sub(&fail_alloc_live, 1);
    __libc_free(p);
}

/* Fail the k-th allocation of this thread from now (k = 0: the next); k < 0: none. */
static inline void mstar_fail_alloc_arm(long k)
{
    fail_alloc_failed = false;
    fail_alloc_in = k;
}

/* Disarm; whether an allocation failed since the arm. */
static inline bool mstar_fail_alloc_disarm(void)
{
    fail_alloc_in = -1;
    return fail_alloc_failed;
}

/* Blocks allocated and not yet freed, as this executable's allocator counts them. */
static inline long mstar_fail_alloc_live(void)
{
    return atomic_load(&fail_alloc_live);
}

#endif
#endif
