/*
 * ipc.c — sharing device memory and events with other processes on the same host (backend.h
 * says what each call promises). The part every backend shares lives here: finding the raw
 * allocation that holds a pointer, argument checks, and the event objects; the device work goes
 * through the backend's ipc_* ops (CUDA IPC in cuda/backend_cuda.c, the in-process stand-in of
 * the host backend in ipc_host.c).
 */
#include "device/backend.h"

#include <stdlib.h>

static mstar_status unsupported(mstar_backend *b, const char *what)
{
    return mstar_error_set(MSTAR_ENOTSUP,
                           "%s: the %s backend cannot share memory between processes", what,
                           b->ops->name);
}

/* The raw allocation of `b` that holds [p, p + nbytes): segments are few (tens), so a scan. */
static bool find_raw(mstar_backend *b, uintptr_t p, uint64_t nbytes, uintptr_t *base,
                     uint64_t *size)
{
    bool found = false;
    pthread_mutex_lock(&b->lock);
    size_t it = 0;
    uint64_t k, v;
    while (!found && mstar__u64map_next(&b->raw, &it, &k, &v)) {
        /* Inside: base <= p and p + nbytes <= base + size, without forming p + nbytes. */
        if (p >= k && p - k <= v && nbytes <= v - (p - k) && (nbytes != 0 || p - k < v)) {
            *base = (uintptr_t)k;
            *size = v;
            found = true;
        }
    }
    pthread_mutex_unlock(&b->lock);
    return found;
}

mstar_status mstar__ipc_export(mstar_backend *b, const void *ptr, uint64_t nbytes,
                               mstar__ipc_segment *out)
{
    if (b->ops->ipc_mem_export == NULL)
        return unsupported(b, "exporting device memory");
    uintptr_t base;
    uint64_t size;
    if (!find_raw(b, (uintptr_t)ptr, nbytes, &base, &size))
        return mstar_error_set(MSTAR_ENOENT,
                               "exporting device memory: %llu bytes at %p are not inside one "
                               "allocation of the %s backend",
                               (unsigned long long)nbytes, ptr, b->ops->name);
    mstar_status st = b->ops->ipc_mem_export(b, (void *)base, out->handle);
    if (st != MSTAR_OK)
        return st;
    out->base = (void *)base;
    out->size = size;
    return MSTAR_OK;
}

uint64_t mstar__ipc_generation(mstar_backend *b)
{
    pthread_mutex_lock(&b->lock);
    uint64_t g = b->raw_frees;
    pthread_mutex_unlock(&b->lock);
    return g;
}

mstar_status mstar__ipc_open(mstar_backend *b, const uint8_t *handle, void **base, uint64_t *size)
{
    if (b->ops->ipc_mem_open == NULL)
        return unsupported(b, "opening another process's device memory");
    return b->ops->ipc_mem_open(b, handle, base, size);
}

void mstar__ipc_close(mstar_backend *b, void *base)
{
    if (b->ops->ipc_mem_close != NULL && base != NULL)
        b->ops->ipc_mem_close(b, base);
}

/* A new event object of `b`, made by `make` (create and export, or open). */
static mstar_status event_with(mstar_backend *b, mstar_status (*make)(mstar_event *, uint8_t *),
                               mstar_status (*open)(mstar_event *, const uint8_t *),
                               const uint8_t *in, uint8_t *out_handle, mstar_event **out)
{
    mstar_event *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "interprocess event: out of memory");
    e->backend = b;
    mstar_status st = make != NULL ? make(e, out_handle) : open(e, in);
    if (st != MSTAR_OK) {
        free(e);
        return st;
    }
    *out = e;
    return MSTAR_OK;
}

mstar_status mstar__ipc_event_create(mstar_backend *b, mstar_event **out, uint8_t *handle)
{
    if (b->ops->ipc_event_create == NULL)
        return unsupported(b, "an interprocess event");
    return event_with(b, b->ops->ipc_event_create, NULL, NULL, handle, out);
}

mstar_status mstar__ipc_event_open(mstar_backend *b, const uint8_t *handle, mstar_event **out)
{
    if (b->ops->ipc_event_open == NULL)
        return unsupported(b, "opening another process's event");
    return event_with(b, NULL, b->ops->ipc_event_open, handle, NULL, out);
}
