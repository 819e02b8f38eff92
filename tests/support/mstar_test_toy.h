/*
 * mstar_test_toy.h — a toy node for capture-planning tests: one whole-forward runner whose
 * forward copies its input rows to its output (y = x) through device copies, with a transient
 * scratch buffer and a chosen number of extra graph nodes, so that each bucket's pool bytes
 * (kept: the output; extra: the scratch) and executable size are known and scale with bs. It
 * uses only copies and memsets, so the same toy runs on the host and the CUDA backend.
 * Optionally the node also has a piecewise region "mlp" in the same pool, doing the same (y = h,
 * with the scratch) over its own static input buffer.
 */
#ifndef MSTAR_TEST_TOY_H
#define MSTAR_TEST_TOY_H

#include "mstar/mstar.h"

typedef struct mstar_test_toy_options {
    mstar_device device;
    const int64_t *batch_sizes; /* NULL: the runner's default 1, 2, 4, 8, 16, 32, 64 */
    size_t n_batch_sizes;
    int32_t num_slots;       /* 0: 2 */
    int64_t row_floats;      /* floats per row in x and y (kept output: bs × 4 × row_floats) */
    size_t scratch_per_row;  /* transient bytes per row, allocated and freed in the forward */
    int32_t extra_nodes;     /* memsets added to each forward (graph nodes) */
    int64_t fail_capture_bs; /* a capture (not a warm-up) of this bs fails; 0: none */
    const char *name;        /* runner and pool name; NULL: "toy" */
    bool region;             /* add the piecewise region "mlp" (same batch sizes) */
    /* Each whole forward first enqueues a collective over these ranks (a max of its row count,
     * checked): warm-ups and replays run it, a capture records it. NULL: none. */
    mstar_rank_group *collective;
    /* This bs's last warm-up at sizing (the num_slots × MSTAR_NUM_WARMUP-th, after its
     * collective) fails: this rank alone cannot plan the bucket. 0: none. */
    int64_t fail_last_warmup_bs;
} mstar_test_toy_options;

typedef struct mstar_test_toy mstar_test_toy;

/* The backend, a compute stream, the node's pool, a step runner and the runner. Nothing is
 * captured yet: pass mstar_test_toy_runner to mstar_capture_startup_run. */
mstar_status mstar_test_toy_create(const mstar_test_toy_options *opts, mstar_test_toy **out);
void mstar_test_toy_destroy(mstar_test_toy *toy);

mstar_backend *mstar_test_toy_backend(mstar_test_toy *toy);
mstar_step_runner *mstar_test_toy_step_runner(mstar_test_toy *toy);
mstar_graph_runner *mstar_test_toy_runner(mstar_test_toy *toy);
mstar_graph_pool *mstar_test_toy_pool(mstar_test_toy *toy);
/* Collectives the forwards ran, and how many of them failed or disagreed. */
void mstar_test_toy_collectives(const mstar_test_toy *toy, int64_t *run, int64_t *bad);
/* The piecewise region, or NULL without opts.region. */
mstar_piecewise_runner *mstar_test_toy_region(mstar_test_toy *toy);

/* mstar_capture_startup_run over the toy's runner and, when it has one, its region, agreeing
 * across `group` (NULL: one rank alone); `rep` may be NULL. */
mstar_status mstar_test_toy_capture_startup(mstar_test_toy *toy, mstar_rank_group *group,
                                            mstar_capture_report *rep);

/* One step of n rows (x: n × row_floats host floats) through the runner when a captured bucket
 * fits, else eagerly; y (host, n × row_floats) gets the output and *replayed (may be NULL) says
 * which path ran. */
mstar_status mstar_test_toy_step(mstar_test_toy *toy, const float *x, int64_t n, float *y,
                                 bool *replayed);

/* Run the region over n rows (x: n × row_floats host floats) when a captured shape serves n;
 * y gets its output. *replayed = false (and y untouched) when no shape does. */
mstar_status mstar_test_toy_region_step(mstar_test_toy *toy, const float *x, int64_t n, float *y,
                                        bool *replayed);

#endif
