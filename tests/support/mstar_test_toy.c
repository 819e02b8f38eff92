/*
 * mstar_test_toy.c — see mstar_test_toy.h.
 */
#include "mstar_test_toy.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WALK     "decode"
#define MAX_ROWS 64
#define NODE_BUF 512

struct mstar_test_toy {
    mstar_test_toy_options o;
    char name[64];
    mstar_backend *backend;
    mstar_stream *stream;
    mstar_graph_pool *pool;
    mstar_step_runner *sr;
    mstar_graph_runner *runner;
    mstar_piecewise_runner *region;
    float *template_row; /* host memory: what capture rows carry */
    int fail_warmups;    /* warm-ups of o.fail_last_warmup_bs so far */
    atomic_llong collectives, bad_collectives;
};

struct collective_args {
    mstar_test_toy *t;
    int64_t rows;
};

/* On the stream: every rank's forward of the same step has the same row count. */
static void collective_kernel(void *p)
{
    struct collective_args *a = p;
    int64_t v = a->rows;
    if (mstar_agree_across_ranks(a->t->o.collective, &v, 1, MSTAR_REDUCE_MAX) != MSTAR_OK ||
        v != a->rows)
        atomic_fetch_add(&a->t->bad_collectives, 1);
    atomic_fetch_add(&a->t->collectives, 1);
}

void mstar_test_toy_collectives(const mstar_test_toy *toy, int64_t *run, int64_t *bad)
{
    *run = atomic_load(&toy->collectives);
    *bad = atomic_load(&toy->bad_collectives);
}

static mstar_status declare_step(void *self, const char *walk, const int64_t *ids,
                                 const mstar_node_input *inputs, size_t n, mstar_step *step,
                                 bool *declared)
{
    (void)self;
    (void)walk;
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar_step_add_segment(step, ids[i], 0, inputs[i].seq_len);
        if (st != MSTAR_OK)
            return st;
    }
    *declared = true;
    return MSTAR_OK;
}

/* x: [rows with a token, row_floats], copied in from each row's host tensor. */
static mstar_status preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                               size_t n, mstar_tensor_map *out)
{
    mstar_test_toy *t = self;
    mstar_stream *s = mstar_step_context(step)->stream;
    int64_t shape[2] = { 0, t->o.row_floats };
    for (size_t i = 0; i < n; i++)
        shape[0] += inputs[i].seq_len;
    mstar_tensor x;
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 2, shape, &x);
    size_t row_bytes = (size_t)t->o.row_floats * sizeof(float);
    for (size_t i = 0, k = 0; st == MSTAR_OK && i < n; i++) {
        if (inputs[i].seq_len == 0)
            continue;
        const mstar_tensor *row = mstar_tensor_map_get(inputs[i].tensors, "x");
        st = mstar_memcpy_async(s, (char *)x.data + k++ * row_bytes, mstar_tensor_ptr(row),
                                row_bytes, MSTAR_MEMCPY_H2D);
    }
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "x", &x, s);
    mstar_tensor_free(s, &x);
    return st;
}

/* y = x by a device copy; a scratch of scratch_per_row × rows set and given back; extra_nodes
 * more memsets on a small buffer. The whole forward and the region both run this. */
static mstar_status copy_rows(mstar_test_toy *t, mstar_stream *s, const mstar_tensor *x,
                              bool capture, mstar_tensor_map *out)
{
    int64_t rows = x->shape[0];
    if (capture && mstar_stream_is_capturing(s) && rows == t->o.fail_capture_bs)
        return mstar_error_set(MSTAR_EDEVICE, "toy: injected capture failure at bs %lld",
                               (long long)rows);
    mstar_tensor y;
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 2, x->shape, &y);
    if (st != MSTAR_OK)
        return st;
    void *scratch = NULL, *small = NULL;
    st = mstar_memcpy_async(s, y.data, mstar_tensor_ptr(x), mstar_tensor_nbytes(x),
                            MSTAR_MEMCPY_D2D);
    if (st == MSTAR_OK && t->o.scratch_per_row > 0 && rows > 0) {
        size_t bytes = (size_t)rows * t->o.scratch_per_row;
        st = mstar_alloc(s, bytes, &scratch);
        if (st == MSTAR_OK)
            st = mstar_memset_async(s, scratch, 0x5a, bytes);
    }
    if (st == MSTAR_OK && t->o.extra_nodes > 0)
        st = mstar_alloc(s, NODE_BUF, &small);
    for (int32_t i = 0; st == MSTAR_OK && i < t->o.extra_nodes; i++)
        st = mstar_memset_async(s, small, i & 0xff, NODE_BUF);
    if (scratch != NULL && mstar_free(s, scratch) != MSTAR_OK && st == MSTAR_OK)
        st = mstar_last_status();
    if (small != NULL && mstar_free(s, small) != MSTAR_OK && st == MSTAR_OK)
        st = mstar_last_status();
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "y", &y, s);
    mstar_tensor_free(s, &y);
    return st;
}

