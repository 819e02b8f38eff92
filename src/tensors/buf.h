/*
 * buf.h — reference-counted storage behind the tensors the communication manager holds.
 *
 * A stored output, a tensor read from a peer, a local slice of a stored tensor and a shard kept
 * by a fan-in buffer all point into a buffer; slices and shards share it, so a view outlives the
 * store entry it was cut from (design.md "Sharding") without a copy. The buffer is either
 * memory this library allocated (one malloc, header and bytes together) or memory the caller
 * handed over with a release function, called once when the last reference goes.
 *
 * Not thread-safe: a buffer belongs to the thread that owns its communication manager.
 */
#ifndef MSTAR_TENSORS_BUF_H
#define MSTAR_TENSORS_BUF_H

#include "mstar/core.h"

/* Called once when the last reference to caller-provided memory goes (mstar/tensors.h). */
typedef void (*mstar__release_fn)(void *ctx, void *data);

typedef struct mstar__buf {
    uint32_t refs;
    void *data;
    uint64_t size;
    mstar_device device;
    bool inline_bytes;         /* the bytes follow this header in one allocation */
    mstar__release_fn release; /* for caller memory; NULL: nothing to release */
    void *release_ctx;
} mstar__buf;

/* Host bytes owned by the buffer, 64-byte aligned, uninitialised. size 0 is allowed. */
mstar_status mstar__buf_alloc_host(uint64_t size, mstar__buf **out);
/* Wrap caller memory; `release` (may be NULL: never released) runs when the last ref goes. On
 * MSTAR_ENOMEM the caller still owns `data`. */
mstar_status mstar__buf_wrap(void *data, uint64_t size, mstar_device device,
                             mstar__release_fn release, void *release_ctx, mstar__buf **out);

static inline mstar__buf *mstar__buf_retain(mstar__buf *buf)
{
    buf->refs++;
    return buf;
}

/* Drop one reference; NULL is ignored. */
void mstar__buf_release(mstar__buf *buf);

#endif
