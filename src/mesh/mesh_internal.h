/*
 * mesh_internal.h — what the files of src/mesh/ share: the resolved configuration (options and
 * environment knobs), the port map, the inbox, and the mesh handle itself.
 *
 *   endpoint.c  knobs → config, entity → port offset / index, endpoint strings
 *   ipc.c       the ipc directory (0700), "is someone already bound here?", removal of our file
 *   inbox.c     the bound PULL socket
 *   recv.c      receiving: decode, drop and count garbage, wait with the wake-up eventfd
 *   peers.c     the peer table of lazily connected PUSH sockets, raw and typed sends
 *   wake.c      the eventfd other threads signal
 *   ring.c      the shared-memory ring of one (sender, receiver) pair on one host (ring.h)
 *   bell.c      the receiver's doorbell socket: ring hand-over and wake-ups
 *   inrings.c   the receiver's set of rings: hellos, reading, arming before a sleep
 *   mesh.c      create / destroy and the accessors
 */
#ifndef MSTAR_MESH_INTERNAL_H
#define MSTAR_MESH_INTERNAL_H

#include "mstar/mesh.h"

#include "core/owner.h"
#include "core/strmap.h"
#include "ring.h"

#include <stdatomic.h>
#include <sys/types.h>

/* A Unix socket path is at most 107 bytes (sun_path is 108 with the terminator). */
#define MSTAR__IPC_PATH_MAX 107
/* "tcp://" + a 253-byte host + ":65535", or "ipc://" + a socket path, with room to spare. */
#define MSTAR__MESH_ENDPOINT_MAX 320
#define MSTAR__TCP_HOST_MAX      253

#define MSTAR__MESH_DEFAULT_IPC_DIR   "/tmp/mstar" /* + "-<euid>" */
#define MSTAR__MESH_DEFAULT_TCP_HOST  "127.0.0.1"
#define MSTAR__MESH_DEFAULT_BASE_PORT 19000

/* Messages queued per peer before a send returns MSTAR_EAGAIN (ZeroMQ's default, which the
 * reference system runs with). */
#define MSTAR__MESH_SNDHWM 1000

/* Options and knobs after resolution: every field is set and valid. */
typedef struct mstar__mesh_config {
    mstar_mesh_transport transport;        /* MSTAR_MESH_IPC or MSTAR_MESH_TCP */
    char ipc_dir[MSTAR__IPC_PATH_MAX + 1]; /* absolute, no trailing '/' ("" for the root) */
    char tcp_host[MSTAR__TCP_HOST_MAX + 1];
    int tcp_base_port;
    int ring;          /* MSTAR__RING_OFF, _ON or _AUTO (ipc only; tcp meshes are always off) */
    uint64_t ring_cap; /* data bytes of the rings this mesh creates */
    int spin_us;       /* how long a receive spins on its rings before it sleeps */
} mstar__mesh_config;

enum { MSTAR__RING_OFF = 0, MSTAR__RING_ON = 1, MSTAR__RING_AUTO = 2 };

/* opts (may be NULL) over MSTAR_ZMQ_TRANSPORT, MSTAR_IPC_DIR, MSTAR_ZMQ_TCP_HOST and
 * MSTAR_ZMQ_TCP_BASE_PORT over the defaults. Only the knobs of the chosen transport are read. */
mstar_status mstar__mesh_config_resolve(const mstar_mesh_options *opts, mstar__mesh_config *out);

/* An entity's offset in the port map, which is also its index in tensor ids: the fixed index of
 * a well-known name (mstar_entity_index), else 1000 + (byte sum of the name mod 1000). */
mstar_status mstar__mesh_entity_offset(const char *entity, uint16_t *out);

/* The endpoint `entity` binds (and its peers connect to) under `cfg`. */
mstar_status mstar__mesh_endpoint_format(const mstar__mesh_config *cfg, const char *entity,
                                         char *buf, size_t size);

/* ZMQ_IPV6 for a bracketed host ("[::1]"); both the inbox and the peers need it. */
static inline int mstar__mesh_ipv6(const mstar__mesh_config *cfg)
{
    return cfg->transport == MSTAR_MESH_TCP && cfg->tcp_host[0] == '[';
}

/* ---- ipc.c ---------------------------------------------------------------------------------- */

/* Create `dir` and its missing parents with mode 0700. Errors name `endpoint`. */
mstar_status mstar__ipc_dir_ensure(const char *dir, const char *endpoint);
/* MSTAR_EEXIST when a live socket accepts connections at `path` (ZeroMQ would silently unlink
 * it and steal the name); a stale file of a dead process is fine. */
mstar_status mstar__ipc_check_unbound(const char *path, const char *endpoint);

