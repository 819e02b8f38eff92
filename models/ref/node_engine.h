/*
 * node_engine.h — the graph-runner half both model nodes (ref_node.c, mlp_node.c) hold: the
 * compute stream, step runner, graph pool and runner, and the engine's per-step scratch. The
 * nodes differ in their model, their submodule and their rows; how these parts are built,
 * captured and freed is the same, so it lives here once.
 */
#ifndef MSTAR_EXAMPLES_NODE_ENGINE_H
#define MSTAR_EXAMPLES_NODE_ENGINE_H

#include "mstar/mstar.h"

typedef struct node_engine {
    mstar_backend *backend;
    mstar_stream *stream; /* compute: forwards, replays, plans */
    mstar_step_runner *sr;
    mstar_graph_pool *pool;
    mstar_graph_runner *runner;
    const char *name; /* the pool's and the submodule's name (static) */
    /* The engine's per-step scratch. */
    mstar_step *step;
    mstar_tensor_map *pre;       /* the step's preprocessed inputs */
    mstar_tensor_map *eager_out; /* an eager forward's outputs */
} node_engine;

/* Everything but the runner: the stream, step runner, pool (named `name`), step and maps. On
 * failure what was made stays in `e` for node_engine_close. */
mstar_status node_engine_open(node_engine *e, mstar_backend *backend, const char *name);
/* The whole-forward runner over `ops` (self: the node) with the given capture configs (copied);
 * num_slots 0: the runner's default. */
mstar_status node_engine_create_runner(node_engine *e, const mstar_submodule_ops *ops, void *self,
                                       const mstar_graph_config *configs, size_t n_configs,
                                       int32_t num_slots);
/* Startup: claim the capture jobs, build the resources' graph buffers once, warm up and capture
 * every bucket, hand back the padding rows' storage; a bucket left uncaptured is an error
 * naming `who` and the first such bucket. */
mstar_status node_engine_capture(node_engine *e, const char *who);
/* Wait for the stream, then free all but the stream: the node frees that last, after what it
 * made on it. Parts never made (NULL) are skipped. */
void node_engine_close(node_engine *e);

#endif
