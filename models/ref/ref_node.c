/*
 * ref_node.c — the reference model as a graph-runner node (see ref_node.h): the node's lifetime
 * (its model, resources, step runner, pool and runner; capture at startup) and the engine's side
 * of a step (lease, pad, declare, admit, plan, preprocess, replay or run eager, collect, commit,
 * release; pre-plans). The submodule the runner drives is in ref_node_module.c.
 */
#include "ref_node_internal.h"

#include "core/vec.h"

#include <stdlib.h>
#include <string.h>

static mstar_status node_build(ref_node *node, const ref_node_options *o)
{
    mstar_status st;
    if ((st = node_engine_open(&node->eng, node->backend, "ref_model")) != MSTAR_OK ||
        (st = ref_model_create(&o->model, &o->kv, node->backend, &node->model)) != MSTAR_OK ||
        (st = mstar_kv_cache_create(&o->kv, node->backend, &node->kv)) != MSTAR_OK ||
        (st = mstar_positions_create(node->backend, &node->pos)) != MSTAR_OK ||
        (st = mstar_kv_cache_register(node->kv, node->eng.sr, REF_NODE_KV_KEY)) != MSTAR_OK ||
        (st = mstar_positions_register(node->pos, node->eng.sr, REF_NODE_POS_KEY)) != MSTAR_OK ||
        (st = mstar_event_create(node->backend, &node->staged[0])) != MSTAR_OK ||
        (st = mstar_event_create(node->backend, &node->staged[1])) != MSTAR_OK)
        return st;
    mstar_graph_config *configs = NULL;
    if ((st = ref_node__make_configs(node, o, &configs)) != MSTAR_OK)
        return st;
    node->zeros = calloc((size_t)node->zeros_len, sizeof(int32_t));
    if (node->zeros == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "reference node template");
    if (st == MSTAR_OK)
        st = node_engine_create_runner(&node->eng, &ref_node__ops, node, configs, o->n_captures,
                                       o->num_slots);
    free(configs);
    return st;
}

mstar_status ref_node_create(mstar_backend *backend, const ref_node_options *opts, ref_node **out)
{
    if (backend == NULL || opts == NULL || out == NULL || (opts->n_captures > 0 && !opts->captures))
        return mstar_error_set(MSTAR_EINVAL, "reference node: NULL argument");
    ref_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference node");
    node->backend = backend;
    node->commit = true;
    mstar_status st = node_build(node, opts);
    if (st != MSTAR_OK) {
        ref_node_destroy(node);
        return mstar_error_wrap("reference node");
    }
    *out = node;
    return MSTAR_OK;
}

static void free_rows(ref_node *node)
{
    for (size_t i = 0; i < node->maps_made; i++)
        mstar_tensor_map_destroy(node->row_maps[i]);
    free(node->row_maps);
    free(node->real);
    free(node->padded);
    free(node->ids);
}

void ref_node_destroy(ref_node *node)
{
    if (node == NULL)
        return;
    node_engine_close(&node->eng);
    for (int i = 0; i < 2; i++) {
        if (node->staged[i] != NULL)
            mstar_event_synchronize(node->staged[i]);
        mstar_event_destroy(node->staged[i]);
        if (node->staging[i] != NULL)
            mstar_host_free_pinned(node->backend, node->staging[i]);
    }
    free_rows(node);
    mstar_kv_cache_destroy(node->kv);
    mstar_positions_destroy(node->pos);
    ref_model_destroy(node->model);
    mstar_stream_destroy(node->eng.stream);
    free(node->zeros);
    free(node);
}

mstar_status ref_node_capture(ref_node *node)
{
    return node_engine_capture(&node->eng, "reference node");
}

mstar_status ref_node_open(ref_node *node, int64_t request)
{
    return mstar_step_runner_ingest_request(node->eng.sr, request);
}

void ref_node_close(ref_node *node, int64_t request)
{
    mstar_step_runner_remove_request(node->eng.sr, request);
}

/* Room for a step of `rows` rows (real or padded). Each array is replaced as soon as it grew,
 * so a failure part way leaks nothing and leaves a usable (smaller) capacity. */
