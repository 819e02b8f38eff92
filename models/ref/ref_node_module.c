/*
 * ref_node_module.c — the reference model as the submodule a graph runner drives (see
 * ref_node.h): declare_step (a segment per row and both resources' payloads), preprocess (the
 * rows' tokens packed into one device tensor through pinned staging, or straight into a replay's
 * static input), forward (the model against the slot's plan), and the template rows and configs
 * the runner captures with. ref_node.c holds the node's lifetime and the engine's side of a step.
 */
#include "ref_node_internal.h"

#include <stdlib.h>
#include <string.h>

mstar_status ref_node__declare(void *self, const char *walk, const int64_t *ids,
                               const mstar_node_input *inputs, size_t n, mstar_step *step,
                               bool *declared)
{
    ref_node *node = self;
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar_step_add_segment(step, ids[i], 0, inputs[i].seq_len);
        if (st != MSTAR_OK)
            return st;
    }
    mstar_resource_payload p = { .commit = node->commit };
    mstar_status st = mstar_step_set_resource(step, REF_NODE_KV_KEY, &p, sizeof(p));
    if (st == MSTAR_OK)
        st = mstar_step_set_resource(step, REF_NODE_POS_KEY, &p, sizeof(p));
    *declared = st == MSTAR_OK;
    return st;
}

/* The staging buffer to fill next, holding at least `count` ids, once its last upload is read. */
static mstar_status staging_next(ref_node *node, int64_t count, int32_t **out)
{
    mstar_status st;
    if (count > node->staging_cap) {
        int64_t cap = count > 2 * node->staging_cap ? count : 2 * node->staging_cap;
        for (int i = 0; i < 2; i++) {
            if ((st = mstar_event_synchronize(node->staged[i])) != MSTAR_OK)
                return st;
            mstar_host_free_pinned(node->backend, node->staging[i]);
            node->staging[i] = NULL;
        }
        node->staging_cap = 0;
        for (int i = 0; i < 2; i++) {
            st = mstar_host_alloc_pinned(node->backend, (size_t)cap * sizeof(int32_t),
                                         (void **)&node->staging[i]);
            if (st != MSTAR_OK)
                return mstar_error_wrap("preprocess staging of %lld tokens", (long long)cap);
        }
        node->staging_cap = cap;
    }
    node->which ^= 1;
    if ((st = mstar_event_synchronize(node->staged[node->which])) != MSTAR_OK)
        return st;
    *out = node->staging[node->which];
    return MSTAR_OK;
}

/* Row i's token ids, checked: an int32 host vector of seq_len ids in the vocabulary. */
static mstar_status row_tokens(const ref_node *node, const mstar_node_input *in, size_t i,
                               const int32_t **out)
{
    const mstar_tensor *t =
        in->tensors != NULL ? mstar_tensor_map_get(in->tensors, "tokens") : NULL;
    if (t == NULL || t->dtype != MSTAR_DTYPE_INT32 || t->ndim != 1 || t->shape[0] != in->seq_len ||
        t->device.type != MSTAR_DEVICE_CPU || (in->seq_len > 1 && t->strides[0] != 1))
        return mstar_error_set(MSTAR_EINVAL,
                               "reference model: row %zu needs a contiguous host int32 'tokens' "
                               "tensor of its %lld tokens",
                               i, (long long)in->seq_len);
    const int32_t *ids = mstar_tensor_ptr(t);
    int32_t vocab = ref_model_config_of(node->model)->vocab;
    for (int64_t j = 0; j < in->seq_len; j++) {
        if (ids[j] < 0 || ids[j] >= vocab)
            return mstar_error_set(MSTAR_EINVAL,
                                   "reference model: row %zu token %lld is %d, not "
                                   "in [0, %d)",
                                   i, (long long)j, ids[j], vocab);
    }
    *out = ids;
    return MSTAR_OK;
}

mstar_status ref_node__preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                                  size_t n, mstar_tensor_map *out)
{
    ref_node *node = self;
    mstar_stream *s = mstar_step_context(step)->stream;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += inputs[i].seq_len > 0 ? inputs[i].seq_len : 0;
    if (total < 1 || total > INT32_MAX)
        return mstar_error_set(MSTAR_EINVAL, "reference model: a step of %lld tokens",
                               (long long)total);
    int32_t *host = NULL;
    mstar_status st = staging_next(node, total, &host);
    int64_t at = 0;
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        const int32_t *ids = NULL;
        if (inputs[i].seq_len <= 0)
            continue;
        if ((st = row_tokens(node, &inputs[i], i, &ids)) == MSTAR_OK) {
            memcpy(host + at, ids, (size_t)inputs[i].seq_len * sizeof(int32_t));
            at += inputs[i].seq_len;
        }
    }
    if (st != MSTAR_OK)
        return st;
    /* A replay's tokens go straight into the buffer its graph reads, so run_forward stages
     * nothing (the upload is this step's either way). Captures and eager steps get their own. */
    const mstar_step_ctx *ctx = mstar_step_context(step);
    bool in_place = ctx->has_lease && !ctx->capture;
    mstar_tensor t;
    st = in_place
             ? mstar_graph_runner_static_input(node->eng.runner, &ctx->lease, "tokens", total, &t)
             : mstar_tensor_alloc(s, MSTAR_DTYPE_INT32, 1, &total, &t);
    if (st != MSTAR_OK)
        return st;
    if ((st = mstar_memcpy_async(s, mstar_tensor_ptr(&t), host, (size_t)total * sizeof(int32_t),
                                 MSTAR_MEMCPY_H2D)) == MSTAR_OK)
        st = mstar_event_record(node->staged[node->which], s);
    if (in_place)
        return st == MSTAR_OK ? mstar_tensor_map_set(out, "tokens", &t) : st;
    if (st != MSTAR_OK) {
        mstar_tensor_free(s, &t);
        return st;
    }
    return mstar_tensor_map_set_owned(out, "tokens", &t, s);
}

