/*
 * completion.h — completion handles (the reference's Future), made and finished inside the
 * library; mstar/tensors.h has the public poll / wait / release.
 *
 * A handle is reference counted (atomically): the manager's pending read holds one, the caller's
 * completion list another, and a copy queued on a device stream a third until its host callback
 * has run. Finishing wakes waiters, ends the spin of the loop that owns it and writes 1 to the
 * owner's eventfd, so an event loop polling that fd learns of it without polling handles.
 * Thread-safe.
 */
#ifndef MSTAR_TENSORS_COMPLETION_H
#define MSTAR_TENSORS_COMPLETION_H

#include "mstar/mesh.h"
#include "mstar/tensors.h"

/* Whom a finished handle tells: its owner's eventfd, written (-1: none), and the mesh whose
 * spinning loop it ends (NULL: none; mesh/spin_break.h), the one its manager sends through. A
 * loop that spins on its rings before it sleeps would otherwise see a read that landed meanwhile
 * only when its spin was over. */
typedef struct mstar__completion_notice {
    int fd;
    mstar_mesh *mesh;
} mstar__completion_notice;

/* A running handle with one reference. `notice` (NULL: nobody) is told when it finishes; it and
 * what it names must outlive every finish. */
mstar_status mstar__completion_create(const mstar__completion_notice *notice,
                                      mstar_completion **out);
mstar_completion *mstar__completion_retain(mstar_completion *c);
/* Mark it finished with `status` (and `message` when status is an error). Idempotent: only the
 * first finish counts. */
void mstar__completion_finish(mstar_completion *c, mstar_status status, const char *message);
/* Finished (either way)? */
bool mstar__completion_done(const mstar_completion *c);
/* When it finished (mstar__now_ns), stamped by the first finish: for a read, when its bytes
 * landed, which is where its RX time ends. 0 while it runs. */
uint64_t mstar__completion_finished_ns(const mstar_completion *c);

#endif
