/*
 * piecewise.h — the piecewise runner's state, shared by piecewise.c (config, registry, lookups,
 * run, outputs) and piecewise_capture.c (warm-ups, capture, the sizing hooks).
 */
#ifndef MSTAR_GRAPHS_PIECEWISE_H
#define MSTAR_GRAPHS_PIECEWISE_H

#include "mstar/piecewise.h"

#include "core/vec.h"
#include "graphs/buckets.h"
#include "graphs/runner.h"

struct mstar_piecewise_runner {
    char *label;
    char *who;                     /* "piecewise region <label> of node <node>", for messages */
    mstar_piecewise_config config; /* own copy: sizes sorted and owned */
    mstar_step_runner *sr;
    mstar_stream *stream; /* the compute stream */
    mstar_graph_pool *pool;
    int32_t num_slots;
    int32_t slot; /* set_slot's */
    mstar_dtype autocast;
    mstar_dummy_rows *rows;
    mstar__buckets set; /* every configured shape (row_lens: its rows), capture order */
    mstar__vec warned;  /* char *: static inputs found missing at a run, warned once */
    mstar_step *step;   /* scratch: captures and runs */
    int64_t *ids;       /* scratch of the largest bs: a run's padded ids */
    int64_t *lens;      /* and their tokens */
};

/* Point the scratch step's context at (shape, slot) over ids, then declare the region's step
 * over ids and lens (when the config declares one). *declared: whether it did. */
mstar_status mstar__pw_declare(mstar_piecewise_runner *pw, const struct bucket *shape, int32_t slot,
                               const int64_t *ids, const int64_t *lens, bool capture,
                               bool *declared);

#endif