mstar_status ref_node__forward(void *self, mstar_step *step, const mstar_tensor_map *inputs,
                               mstar_tensor_map *outputs)
{
    ref_node *node = self;
    mstar_step_ctx *ctx = mstar_step_context(step);
    const mstar_tensor *tokens = mstar_tensor_map_get(inputs, "tokens");
    if (tokens == NULL || tokens->dtype != MSTAR_DTYPE_INT32 || tokens->ndim != 1)
        return mstar_error_set(MSTAR_EINVAL, "reference model: forward needs an int32 'tokens' "
                                             "vector");
    int64_t rows = (int64_t)ctx->n_requests, vocab = ref_model_config_of(node->model)->vocab;
    if (rows < 1 || rows > INT32_MAX || tokens->shape[0] > INT32_MAX)
        return mstar_error_set(MSTAR_ERANGE, "reference model: forward of %lld rows, %lld tokens",
                               (long long)rows, (long long)tokens->shape[0]);
    int32_t slot = ctx->has_lease && ctx->slot >= 0 ? ctx->slot : MSTAR_PLAN_EAGER;
    size_t nseg;
    const mstar_step_segment *seg = mstar_step_segments(step, &nseg);
    ref_forward_io io = { .num_tokens = (int32_t)tokens->shape[0],
                          .num_rows = (int32_t)rows,
                          .tokens = mstar_tensor_ptr(tokens),
                          .one_token_per_row =
                              ref_step_one_token_per_row(seg, nseg, rows, tokens->shape[0]) };
    int32_t *positions, capacity;
    mstar_status st = mstar_kv_cache_plan_buffers(node->kv, slot, 0, &io.plan);
    if (st == MSTAR_OK)
        st = mstar_positions_plan_buffer(node->pos, slot, &positions, &capacity);
    if (st != MSTAR_OK)
        return mstar_error_wrap("reference model forward");
    io.positions = positions;
    int64_t logits_shape[2] = { rows, vocab };
    mstar_tensor logits = { 0 }, next = { 0 };
    if ((st = mstar_tensor_alloc(ctx->stream, MSTAR_DTYPE_FLOAT32, 2, logits_shape, &logits)) !=
            MSTAR_OK ||
        (st = mstar_tensor_alloc(ctx->stream, MSTAR_DTYPE_INT32, 1, &rows, &next)) != MSTAR_OK)
        goto fail;
    io.logits = logits.data;
    io.next_tokens = next.data;
    if ((st = ref_model_forward(node->model, ctx->stream, &io)) != MSTAR_OK ||
        (st = mstar_tensor_map_set_owned(outputs, "logits", &logits, ctx->stream)) != MSTAR_OK)
        goto fail;
    logits.data = NULL; /* the map owns it now */
    if ((st = mstar_tensor_map_set_owned(outputs, "next_tokens", &next, ctx->stream)) != MSTAR_OK)
        goto fail;
    return MSTAR_OK;
fail:
    if (logits.data != NULL)
        mstar_tensor_free(ctx->stream, &logits);
    if (next.data != NULL)
        mstar_tensor_free(ctx->stream, &next);
    return st;
}

const mstar_submodule_ops ref_node__ops = { ref_node__declare, ref_node__preprocess,
                                            ref_node__forward };

/* A template row of `len` tokens: token 0, a valid id, from the node's zeros. */
static mstar_status make_row(void *user, mstar_stream *stream, int64_t len, mstar_tensor_map *out)
{
    ref_node *node = user;
    if (len < 0 || len > node->zeros_len)
        return mstar_error_set(MSTAR_ERANGE, "reference model: a template row of %lld tokens",
                               (long long)len);
    mstar_tensor t;
    mstar_status st =
        mstar_tensor_init(&t, node->zeros, mstar_device_cpu(), MSTAR_DTYPE_INT32, 1, &len);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "tokens", &t);
}

/* The runner's configs for the captures (the runner copies them). */
mstar_status ref_node__make_configs(ref_node *node, const ref_node_options *o,
                                    mstar_graph_config **out)
{
    mstar_graph_config *c = calloc(o->n_captures, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference node configs");
    node->zeros_len = 1;
    for (size_t i = 0; i < o->n_captures; i++) {
        const ref_capture_config *rc = &o->captures[i];
        mstar_graph_config_init(&c[i]);
        c[i].kind = rc->packed ? MSTAR_GRAPH_PACKED : MSTAR_GRAPH_BATCHED;
        c[i].capture_graph_walk = rc->walk;
        c[i].capture_batch_sizes = rc->batch_sizes;
        c[i].n_capture_batch_sizes = rc->n_batch_sizes;
        c[i].seq_len = 1;
        c[i].capture_token_lengths = rc->token_lengths;
        c[i].n_capture_token_lengths = rc->n_token_lengths;
        c[i].make_node_input = make_row;
        c[i].template_user = node;
        for (size_t j = 0; rc->packed && j < rc->n_token_lengths; j++)
            node->zeros_len =
                rc->token_lengths[j] > node->zeros_len ? rc->token_lengths[j] : node->zeros_len;
    }
    *out = c;
    return MSTAR_OK;
}
