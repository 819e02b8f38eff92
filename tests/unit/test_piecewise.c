/*
 * test_piecewise.c — the piecewise runner on the host backend: a toy region (y = 3·h + the row's
 * planned length + a bias the region reads from its forward kwargs at capture) over the counting
 * resource, whose padding rows hold pages while a step admits them, so a padding row left
 * resident shows. Each test names the part of design.md "Piecewise regions" or the hard case (G-n)
 * it covers.
 */
#include "mstar_test.h"

#include "counter_resource.h"

#include <stdlib.h>
#include <string.h>

#define L      2 /* tokens per row of the BATCHED region */
#define MAX_BS 8

/* ---- the region -------------------------------------------------------------------------------
 */

struct kwargs {
    float bias;
};

struct region {
    mstar_test_counter *kv;
    bool packed;
    int64_t fail_capture_bs; /* a capture (not a warm-up) of this bs fails */
    int64_t fail_warm_bs;    /* a warm-up of this bs fails */
    int declares, declares_at_run, captures;
    int64_t last_ids[64], last_lens[64];
    size_t last_n;
    void *capture_y[2], *capture_tmp[2]; /* per slot: the pool blocks of its capture */
    int64_t lens_4x6[4];                 /* what a capture of the packed shape (4, 6) declared */
    int64_t can_lease_max;
};

struct kernel_args {
    const float *h;
    float *tmp;
    float *y;
    const float *plan; /* per row, NULL: none */
    int64_t n;
    int64_t row_len;
    float bias;
};

static void region_kernel(void *p)
{
    const struct kernel_args *a = p;
    for (int64_t i = 0; i < a->n; i++)
        a->tmp[i] = 3.0f * a->h[i];
    for (int64_t i = 0; i < a->n; i++)
        a->y[i] = a->tmp[i] + (a->plan != NULL ? a->plan[i / a->row_len] : 0.0f) + a->bias;
}

static mstar_status region_fn(void *user, const mstar_piecewise_call *call,
                              mstar_tensor_map *outputs)
{
    struct region *rg = user;
    const struct kwargs *kw = call->forward_kwargs;
    bool capturing = mstar_stream_is_capturing(call->stream);
    if (call->shape->bs == (capturing ? rg->fail_capture_bs : rg->fail_warm_bs))
        return mstar_error_set(MSTAR_EDEVICE, "injected %s failure at bs %lld",
                               capturing ? "capture" : "warm-up", (long long)call->shape->bs);
    const mstar_tensor *h = mstar_tensor_map_get(call->static_inputs, "h");
    int64_t n = (int64_t)(mstar_tensor_nbytes(h) / sizeof(float));
    /* The output first, then the scratch: a capture's output takes the first free pool block,
     * which may be where a region captured earlier keeps its scratch (G-18). */
    mstar_tensor tmp = { 0 }, y;
    mstar_status st = mstar_tensor_alloc(call->stream, MSTAR_DTYPE_FLOAT32, h->ndim, h->shape, &y);
    if (st != MSTAR_OK)
        return st;
    st = mstar_tensor_alloc(call->stream, MSTAR_DTYPE_FLOAT32, 1, &n, &tmp);
    int32_t slot = mstar_step_context(call->step)->slot;
    if (capturing) {
        rg->captures++;
        rg->capture_y[slot] = y.data;
        rg->capture_tmp[slot] = tmp.data;
    }
    struct kernel_args a = {
        mstar_tensor_ptr(h), tmp.data, y.data, rg->packed ? NULL : rg->kv->plan_buf[slot], n,
        rg->packed ? 1 : L,  kw->bias
    };
    if (st == MSTAR_OK)
        st = mstar_launch(call->stream, region_kernel, &a, sizeof(a));
    mstar_tensor_free(call->stream, &tmp); /* scratch: during a capture it goes back to the pool */
    if (st == MSTAR_OK)
        st = mstar_tensor_map_set_owned(outputs, "y", &y, call->stream);
    else
        mstar_tensor_free(call->stream, &y);
    return st;
}

static mstar_status region_statics(void *user, const mstar_piecewise_shape *shape,
                                   mstar_stream *stream, mstar_tensor_map *out)
{
    struct region *rg = user;
    int64_t dims[2] = { rg->packed ? shape->total_tokens : shape->bs, L };
    mstar_tensor h;
    mstar_status st = mstar_tensor_alloc(stream, MSTAR_DTYPE_FLOAT32, rg->packed ? 1 : 2, dims, &h);
    if (st != MSTAR_OK)
        return st;
    memset(h.data, 0, (size_t)mstar_tensor_nbytes(&h));
    return mstar_tensor_map_set_owned(out, "h", &h, stream);
}

