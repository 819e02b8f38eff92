/*
 * piecewise.h — the piecewise runner's state, shared by piecewise.c (config, registry, lookups,
 * run, outputs) and piecewise_capture.c (warm-ups, capture, the sizing hooks).
 */
#ifndef MSTAR_GRAPHS_PIECEWISE_H
#define MSTAR_GRAPHS_PIECEWISE_H

#include "mstar/piecewise.h"

#include "core/vec.h"
#include "graphs/runner.h"

/* One configured shape and its captured graphs, one per slot (reference PiecewiseGraphData is
 * the mstar_graph_slot of one slot). */
struct pw_shape {
    mstar_bucket_key key; /* MSTAR_PIECEWISE_WALK, bs, total tokens, cg_key_info = the label */
    int64_t *seq_lens;    /* the shape's rows */
    bool captured;
    struct mstar_graph_slot **slots; /* num_slots, NULL until captured */
};

struct mstar_piecewise_runner {
    char *label;
    char *who;                     /* "piecewise region <label> (node <node>)", for messages */
    mstar_piecewise_config config; /* own copy: sizes sorted and owned */
    mstar_step_runner *sr;
    mstar_stream *stream; /* the compute stream */
    mstar_graph_pool *pool;
    int32_t num_slots;
    int32_t slot; /* set_slot's */
    mstar_dtype autocast;
    mstar_dummy_rows *rows;
    mstar__vec shapes;  /* struct pw_shape *, capture order */
    mstar__vec keys;    /* mstar_bucket_key of every shape, capture order */
    mstar__vec dropped; /* mstar_bucket_key */
    mstar__vec specs;   /* mstar_cg_slot_spec */
    mstar__vec warned;  /* char *: static inputs found missing at a run, warned once */
    mstar_step *step;   /* scratch: captures and runs */
    int64_t *ids;       /* scratch of the largest bs: a run's padded ids */
    int64_t *lens;      /* and their tokens */
};

static inline struct pw_shape *mstar__pw_shape_at(const mstar_piecewise_runner *pw, size_t i)
{
    return *(struct pw_shape **)mstar__vec_at(&pw->shapes, i);
}

/* The shape registered under `key` (captured or not), or NULL. */
struct pw_shape *mstar__pw_find(const mstar_piecewise_runner *pw, const mstar_bucket_key *key);
/* Point the scratch step's context at (shape, slot) over ids, then declare the region's step
 * over ids and lens (when the config declares one). *declared: whether it did. */
mstar_status mstar__pw_declare(mstar_piecewise_runner *pw, const struct pw_shape *shape,
                               int32_t slot, const int64_t *ids, const int64_t *lens, bool capture,
                               bool *declared);
/* Free a shape's graphs; it is no longer captured. */
void mstar__pw_uncapture(mstar_piecewise_runner *pw, struct pw_shape *shape);

#endif
