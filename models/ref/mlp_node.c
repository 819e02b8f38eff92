/*
 * mlp_node.c — the mlp bench model as a graph-runner node (see mlp_node.h): the node's lifetime,
 * the submodule the runner drives (declare a segment per row, preprocess the rows' state into
 * "x", forward the model into "y") and the engine's side of a step (lease, pad, declare, admit,
 * plan, preprocess, replay or run eager, collect, commit, release), as ref_node.c does for the
 * reference decoder, without its KV cache.
 */
#include "mlp_node.h"

#include "node_engine.h"
#include "ref_model.h"

#include <stdlib.h>
#include <string.h>

#define WALK "mlp"

struct mlp_node {
    mstar_backend *backend;
    node_engine eng; /* stream, step runner, pool, runner, step and maps */
    ref_mlp *model;
    mstar_dtype dtype;
    int64_t hidden;
    size_t row_bytes;
    int32_t max_rows;
    char *state;    /* device [max_rows, hidden] */
    char *template; /* device [1, hidden] of zeros: the capture's and the padding's row */
    /* The per-step rows, max_rows each. */
    mstar_tensor_map **row_maps;
    mstar_node_input *real, *padded;
    int64_t *ids, *step_ids;
    /* The step begun and not ended. */
    bool begun, leased, launched;
    int32_t n;
    mstar_slot_lease lease;
    const mstar_tensor_map *outputs;
};

static mstar_status declare_step(void *self, const char *walk, const int64_t *ids,
                                 const mstar_node_input *inputs, size_t n, mstar_step *step,
                                 bool *declared)
{
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; st == MSTAR_OK && i < n; i++)
        st = mstar_step_add_segment(step, ids[i], 0, inputs[i].seq_len);
    *declared = st == MSTAR_OK;
    return st;
}

/* Row i's state on the device, checked: one row of the model's dtype and width. A padding row
 * (the template cut to length 0) still has a row in the batch: it gets the template's zeros. */
static mstar_status row_of(const mlp_node *node, const mstar_node_input *in, size_t i,
                           const char **out)
{
    if (in->seq_len == 0) {
        *out = node->template;
        return MSTAR_OK;
    }
    const mstar_tensor *x = mstar_tensor_map_get(in->tensors, "x");
    if (x == NULL || x->dtype != node->dtype || x->ndim != 2 || x->shape[0] != 1 ||
        x->shape[1] != node->hidden)
        return mstar_error_set(MSTAR_EINVAL, "mlp node: row %zu has no [1, %lld] %s \"x\"", i,
                               (long long)node->hidden, mstar_dtype_name(node->dtype));
    *out = mstar_tensor_ptr(x);
    return MSTAR_OK;
}

/* Copy the n rows' state into dst, one copy per run of rows adjacent in the state. */
static mstar_status gather(mlp_node *node, mstar_stream *s, const mstar_node_input *inputs,
                           size_t n, char *dst)
{
    const char *run = NULL;
    size_t run_rows = 0, at = 0;
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; st == MSTAR_OK && i <= n; i++) {
        const char *src = NULL;
        if (i < n && (st = row_of(node, &inputs[i], i, &src)) != MSTAR_OK)
            break;
        if (run != NULL && src == run + run_rows * node->row_bytes) {
            run_rows++;
            continue;
        }
        if (run != NULL) {
            st = mstar_memcpy_async(s, dst + at * node->row_bytes, run, run_rows * node->row_bytes,
                                    MSTAR_MEMCPY_D2D);
            at += run_rows;
        }
        run = src;
        run_rows = 1;
    }
    return st;
}

/* x [n, hidden]: written straight into the slot's static input for a replay (staging then
 * copies nothing), into a tensor of the step's own otherwise. */
static mstar_status preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                               size_t n, mstar_tensor_map *out)
{
    mlp_node *node = self;
    const mstar_step_ctx *ctx = mstar_step_context(step);
    mstar_stream *s = ctx->stream;
    bool in_place = ctx->has_lease && !ctx->capture;
    int64_t shape[2] = { (int64_t)n, node->hidden };
    mstar_tensor x;
    mstar_status st = in_place ? mstar_graph_runner_static_input(node->eng.runner, &ctx->lease, "x",
                                                                 (int64_t)n, &x)
                               : mstar_tensor_alloc(s, node->dtype, 2, shape, &x);
    if (st != MSTAR_OK)
        return st;
    st = gather(node, s, inputs, n, mstar_tensor_ptr(&x));
    if (in_place)
        return st == MSTAR_OK ? mstar_tensor_map_set(out, "x", &x) : st;
    if (st != MSTAR_OK) {
        mstar_tensor_free(s, &x);
        return st;
    }
    return mstar_tensor_map_set_owned(out, "x", &x, s);
}

