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
 *   mesh.c      create / destroy and the accessors
 */
#ifndef MSTAR_MESH_INTERNAL_H
#define MSTAR_MESH_INTERNAL_H

#include "mstar/mesh.h"

#include "core/strmap.h"

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
} mstar__mesh_config;

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
    bool in_multipart; /* the previous frame said more parts follow */
} mstar__inbox;

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

/* One peer: its connected PUSH socket and when it was last used (mesh->peer_clock). */
typedef struct mstar__peer {
    void *sock;
    uint64_t used;
} mstar__peer;

/* Close every peer socket and free the table. */
void mstar__peers_close(mstar__strmap *peers);

/* ---- the handle ----------------------------------------------------------------------------- */

struct mstar_mesh {
    char entity[MSTAR_NAME_MAX + 1];
    uint16_t entity_index;
    mstar__mesh_config cfg;
    char endpoint[MSTAR__MESH_ENDPOINT_MAX];
    void *ctx; /* one ZeroMQ context per mesh */
    mstar__inbox inbox;
    mstar__strmap peers; /* peer entity → (uintptr_t) its mstar__peer */
    uint64_t peer_clock; /* counts peer uses, for least-recently-used eviction */
    int wake_fd;         /* -1 when not open */
    mstar_mesh_sent_fn sent_hook;
    void *sent_ctx;
};

#endif
