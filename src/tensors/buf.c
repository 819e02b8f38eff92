/*
 * buf.c — see buf.h.
 */
#include "tensors/buf.h"

#include <stdlib.h>
#include <string.h>

#define BUF_ALIGN 64

/* The header is padded so the bytes that follow it are BUF_ALIGN-aligned. */
static size_t header_size(void)
{
    return (sizeof(mstar__buf) + BUF_ALIGN - 1) & ~(size_t)(BUF_ALIGN - 1);
}

mstar_status mstar__buf_alloc_host(uint64_t size, mstar__buf **out)
{
    size_t hdr = header_size();
    if (size > SIZE_MAX - hdr)
        return mstar_error_set(MSTAR_ENOMEM, "host buffer of %llu bytes", (unsigned long long)size);
    void *mem = NULL;
    if (posix_memalign(&mem, BUF_ALIGN, hdr + (size_t)size) != 0)
        return mstar_error_set(MSTAR_ENOMEM, "host buffer of %llu bytes", (unsigned long long)size);
    mstar__buf *buf = mem;
    memset(buf, 0, sizeof(*buf));
    buf->refs = 1;
    buf->data = (char *)mem + hdr;
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
