/*
 * test_graph_runner.c — the whole-forward runner on the host backend with a small counting
 * resource and a toy submodule (y = 2·x + the row's planned length, read from per-slot plan
 * buffers the resource builds once). Each test names the hard case (design.md G-n) it covers.
 */
#include "mstar_test.h"

#include "comm_harness.h"
#include "counter_resource.h"

#include "device/backend.h"
#include "graphs/stage.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS MSTAR_TEST_COUNTER_SLOTS
#define MAX_BS    MSTAR_TEST_COUNTER_ROWS
#define MAX_PAD   MSTAR_TEST_COUNTER_PADDING

/* ---- the toy submodule ------------------------------------------------------------------------
 */

/* A library's per-stream workspace (G-25, cuBLAS's): made on the first forward on a stream, and
 * that first use must not be inside a capture (mstar_lazy refuses it there). */
struct workspace {
    mstar_stream *stream;
    mstar_lazy *lazy;
    void *buf;
};

#define MAX_WORKSPACES 4

struct toy {
    int64_t fail_bs; /* a capture of this bs fails (G-1) */
    int forwards;
    const char *key_info;
    float one_x;
    bool per_stream_workspace; /* forwards need their stream's workspace (G-25) */
    struct workspace ws[MAX_WORKSPACES];
    int n_ws;
    int captured; /* forwards inside a capture */
};

static mstar_status make_workspace(mstar_stream *stream, void *user)
{
    struct workspace *w = user;
    return mstar_alloc(stream, 256, &w->buf);
}

/* The workspace of `stream`, made on its first use there. */
static mstar_status use_workspace(struct toy *t, mstar_stream *stream)
{
    int i = 0;
    while (i < t->n_ws && t->ws[i].stream != stream)
        i++;
    if (i == t->n_ws) {
        if (i == MAX_WORKSPACES)
            return mstar_error_set(MSTAR_ENOSPC, "toy: too many streams");
        t->ws[i].stream = stream;
        mstar_status st =
            mstar_lazy_create("toy workspace", make_workspace, &t->ws[i], &t->ws[i].lazy);
        if (st != MSTAR_OK)
            return st;
        t->n_ws++;
    }
    return mstar_lazy_ensure(t->ws[i].lazy, stream);
}

static void free_workspaces(struct toy *t)
{
    for (int i = 0; i < t->n_ws; i++) {
        if (t->ws[i].buf != NULL)
            mstar_free(t->ws[i].stream, t->ws[i].buf);
        mstar_lazy_destroy(t->ws[i].lazy);
    }
    t->n_ws = 0;
}

static mstar_status declare_step(void *self, const char *walk, const int64_t *ids,
                                 const mstar_node_input *inputs, size_t n, mstar_step *step,
                                 bool *declared)
{
    struct toy *t = self;
    char payload = 1;
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar_step_add_segment(step, ids[i], 0, inputs[i].seq_len);
        if (st != MSTAR_OK)
            return st;
    }
    *declared = true;
    mstar_status st = mstar_step_set_cg_key_info(step, t->key_info);
    return st != MSTAR_OK ? st : mstar_step_set_resource(step, "kv", &payload, 1);
}

static mstar_status preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                               size_t n, mstar_tensor_map *out)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += inputs[i].seq_len;
    mstar_tensor x;
    mstar_status st = mstar_tensor_alloc(ctx->stream, MSTAR_DTYPE_FLOAT32, 1, &total, &x);
    if (st != MSTAR_OK)
        return st;
    float *px = x.data;
    for (size_t i = 0, k = 0; i < n; i++) {
        const mstar_tensor *tx = mstar_tensor_map_get(inputs[i].tensors, "x");
        for (int64_t j = 0; j < inputs[i].seq_len; j++)
            px[k++] = ((const float *)tx->data)[j];
    }
    return mstar_tensor_map_set_owned(out, "x", &x, ctx->stream);
}

struct fwd_args {
    const float *x;
    float *y;
    const float *plan;
    int64_t n;
};

static void fwd_kernel(void *p)
{
    struct fwd_args *a = p;
    for (int64_t i = 0; i < a->n; i++)
        a->y[i] = 2.0f * a->x[i] + a->plan[i];
}

static mstar_test_counter *the_counter;

static mstar_status forward(void *self, mstar_step *step, const mstar_tensor_map *in,
                            mstar_tensor_map *out)
{
    struct toy *t = self;
    mstar_step_ctx *ctx = mstar_step_context(step);
    t->forwards++;
    t->captured += mstar_stream_is_capturing(ctx->stream);
    if (t->per_stream_workspace) {
        mstar_status st = use_workspace(t, ctx->stream);
        if (st != MSTAR_OK)
            return st;
    }
    const mstar_tensor *x = mstar_tensor_map_get(in, "x");
    if (ctx->capture && mstar_stream_is_capturing(ctx->stream) && x->shape[0] == t->fail_bs)
        return mstar_error_set(MSTAR_EDEVICE, "injected capture failure at bs %lld",
                               (long long)t->fail_bs);
    mstar_tensor y;
    mstar_status st = mstar_tensor_alloc(ctx->stream, MSTAR_DTYPE_FLOAT32, 1, x->shape, &y);
    if (st != MSTAR_OK)
        return st;
    struct fwd_args a = { mstar_tensor_ptr(x), y.data, the_counter->plan_buf[ctx->slot],
                          x->shape[0] };
    if ((st = mstar_launch(ctx->stream, fwd_kernel, &a, sizeof(a))) != MSTAR_OK)
        return st;
    return mstar_tensor_map_set_owned(out, "y", &y, ctx->stream);
}

static const mstar_submodule_ops toy_ops = { declare_step, preprocess, forward };

static float template_x[64];

static mstar_status make_row(void *user, mstar_stream *s, int64_t len, mstar_tensor_map *out)
{
    mstar_tensor t;
    mstar_status st =
        mstar_tensor_init(&t, template_x, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, &len);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "x", &t);
}

/* ---- fixture ----------------------------------------------------------------------------------
 */

struct fx {
    mstar_backend *b;
    mstar_stream *s;
    mstar_graph_pool *pool;
    mstar_step_runner *sr;
    mstar_test_counter kv;
    struct toy toy;
    mstar_graph_runner *r;
};

static const int64_t unsorted_sizes[] = { 8, 1, 4, 2 };
static const char *const alias_walks[] = { "decode_alias" };

static void base_config(mstar_graph_config *c)
{
    mstar_graph_config_init(c);
    c->capture_graph_walk = "decode";
    c->replay_graph_walks = alias_walks;
    c->n_replay_graph_walks = 1;
    c->capture_batch_sizes = unsorted_sizes; /* G-22: sorted by the runner */
    c->n_capture_batch_sizes = 4;
    c->seq_len = 1;
    c->make_node_input = make_row;
}

static struct fx *fx_create(const mstar_graph_config *configs, size_t n, int64_t fail_bs)
{
    struct fx *f = calloc(1, sizeof(*f));
    assert_int_equal(mstar_test_host_open(&f->b, &f->s), 0);
    assert_mstar_ok(mstar_graph_pool_create(f->b, "toy", &f->pool));
    assert_mstar_ok(mstar_step_runner_create(f->b, f->s, &f->sr));
    mstar_test_counter_init(&f->kv, f->b, 1000);
    the_counter = &f->kv;
    f->toy.fail_bs = fail_bs;
    assert_mstar_ok(
        mstar_step_runner_add_resource(f->sr, "kv", &mstar_test_counter_ops, &f->kv, NULL, 0));
    mstar_graph_runner_options o = { "toy", &toy_ops,           &f->toy, configs, n, f->sr, f->pool,
                                     0,     MSTAR_DTYPE_INVALID };
    assert_mstar_ok(mstar_graph_runner_create(&o, &f->r));
    assert_int_equal(mstar_graph_runner_num_slots(f->r), 2); /* the resource pre-plans */
    return f;
}

/* The runner of the base config, not yet prepared. */
static struct fx *fx_create_base(void)
{
    mstar_graph_config c;
    base_config(&c);
    return fx_create(&c, 1, -1);
}

