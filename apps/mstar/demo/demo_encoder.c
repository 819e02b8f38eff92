/*
 * demo_encoder.c — the encoder component and its graph runner (see demo_encoder.h).
 */
#include "demo_encoder.h"

#include "demo_weights.h"
#include "ref_ops.h"

#include <stdlib.h>
#include <string.h>

#define ENCODE_WALK "encode"

struct demo_encoder {
    mstar_backend *backend;
    const ref_ops *ops;
    ref_ops_ctx *ctx;       /* the kernels' state (cuBLAS on CUDA), made once */
    ref_model_config model; /* layers = the encoder's, seed = the encoder's */
    size_t elsize;
    void *weights; /* device: embed, per layer (norm, gate_up, down), final norm */
    size_t w_embed, w_final;
    size_t *w_norm, *w_gate_up, *w_down; /* [layers] element offsets */
    mstar_stream *stream;                /* compute: eager steps and replays */
    mstar_step_runner *sr;
    mstar_graph_pool *pool;
    mstar_graph_runner *runner; /* NULL without graphs */
    mstar_step *step;           /* the context preprocess and eager forwards read */
    demo_sizes batch_sizes, token_lengths;
    int32_t *zeros; /* the template rows' tokens */
    int32_t *pack;  /* host staging of one batch's tokens */
    size_t pack_cap;
    mstar_tensor_map *pre;       /* the last batch's preprocessed tensors */
    mstar_tensor_map *eager_out; /* the last eager batch's outputs */
};

/* ---- weights --------------------------------------------------------------------------------- */

static mstar_status load_weights(demo_encoder *e)
{
    ref_weight_layout layout;
    mstar_status st = ref_weight_layout_init(&layout, &e->model);
    if (st != MSTAR_OK)
        return st;
    size_t d = (size_t)e->model.hidden, f = (size_t)e->model.mlp;
    size_t n = 2 + 3 * (size_t)e->model.layers;
    demo_range *ranges = calloc(n, sizeof(*ranges));
    size_t *packed = calloc(n, sizeof(*packed));
    if (ranges == NULL || packed == NULL) {
        st = mstar_error_set(MSTAR_ENOMEM, "encoder weights");
    } else {
        ranges[0] = (demo_range){ layout.embed, (size_t)e->model.vocab * d };
        for (int32_t l = 0; l < e->model.layers; l++) {
            ranges[1 + 3 * l] = (demo_range){ layout.layer[l].mlp_norm, d };
            ranges[2 + 3 * l] = (demo_range){ layout.layer[l].w_gate_up, 2 * f * d };
            ranges[3 + 3 * l] = (demo_range){ layout.layer[l].w_down, d * f };
        }
        ranges[n - 1] = (demo_range){ layout.final_norm, d };
        st = demo_weights_upload(e->backend, e->ops->act_dtype, &e->model, ranges, n, &e->weights,
                                 packed);
    }
    if (st == MSTAR_OK) {
        e->w_embed = packed[0];
        for (int32_t l = 0; l < e->model.layers; l++) {
            e->w_norm[l] = packed[1 + 3 * l];
            e->w_gate_up[l] = packed[2 + 3 * l];
            e->w_down[l] = packed[3 + 3 * l];
        }
        e->w_final = packed[n - 1];
    }
    free(ranges);
    free(packed);
    ref_weight_layout_free(&layout);
    return st;
}

static const void *wt(const demo_encoder *e, size_t off)
{
    return (const char *)e->weights + off * e->elsize;
}

/* ---- the submodule the runner drives -----------------------------------------------------------
 */

/* Stateless: no resource takes part in a step, so nothing is declared. */
static mstar_status enc_declare(void *self, const char *walk, const int64_t *ids,
                                const mstar_node_input *inputs, size_t n, mstar_step *step,
                                bool *declared)
{
    *declared = false;
    return MSTAR_OK;
}