/* What sits at the socket path <dir>/<name> before we connect to it or replace it: MSTAR_OK for a
 * socket of this user, MSTAR_ENOENT for nothing, MSTAR_EPROTO naming the path for anything else
 * (a socket of another user, a file, a FIFO, a link), which is never a route to one of ours. */
mstar_status mstar__ipc_socket_check(const char *dir, const char *name, const char *what);

/* The socket file an inbox bound, remembered so destroy removes that file and no other. */
typedef struct mstar__ipc_file {
    bool bound;
    char path[MSTAR__IPC_PATH_MAX + 1];
    dev_t dev;
    ino_t ino;
} mstar__ipc_file;

mstar_status mstar__ipc_file_record(mstar__ipc_file *file, const char *path, const char *endpoint);
/* Unlink the file if it is still the one recorded (ZeroMQ 4.3 unlinks it itself on close; this
 * covers versions that do not, without touching a successor's file). */
void mstar__ipc_file_remove(mstar__ipc_file *file);

/* ---- inbox.c -------------------------------------------------------------------------------- */

typedef struct mstar__inbox {
    void *sock; /* ZMQ_PULL, bound; NULL when not open */
    int fd;     /* ZMQ_FD of sock; -1 when not open */
    mstar__ipc_file file;
    uint64_t dropped;
    uint64_t log_since; /* when the current second of drop log lines began (mstar__now_ns) */
    unsigned log_lines; /* lines logged about drops in it */
    bool in_multipart;  /* the previous frame said more parts follow */
} mstar__inbox;

/* Log lines about dropped input per second: a peer flooding garbage must not flood the log as
 * well (the drops are all counted, mstar_mesh_dropped). */
#define MSTAR__MESH_DROP_LOGS 10

/* Count one dropped frame, datagram or ring; true when it may be logged (the line should give
 * the count so far, which says how many went unlogged). */
bool mstar__inbox_drop(mstar__inbox *in);

void mstar__inbox_init(mstar__inbox *in);
/* Bind a PULL socket at `endpoint` (for ipc: create the directory, refuse a live binding). */
mstar_status mstar__inbox_bind(mstar__inbox *in, void *ctx, const mstar__mesh_config *cfg,
                               const char *entity, const char *endpoint);
/* Close the socket (linger 0). The ipc file goes once the context has terminated. */
void mstar__inbox_close(mstar__inbox *in);

/* ---- wake.c --------------------------------------------------------------------------------- */

/* An eventfd, EFD_NONBLOCK | EFD_CLOEXEC. */
mstar_status mstar__wake_open(const char *entity, int *fd);
/* True when the eventfd has a wake pending (without draining it). */
bool mstar__wake_pending(int fd);

/* ---- peers.c -------------------------------------------------------------------------------- */

/* Peer sockets open at once. Peers are named by what arrives from other processes (an ACK goes
 * to the source_entity a descriptor names), so the table is bounded: past this the least
 * recently used peer is closed (a later send reconnects it). */
#define MSTAR__MESH_MAX_PEERS 256

/* Blobs received but not yet named by a ring frame; past this many the oldest is dropped. A
 * sender keeps as many while its ring has no answer (peers.c). */
#define MSTAR__MESH_MAX_BLOBS 64

/* How long a sender wakes a receiver through its ring's eventfd before it wakes it through the
 * bell once more, which fails when the receiver has died (peers.c wake_peer): a receiver that
 * died is noticed at the first wake this long after the last check, and costs its senders at
 * most one datagram per this time while it lives. */
#define MSTAR__RING_LIVENESS_NS UINT64_C(10000000)

/* How long a sender waits for the receiver to answer a ring (ring.h) before it withdraws it. */
#define MSTAR__RING_ANSWER_NS UINT64_C(1000000000)

/* One peer: its connected PUSH socket, or (on one host) a ring and the peer's bell, and when it
 * was last used (mesh->peer_clock). A peer's route is chosen once, when it is first used, so
 * that its messages never take two paths at once (which could reorder them); the one change is
 * a ring the receiver refused or never answered: what was written to it goes over ZeroMQ first
 * (`reclaim`), then everything after. */
typedef struct mstar__peer {
    void *sock;       /* NULL when the ring carries this peer */
    mstar__ring ring; /* ring.fd < 0 when ZeroMQ does (or a refused ring not yet emptied) */
    int bell_fd;
    uint64_t blob_seq;               /* numbers the messages sent beside the ring (bell.c) */
    bool accepted;                   /* the receiver took the ring: no more answers to look for */
    uint64_t offered_at;             /* when the ring was handed over (mstar__now_ns) */
    uint64_t checked_at;             /* when the bell last told the receiver lived */
    bool woken;                      /* woken through the ring, and not seen reading since: */
    uint64_t woken_head;             /* its position then */
    uint64_t woken_at;               /* and when */
    uint64_t reclaim;                /* a refused ring: its frames before this went over ZeroMQ */
    int kept[MSTAR__MESH_MAX_BLOBS]; /* the blobs sent while no answer came, by number */
    size_t nkept;
    uint64_t used;
} mstar__peer;

