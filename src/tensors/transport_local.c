/*
 * transport_local.c — the transport of a single-process deployment: every consumer is this
 * entity, so nothing is staged and a descriptor from another entity cannot be read (it fails
 * loudly rather than guessing where the bytes are).
 */
#include "tensors/transport_local.h"

static mstar_status local_stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        items[i].tx_bytes = mstar_tensor_nbytes(&items[i].tensor);
        items[i].tx_time_s = 0;
    }
    return MSTAR_OK;
}

static void local_release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
}

static mstar_status local_check(mstar__transport *t, const mstar_tensor_info *info)
{
    return mstar_error_set(MSTAR_ENOTSUP,
                           "the local transport reads only this process's "
                           "tensors; descriptor from '%s' (use files or arena across processes)",
                           info->source_entity);
}

static mstar_status local_read(mstar__transport *t, mstar__read_item *items, size_t n,
                               mstar_completion **done)
{
    return local_check(t, items[0].info);
}

static const mstar__transport_ops local_ops = {
    .name = "local",
    .needs_cpu_tensor = false,
    .stage = local_stage,
    .release = local_release,
    .check = local_check,
    .read = local_read,
    .destroy = mstar__transport_destroy_bare,
};

mstar_status mstar__transport_local_create(const mstar__transport_env *env, mstar__transport **out)
{
    return mstar__transport_create_bare(&local_ops, env, "local transport", out);
}