/* Prepares for capture and builds the graph buffers: what comes before any capture. */
static void fx_prepare(struct fx *f)
{
    assert_mstar_ok(mstar_graph_runner_prepare_for_capture(f->r, NULL, NULL));
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
}

static void fx_capture(struct fx *f)
{
    fx_prepare(f);
    assert_mstar_ok(mstar_graph_runner_warmup_and_capture(f->r, NULL, 0));
    assert_mstar_ok(mstar_dummy_rows_release_all(mstar_graph_runner_dummy_rows(f->r)));
}

/* The runner of the base config, captured: where most tests start. */
static struct fx *fx_create_captured(void)
{
    struct fx *f = fx_create_base();
    fx_capture(f);
    return f;
}

/* Sets `key` in `m` to a 1-D float32 host tensor over the `n` values at `v` (not copied). */
static void map_set_f32(mstar_tensor_map *m, const char *key, float *v, int64_t n)
{
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, v, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1, &n));
    assert_mstar_ok(mstar_tensor_map_set(m, key, &t));
}

static void fx_destroy(struct fx *f)
{
    mstar_graph_runner_destroy(f->r);
    free_workspaces(&f->toy);
    mstar_step_runner_destroy(f->sr);
    mstar_test_counter_free(&f->kv);
    mstar_graph_pool_destroy(f->pool);
    mstar_test_host_close(f->b, f->s);
    free(f);
}

/* The context of a step declared over `n` rows `ids` under `lease`. */
static void lease_context(mstar_step *step, const int64_t *ids, size_t n,
                          const mstar_slot_lease *lease)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->request_ids = ids;
    ctx->n_requests = n;
    ctx->slot = lease->slot;
    ctx->has_lease = true;
    ctx->lease = *lease;
}

/* One decode step for `n` real requests 0..n-1 through the runner; returns y. */
static const float *replay_step(struct fx *f, size_t n, const float *xs, mstar_slot_lease *lease)
{
    assert_true(
        mstar_graph_runner_lease_slot(f->r, "decode", (int64_t)n, -1, (int64_t)n, NULL, lease));
    mstar_node_input real[MAX_BS], padded[MAX_BS];
    mstar_tensor_map *rows[MAX_BS];
    for (size_t i = 0; i < n; i++) {
        assert_mstar_ok(mstar_tensor_map_create(&rows[i]));
        map_set_f32(rows[i], "x", (float *)&xs[i], 1);
        real[i] = (mstar_node_input){ 1, rows[i] };
    }
    int64_t ids[MAX_BS], step_ids[MAX_BS];
    for (size_t i = 0; i < n; i++)
        ids[i] = (int64_t)i;
    assert_mstar_ok(mstar_graph_runner_pad_inputs(f->r, lease, real, n, padded));
    assert_mstar_ok(mstar_graph_runner_step_ids(f->r, lease, ids, n, step_ids));
    size_t bs = (size_t)lease->bucket.bs;
    for (size_t i = n; i < bs; i++) {
        assert_int_equal(padded[i].seq_len, 0);
        assert_true(mstar_is_padding_row(step_ids[i]));
    }
    /* real info first, then the padding rows' stand-ins (design.md "Padding rows") */
    mstar_forward_info real_info[MAX_BS], info[MAX_BS];
    for (size_t i = 0; i < n; i++)
        real_info[i] = (mstar_forward_info){ "decode", true, (int64_t)i + 1, 7, 16 };
    assert_mstar_ok(mstar_graph_runner_step_metadata(f->r, lease, real_info, n, info));
    for (size_t i = 0; i < bs; i++) {
        assert_int_equal(info[i].fwd_index, i < n ? (int64_t)i + 1 : 0);
        assert_int_equal(info[i].max_tokens, i < n ? 16 : 1);
        assert_true(info[i].requires_cfg == (i < n));
        assert_string_equal(info[i].graph_walk, "decode");
    }
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    bool declared;
    assert_mstar_ok(declare_step(&f->toy, "decode", step_ids, padded, bs, step, &declared));
    lease_context(step, step_ids, bs, lease);
    mstar_step_admit_result ar;
    assert_mstar_ok(mstar_step_runner_admit(f->sr, step, &ar));
    assert_true(ar.ok);
    assert_mstar_ok(mstar_step_runner_plan(f->sr, step));
    mstar_tensor_map *pre;
    assert_mstar_ok(mstar_tensor_map_create(&pre));
    assert_mstar_ok(preprocess(&f->toy, step, padded, bs, pre));
    const mstar_tensor_map *outs = NULL;
    mstar_signal *started;
    assert_mstar_ok(mstar_signal_create(&started));
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, lease, pre, NULL, started, &outs));
    assert_true(mstar_signal_is_set(started));
    assert_mstar_ok(mstar_step_runner_commit(f->sr, step));
    assert_mstar_ok(mstar_graph_runner_release(f->r, lease, (int64_t)n));
    mstar_signal_destroy(started);
    mstar_tensor_map_destroy(pre);
    mstar_step_destroy(step);
    for (size_t i = 0; i < n; i++)
        mstar_tensor_map_destroy(rows[i]);
    return mstar_tensor_map_get(outs, "y")->data;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

/* Replayed outputs equal the eager formula at every batch size, padded ones included; sizes
 * were given unsorted (G-22); every warm-up and the capture saw clean rows (G-24). */
static void test_replay_matches_eager_at_every_bs(void **state)
{
    struct fx *f = fx_create_captured();
    size_t nb;
    const mstar_bucket_key *keys = mstar_graph_runner_buckets(f->r, &nb);
    assert_int_equal(nb, 4);
    assert_int_equal(keys[0].bs, 8); /* largest first */
    assert_int_equal(keys[3].bs, 1);
    assert_int_equal(f->kv.capture_plans_with_dirty_rows, 0);
    assert_int_equal(f->toy.forwards, 4 * 2 * (MSTAR_NUM_WARMUP + 1));
    assert_int_equal(f->kv.pages_used, 0); /* release_all: nothing resident (G-8) */
    float xs[8];
    for (size_t n = 1; n <= 8; n++) {
        for (size_t i = 0; i < n; i++)
            xs[i] = (float)(i + 10 * n);
        int64_t before[8];
        memcpy(before, f->kv.lens, sizeof(before));
        mstar_slot_lease lease;
        const float *y = replay_step(f, n, xs, &lease);
        assert_true(lease.bucket.bs >= (int64_t)n && lease.bucket.bs <= 2 * (int64_t)n);
        for (size_t i = 0; i < n; i++)
            assert_true(y[i] == 2.0f * xs[i] + (float)before[i]);
        assert_int_equal(f->kv.pages_used, f->kv.lens[0] + f->kv.lens[1] + f->kv.lens[2] +
                                               f->kv.lens[3] + f->kv.lens[4] + f->kv.lens[5] +
                                               f->kv.lens[6] + f->kv.lens[7]);
    }
    fx_destroy(f);
}

/* G-1 + G-21: bucket bs=4 fails to capture; bs=2 still captures, and a batch of 3 falls back to
 * the larger bs=8 bucket instead of running eager. */
static void test_failed_bucket_next_captures_and_lookup_falls_back(void **state)
{
    mstar_graph_config c;
    base_config(&c);
    struct fx *f = fx_create(&c, 1, 4);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    fx_capture(f);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("injected capture failure at bs 4"));
    size_t nd;
    const mstar_bucket_key *dropped = mstar_graph_runner_dropped_buckets(f->r, &nd);
    assert_int_equal(nd, 1);
    assert_int_equal(dropped[0].bs, 4);
    char name[MSTAR_BUCKET_NAME_MAX];
    assert_string_equal(mstar_bucket_key_format(&dropped[0], name, sizeof(name)),
                        "decode[bs=4,tokens=4]");
    assert_true(mstar_graph_runner_can_run(f->r, "decode", 2, 2, NULL));
    mstar_bucket_key k;
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 3, 3, NULL, &k));
    assert_int_equal(k.bs, 8);
    assert_true(mstar_graph_runner_select_batched_bucket(f->r, "decode", 3, NULL, &k));
    assert_int_equal(k.bs, 8);
    float xs[3] = { 1, 2, 3 };
    mstar_slot_lease lease;
    const float *y = replay_step(f, 3, xs, &lease);
    assert_true(y[2] == 6.0f);
    /* G-20: the configured largest size still caps the eager batch */
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "decode"), 8);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "prefill"), -1);
    assert_false(mstar_graph_runner_can_run(f->r, "decode", 9, 9, NULL));
    fx_destroy(f);
}

