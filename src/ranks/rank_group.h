/*
 * rank_group.h — what every rank group shares: the handle's common part and the operations a
 * kind of group provides. rank_group.c holds the public entry points and the single-rank group;
 * rank_group_host.c the group over the control mesh; cuda/rank_group_nccl.c the NCCL group.
 */
#ifndef MSTAR_RANKS_RANK_GROUP_H
#define MSTAR_RANKS_RANK_GROUP_H

#include "mstar/planner.h"

typedef struct mstar__rank_group_ops {
    const char *kind; /* "single", "host", "nccl": for messages */
    /* Reduce values[0..n) over every rank into `values`, written only on success. */
    mstar_status (*reduce)(mstar_rank_group *group, int64_t *values, size_t n, mstar_reduce reduce);
    void (*destroy)(mstar_rank_group *group);
} mstar__rank_group_ops;

/* The first member of every kind's handle. */
struct mstar_rank_group {
    const mstar__rank_group_ops *ops;
    int32_t rank;
    int32_t size;
};

/* acc[i] = min or max(acc[i], v[i]). */
void mstar__reduce_into(int64_t *acc, const int64_t *v, size_t n, mstar_reduce reduce);

/* MSTAR_RANK_AGREE_TIMEOUT_MS, or `requested` when it is not 0. */
mstar_status mstar__rank_agree_timeout(int64_t requested, int64_t *out);

#endif
