/*
 * engine.h — the transfer-engine interface (reference TensorTransferEngine): memory registration
 * for remote access, the session id placed in descriptors, and an optional asynchronous reader
 * for transports whose reads run in the background. Higher-level code talks to this interface
 * and never to a network library.
 *
 * engine_local.c is the no-op engine of the shared-memory transports (reference
 * LocalTransferEngine): registration succeeds and does nothing, the session id is the host
 * name, there is no reader. A remote engine (UCX) implements the same table with real
 * registrations (packed remote keys) and a reader that completes handles from its own thread.
 */
#ifndef MSTAR_TENSORS_ENGINE_H
#define MSTAR_TENSORS_ENGINE_H

#include "mstar/tensors.h"

typedef struct mstar__transfer_engine mstar__transfer_engine;
typedef struct mstar__async_reader mstar__async_reader;

/* One remote read: nbytes from `remote` in the peer named by `session` into `local`. */
typedef struct mstar__read_op {
    const char *session;
    void *local;
    uint64_t remote;
    uint64_t nbytes;
} mstar__read_op;

typedef struct mstar__async_reader_ops {
    /* Queue the reads; *done finishes when all have landed (or one failed). */
    mstar_status (*submit)(mstar__async_reader *r, const mstar__read_op *ops, size_t n,
                           mstar_completion **done);
    /* Block until everything submitted finished; the first failure is returned. */
    mstar_status (*wait_all)(mstar__async_reader *r);
    /* wait_all, then release the reader. */
    void (*shutdown)(mstar__async_reader *r);
} mstar__async_reader_ops;

struct mstar__async_reader {
    const mstar__async_reader_ops *ops;
};

typedef struct mstar__transfer_engine_ops {
    /* 0 on success, as the reference's engines answer. */
    int (*register_memory)(mstar__transfer_engine *e, void *ptr, uint64_t nbytes);
    int (*unregister_memory)(mstar__transfer_engine *e, void *ptr);
    const char *(*get_session_id)(const mstar__transfer_engine *e);
    /* *out = NULL when the engine needs no background reader. */
    mstar_status (*get_async_reader)(mstar__transfer_engine *e, mstar_device device,
                                     mstar__async_reader **out);
    void (*destroy)(mstar__transfer_engine *e);
} mstar__transfer_engine_ops;

struct mstar__transfer_engine {
    const mstar__transfer_engine_ops *ops;
};

/* The no-op engine; session_id NULL: the host name. */
mstar_status mstar__local_engine_create(const char *session_id, mstar__transfer_engine **out);
/* The UCX engine (src/tensors/ucx/ucx_transfer_engine.c) over TCP, or over RDMA verbs; the
 * MSTAR_UCX_* knobs configure it. */
mstar_status mstar__ucx_transfer_engine_create(bool rdma, mstar__transfer_engine **out);

#endif