/* G-3: consecutive leases alternate slots even across buckets (one counter per device). */
static void test_lease_counter_alternates_across_buckets(void **state)
{
    struct fx *f = fx_create_captured();
    int32_t last = -1;
    for (int i = 0; i < 8; i++) {
        mstar_slot_lease l;
        int64_t bs = (i % 2) ? 1 : 8;
        assert_true(mstar_graph_runner_lease_slot(f->r, "decode", bs, -1, -1, NULL, &l));
        assert_int_equal(l.bucket.bs, bs);
        assert_int_not_equal(l.slot, last);
        last = l.slot;
    }
    mstar_slot_lease l; /* a reserved slot comes back as it was */
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, 1, 2, NULL, &l));
    assert_int_equal(l.slot, 1);
    fx_destroy(f);
}

/* G-14: a lease found through a replay alias names the capture walk. */
static void test_alias_lease_names_capture_walk(void **state)
{
    struct fx *f = fx_create_captured();
    mstar_slot_lease l;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode_alias", 2, -1, 2, NULL, &l));
    assert_string_equal(l.bucket.graph_walk, "decode");
    assert_true(mstar_graph_runner_captures_walk(f->r, "decode_alias"));
    assert_false(mstar_graph_runner_captures_walk(f->r, "other"));
    assert_non_null(mstar_graph_runner_slot_for(f->r, &l));
    assert_false(mstar_graph_runner_is_packed(f->r, &l));
    uint32_t idx = 9;
    assert_non_null(mstar_graph_runner_config_for(f->r, &l, &idx));
    assert_int_equal(idx, 0);
    fx_destroy(f);
}

/* Appends every byte a row set carries (lengths, names, shapes, tensor bytes) to buf. */
static size_t rows_bytes(const mstar_node_input *rows, size_t n, unsigned char *buf, size_t cap)
{
    size_t len = 0;
#define PUT(p, k)                      \
    do {                               \
        assert_true(len + (k) <= cap); \
        memcpy(buf + len, (p), (k));   \
        len += (k);                    \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        PUT(&rows[i].seq_len, sizeof(rows[i].seq_len));
        for (size_t j = 0; j < mstar_tensor_map_count(rows[i].tensors); j++) {
            const char *name = mstar_tensor_map_name(rows[i].tensors, j);
            const mstar_tensor *t = mstar_tensor_map_at(rows[i].tensors, j);
            PUT(name, strlen(name) + 1);
            PUT(&t->dtype, sizeof(t->dtype));
            PUT(t->shape, (size_t)t->ndim * sizeof(t->shape[0]));
            PUT(mstar_tensor_ptr(t), (size_t)mstar_tensor_nbytes(t));
        }
    }
#undef PUT
    return len;
}

/* G-15: declare_inputs_for is cached and read-only: the same rows, holding the config's template
 * (make_row's bytes), and every byte of them unchanged by a declare over them and by replays of
 * the bucket and of others (which pad from the same templates). */
static void test_declare_inputs_for_is_cached_and_unchanged(void **state)
{
    for (size_t i = 0; i < 64; i++)
        template_x[i] = 0.5f + (float)i;
    struct fx *f = fx_create_captured();
    mstar_slot_lease l;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 4, -1, -1, NULL, &l));
    const mstar_node_input *rows, *again;
    size_t n, n2;
    assert_mstar_ok(mstar_graph_runner_declare_inputs_for(f->r, &l, &rows, &n));
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        const mstar_tensor *x = mstar_tensor_map_get(rows[i].tensors, "x");
        assert_int_equal(rows[i].seq_len, 1);
        assert_int_equal(x->shape[0], 1);
        assert_true(((const float *)mstar_tensor_ptr(x))[0] == template_x[0]);
    }
    static unsigned char before[4096], after[4096];
    size_t nb = rows_bytes(rows, n, before, sizeof(before));
    int64_t ids[4] = { 0, 1, 2, 3 };
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    bool declared;
    assert_mstar_ok(declare_step(&f->toy, "decode", ids, rows, n, step, &declared));
    mstar_step_destroy(step);
    float xs[8] = { 9, 8, 7, 6, 5, 4, 3, 2 };
    mstar_slot_lease used;
    for (size_t k = 1; k <= 8; k++)
        replay_step(f, k, xs, &used);
    assert_mstar_ok(mstar_graph_runner_declare_inputs_for(f->r, &l, &again, &n2));
    assert_ptr_equal(again, rows);
    assert_int_equal(n2, n);
    assert_int_equal(rows_bytes(again, n2, after, sizeof(after)), nb);
    assert_memory_equal(before, after, nb);
    fx_destroy(f);
    memset(template_x, 0, sizeof(template_x));
}

/* release with a negative real_bs is refused (it would reset rows before the slot's padding
 * rows), and so is one past the bucket; a valid release still works after both. */
static void test_release_refuses_bad_real_bs(void **state)
{
    struct fx *f = fx_create_captured();
    mstar_slot_lease l;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, -1, 2, NULL, &l));
    assert_mstar_status(mstar_graph_runner_release(f->r, &l, -1), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "real_bs -1"));
    assert_mstar_status(mstar_graph_runner_release(f->r, &l, l.bucket.bs + 1), MSTAR_EINVAL);
    assert_mstar_ok(mstar_graph_runner_release(f->r, &l, 1));
    assert_int_equal(f->kv.pages_used, 0);
    fx_destroy(f);
}

/* G-16: a different cg_key_info misses the capture (eager), it is not an error. */
static void test_key_info_mismatch_misses(void **state)
{
    mstar_graph_config c;
    base_config(&c);
    c.cg_key_info = "cfg";
    struct fx *f = fx_create(&c, 1, -1);
    f->toy.key_info = "cfg";
    fx_capture(f);
    assert_true(mstar_graph_runner_can_run(f->r, "decode", 2, 2, "cfg"));
    assert_false(mstar_graph_runner_can_run(f->r, "decode", 2, 2, NULL));
    assert_false(mstar_graph_runner_can_run(f->r, "decode", 2, 2, "nocfg"));
    fx_destroy(f);
}

/* G-16, the raise: a step declared with another cg_key_info than the bucket it is captured for
 * is refused, naming both keys, and the bucket is dropped instead of captured under the wrong key
 * (no key at all against a keyed bucket included). */
static void test_key_info_mismatch_at_capture_is_refused(void **state)
{
    const char *declared[2] = { "nocfg", NULL };
    const char *logged[2] = { "cg_key_info 'nocfg' is not the bucket's 'cfg'",
                              "cg_key_info '(none)' is not the bucket's 'cfg'" };
    for (int i = 0; i < 2; i++) {
        mstar_graph_config c;
        base_config(&c);
        c.cg_key_info = "cfg";
        struct fx *f = fx_create(&c, 1, -1);
        f->toy.key_info = declared[i];
        mstar_test_log_capture_begin(MSTAR_LOG_WARN);
        fx_capture(f);
        mstar_test_log_capture_end();
        assert_true(mstar_test_log_contains(logged[i]));
        size_t nd;
        mstar_graph_runner_dropped_buckets(f->r, &nd);
        assert_int_equal(nd, 4);
        assert_false(mstar_graph_runner_any_graphs(f->r));
        assert_false(mstar_graph_runner_can_run(f->r, "decode", 2, 2, "cfg"));
        assert_int_equal(f->toy.forwards, 0); /* refused before any warm-up */
        fx_destroy(f);
    }
}

/* design.md "Replay" / G-16 at replay: a leased step whose cg_key_info is not its bucket's is
 * refused at admit (and pre-admit), naming both; and run_forward refuses a lease whose bucket's key
 * is not the one the step planned on its slot declared. Matching keys replay as before. */
