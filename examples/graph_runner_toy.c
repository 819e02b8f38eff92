/*
 * graph_runner_toy.c — shows the graph runner capturing a toy node's forward (y = 2x over rows of
 * four floats) once per batch size at startup, then replaying the captured graph for a step of
 * three rows padded to batch size four, on the host backend, using only <mstar/mstar.h>.
 *
 * A node gives the runner three calls: declare_step (which rows a step has), preprocess (the
 * batched tensors its forward reads) and forward (the work, enqueued on the step's stream so that
 * a capture records it). The runner captures every bucket at startup; a step leases a slot of the
 * bucket that fits, pads its rows, stages the preprocessed inputs and replays.
 */
#include <mstar/mstar.h>

#include <stdio.h>
#include <string.h>

#define WALK "decode"
#define ROW  4 /* floats per row */
#define ROWS 3 /* real rows of the step */

static float template_row[ROW]; /* what the rows of a capture carry */

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

/* x: one row per input, copied from each input's host tensor "x" onto the device. */
static mstar_status preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                               size_t n, mstar_tensor_map *out)
{
    mstar_stream *s = mstar_step_context(step)->stream;
    int64_t shape[2] = { (int64_t)n, ROW };
    mstar_tensor x;
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 2, shape, &x);
    for (size_t i = 0; st == MSTAR_OK && i < n; i++)
        st = mstar_memcpy_async(s, (float *)x.data + i * ROW,
                                mstar_tensor_ptr(mstar_tensor_map_get(inputs[i].tensors, "x")),
                                ROW * sizeof(float), MSTAR_MEMCPY_H2D);
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "x", &x, s);
    mstar_tensor_free(s, &x);
    return st;
}

typedef struct scale_args {
    const float *x;
    float *y;
    int64_t n;
} scale_args;

static void scale(void *args) /* runs on the device's queue: here, the host backend's */
{
    const scale_args *a = args;
    for (int64_t i = 0; i < a->n; i++)
        a->y[i] = 2.0f * a->x[i];
}

static mstar_status forward(void *self, mstar_step *step, const mstar_tensor_map *in,
                            mstar_tensor_map *out)
{
    mstar_stream *s = mstar_step_context(step)->stream;
    const mstar_tensor *x = mstar_tensor_map_get(in, "x");
    mstar_tensor y;
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_FLOAT32, 2, x->shape, &y);
    if (st != MSTAR_OK)
        return st;
    scale_args a = { mstar_tensor_ptr(x), y.data, x->shape[0] * ROW };
    st = mstar_launch(s, scale, &a, sizeof(a));
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(out, "y", &y, s);
    mstar_tensor_free(s, &y);
    return st;
}

static const mstar_submodule_ops toy_ops = { declare_step, preprocess, forward };

/* The rows a capture runs with: `len` tokens of the template row. */
static mstar_status make_row(void *user, mstar_stream *s, int64_t len, mstar_tensor_map *out)
{
    int64_t shape[2] = { len, ROW };
    mstar_tensor row;
    mstar_status st =
        mstar_tensor_init(&row, template_row, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "x", &row);
}

/* One step of the ROWS rows of x through the leased slot; y gets the output. */
static mstar_status replay(mstar_graph_runner *r, mstar_step_runner *sr, mstar_stream *s,
                           const mstar_slot_lease *lease, const mstar_node_input *rows, float *y)
{
    mstar_node_input padded[8];
    int64_t ids[ROWS] = { 0, 1, 2 }, step_ids[8];
    size_t bs = (size_t)lease->bucket.bs;
    bool declared;
    mstar_step *step = NULL;
    mstar_tensor_map *pre = NULL;
    const mstar_tensor_map *outs = NULL;
    mstar_step_admit_result admitted;
    mstar_status st = mstar_step_create(&step);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_pad_inputs(r, lease, rows, ROWS, padded);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_step_ids(r, lease, ids, ROWS, step_ids);
    if (st == MSTAR_OK)
        st = declare_step(NULL, WALK, step_ids, padded, bs, step, &declared);
    if (st == MSTAR_OK) {
        mstar_step_ctx *ctx = mstar_step_context(step);
        ctx->request_ids = step_ids;
        ctx->n_requests = bs;
        ctx->graph_walk = WALK;
        ctx->slot = lease->slot;
        ctx->has_lease = true;
        ctx->lease = *lease;
        ctx->stream = s;
        st = mstar_step_runner_admit(sr, step, &admitted);
    }
    if (st == MSTAR_OK)
        st = mstar_step_runner_plan(sr, step);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&pre);
    if (st == MSTAR_OK)
        st = preprocess(NULL, step, padded, bs, pre);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_run_forward(r, lease, pre, NULL, NULL, &outs);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(s, y, mstar_tensor_map_get(outs, "y")->data,
                                ROWS * ROW * sizeof(float), MSTAR_MEMCPY_D2H);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(s);
    if (st == MSTAR_OK)
        st = mstar_step_runner_commit(sr, step);
    mstar_status rel = mstar_graph_runner_release(r, lease, ROWS);
    mstar_tensor_map_destroy(pre);
    mstar_step_destroy(step);
    return st != MSTAR_OK ? st : rel;
}

