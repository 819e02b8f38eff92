/*
 * ref_model.c — the reference decode model on a device backend (see ref_model.h): its weights
 * uploaded in the kernels' dtype, its KV pools, and the forward, written once against the
 * backend's kernel table (ref_ops.h). The weights themselves come from ref_weights.c.
 */
#include "ref_model.h"

#include "ref_ops.h"

#include <stdlib.h>
#include <string.h>

/* The decoder's linear layers run on cuBLAS unless MSTAR_REF_SKINNY_GEMM asks for the one-kernel
 * path. On the H200 that path was no faster in replay (67.5 against 67.9 us a decode step at
 * batch size 8) and, choosing by row count, it made a row's result depend on the batch it was
 * in: the demo's self-check, which reruns requests alone, found a token that differed. */
#define REF_MODEL_LINEAR_ROWS 0

struct ref_model {
    ref_model_config cfg;
    mstar_kv_cache_config kv_cfg;
    ref_weight_layout layout;
    mstar_backend *backend;
    const ref_ops *ops;
    ref_ops_ctx *ctx;     /* the kernels' state (cuBLAS handle, workspace), made once */
    ref_profile *profile; /* when set, each op of a forward is timed (ref_model_set_profile) */
    size_t elsize;
    char *weights;             /* device, layout.total elements */
    void **k_pages, **v_pages; /* device, [layers] pools */
    size_t pool_bytes;
};

mstar_status ref_upload_f32(mstar_stream *s, void *dst, const float *host, size_t count,
                            mstar_dtype dtype)
{
    uint16_t *narrow = NULL;
    if (dtype == MSTAR_DTYPE_BFLOAT16) {
        if ((narrow = malloc(count * sizeof(uint16_t))) == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "upload of %zu bf16 values", count);
        ref_f32_to_bf16(host, narrow, count);
    } else if (dtype != MSTAR_DTYPE_FLOAT32) {
        return mstar_error_set(MSTAR_EINVAL, "upload to %s: fp32 or bf16 only",
                               mstar_dtype_name(dtype));
    }
    mstar_status st =
        mstar_memcpy_async(s, dst, narrow != NULL ? (const void *)narrow : (const void *)host,
                           count * mstar_dtype_size(dtype), MSTAR_MEMCPY_H2D);
    mstar_status sync = mstar_stream_synchronize(s);
    free(narrow);
    return st != MSTAR_OK ? st : sync;
}

/* Weights in the kernels' dtype, copied to the device; KV pools zeroed. */
static mstar_status upload(ref_model *m)
{
    size_t n = m->layout.total;
    float *host = malloc(n * sizeof(float));
    if (host == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "model: %zu host weights", n);
    ref_model_init_weights(&m->cfg, &m->layout, host);
    mstar_stream *s;
    mstar_status st = mstar_stream_create(m->backend, MSTAR_STREAM_NON_BLOCKING, &s);
    if (st == MSTAR_OK) {
        st = ref_upload_f32(s, m->weights, host, n, m->ops->act_dtype);
        for (int32_t l = 0; st == MSTAR_OK && l < m->cfg.layers; l++) {
            st = mstar_memset_async(s, m->k_pages[l], 0, m->pool_bytes);
            if (st == MSTAR_OK)
                st = mstar_memset_async(s, m->v_pages[l], 0, m->pool_bytes);
        }
        mstar_status sync = mstar_stream_synchronize(s);
        st = st != MSTAR_OK ? st : sync;
        mstar_stream_destroy(s);
    }
    free(host);
    return st;
}