static mstar_status region_declare(void *user, const int64_t *ids, const int64_t *lens, size_t n,
                                   mstar_step *step, bool *declared)
{
    struct region *rg = user;
    rg->declares++;
    if (!mstar_step_context(step)->capture)
        rg->declares_at_run++;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += lens[i];
    if (mstar_step_context(step)->capture && n == 4 && total == 6)
        memcpy(rg->lens_4x6, lens, sizeof(rg->lens_4x6));
    rg->last_n = n;
    memcpy(rg->last_ids, ids, n * sizeof(*ids));
    memcpy(rg->last_lens, lens, n * sizeof(*lens));
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar_step_add_segment(step, ids[i], 0, lens[i]);
        if (st != MSTAR_OK)
            return st;
    }
    char payload = 1;
    *declared = true;
    return mstar_step_set_resource(step, "kv", &payload, 1);
}

static bool region_can_lease(void *user, const mstar_node_input *inputs, size_t n)
{
    (void)inputs;
    return (int64_t)n <= ((struct region *)user)->can_lease_max;
}

static const int64_t unsorted_sizes[] = { 8, 1, 4, 2 };

static void region_config(mstar_piecewise_config *c, struct region *rg, struct kwargs *kw)
{
    mstar_piecewise_config_init(c);
    c->capture_fn = region_fn;
    c->make_static_inputs = region_statics;
    c->declare_step = region_declare;
    c->user = rg;
    c->forward_kwargs = kw;
    c->capture_batch_sizes = unsorted_sizes; /* G-22: sorted by the runner */
    c->n_capture_batch_sizes = 4;
    c->seq_len = L;
}

/* ---- fixture ----------------------------------------------------------------------------------
 */

struct fx {
    mstar_backend *b;
    mstar_stream *s;
    mstar_graph_pool *pool; /* the node's: every region shares it */
    mstar_step_runner *sr;
    mstar_test_counter kv;
    struct region rg[2];
    struct kwargs kw[2];
    mstar_piecewise_config cfg[2];
    mstar_piecewise_runner *pw[2];
    size_t n;
};

static struct fx *fx_new(void)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_int_equal(mstar_test_host_open(&f->b, &f->s), 0);
    assert_mstar_ok(mstar_graph_pool_create(f->b, "node", &f->pool));
    assert_mstar_ok(mstar_step_runner_create(f->b, f->s, &f->sr));
    mstar_test_counter_init(&f->kv, f->b, 10000);
    assert_mstar_ok(
        mstar_step_runner_add_resource(f->sr, "kv", &mstar_test_counter_ops, &f->kv, NULL, 0));
    for (int i = 0; i < 2; i++) {
        f->rg[i] = (struct region){ .kv = &f->kv, .fail_capture_bs = -1, .fail_warm_bs = -1 };
        f->kw[i].bias = 0.5f + (float)i;
        region_config(&f->cfg[i], &f->rg[i], &f->kw[i]);
    }
    return f;
}

/* Create the regions configured in f->cfg[0 .. n) and claim their buffers. */
static void fx_runners(struct fx *f, size_t n)
{
    static const char *const labels[] = { "attn", "mlp" };
    for (size_t i = 0; i < n; i++) {
        f->rg[i].packed = f->cfg[i].kind == MSTAR_GRAPH_PACKED;
        mstar_piecewise_runner_options o = { labels[i], &f->cfg[i],          f->sr, f->pool,
                                             0,         MSTAR_DTYPE_INVALID, "node" };
        assert_mstar_ok(mstar_piecewise_runner_create(&o, &f->pw[i]));
        assert_int_equal(mstar_piecewise_runner_num_slots(f->pw[i]),
                         2); /* the resource pre-plans */
        assert_mstar_ok(mstar_piecewise_runner_prepare_for_capture(f->pw[i], NULL, NULL));
    }
    f->n = n;
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
}

static struct fx *fx_create(void)
{
    struct fx *f = fx_new();
    fx_runners(f, 1);
    return f;
}

static void fx_capture(struct fx *f, size_t i)
{
    assert_mstar_ok(mstar_piecewise_runner_warmup_and_capture(f->pw[i], NULL, 0));
}

static void fx_destroy(struct fx *f)
{
    for (size_t i = 0; i < f->n; i++)
        mstar_piecewise_runner_destroy(f->pw[i]);
    mstar_step_runner_destroy(f->sr);
    mstar_test_counter_free(&f->kv);
    /* Static inputs, output buffers and every copy were given back. */
    mstar_alloc_stats st;
    mstar_caching_stats(f->b, &st);
    assert_int_equal(st.allocated, 0);
    mstar_graph_pool_destroy(f->pool);
    mstar_test_host_close(f->b, f->s);
    free(f);
}

/* The region's real input: n rows of L values (BATCHED) or n tokens (PACKED). */
static mstar_tensor_map *inputs_of(float *h, int64_t rows, bool packed)
{
    mstar_tensor_map *m;
    assert_mstar_ok(mstar_tensor_map_create(&m));
    int64_t dims[2] = { rows, L };
    mstar_tensor t;
    assert_mstar_ok(
        mstar_tensor_init(&t, h, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, packed ? 1 : 2, dims));
    assert_mstar_ok(mstar_tensor_map_set(m, "h", &t));
    return m;
}