static void test_key_info_mismatch_at_replay_is_refused(void **state)
{
    mstar_graph_config c[2];
    base_config(&c[0]);
    base_config(&c[1]);
    c[1].cg_key_info = "cfg";
    c[1].replay_graph_walks = NULL;
    c[1].n_replay_graph_walks = 0;
    struct fx *f = fx_create(c, 2, -1);
    f->toy.key_info = "cfg";
    fx_prepare(f);
    /* Each config's buckets declare its own key: capture one config at a time. */
    mstar_bucket_key keyed[4], plain[4];
    size_t nb, nk = 0, np = 0;
    const mstar_bucket_key *all = mstar_graph_runner_buckets(f->r, &nb);
    for (size_t i = 0; i < nb; i++) {
        if (all[i].cg_key_info != NULL)
            keyed[nk++] = all[i];
        else
            plain[np++] = all[i];
    }
    assert_mstar_ok(mstar_graph_runner_warmup_and_capture(f->r, keyed, nk));
    f->toy.key_info = NULL;
    assert_mstar_ok(mstar_graph_runner_warmup_and_capture(f->r, plain, np));
    assert_mstar_ok(mstar_dummy_rows_release_all(mstar_graph_runner_dummy_rows(f->r)));
    assert_true(mstar_graph_runner_can_run(f->r, "decode", 2, 2, "cfg"));
    assert_true(mstar_graph_runner_can_run(f->r, "decode", 2, 2, NULL));

    mstar_slot_lease lk, lp;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, 0, 2, "cfg", &lk));
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, 0, 2, NULL, &lp));
    const mstar_node_input *rows;
    size_t n;
    assert_mstar_ok(mstar_graph_runner_declare_inputs_for(f->r, &lk, &rows, &n));
    int64_t ids[2];
    assert_mstar_ok(mstar_graph_runner_step_ids(f->r, &lk, NULL, 0, ids));
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    bool declared;
    f->toy.key_info = "nocfg"; /* declared under the keyed lease with another key */
    assert_mstar_ok(declare_step(&f->toy, "decode", ids, rows, n, step, &declared));
    lease_context(step, ids, n, &lk);
    mstar_step_admit_result ar;
    assert_mstar_status(mstar_step_runner_admit(f->sr, step, &ar), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "cg_key_info 'nocfg' is not its lease's"));
    assert_non_null(strstr(mstar_last_error(), "key=cfg"));
    assert_mstar_status(mstar_step_runner_pre_admit(f->sr, step, &ar), MSTAR_EINVAL);
    assert_int_equal(f->kv.pages_used, 0); /* refused before any resource admitted */

    /* The right key: admitted and planned on slot 0; a replay on the other bucket is refused. */
    mstar_step_reset(step);
    f->toy.key_info = "cfg";
    assert_mstar_ok(declare_step(&f->toy, "decode", ids, rows, n, step, &declared));
    lease_context(step, ids, n, &lk);
    assert_mstar_ok(mstar_step_runner_admit(f->sr, step, &ar));
    assert_true(ar.ok);
    assert_mstar_ok(mstar_step_runner_plan(f->sr, step));
    mstar_tensor_map *pre;
    assert_mstar_ok(mstar_tensor_map_create(&pre));
    assert_mstar_ok(preprocess(&f->toy, step, rows, n, pre));
    const mstar_tensor_map *outs = NULL;
    mstar_signal *started;
    assert_mstar_ok(mstar_signal_create(&started));
    assert_mstar_status(mstar_graph_runner_run_forward(f->r, &lp, pre, NULL, started, &outs),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "declared cg_key_info 'cfg', not the lease's"));
    assert_true(mstar_signal_is_set(started)); /* G-27: waiters released on this path too */
    assert_null(outs);
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &lk, pre, NULL, NULL, &outs));
    assert_non_null(outs);
    assert_mstar_ok(mstar_step_runner_commit(f->sr, step));
    assert_mstar_ok(mstar_graph_runner_release(f->r, &lk, 0));
    mstar_signal_destroy(started);
    mstar_tensor_map_destroy(pre);
    mstar_step_destroy(step);
    fx_destroy(f);
}

/* G-17 and G-27: an unknown staging key fails run_forward, and launch_started is still set; a
 * captured key missing at replay is warned about once. */
static void test_staging_keys_and_waiters(void **state)
{
    struct fx *f = fx_create_captured();
    mstar_slot_lease l;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, -1, 2, NULL, &l));
    mstar_tensor_map *pre;
    assert_mstar_ok(mstar_tensor_map_create(&pre));
    float v[2] = { 1, 2 };
    map_set_f32(pre, "bogus", v, 2);
    mstar_signal *started;
    assert_mstar_ok(mstar_signal_create(&started));
    const mstar_tensor_map *outs = NULL;
    assert_mstar_status(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, started, &outs),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "'bogus' was not captured"));
    assert_true(mstar_signal_is_set(started));
    mstar_signal_reset(started);
    mstar_slot_lease none = { 5, l.bucket }; /* no such slot */
    assert_mstar_status(mstar_graph_runner_run_forward(f->r, &none, pre, NULL, started, &outs),
                        MSTAR_ENOENT);
    assert_true(mstar_signal_is_set(started));
    mstar_tensor_map_clear(pre);
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs));
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs));
    mstar_test_log_capture_end();
    assert_int_equal(mstar_test_log_count("captured input 'x' is missing"), 1);
    /* too long for the static buffer */
    float big[3] = { 0 };
    map_set_f32(pre, "x", big, 3);
    assert_mstar_status(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs),
                        MSTAR_EINVAL);
    mstar_signal_destroy(started);
    mstar_tensor_map_destroy(pre);
    fx_destroy(f);
}

/* Zero-copy staging: the leased slot's static input, narrowed to the step's length, is the
 * buffer the graph reads; a value built there is not copied at run_forward, any other value is;
 * positions past the length keep their contents. Bad leases, keys and lengths are refused. */
static void test_zero_copy_staging(void **state)
{
    struct fx *f = fx_create_captured();
    mstar_slot_lease l;
    assert_true(mstar_graph_runner_lease_slot(f->r, "decode", 2, -1, 2, NULL, &l));
    assert_int_equal(l.bucket.bs, 2);
    const mstar_tensor *captured = mstar_tensor_map_get(
        mstar_graph_slot_static_inputs(mstar_graph_runner_slot_for(f->r, &l)), "x");
    mstar_tensor x, x1;
    assert_mstar_ok(mstar_graph_runner_static_input(f->r, &l, "x", 2, &x));
    assert_ptr_equal(mstar_tensor_ptr(&x), mstar_tensor_ptr(captured));
    assert_int_equal(x.ndim, 1);
    assert_int_equal(x.shape[0], 2);
    assert_int_equal(x.dtype, MSTAR_DTYPE_FLOAT32);
    assert_mstar_ok(mstar_graph_runner_static_input(f->r, &l, "x", 1, &x1));
    assert_ptr_equal(mstar_tensor_ptr(&x1), mstar_tensor_ptr(captured));
    assert_int_equal(x1.shape[0], 1);
    assert_int_equal(x1.strides[0], captured->strides[0]);
    mstar_tensor bad;
    assert_mstar_status(mstar_graph_runner_static_input(f->r, &l, "x", 3, &bad), MSTAR_ERANGE);
    assert_mstar_status(mstar_graph_runner_static_input(f->r, &l, "x", -1, &bad), MSTAR_ERANGE);
    assert_mstar_status(mstar_graph_runner_static_input(f->r, &l, "bogus", 2, &bad), MSTAR_ENOENT);
    mstar_slot_lease none = { 5, l.bucket };
    assert_mstar_status(mstar_graph_runner_static_input(f->r, &none, "x", 2, &bad), MSTAR_ENOENT);
    assert_mstar_status(mstar_graph_runner_static_input(f->r, &l, "x", 2, NULL), MSTAR_EINVAL);

    const float *plan = f->kv.plan_buf[l.slot];
    mstar_tensor_map *pre;
    assert_mstar_ok(mstar_tensor_map_create(&pre));
    const mstar_tensor_map *outs = NULL;
    /* Built in place: run_forward enqueues no copy, and the graph reads what was written. */
    ((float *)mstar_tensor_ptr(&x))[0] = 3;
    ((float *)mstar_tensor_ptr(&x))[1] = 4;
    assert_mstar_ok(mstar_tensor_map_set(pre, "x", &x));
    uint64_t before = f->s->enqueued;
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs));
    assert_int_equal(f->s->enqueued, before);
    const float *y = mstar_tensor_map_get(outs, "y")->data;
    assert_true(y[0] == 2.0f * 3 + plan[0] && y[1] == 2.0f * 4 + plan[1]);
    /* Any other source is copied in: one copy. */
    float v[2] = { 5, 6 };
    map_set_f32(pre, "x", v, 2);
    before = f->s->enqueued;
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs));
    assert_int_equal(f->s->enqueued, before + 1);
    assert_true(y[0] == 2.0f * 5 + plan[0] && y[1] == 2.0f * 6 + plan[1]);
    /* Narrowed to one row: no copy, and the position past it keeps its contents. */
    ((float *)mstar_tensor_ptr(&x1))[0] = 7;
    assert_mstar_ok(mstar_tensor_map_set(pre, "x", &x1));
    before = f->s->enqueued;
    assert_mstar_ok(mstar_graph_runner_run_forward(f->r, &l, pre, NULL, NULL, &outs));
    assert_int_equal(f->s->enqueued, before);
    assert_true(y[0] == 2.0f * 7 + plan[0] && y[1] == 2.0f * 6 + plan[1]);
    mstar_tensor_map_destroy(pre);
    fx_destroy(f);
}

