/*
 * transport.c — helpers every transport shares: where a tensor lives, where reads land, and the
 * host/device copies in between (through the backend, so the host backend exercises the same
 * paths in CI that the CUDA backend runs on a GPU).
 */
#include "tensors/transport.h"

#include "tensors/completion.h"

#include <stdlib.h>
#include <string.h>

mstar_status mstar__transport_create_bare(const mstar__transport_ops *ops,
                                          const mstar__transport_env *env, const char *what,
                                          mstar__transport **out)
{
    mstar__transport *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "%s", what);
    t->ops = ops;
    t->env = env;
    *out = t;
    return MSTAR_OK;
}

void mstar__transport_destroy_bare(mstar__transport *t)
{
    free(t);
}

bool mstar__transport_on_device(const mstar__transport_env *env, const mstar_tensor *t)
{
    if (env->backend == NULL)
        return false;
    mstar_device d = mstar_backend_device(env->backend);
    return t->device.type == d.type && t->device.index == d.index;
}

static void release_device(void *backend, void *ptr)
{
    if (mstar_caching_free(backend, ptr) != MSTAR_OK)
        mstar_log(MSTAR_LOG_ERROR, "freeing a read buffer: %s", mstar_last_error());
}

mstar_status mstar__transport_alloc_dest(const mstar__transport_env *env, uint64_t n,
                                         mstar__buf **out)
{
    if (env->backend == NULL)
        return mstar__buf_alloc_host(n, out);
    void *ptr = NULL;
    if (n > 0) {
        if (n > SIZE_MAX)
            return mstar_error_set(MSTAR_ENOMEM, "read buffer of %llu bytes",
                                   (unsigned long long)n);
        mstar_status st = mstar_caching_alloc(env->backend, (size_t)n, &ptr);
        if (st != MSTAR_OK)
            return mstar_error_wrap("read buffer of %llu bytes", (unsigned long long)n);
    }
    mstar_status st = mstar__buf_wrap(ptr, n, mstar_backend_device(env->backend),
                                      ptr != NULL ? release_device : NULL, env->backend, out);
    if (st != MSTAR_OK && ptr != NULL)
        mstar_caching_free(env->backend, ptr);
    return st;
}

mstar_status mstar__transport_read_dest(const mstar__transport_env *env, mstar__buf *into,
                                        uint64_t n, mstar__buf **out)
{
    if (into == NULL)
        return mstar__transport_alloc_dest(env, n, out);
    if (into->size < n) /* the manager checked the capacity: a bug if it happens */
        return mstar_error_set(MSTAR_EINVAL, "read of %llu bytes into a buffer of %llu",
                               (unsigned long long)n, (unsigned long long)into->size);
    *out = mstar__buf_retain(into);
    return MSTAR_OK;
}

mstar_status mstar__transport_copy_to_host(const mstar__transport_env *env, const mstar_tensor *t,
                                           void *dst)
{
    uint64_t n = mstar_tensor_nbytes(t);
    if (n == 0)
        return MSTAR_OK;
    if (!mstar__transport_on_device(env, t)) {
        memcpy(dst, mstar_tensor_ptr(t), (size_t)n);
        return MSTAR_OK;
    }
    mstar_status st =
        mstar_memcpy_async(env->d2h, dst, mstar_tensor_ptr(t), (size_t)n, MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(env->d2h);
    return st == MSTAR_OK
               ? MSTAR_OK
               : mstar_error_wrap("device-to-host copy of %llu bytes", (unsigned long long)n);
}

mstar_status mstar__transport_copy_from_host(const mstar__transport_env *env, mstar__buf *dst,
                                             const void *src, uint64_t n, bool async)
{
    if (n == 0)
        return MSTAR_OK;
    if (env->backend == NULL) {
        memcpy(dst->data, src, (size_t)n);
        return MSTAR_OK;
    }
    mstar_status st = mstar_memcpy_async(env->h2d, dst->data, src, (size_t)n, MSTAR_MEMCPY_H2D);
    if (st == MSTAR_OK && !async)
        st = mstar_stream_synchronize(env->h2d);
    return st == MSTAR_OK
               ? MSTAR_OK
               : mstar_error_wrap("host-to-device copy of %llu bytes", (unsigned long long)n);
}

/* Runs on the stream after every copy queued before it (a CUDA host node, or at once on the
 * host backend): the copies have landed. */
static void h2d_landed(void *args)
{
    mstar_completion *c;
    memcpy(&c, args, sizeof(c));
    mstar__completion_finish(c, MSTAR_OK, NULL);
    mstar_completion_release(c);
}

mstar_status mstar__transport_h2d_completion(const mstar__transport_env *env,
                                             mstar_completion **out)
{
    mstar_completion *c;
    mstar_status st = mstar__completion_create(env->notice, &c);
    if (st != MSTAR_OK)
        return st;
    mstar__completion_retain(c); /* the stream callback's reference */
    st = mstar_launch(env->h2d, h2d_landed, &c, sizeof(c));
    if (st != MSTAR_OK) {
        mstar_completion_release(c);
        mstar_completion_release(c);
        return mstar_error_wrap("queueing the host-to-device completion");
    }
    *out = c;
    return MSTAR_OK;
}
