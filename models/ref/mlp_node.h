/*
 * mlp_node.h — the mlp bench model (mlp_model.h) as a graph-runner node, so `mstar bench graphs
 * --model mlp` puts the same work through the same runner as the reference decoder: one capture
 * per batch size at startup; a step leases a slot, writes its rows' inputs straight into the
 * slot's static input and replays, or runs the forward eagerly.
 *
 * A request is a row of the node's device state ([max_rows, hidden]); a step's input is its
 * rows' state, its output y ([rows, hidden]) the model applied to them. Steps are frozen: the
 * state is not updated, so every step of the same rows does the same work.
 */
#ifndef MSTAR_EXAMPLES_MLP_NODE_H
#define MSTAR_EXAMPLES_MLP_NODE_H

#include "mlp_model.h"

typedef struct mlp_node mlp_node;

typedef struct mlp_node_options {
    ref_mlp_config model;
    int32_t max_rows;           /* requests (rows of the state), at least every batch size */
    const int64_t *batch_sizes; /* captured; NULL or none: eager only */
    size_t n_batch_sizes;
} mlp_node_options;

/* The state is filled deterministically (uniform in [-1, 1), seeded by the model's seed). */
mstar_status mlp_node_create(mstar_backend *backend, const mlp_node_options *o, mlp_node **out);
void mlp_node_destroy(mlp_node *node); /* NULL is ignored */
/* Capture every batch size (startup). */
mstar_status mlp_node_capture(mlp_node *node);

ref_mlp *mlp_node_model(mlp_node *node);
mstar_stream *mlp_node_stream(mlp_node *node);
mstar_graph_runner *mlp_node_runner(mlp_node *node);
/* Row `row` of the state, fp32 on the host (for tests' references). */
mstar_status mlp_node_read_state(mlp_node *node, int32_t row, float *out);

/* A step: rows [first, first + n) of the state; replayed when use_graphs and a bucket fits
 * (slot < 0: the runner's next), eager otherwise. *replayed says which (may be NULL). */
mstar_status mlp_node_begin(mlp_node *node, int32_t first, int32_t n, bool use_graphs, int32_t slot,
                            bool *replayed);
/* Enqueue the begun step's forward (a replay or the eager forward); may be called again. */
mstar_status mlp_node_launch(mlp_node *node);
/* Copy y of the step's rows (fp32 on the host) to `y` when not NULL, commit, release. */
mstar_status mlp_node_end(mlp_node *node, float *y);
/* begin + launch + end. */
mstar_status mlp_node_step(mlp_node *node, int32_t first, int32_t n, bool use_graphs, float *y,
                           bool *replayed);
/* The begun step's lease (false when eager). */
bool mlp_node_lease(const mlp_node *node, mstar_slot_lease *out);

#endif