/* Run the BATCHED region for real requests 0 .. n-1 with h[i] = base + i. */
static mstar_piecewise_output run_batched(struct fx *f, size_t which, int64_t n, float base)
{
    float h[MAX_BS * L];
    int64_t ids[MAX_BS], lens[MAX_BS];
    for (int64_t i = 0; i < n * L; i++)
        h[i] = base + (float)i;
    for (int64_t i = 0; i < n; i++) {
        ids[i] = i;
        lens[i] = L;
    }
    mstar_tensor_map *in = inputs_of(h, n, false);
    mstar_piecewise_output out;
    assert_mstar_ok(mstar_piecewise_runner_run(f->pw[which], in, ids, lens, (size_t)n, -1, &out));
    mstar_tensor_map_destroy(in);
    return out;
}

static const float *view_of(const mstar_piecewise_output *out, int64_t *rows)
{
    mstar_tensor v;
    assert_mstar_ok(mstar_piecewise_output_get_view(out, "y", &v));
    if (rows != NULL)
        *rows = v.shape[0];
    return v.data;
}

/* The region run eagerly, outside any graph, over the padded static input of the lease's slot
 * and the plan the replay read. */
static void eager(struct fx *f, const mstar_slot_lease *lease, float *y, size_t cap)
{
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(f->pw[0], lease);
    assert_non_null(g);
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    mstar_step_context(step)->slot = lease->slot;
    mstar_piecewise_shape shape = { lease->bucket.bs, NULL, lease->bucket.num_tokens };
    mstar_piecewise_call call = { .static_inputs = mstar_graph_slot_static_inputs(g),
                                  .shape = &shape,
                                  .step = step,
                                  .forward_kwargs = &f->kw[0],
                                  .stream = f->s };
    mstar_tensor_map *outs;
    assert_mstar_ok(mstar_tensor_map_create(&outs));
    assert_mstar_ok(region_fn(&f->rg[0], &call, outs));
    const mstar_tensor *t = mstar_tensor_map_get(outs, "y");
    assert_true(mstar_tensor_nbytes(t) <= cap * sizeof(float));
    memcpy(y, t->data, (size_t)mstar_tensor_nbytes(t));
    mstar_tensor_map_destroy(outs);
    mstar_step_destroy(step);
}

/* ---- tests ------------------------------------------------------------------------------------
 */

/* design.md "Piecewise regions": shapes are keyed (walk __piecewise__, label), captured largest
 * first over padding rows named pw_<label> / <bs>_<tokens>_slot<s>; every capture-time plan saw
 * clean rows (G-24); and a replay equals the region run eagerly at every captured bs, padded
 * batches included. */
static void test_replay_equals_eager_at_every_bs(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    size_t n;
    const mstar_bucket_key *keys = mstar_piecewise_runner_buckets(f->pw[0], &n);
    assert_int_equal(n, 4);
    assert_int_equal(keys[0].bs, 8); /* G-22: given unsorted, captured largest first */
    assert_int_equal(keys[0].num_tokens, 8 * L);
    assert_int_equal(keys[3].bs, 1);
    assert_string_equal(keys[0].graph_walk, MSTAR_PIECEWISE_WALK);
    assert_string_equal(keys[0].cg_key_info, "attn");
    fx_capture(f, 0);
    assert_int_equal(f->rg[0].captures, 4 * 2); /* every shape, both slots */
    assert_int_equal(f->kv.capture_plans_with_dirty_rows, 0);
    mstar_slot_lease lease;
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 8, -1, &lease));
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(f->pw[0], &lease);
    size_t nrows;
    const int64_t *rows = mstar_graph_slot_dummy_rids(g, &nrows);
    assert_int_equal(nrows, 8);
    assert_string_equal(mstar_dummy_rid_name(rows[0]), "__cg_pw_attn_8_16_slot0_0__");
    for (int64_t bs = 1; bs <= MAX_BS; bs++) {
        int64_t before[MAX_BS];
        memcpy(before, f->kv.lens, sizeof(before));
        mstar_piecewise_output out = run_batched(f, 0, bs, 10.0f * (float)bs);
        assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], bs, -1, &lease));
        assert_int_equal(out.real_len, bs);
        int64_t got_rows;
        const float *y = view_of(&out, &got_rows);
        assert_int_equal(got_rows, bs);
        float want[MAX_BS * L];
        eager(f, &lease, want, MAX_BS * L);
        for (int64_t i = 0; i < bs * L; i++) {
            assert_true(y[i] == want[i]);
            assert_true(y[i] ==
                        3.0f * (10.0f * (float)bs + (float)i) + (float)before[i / L] + 0.5f);
        }
        /* the step: real ids then the shape's padding rows, every row L tokens (BATCHED) */
        assert_int_equal(f->rg[0].last_n, lease.bucket.bs);
        for (int64_t i = 0; i < lease.bucket.bs; i++) {
            assert_int_equal(f->rg[0].last_lens[i], L);
            assert_true(i < bs ? f->rg[0].last_ids[i] == i : f->rg[0].last_ids[i] < 0);
        }
        for (int64_t i = 0; i < bs; i++)
            assert_int_equal(f->kv.lens[i], before[i] + L);           /* committed */
        assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0); /* G-30 */
    }
    assert_int_equal(f->rg[0].declares_at_run, MAX_BS);
    fx_destroy(f);
}

