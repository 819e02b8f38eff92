/*
 * mstar/mesh.h — the control mesh: one ZeroMQ PULL inbox per entity, a lazily connected PUSH
 * per peer, typed messages (mstar/wire.h), and a wake-up eventfd for other threads.
 *
 * Endpoints (architecture.md "Control mesh"): ipc://$MSTAR_IPC_DIR/<entity>.ipc (default
 * /tmp/mstar-<euid>), or tcp://$MSTAR_ZMQ_TCP_HOST:<port> with port = base (19000) for api_server,
 * +1 conductor, +2 api_server_preprocess_worker, +100+r for worker_<r>, else +1000 + (byte sum of
 * the name mod 1000). Order is kept per (sender, receiver) pair only.
 *
 * A mesh handle belongs to one thread (its entity's loop), except mstar_mesh_wake, which any
 * thread may call. A peer that sends garbage is logged and skipped; the receiver goes on.
 */
#ifndef MSTAR_MESH_H
#define MSTAR_MESH_H

#include "mstar/core.h"
#include "mstar/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mstar_mesh mstar_mesh;

typedef enum mstar_mesh_transport {
    MSTAR_MESH_DEFAULT = 0, /* MSTAR_ZMQ_TRANSPORT, else ipc */
    MSTAR_MESH_IPC = 1,
    MSTAR_MESH_TCP = 2,
} mstar_mesh_transport;

typedef struct mstar_mesh_options {
    mstar_mesh_transport transport;
    const char *ipc_dir;  /* NULL: MSTAR_IPC_DIR, else /tmp/mstar-<euid> */
    const char *tcp_host; /* NULL: MSTAR_ZMQ_TCP_HOST, else 127.0.0.1 */
    int tcp_base_port;    /* 0: MSTAR_ZMQ_TCP_BASE_PORT, else 19000 */
} mstar_mesh_options;

/* Bind `entity`'s inbox. `opts` may be NULL (all defaults from the environment). A bad knob, an
 * invalid entity name or a bind failure is an error naming the endpoint. */
MSTAR_API mstar_status mstar_mesh_create(const char *entity, const mstar_mesh_options *opts,
                                         mstar_mesh **out);
/* Close every socket (linger 0), the eventfd, and remove the ipc file this entity bound. In a
 * forked child (any process but the one that created it) only the child's own fds and memory go:
 * the files, rings and sockets stay the parent's (docs/security.md "Forked children"). */
MSTAR_API void mstar_mesh_destroy(mstar_mesh *mesh);

/* The entity this mesh's inbox belongs to ("" for NULL). */
MSTAR_API const char *mstar_mesh_entity(const mstar_mesh *mesh);
/* The entity's index for tensor ids: mstar_entity_index's for a well-known name, else the offset
 * of its TCP port, 1000 + (byte sum of the name mod 1000) (docs/architecture.md). */
MSTAR_API uint16_t mstar_mesh_entity_index(const mstar_mesh *mesh);

/* The endpoint string an entity binds under these options ("ipc:///tmp/mstar-<euid>/worker_0.ipc").
 */
MSTAR_API mstar_status mstar_mesh_endpoint(const mstar_mesh_options *opts, const char *entity,
                                           char *buf, size_t size);

/* Encode and send `msg` to `peer` (connecting on first use); fills msg->from. Non-blocking:
 * MSTAR_EAGAIN if the peer's queue is full (high-water mark). */
MSTAR_API mstar_status mstar_mesh_send(mstar_mesh *mesh, const char *peer, mstar_msg *msg);
/* Called after each message mstar_mesh_send handed to ZeroMQ, with the peer and the message
 * (which it must not keep). The communication manager uses it to learn whom it sent each tensor
 * to. One hook per mesh: MSTAR_EEXIST when another is set; fn NULL removes it. */
typedef void (*mstar_mesh_sent_fn)(void *ctx, const char *peer, const mstar_msg *msg);
MSTAR_API mstar_status mstar_mesh_set_sent_hook(mstar_mesh *mesh, mstar_mesh_sent_fn fn, void *ctx);

/* Send raw bytes (tests, and peers speaking their own format). */
MSTAR_API mstar_status mstar_mesh_send_raw(mstar_mesh *mesh, const char *peer, const void *data,
                                           size_t len);

/* Receive the next valid message into *out (which the caller later mstar_msg_clear's). Waits up
 * to timeout_ms (0 = poll, -1 = forever); MSTAR_EAGAIN when none arrived. Undecodable frames are
 * logged, counted and skipped. A pending wake-up makes the call return MSTAR_EAGAIN early. */
MSTAR_API mstar_status mstar_mesh_recv(mstar_mesh *mesh, int timeout_ms, mstar_msg *out);

/* Peer sockets open now (0 for NULL). At most 256: past that the least recently used peer is
 * closed to make room; a later send to it reconnects. */
MSTAR_API size_t mstar_mesh_num_peers(const mstar_mesh *mesh);

/* Frames dropped as undecodable since creation (0 for NULL). */
MSTAR_API uint64_t mstar_mesh_dropped(const mstar_mesh *mesh);

/* The fds an event loop polls: the inbox (readable means "check mstar_mesh_recv with timeout 0
 * until MSTAR_EAGAIN"; with rings an epoll fd, readable also after a wake until the next receive
 * or the wake is drained) and the wake-up eventfd. */
MSTAR_API int mstar_mesh_inbox_fd(const mstar_mesh *mesh);
MSTAR_API int mstar_mesh_wake_fd(const mstar_mesh *mesh);
/* MSTAR_RING_SPIN_US when it is unset: how long a waiting receiver polls its rings before it
 * sleeps, while no other task waits for a CPU; a mesh doubles its bound, up to 16 times this,
 * while messages come soon after its spins end. On the 2-core VM a 4 KiB handoff between two
 * sides spinning 50 µs took 4.7-11 µs and less CPU than sleeping; with the CPUs busy they sleep
 * (docs/environment.md has the figures). */
#define MSTAR_RING_SPIN_US_DEFAULT 50

/* Before a loop that polls the inbox fd sleeps: wait up to the mesh's spin bound
 * (MSTAR_RING_SPIN_US, grown by near misses) for a message in one of the rings from peers on
 * this host, polling shared memory with no system call, and without asking their senders to ring
 * (docs/environment.md). True as soon as one waits (take
 * it with mstar_mesh_recv, timeout 0), or as soon as a read of the manager that sends through
 * this mesh (mstar_comm_send_via_mesh) lands, or has landed since the last spin (collect it);
 * false when neither came, spinning is off or there are no
 * rings: the rings then ask to be rung again, so the loop may sleep. It spins only while a CPU
 * is spare (no more runnable tasks than the thread's CPUs), and stops when none is; nothing
 * else ends the spin early (a wake, a ZeroMQ message, the loop's other fds wait for it). A loop
 * that calls it is one that spins: its polls that find nothing ask senders to wait a moment for
 * its spin instead of waking it. */
MSTAR_API bool mstar_mesh_spin(mstar_mesh *mesh);
/* Wake the loop (any thread). */
MSTAR_API mstar_status mstar_mesh_wake(mstar_mesh *mesh);
/* Drain the eventfd; returns how many wakes were pending. */
MSTAR_API uint64_t mstar_mesh_wake_drain(mstar_mesh *mesh);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_MESH_H */