mstar_status ref_model_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              mstar_backend *backend, ref_model **out)
{
    if (kv_cfg == NULL || kv_cfg->num_pages < 2 || kv_cfg->page_size < 1)
        return mstar_error_set(MSTAR_EINVAL, "model: KV config must name >= 2 pages of >= 1 "
                                             "token");
    const ref_ops *ops;
    mstar_status st = ref_ops_for(backend, &ops);
    if (st != MSTAR_OK)
        return st;
    ref_model *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "model");
    if ((st = ref_weight_layout_init(&m->layout, cfg)) != MSTAR_OK) {
        free(m);
        return st;
    }
    m->cfg = *cfg;
    m->kv_cfg = *kv_cfg;
    m->backend = backend;
    m->ops = ops;
    m->elsize = mstar_dtype_size(ops->act_dtype);
    m->pool_bytes = (size_t)kv_cfg->num_pages * (size_t)kv_cfg->page_size * (size_t)cfg->heads *
                    (size_t)cfg->head_dim * m->elsize;
    m->k_pages = calloc((size_t)cfg->layers, sizeof(void *));
    m->v_pages = calloc((size_t)cfg->layers, sizeof(void *));
    if (m->k_pages == NULL || m->v_pages == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "model: pool tables");
    if (st == MSTAR_OK)
        st = mstar_device_alloc(backend, m->layout.total * m->elsize, (void **)&m->weights);
    for (int32_t l = 0; st == MSTAR_OK && l < cfg->layers; l++) {
        st = mstar_device_alloc(backend, m->pool_bytes, &m->k_pages[l]);
        if (st == MSTAR_OK)
            st = mstar_device_alloc(backend, m->pool_bytes, &m->v_pages[l]);
    }
    if (st == MSTAR_OK)
        st = upload(m);
    if (st == MSTAR_OK)
        st = ops->ctx_create(backend, REF_MODEL_LINEAR_ROWS, &m->ctx);
    if (st != MSTAR_OK) {
        ref_model_destroy(m);
        return mstar_error_wrap("reference model");
    }
    *out = m;
    return MSTAR_OK;
}

void ref_model_destroy(ref_model *m)
{
    if (m == NULL)
        return;
    m->ops->ctx_destroy(m->ctx);
    for (int32_t l = 0; m->k_pages != NULL && l < m->cfg.layers; l++)
        mstar_device_free(m->backend, m->k_pages[l]);
    for (int32_t l = 0; m->v_pages != NULL && l < m->cfg.layers; l++)
        mstar_device_free(m->backend, m->v_pages[l]);
    free(m->k_pages);
    free(m->v_pages);
    mstar_device_free(m->backend, m->weights);
    ref_weight_layout_free(&m->layout);
    free(m);
}

void ref_model_set_profile(ref_model *m, ref_profile *profile)
{
    m->profile = profile;
}

const ref_model_config *ref_model_config_of(const ref_model *m)
{
    return &m->cfg;
}

mstar_dtype ref_model_dtype(const ref_model *m)
{
    return m->ops->act_dtype;
}

size_t ref_model_page_bytes(const ref_model *m)
{
    return m->pool_bytes / (size_t)m->kv_cfg.num_pages;
}

mstar_status ref_model_read_pool(ref_model *m, mstar_stream *stream, int32_t layer, bool v,
                                 void *host_out)
{
    if (layer < 0 || layer >= m->cfg.layers)
        return mstar_error_set(MSTAR_EINVAL, "model: layer %d, not in [0, %d)", layer,
                               m->cfg.layers);
    mstar_status st =
        mstar_memcpy_async(stream, host_out, v ? m->v_pages[layer] : m->k_pages[layer],
                           m->pool_bytes, MSTAR_MEMCPY_D2H);
    return st != MSTAR_OK ? st : mstar_stream_synchronize(stream);
}

/* The temporaries of one forward, from the stream's current allocator: x, h, qkv, attn,
 * gate_up, act per token; normed per row. */
typedef struct scratch {
    void *x, *h, *qkv, *attn, *gate_up, *act, *normed;
} scratch;

static void scratch_free(mstar_stream *s, scratch *sc)
{
    void **all[] = { &sc->x, &sc->h, &sc->qkv, &sc->attn, &sc->gate_up, &sc->act, &sc->normed };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (*all[i] != NULL)
            mstar_free(s, *all[i]);
        *all[i] = NULL;
    }
}

static mstar_status scratch_alloc(mstar_stream *s, scratch *sc, const ref_model *m, size_t t,
                                  size_t r)
{
    const ref_model_config *c = &m->cfg;
    size_t d = (size_t)c->hidden, q = (size_t)c->heads * (size_t)c->head_dim;
    size_t f = (size_t)c->mlp;
    struct {
        void **p;
        size_t n;
    } want[] = {
        { &sc->x, t * d },      { &sc->h, t * d },           { &sc->qkv, t * 3 * q },
        { &sc->attn, t * q },   { &sc->gate_up, t * 2 * f }, { &sc->act, t * f },
        { &sc->normed, r * d },
    };
    memset(sc, 0, sizeof(*sc));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        mstar_status st = mstar_alloc(s, (want[i].n ? want[i].n : 1) * m->elsize, want[i].p);
        if (st != MSTAR_OK) {
            scratch_free(s, sc);
            return mstar_error_wrap("forward scratch");
        }
    }
    return MSTAR_OK;
}