static mstar_status ensure_rows(ref_node *node, size_t rows)
{
    if (rows <= node->rows_cap)
        return MSTAR_OK;
    void *p;
    if ((p = realloc(node->row_maps, rows * sizeof(*node->row_maps))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference step of %zu rows", rows);
    node->row_maps = p;
    for (; node->maps_made < rows; node->maps_made++) {
        mstar_status st = mstar_tensor_map_create(&node->row_maps[node->maps_made]);
        if (st != MSTAR_OK)
            return st;
    }
    if ((p = realloc(node->real, rows * sizeof(*node->real))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference step of %zu rows", rows);
    node->real = p;
    if ((p = realloc(node->padded, rows * sizeof(*node->padded))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference step of %zu rows", rows);
    node->padded = p;
    if ((p = realloc(node->ids, rows * sizeof(*node->ids))) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference step of %zu rows", rows);
    node->ids = p;
    node->rows_cap = rows;
    return MSTAR_OK;
}

/* Declare the step over `ids` and `inputs`, with the context a replay (or an eager run) needs. */
static mstar_status declare(ref_node *node, const char *walk, const int64_t *ids,
                            const mstar_node_input *inputs, size_t count,
                            const mstar_slot_lease *lease)
{
    mstar_step_reset(node->eng.step);
    bool declared;
    mstar_status st = ref_node__declare(node, walk, ids, inputs, count, node->eng.step, &declared);
    if (st != MSTAR_OK)
        return st;
    node_engine_set_context(&node->eng, walk, ids, count, lease);
    return MSTAR_OK;
}

static mstar_status check_request(const ref_step_request *r, int64_t *total)
{
    *total =
        0; /* set on every path: callers pass it on only after OK, but gcc -O3 cannot see that */
    if (r == NULL || r->walk == NULL || r->rows == NULL || r->spans == NULL || r->tokens == NULL ||
        r->n < 1)
        return mstar_error_set(MSTAR_EINVAL, "reference step: needs a walk, and rows, spans and "
                                             "tokens for >= 1 rows");
    for (int32_t i = 0; i < r->n; i++) {
        if (r->spans[i] < 0)
            return mstar_error_set(MSTAR_EINVAL, "reference step: spans[%d] is %d", i, r->spans[i]);
        *total += r->spans[i];
    }
    return MSTAR_OK;
}

/* The step's rows: the real inputs (views of the caller's tokens), padded to the lease's bucket
 * when there is one; *inputs, *ids and *count are what declare and preprocess take. */
static mstar_status build_rows(ref_node *node, const ref_step_request *r,
                               const mstar_slot_lease *lease, const mstar_node_input **inputs,
                               const int64_t **ids, size_t *count)
{
    *count = lease != NULL ? (size_t)lease->bucket.bs : (size_t)r->n;
    mstar_status st = ensure_rows(node, *count);
    for (int32_t i = 0, at = 0; st == MSTAR_OK && i < r->n; at += r->spans[i], i++) {
        int64_t len = r->spans[i];
        mstar_tensor view;
        st = mstar_tensor_init(&view, (void *)(r->tokens + at), mstar_device_cpu(),
                               MSTAR_DTYPE_INT32, 1, &len);
        if (st == MSTAR_OK)
            st = mstar_tensor_map_set(node->row_maps[i], "tokens", &view);
        node->real[i] = (mstar_node_input){ len, node->row_maps[i] };
    }
    *inputs = node->real;
    *ids = r->rows;
    if (st != MSTAR_OK || lease == NULL)
        return st;
    st = mstar_graph_runner_pad_inputs(node->eng.runner, lease, node->real, (size_t)r->n,
                                       node->padded);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_step_ids(node->eng.runner, lease, r->rows, (size_t)r->n, node->ids);
    *inputs = node->padded;
    *ids = node->ids;
    return st;
}

/* Declare, admit, plan and preprocess the begun step. */
static mstar_status prepare(ref_node *node, ref_step_timing *t)
{
    const mstar_slot_lease *lease = node->leased ? &node->lease : NULL;
    const mstar_node_input *inputs;
    const int64_t *ids;
    size_t count;
    mstar_status st = build_rows(node, &node->cur, lease, &inputs, &ids, &count);
    if (st == MSTAR_OK)
        st = declare(node, node->cur.walk, ids, inputs, count, lease);
    if (st == MSTAR_OK)
        st = node_engine_admit_plan(&node->eng, "reference step");
    mstar_tensor_map_clear(node->eng.pre);
    if (st == MSTAR_OK)
        st = ref_node__preprocess(node, node->eng.step, inputs, count, node->eng.pre);
    t->bucket_rows = (int64_t)count;
    return st;
}

/* Copy the first n rows of the outputs to the caller and wait for them. */
static mstar_status collect(ref_node *node, const mstar_tensor_map *outputs, int32_t n,
                            float *logits, int32_t *next_tokens)
{
    if (logits == NULL && next_tokens == NULL)
        return MSTAR_OK;
    const mstar_tensor *l = outputs != NULL ? mstar_tensor_map_get(outputs, "logits") : NULL;
    const mstar_tensor *t = outputs != NULL ? mstar_tensor_map_get(outputs, "next_tokens") : NULL;
    if (l == NULL || t == NULL)
        return mstar_error_set(MSTAR_ESTATE, "reference step: the forward left no outputs");
    size_t vocab = (size_t)ref_model_config_of(node->model)->vocab;
    mstar_status st = MSTAR_OK;
    if (logits != NULL)
        st = mstar_memcpy_async(node->eng.stream, logits, mstar_tensor_ptr(l),
                                (size_t)n * vocab * sizeof(float), MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK && next_tokens != NULL)
        st = mstar_memcpy_async(node->eng.stream, next_tokens, mstar_tensor_ptr(t),
                                (size_t)n * sizeof(int32_t), MSTAR_MEMCPY_D2H);
    return st != MSTAR_OK ? st : mstar_stream_synchronize(node->eng.stream);
}

mstar_status ref_node_begin(ref_node *node, const ref_step_request *req, ref_step_timing *timing)
{
    if (node->begun)
        return mstar_error_set(MSTAR_ESTATE, "reference step: a step is already begun");
    int64_t total;
    mstar_status st = check_request(req, &total);
    if (st != MSTAR_OK)
        return st;
    ref_step_timing t = { .slot = -1 };
    uint64_t t0 = mstar__now_ns();
    node->cur = *req;
    node->leased =
        req->use_graphs && mstar_graph_runner_lease_slot(node->eng.runner, req->walk, req->n,
                                                         req->slot, total, NULL, &node->lease);
    uint64_t t1 = mstar__now_ns();
    node->begun = true;
    node->launched = false;
    node->outputs = NULL;
    node->commit = req->commit;
    st = prepare(node, &t);
    node->commit = true;
    if (timing != NULL) {
        t.replayed = node->leased;
        t.slot = node->leased ? node->lease.slot : -1;
        t.select_ns = t1 - t0;
        t.prepare_ns = mstar__now_ns() - t1;
        *timing = t;
    }
    if (st != MSTAR_OK)
        ref_node_end(node, NULL, NULL, NULL);
    return st;
}

mstar_status ref_node_launch(ref_node *node, ref_step_timing *timing)
{
    if (!node->begun)
        return mstar_error_set(MSTAR_ESTATE, "reference step: no step begun");
    uint64_t t0 = mstar__now_ns();
    mstar_status st =
        node_engine_launch(&node->eng, node->leased ? &node->lease : NULL, node->cur.plan_done,
                           ref_node__forward, node, &node->outputs);
    node->launched = st == MSTAR_OK;
    if (timing != NULL)
        timing->launch_ns = mstar__now_ns() - t0;
    return st;
}

mstar_status ref_node_end(ref_node *node, float *logits, int32_t *next_tokens,
                          ref_step_timing *timing)
{
    if (!node->begun)
        return mstar_error_set(MSTAR_ESTATE, "reference step: no step begun");
    uint64_t t0 = mstar__now_ns();
    mstar_status st = MSTAR_OK;
    if (node->launched)
        st = collect(node, node->outputs, node->cur.n, logits, next_tokens);
    st = node_engine_finish(&node->eng, st, node->launched, node->leased ? &node->lease : NULL,
                            node->cur.n);
    node->begun = false;
    node->leased = false;
    node->launched = false;
    node->outputs = NULL;
    if (timing != NULL)
        timing->finish_ns = mstar__now_ns() - t0;
    return st;
}

mstar_status ref_node_step(ref_node *node, const ref_step_request *req, float *logits,
                           int32_t *next_tokens, ref_step_timing *timing)
{
    ref_step_timing t = { .slot = -1 };
    mstar_status st = ref_node_begin(node, req, &t);
    if (st != MSTAR_OK)
        return st; /* begin ended it */
    st = ref_node_launch(node, &t);
    mstar_status ended = ref_node_end(node, logits, next_tokens, &t);
    if (timing != NULL)
        *timing = t;
    return st != MSTAR_OK ? st : ended;
}

mstar_status ref_node_preplan(ref_node *node, const ref_step_request *req, mstar_event *plan_done,
                              int32_t *slot)
{
    if (node->begun)
        return mstar_error_set(MSTAR_ESTATE, "reference pre-plan: end the begun step first");
    int64_t total;
    mstar_status st = check_request(req, &total);
    if (st != MSTAR_OK)
        return st;
    mstar_slot_lease lease;
    if (!mstar_graph_runner_lease_slot(node->eng.runner, req->walk, req->n, req->slot, total, NULL,
                                       &lease))
        return mstar_error_set(MSTAR_ENOENT,
                               "reference pre-plan: no captured bucket on walk "
                               "'%s' for %d rows",
                               req->walk, req->n);
    const mstar_node_input *inputs;
    const int64_t *ids;
    size_t count;
    mstar_step_admit_result admitted;
    node->commit = req->commit;
    st = build_rows(node, req, &lease, &inputs, &ids, &count);
    if (st == MSTAR_OK)
        st = declare(node, req->walk, ids, inputs, count, &lease);
    if (st == MSTAR_OK)
        st = mstar_step_runner_pre_admit(node->eng.sr, node->eng.step, &admitted);
    if (st == MSTAR_OK && !admitted.ok)
        st = mstar_error_set(MSTAR_ENOSPC, "reference pre-plan: %s", admitted.reason);
    if (st == MSTAR_OK)
        st = mstar_step_runner_pre_plan(node->eng.sr, node->eng.step, plan_done);
    node->commit = true;
    if (st != MSTAR_OK) {
        mstar_step_runner_clear_preplan(node->eng.sr, lease.slot);
        mstar_graph_runner_release(node->eng.runner, &lease, req->n);
        return st;
    }
    *slot = lease.slot;
    return MSTAR_OK;
}

mstar_status ref_node_drop_preplan(ref_node *node, const ref_step_request *req, int32_t slot)
{
    int64_t total;
    mstar_status st = check_request(req, &total);
    if (st != MSTAR_OK)
        return st;
    mstar_slot_lease lease;
    if (slot < 0 || !mstar_graph_runner_lease_slot(node->eng.runner, req->walk, req->n, slot, total,
                                                   NULL, &lease))
        return mstar_error_set(MSTAR_EINVAL,
                               "reference drop pre-plan: slot %d on walk '%s' "
                               "names no lease",
                               slot, req->walk);
    mstar_step_runner_clear_preplan(node->eng.sr, slot);
    return mstar_graph_runner_release(node->eng.runner, &lease, req->n);
}

ref_model *ref_node_model(ref_node *node)
{
    return node->model;
}

mstar_kv_cache *ref_node_kv(ref_node *node)
{
    return node->kv;
}

mstar_positions *ref_node_positions(ref_node *node)
{
    return node->pos;
}

mstar_stream *ref_node_stream(ref_node *node)
{
    return node->eng.stream;
}

mstar_step_runner *ref_node_step_runner(ref_node *node)
{
    return node->eng.sr;
}

mstar_graph_runner *ref_node_runner(ref_node *node)
{
    return node->eng.runner;
}