static mstar_status forward(void *self, mstar_step *step, const mstar_tensor_map *in,
                            mstar_tensor_map *out)
{
    mlp_node *node = self;
    mstar_stream *s = mstar_step_context(step)->stream;
    const mstar_tensor *x = mstar_tensor_map_get(in, "x");
    if (x == NULL || x->ndim != 2 || x->shape[1] != node->hidden)
        return mstar_error_set(MSTAR_EINVAL, "mlp forward: no [n, %lld] \"x\"",
                               (long long)node->hidden);
    mstar_tensor y;
    mstar_status st = mstar_tensor_alloc(s, node->dtype, 2, x->shape, &y);
    if (st != MSTAR_OK)
        return st;
    st = ref_mlp_forward(node->model, s, mstar_tensor_ptr(x), x->shape[0], mstar_tensor_ptr(&y));
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "y", &y, s);
    mstar_tensor_free(s, &y);
    return st;
}

static const mstar_submodule_ops mlp_ops = { declare_step, preprocess, forward };

/* The template row: zeros. */
static mstar_status make_row(void *user, mstar_stream *s, int64_t len, mstar_tensor_map *out)
{
    mlp_node *node = user;
    if (len != 1)
        return mstar_error_set(MSTAR_ERANGE, "mlp node: a template row of %lld tokens",
                               (long long)len);
    int64_t shape[2] = { 1, node->hidden };
    mstar_tensor t;
    mstar_status st = mstar_tensor_init(&t, node->template, mstar_backend_device(node->backend),
                                        node->dtype, 2, shape);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "x", &t);
}

