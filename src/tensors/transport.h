/*
 * transport.h — the vtable behind the communication manager: how a stored tensor is made
 * readable by other processes, how a descriptor from another process is read, and how both are
 * undone. One implementation per file: transport_local.c (one process), transport_files.c
 * (per-uuid files), arena/arena_transport.c (shared-memory arena), ucx/ucx_transport.c (UCX),
 * and cuda_ipc/cuda_ipc_transport.c, which wraps the files or arena transport. The
 * manager's logic — reference counts, ACKs, fan-in, teardown — is the same for all of them.
 * This header holds what they share; each transport's create and its own functions are in a
 * header beside it (transport_local.h, transport_files.h, arena/arena_transport.h,
 * ucx/ucx_transport.h, cuda_ipc/cuda_ipc.h), and what only tests call in a test-hook header
 * (cuda_ipc/cuda_ipc_test_hooks.h).
 *
 * The manager calls a transport from its own thread only. Reads may complete on another thread
 * (a device stream's host callback, a network engine's progress thread) through a completion
 * handle; everything else is synchronous.
 */
#ifndef MSTAR_TENSORS_TRANSPORT_H
#define MSTAR_TENSORS_TRANSPORT_H

#include "device/pinned_pool.h"
#include "mstar/tensors.h"
#include "tensors/buf.h"
#include "tensors/completion.h"
#include "tensors/shm.h"

typedef struct mstar__transport mstar__transport;
struct mstar__ucx_engine;

/* What every transport may use, owned by the manager and valid for the transport's life. */
typedef struct mstar__transport_env {
    const char *entity;
    /* The UCX transports' engine (NULL for the others). */
    struct mstar__ucx_engine *ucx;
    const mstar__shm_dir *dir;  /* NULL for the local transport */
    mstar_backend *backend;     /* NULL: host tensors only */
    mstar_stream *d2h;          /* staging copies (NULL without a backend) */
    mstar_stream *h2d;          /* read copies (NULL without a backend) */
    mstar__pinned_pool *pinned; /* host buffers of staged copies (NULL without a backend) */
    const mstar__completion_notice *notice; /* whom completion handles tell (completion.h) */
} mstar__transport_env;

/* One stored tensor to stage (register_for_send). */
typedef struct mstar__stage_item {
    mstar_tensor_id uuid;
    mstar_tensor tensor;      /* the canonical bytes, contiguous (host or device) */
    const mstar_tensor *host; /* a host copy of the same bytes, or NULL */
    const mstar__buf *buf;    /* the storage of `tensor`: a loan of this transport is staged in
                               * place (see `loan`) */
    uint64_t tx_bytes;        /* out: bytes made readable (design.md "Transfer statistics") */
    double tx_time_s;         /* out: time spent doing it */
} mstar__stage_item;

/* One descriptor to read (start_read_tensors). */
typedef struct mstar__read_item {
    const mstar_tensor_info *info;
    mstar__buf *into; /* in: the caller's buffer to land in (mstar_comm_start_read_into), at
                       * least nbytes, or NULL: a new one; never a view */
    mstar__buf *buf;  /* out: the descriptor's bytes (contiguous, canonical slice) */
    bool registered;  /* out: `release` must run for this uuid when it is collected */
    bool view;        /* in: the caller would take the producer's bytes in place */
    bool viewed;      /* out: buf maps the producer's bytes (a view): its consumer ACKs the
                       * delivery only when it lets go of the view */
} mstar__read_item;