/* The rows' tokens (host int32 "tokens" tensors), packed into one device tensor. */
static mstar_status enc_preprocess(void *self, mstar_step *step, const mstar_node_input *inputs,
                                   size_t n, mstar_tensor_map *out)
{
    demo_encoder *e = self;
    mstar_stream *s = mstar_step_context(step)->stream;
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += inputs[i].seq_len;
    if ((size_t)total > e->pack_cap) {
        int32_t *grown = realloc(e->pack, (size_t)total * sizeof(int32_t));
        if (grown == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "encoder: a batch of %lld tokens",
                                   (long long)total);
        e->pack = grown;
        e->pack_cap = (size_t)total;
    }
    int64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (inputs[i].seq_len == 0)
            continue;
        const mstar_tensor *t = mstar_tensor_map_get(inputs[i].tensors, "tokens");
        if (t == NULL || t->dtype != MSTAR_DTYPE_INT32 || t->ndim != 1 ||
            t->shape[0] < inputs[i].seq_len)
            return mstar_error_set(MSTAR_EINVAL, "encoder: row %zu has no int32 'tokens' of %lld",
                                   i, (long long)inputs[i].seq_len);
        memcpy(e->pack + at, mstar_tensor_ptr(t), (size_t)inputs[i].seq_len * sizeof(int32_t));
        at += inputs[i].seq_len;
    }
    mstar_tensor dev;
    mstar_status st = mstar_tensor_alloc(s, MSTAR_DTYPE_INT32, 1, &total, &dev);
    if (st != MSTAR_OK)
        return st;
    if (total > 0)
        st = mstar_memcpy_async(s, dev.data, e->pack, (size_t)total * sizeof(int32_t),
                                MSTAR_MEMCPY_H2D);
    if (st != MSTAR_OK) {
        mstar_tensor_free(s, &dev);
        return st;
    }
    return mstar_tensor_map_set_owned(out, "tokens", &dev, s);
}

/* The temporaries of one forward: x (the residual stream), h, gate_up, act. */
typedef struct enc_scratch {
    void *x, *h, *gate_up, *act;
} enc_scratch;

static void scratch_free(mstar_stream *s, enc_scratch *sc)
{
    void *all[] = { sc->x, sc->h, sc->gate_up, sc->act };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (all[i] != NULL)
            mstar_free(s, all[i]);
    }
    memset(sc, 0, sizeof(*sc));
}

static mstar_status scratch_alloc(const demo_encoder *e, mstar_stream *s, size_t t, enc_scratch *sc)
{
    size_t d = (size_t)e->model.hidden, f = (size_t)e->model.mlp;
    size_t sizes[] = { t * d, t * d, t * 2 * f, t * f };
    void **ptrs[] = { &sc->x, &sc->h, &sc->gate_up, &sc->act };
    memset(sc, 0, sizeof(*sc));
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        mstar_status st = mstar_alloc(s, (sizes[i] ? sizes[i] : 1) * e->elsize, ptrs[i]);
        if (st != MSTAR_OK) {
            scratch_free(s, sc);
            return mstar_error_wrap("encoder scratch");
        }
    }
    return MSTAR_OK;
}

static mstar_status run_ops(const demo_encoder *e, mstar_stream *s, const int32_t *tokens,
                            int64_t t, const enc_scratch *sc, void *out)
{
    const ref_ops *op = e->ops;
    int64_t d = e->model.hidden, f = e->model.mlp;
    float eps = e->model.norm_eps;
    mstar_status st = op->embed(s, wt(e, e->w_embed), d, tokens, t, sc->x);
    for (int32_t l = 0; st == MSTAR_OK && l < e->model.layers; l++) {
        /* The residual add is the down GEMM's own (accumulate into x). */
        if ((st = op->rmsnorm(s, sc->x, wt(e, e->w_norm[l]), t, d, eps, sc->h)) != MSTAR_OK ||
            (st = op->matmul_nt(e->ctx, s, sc->h, wt(e, e->w_gate_up[l]), t, d, 2 * f, false,
                                sc->gate_up)) != MSTAR_OK ||
            (st = op->silu_mul(s, sc->gate_up, t, f, sc->act)) != MSTAR_OK)
            break;
        st = op->matmul_nt(e->ctx, s, sc->act, wt(e, e->w_down[l]), t, f, d, true, sc->x);
    }
    if (st == MSTAR_OK)
        st = op->rmsnorm(s, sc->x, wt(e, e->w_final), t, d, eps, out);
    return st;
}