/* The state's values (uniform in [-1, 1)) and the template's zeros, on the device. */
static mstar_status fill_state(mlp_node *node)
{
    size_t count = (size_t)node->max_rows * (size_t)node->hidden;
    float *host = malloc(count * sizeof(float));
    if (host == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp node: %zu state values", count);
    uint64_t rng = ref_mlp_config_of(node->model)->seed + 1;
    ref_fill_uniform(host, count, 0.0f, 1.0f, &rng);
    mstar_status st = ref_upload_f32(node->eng.stream, node->state, host, count, node->dtype);
    free(host);
    if (st == MSTAR_OK)
        st = mstar_memset_async(node->eng.stream, node->template, 0, node->row_bytes);
    mstar_status sync = mstar_stream_synchronize(node->eng.stream);
    return st != MSTAR_OK ? st : sync;
}

/* The per-step scratch and each row's view of its state. */
static mstar_status make_rows(mlp_node *node)
{
    size_t n = (size_t)node->max_rows;
    node->row_maps = calloc(n, sizeof(*node->row_maps));
    node->real = calloc(n, sizeof(*node->real));
    node->padded = calloc(n, sizeof(*node->padded));
    node->ids = calloc(n, sizeof(*node->ids));
    node->step_ids = calloc(n, sizeof(*node->step_ids));
    if (node->row_maps == NULL || node->real == NULL || node->padded == NULL || node->ids == NULL ||
        node->step_ids == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp node: %zu rows", n);
    int64_t shape[2] = { 1, node->hidden };
    mstar_status st = MSTAR_OK;
    for (size_t i = 0; st == MSTAR_OK && i < n; i++) {
        mstar_tensor t;
        if ((st = mstar_tensor_map_create(&node->row_maps[i])) == MSTAR_OK &&
            (st = mstar_tensor_init(&t, node->state + i * node->row_bytes,
                                    mstar_backend_device(node->backend), node->dtype, 2, shape)) ==
                MSTAR_OK)
            st = mstar_tensor_map_set(node->row_maps[i], "x", &t);
        node->real[i] = (mstar_node_input){ 1, node->row_maps[i] };
        node->ids[i] = (int64_t)i;
    }
    return st;
}

static mstar_status node_build(mlp_node *node, const mlp_node_options *o)
{
    mstar_status st;
    if ((st = node_engine_open(&node->eng, node->backend, "mlp_model")) != MSTAR_OK ||
        (st = ref_mlp_create(&o->model, node->backend, &node->model)) != MSTAR_OK)
        return st;
    node->dtype = ref_mlp_dtype(node->model);
    node->hidden = o->model.hidden;
    node->row_bytes = (size_t)o->model.hidden * mstar_dtype_size(node->dtype);
    node->max_rows = o->max_rows;
    if ((st = mstar_device_alloc(node->backend, (size_t)o->max_rows * node->row_bytes,
                                 (void **)&node->state)) != MSTAR_OK ||
        (st = mstar_device_alloc(node->backend, node->row_bytes, (void **)&node->template)) !=
            MSTAR_OK ||
        (st = fill_state(node)) != MSTAR_OK || (st = make_rows(node)) != MSTAR_OK)
        return st;
    mstar_graph_config c;
    mstar_graph_config_init(&c);
    c.capture_graph_walk = WALK;
    c.capture_batch_sizes = o->batch_sizes;
    c.n_capture_batch_sizes = o->n_batch_sizes;
    c.seq_len = 1;
    c.make_node_input = make_row;
    c.template_user = node;
    return node_engine_create_runner(&node->eng, &mlp_ops, node, &c, 1, 0);
}

mstar_status mlp_node_create(mstar_backend *backend, const mlp_node_options *o, mlp_node **out)
{
    if (backend == NULL || o == NULL || out == NULL || (o->n_batch_sizes > 0 && !o->batch_sizes))
        return mstar_error_set(MSTAR_EINVAL, "mlp node: NULL argument");
    bool fits = o->max_rows >= 1 && o->max_rows <= 1 << 16;
    for (size_t i = 0; fits && i < o->n_batch_sizes; i++)
        fits = o->batch_sizes[i] >= 1 && o->batch_sizes[i] <= o->max_rows;
    if (!fits)
        return mstar_error_set(MSTAR_EINVAL,
                               "mlp node: %d rows must be in [1, 65536] and hold "
                               "every batch size",
                               o->max_rows);
    mlp_node *node = calloc(1, sizeof(*node));
    if (node == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp node");
    node->backend = backend;
    mstar_status st = node_build(node, o);
    if (st != MSTAR_OK) {
        mlp_node_destroy(node);
        return mstar_error_wrap("mlp node");
    }
    *out = node;
    return MSTAR_OK;
}

void mlp_node_destroy(mlp_node *node)
{
    if (node == NULL)
        return;
    node_engine_close(&node->eng);
    for (int32_t i = 0; node->row_maps != NULL && i < node->max_rows; i++)
        mstar_tensor_map_destroy(node->row_maps[i]);
    free(node->row_maps);
    free(node->real);
    free(node->padded);
    free(node->ids);
    free(node->step_ids);
    if (node->state != NULL)
        mstar_device_free(node->backend, node->state);
    if (node->template != NULL)
        mstar_device_free(node->backend, node->template);
    ref_mlp_destroy(node->model);
    mstar_stream_destroy(node->eng.stream);
    free(node);
}

mstar_status mlp_node_capture(mlp_node *node)
{
    return node_engine_capture(&node->eng, "mlp node");
}

ref_mlp *mlp_node_model(mlp_node *node)
{
    return node->model;
}

mstar_stream *mlp_node_stream(mlp_node *node)
{
    return node->eng.stream;
}

mstar_graph_runner *mlp_node_runner(mlp_node *node)
{
    return node->eng.runner;
}

/* Rows of the model's dtype on the device → fp32 on the host; waits. */
static mstar_status read_rows(mlp_node *node, const void *src, size_t rows, float *out)
{
    size_t count = rows * (size_t)node->hidden;
    if (node->dtype == MSTAR_DTYPE_FLOAT32) {
        mstar_status st =
            mstar_memcpy_async(node->eng.stream, out, src, count * sizeof(float), MSTAR_MEMCPY_D2H);
        return st != MSTAR_OK ? st : mstar_stream_synchronize(node->eng.stream);
    }
    uint16_t *narrow = malloc(count * sizeof(uint16_t));
    if (narrow == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp node: %zu values", count);
    mstar_status st = mstar_memcpy_async(node->eng.stream, narrow, src, count * sizeof(uint16_t),
                                         MSTAR_MEMCPY_D2H);
    mstar_status sync = mstar_stream_synchronize(node->eng.stream);
    st = st != MSTAR_OK ? st : sync;
    if (st == MSTAR_OK)
        ref_bf16_to_f32(narrow, out, count);
    free(narrow);
    return st;
}

mstar_status mlp_node_read_state(mlp_node *node, int32_t row, float *out)
{
    if (row < 0 || row >= node->max_rows)
        return mstar_error_set(MSTAR_ERANGE, "mlp node: row %d, not in [0, %d)", row,
                               node->max_rows);
    return read_rows(node, node->state + (size_t)row * node->row_bytes, 1, out);
}

/* Declare, admit, plan and preprocess the begun step over `count` rows. */
static mstar_status prepare(mlp_node *node, const mstar_node_input *inputs, const int64_t *ids,
                            size_t count)
{
    mstar_step_reset(node->eng.step);
    bool declared;
    mstar_status st = declare_step(node, WALK, ids, inputs, count, node->eng.step, &declared);
    if (st != MSTAR_OK)
        return st;
    node_engine_set_context(&node->eng, WALK, ids, count, node->leased ? &node->lease : NULL);
    st = node_engine_admit_plan(&node->eng, "mlp step");
    mstar_tensor_map_clear(node->eng.pre);
    return st != MSTAR_OK ? st : preprocess(node, node->eng.step, inputs, count, node->eng.pre);
}

mstar_status mlp_node_begin(mlp_node *node, int32_t first, int32_t n, bool use_graphs, int32_t slot,
                            bool *replayed)
{
    if (node->begun)
        return mstar_error_set(MSTAR_ESTATE, "mlp step: a step is already begun");
    if (n < 1 || first < 0 || first > node->max_rows - n)
        return mstar_error_set(MSTAR_ERANGE, "mlp step: rows [%d, +%d) of %d", first, n,
                               node->max_rows);
    node->leased = use_graphs && mstar_graph_runner_lease_slot(node->eng.runner, WALK, n, slot, n,
                                                               NULL, &node->lease);
    node->begun = true;
    node->launched = false;
    node->outputs = NULL;
    node->n = n;
    const mstar_node_input *inputs = node->real + first;
    const int64_t *ids = node->ids + first;
    size_t count = (size_t)n;
    mstar_status st = MSTAR_OK;
    if (node->leased) {
        st = mstar_graph_runner_pad_inputs(node->eng.runner, &node->lease, inputs, count,
                                           node->padded);
        if (st == MSTAR_OK)
            st = mstar_graph_runner_step_ids(node->eng.runner, &node->lease, ids, count,
                                             node->step_ids);
        inputs = node->padded;
        ids = node->step_ids;
        count = (size_t)node->lease.bucket.bs;
    }
    if (st == MSTAR_OK)
        st = prepare(node, inputs, ids, count);
    if (replayed != NULL)
        *replayed = node->leased;
    if (st != MSTAR_OK)
        mlp_node_end(node, NULL);
    return st;
}

mstar_status mlp_node_launch(mlp_node *node)
{
    if (!node->begun)
        return mstar_error_set(MSTAR_ESTATE, "mlp step: no step begun");
    mstar_status st = node_engine_launch(&node->eng, node->leased ? &node->lease : NULL, NULL,
                                         forward, node, &node->outputs);
    node->launched = st == MSTAR_OK;
    return st;
}

mstar_status mlp_node_end(mlp_node *node, float *y)
{
    if (!node->begun)
        return mstar_error_set(MSTAR_ESTATE, "mlp step: no step begun");
    mstar_status st = MSTAR_OK;
    if (node->launched) {
        const mstar_tensor *t = mstar_tensor_map_get(node->outputs, "y");
        if (t == NULL)
            st = mstar_error_set(MSTAR_ESTATE, "mlp step: the forward left no \"y\"");
        else if (y != NULL)
            st = read_rows(node, mstar_tensor_ptr(t), (size_t)node->n, y);
    }
    st = node_engine_finish(&node->eng, st, node->launched, node->leased ? &node->lease : NULL,
                            node->n);
    node->begun = node->leased = node->launched = false;
    node->outputs = NULL;
    return st;
}

mstar_status mlp_node_step(mlp_node *node, int32_t first, int32_t n, bool use_graphs, float *y,
                           bool *replayed)
{
    mstar_status st = mlp_node_begin(node, first, n, use_graphs, -1, replayed);
    if (st != MSTAR_OK)
        return st;
    st = mlp_node_launch(node);
    mstar_status ended = mlp_node_end(node, y);
    return st != MSTAR_OK ? st : ended;
}

bool mlp_node_lease(const mlp_node *node, mstar_slot_lease *out)
{
    if (node->begun && node->leased)
        *out = node->lease;
    return node->begun && node->leased;
}
