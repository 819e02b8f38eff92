/*
 * comm_mesh.c — the ready-made sender that connects a communication manager to the control mesh
 * (mstar_comm_options.send = mstar_comm_send_via_mesh, send_ctx = the mesh).
 *
 * The mesh never blocks: a peer whose queue is full answers MSTAR_EAGAIN. An ACK that is not
 * delivered keeps the producer's tensor until TTL or force cleanup, so the sender retries for a
 * bounded time (the peer drains its inbox in its loop) before giving up with the error.
 */
#include "mstar/tensors.h"

#include "core/vec.h"

#include <time.h>

#define SEND_PATIENCE_NS (UINT64_C(5) * 1000000000u)

mstar_status mstar_comm_send_via_mesh(void *mesh, const char *peer, mstar_msg *msg)
{
    /* The patience runs from the first full queue: an ACK mostly goes at once. */
    uint64_t until = 0;
    for (;;) {
        mstar_status st = mstar_mesh_send(mesh, peer, msg);
        if (st != MSTAR_EAGAIN || mstar__deadline_passed(&until, SEND_PATIENCE_NS))
            return st;
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
}