/* Close every peer socket and free the table. */
void mstar__peers_close(mstar__strmap *peers);
/* Look for the answers to the rings this mesh handed over (mesh->offers of them): a refused one
 * sends what it holds over ZeroMQ. Called by a receive, so that a sender that is waiting for a
 * reply learns too. */
void mstar__peers_settle(mstar_mesh *mesh);

/* ---- bell.c --------------------------------------------------------------------------------- */

/* Bind `entity`'s bell in cfg->ipc_dir (replacing a dead one's socket); `file` records it for
 * removal. MSTAR_EEXIST when something other than a socket of ours sits at its name. */
mstar_status mstar__bell_bind(const mstar__mesh_config *cfg, const char *entity, int *fd,
                              mstar__ipc_file *file);
/* A datagram socket connected to `peer`'s bell; MSTAR_ENOENT when it has none we may use. */
mstar_status mstar__bell_connect(const mstar__mesh_config *cfg, const char *self, const char *peer,
                                 int *fd);
/* Wake the receiver. MSTAR_ECLOSED when it is gone. */
mstar_status mstar__bell_ring(int fd, const char *peer);
/* Ring our own bell (bound at `path`), so that an event loop polling it comes back for what a
 * receive left waiting. */
void mstar__bell_ring_self(int fd, const char *path);
/* Hand the ring's memfd and wake-up eventfd to the receiver. MSTAR_EAGAIN when its bell is full,
 * MSTAR_ECLOSED when it is gone. */
mstar_status mstar__bell_hello(int fd, const char *self, const char *peer, const mstar__ring *ring);
/* Hand a message too large for the ring over as the memfd `blob_fd`, numbered `seq`; the ring
 * frame that names it follows (mstar__ring_write_blob). Errors as for a hello. */
mstar_status mstar__bell_blob(int fd, const char *self, const char *peer, uint64_t seq,
                              int blob_fd);
/* Read every datagram waiting: hellos (blob_seq NULL, with the ring's eventfd in wake_fd) and
 * blobs (wake_fd -1) go to fn, which takes the fds; wakes are consumed; anything else is closed
 * and counted in `in` (mstar__inbox_drop). True when any datagram was read. */
typedef void (*mstar__bell_hello_fn)(void *ctx, const char *sender, const uint64_t *blob_seq,
                                     int fd, int wake_fd);
bool mstar__bell_drain(int fd, const char *self, mstar__bell_hello_fn fn, void *ctx,
                       mstar__inbox *in);

/* ---- inrings.c ------------------------------------------------------------------------------ */

/* Rings held at once by a receiver; a hello past this is refused (after freeing finished ones). */
#define MSTAR__MESH_MAX_RINGS 256

typedef struct mstar__inring {
    mstar__ring ring;
    bool behind; /* an older ring of the same sender may still hold earlier messages */
} mstar__inring;

typedef struct mstar__blob {
    char sender[MSTAR_NAME_MAX + 1];
    uint64_t seq;
    int fd;
} mstar__blob;

typedef struct mstar__inrings {
    mstar__inring *rings; /* MSTAR__MESH_MAX_RINGS, allocated with the bell */
    mstar__blob *blobs;   /* MSTAR__MESH_MAX_BLOBS */
    size_t nblobs;
    size_t n;
    size_t next;          /* where the next read starts, so that no sender starves the others */
    unsigned drops_left;  /* undecodable frames the current take may still drop */
    bool busy;            /* the last take stopped there, with more frames waiting */
    uint32_t spin_misses; /* spins in a row that ended with no frame (mstar__inrings_spin) */
    uint32_t spin_skips;  /* waits that did not spin since spinning last paid */
    uint64_t spin_ns;     /* the bound of the next spin: MSTAR_RING_SPIN_US, grown by near misses */
    uint64_t missed_at;   /* when the last whole spin that found nothing ended, until the next
                           * frame taken settles it (inrings.c, SPIN_GROWTH); 0: none */
    bool loop_spins;      /* the loop has called mstar_mesh_spin, so a poll may be followed by a
                           * spin (for good: a loop that stops calling it costs its senders
                           * their wait for its spin) */
    uint32_t unpolled;    /* receives since the inbox and bell were last polled */
    bool awake;           /* a spin found a frame, and no sender woke us since the last harvest */
    bool armed;           /* the rings were armed since the last spin disarmed them */
    uint8_t *buf;
    size_t buf_cap;
} mstar__inrings;