/* tokens [t] → hidden [t, hidden]: what a capture records and an eager step runs. */
static mstar_status enc_forward(void *self, mstar_step *step, const mstar_tensor_map *in,
                                mstar_tensor_map *out)
{
    demo_encoder *e = self;
    mstar_stream *s = mstar_step_context(step)->stream;
    const mstar_tensor *tokens = mstar_tensor_map_get(in, "tokens");
    if (tokens == NULL || tokens->ndim != 1 || tokens->dtype != MSTAR_DTYPE_INT32)
        return mstar_error_set(MSTAR_EINVAL, "encoder forward: no int32 'tokens' input");
    int64_t t = tokens->shape[0];
    int64_t shape[2] = { t, e->model.hidden };
    mstar_tensor hidden;
    mstar_status st = mstar_tensor_alloc(s, e->ops->act_dtype, 2, shape, &hidden);
    if (st != MSTAR_OK)
        return st;
    enc_scratch sc;
    if ((st = scratch_alloc(e, s, (size_t)t, &sc)) == MSTAR_OK) {
        if (t > 0)
            st = run_ops(e, s, mstar_tensor_ptr(tokens), t, &sc, hidden.data);
        scratch_free(s, &sc);
    }
    if (st != MSTAR_OK) {
        mstar_tensor_free(s, &hidden);
        return st;
    }
    return mstar_tensor_map_set_owned(out, "hidden", &hidden, s);
}

static const mstar_submodule_ops enc_ops = { enc_declare, enc_preprocess, enc_forward };

/* A template row: `len` tokens of id 0. */
static mstar_status enc_template(void *user, mstar_stream *stream, int64_t len,
                                 mstar_tensor_map *out)
{
    demo_encoder *e = user;
    mstar_tensor t;
    mstar_status st =
        mstar_tensor_init(&t, e->zeros, mstar_device_cpu(), MSTAR_DTYPE_INT32, 1, &len);
    return st != MSTAR_OK ? st : mstar_tensor_map_set(out, "tokens", &t);
}

/* ---- creation -------------------------------------------------------------------------------- */

static mstar_status make_runner(demo_encoder *e)
{
    static const mstar_seq_dim seq_dims[] = { { "tokens", 0 } };
    mstar_graph_config c;
    mstar_graph_config_init(&c);
    c.kind = MSTAR_GRAPH_PACKED;
    c.capture_graph_walk = ENCODE_WALK;
    c.capture_batch_sizes = e->batch_sizes.v;
    c.n_capture_batch_sizes = e->batch_sizes.n;
    c.capture_token_lengths = e->token_lengths.v;
    c.n_capture_token_lengths = e->token_lengths.n;
    c.make_node_input = enc_template;
    c.template_user = e;
    c.seq_dims = seq_dims;
    c.n_seq_dims = 1;
    mstar_status st = mstar_graph_pool_create(e->backend, "encoder", &e->pool);
    if (st != MSTAR_OK)
        return st;
    mstar_graph_runner_options o = {
        .submodule_name = "encoder",
        .submodule = &enc_ops,
        .submodule_self = e,
        .configs = &c,
        .n_configs = 1,
        .step_runner = e->sr,
        .pool = e->pool,
        .num_slots = 0,
        .autocast_dtype = MSTAR_DTYPE_INVALID,
    };
    return mstar_graph_runner_create(&o, &e->runner);
}

mstar_status demo_encoder_create(mstar_backend *backend, const demo_config *cfg, bool graphs,
                                 demo_encoder **out)
{
    demo_encoder *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "encoder");
    e->backend = backend;
    e->model = cfg->model;
    e->model.layers = cfg->encoder_layers;
    e->model.seed = cfg->encoder_seed;
    e->batch_sizes = cfg->encoder_batch_sizes;
    e->token_lengths = cfg->encoder_token_lengths;
    int64_t max_tokens = demo_sizes_max(&e->token_lengths);
    mstar_status st = ref_ops_for(backend, &e->ops);
    if (st == MSTAR_OK) {
        e->elsize = mstar_dtype_size(e->ops->act_dtype);
        e->w_norm = calloc((size_t)e->model.layers, sizeof(size_t));
        e->w_gate_up = calloc((size_t)e->model.layers, sizeof(size_t));
        e->w_down = calloc((size_t)e->model.layers, sizeof(size_t));
        e->zeros = calloc((size_t)max_tokens, sizeof(int32_t));
        if (e->w_norm == NULL || e->w_gate_up == NULL || e->w_down == NULL || e->zeros == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "encoder");
    }
    if (st == MSTAR_OK)
        st = load_weights(e);
    if (st == MSTAR_OK)
        st = e->ops->ctx_create(backend, 0, &e->ctx);
    if (st == MSTAR_OK)
        st = mstar_stream_create(backend, MSTAR_STREAM_NON_BLOCKING, &e->stream);
    if (st == MSTAR_OK)
        st = mstar_step_runner_create(backend, e->stream, &e->sr);
    if (st == MSTAR_OK)
        st = mstar_step_create(&e->step);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&e->pre);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&e->eager_out);
    if (st == MSTAR_OK && graphs)
        st = make_runner(e);
    if (st != MSTAR_OK) {
        demo_encoder_destroy(e);
        return mstar_error_wrap("encoder");
    }
    *out = e;
    return MSTAR_OK;
}