static mstar_status forward(void *self, mstar_step *step, const mstar_tensor_map *in,
                            mstar_tensor_map *out)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    const mstar_tensor *x = mstar_tensor_map_get(in, "x");
    if (x == NULL)
        return mstar_error_set(MSTAR_EINVAL, "toy forward: no input x");
    mstar_test_toy *t = self;
    if (t->o.collective != NULL) {
        struct collective_args a = { t, x->shape[0] };
        mstar_status st = mstar_launch(ctx->stream, collective_kernel, &a, sizeof(a));
        if (st != MSTAR_OK)
            return st;
    }
    if (ctx->capture && !mstar_stream_is_capturing(ctx->stream) &&
        x->shape[0] == t->o.fail_last_warmup_bs &&
        ++t->fail_warmups == t->o.num_slots * MSTAR_NUM_WARMUP)
        return mstar_error_set(MSTAR_EDEVICE, "toy: injected warm-up failure at bs %lld",
                               (long long)x->shape[0]);
    return copy_rows(self, ctx->stream, x, ctx->capture, out);
}

static const mstar_submodule_ops toy_ops = { declare_step, preprocess, forward };

/* ---- the region ------------------------------------------------------------------------------ */

static mstar_status region_fn(void *user, const mstar_piecewise_call *call, mstar_tensor_map *out)
{
    return copy_rows(user, call->stream, mstar_tensor_map_get(call->static_inputs, "h"), true, out);
}

static mstar_status region_statics(void *user, const mstar_piecewise_shape *shape,
                                   mstar_stream *stream, mstar_tensor_map *out)
{
    mstar_test_toy *t = user;
    int64_t dims[2] = { shape->bs, t->o.row_floats };
    mstar_tensor h;
    mstar_status st = mstar_tensor_alloc(stream, MSTAR_DTYPE_FLOAT32, 2, dims, &h);
    if (st == MSTAR_OK)
        st = mstar_memset_async(stream, h.data, 0, mstar_tensor_nbytes(&h));
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "h", &h, stream);
    mstar_tensor_free(stream, &h);
    return st;
}

static mstar_status create_region(mstar_test_toy *t)
{
    mstar_piecewise_config c;
    mstar_piecewise_config_init(&c);
    c.capture_fn = region_fn;
    c.make_static_inputs = region_statics;
    c.user = t;
    c.capture_batch_sizes = t->o.batch_sizes;
    c.n_capture_batch_sizes = t->o.batch_sizes ? t->o.n_batch_sizes : 0;
    c.seq_len = 1;
    mstar_piecewise_runner_options o = { .label = "mlp",
                                         .config = &c,
                                         .step_runner = t->sr,
                                         .pool = t->pool,
                                         .num_slots = t->o.num_slots,
                                         .node_name = t->name };
    return mstar_piecewise_runner_create(&o, &t->region);
}

static mstar_status make_row(void *user, mstar_stream *s, int64_t len, mstar_tensor_map *out)
{
    (void)s;
    mstar_test_toy *t = user;
    int64_t shape[2] = { len, t->o.row_floats };
    mstar_tensor row;
    mstar_status st =
        mstar_tensor_init(&row, t->template_row, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "x", &row);
}

