/*
 * rank_group.c — agree_across_ranks (design.md "Rank agreement"): the public entry points of every
 * rank group, and the group of one.
 *
 * Ranks that disagree about which buckets they captured hang as soon as a captured region holds
 * a collective (one replays while the other runs eager), and ranks that plan on different costs
 * capture different sets. So every such decision goes through one elementwise min or max over
 * the joint group; the callers order their values by the configs, which are identical on every
 * rank.
 */
#include "ranks/rank_group.h"

#include "core/assert.h"

#include <stdlib.h>

#define DEFAULT_TIMEOUT_MS 300000
#define MAX_TIMEOUT_MS     (INT64_C(24) * 3600 * 1000)

void mstar__reduce_into(int64_t *acc, const int64_t *v, size_t n, mstar_reduce reduce)
{
    MSTAR__ASSERT(reduce == MSTAR_REDUCE_MIN || reduce == MSTAR_REDUCE_MAX); /* I-22 */
    for (size_t i = 0; i < n; i++) {
        if (reduce == MSTAR_REDUCE_MIN ? v[i] < acc[i] : v[i] > acc[i])
            acc[i] = v[i];
    }
}

mstar_status mstar__rank_agree_timeout(int64_t requested, int64_t *out)
{
    if (requested < 0 || requested > MAX_TIMEOUT_MS)
        return mstar_error_set(MSTAR_EINVAL, "timeout_ms %lld is out of range (0..%lld)",
                               (long long)requested, (long long)MAX_TIMEOUT_MS);
    if (requested > 0) {
        *out = requested;
        return MSTAR_OK;
    }
    return mstar_env_get_int("MSTAR_RANK_AGREE_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, 1, MAX_TIMEOUT_MS,
                             out);
}

static mstar_status single_reduce(mstar_rank_group *group, int64_t *values, size_t n,
                                  mstar_reduce reduce)
{
    (void)group;
    (void)values;
    (void)n;
    (void)reduce;
    return MSTAR_OK;
}

static void single_destroy(mstar_rank_group *group)
{
    free(group);
}

static const mstar__rank_group_ops single_ops = {
    .kind = "single",
    .reduce = single_reduce,
    .destroy = single_destroy,
};

mstar_status mstar_rank_group_create_single(mstar_rank_group **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "out is NULL");
    mstar_rank_group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_rank_group_create_single: out of memory");
    g->ops = &single_ops;
    g->rank = 0;
    g->size = 1;
    *out = g;
    return MSTAR_OK;
}

void mstar_rank_group_destroy(mstar_rank_group *group)
{
    if (group != NULL)
        group->ops->destroy(group);
}

int32_t mstar_rank_group_rank(const mstar_rank_group *group)
{
    return group->rank;
}

int32_t mstar_rank_group_size(const mstar_rank_group *group)
{
    return group->size;
}

mstar_status mstar_agree_across_ranks(mstar_rank_group *group, int64_t *values, size_t n,
                                      mstar_reduce reduce)
{
    if (group == NULL)
        return mstar_error_set(MSTAR_EINVAL, "group is NULL");
    if (n > 0 && values == NULL)
        return mstar_error_set(MSTAR_EINVAL, "values is NULL with n %zu", n);
    if (reduce != MSTAR_REDUCE_MIN && reduce != MSTAR_REDUCE_MAX)
        return mstar_error_set(MSTAR_EINVAL, "reduce %d is neither MSTAR_REDUCE_MIN nor _MAX",
                               (int)reduce);
    mstar_status st = group->ops->reduce(group, values, n, reduce);
    if (st != MSTAR_OK)
        return mstar_error_wrap("agree across %d ranks (%s group, rank %d)", (int)group->size,
                                group->ops->kind, (int)group->rank);
    return MSTAR_OK;
}

#ifndef MSTAR_HAVE_CUDA
mstar_status mstar_rank_group_create_nccl(mstar_rank_group *bootstrap, int device,
                                          mstar_rank_group **out)
{
    (void)bootstrap;
    (void)device;
    (void)out;
    return mstar_error_set(MSTAR_ENOTSUP, "NCCL rank groups need the CUDA backend, and this "
                                          "build has none");
}
#endif