void demo_encoder_destroy(demo_encoder *e)
{
    if (e == NULL)
        return;
    if (e->stream != NULL)
        mstar_stream_synchronize(e->stream);
    mstar_tensor_map_destroy(e->pre);
    mstar_tensor_map_destroy(e->eager_out);
    mstar_graph_runner_destroy(e->runner);
    mstar_graph_pool_destroy(e->pool);
    mstar_step_destroy(e->step);
    mstar_step_runner_destroy(e->sr);
    mstar_stream_destroy(e->stream);
    if (e->ops != NULL)
        e->ops->ctx_destroy(e->ctx);
    if (e->weights != NULL)
        mstar_device_free(e->backend, e->weights);
    free(e->w_norm);
    free(e->w_gate_up);
    free(e->w_down);
    free(e->zeros);
    free(e->pack);
    free(e);
}

mstar_status demo_encoder_capture(demo_encoder *e)
{
    if (e->runner == NULL)
        return MSTAR_OK;
    mstar_status st = mstar_graph_runner_prepare_for_capture(e->runner, NULL, NULL);
    if (st == MSTAR_OK)
        st = mstar_step_runner_build_graph_buffers(e->sr);
    if (st == MSTAR_OK)
        st = mstar_graph_runner_warmup_and_capture(e->runner, NULL, 0);
    if (st == MSTAR_OK)
        st = mstar_dummy_rows_release_all(mstar_graph_runner_dummy_rows(e->runner));
    if (st != MSTAR_OK)
        return mstar_error_wrap("encoder capture");
    size_t dropped;
    mstar_graph_runner_dropped_buckets(e->runner, &dropped);
    if (dropped > 0)
        mstar_log(MSTAR_LOG_WARN, "encoder: %zu buckets not captured; their batches run eagerly",
                  dropped);
    return MSTAR_OK;
}

int64_t demo_encoder_max_rows(const demo_encoder *e)
{
    return demo_sizes_max(&e->batch_sizes);
}

int64_t demo_encoder_max_tokens(const demo_encoder *e)
{
    return demo_sizes_max(&e->token_lengths);
}

mstar_dtype demo_encoder_dtype(const demo_encoder *e)
{
    return e->ops->act_dtype;
}

/* ---- a step ---------------------------------------------------------------------------------- */

static void step_context(demo_encoder *e, const mstar_slot_lease *lease)
{
    mstar_step_reset(e->step);
    mstar_step_ctx *ctx = mstar_step_context(e->step);
    ctx->stream = e->stream;
    ctx->graph_walk = ENCODE_WALK;
    ctx->slot = lease != NULL ? lease->slot : -1;
    ctx->has_lease = lease != NULL;
    if (lease != NULL)
        ctx->lease = *lease;
}

/* Pad to the lease's bucket, preprocess, replay; the padding rows are released on every path. */
static mstar_status replay(demo_encoder *e, const mstar_slot_lease *lease,
                           const mstar_node_input *rows, int32_t n, const mstar_tensor **hidden)
{
    mstar_node_input *padded = calloc((size_t)lease->bucket.bs, sizeof(*padded));
    if (padded == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "encoder: padded batch");
    step_context(e, lease);
    mstar_status st = mstar_graph_runner_pad_inputs(e->runner, lease, rows, (size_t)n, padded);
    if (st == MSTAR_OK)
        st = enc_preprocess(e, e->step, padded, (size_t)lease->bucket.bs, e->pre);
    const mstar_tensor_map *outs = NULL;
    if (st == MSTAR_OK)
        st = mstar_graph_runner_run_forward(e->runner, lease, e->pre, NULL, NULL, &outs);
    mstar_status rel = mstar_graph_runner_release(e->runner, lease, n);
    st = st != MSTAR_OK ? st : rel;
    if (st == MSTAR_OK && (*hidden = mstar_tensor_map_get(outs, "hidden")) == NULL)
        st = mstar_error_set(MSTAR_ENOENT, "encoder: the replay has no 'hidden' output");
    free(padded);
    return st;
}