/* design.md "Piecewise regions": the rows past the real ones read zeros, not the last step's
 * values. */
static void test_zeroed_tails(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    fx_capture(f, 0);
    run_batched(f, 0, 4, 100.0f);
    mstar_piecewise_output out = run_batched(f, 0, 3, 7.0f);
    mstar_slot_lease lease;
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 3, -1, &lease));
    assert_int_equal(lease.bucket.bs, 4);
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(f->pw[0], &lease);
    const float *h = mstar_tensor_map_get(mstar_graph_slot_static_inputs(g), "h")->data;
    for (int i = 0; i < 3 * L; i++)
        assert_true(h[i] == 7.0f + (float)i);
    for (int i = 3 * L; i < 4 * L; i++)
        assert_true(h[i] == 0.0f);
    /* the padding row computed on zeros: only its (zero) plan and the bias */
    const float *y = mstar_tensor_map_get(mstar_graph_slot_static_outputs(g), "y")->data;
    for (int i = 3 * L; i < 4 * L; i++)
        assert_true(y[i] == 0.5f);
    assert_ptr_equal(out.outputs, mstar_graph_slot_static_outputs(g));
    fx_destroy(f);
}

/* design.md "Piecewise regions" lease_before_step, can_lease, set_slot: the outer step plans the
 * region against the lease (here slot 1); the region's run only stages and replays, reading slot
 * 1's plan. */
static void test_lease_before_step(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    f->cfg[0].lease_before_step = true;
    f->cfg[0].can_lease = region_can_lease;
    f->rg[0].can_lease_max = 4;
    fx_runners(f, 1);
    fx_capture(f, 0);
    mstar_piecewise_runner *pw = f->pw[0];
    assert_true(mstar_piecewise_runner_lease_before_step(pw));
    mstar_node_input rows[5] = { { 0 } };
    assert_true(mstar_piecewise_runner_can_lease(pw, rows, 4));
    assert_false(mstar_piecewise_runner_can_lease(pw, rows, 5));
    assert_mstar_status(mstar_piecewise_runner_set_slot(pw, 2), MSTAR_EINVAL);
    assert_mstar_ok(mstar_piecewise_runner_set_slot(pw, 1));
    mstar_slot_lease lease;
    assert_true(mstar_piecewise_runner_lease_slot(pw, 3, -1, &lease));
    assert_int_equal(lease.slot, 1);
    assert_int_equal(lease.bucket.bs, 4);
    /* the outer step: real rows 0..2 and the region's padding row, planned into slot 1 */
    f->kv.lens[0] = 5;
    f->kv.lens[1] = 6;
    f->kv.lens[2] = 7;
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(pw, &lease);
    int64_t ids[4] = { 0, 1, 2, mstar_graph_slot_dummy_rids(g, NULL)[3] };
    mstar_step *outer;
    assert_mstar_ok(mstar_step_create(&outer));
    for (int i = 0; i < 4; i++)
        assert_mstar_ok(mstar_step_add_segment(outer, ids[i], 0, i < 3 ? 1 : 0));
    char payload = 1;
    assert_mstar_ok(mstar_step_set_resource(outer, "kv", &payload, 1));
    mstar_step_ctx *ctx = mstar_step_context(outer);
    ctx->request_ids = ids;
    ctx->n_requests = 4;
    ctx->slot = lease.slot;
    ctx->has_lease = true;
    ctx->lease = lease;
    mstar_step_admit_result ar;
    assert_mstar_ok(mstar_step_runner_admit(f->sr, outer, &ar));
    assert_true(ar.ok);
    assert_mstar_ok(mstar_step_runner_plan(f->sr, outer));
    int declares = f->rg[0].declares;
    float h[3 * L] = { 1, 1, 1, 1, 1, 1 };
    mstar_tensor_map *in = inputs_of(h, 3, false);
    mstar_piecewise_output out;
    assert_mstar_ok(mstar_piecewise_runner_run(pw, in, NULL, NULL, 0, 3, &out));
    assert_int_equal(f->rg[0].declares, declares); /* nothing declared, admitted or planned */
    const float *y = view_of(&out, NULL);
    for (int i = 0; i < 3 * L; i++)
        assert_true(y[i] == 3.0f + (float)(5 + i / L) + 0.5f); /* slot 1's plan */
    assert_mstar_ok(mstar_step_runner_commit(f->sr, outer));
    mstar_step_destroy(outer);
    mstar_tensor_map_destroy(in);
    fx_destroy(f);
}

/* design.md "Piecewise regions" PiecewiseOutput: get copies (safe past the next run), get_view
 * aliases the static buffer. */
