/*
 * ucx_transfer_engine.c — the UCX engine behind the transfer-engine interface (tensors/engine.h,
 * reference TensorTransferEngine / MooncakeTransferEngine): registration, the session id, and
 * the async reader, for the communication manager's UCX transports.
 *
 * register_memory answers 0 or -1, as the reference's engines do; the remote key it makes is not
 * needed by the interface's callers (the AM protocol finds the region by address), and the UCX
 * transport (ucx_transport.c) reads through the engine's own reader. The interface's async
 * reader (mstar__read_op carries no key and no wake fd) submits to that same reader.
 */
#include "tensors/ucx/ucx_internal.h"

#include "tensors/engine.h"

#include <stdlib.h>

typedef struct ucx_async_reader {
    mstar__async_reader base;
    mstar__ucx_engine *ue;
} ucx_async_reader;

typedef struct ucx_transfer_engine {
    mstar__transfer_engine base;
    mstar__ucx_engine *ue;
    ucx_async_reader reader;
} ucx_transfer_engine;

static int reg(mstar__transfer_engine *e, void *ptr, uint64_t nbytes)
{
    uint8_t key[MSTAR_REMOTE_KEY_MAX];
    uint32_t key_len;
    return mstar__ucx_engine_register(((ucx_transfer_engine *)e)->ue, ptr, nbytes, key, &key_len) ==
                   MSTAR_OK
               ? 0
               : -1;
}

static int unreg(mstar__transfer_engine *e, void *ptr)
{
    return mstar__ucx_engine_unregister(((ucx_transfer_engine *)e)->ue, ptr) == MSTAR_OK ? 0 : -1;
}

static const char *session(const mstar__transfer_engine *e)
{
    return mstar__ucx_engine_session_id(((const ucx_transfer_engine *)e)->ue);
}

static mstar_status reader_submit(mstar__async_reader *r, const mstar__read_op *ops, size_t n,
                                  mstar_completion **done)
{
    mstar__ucx_reader *ur;
    mstar_status st = mstar__ucx_engine_reader(((ucx_async_reader *)r)->ue, &ur);
    mstar__ucx_read_info *infos = calloc(n > 0 ? n : 1, sizeof(*infos));
    if (st == MSTAR_OK && infos == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "ucx reader: %zu reads", n);
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        infos[i].session = ops[i].session;
        infos[i].local_ptr = ops[i].local;
        infos[i].remote_addr = ops[i].remote;
        infos[i].nbytes = ops[i].nbytes;
    }
    if (st == MSTAR_OK)
        st = mstar__ucx_reader_submit(ur, infos, n, -1, done);
    free(infos);
    return st;
}

static mstar_status reader_wait_all(mstar__async_reader *r)
{
    mstar__ucx_reader *ur;
    mstar_status st = mstar__ucx_engine_reader(((ucx_async_reader *)r)->ue, &ur);
    return st == MSTAR_OK ? mstar__ucx_reader_wait_all(ur) : st;
}

/* The reader belongs to the engine (destroyed with it); shutting the interface's view down only
 * waits for what was submitted. */
static void reader_shutdown(mstar__async_reader *r)
{
    reader_wait_all(r);
}

static const mstar__async_reader_ops reader_ops = { reader_submit, reader_wait_all,
                                                    reader_shutdown };

static mstar_status get_reader(mstar__transfer_engine *e, mstar_device device,
                               mstar__async_reader **out)
{
    (void)device; /* host memory only until GPU tensors are staged through pinned memory */
    *out = &((ucx_transfer_engine *)e)->reader.base;
    return MSTAR_OK;
}

static void destroy(mstar__transfer_engine *e)
{
    mstar__ucx_engine_destroy(((ucx_transfer_engine *)e)->ue);
    free(e);
}

static const mstar__transfer_engine_ops ops = { reg, unreg, session, get_reader, destroy };

mstar_status mstar__ucx_transfer_engine_create(bool rdma, mstar__transfer_engine **out)
{
    mstar__ucx_transport transport = rdma ? MSTAR__UCX_RDMA : MSTAR__UCX_TCP;
    mstar__ucx_config cfg;
    mstar__ucx_config_init(&cfg);
    mstar_status st = mstar__ucx_config_from_env(&cfg);
    if (st != MSTAR_OK)
        return st;
    cfg.transport = transport;
    ucx_transfer_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ucx transfer engine");
    st = mstar__ucx_engine_create(&cfg, &e->ue);
    if (st != MSTAR_OK) {
        free(e);
        return st;
    }
    e->base.ops = &ops;
    e->reader.base.ops = &reader_ops;
    e->reader.ue = e->ue;
    *out = &e->base;
    return MSTAR_OK;
}

mstar__ucx_engine *mstar__ucx_transfer_engine_ucx(mstar__transfer_engine *e)
{
    return e->ops == &ops ? ((ucx_transfer_engine *)e)->ue : NULL;
}