static mstar_status check_io(const ref_forward_io *io)
{
    if (io == NULL || io->num_tokens < 0 || io->num_rows < 0)
        return mstar_error_set(MSTAR_EINVAL, "forward: io is NULL or has negative sizes");
    if (io->num_rows > io->plan.rows || io->num_tokens > io->plan.tokens)
        return mstar_error_set(MSTAR_ERANGE,
                               "forward: %d rows and %d tokens, the plan holds %d "
                               "and %d",
                               io->num_rows, io->num_tokens, io->plan.rows, io->plan.tokens);
    /* Every row's output is read from some token, so a forward with rows needs one. */
    if (io->num_rows > 0 && io->num_tokens == 0)
        return mstar_error_set(MSTAR_ERANGE, "forward: %d rows but no tokens", io->num_rows);
    return MSTAR_OK;
}

/* Element `off` of the weight block. */
static const void *wt(const ref_model *m, size_t off)
{
    return m->weights + off * m->elsize;
}

/* Enqueues `call` as op `name`, between two profile marks when a profile is set; true when
 * something failed (st holds why), so a forward chains its ops with ||. */
#define OP(name, call)                                                                            \
    ((st = ref_profile_op_begin(m->profile, s, name)) != MSTAR_OK || (st = (call)) != MSTAR_OK || \
     (st = ref_profile_op_end(m->profile, s)) != MSTAR_OK)

/* A decoder layer's four linear layers, with what they fuse. The norms are the prologues of the
 * qkv and gate_up layers; rope and the KV page write are the qkv layer's epilogue, silu*mul the
 * gate_up layer's, the residual adds those of the o and down layers; the first layer reads its
 * rows straight from the embedding table (its qkv input and its o layer's residual), so no lookup
 * kernel runs. */
typedef struct layer_linears {
    ref_linear qkv, proj, gate_up, down;
} layer_linears;

static void describe_layer(const ref_model *m, const ref_forward_io *io, const scratch *sc,
                           int32_t l, layer_linears *ll)
{
    const ref_model_config *c = &m->cfg;
    const ref_layer_offsets *o = &m->layout.layer[l];
    const mstar_kv_plan *p = &io->plan;
    int64_t t = io->num_tokens, d = c->hidden, q = (int64_t)c->heads * c->head_dim, f = c->mlp;
    const void *x = l == 0 ? wt(m, m->layout.embed) : sc->x;
    const int32_t *x_rows = l == 0 ? io->tokens : NULL;
    ref_rope_kv rope = { .pos = io->positions,
                         .heads = c->heads,
                         .head_dim = c->head_dim,
                         .theta = c->rope_theta,
                         .k_pages = m->k_pages[l],
                         .v_pages = m->v_pages[l],
                         .page_size = m->kv_cfg.page_size,
                         .token_to_page = p->token_to_page,
                         .token_to_cache = p->token_to_cache };
    ll->qkv = (ref_linear){ .x = x,
                            .x_rows = x_rows,
                            .norm = wt(m, o->attn_norm),
                            .eps = c->norm_eps,
                            .w = wt(m, o->wqkv),
                            .n = t,
                            .k = d,
                            .m = 3 * q,
                            .epilogue = REF_EPI_ROPE_KV,
                            .out = sc->qkv,
                            .norm_scratch = sc->h,
                            .rope = rope };
    ll->proj = (ref_linear){ .x = sc->attn,
                             .w = wt(m, o->wo),
                             .n = t,
                             .k = q,
                             .m = d,
                             .epilogue = REF_EPI_ADD,
                             .residual = x,
                             .residual_rows = x_rows,
                             .out = sc->x };
    ll->gate_up = (ref_linear){ .x = sc->x,
                                .norm = wt(m, o->mlp_norm),
                                .eps = c->norm_eps,
                                .w = wt(m, o->w_gate_up),
                                .n = t,
                                .k = d,
                                .m = 2 * f,
                                .epilogue = REF_EPI_GATED,
                                .out = sc->act,
                                .norm_scratch = sc->h,
                                .acc_scratch = sc->gate_up };
    ll->down = (ref_linear){ .x = sc->act,
                             .w = wt(m, o->w_down),
                             .n = t,
                             .k = f,
                             .m = d,
                             .epilogue = REF_EPI_ADD,
                             .residual = sc->x,
                             .out = sc->x };
}