static void test_get_copies_and_get_view_aliases(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    fx_capture(f, 0);
    mstar_piecewise_output out = run_batched(f, 0, 2, 1.0f);
    assert_int_equal(mstar_piecewise_output_count(&out), 1);
    assert_string_equal(mstar_piecewise_output_key(&out, 0), "y");
    assert_null(mstar_piecewise_output_key(&out, 1));
    assert_true(mstar_piecewise_output_contains(&out, "y"));
    assert_false(mstar_piecewise_output_contains(&out, "z"));
    mstar_tensor view, copy;
    assert_mstar_ok(mstar_piecewise_output_get_view(&out, "y", &view));
    assert_mstar_ok(mstar_piecewise_output_get(&out, "y", &copy));
    assert_mstar_status(mstar_piecewise_output_get(&out, "z", &copy), MSTAR_ENOENT);
    mstar_slot_lease lease;
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 2, -1, &lease));
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(f->pw[0], &lease);
    assert_ptr_equal(view.data,
                     mstar_tensor_map_get(mstar_graph_slot_static_outputs(g), "y")->data);
    assert_ptr_not_equal(copy.data, view.data);
    assert_int_equal(copy.shape[0], 2);
    assert_int_equal(copy.shape[1], L);
    float first[2 * L];
    memcpy(first, view.data, sizeof(first));
    assert_memory_equal(copy.data, first, sizeof(first));
    run_batched(f, 0, 2, 50.0f); /* the next run overwrites the view, not the copy */
    assert_true(((float *)view.data)[0] != first[0]);
    assert_memory_equal(copy.data, first, sizeof(first));
    assert_mstar_ok(mstar_tensor_free(out.stream, &copy));
    fx_destroy(f);
}

/* G-18: region B captured earlier into the same pool replays over the pool block A used as
 * scratch; A's outputs live outside the pool, so A's get_view is intact afterwards. */
static void test_regions_sharing_a_pool_keep_outputs(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    static const int64_t two[] = { 2 };
    for (int i = 0; i < 2; i++) {
        f->cfg[i].capture_batch_sizes = two;
        f->cfg[i].n_capture_batch_sizes = 1;
    }
    fx_runners(f, 2);
    fx_capture(f, 1); /* B first */
    fx_capture(f, 0);
    /* The scenario is real: A's slot 0 computed its output in a pool block that every replay of
     * B's slot 1 writes (B's scratch, or B's own output before its copy out of the pool). */
    void *a_out = f->rg[0].capture_y[0];
    assert_true(a_out == f->rg[1].capture_tmp[1] || a_out == f->rg[1].capture_y[1]);
    assert_mstar_ok(mstar_piecewise_runner_set_slot(f->pw[1], 1));
    mstar_piecewise_output a = run_batched(f, 0, 2, 1.0f);
    float want[2 * L];
    memcpy(want, view_of(&a, NULL), sizeof(want));
    run_batched(f, 1, 2, 1000.0f);
    assert_memory_equal(view_of(&a, NULL), want, sizeof(want));
    for (int i = 0; i < 2 * L; i++) /* fresh rows: their planned lengths were 0 */
        assert_true(want[i] == 3.0f * (1.0f + (float)i) + 0.5f);
    fx_destroy(f);
}

/* G-21 (piecewise half): a batch pads to the exact configured bs; when that shape was dropped
 * the region runs eager even though a larger one is captured. (The whole-forward runner falls
 * back: test_graph_runner's test_failed_bucket_next_captures_and_lookup_falls_back.) */
static void test_dropped_exact_bs_does_not_fall_back(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    f->rg[0].fail_capture_bs = 4;
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    fx_capture(f, 0);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("injected capture failure at bs 4"));
    size_t nd;
    const mstar_bucket_key *dropped = mstar_piecewise_runner_dropped_shapes(f->pw[0], &nd);
    assert_int_equal(nd, 1);
    assert_int_equal(dropped[0].bs, 4);
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 3, -1));
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 4, -1));
    assert_true(mstar_piecewise_runner_can_run(f->pw[0], 5, -1)); /* bs 8 */
    assert_true(mstar_piecewise_runner_can_run(f->pw[0], 2, -1));
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 9, -1));
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 0, -1));
    float h[3 * L] = { 0 };
    int64_t ids[3] = { 0, 1, 2 };
    mstar_tensor_map *in = inputs_of(h, 3, false);
    mstar_piecewise_output out;
    assert_mstar_status(mstar_piecewise_runner_run(f->pw[0], in, ids, NULL, 3, -1, &out),
                        MSTAR_ENOENT);
    assert_non_null(strstr(mstar_last_error(), "check can_run"));
    mstar_tensor_map_destroy(in);
    /* another rank dropped bs 8: it goes too */
    mstar_bucket_key k8 = { MSTAR_PIECEWISE_WALK, 8, 8 * L, "attn" };
    assert_mstar_ok(mstar_piecewise_runner_drop_shape(f->pw[0], &k8));
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 5, -1));
    mstar_piecewise_runner_dropped_shapes(f->pw[0], &nd);
    assert_int_equal(nd, 2);
    assert_true(mstar_piecewise_runner_any_graphs(f->pw[0]));
    fx_destroy(f);
}

/* A plan leaving shapes out: the dropped ones are listed, and the smaller batches do not borrow
 * the captured larger shape. */
