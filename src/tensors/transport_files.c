/*
 * transport_files.c — one file per staged tensor in the shm directory (design.md "Transports";
 * MSTAR_SHM_ARENA=0). The producer writes the raw contiguous bytes (no header) when the tensor
 * is registered for send and unlinks the file when the uuid is collected; a consumer reads
 * [offset, offset + nbytes) of it, checked against the file's size. A descriptor that names an
 * arena segment cannot be read here: the deployment mixes transports, which is a configuration
 * error reported as such. A device tensor passes through a pinned host buffer of the manager's
 * pool (device/pinned_pool.h) on both sides: pinned, so its copies run at the device's speed;
 * pooled, so a tensor does not pay for pinning memory.
 */
#include "tensors/transport_files.h"

#include "core/vec.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

mstar_status mstar__files_write_one(const mstar__transport_env *env, mstar__stage_item *item)
{
    uint64_t n = mstar_tensor_nbytes(&item->tensor);
    uint64_t t0 = mstar__now_ns();
    const void *bytes = mstar_tensor_ptr(&item->tensor);
    void *staged = NULL; /* a pooled pinned buffer holding a device tensor's bytes */
    mstar_status st = MSTAR_OK;
    if (item->host != NULL) {
        bytes = mstar_tensor_ptr(item->host);
    } else if (mstar__transport_on_device(env, &item->tensor) && n > 0) {
        st = mstar__pinned_pool_get(env->pinned, n, &staged);
        if (st == MSTAR_OK)
            st = mstar__transport_copy_to_host(env, &item->tensor, staged);
        bytes = staged;
    }
    if (st == MSTAR_OK)
        st = mstar__shm_file_write(env->dir, env->entity, item->uuid, bytes, n);
    mstar__pinned_pool_put(env->pinned, staged);
    item->tx_bytes = n;
    item->tx_time_s = (double)(mstar__now_ns() - t0) * 1e-9;
    return st;
}

/* Read [offset, offset + nbytes) of the open file into `into` or a new destination buffer. */
static mstar_status read_into_buf(const mstar__transport_env *env, const mstar_tensor_info *info,
                                  int fd, mstar__buf *into, mstar__buf **out)
{
    mstar__buf *buf;
    mstar_status st = mstar__transport_read_dest(env, into, info->nbytes, &buf);
    if (st != MSTAR_OK)
        return st;
    if (env->backend == NULL) {
        st = mstar__shm_file_pread(fd, info->offset, info->nbytes, buf->data);
    } else if (info->nbytes > 0) {
        /* Through a pooled pinned buffer into the backend's memory: read, then a synchronised
         * copy (the buffer goes back to the pool only once the copy has read it). */
        void *staged = NULL;
        st = mstar__pinned_pool_get(env->pinned, info->nbytes, &staged);
        if (st == MSTAR_OK)
            st = mstar__shm_file_pread(fd, info->offset, info->nbytes, staged);
        if (st == MSTAR_OK)
            st = mstar__transport_copy_from_host(env, buf, staged, info->nbytes, false);
        mstar__pinned_pool_put(env->pinned, staged);
    }
    if (st != MSTAR_OK) {
        mstar__buf_release(buf);
        return st;
    }
    *out = buf;
    return MSTAR_OK;
}

mstar_status mstar__files_read_one(const mstar__transport_env *env, const mstar_tensor_info *info,
                                   mstar__buf *into, mstar__buf **out)
{
    /* The file and the range first: a descriptor's size is only a claim until the file backs
     * it, and nothing is allocated for a claim. */
    int fd;
    mstar_status st = mstar__shm_file_open(env->dir, info->source_entity, info->uuid, info->offset,
                                           info->nbytes, &fd);
    if (st != MSTAR_OK)
        return st;
    st = read_into_buf(env, info, fd, into, out);
    close(fd);
    return st;
}

static mstar_status files_stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar__files_write_one(t->env, &items[i]);
        if (st != MSTAR_OK) {
            for (size_t j = 0; j < i; j++)
                mstar__shm_file_unlink(t->env->dir, t->env->entity, items[j].uuid);
            return st;
        }
    }
    return MSTAR_OK;
}

static void files_release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    mstar__shm_file_unlink(t->env->dir, t->env->entity, uuid);
}

static mstar_status files_check(mstar__transport *t, const mstar_tensor_info *info)
{
    if (info->shm_segment[0] != '\0')
        return mstar_error_set(MSTAR_EPROTO,
                               "descriptor of tensor 0x%016llx from '%s' names "
                               "arena segment '%s', but this process uses per-uuid files: "
                               "MSTAR_SHM_ARENA must match across the deployment",
                               (unsigned long long)info->uuid, info->source_entity,
                               info->shm_segment);
    char name[MSTAR__SHM_NAME_BUF];
    return mstar__shm_file_name(t->env->dir, info->source_entity, info->uuid, name);
}

static mstar_status files_read(mstar__transport *t, mstar__read_item *items, size_t n,
                               mstar_completion **done)
{
    for (size_t i = 0; i < n; i++) {
        mstar_status st =
            mstar__files_read_one(t->env, items[i].info, items[i].into, &items[i].buf);
        if (st != MSTAR_OK) {
            for (size_t j = 0; j < i; j++) {
                mstar__buf_release(items[j].buf);
                items[j].buf = NULL;
            }
            return st;
        }
        items[i].registered = false;
    }
    *done = NULL;
    return MSTAR_OK;
}

static const mstar__transport_ops files_ops = {
    .name = "files",
    .needs_cpu_tensor = true,
    .stage = files_stage,
    .release = files_release,
    .check = files_check,
    .read = files_read,
    .destroy = mstar__transport_destroy_bare,
};

mstar_status mstar__transport_files_create(const mstar__transport_env *env, mstar__transport **out)
{
    return mstar__transport_create_bare(&files_ops, env, "files transport", out);
}