/* One decoder layer: on CUDA, the linears above (one kernel each for few rows) and attention,
 * which also does the qkv layer's rope and KV write for a decode step. */
static mstar_status run_layer(ref_model *m, mstar_stream *s, const ref_forward_io *io,
                              const scratch *sc, int32_t l)
{
    const ref_model_config *c = &m->cfg;
    const ref_ops *op = m->ops;
    const mstar_kv_plan *p = &io->plan;
    int64_t q = (int64_t)c->heads * c->head_dim;
    layer_linears ll;
    describe_layer(m, io, sc, l, &ll);
    mstar_status st = MSTAR_OK;
    /* A decode step (one token per row) rotates and writes its KV in the attention kernel where
     * the backend has one for it: no token reads a slot another writes in the same call. */
    if (op->rope_attention != NULL && io->one_token_per_row) {
        ll.qkv.epilogue = REF_EPI_STORE;
        if (OP(l == 0 ? "embed+rmsnorm+qkv" : "rmsnorm+qkv", op->linear(m->ctx, s, &ll.qkv)) ||
            OP("rope+attention",
               op->rope_attention(s, sc->qkv, 3 * q, &ll.qkv.rope, p->page_table, p->pages_per_row,
                                  p->token_row, p->token_kv_len, io->num_tokens, sc->attn)))
            return st;
    } else if (OP(l == 0 ? "embed+rmsnorm+qkv+rope" : "rmsnorm+qkv+rope",
                  op->linear(m->ctx, s, &ll.qkv)) ||
               OP("attention",
                  op->paged_attention(s, sc->qkv, 3 * q, m->k_pages[l], m->v_pages[l],
                                      m->kv_cfg.page_size, p->page_table, p->pages_per_row,
                                      p->token_row, p->token_kv_len, io->num_tokens, c->heads,
                                      c->head_dim, sc->attn))) {
        return st;
    }
    if (OP("o_proj+residual", op->linear(m->ctx, s, &ll.proj)) ||
        OP("rmsnorm+gate_up+silu_mul", op->linear(m->ctx, s, &ll.gate_up)) ||
        OP("down+residual", op->linear(m->ctx, s, &ll.down)))
        return st;
    return MSTAR_OK;
}

/* The layers, then the rows' last tokens normalized into lm_head (one kernel on CUDA), argmax. */
static mstar_status run_forward(ref_model *m, mstar_stream *s, const ref_forward_io *io,
                                const scratch *sc)
{
    const ref_model_config *c = &m->cfg;
    const ref_ops *op = m->ops;
    mstar_status st = MSTAR_OK;
    for (int32_t l = 0; l < c->layers; l++)
        if ((st = run_layer(m, s, io, sc, l)) != MSTAR_OK)
            return st;
    ref_linear head = { .x = sc->x,
                        .x_rows = io->plan.row_last_token,
                        .norm = wt(m, m->layout.final_norm),
                        .eps = c->norm_eps,
                        .w = wt(m, m->layout.lm_head),
                        .n = io->num_rows,
                        .k = c->hidden,
                        .m = c->vocab,
                        .epilogue = REF_EPI_STORE,
                        .out_f32 = true,
                        .out = io->logits,
                        .norm_scratch = sc->normed };
    if (OP("last+rmsnorm+lm_head", op->linear(m->ctx, s, &head)) ||
        OP("argmax", op->argmax(s, io->logits, io->num_rows, c->vocab, io->next_tokens)))
        return st;
    return MSTAR_OK;
}

bool ref_step_one_token_per_row(const mstar_step_segment *segments, size_t n, int64_t num_rows,
                                int64_t num_tokens)
{
    if (num_tokens != num_rows)
        return false;
    for (size_t i = 0; i < n; i++)
        if (segments[i].label == 0 && segments[i].span != 1)
            return false; /* a row of none (a read) or several (a prefill) */
    return true;
}

mstar_status ref_model_forward(ref_model *m, mstar_stream *stream, const ref_forward_io *io)
{
    mstar_status st = check_io(io);
    if (st != MSTAR_OK)
        return st;
    if (io->num_rows == 0)
        return MSTAR_OK;
    scratch sc;
    if ((st = scratch_alloc(stream, &sc, m, (size_t)io->num_tokens, (size_t)io->num_rows)) !=
        MSTAR_OK)
        return st;
    st = run_forward(m, stream, io, &sc);
    scratch_free(stream, &sc);
    return st;
}
