/*
 * runner.h — the whole-forward runner's state, shared by runner.c (registry, lookups, leases,
 * padding) and runner_capture.c (warm-ups, capture, run_forward), and a step helper the piecewise
 * runner shares with it.
 */
#ifndef MSTAR_GRAPHS_RUNNER_H
#define MSTAR_GRAPHS_RUNNER_H

#include "mstar/graphs.h"

#include "core/vec.h"
#include "graphs/buckets.h"

struct template_row {
    uint32_t config_idx;
    int64_t len;
    mstar_tensor_map *full;
    mstar_tensor_map *empty; /* the same tensors cut to length 0 on their seq dim */
};

struct mstar_graph_runner {
    char *name;
    const mstar_submodule_ops *sub;
    void *sub_self;
    mstar_graph_config *configs;
    size_t n_configs;
    mstar_step_runner *sr;
    mstar_stream *stream; /* the compute stream */
    mstar_graph_pool *pool;
    int32_t num_slots;
    mstar_dtype autocast;
    mstar_dummy_rows *rows;
    char *who;            /* "graph runner <name>", for messages */
    mstar__buckets set;   /* every configured bucket, capture order */
    mstar__vec interned;  /* mstar__interned */
    mstar__vec templates; /* struct template_row */
    mstar__vec warned;    /* char *: captured keys found missing at staging, warned once */
    mstar_step *step;     /* scratch for captures */
};

/* The bucket registered under `key` (captured or not), or NULL. */
struct bucket *mstar__runner_find_bucket(const mstar_graph_runner *r, const mstar_bucket_key *key);
/* Template rows of `len` tokens for a config, built once. */
mstar_status mstar__runner_template(mstar_graph_runner *r, uint32_t config_idx, int64_t len,
                                    struct template_row **out);
/* The bucket's capture inputs (reference get_node_inputs): bs rows, from cached templates.
 * `rows` has room for bucket->key.bs entries. */
mstar_status mstar__runner_node_inputs(mstar_graph_runner *r, const struct bucket *b,
                                       mstar_node_input *rows);
/* admit then plan; an admit that is not ok is MSTAR_ENOSPC naming the request (design.md "Capture":
 * a capture that cannot admit fails). */
mstar_status mstar__admit_and_plan(mstar_step_runner *sr, mstar_step *step);

#endif