/* G-4 through the runner: a replay's graph records its slot's event, so the next pre-plan of
 * that slot waits for it on the plan stream; a slot no replay used is not waited for. */
static void test_replay_event_orders_preplan(void **state)
{
    struct fx *f = fx_create_captured();
    mstar_stream *plan = mstar_step_runner_plan_stream(f->sr);
    float xs[1] = { 1 };
    mstar_slot_lease used;
    replay_step(f, 1, xs, &used);
    mstar_step *step;
    assert_mstar_ok(mstar_step_create(&step));
    char payload = 1;
    assert_mstar_ok(mstar_step_set_resource(step, "kv", &payload, 1));
    mstar_step_ctx *ctx = mstar_step_context(step);
    ctx->has_lease = true;
    ctx->lease = (mstar_slot_lease){ 1 - used.slot, used.bucket };
    uint64_t waits = plan->waits;
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, NULL));
    assert_int_equal(plan->waits, waits);
    ctx->lease = used;
    assert_mstar_ok(mstar_step_runner_pre_plan(f->sr, step, NULL));
    assert_int_equal(plan->waits, waits + 1);
    assert_non_null(plan->last_waited);
    mstar_step_runner_clear_preplan(f->sr, -1);
    mstar_step_destroy(step);
    fx_destroy(f);
}

/* G-13 / G-8: padding rows allocate nothing, and nothing stays resident after release. */
static void test_padding_never_allocates(void **state)
{
    struct fx *f = fx_create_captured();
    float xs[1] = { 5 };
    mstar_slot_lease l;
    replay_step(f, 1, xs, &l);
    replay_step(f, 1, xs, &l);
    assert_int_equal(f->kv.pages_used, 2); /* the one real request's two tokens */
    for (int i = 0; i < MAX_PAD; i++) {
        assert_int_equal(f->kv.pad_lens[i], 0);
        assert_int_equal(f->kv.pad_resv[i], 0);
    }
    fx_destroy(f);
}

/* G-12: a smaller bucket interned before a larger one hard-fails; so does a trailing dim that
 * differs. */
static void test_interning_order_and_trailing_dims(void **state)
{
    struct fx *f = fx_create_base();
    fx_prepare(f);
    mstar_bucket_key small = { "decode", 2, 2, NULL }, large = { "decode", 8, 8, NULL };
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_graph_runner_capture_throwaway(f->r, &small, 0, &g, NULL));
    mstar_graph_destroy(g);
    assert_mstar_status(mstar_graph_runner_capture_throwaway(f->r, &large, 0, &g, NULL),
                        MSTAR_ERANGE);
    assert_non_null(strstr(mstar_last_error(), "smaller bucket was captured before a larger"));

    mstar__vec interned;
    mstar__vec_init(&interned, sizeof(mstar__interned));
    float buf[12] = { 0 };
    int64_t s34[2] = { 3, 4 }, s35[2] = { 3, 5 }, s42[2] = { 4, 2 };
    mstar_tensor a, b, view;
    int32_t d;
    assert_mstar_ok(mstar_tensor_init(&a, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, s34));
    assert_mstar_ok(mstar__intern(&interned, f->s, 0, "k", &a, 4, -1, &view, &d));
    assert_int_equal(d, 1);
    assert_mstar_ok(mstar_tensor_init(&b, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, s35));
    assert_mstar_status(mstar__intern(&interned, f->s, 0, "k", &b, 5, -1, &view, &d), MSTAR_ERANGE);
    assert_mstar_ok(mstar_tensor_init(&b, buf, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, s42));
    assert_mstar_status(mstar__intern(&interned, f->s, 0, "k", &b, 2, -1, &view, &d), MSTAR_ERANGE);
    assert_non_null(strstr(mstar_last_error(), "only the seq dim"));
    mstar__interned_free(&interned, f->b);
    fx_destroy(f);
}

/* G-11: with a declared seq dim, an ambiguous [3, n] with n = 3 narrows dim 1 (mrope), not the
 * first dim of size n. Staging the buffer's own narrowed view copies nothing (zero-copy). */
static void test_declared_seq_dim(void **state)
{
    mstar_backend *b;
    mstar_stream *s;
    assert_int_equal(mstar_test_host_open(&b, &s), 0);
    mstar__vec interned;
    mstar__vec_init(&interned, sizeof(mstar__interned));
    float first[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };
    int64_t s33[2] = { 3, 3 }, s32[2] = { 3, 2 };
    mstar_tensor a, v, view;
    int32_t d;
    assert_mstar_ok(mstar_tensor_init(&a, first, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, s33));
    assert_mstar_ok(mstar__intern(&interned, s, 0, "mrope", &a, 3, 1, &view, &d));
    assert_int_equal(d, 1);
    float next[6] = { -1, -2, -3, -4, -5, -6 };
    assert_mstar_ok(mstar_tensor_init(&v, next, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, s32));
    assert_mstar_ok(mstar__stage(s, &view, d, &v, "mrope", false, NULL));
    const float *st = view.data;
    const float want[9] = { -1, -2, 3, -3, -4, 6, -5, -6, 9 };
    for (int i = 0; i < 9; i++)
        assert_true(st[i] == want[i]);
    /* with zero_tail, each row's positions past the value's are zeroed */
    assert_mstar_ok(mstar__stage(s, &view, d, &v, "mrope", true, NULL));
    const float zeroed[9] = { -1, -2, 0, -3, -4, 0, -5, -6, 0 };
    for (int i = 0; i < 9; i++)
        assert_true(st[i] == zeroed[i]);
    /* the buffer's own storage narrowed to [3, 2] (in place, not contiguous): no copy, with
     * zero_tail one memset per row; in another layout it is a non-contiguous value, refused */
    mstar_tensor in_place = view;
    in_place.shape[1] = 2;
    ((float *)view.data)[0] = 10;
    uint64_t before = s->enqueued;
    assert_mstar_ok(mstar__stage(s, &view, d, &in_place, "mrope", false, NULL));
    assert_int_equal(s->enqueued, before);
    assert_mstar_ok(mstar__stage(s, &view, d, &in_place, "mrope", true, NULL));
    assert_int_equal(s->enqueued, before + 3);
    const float kept[9] = { 10, -2, 0, -3, -4, 0, -5, -6, 0 };
    for (int i = 0; i < 9; i++)
        assert_true(st[i] == kept[i]);
    in_place.strides[0] = 1;
    in_place.strides[1] = 3;
    assert_mstar_status(mstar__stage(s, &view, d, &in_place, "mrope", false, NULL), MSTAR_EINVAL);
    /* undeclared, the same value's seq dim is the first of size 3: dim 0 */
    assert_mstar_ok(mstar__intern(&interned, s, 1, "mrope", &a, 3, -1, &view, &d));
    assert_int_equal(d, 0);
    mstar__interned_free(&interned, b);
    mstar_test_host_close(b, s);
}

