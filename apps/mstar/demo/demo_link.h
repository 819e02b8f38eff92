/*
 * demo_link.h — one entity of the demo on the control mesh, with its communication manager:
 * how messages are sent (never dropping one silently) and how a tensor leaves a process along an
 * edge, in the order design.md "Tensor lifecycle" prescribes.
 */
#ifndef MSTAR_EXAMPLES_DEMO_LINK_H
#define MSTAR_EXAMPLES_DEMO_LINK_H

#include "demo.h"

typedef struct demo_link {
    mstar_mesh *mesh;
    mstar_comm *comm; /* NULL for roles that hold no tensors */
} demo_link;

typedef struct demo_link_options {
    const char *entity;
    const char *ipc_dir; /* the run's private inbox directory */
    const char *shm_dir; /* the run's private shm directory; NULL: no manager */
    demo_transport transport;
    mstar_backend *backend; /* the manager's device; NULL: host tensors only */
} demo_link_options;

/* Bind the entity's inbox and create its manager (ACKs go out through the mesh). */
mstar_status demo_link_open(const demo_link_options *opts, demo_link *out);
/* Destroy the manager, then the mesh. Safe on a zeroed or half-opened link. */
void demo_link_close(demo_link *l);

/* Send, waiting out a full peer queue for a while (mstar_comm_send_via_mesh); the error names
 * the message and the peer. The sender's own inbox is not read meanwhile, which the demo's
 * volumes never need. */
mstar_status demo_send(mstar_mesh *mesh, const char *peer, mstar_msg *msg);
/* A message with only a type and a request id (DRAIN_REQUEST, READS_DONE, ...). */
mstar_status demo_send_simple(mstar_mesh *mesh, const char *peer, mstar_msg_type type,
                              const mstar_rid *rid);

/*
 * A step's output `t` of request `rid`, sent to one consumer: store it (the manager copies the
 * bytes), hold it, count its one routed edge, stage it, stamp the arena placement, and fill
 * `edge` (signal name, next node, the descriptor), ready to travel in a message. The stored
 * tensor is freed when the consumer acknowledges it, or by the request's teardown.
 */
mstar_status demo_link_stage_output(demo_link *l, const mstar_rid *rid, const char *signal,
                                    const char *next_node, const mstar_tensor *t, mstar_edge *edge);

#endif