static mstar_status eager(demo_encoder *e, const mstar_node_input *rows, int32_t n,
                          const mstar_tensor **hidden)
{
    step_context(e, NULL);
    mstar_status st = enc_preprocess(e, e->step, rows, (size_t)n, e->pre);
    if (st == MSTAR_OK)
        st = enc_forward(e, e->step, e->pre, e->eager_out);
    if (st == MSTAR_OK)
        *hidden = mstar_tensor_map_get(e->eager_out, "hidden");
    return st;
}

mstar_status demo_encoder_run(demo_encoder *e, const int32_t *const *prompts, const int32_t *lens,
                              int32_t n, mstar_tensor *hidden, demo_step_info *info)
{
    double t0 = demo_now();
    if (n < 1 || prompts == NULL || lens == NULL || hidden == NULL || info == NULL)
        return mstar_error_set(MSTAR_EINVAL, "encoder: a batch needs n >= 1 prompts, got %d", n);
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (lens[i] < 1 || prompts[i] == NULL)
            return mstar_error_set(MSTAR_EINVAL, "encoder: prompt %d has %d tokens", i, lens[i]);
        for (int32_t t = 0; t < lens[i]; t++) {
            if (prompts[i][t] < 0 || prompts[i][t] >= e->model.vocab)
                return mstar_error_set(MSTAR_EINVAL,
                                       "encoder: prompt %d token %d is %d, not in "
                                       "[0, %d)",
                                       i, t, prompts[i][t], e->model.vocab);
        }
        total += lens[i];
    }
    mstar_node_input *rows = calloc((size_t)n, sizeof(*rows));
    mstar_tensor_map **maps = calloc((size_t)n, sizeof(*maps));
    mstar_status st = rows == NULL || maps == NULL
                          ? mstar_error_set(MSTAR_ENOMEM, "encoder: batch of %d", n)
                          : MSTAR_OK;
    for (int32_t i = 0; st == MSTAR_OK && i < n; i++) {
        int64_t len = lens[i];
        mstar_tensor t;
        st = mstar_tensor_map_create(&maps[i]);
        if (st == MSTAR_OK)
            st = mstar_tensor_init(&t, (void *)prompts[i], mstar_device_cpu(), MSTAR_DTYPE_INT32, 1,
                                   &len);
        if (st == MSTAR_OK)
            st = mstar_tensor_map_set(maps[i], "tokens", &t);
        rows[i] = (mstar_node_input){ len, maps[i] };
    }
    mstar_tensor_map_clear(e->pre);
    mstar_tensor_map_clear(e->eager_out);
    memset(info, 0, sizeof(*info));
    mstar_slot_lease lease;
    const mstar_tensor *out = NULL;
    if (st == MSTAR_OK && e->runner != NULL &&
        mstar_graph_runner_lease_slot(e->runner, ENCODE_WALK, n, -1, total, NULL, &lease)) {
        info->replayed = true;
        info->bs = lease.bucket.bs;
        info->tokens = lease.bucket.num_tokens;
        st = replay(e, &lease, rows, n, &out);
    } else if (st == MSTAR_OK) {
        demo_bucket_fit(&e->batch_sizes, &e->token_lengths, n, total, &info->bs, &info->tokens);
        st = eager(e, rows, n, &out);
    }
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(e->stream);
    for (int32_t i = 0; maps != NULL && i < n; i++)
        mstar_tensor_map_destroy(maps[i]);
    free(maps);
    free(rows);
    if (st != MSTAR_OK)
        return mstar_error_wrap("encoder step of %d prompts, %lld tokens", n, (long long)total);
    *hidden = *out;
    hidden->shape[0] = total; /* the real tokens lead; a bucket's padded tail is dropped */
    info->rows = n;
    info->real_tokens = total;
    info->seconds = demo_now() - t0;
    return MSTAR_OK;
}
