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
/* The context of the step declared on e->step: `count` rows `ids` on `walk`, a replay of `lease`
 * or, with lease NULL, an eager run; on the engine's stream, not a capture nor a pre-plan. */
void node_engine_set_context(node_engine *e, const char *walk, const int64_t *ids, size_t count,
                             const mstar_slot_lease *lease);
/* Admit and plan e->step; a refusal is MSTAR_ENOSPC naming `who` and the runner's reason. */
mstar_status node_engine_admit_plan(node_engine *e, const char *who);
/* Enqueue the prepared step's forward: a replay of `lease` (waiting for plan_done, may be NULL)
 * or, with lease NULL, `forward` (the node's submodule forward, self the node) into
 * e->eager_out. *outputs: where the step's outputs are. */
mstar_status node_engine_launch(node_engine *e, const mstar_slot_lease *lease,
                                mstar_event *plan_done, mstar_forward_fn forward, void *self,
                                const mstar_tensor_map **outputs);
/* End a step whose outputs were collected with status `st`: commit when it was launched and all
 * went well, then release `lease` (NULL: eager) over its n real rows. The first error wins. */
mstar_status node_engine_finish(node_engine *e, mstar_status st, bool launched,
                                const mstar_slot_lease *lease, int32_t n);
/* Wait for the stream, then free all but the stream: the node frees that last, after what it
 * made on it. Parts never made (NULL) are skipped. */
void node_engine_close(node_engine *e);

#endif
