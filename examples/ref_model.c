/*
 * ref_model.c — configuration, weights and the fp32 host forward of the reference decode model
 * (see ref_model.h).
 */
#include "ref_model.h"

#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ref_model_config ref_model_config_default(void)
{
    ref_model_config c = { .vocab = 512,
                           .hidden = 256,
                           .heads = 4,
                           .head_dim = 64,
                           .mlp = 512,
                           .layers = 2,
                           .rope_theta = 10000.0f,
                           .norm_eps = 1e-5f,
                           .seed = 1 };
    return c;
}

ref_model_config ref_model_config_small(void)
{
    ref_model_config c = ref_model_config_default();
    c.vocab = 128;
    c.hidden = 64;
    c.heads = 2;
    c.head_dim = 32;
    c.mlp = 128;
    return c;
}

mstar_status ref_model_config_validate(const ref_model_config *cfg)
{
    if (cfg == NULL)
        return mstar_error_set(MSTAR_EINVAL, "model config is NULL");
    const struct {
        const char *name;
        int32_t value;
    } sizes[] = {
        { "vocab", cfg->vocab },       { "hidden", cfg->hidden }, { "heads", cfg->heads },
        { "head_dim", cfg->head_dim }, { "mlp", cfg->mlp },       { "layers", cfg->layers },
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (sizes[i].value < 1 || sizes[i].value > 65536)
            return mstar_error_set(MSTAR_EINVAL, "model config: %s %d, not in [1, 65536]",
                                   sizes[i].name, sizes[i].value);
    }
    if (cfg->head_dim % 2 != 0)
        return mstar_error_set(MSTAR_EINVAL,
                               "model config: head_dim %d must be even (rotary "
                               "pairs)",
                               cfg->head_dim);
    if ((int64_t)cfg->heads * cfg->head_dim > 65536)
        return mstar_error_set(MSTAR_EINVAL, "model config: heads × head_dim %lld, at most 65536",
                               (long long)cfg->heads * cfg->head_dim);
    if (!(cfg->rope_theta > 0.0f) || !isfinite(cfg->rope_theta))
        return mstar_error_set(MSTAR_EINVAL, "model config: rope_theta %g must be > 0",
                               (double)cfg->rope_theta);
    if (!(cfg->norm_eps > 0.0f) || !isfinite(cfg->norm_eps))
        return mstar_error_set(MSTAR_EINVAL, "model config: norm_eps %g must be > 0",
                               (double)cfg->norm_eps);
    return MSTAR_OK;
}

mstar_status ref_weight_layout_init(ref_weight_layout *layout, const ref_model_config *cfg)
{
    mstar_status st = ref_model_config_validate(cfg);
    if (st != MSTAR_OK)
        return st;
    size_t d = (size_t)cfg->hidden, q = (size_t)cfg->heads * (size_t)cfg->head_dim;
    size_t f = (size_t)cfg->mlp, v = (size_t)cfg->vocab;
    layout->layer = calloc((size_t)cfg->layers, sizeof(*layout->layer));
    if (layout->layer == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "weight layout of %d layers", cfg->layers);
    layout->layers = cfg->layers;
    size_t at = 0;
    layout->embed = at;
    at += v * d;
    for (int32_t l = 0; l < cfg->layers; l++) {
        ref_layer_offsets *o = &layout->layer[l];
        o->attn_norm = at;
        at += d;
        o->wqkv = at;
        at += 3 * q * d;
        o->wo = at;
        at += d * q;
        o->mlp_norm = at;
        at += d;
        o->w_gate_up = at;
        at += 2 * f * d;
        o->w_down = at;
        at += d * f;
    }
    layout->final_norm = at;
    at += d;
    layout->lm_head = at;
    at += v * d;
    layout->total = at;
    return MSTAR_OK;
}

void ref_weight_layout_free(ref_weight_layout *layout)
{
    free(layout->layer);
    layout->layer = NULL;
}

/* splitmix64: one 64-bit draw per weight, so every weight depends only on the seed and its index.
 */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* n weights uniform in [center - scale, center + scale). */
static void fill_uniform(float *w, size_t n, float center, float scale, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        w[i] = center + scale * (float)(2.0 * u - 1.0);
    }
}

