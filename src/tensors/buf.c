/*
 * buf.c — see buf.h.
 */
#include "tensors/buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BUF_ALIGN 64

/* The header sits at the start of one malloc and the bytes at the first BUF_ALIGN boundary
 * after it. Not posix_memalign: glibc serves an aligned request of n bytes from a free chunk of
 * at least n + BUF_ALIGN + a chunk header, so a freed buffer's chunk (trimmed to n) never fits
 * the next buffer of the same size; with any small allocation beside it, the heap grows by a
 * fresh buffer on every read, and each page of it faults on first touch (on the VM the bench runs
 * on, 4 MiB of fresh pages cost 11 ms against 0.4 ms for the copy). A plain malloc of the same
 * size fits the chunk the last one freed. */
mstar_status mstar__buf_alloc_host(uint64_t size, mstar__buf **out)
{
    size_t room = sizeof(mstar__buf) + BUF_ALIGN - 1; /* the header, then up to the boundary */
    void *mem = size <= SIZE_MAX - room ? malloc(room + (size_t)size) : NULL;
    if (mem == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "host buffer of %llu bytes", (unsigned long long)size);
    mstar__buf *buf = mem;
    memset(buf, 0, sizeof(*buf));
    buf->refs = 1;
    buf->data = (void *)(((uintptr_t)(buf + 1) + BUF_ALIGN - 1) & ~(uintptr_t)(BUF_ALIGN - 1));
    buf->size = size;
    buf->device = mstar_device_cpu();
    buf->inline_bytes = true;
    *out = buf;
    return MSTAR_OK;
}

mstar_status mstar__buf_wrap(void *data, uint64_t size, mstar_device device,
                             mstar__release_fn release, void *release_ctx, mstar__buf **out)
{
    mstar__buf *buf = malloc(sizeof(*buf));
    if (buf == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "buffer header");
    buf->refs = 1;
    buf->data = data;
    buf->size = size;
    buf->device = device;
    buf->inline_bytes = false;
    buf->release = release;
    buf->release_ctx = release_ctx;
    *out = buf;
    return MSTAR_OK;
}

void mstar__buf_release(mstar__buf *buf)
{
    if (buf == NULL || --buf->refs > 0)
        return;
    if (buf->inline_bytes) {
        free(buf);
        return;
    }
    if (buf->release != NULL)
        buf->release(buf->release_ctx, buf->data);
    free(buf);
}
