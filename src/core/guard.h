/*
 * guard.h — copying out of memory another process controls (a peer's arena segment mapped from
 * a file) without dying when it faults.
 *
 * A mapped file that is truncated (or whose tmpfs runs out of pages for a hole) raises SIGBUS on
 * the access, which kills the process by default. A peer, or any process of the same user, can
 * do that to a consumer at any time, so a copy from such a mapping runs under a guard: a SIGBUS
 * whose address lies in the guarded source range, on the thread doing the copy, ends the copy
 * with an error instead. Every other SIGBUS goes to whatever handled it before (the default
 * action, or a handler the program or a sanitizer installed), so faults elsewhere still crash
 * as they should. The process-wide handler is installed by the first guarded copy. A program
 * (or test framework) that installs its own SIGBUS handler later should hand on the faults it
 * does not own, as Python's faulthandler does, or call mstar__guard_install again.
 */
#ifndef MSTAR_CORE_GUARD_H
#define MSTAR_CORE_GUARD_H

#include "mstar/core.h"

#include <stddef.h>

/* memcpy(dst, src, n), except that a SIGBUS reading [src, src + n) makes it return MSTAR_EIO
 * with a message naming `what` (dst then holds part of the bytes). Plain host memory only: no
 * locks may be taken inside, since the copy can be abandoned at any byte. */
mstar_status mstar__guarded_copy(void *dst, const void *src, size_t n, const char *what);

/* Run fn(ctx) so that a SIGBUS reading [lo, lo + n) on this thread abandons it: MSTAR_EIO with a
 * message naming `what`, and fn may have stopped at any point. For reads that are more than one
 * copy (a peer's arena slot is checked, copied and checked again). The rules of the copy apply
 * to fn: no locks, no allocation, nothing that must run to its end. */
mstar_status mstar__guarded_run(const void *lo, size_t n, void (*fn)(void *ctx), void *ctx,
                                const char *what);

/* Put the guard's handler on top of whatever SIGBUS disposition is there now, handing it what
 * the guard does not own. Idempotent; the first guarded copy calls it. */
void mstar__guard_install(void);

#endif