/* G-33: two batched configs of one walk: the tightest bucket over both answers. */
static void test_two_configs_of_one_walk(void **state)
{
    mstar_graph_config c[2];
    base_config(&c[0]);
    base_config(&c[1]);
    c[1].seq_len = 4;
    static const int64_t sizes[] = { 2 };
    c[1].capture_batch_sizes = sizes;
    c[1].n_capture_batch_sizes = 1;
    struct fx *f = fx_create(c, 2, -1);
    fx_capture(f);
    mstar_bucket_key k;
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 2, 2, NULL, &k));
    assert_int_equal(k.num_tokens, 2);
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 2, 5, NULL, &k));
    assert_int_equal(k.num_tokens, 8);
    assert_int_equal(k.bs, 2);
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 1, 7, NULL, &k));
    assert_int_equal(k.num_tokens, 8);
    assert_int_equal(k.bs, 2); /* (8 tokens, bs 2) beats (8 tokens, bs 8) */
    fx_destroy(f);
}

/* G-31: caps_eager_batch_size false makes a config's sizes an acceleration subset that caps no
 * batch; the cap of a walk is the largest size over the configs that do cap it. */
static void test_caps_eager_batch_size(void **state)
{
    mstar_graph_config c[2];
    base_config(&c[0]);
    c[0].caps_eager_batch_size = false;
    struct fx *f = fx_create(c, 1, -1);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "decode"), -1);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "decode_alias"), -1);
    fx_destroy(f);
    base_config(&c[1]);
    c[1].seq_len = 4;
    static const int64_t sizes[] = { 2 };
    c[1].capture_batch_sizes = sizes;
    c[1].n_capture_batch_sizes = 1;
    f = fx_create(c, 2, -1);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "decode"), 2);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "decode_alias"), 2);
    assert_int_equal(mstar_graph_runner_max_batch_size_for(f->r, "prefill"), -1);
    fx_destroy(f);
}

/* G-25: warm-ups run on the stream the capture then runs on. The forward needs a workspace of
 * its stream, made on first use, which a capture refuses to make: had the warm-ups run on any
 * other stream, every capture would fail and its bucket be dropped. One workspace, made by the
 * first warm-up; every bucket captured (one capture per bucket and slot) and replaying right. */
static void test_warmups_run_on_the_capture_stream(void **state)
{
    struct fx *f = fx_create_base();
    f->toy.per_stream_workspace = true;
    fx_capture(f);
    assert_int_equal(f->toy.forwards, 4 * 2 * (MSTAR_NUM_WARMUP + 1));
    assert_int_equal(f->toy.captured, 4 * 2);
    size_t nd;
    mstar_graph_runner_dropped_buckets(f->r, &nd);
    assert_int_equal(nd, 0);
    assert_int_equal(f->toy.n_ws, 1);
    assert_non_null(f->toy.ws[0].buf);
    float xs[3] = { 1, 2, 3 };
    int64_t before[3];
    memcpy(before, f->kv.lens, sizeof(before));
    mstar_slot_lease l;
    const float *y = replay_step(f, 3, xs, &l);
    assert_int_equal(l.bucket.bs, 4);
    assert_int_equal(f->toy.n_ws, 1);
    for (int i = 0; i < 3; i++)
        assert_true(y[i] == 2.0f * xs[i] + (float)before[i]);
    fx_destroy(f);
}

/* G-10: a packed bucket with as many tokens as rows is refused when the config is checked, with
 * an error naming the pair (not dropped silently); pairs with fewer tokens than rows are captured
 * as configured. Validation errors name the config and field. */
static void test_config_validation(void **state)
{
    mstar_graph_config c;
    base_config(&c);
    c.kind = MSTAR_GRAPH_PACKED;
    static const int64_t toks[] = { 4, 64 };
    c.capture_token_lengths = toks;
    c.n_capture_token_lengths = 2;
    assert_mstar_status(mstar_graph_config_validate(&c, 2), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "config 2: packed bucket bs=4 tokens=4"));
    c.capture_batch_sizes = NULL; /* the defaults hold 64 */
    c.n_capture_batch_sizes = 0;
    static const int64_t toks64[] = { 64, 128 };
    c.capture_token_lengths = toks64;
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "bs=64 tokens=64"));
    base_config(&c);
    c.kind = MSTAR_GRAPH_PACKED;
    static const int64_t fewer[] = { 3, 64 };
    c.capture_token_lengths = fewer;
    c.n_capture_token_lengths = 2;
    struct fx *f = fx_create(&c, 1, -1);
    size_t n;
    mstar_graph_runner_buckets(f->r, &n);
    assert_int_equal(n, 4 + 4); /* 3 and 64 at every bs, bs 4 and 8 with fewer tokens than rows */
    fx_capture(f);
    mstar_bucket_key k;
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 5, 3, NULL, &k));
    assert_int_equal(k.bs, 8);
    assert_int_equal(k.num_tokens, 3);
    fx_destroy(f);

    base_config(&c);
    static const int64_t dup[] = { 2, 2 };
    c.capture_batch_sizes = dup;
    c.n_capture_batch_sizes = 2;
    assert_mstar_status(mstar_graph_config_validate(&c, 3), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "config 3: capture_batch_sizes lists 2 twice"));
    base_config(&c);
    c.plan_tokens_per_input_token = 0;
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
    base_config(&c);
    c.make_node_input = NULL;
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
    base_config(&c);
    c.capture_graph_walk = "bad walk";
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
    base_config(&c);
    c.compile_mode = (mstar_compile_mode)7;
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
    base_config(&c);
    c.seq_len = 0;
    assert_mstar_status(mstar_graph_config_validate(&c, 0), MSTAR_EINVAL);
}

/* The token multiplier: a bucket counts plan tokens, a request input tokens. */
static void test_token_multiplier(void **state)
{
    mstar_graph_config c;
    base_config(&c);
    c.plan_tokens_per_input_token = 2;
    c.cg_key_info = "cfg";
    struct fx *f = fx_create(&c, 1, -1);
    f->toy.key_info = "cfg";
    fx_capture(f);
    mstar_bucket_key k;
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 3, 3, "cfg", &k));
    assert_int_equal(k.bs, 4);
    assert_int_equal(k.num_tokens, 8);
    fx_destroy(f);
}

/* G-26: buffers are built once, after every claim; a later claim is refused, and a repeated
 * build is tolerated as the reference's resources tolerate it: it builds nothing again and moves
 * no buffer. */
static void test_claims_then_one_build(void **state)
{
    struct fx *f = fx_create_base();
    assert_mstar_status(mstar_graph_runner_warmup_and_capture(f->r, NULL, 0), MSTAR_ESTATE);
    const mstar_cg_slot_spec *specs;
    size_t n;
    assert_mstar_ok(mstar_graph_runner_prepare_for_capture(f->r, &specs, &n));
    assert_int_equal(n, 8); /* 4 buckets × 2 slots */
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
    assert_int_equal(f->kv.builds, 1);
    float *before = f->kv.plan_buf[0];
    assert_mstar_status(mstar_graph_runner_prepare_for_capture(f->r, NULL, NULL), MSTAR_ESTATE);
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
    assert_int_equal(f->kv.builds, 1);
    assert_mstar_ok(mstar_graph_runner_warmup_and_capture(f->r, NULL, 0));
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(f->sr));
    assert_ptr_equal(f->kv.plan_buf[0], before);
    assert_int_equal(f->kv.builds, 1);
    fx_destroy(f);
}

/* ---- loaned outputs ---------------------------------------------------------------------------
 */

/* A loaner over malloc that counts what is open, and can refuse (ENOSPC or another error) or
 * lend a loan too small for the output. */
#define MOCK_LOANS 8

struct mock_loaner {
    mstar_status refuse; /* MSTAR_OK: lend */
    int refuse_after;    /* > 0: refuse (with `refuse`) once this many are lent */
    bool too_small;
    void *open[MOCK_LOANS];
    int lent, released;
};

