/*
 * ipc_host.c — the host backend's stand-in for CUDA IPC memory handles, so that the logic above
 * the device layer (the route's handle cache, range checks, fallback) is exercised without a
 * GPU. A handle names a live raw allocation of a host backend in this process: a magic, the
 * exporter's pid, and a serial number looked up in a process-wide table. Opening a handle that
 * the table does not hold, or whose allocation has since been freed, is MSTAR_ENOENT, as a
 * forged or stale handle is for the CUDA backend; opening yields the exporter's own pointer.
 * Freeing an allocation forgets its handle, so a later allocation at the same address gets a new
 * one, as cudaMalloc's does.
 */
#include "device/backend.h"

#include "core/vec.h"

#include <string.h>
#include <unistd.h>

static const char magic[16] = "mstar-host-ipc1";

struct exported {
    mstar_backend *backend;
    void *base;
    uint64_t serial;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static mstar__vec table = { .elsize = sizeof(struct exported) };
static uint64_t next_serial = 1;

static void make_handle(uint64_t serial, uint8_t *handle)
{
    memset(handle, 0, MSTAR__IPC_HANDLE_BYTES);
    memcpy(handle, magic, sizeof(magic));
    int32_t pid = (int32_t)getpid();
    memcpy(handle + 16, &pid, sizeof(pid));
    memcpy(handle + 24, &serial, sizeof(serial));
}

mstar_status mstar__host_ipc_mem_export(mstar_backend *b, void *base, uint8_t *handle)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table.len; i++) {
        struct exported *e = mstar__vec_at(&table, i);
        if (e->backend == b && e->base == base) {
            make_handle(e->serial, handle);
            pthread_mutex_unlock(&table_lock);
            return MSTAR_OK;
        }
    }
    struct exported e = { b, base, next_serial++ };
    mstar_status st = mstar__vec_push(&table, &e);
    pthread_mutex_unlock(&table_lock);
    if (st == MSTAR_OK)
        make_handle(e.serial, handle);
    return st;
}

mstar_status mstar__host_ipc_mem_open(mstar_backend *b, const uint8_t *handle, void **base,
                                      uint64_t *size)
{
    (void)b;
    uint8_t want[MSTAR__IPC_HANDLE_BYTES];
    mstar_status st = MSTAR_ENOENT;
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table.len && st != MSTAR_OK; i++) {
        struct exported *e = mstar__vec_at(&table, i);
        make_handle(e->serial, want);
        if (memcmp(want, handle, MSTAR__IPC_HANDLE_BYTES) != 0)
            continue;
        /* Still a live allocation of its exporter, and how large. */
        pthread_mutex_lock(&e->backend->lock);
        bool live = mstar__u64map_get(&e->backend->raw, (uint64_t)(uintptr_t)e->base, size);
        pthread_mutex_unlock(&e->backend->lock);
        if (live) {
            *base = e->base;
            st = MSTAR_OK;
        }
    }
    pthread_mutex_unlock(&table_lock);
    if (st != MSTAR_OK)
        return mstar_error_set(MSTAR_ENOENT,
                               "opening device memory of another process: the handle names no "
                               "live exported segment");
    return MSTAR_OK;
}

void mstar__host_ipc_mem_close(mstar_backend *b, void *base)
{
    (void)b, (void)base; /* nothing was mapped */
}

void mstar__host_ipc_forget(mstar_backend *b, const void *base)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = table.len; i-- > 0;) {
        struct exported *e = mstar__vec_at(&table, i);
        if (e->backend == b && (base == NULL || e->base == base))
            mstar__vec_remove(&table, i);
    }
    if (table.len == 0)
        mstar__vec_free(&table);
    pthread_mutex_unlock(&table_lock);
}