static void test_planned_subset(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    mstar_bucket_key planned[1] = { { MSTAR_PIECEWISE_WALK, 8, 8 * L, "attn" } };
    assert_mstar_ok(mstar_piecewise_runner_warmup_and_capture(f->pw[0], planned, 1));
    size_t nd;
    mstar_piecewise_runner_dropped_shapes(f->pw[0], &nd);
    assert_int_equal(nd, 3);
    assert_true(mstar_piecewise_runner_can_run(f->pw[0], 8, -1));
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 1, -1));
    assert_mstar_ok(mstar_piecewise_runner_drop_shape(f->pw[0], &planned[0]));
    assert_false(mstar_piecewise_runner_any_graphs(f->pw[0]));
    fx_destroy(f);
}

/* G-30: a failure in the middle of a run (after admit reserved pages for the padding rows of a
 * batched shape) still resets them; nothing of theirs stays resident, and the next run works. */
static void test_failure_mid_run_resets_padding_rows(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    fx_capture(f, 0);
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    f->kv.fail_plan = true;
    float h[3 * L] = { 0 };
    int64_t ids[3] = { 0, 1, 2 }, lens[3] = { L, L, L };
    mstar_tensor_map *in = inputs_of(h, 3, false);
    mstar_piecewise_output out;
    assert_mstar_status(mstar_piecewise_runner_run(f->pw[0], in, ids, lens, 3, -1, &out),
                        MSTAR_EDEVICE);
    assert_non_null(strstr(mstar_last_error(), "injected plan failure"));
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    assert_int_equal(f->kv.pages_used, 3 * L); /* the real rows' reservation only */
    f->kv.fail_plan = false;
    assert_mstar_ok(mstar_piecewise_runner_run(f->pw[0], in, ids, lens, 3, -1, &out));
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    assert_int_equal(f->kv.lens[2], L);
    mstar_tensor_map_destroy(in);
    fx_destroy(f);
}

/* G-30 and G-1: a failure in the middle of a capture, or of a warm-up, still resets the padding
 * rows (storage freed, no release_all needed), and the next shapes capture into the same pool. */
static void test_failure_mid_capture_resets_padding_rows(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    f->rg[0].fail_capture_bs = 8; /* the first shape captured */
    f->rg[0].fail_warm_bs = 2;
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    fx_capture(f, 0);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("injected warm-up failure at bs 2"));
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    assert_int_equal(f->kv.pages_used, 0);
    size_t nd;
    mstar_piecewise_runner_dropped_shapes(f->pw[0], &nd);
    assert_int_equal(nd, 2);
    assert_true(mstar_piecewise_runner_can_run(f->pw[0], 4, -1));
    assert_true(mstar_piecewise_runner_can_run(f->pw[0], 1, -1));
    run_batched(f, 0, 4, 1.0f);
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    fx_destroy(f);
}

/* PACKED: shapes spread t tokens over bs rows; lookup takes the smallest captured total at the
 * padded bs; a replay's step carries the real lengths then zeros (replay_seq_lens); the output
 * is real_len = the real tokens, and the token tail is zeroed. */
static void test_packed_region(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    static const int64_t sizes[] = { 1, 2, 4 }, totals[] = { 16, 6 };
    f->cfg[0].kind = MSTAR_GRAPH_PACKED;
    f->cfg[0].capture_batch_sizes = sizes;
    f->cfg[0].n_capture_batch_sizes = 3;
    f->cfg[0].total_tokens = totals;
    f->cfg[0].n_total_tokens = 2;
    fx_runners(f, 1);
    size_t n;
    const mstar_bucket_key *keys = mstar_piecewise_runner_buckets(f->pw[0], &n);
    assert_int_equal(n, 6);
    assert_int_equal(keys[0].bs, 4);
    assert_int_equal(keys[0].num_tokens, 16);
    assert_int_equal(keys[1].num_tokens, 6);
    fx_capture(f, 0);
    int64_t spread[4] = { 3, 1, 1, 1 }; /* distribute_tokens(6, 4): 6/4 each, the first 6%4 more */
    assert_memory_equal(f->rg[0].lens_4x6, spread, sizeof(spread));
    mstar_slot_lease lease;
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 3, -1)); /* total is required */
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 3, 5, &lease));
    assert_int_equal(lease.bucket.bs, 4);
    assert_int_equal(lease.bucket.num_tokens, 6);
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 3, 7, &lease));
    assert_int_equal(lease.bucket.num_tokens, 16);
    assert_false(mstar_piecewise_runner_can_run(f->pw[0], 3, 17));
    float h[6] = { 1, 2, 3, 4, 5, 99 };
    int64_t ids[3] = { 0, 1, 2 }, lens[3] = { 2, 1, 2 };
    mstar_tensor_map *in = inputs_of(h, 6, true);
    mstar_piecewise_output out;
    assert_mstar_ok(mstar_piecewise_runner_run(f->pw[0], in, ids, lens, 3, -1, &out));
    mstar_tensor_map_destroy(in);
    assert_int_equal(out.real_len, 5);
    int64_t want_lens[4] = { 2, 1, 2, 0 };
    assert_int_equal(f->rg[0].last_n, 4);
    assert_memory_equal(f->rg[0].last_lens, want_lens, sizeof(want_lens));
    int64_t rows;
    const float *y = view_of(&out, &rows);
    assert_int_equal(rows, 5);
    for (int i = 0; i < 5; i++)
        assert_true(y[i] == 3.0f * h[i] + 0.5f);
    assert_true(mstar_piecewise_runner_lease_slot(f->pw[0], 3, 5, &lease));
    const mstar_graph_slot *g = mstar_piecewise_runner_slot_for(f->pw[0], &lease);
    const float *hs = mstar_tensor_map_get(mstar_graph_slot_static_inputs(g), "h")->data;
    /* 6 tokens given: the sixth was staged too; none zeroed. Five given: the sixth is zeroed. */
    assert_true(hs[5] == 99.0f);
    in = inputs_of(h, 5, true);
    assert_mstar_ok(mstar_piecewise_runner_run(f->pw[0], in, ids, lens, 3, -1, &out));
    assert_true(hs[5] == 0.0f);
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    /* a packed run needs seq_lens */
    assert_mstar_status(mstar_piecewise_runner_run(f->pw[0], in, ids, NULL, 3, -1, &out),
                        MSTAR_EINVAL);
    mstar_tensor_map_destroy(in);
    fx_destroy(f);
}