mstar_status mstar_test_toy_create(const mstar_test_toy_options *opts, mstar_test_toy **out)
{
    mstar_test_toy *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "toy: out of memory");
    t->o = *opts;
    if (t->o.num_slots == 0)
        t->o.num_slots = 2;
    snprintf(t->name, sizeof(t->name), "%s", opts->name ? opts->name : "toy");
    t->template_row = calloc((size_t)(opts->row_floats > 0 ? opts->row_floats : 1), sizeof(float));
    mstar_status st = t->template_row == NULL ? mstar_error_set(MSTAR_ENOMEM, "toy: out of memory")
                                              : mstar_backend_create(opts->device, &t->backend);
    for (int64_t i = 0; st == MSTAR_OK && i < opts->row_floats; i++)
        t->template_row[i] = 0.25f * (float)i;
    if (st == MSTAR_OK)
        st = mstar_stream_create(t->backend, MSTAR_STREAM_DEFAULT, &t->stream);
    if (st == MSTAR_OK)
        st = mstar_graph_pool_create(t->backend, t->name, &t->pool);
    if (st == MSTAR_OK)
        st = mstar_step_runner_create(t->backend, t->stream, &t->sr);
    if (st == MSTAR_OK) {
        mstar_graph_config c;
        mstar_graph_config_init(&c);
        c.capture_graph_walk = WALK;
        c.capture_batch_sizes = opts->batch_sizes;
        c.n_capture_batch_sizes = opts->batch_sizes ? opts->n_batch_sizes : 0;
        c.seq_len = 1;
        c.make_node_input = make_row;
        c.template_user = t;
        mstar_graph_runner_options ro = {
            t->name, &toy_ops, t, &c, 1, t->sr, t->pool, t->o.num_slots, MSTAR_DTYPE_INVALID
        };
        st = mstar_graph_runner_create(&ro, &t->runner);
    }
    if (st == MSTAR_OK && opts->region)
        st = create_region(t);
    if (st != MSTAR_OK) {
        mstar_test_toy_destroy(t);
        return st;
    }
    *out = t;
    return MSTAR_OK;
}

void mstar_test_toy_destroy(mstar_test_toy *t)
{
    if (t == NULL)
        return;
    mstar_piecewise_runner_destroy(t->region);
    mstar_graph_runner_destroy(t->runner);
    mstar_step_runner_destroy(t->sr);
    mstar_graph_pool_destroy(t->pool);
    mstar_stream_destroy(t->stream);
    mstar_backend_destroy(t->backend);
    free(t->template_row);
    free(t);
}

mstar_backend *mstar_test_toy_backend(mstar_test_toy *t)
{
    return t->backend;
}

mstar_step_runner *mstar_test_toy_step_runner(mstar_test_toy *t)
{
    return t->sr;
}

mstar_graph_runner *mstar_test_toy_runner(mstar_test_toy *t)
{
    return t->runner;
}

mstar_graph_pool *mstar_test_toy_pool(mstar_test_toy *t)
{
    return t->pool;
}

mstar_piecewise_runner *mstar_test_toy_region(mstar_test_toy *t)
{
    return t->region;
}

mstar_status mstar_test_toy_capture_startup(mstar_test_toy *t, mstar_rank_group *group,
                                            mstar_capture_report *rep)
{
    mstar_graph_runner *runners[1] = { t->runner };
    mstar_piecewise_runner *regions[1] = { t->region };
    mstar_capture_startup s = { .step_runner = t->sr,
                                .runners = runners,
                                .n_runners = 1,
                                .piecewise = regions,
                                .n_piecewise = t->region != NULL ? 1 : 0,
                                .group = group };
    return mstar_capture_startup_run(&s, rep);
}

mstar_status mstar_test_toy_region_step(mstar_test_toy *t, const float *x, int64_t n, float *y,
                                        bool *replayed)
{
    *replayed = t->region != NULL && mstar_piecewise_runner_can_run(t->region, n, -1);
    if (!*replayed)
        return MSTAR_OK;
    /* The rows arrive on the device, as a region's inputs do inside a forward. */
    int64_t dims[2] = { n, t->o.row_floats };
    mstar_tensor h;
    mstar_tensor_map *in = NULL;
    mstar_status st = mstar_tensor_alloc(t->stream, MSTAR_DTYPE_FLOAT32, 2, dims, &h);
    if (st != MSTAR_OK)
        return st;
    size_t bytes = mstar_tensor_nbytes(&h);
    st = mstar_memcpy_async(t->stream, h.data, x, bytes, MSTAR_MEMCPY_H2D);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&in);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_set(in, "h", &h);
    mstar_piecewise_output out;
    if (st == MSTAR_OK)
        st = mstar_piecewise_runner_run(t->region, in, NULL, NULL, 0, n, &out);
    mstar_tensor view;
    if (st == MSTAR_OK)
        st = mstar_piecewise_output_get_view(&out, "y", &view);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(t->stream, y, mstar_tensor_ptr(&view), bytes, MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(t->stream);
    mstar_tensor_map_destroy(in);
    mstar_tensor_free(t->stream, &h);
    return st;
}