static mstar_status mock_loan(void *user, mstar_dtype dtype, const int64_t *shape, int32_t ndim,
                              mstar_tensor *tensor, uint64_t *id)
{
    struct mock_loaner *m = user;
    if (m->refuse != MSTAR_OK && (m->refuse_after == 0 || m->lent >= m->refuse_after))
        return mstar_error_set(m->refuse, "mock loaner refuses");
    int i = 0;
    while (i < MOCK_LOANS && m->open[i] != NULL)
        i++;
    assert_true(i < MOCK_LOANS);
    assert_mstar_ok(mstar_tensor_init(tensor, NULL, mstar_device_cpu(), dtype, ndim, shape));
    if (m->too_small)
        tensor->shape[0] = 0;
    m->open[i] = malloc((size_t)mstar_tensor_nbytes(tensor) + 1);
    tensor->data = m->open[i];
    *id = (uint64_t)i + 1;
    m->lent++;
    return MSTAR_OK;
}

static void mock_release(void *user, uint64_t id)
{
    struct mock_loaner *m = user;
    assert_true(id >= 1 && id <= MOCK_LOANS && m->open[id - 1] != NULL);
    free(m->open[id - 1]);
    m->open[id - 1] = NULL;
    m->released++;
}

/* Each replay's output lands in its own loan, by one copy on the compute stream, and stays
 * there while later replays (other inputs) overwrite the static buffer. */
static void test_loaned_outputs_hold_each_replay(void **state)
{
    struct fx *f = fx_create_captured();
    struct mock_loaner m = { 0 };
    mstar_output_loaner loaner = { mock_loan, mock_release, &m };
    const char *keys[] = { "y" };
    mstar_output_loan loans[3];
    float want[3][2];
    const float *y = NULL;
    mstar_slot_lease l;
    for (int r = 0; r < 3; r++) {
        float xs[2] = { (float)r + 1, 10.0f * (float)r };
        y = replay_step(f, 2, xs, &l);
        uint64_t before = f->s->enqueued;
        assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, keys, 1, &loaner, &loans[r]));
        assert_int_equal(f->s->enqueued, before + 1); /* the one copy */
        assert_mstar_ok(mstar_stream_synchronize(f->s));
        assert_int_not_equal(loans[r].id, 0);
        assert_int_equal(loans[r].tensor.dtype, MSTAR_DTYPE_FLOAT32);
        assert_int_equal(loans[r].tensor.shape[0], 2);
        memcpy(want[r], y, sizeof(want[r]));
    }
    for (int r = 0; r < 3; r++)
        assert_memory_equal(loans[r].tensor.data, want[r], sizeof(want[r]));
    assert_true(want[0][1] != want[2][1]);
    for (int r = 0; r < 3; r++)
        mock_release(&m, loans[r].id);
    assert_int_equal(m.lent, 3);
    fx_destroy(f);
}

/* A loaner with no memory leaves the output static (id 0); a failing one or a bad loan fails
 * the call with nothing left open; bad keys are refused before any loan is taken. */
static void test_loaned_outputs_refusals(void **state)
{
    struct fx *f = fx_create_captured();
    struct mock_loaner m = { 0 };
    mstar_output_loaner loaner = { mock_loan, mock_release, &m };
    float xs[1] = { 1 };
    mstar_slot_lease l;
    replay_step(f, 1, xs, &l);
    mstar_output_loan loan;
    const char *y[] = { "y" }, *twice[] = { "y", "y" }, *bogus[] = { "bogus" };
    m.refuse = MSTAR_ENOSPC;
    assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, y, 1, &loaner, &loan));
    assert_int_equal(loan.id, 0);
    assert_null(loan.tensor.data);
    m.refuse = MSTAR_EIO;
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, y, 1, &loaner, &loan), MSTAR_EIO);
    assert_non_null(strstr(mstar_last_error(), "mock loaner refuses"));
    m.refuse = MSTAR_OK;
    m.too_small = true;
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, y, 1, &loaner, &loan),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "output 'y'"));
    assert_int_equal(m.lent, 1);
    assert_int_equal(m.released, 1);
    m.too_small = false;
    mstar_output_loan two[2];
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, twice, 2, &loaner, two),
                        MSTAR_EINVAL);
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, bogus, 1, &loaner, &loan),
                        MSTAR_ENOENT);
    mstar_slot_lease none = { 5, l.bucket };
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &none, y, 1, &loaner, &loan),
                        MSTAR_ENOENT);
    mstar_output_loaner half = { mock_loan, NULL, &m };
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, y, 1, &half, &loan),
                        MSTAR_EINVAL);
    assert_int_equal(m.lent, 1); /* none of the refusals took a loan */
    fx_destroy(f);
}

/* The toy's forward plus a second output z = x (a copy the capture records). */
static mstar_status forward_yz(void *self, mstar_step *step, const mstar_tensor_map *in,
                               mstar_tensor_map *out)
{
    mstar_status st = forward(self, step, in, out);
    mstar_step_ctx *ctx = mstar_step_context(step);
    const mstar_tensor *x = mstar_tensor_map_get(in, "x");
    mstar_tensor z;
    if (st == MSTAR_OK)
        st = mstar_tensor_alloc(ctx->stream, MSTAR_DTYPE_FLOAT32, 1, x->shape, &z);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(ctx->stream, z.data, mstar_tensor_ptr(x),
                                (size_t)mstar_tensor_nbytes(x), MSTAR_MEMCPY_H2H);
    return st != MSTAR_OK ? st : mstar_tensor_map_set_owned(out, "z", &z, ctx->stream);
}

/* Two outputs: each gets its own loan with its own bytes; a loaner that runs dry at the second
 * leaves just that one static; one that fails there has the first given back. */
static void test_loaned_outputs_two_keys(void **state)
{
    mstar_graph_config c;
    base_config(&c);
    c.forward = forward_yz;
    struct fx *f = fx_create(&c, 1, -1);
    fx_capture(f);
    struct mock_loaner m = { 0 };
    mstar_output_loaner loaner = { mock_loan, mock_release, &m };
    const char *keys[] = { "z", "y" };
    float xs[2] = { 3, 4 };
    mstar_slot_lease l;
    const float *y = replay_step(f, 2, xs, &l);
    mstar_output_loan loans[2];
    assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, keys, 2, &loaner, loans));
    assert_mstar_ok(mstar_stream_synchronize(f->s));
    assert_memory_equal(loans[0].tensor.data, xs, sizeof(xs));
    assert_memory_equal(loans[1].tensor.data, y, 2 * sizeof(float));
    mock_release(&m, loans[0].id);
    mock_release(&m, loans[1].id);
    m.lent = m.released = 0;
    m.refuse = MSTAR_ENOSPC;
    m.refuse_after = 1;
    assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, keys, 2, &loaner, loans));
    assert_int_not_equal(loans[0].id, 0);
    assert_int_equal(loans[1].id, 0);
    mock_release(&m, loans[0].id);
    m.lent = m.released = 0;
    m.refuse = MSTAR_EIO;
    assert_mstar_status(mstar_graph_runner_loan_outputs(f->r, &l, keys, 2, &loaner, loans),
                        MSTAR_EIO);
    assert_int_equal(m.lent, 1);
    assert_int_equal(m.released, 1); /* the first loan went back */
    assert_int_equal(loans[0].id, 0);
    for (int i = 0; i < MOCK_LOANS; i++)
        assert_null(m.open[i]);
    fx_destroy(f);
}

/* Store the output `y` of the last replay of `l` for `rid`: its loan when it has one, else the
 * static view, copied. Held for one reader and staged. */
static mstar_tensor_info store_y(struct fx *f, mstar_comm *p, const mstar_rid *rid,
                                 const mstar_slot_lease *l, const mstar_output_loan *loan)
{
    mstar_output o = output_of(
        "y", *mstar_tensor_map_get(
                 mstar_graph_slot_static_outputs(mstar_graph_runner_slot_for(f->r, l)), "y"));
    if (loan->id != 0) {
        o.tensor = loan->tensor;
        o.loan = loan->id;
    }
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_increment_ref(p, info.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(p, rid, &info, 1));
    return info;
}