/* replay_seq_lens: BATCHED keeps the shape's lengths, PACKED the real ones then zeros. */
static void test_replay_seq_lens(void **state)
{
    (void)state;
    mstar_piecewise_config c;
    mstar_piecewise_config_init(&c);
    int64_t shape_lens[4] = { 2, 2, 2, 2 }, real[2] = { 3, 1 }, out[4];
    mstar_piecewise_shape shape = { 4, shape_lens, 8 };
    assert_mstar_ok(mstar_piecewise_replay_seq_lens(&c, &shape, real, 2, out));
    assert_memory_equal(out, shape_lens, sizeof(out));
    c.kind = MSTAR_GRAPH_PACKED;
    assert_mstar_ok(mstar_piecewise_replay_seq_lens(&c, &shape, real, 2, out));
    int64_t want[4] = { 3, 1, 0, 0 };
    assert_memory_equal(out, want, sizeof(out));
    assert_mstar_status(mstar_piecewise_replay_seq_lens(&c, &shape, real, 5, out), MSTAR_EINVAL);
    assert_mstar_status(mstar_piecewise_replay_seq_lens(&c, &shape, NULL, 2, out), MSTAR_EINVAL);
}

/* design.md "Graph configs" validation for piecewise configs, including G-10's tokens == bs; option
 * checks. */
static void test_config_validation(void **state)
{
    (void)state;
    struct region rg = { 0 };
    struct kwargs kw = { 0 };
    mstar_piecewise_config c;
    region_config(&c, &rg, &kw);
    assert_mstar_ok(mstar_piecewise_config_validate(&c));
    c.capture_fn = NULL;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    region_config(&c, &rg, &kw);
    c.seq_len = 0;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "seq_len"));
    region_config(&c, &rg, &kw);
    c.compile_mode = (mstar_compile_mode)9;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    region_config(&c, &rg, &kw);
    static const int64_t dup[] = { 2, 2 };
    c.capture_batch_sizes = dup;
    c.n_capture_batch_sizes = 2;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "capture_batch_sizes lists 2 twice"));
    region_config(&c, &rg, &kw);
    c.kind = MSTAR_GRAPH_PACKED;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "total_tokens"));
    static const int64_t four[] = { 4, 32 };
    c.total_tokens = four;
    c.n_total_tokens = 2;
    assert_mstar_status(mstar_piecewise_config_validate(&c), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "packed bucket bs=4 tokens=4"));

    struct fx *f = fx_new();
    mstar_piecewise_runner *pw = NULL;
    mstar_piecewise_runner_options o = { "bad label", &f->cfg[0],          f->sr, f->pool,
                                         0,           MSTAR_DTYPE_INVALID, NULL };
    assert_mstar_status(mstar_piecewise_runner_create(&o, &pw), MSTAR_EINVAL);
    o.label = "attn";
    o.num_slots = 17;
    assert_mstar_status(mstar_piecewise_runner_create(&o, &pw), MSTAR_EINVAL);
    o.num_slots = 0;
    o.pool = NULL;
    assert_mstar_status(mstar_piecewise_runner_create(&o, &pw), MSTAR_EINVAL);
    o.pool = f->pool;
    o.config = &c; /* the PACKED config refused above */
    assert_mstar_status(mstar_piecewise_runner_create(&o, &pw), MSTAR_EINVAL);
    assert_null(pw);
    fx_destroy(f);
}

/* The planner's hooks: warm a shape (its peak), a throwaway capture (pool bytes taken and kept:
 * the outputs are outside the pool, so nothing is kept), and the claims. */