/* Rows of n real inputs, each a [1, row_floats] view of the caller's x. */
static mstar_status real_rows(mstar_test_toy *t, const float *x, int64_t n, mstar_tensor_map **maps,
                              mstar_node_input *rows)
{
    int64_t shape[2] = { 1, t->o.row_floats };
    for (int64_t i = 0; i < n; i++) {
        mstar_tensor row;
        mstar_status st = mstar_tensor_map_create(&maps[i]);
        if (st == MSTAR_OK)
            st = mstar_tensor_init(&row, (void *)(x + i * t->o.row_floats), mstar_device_cpu(),
                                   MSTAR_DTYPE_FLOAT32, 2, shape);
        if (st == MSTAR_OK)
            st = mstar_tensor_map_set(maps[i], "x", &row);
        if (st != MSTAR_OK)
            return st;
        rows[i] = (mstar_node_input){ 1, maps[i] };
    }
    return MSTAR_OK;
}

static mstar_status run_eager(mstar_test_toy *t, mstar_step *step, const mstar_node_input *rows,
                              int64_t n, float *y)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->stream = t->stream;
    ctx->graph_walk = WALK;
    mstar_tensor_map *pre = NULL, *outs = NULL;
    mstar_status st = mstar_tensor_map_create(&pre);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&outs);
    if (st == MSTAR_OK)
        st = preprocess(t, step, rows, (size_t)n, pre);
    if (st == MSTAR_OK)
        st = forward(t, step, pre, outs);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(t->stream, y, mstar_tensor_map_get(outs, "y")->data,
                                (size_t)(n * t->o.row_floats) * sizeof(float), MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(t->stream);
    mstar_tensor_map_destroy(outs);
    mstar_tensor_map_destroy(pre);
    return st;
}

static mstar_status run_replay(mstar_test_toy *t, mstar_step *step, const mstar_slot_lease *lease,
                               const mstar_node_input *rows, int64_t n, float *y)
{
    mstar_node_input padded[MAX_ROWS];
    int64_t ids[MAX_ROWS], step_ids[MAX_ROWS];
    for (int64_t i = 0; i < n; i++)
        ids[i] = i;
    size_t bs = (size_t)lease->bucket.bs;
    mstar_status st = mstar_graph_runner_pad_inputs(t->runner, lease, rows, (size_t)n, padded);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_step_ids(t->runner, lease, ids, (size_t)n, step_ids);
    bool declared;
    if (st == MSTAR_OK)
        st = declare_step(t, WALK, step_ids, padded, bs, step, &declared);
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->request_ids = step_ids;
    ctx->n_requests = bs;
    ctx->graph_walk = WALK;
    ctx->slot = lease->slot;
    ctx->has_lease = true;
    ctx->lease = *lease;
    ctx->stream = t->stream;
    mstar_step_admit_result ar;
    if (st == MSTAR_OK)
        st = mstar_step_runner_admit(t->sr, step, &ar);
    if (st == MSTAR_OK)
        st = mstar_step_runner_plan(t->sr, step);
    mstar_tensor_map *pre = NULL;
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&pre);
    if (st == MSTAR_OK)
        st = preprocess(t, step, padded, bs, pre);
    const mstar_tensor_map *outs = NULL;
    if (st == MSTAR_OK)
        st = mstar_graph_runner_run_forward(t->runner, lease, pre, NULL, NULL, &outs);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(t->stream, y, mstar_tensor_map_get(outs, "y")->data,
                                (size_t)(n * t->o.row_floats) * sizeof(float), MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(t->stream);
    if (st == MSTAR_OK)
        st = mstar_step_runner_commit(t->sr, step);
    mstar_status rel = mstar_graph_runner_release(t->runner, lease, n);
    mstar_tensor_map_destroy(pre);
    return st != MSTAR_OK ? st : rel;
}

mstar_status mstar_test_toy_step(mstar_test_toy *t, const float *x, int64_t n, float *y,
                                 bool *replayed)
{
    if (n < 1 || n > MAX_ROWS)
        return mstar_error_set(MSTAR_EINVAL, "toy step: %lld rows, 1..%d", (long long)n, MAX_ROWS);
    mstar_tensor_map *maps[MAX_ROWS] = { NULL };
    mstar_node_input rows[MAX_ROWS];
    mstar_step *step = NULL;
    mstar_status st = mstar_step_create(&step);
    if (st == MSTAR_OK)
        st = real_rows(t, x, n, maps, rows);
    mstar_slot_lease lease;
    bool leased =
        st == MSTAR_OK && mstar_graph_runner_lease_slot(t->runner, WALK, n, -1, n, NULL, &lease);
    if (st == MSTAR_OK)
        st = leased ? run_replay(t, step, &lease, rows, n, y) : run_eager(t, step, rows, n, y);
    if (replayed != NULL)
        *replayed = leased;
    for (int64_t i = 0; i < n; i++)
        mstar_tensor_map_destroy(maps[i]);
    mstar_step_destroy(step);
    return st;
}