void ref_model_init_weights(const ref_model_config *cfg, const ref_weight_layout *layout, float *w)
{
    uint64_t rng = cfg->seed;
    size_t d = (size_t)cfg->hidden, q = (size_t)cfg->heads * (size_t)cfg->head_dim;
    size_t f = (size_t)cfg->mlp, v = (size_t)cfg->vocab;
    /* Scales keep activations near unit size: 1/sqrt(fan_in) for projections. */
    fill_uniform(w + layout->embed, v * d, 0.0f, 1.0f, &rng);
    for (int32_t l = 0; l < cfg->layers; l++) {
        const ref_layer_offsets *o = &layout->layer[l];
        fill_uniform(w + o->attn_norm, d, 1.0f, 0.1f, &rng);
        fill_uniform(w + o->wqkv, 3 * q * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
        fill_uniform(w + o->wo, d * q, 0.0f, 1.0f / sqrtf((float)q), &rng);
        fill_uniform(w + o->mlp_norm, d, 1.0f, 0.1f, &rng);
        fill_uniform(w + o->w_gate_up, 2 * f * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
        fill_uniform(w + o->w_down, d * f, 0.0f, 1.0f / sqrtf((float)f), &rng);
    }
    fill_uniform(w + layout->final_norm, d, 1.0f, 0.1f, &rng);
    fill_uniform(w + layout->lm_head, v * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
}

void ref_f32_to_bf16(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &in[i], sizeof(bits));
        if ((bits & 0x7fffffffu) > 0x7f800000u) { /* NaN stays a (quiet) NaN */
            out[i] = (uint16_t)((bits >> 16) | 0x40);
            continue;
        }
        bits += 0x7fffu + ((bits >> 16) & 1u);
        out[i] = (uint16_t)(bits >> 16);
    }
}

void ref_bf16_to_f32(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)in[i] << 16;
        memcpy(&out[i], &bits, sizeof(bits));
    }
}

struct ref_model {
    ref_model_config cfg;
    mstar_kv_cache_config kv_cfg;
    ref_weight_layout layout;
    mstar_backend *backend;
    const ref_ops *ops;
    size_t elsize;
    char *weights;             /* device, layout.total elements */
    void **k_pages, **v_pages; /* device, [layers] pools */
    size_t pool_bytes;
};

