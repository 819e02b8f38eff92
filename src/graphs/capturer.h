/*
 * capturer.h — one face for both kinds of runner that capture into a node's pool (the
 * whole-forward runner and the piecewise runner), so that sizing and the startup order drive
 * every runner of a device the same way (design.md "Startup", "Planning").
 */
#ifndef MSTAR_GRAPHS_CAPTURER_H
#define MSTAR_GRAPHS_CAPTURER_H

#include "mstar/graphs.h"
#include "mstar/piecewise.h"
#include "mstar/planner.h"

typedef struct mstar__capturer_ops {
    const char *(*name)(const void *r);
    mstar_graph_pool *(*pool)(const void *r);
    mstar_step_runner *(*step_runner)(const void *r);
    int32_t (*num_slots)(const void *r);
    /* Every bucket in capture order (borrowed). */
    const mstar_bucket_key *(*buckets)(const void *r, size_t *n);
    uint32_t (*config_idx)(const void *r, const mstar_bucket_key *key);
    mstar_status (*prepare)(void *r);
    mstar_status (*warm)(void *r, const mstar_bucket_key *key, uint64_t *peak);
    mstar_status (*throwaway)(void *r, const mstar_bucket_key *key, unsigned flags,
                              mstar_graph **out, mstar_capture_stats *stats);
    mstar_status (*capture)(void *r, const mstar_bucket_key *planned, size_t n);
    const mstar_bucket_key *(*dropped)(const void *r, size_t *n);
    mstar_status (*drop)(void *r, const mstar_bucket_key *key);
    mstar_dummy_rows *(*rows)(void *r);
    /* The pool bytes a capture of `key` would keep, from its own last warm-up (lifetimes.h);
     * false when unknown (not warmed, or a piecewise region, whose outputs leave the pool). */
    bool (*kept_hint)(const void *r, const mstar_bucket_key *key, uint64_t *bytes);
} mstar__capturer_ops;

typedef struct mstar__capturer {
    const mstar__capturer_ops *ops;
    void *r;
} mstar__capturer;

mstar__capturer mstar__capturer_whole(mstar_graph_runner *runner);
mstar__capturer mstar__capturer_piecewise(mstar_piecewise_runner *runner);

/* Sizing over either kind (sizing.c). */
mstar_status mstar__size_captures(mstar__capturer c, mstar_rank_group *barrier,
                                  mstar_capture_sizing **out);

#endif