/* Undecodable frames one take drops at most: a ring flooding garbage costs each receive a
 * bounded amount of work, and the receive can keep its deadline. */
#define MSTAR__MESH_DROP_BUDGET 64

/* Take the next decodable message from any ring: MSTAR_OK, or MSTAR_EAGAIN when they are all
 * empty or MSTAR__MESH_DROP_BUDGET frames were dropped (inrings.busy then set). Garbage frames
 * and broken rings are dropped and counted. */
mstar_status mstar__inrings_take(mstar_mesh *mesh, mstar_msg *out);
/* Read the bell: attach the rings handed over, keep the blobs, consume the wakes. */
void mstar__inrings_drain(mstar_mesh *mesh);
/* Before sleeping: ask every ring's sender to wake us (`may_spin`: a spin may come first, see
 * ring.h). True when a ring holds something after all (then do not sleep). */
bool mstar__inrings_arm(mstar_mesh *mesh, bool may_spin);
/* Whether a sender took the flag of a ring armed since the last spin (and so woke us through
 * its eventfd): shared memory only, no system call. */
bool mstar__inrings_woken(const mstar_mesh *mesh);
/* Whether a frame (or garbage) waits in any ring: shared memory only, no system call. */
bool mstar__inrings_pending(const mstar_mesh *mesh);
/* Receives that may take ring frames without polling the inbox and the bell first. */
#define MSTAR__MESH_UNPOLLED_MAX 8
/* Spin up to inrings.spin_ns (MSTAR_RING_SPIN_US, doubled by each near miss up to 16 times it),
 * and not past `deadline_ns` (mstar__now_ns(); 0: none), for a ring to fill, the rings disarmed
 * meanwhile (a sender does not wake a receiver that is awake), while a CPU is spare
 * (core/spare_cpu.h); true when one did (inrings.awake is then set), or when another thread broke
 * the spin (spin_break.h). */
bool mstar__inrings_spin(mstar_mesh *mesh, uint64_t deadline_ns);
void mstar__inrings_close(mstar__inrings *in);

/* ---- the handle ----------------------------------------------------------------------------- */

/* What an event of the mesh's epoll set (poll_fd) comes from: the ZeroMQ inbox and the bell
 * (level-triggered), the wake-up eventfd and the rings' eventfds (edge-triggered: never read by
 * the mesh, so only a harvest clears them, recv.c). */
enum {
    MSTAR__MESH_EV_INBOX = 1,
    MSTAR__MESH_EV_BELL = 2,
    MSTAR__MESH_EV_WAKE = 3,
    MSTAR__MESH_EV_RING = 4,
};

struct mstar_mesh {
    char entity[MSTAR_NAME_MAX + 1];
    char no_message[MSTAR_NAME_MAX + 32]; /* "mesh <entity>: no message", made once (recv.c) */
    uint16_t entity_index;
    mstar__mesh_config cfg;
    char endpoint[MSTAR__MESH_ENDPOINT_MAX];
    void *ctx; /* one ZeroMQ context per mesh */
    mstar__inbox inbox;
    mstar__strmap peers; /* peer entity → (uintptr_t) its mstar__peer */
    uint64_t peer_clock; /* counts peer uses, for least-recently-used eviction */
    size_t offers;       /* rings handed over that may have no answer yet (peers.c) */
    int wake_fd;         /* -1 when not open */
    int bell_fd;         /* -1 when rings are off */
    int poll_fd;         /* epoll over the inbox, bell, wake and ring eventfds; -1 without rings */
    mstar__ipc_file bell_file;
    mstar__inrings inrings;
    _Atomic uint64_t spin_breaks; /* bumped by other threads to end a spin (spin_break.h) */
    uint64_t spin_breaks_seen;    /* the count the last spin ended at */
    bool rings_first;             /* alternates, so neither the rings nor ZeroMQ starve the other */
    bool zmq_ready;        /* the ZeroMQ inbox may hold a message (false: it said EAGAIN since) */
    uint64_t zmq_asked_ns; /* when a look that does not wait last asked ZMQ_EVENTS (recv.c) */
    bool wake_edge; /* a harvest saw the wake eventfd written: look before sleeping (recv.c) */
    mstar_mesh_sent_fn sent_hook;
    void *sent_ctx;
    void *encoded;      /* mstar_mesh_send's encoding buffer, kept between messages */
    size_t encoded_cap; /* its bytes */
    mstar__owner owner; /* a forked child's destroy touches nothing shared (mesh.c) */
};

/* mstar_mesh_send keeps an encoding buffer of at most this many bytes for the next message; a
 * larger one is freed after its message. */
#define MSTAR__MESH_KEEP_ENCODED (64u << 10)

#endif
