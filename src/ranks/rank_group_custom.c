/*
 * rank_group_custom.c — a rank group whose reduction is a callback (mstar/planner.h,
 * mstar_rank_group_create_custom): how the Python package agrees over a torch.distributed process
 * group while the agreement's callers (sizing, planning, startup) stay in C.
 */
#include "ranks/rank_group.h"

#include <stdlib.h>

struct custom_group {
    mstar_rank_group base; /* first: the handle */
    mstar_rank_reduce_fn reduce;
    void (*destroy)(void *user);
    void *user;
};

static mstar_status custom_reduce(mstar_rank_group *group, int64_t *values, size_t n,
                                  mstar_reduce reduce)
{
    struct custom_group *g = (struct custom_group *)group;
    /* Written only on success, as every group promises: the callback gets a copy. */
    int64_t *tmp = n > 0 ? malloc(n * sizeof(*tmp)) : NULL;
    if (n > 0 && tmp == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "custom rank group: out of memory");
    for (size_t i = 0; i < n; i++)
        tmp[i] = values[i];
    mstar_status st = g->reduce(g->user, tmp, n, reduce);
    if (st == MSTAR_OK) {
        for (size_t i = 0; i < n; i++)
            values[i] = tmp[i];
    } else if (mstar_last_status() != st) {
        mstar_error_set(st, "the group's reduce callback failed");
    }
    free(tmp);
    return st;
}

static void custom_destroy(mstar_rank_group *group)
{
    struct custom_group *g = (struct custom_group *)group;
    if (g->destroy != NULL)
        g->destroy(g->user);
    free(g);
}

static const mstar__rank_group_ops custom_ops = {
    .kind = "custom",
    .reduce = custom_reduce,
    .destroy = custom_destroy,
};

mstar_status mstar_rank_group_create_custom(int32_t rank, int32_t size, mstar_rank_reduce_fn reduce,
                                            void (*destroy)(void *user), void *user,
                                            mstar_rank_group **out)
{
    if (out == NULL || reduce == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_rank_group_create_custom: reduce and out are "
                                             "required");
    if (size < 1 || rank < 0 || rank >= size)
        return mstar_error_set(MSTAR_EINVAL, "mstar_rank_group_create_custom: rank %d of size %d",
                               (int)rank, (int)size);
    struct custom_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_rank_group_create_custom: out of memory");
    g->base.ops = &custom_ops;
    g->base.rank = rank;
    g->base.size = size;
    g->reduce = reduce;
    g->destroy = destroy;
    g->user = user;
    *out = &g->base;
    return MSTAR_OK;
}