/* Weights in the kernels' dtype, copied to the device; KV pools zeroed. */
static mstar_status upload(ref_model *m)
{
    size_t n = m->layout.total;
    float *host = malloc(n * sizeof(float));
    uint16_t *narrow = m->elsize == 2 ? malloc(n * sizeof(uint16_t)) : NULL;
    if (host == NULL || (m->elsize == 2 && narrow == NULL)) {
        free(host);
        return mstar_error_set(MSTAR_ENOMEM, "model: %zu host weights", n);
    }
    ref_model_init_weights(&m->cfg, &m->layout, host);
    const void *src = host;
    if (narrow != NULL) {
        ref_f32_to_bf16(host, narrow, n);
        src = narrow;
    }
    mstar_stream *s;
    mstar_status st = mstar_stream_create(m->backend, MSTAR_STREAM_NON_BLOCKING, &s);
    if (st == MSTAR_OK) {
        st = mstar_memcpy_async(s, m->weights, src, n * m->elsize, MSTAR_MEMCPY_H2D);
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
    free(narrow);
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

/* The temporaries of one forward, from the stream's current allocator: x, h, qkv, attn, proj,
 * gate_up, act per token; last and normed per row. */
typedef struct scratch {
    void *x, *h, *qkv, *attn, *proj, *gate_up, *act, *last, *normed;
} scratch;

static void scratch_free(mstar_stream *s, scratch *sc)
{
    void **all[] = { &sc->x,       &sc->h,   &sc->qkv,  &sc->attn,  &sc->proj,
                     &sc->gate_up, &sc->act, &sc->last, &sc->normed };
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
        { &sc->x, t * d },    { &sc->h, t * d },    { &sc->qkv, t * 3 * q },
        { &sc->attn, t * q }, { &sc->proj, t * d }, { &sc->gate_up, t * 2 * f },
        { &sc->act, t * f },  { &sc->last, r * d }, { &sc->normed, r * d },
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

/* Element `i` of a buffer of the model's dtype. */
static void *at(void *base, int64_t i, const ref_model *m)
{
    return (char *)base + (size_t)i * m->elsize;
}

static mstar_status run_layer(ref_model *m, mstar_stream *s, const ref_forward_io *io,
                              const scratch *sc, int32_t l)
{
    const ref_model_config *c = &m->cfg;
    const ref_ops *op = m->ops;
    const ref_layer_offsets *o = &m->layout.layer[l];
    const mstar_kv_plan *p = &io->plan;
    int64_t t = io->num_tokens, d = c->hidden, q = (int64_t)c->heads * c->head_dim, f = c->mlp;
    mstar_status st;
    if ((st = op->rmsnorm(s, sc->x, wt(m, o->attn_norm), t, d, c->norm_eps, sc->h)) != MSTAR_OK ||
        (st = op->matmul_nt(s, sc->h, wt(m, o->wqkv), t, d, 3 * q, sc->qkv)) != MSTAR_OK ||
        (st = op->rope(s, sc->qkv, 3 * q, io->positions, t, c->heads, c->head_dim,
                       c->rope_theta)) != MSTAR_OK ||
        (st = op->rope(s, at(sc->qkv, q, m), 3 * q, io->positions, t, c->heads, c->head_dim,
                       c->rope_theta)) != MSTAR_OK ||
        (st = op->kv_write(s, m->k_pages[l], m->v_pages[l], m->kv_cfg.page_size, q,
                           at(sc->qkv, q, m), at(sc->qkv, 2 * q, m), 3 * q, p->token_to_page,
                           p->token_to_cache, t)) != MSTAR_OK ||
        (st = op->paged_attention(s, sc->qkv, 3 * q, m->k_pages[l], m->v_pages[l],
                                  m->kv_cfg.page_size, p->page_table, p->pages_per_row,
                                  p->token_row, p->token_kv_len, t, c->heads, c->head_dim,
                                  sc->attn)) != MSTAR_OK ||
        (st = op->matmul_nt(s, sc->attn, wt(m, o->wo), t, q, d, sc->proj)) != MSTAR_OK ||
        (st = op->add(s, sc->x, sc->proj, t * d)) != MSTAR_OK ||
        (st = op->rmsnorm(s, sc->x, wt(m, o->mlp_norm), t, d, c->norm_eps, sc->h)) != MSTAR_OK ||
        (st = op->matmul_nt(s, sc->h, wt(m, o->w_gate_up), t, d, 2 * f, sc->gate_up)) != MSTAR_OK ||
        (st = op->silu_mul(s, sc->gate_up, t, f, sc->act)) != MSTAR_OK ||
        (st = op->matmul_nt(s, sc->act, wt(m, o->w_down), t, f, d, sc->proj)) != MSTAR_OK)
        return st;
    return op->add(s, sc->x, sc->proj, t * d);
}

static mstar_status run_forward(ref_model *m, mstar_stream *s, const ref_forward_io *io,
                                const scratch *sc)
{
    const ref_model_config *c = &m->cfg;
    const ref_ops *op = m->ops;
    int64_t t = io->num_tokens, r = io->num_rows, d = c->hidden, v = c->vocab;
    mstar_status st = op->embed(s, wt(m, m->layout.embed), d, io->tokens, t, sc->x);
    for (int32_t l = 0; st == MSTAR_OK && l < c->layers; l++)
        st = run_layer(m, s, io, sc, l);
    if (st != MSTAR_OK ||
        (st = op->gather_rows(s, sc->x, d, io->plan.row_last_token, r, sc->last)) != MSTAR_OK ||
        (st = op->rmsnorm(s, sc->last, wt(m, m->layout.final_norm), r, d, c->norm_eps,
                          sc->normed)) != MSTAR_OK ||
        (st = op->matmul_nt_f32(s, sc->normed, wt(m, m->layout.lm_head), r, d, v, io->logits)) !=
            MSTAR_OK)
        return st;
    return op->argmax(s, io->logits, r, v, io->next_tokens);
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