typedef struct mstar__transport_ops {
    const char *name;
    /* Sends from host memory, so host copies are worth keeping (files, arena). */
    bool needs_cpu_tensor;
    /* Make every item readable by other processes. All or nothing: on error, what this call
     * staged is released again. When it returns, the bytes are fully staged (any device copy
     * synchronised). */
    mstar_status (*stage)(mstar__transport *t, mstar__stage_item *items, size_t n);
    /* Write what a consumer needs of a staged uuid, beyond what the store put in its
     * descriptor, onto an outgoing descriptor: the arena its placement (shm_segment and
     * shm_offset, or none for a spill), UCX the session, the address of the registered bytes and
     * their remote key. Only those fields: the rest of a descriptor may be a destination's slice.
     * NULL for transports whose consumers need nothing more (local, files); with it, every edge
     * leaving the process must be refreshed (mstar_comm_refresh_shm_placement, I-12). */
    void (*stamp)(mstar__transport *t, mstar_tensor_id uuid, mstar_tensor_info *info);
    /* Undo what stage (or a registered read) did for a collected uuid. */
    void (*release)(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor);
    /* Check a descriptor before anything is read (names, segment owner, transport match). */
    mstar_status (*check)(mstar__transport *t, const mstar_tensor_info *info);
    /* Read the items (all checked). All or nothing: on error no buffer is left. *done is a
     * completion the caller owns when copies are still running, NULL when they all landed. */
    mstar_status (*read)(mstar__transport *t, mstar__read_item *items, size_t n,
                         mstar_completion **done);
    /* Finish reads whose copies have landed, found by polling; the manager calls it before it
     * looks for landed reads (such a read is otherwise finished from another thread: a stream
     * callback, the CUDA IPC route's watcher, a reader). May be NULL. */
    void (*poll)(mstar__transport *t);
    /* Periodic upkeep from the manager's loop: TTL reclaim, statistics, evicting mappings of
     * peers that are gone. `reads_idle`: no read of this manager is copying. May be NULL. */
    void (*maintain)(mstar__transport *t, bool reads_idle);
    /* A host buffer of n bytes that stage can publish in place (a producer's loan), whose
     * release gives the memory back. NULL for transports that stage by copying anyway (the
     * manager then lends plain host memory). MSTAR_ENOSPC when there is no room right now. */
    mstar_status (*loan)(mstar__transport *t, uint64_t n, mstar__buf **out);
    /* Whether a buffer a read returned as a view still shows the tensor it was read for:
     * MSTAR_OK, or the read's error (its producer freed the slot). NULL: no views. */
    mstar_status (*view_check)(mstar__transport *t, const mstar__buf *buf);
    /* Arena statistics; NULL for other transports. */
    void (*arena_stats)(mstar__transport *t, mstar_arena_stats *out);
    void (*destroy)(mstar__transport *t);
} mstar__transport_ops;

struct mstar__transport {
    const mstar__transport_ops *ops;
    const mstar__transport_env *env;
};

/* ---- helpers the transports share (transport.c) ---------------------------------------- */

/* A transport whose state is only its ops and env (local, files): allocate it, and free it as
 * its ops' `destroy`. `what` names it in the out-of-memory error. */
mstar_status mstar__transport_create_bare(const mstar__transport_ops *ops,
                                          const mstar__transport_env *env, const char *what,
                                          mstar__transport **out);
void mstar__transport_destroy_bare(mstar__transport *t);

/* Whether `t` lives in the backend's memory (so copies go through the backend). */
bool mstar__transport_on_device(const mstar__transport_env *env, const mstar_tensor *t);
/* A buffer of n bytes where reads land: the backend's memory, else the host. */
mstar_status mstar__transport_alloc_dest(const mstar__transport_env *env, uint64_t n,
                                         mstar__buf **out);
/* Where a read of n bytes lands: `into` (a caller's buffer a read item names, retained), or a
 * new buffer from mstar__transport_alloc_dest. Every transport's read goes through here, so a
 * caller's buffer needs no branch of its own in any of them. */
mstar_status mstar__transport_read_dest(const mstar__transport_env *env, mstar__buf *into,
                                        uint64_t n, mstar__buf **out);
/* Copy a contiguous tensor's bytes (host or device) to host memory `dst`, synchronously. */
mstar_status mstar__transport_copy_to_host(const mstar__transport_env *env, const mstar_tensor *t,
                                           void *dst);
/* Copy host bytes into a destination buffer: memcpy for host memory; for device memory an H2D
 * copy on the h2d stream, synchronised unless `async` (then the caller gates on the stream). */
mstar_status mstar__transport_copy_from_host(const mstar__transport_env *env, mstar__buf *dst,
                                             const void *src, uint64_t n, bool async);
/* A completion finished by the h2d stream once every copy queued on it so far has run. */
mstar_status mstar__transport_h2d_completion(const mstar__transport_env *env,
                                             mstar_completion **out);

#endif