static void test_sizing_hooks(void **state)
{
    (void)state;
    struct fx *f = fx_new();
    mstar_piecewise_runner_options o = { "attn", &f->cfg[0],          f->sr, f->pool,
                                         1,      MSTAR_DTYPE_INVALID, NULL };
    assert_mstar_ok(mstar_piecewise_runner_create(&o, &f->pw[0]));
    f->n = 1;
    const mstar_cg_slot_spec *specs;
    size_t n;
    assert_mstar_ok(mstar_piecewise_runner_prepare_for_capture(f->pw[0], &specs, &n));
    assert_int_equal(n, 4); /* 4 shapes × 1 slot */
    assert_string_equal(specs[0].bucket.cg_key_info, "attn");
    assert_mstar_status(mstar_piecewise_runner_warmup_and_capture(f->pw[0], NULL, 0),
                        MSTAR_ESTATE); /* buffers not built yet */
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
    mstar_bucket_key k8 = { MSTAR_PIECEWISE_WALK, 8, 8 * L, "attn" };
    uint64_t peak = 0;
    assert_mstar_ok(mstar_piecewise_runner_warm_bucket(f->pw[0], &k8, &peak));
    assert_true(peak >= 2 * 8 * L * sizeof(float)); /* scratch and output */
    mstar_graph *g = NULL;
    mstar_capture_stats st;
    assert_mstar_ok(
        mstar_piecewise_runner_capture_throwaway(f->pw[0], &k8, MSTAR_CAPTURE_KEEP_GRAPH, &g, &st));
    assert_non_null(g);
    assert_true(st.taken > 0);
    assert_int_equal(st.kept, 0);
    assert_true(st.nodes > 0);
    mstar_graph_destroy(g);
    assert_false(mstar_piecewise_runner_any_graphs(f->pw[0]));
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    mstar_bucket_key none = { MSTAR_PIECEWISE_WALK, 3, 6, "attn" };
    assert_mstar_status(mstar_piecewise_runner_warm_bucket(f->pw[0], &none, &peak), MSTAR_ENOENT);
    assert_mstar_status(mstar_piecewise_runner_capture_throwaway(f->pw[0], &none, 0, &g, NULL),
                        MSTAR_ENOENT);
    fx_destroy(f);
}

/* run's arguments and staging keys (G-17 for regions). */
static void test_run_arguments_and_staging_keys(void **state)
{
    (void)state;
    struct fx *f = fx_create();
    fx_capture(f, 0);
    float h[2 * L] = { 1, 2, 3, 4 };
    int64_t ids[2] = { 0, 1 };
    mstar_tensor_map *in = inputs_of(h, 2, false);
    mstar_piecewise_output out;
    mstar_piecewise_runner *pw = f->pw[0];
    assert_mstar_status(mstar_piecewise_runner_run(pw, in, NULL, NULL, 0, -1, &out), MSTAR_EINVAL);
    assert_mstar_status(mstar_piecewise_runner_run(pw, in, ids, NULL, 2, 3, &out), MSTAR_EINVAL);
    /* real_bs alone: the region's step needs the ids */
    assert_mstar_status(mstar_piecewise_runner_run(pw, in, NULL, NULL, 0, 2, &out), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "request_ids"));
    mstar_tensor t = *mstar_tensor_map_get(in, "h");
    assert_mstar_ok(mstar_tensor_map_set(in, "bogus", &t));
    assert_mstar_status(mstar_piecewise_runner_run(pw, in, ids, NULL, 2, -1, &out), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "'bogus' was not captured"));
    mstar_tensor_map_clear(in);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_ok(mstar_piecewise_runner_run(pw, in, ids, NULL, 2, -1, &out));
    assert_mstar_ok(mstar_piecewise_runner_run(pw, in, ids, NULL, 2, -1, &out));
    mstar_test_log_capture_end();
    assert_int_equal(mstar_test_log_count("captured input 'h' is missing"), 1);
    t.shape[1] = L + 1; /* a trailing dim that differs from the buffer's */
    assert_mstar_ok(mstar_tensor_map_set(in, "h", &t));
    assert_mstar_status(mstar_piecewise_runner_run(pw, in, ids, NULL, 2, -1, &out), MSTAR_EINVAL);
    assert_int_equal(mstar_test_counter_padding_held(&f->kv), 0);
    mstar_tensor_map_destroy(in);
    fx_destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_equals_eager_at_every_bs),
        cmocka_unit_test(test_zeroed_tails),
        cmocka_unit_test(test_lease_before_step),
        cmocka_unit_test(test_get_copies_and_get_view_aliases),
        cmocka_unit_test(test_regions_sharing_a_pool_keep_outputs),
        cmocka_unit_test(test_dropped_exact_bs_does_not_fall_back),
        cmocka_unit_test(test_planned_subset),
        cmocka_unit_test(test_failure_mid_run_resets_padding_rows),
        cmocka_unit_test(test_failure_mid_capture_resets_padding_rows),
        cmocka_unit_test(test_packed_region),
        cmocka_unit_test(test_replay_seq_lens),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_sizing_hooks),
        cmocka_unit_test(test_run_arguments_and_staging_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
