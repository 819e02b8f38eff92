/*
 * ref_model.c — configuration, weights and the fp32 host forward of the reference decode model
 * (see ref_model.h).
 */
#include "ref_model.h"

#include "kernels_host.h"

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

struct ref_model {
    ref_model_config cfg;
    mstar_kv_cache_config kv_cfg;
    ref_weight_layout layout;
    float *weights;
    float **k_pages, **v_pages; /* [layers] */
    size_t page_floats;
};

mstar_status ref_model_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              ref_model **out)
{
    if (kv_cfg == NULL || kv_cfg->num_pages < 2 || kv_cfg->page_size < 1)
        return mstar_error_set(MSTAR_EINVAL, "model: KV config must name >= 2 pages of >= 1 "
                                             "token");
    ref_model *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "model");
    mstar_status st = ref_weight_layout_init(&m->layout, cfg);
    if (st != MSTAR_OK) {
        free(m);
        return st;
    }
    m->cfg = *cfg;
    m->kv_cfg = *kv_cfg;
    m->page_floats = (size_t)kv_cfg->page_size * (size_t)cfg->heads * (size_t)cfg->head_dim;
    m->weights = malloc(m->layout.total * sizeof(float));
    m->k_pages = calloc((size_t)cfg->layers, sizeof(float *));
    m->v_pages = calloc((size_t)cfg->layers, sizeof(float *));
    bool ok = m->weights != NULL && m->k_pages != NULL && m->v_pages != NULL;
    size_t pool = (size_t)kv_cfg->num_pages * m->page_floats;
    for (int32_t l = 0; ok && l < cfg->layers; l++) {
        m->k_pages[l] = calloc(pool, sizeof(float));
        m->v_pages[l] = calloc(pool, sizeof(float));
        ok = m->k_pages[l] != NULL && m->v_pages[l] != NULL;
    }
    if (!ok) {
        ref_model_destroy(m);
        return mstar_error_set(MSTAR_ENOMEM, "model: weights and KV pools");
    }
    ref_model_init_weights(cfg, &m->layout, m->weights);
    *out = m;
    return MSTAR_OK;
}

void ref_model_destroy(ref_model *m)
{
    if (m == NULL)
        return;
    for (int32_t l = 0; m->k_pages != NULL && l < m->cfg.layers; l++)
        free(m->k_pages[l]);
    for (int32_t l = 0; m->v_pages != NULL && l < m->cfg.layers; l++)
        free(m->v_pages[l]);
    free(m->k_pages);
    free(m->v_pages);
    free(m->weights);
    ref_weight_layout_free(&m->layout);
    free(m);
}

const ref_model_config *ref_model_config_of(const ref_model *m)
{
    return &m->cfg;
}

float *ref_model_k_pages(ref_model *m, int32_t layer)
{
    return m->k_pages[layer];
}

float *ref_model_v_pages(ref_model *m, int32_t layer)
{
    return m->v_pages[layer];
}

size_t ref_model_page_floats(const ref_model *m)
{
    return m->page_floats;
}

/* The temporaries of one forward: x, h, qkv, attn, proj, gate_up, act per token; last and
 * normed per row. Allocated per forward and freed after it, as a captured forward allocates
 * them from its graph's pool. */
typedef struct scratch {
    float *x, *h, *qkv, *attn, *proj, *gate_up, *act, *last, *normed;
} scratch;

static void scratch_free(scratch *s)
{
    float **all[] = { &s->x,       &s->h,   &s->qkv,  &s->attn,  &s->proj,
                      &s->gate_up, &s->act, &s->last, &s->normed };
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

static mstar_status scratch_alloc(scratch *s, const ref_model_config *c, size_t t, size_t r)
{
    size_t d = (size_t)c->hidden, q = (size_t)c->heads * (size_t)c->head_dim;
    size_t f = (size_t)c->mlp;
    struct {
        float **p;
        size_t n;
    } want[] = {
        { &s->x, t * d },    { &s->h, t * d },    { &s->qkv, t * 3 * q },
        { &s->attn, t * q }, { &s->proj, t * d }, { &s->gate_up, t * 2 * f },
        { &s->act, t * f },  { &s->last, r * d }, { &s->normed, r * d },
    };
    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        *want[i].p = malloc((want[i].n ? want[i].n : 1) * sizeof(float));
        if (*want[i].p == NULL) {
            scratch_free(s);
            return mstar_error_set(MSTAR_ENOMEM, "forward scratch of %zu floats", want[i].n);
        }
    }
    return MSTAR_OK;
}

static mstar_status check_io(const ref_model *m, const ref_forward_io *io)
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
    (void)m;
    return MSTAR_OK;
}

mstar_status ref_model_forward(ref_model *m, const ref_forward_io *io)
{
    mstar_status st = check_io(m, io);
    if (st != MSTAR_OK)
        return st;
    const ref_model_config *c = &m->cfg;
    int64_t t = io->num_tokens, r = io->num_rows;
    int64_t d = c->hidden, q = (int64_t)c->heads * c->head_dim, f = c->mlp, v = c->vocab;
    scratch s;
    if ((st = scratch_alloc(&s, c, (size_t)t, (size_t)r)) != MSTAR_OK)
        return st;
    const float *w = m->weights;
    const mstar_kv_plan *p = &io->plan;

    ref_host_embed(w + m->layout.embed, d, io->tokens, t, s.x);
    for (int32_t l = 0; l < c->layers; l++) {
        const ref_layer_offsets *o = &m->layout.layer[l];
        ref_host_rmsnorm(s.x, w + o->attn_norm, t, d, c->norm_eps, s.h);
        ref_host_matmul_nt(s.h, w + o->wqkv, t, d, 3 * q, s.qkv);
        ref_host_rope(s.qkv, 3 * q, io->positions, t, c->heads, c->head_dim, c->rope_theta);
        ref_host_rope(s.qkv + q, 3 * q, io->positions, t, c->heads, c->head_dim, c->rope_theta);
        ref_host_kv_write(m->k_pages[l], m->v_pages[l], m->kv_cfg.page_size, q, s.qkv + q,
                          s.qkv + 2 * q, 3 * q, p->token_to_page, p->token_to_cache, t);
        ref_host_paged_attention(s.qkv, 3 * q, m->k_pages[l], m->v_pages[l], m->kv_cfg.page_size,
                                 p->page_table, p->pages_per_row, p->token_row, p->token_kv_len, t,
                                 c->heads, c->head_dim, s.attn);
        ref_host_matmul_nt(s.attn, w + o->wo, t, q, d, s.proj);
        ref_host_add(s.x, s.proj, t * d);
        ref_host_rmsnorm(s.x, w + o->mlp_norm, t, d, c->norm_eps, s.h);
        ref_host_matmul_nt(s.h, w + o->w_gate_up, t, d, 2 * f, s.gate_up);
        ref_host_silu_mul(s.gate_up, t, f, s.act);
        ref_host_matmul_nt(s.act, w + o->w_down, t, f, d, s.proj);
        ref_host_add(s.x, s.proj, t * d);
    }
    ref_host_gather_rows(s.x, d, p->row_last_token, r, s.last);
    ref_host_rmsnorm(s.last, w + m->layout.final_norm, r, d, c->norm_eps, s.normed);
    ref_host_matmul_nt(s.normed, w + m->layout.lm_head, r, d, v, io->logits);
    ref_host_argmax(io->logits, r, v, io->next_tokens);
    scratch_free(&s);
    return MSTAR_OK;
}
