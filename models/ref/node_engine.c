/*
 * node_engine.c — the graph-runner half of a model node (see node_engine.h): building its parts,
 * the startup capture and freeing them, shared by the reference and the mlp nodes.
 */
#include "node_engine.h"

mstar_status node_engine_open(node_engine *e, mstar_backend *backend, const char *name)
{
    e->backend = backend;
    e->name = name;
    mstar_status st;
    if ((st = mstar_stream_create(backend, MSTAR_STREAM_NON_BLOCKING, &e->stream)) != MSTAR_OK ||
        (st = mstar_step_runner_create(backend, e->stream, &e->sr)) != MSTAR_OK ||
        (st = mstar_graph_pool_create(backend, name, &e->pool)) != MSTAR_OK ||
        (st = mstar_step_create(&e->step)) != MSTAR_OK ||
        (st = mstar_tensor_map_create(&e->pre)) != MSTAR_OK)
        return st;
    return mstar_tensor_map_create(&e->eager_out);
}

mstar_status node_engine_create_runner(node_engine *e, const mstar_submodule_ops *ops, void *self,
                                       const mstar_graph_config *configs, size_t n_configs,
                                       int32_t num_slots)
{
    mstar_graph_runner_options ro = { .submodule_name = e->name,
                                      .submodule = ops,
                                      .submodule_self = self,
                                      .configs = configs,
                                      .n_configs = n_configs,
                                      .step_runner = e->sr,
                                      .pool = e->pool,
                                      .num_slots = num_slots,
                                      .autocast_dtype = MSTAR_DTYPE_INVALID };
    return mstar_graph_runner_create(&ro, &e->runner);
}

mstar_status node_engine_capture(node_engine *e, const char *who)
{
    mstar_status st;
    if ((st = mstar_graph_runner_prepare_for_capture(e->runner, NULL, NULL)) != MSTAR_OK ||
        (st = mstar_step_runner_build_graph_buffers(e->sr)) != MSTAR_OK ||
        (st = mstar_graph_runner_warmup_and_capture(e->runner, NULL, 0)) != MSTAR_OK ||
        (st = mstar_dummy_rows_release_all(mstar_graph_runner_dummy_rows(e->runner))) != MSTAR_OK)
        return st;
    size_t dropped;
    const mstar_bucket_key *keys = mstar_graph_runner_dropped_buckets(e->runner, &dropped);
    if (dropped > 0) {
        char name[MSTAR_BUCKET_NAME_MAX];
        return mstar_error_set(MSTAR_ESTATE, "%s: %zu buckets not captured, first %s", who, dropped,
                               mstar_bucket_key_format(&keys[0], name, sizeof(name)));
    }
    return MSTAR_OK;
}

void node_engine_close(node_engine *e)
{
    if (e->stream != NULL)
        mstar_stream_synchronize(e->stream);
    mstar_graph_runner_destroy(e->runner);
    mstar_tensor_map_destroy(e->pre);
    mstar_tensor_map_destroy(e->eager_out);
    mstar_step_destroy(e->step);
    mstar_step_runner_destroy(e->sr);
    mstar_graph_pool_destroy(e->pool);
    e->runner = NULL;
    e->pre = e->eager_out = NULL;
    e->step = NULL;
    e->sr = NULL;
    e->pool = NULL;
}

void node_engine_set_context(node_engine *e, const char *walk, const int64_t *ids, size_t count,
                             const mstar_slot_lease *lease)
{
    mstar_step_ctx *ctx = mstar_step_context(e->step);
    ctx->request_ids = ids;
    ctx->n_requests = count;
    ctx->graph_walk = walk;
    ctx->slot = lease != NULL ? lease->slot : -1;
    ctx->capture = false;
    ctx->is_preplan = false;
    ctx->has_lease = lease != NULL;
    if (lease != NULL)
        ctx->lease = *lease;
    ctx->stream = e->stream;
    ctx->compute_dtype = MSTAR_DTYPE_INVALID;
}

mstar_status node_engine_admit_plan(node_engine *e, const char *who)
{
    mstar_step_admit_result admitted;
    mstar_status st = mstar_step_runner_admit(e->sr, e->step, &admitted);
    if (st == MSTAR_OK && !admitted.ok)
        st = mstar_error_set(MSTAR_ENOSPC, "%s: %s", who, admitted.reason);
    return st != MSTAR_OK ? st : mstar_step_runner_plan(e->sr, e->step);
}

mstar_status node_engine_launch(node_engine *e, const mstar_slot_lease *lease,
                                mstar_event *plan_done, mstar_forward_fn forward, void *self,
                                const mstar_tensor_map **outputs)
{
    if (lease != NULL)
        return mstar_graph_runner_run_forward(e->runner, lease, e->pre, plan_done, NULL, outputs);
    mstar_tensor_map_clear(e->eager_out);
    *outputs = e->eager_out;
    return forward(self, e->step, e->pre, e->eager_out);
}

mstar_status node_engine_finish(node_engine *e, mstar_status st, bool launched,
                                const mstar_slot_lease *lease, int32_t n)
{
    if (launched && st == MSTAR_OK)
        st = mstar_step_runner_commit(e->sr, e->step);
    if (lease != NULL) {
        mstar_status released = mstar_graph_runner_release(e->runner, lease, n);
        st = st != MSTAR_OK ? st : released;
    }
    return st;
}