/* The consumer copies `info` out and finds `want` (2 floats); its ACK then frees the producer. */
static void read_back(comm_pair *w, const mstar_rid *rid, const mstar_tensor_info *info,
                      const float *want)
{
    mstar_edge e = edge_of("y", "n", info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, rid, &e, 1, NULL));
    collect_ready(w->c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, info->uuid, &got));
    assert_memory_equal(mstar_tensor_ptr(&got), want, 2 * sizeof(float));
    assert_mstar_ok(mstar_comm_dereference(w->c, info->uuid, 1));
    assert_int_equal(bus_deliver(&w->b, "worker_0", w->p), 1);
    mstar_edge_clear(&e);
}

/* Over the arena, through the manager's loaner: the stored tensor is the loan (its descriptor's
 * address), staging takes no second slot, and every replay's bytes reach the consumer. */
static void test_loaned_outputs_into_the_arena(void **state)
{
    comm_pair *w = arena_pair_new("graph_loans", true);
    struct fx *f = fx_create_captured();
    mstar_output_loaner loaner = { mstar_comm_output_loan, mstar_comm_output_loan_release, w->p };
    const char *keys[] = { "y" };
    mstar_tensor_info infos[3];
    float want[3][2];
    for (int r = 0; r < 3; r++) {
        float xs[2] = { (float)r + 1, 10.0f * (float)r };
        mstar_slot_lease l;
        const float *y = replay_step(f, 2, xs, &l);
        mstar_output_loan loan;
        uint64_t free_before = arena_stats_of(w->p).free_bytes;
        assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, keys, 1, &loaner, &loan));
        assert_int_not_equal(loan.id, 0);
        uint64_t free_loaned = arena_stats_of(w->p).free_bytes;
        assert_true(free_loaned < free_before); /* the loan is a slot */
        assert_mstar_ok(mstar_stream_synchronize(f->s));
        memcpy(want[r], y, sizeof(want[r]));
        mstar_rid rid = mstar_rid_from_int(r + 1);
        infos[r] = store_y(f, w->p, &rid, &l, &loan);
        assert_int_equal(infos[r].address, (uint64_t)(uintptr_t)loan.tensor.data);
        assert_true(infos[r].shm_segment[0] != '\0');
        /* Staged in place: published as the one slot, and nothing more reserved. */
        assert_int_equal(arena_stats_of(w->p).live_slots, (uint64_t)r + 1);
        assert_int_equal(arena_stats_of(w->p).free_bytes, free_loaned);
        assert_mstar_status(mstar_comm_loan_release(w->p, loan.id), MSTAR_ESTATE); /* stored */
    }
    for (int r = 0; r < 3; r++) {
        mstar_rid rid = mstar_rid_from_int(r + 1);
        read_back(w, &rid, &infos[r], want[r]);
    }
    mstar_arena_stats s = arena_stats_of(w->p);
    assert_int_equal(s.live_slots, 0);
    assert_int_equal(s.free_bytes, s.total_bytes);
    fx_destroy(f);
    void *st = w;
    arena_pair_teardown(&st);
}

/* A full arena lends nothing: the output stays static and is stored by copy, as without a loan;
 * the bytes still arrive. */
static void test_loaned_outputs_full_arena(void **state)
{
    comm_pair *w = arena_pair_new("graph_loans_full", false);
    setenv("MSTAR_SHM_ARENA_MAX_SEGMENTS", "1", 1);
    comm_pair_make(w, MSTAR_TRANSPORT_ARENA);
    uint64_t fill[64];
    int nfill = 0;
    int64_t quarter = 64 * 1024; /* floats: 256 KiB */
    mstar_tensor t;
    while (nfill < 64 && mstar_comm_output_loan(w->p, MSTAR_DTYPE_FLOAT32, &quarter, 1, &t,
                                                &fill[nfill]) == MSTAR_OK)
        nfill++;
    assert_int_equal(mstar_last_status(), MSTAR_ENOSPC);
    assert_true(nfill >= 1 && nfill < 64);
    struct fx *f = fx_create_captured();
    mstar_output_loaner loaner = { mstar_comm_output_loan, mstar_comm_output_loan_release, w->p };
    const char *keys[] = { "y" };
    float xs[2] = { 3, 4 }, want[2];
    mstar_slot_lease l;
    const float *y = replay_step(f, 2, xs, &l);
    mstar_output_loan loan;
    assert_mstar_ok(mstar_graph_runner_loan_outputs(f->r, &l, keys, 1, &loaner, &loan));
    assert_int_equal(loan.id, 0);
    memcpy(want, y, sizeof(want));
    for (int i = 0; i < nfill; i++)
        mstar_comm_output_loan_release(w->p, fill[i]);
    mstar_rid rid = mstar_rid_from_int(9);
    mstar_tensor_info info = store_y(f, w->p, &rid, &l, &loan);
    assert_int_not_equal(info.address, (uint64_t)(uintptr_t)y); /* the store's own copy */
    read_back(w, &rid, &info, want);
    assert_int_equal(arena_stats_of(w->p).live_slots, 0);
    fx_destroy(f);
    void *st = w;
    arena_pair_teardown(&st);
}

/* Planned subsets: buckets left out of the plan are dropped and fall through to larger ones. */
static void test_planned_subset(void **state)
{
    struct fx *f = fx_create_base();
    fx_prepare(f);
    mstar_bucket_key planned[2] = { { "decode", 8, 8, NULL }, { "decode", 1, 1, NULL } };
    uint64_t peak = 0;
    assert_mstar_ok(mstar_graph_runner_warm_bucket(f->r, &planned[0], &peak));
    assert_true(peak > 0);
    assert_mstar_ok(mstar_graph_runner_warmup_and_capture(f->r, planned, 2));
    size_t nd;
    mstar_graph_runner_dropped_buckets(f->r, &nd);
    assert_int_equal(nd, 2);
    mstar_bucket_key k;
    assert_true(mstar_graph_runner_select_bucket(f->r, "decode", 2, 2, NULL, &k));
    assert_int_equal(k.bs, 8);
    assert_mstar_ok(mstar_graph_runner_drop_bucket(f->r, &planned[0]));
    assert_false(mstar_graph_runner_can_run(f->r, "decode", 2, 2, NULL));
    assert_true(mstar_graph_runner_any_graphs(f->r));
    fx_destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_matches_eager_at_every_bs),
        cmocka_unit_test(test_failed_bucket_next_captures_and_lookup_falls_back),
        cmocka_unit_test(test_lease_counter_alternates_across_buckets),
        cmocka_unit_test(test_alias_lease_names_capture_walk),
        cmocka_unit_test(test_declare_inputs_for_is_cached_and_unchanged),
        cmocka_unit_test(test_release_refuses_bad_real_bs),
        cmocka_unit_test(test_key_info_mismatch_misses),
        cmocka_unit_test(test_key_info_mismatch_at_capture_is_refused),
        cmocka_unit_test(test_key_info_mismatch_at_replay_is_refused),
        cmocka_unit_test(test_staging_keys_and_waiters),
        cmocka_unit_test(test_padding_never_allocates),
        cmocka_unit_test(test_zero_copy_staging),
        cmocka_unit_test(test_replay_event_orders_preplan),
        cmocka_unit_test(test_interning_order_and_trailing_dims),
        cmocka_unit_test(test_declared_seq_dim),
        cmocka_unit_test(test_two_configs_of_one_walk),
        cmocka_unit_test(test_caps_eager_batch_size),
        cmocka_unit_test(test_warmups_run_on_the_capture_stream),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_token_multiplier),
        cmocka_unit_test(test_claims_then_one_build),
        cmocka_unit_test(test_planned_subset),
        cmocka_unit_test(test_loaned_outputs_hold_each_replay),
        cmocka_unit_test(test_loaned_outputs_refusals),
        cmocka_unit_test(test_loaned_outputs_two_keys),
        cmocka_unit_test(test_loaned_outputs_into_the_arena),
        cmocka_unit_test(test_loaned_outputs_full_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
