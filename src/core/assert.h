/*
 * core/assert.h — MSTAR__ASSERT and MSTAR__ASSERT_OK, the checks placed at the library's
 * invariants (docs/invariants.md).
 *
 * They are active unless NDEBUG is defined, or whenever MSTAR_ASSERTS is defined: CMake's Debug
 * build leaves NDEBUG out, and a sanitizer build (MSTAR_SANITIZE) defines MSTAR_ASSERTS, so both
 * check; the Release and RelWithDebInfo builds define NDEBUG and compile the checks out. A failed
 * check names the expression and its place on stderr and aborts: it is a bug in libmstar, never
 * a bad input (inputs get a status and mstar_last_error).
 */
#ifndef MSTAR_CORE_ASSERT_H
#define MSTAR_CORE_ASSERT_H

#include "mstar/core.h"

#include <stdio.h>
#include <stdlib.h>

#if !defined(NDEBUG) || defined(MSTAR_ASSERTS)
#define MSTAR__ASSERTS_ON 1
#define MSTAR__ASSERT(cond)                                                                       \
    ((cond) ? (void)0                                                                             \
            : (fprintf(stderr, "%s:%d: mstar invariant failed: %s\n", __FILE__, __LINE__, #cond), \
               abort()))
#else
#define MSTAR__ASSERTS_ON   0
#define MSTAR__ASSERT(cond) ((void)0)
#endif

/* For a step that cannot fail because its room was reserved before (a put after a reserve, an
 * overwrite): the call always runs, and its status is checked where asserts are on. */
#define MSTAR__ASSERT_OK(call)                       \
    do {                                             \
        mstar_status mstar__assert_st = (call);      \
        MSTAR__ASSERT(mstar__assert_st == MSTAR_OK); \
        (void)mstar__assert_st;                      \
    } while (0)

#endif /* MSTAR_CORE_ASSERT_H */