int main(void)
{
    static const int64_t batch_sizes[] = { 1, 2, 4 };
    mstar_backend *b = NULL;
    mstar_stream *s = NULL;
    mstar_graph_pool *pool = NULL;
    mstar_step_runner *sr = NULL;
    mstar_graph_runner *r = NULL;
    mstar_status st = mstar_backend_create(mstar_device_cpu(), &b);
    if (st == MSTAR_OK)
        st = mstar_stream_create(b, MSTAR_STREAM_DEFAULT, &s);
    if (st == MSTAR_OK)
        st = mstar_graph_pool_create(b, "toy", &pool);
    if (st == MSTAR_OK)
        st = mstar_step_runner_create(b, s, &sr);
    if (st == MSTAR_OK) {
        mstar_graph_config c;
        mstar_graph_config_init(&c);
        c.capture_graph_walk = WALK;
        c.capture_batch_sizes = batch_sizes;
        c.n_capture_batch_sizes = 3;
        c.seq_len = 1;
        c.make_node_input = make_row;
        mstar_graph_runner_options o = { "toy", &toy_ops,           NULL, &c, 1, sr, pool,
                                         2,     MSTAR_DTYPE_INVALID };
        st = mstar_graph_runner_create(&o, &r);
    }
    if (st == MSTAR_OK) {
        mstar_capture_startup cs = { .step_runner = sr, .runners = &r, .n_runners = 1 };
        st = mstar_capture_startup_run(&cs, NULL);
    }
    float x[ROWS][ROW] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }, y[ROWS][ROW];
    mstar_tensor_map *maps[ROWS] = { NULL };
    mstar_node_input rows[ROWS];
    int64_t row_shape[2] = { 1, ROW };
    for (int i = 0; st == MSTAR_OK && i < ROWS; i++) {
        mstar_tensor t;
        st = mstar_tensor_map_create(&maps[i]);
        if (st == MSTAR_OK)
            st = mstar_tensor_init(&t, x[i], mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, row_shape);
        if (st == MSTAR_OK)
            st = mstar_tensor_map_set(maps[i], "x", &t);
        rows[i] = (mstar_node_input){ 1, maps[i] };
    }
    mstar_slot_lease lease;
    if (st == MSTAR_OK && !mstar_graph_runner_lease_slot(r, WALK, ROWS, -1, ROWS, NULL, &lease))
        st = mstar_error_set(MSTAR_ENOENT, "no captured bucket serves %d rows", ROWS);
    if (st == MSTAR_OK) {
        printf("replaying the graph of batch size %lld for %d rows\n", (long long)lease.bucket.bs,
               ROWS);
        st = replay(r, sr, s, &lease, rows, &y[0][0]);
    }
    for (int i = 0; st == MSTAR_OK && i < ROWS; i++) {
        printf("y[%d] = %g %g %g %g\n", i, y[i][0], y[i][1], y[i][2], y[i][3]);
        for (int k = 0; k < ROW; k++)
            if (y[i][k] != 2.0f * x[i][k])
                st = mstar_error_set(MSTAR_EINVAL, "y[%d][%d] is not 2x", i, k);
    }
    if (st != MSTAR_OK)
        fprintf(stderr, "graph_runner_toy: %s (%s)\n", mstar_status_name(st), mstar_last_error());
    for (int i = 0; i < ROWS; i++)
        mstar_tensor_map_destroy(maps[i]);
    mstar_graph_runner_destroy(r);
    mstar_step_runner_destroy(sr);
    mstar_graph_pool_destroy(pool);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
    return st == MSTAR_OK ? 0 : 1;
}
