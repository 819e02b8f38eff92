/*
 * ref_weights.c — the reference decode model's configuration and weights, on the host (see
 * ref_model.h): the default and small configurations and their validation, where each weight
 * sits in the one fp32 block, the seeded values, and the bf16 rounding the CUDA kernels store.
 *
 * Everything here is plain host arithmetic, so the same seed gives the same model on every
 * backend and in every process (the demo's workers build their weights from it independently).
 */
#include "ref_model.h"

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

/* The offset of a weight of n floats placed at *at, which moves past it. */
static size_t place(size_t *at, size_t n)
{
    size_t offset = *at;
    *at += n;
    return offset;
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
    layout->embed = place(&at, v * d);
    for (int32_t l = 0; l < cfg->layers; l++) {
        ref_layer_offsets *o = &layout->layer[l];
        o->attn_norm = place(&at, d);
        o->wqkv = place(&at, 3 * q * d);
        o->wo = place(&at, d * q);
        o->mlp_norm = place(&at, d);
        o->w_gate_up = place(&at, 2 * f * d);
        o->w_down = place(&at, d * f);
    }
    layout->final_norm = place(&at, d);
    layout->lm_head = place(&at, v * d);
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

void ref_fill_uniform(float *w, size_t n, float center, float scale, uint64_t *rng)
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
    ref_fill_uniform(w + layout->embed, v * d, 0.0f, 1.0f, &rng);
    for (int32_t l = 0; l < cfg->layers; l++) {
        const ref_layer_offsets *o = &layout->layer[l];
        ref_fill_uniform(w + o->attn_norm, d, 1.0f, 0.1f, &rng);
        ref_fill_uniform(w + o->wqkv, 3 * q * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
        ref_fill_uniform(w + o->wo, d * q, 0.0f, 1.0f / sqrtf((float)q), &rng);
        ref_fill_uniform(w + o->mlp_norm, d, 1.0f, 0.1f, &rng);
        ref_fill_uniform(w + o->w_gate_up, 2 * f * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
        ref_fill_uniform(w + o->w_down, d * f, 0.0f, 1.0f / sqrtf((float)f), &rng);
    }
    ref_fill_uniform(w + layout->final_norm, d, 1.0f, 0.1f, &rng);
    ref_fill_uniform(w + layout->lm_head, v * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
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
