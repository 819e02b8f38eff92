/*
 * owner.h — which process created an object that owns shared resources (docs/security.md
 * "Forked children").
 *
 * A forked child inherits a copy of every object its parent made: managers, arenas, meshes,
 * ZeroMQ contexts, rank groups. Its copy still names the parent's segments, files and sockets,
 * and maps the parent's shared memory, so destroying it there the ordinary way would unlink the
 * parent's segments, remove its bell and inbox files, write "closed" into its rings, send ACKs
 * and goodbyes on its behalf, or wait for threads that only exist in the parent (zmq_ctx_term
 * then returns EINTR for ever). Each such object records its creator here; its destroy asks
 * mstar__owner_here first and, in any other process, releases only what is the child's own:
 * its mappings and fds, and heap memory whose release touches nothing shared.
 *
 * What cannot be released without touching shared state or a parent-only thread (a ZeroMQ
 * context, a manager's records) is handed to mstar__owner_keep: the child keeps it, reachable,
 * until it exits or execs, so a leak checker sees it as kept rather than lost.
 */
#ifndef MSTAR_CORE_OWNER_H
#define MSTAR_CORE_OWNER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct mstar__owner {
    pid_t pid; /* the process that created the object */
} mstar__owner;

/* Record the calling process as the owner. */
void mstar__owner_init(mstar__owner *o);

/* True in the process that created the object, false in a forked child. */
bool mstar__owner_here(const mstar__owner *o);

/* Keep `p` (inherited from the parent, never to be released in this process) reachable until
 * the process ends. Best effort: when the list cannot grow, `p` is simply left. */
void mstar__owner_keep(void *p);

#endif
