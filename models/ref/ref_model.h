/*
 * ref_model.h — the reference decode model: a small decoder-only transformer over a paged KV
 * cache, the correctness vehicle for the graph runner, its benchmark and the demo.
 *
 *   tokens → embedding → layers × [ RMSNorm → QKV → rotary positions → KV write into pages →
 *   paged causal attention → output projection → residual → RMSNorm → SiLU-gated MLP →
 *   residual ] → final RMSNorm (each row's last token) → logits → greedy argmax
 *
 * Weights are drawn in fp32 from a seed (the same seed gives the same model everywhere) and held
 * on the device in its kernels' dtype: fp32 on the host backend, bf16 on CUDA (ref_ops.h). The KV
 * cache holds, per layer, a K pool and a V pool of `num_pages` pages of `page_size` tokens; page 0
 * is the sink page (mstar/resources.h). A forward reads the addressing the KV cache and positions
 * resources planned (mstar_kv_plan, a positions buffer): tokens of all rows are packed, so the
 * same forward serves prefill (many tokens per row) and decode (one per row).
 */
#ifndef MSTAR_EXAMPLES_REF_MODEL_H
#define MSTAR_EXAMPLES_REF_MODEL_H

#include "mstar/mstar.h"
#include "ref_profile.h"

typedef struct ref_model_config {
    int32_t vocab;
    int32_t hidden;
    int32_t heads;
    int32_t head_dim; /* even */
    int32_t mlp;      /* the MLP's inner width */
    int32_t layers;
    float rope_theta;
    float norm_eps;
    uint64_t seed;
} ref_model_config;

/* vocab 512, hidden 256, 4 heads × 64, MLP 512, 2 layers, theta 10000, eps 1e-5, seed 1. */
ref_model_config ref_model_config_default(void);
/* A small model for tests: vocab 128, hidden 64, 2 heads × 32, MLP 128, 2 layers. */
ref_model_config ref_model_config_small(void);
/* MSTAR_EINVAL naming the first bad field (sizes >= 1 and at most 65536, head_dim even,
 * theta > 0, eps > 0). */
mstar_status ref_model_config_validate(const ref_model_config *cfg);

/* Where each weight sits in the one fp32 block that holds them all (element offsets). */
typedef struct ref_layer_offsets {
    size_t attn_norm; /* [hidden] */
    size_t wqkv;      /* [3 * heads * head_dim, hidden]: q rows, then k, then v */
    size_t wo;        /* [hidden, heads * head_dim] */
    size_t mlp_norm;  /* [hidden] */
    size_t w_gate_up; /* [2 * mlp, hidden]: gate rows, then up */
    size_t w_down;    /* [hidden, mlp] */
} ref_layer_offsets;

typedef struct ref_weight_layout {
    size_t embed;      /* [vocab, hidden] */
    size_t final_norm; /* [hidden] */
    size_t lm_head;    /* [vocab, hidden] */
    size_t total;      /* floats in the block */
    int32_t layers;
    ref_layer_offsets *layer; /* [layers] */
} ref_weight_layout;

/* Compute the layout (allocates layout->layer; ref_weight_layout_free releases it). */
mstar_status ref_weight_layout_init(ref_weight_layout *layout, const ref_model_config *cfg);
void ref_weight_layout_free(ref_weight_layout *layout);

/* Fill a block of layout.total floats with the seed's weights. */
void ref_model_init_weights(const ref_model_config *cfg, const ref_weight_layout *layout,
                            float *weights);

/* The inputs and outputs of one forward, all in device memory. Tokens of all rows are packed row
 * after row; `num_tokens` and `num_rows` are the sizes the forward runs at (a captured bucket's,
 * padded tails included). The plan and positions come from the resources; logits and
 * next_tokens are written for every row. */
typedef struct ref_forward_io {
    int32_t num_tokens;
    int32_t num_rows;
    const int32_t *tokens;    /* [num_tokens], each in [0, vocab) */
    const int32_t *positions; /* [num_tokens] */
    mstar_kv_plan plan;       /* label 0 */
    float *logits;            /* [num_rows, vocab] */
    int32_t *next_tokens;     /* [num_rows] */
    /* Every row adds exactly one token (a decode step): attention may then do the qkv layer's
     * rope and KV write itself, since no token reads a KV slot another writes in the step. */
    bool one_token_per_row;
} ref_forward_io;

/* Whether a step's rows add exactly one token each (ref_forward_io.one_token_per_row): as many
 * tokens as rows, and every segment of the KV stream (label 0) spans one token. */
bool ref_step_one_token_per_row(const mstar_step_segment *segments, size_t n, int64_t num_rows,
                                int64_t num_tokens);

/* ---- the model on a device backend ---- */

typedef struct ref_model ref_model;

/* Weights from cfg's seed, uploaded to `backend`'s device in its kernels' dtype (fp32 on the host
 * backend, bf16 on CUDA), and zeroed KV pools for kv_cfg's pages. MSTAR_ENOTSUP for a backend
 * without kernels. */
mstar_status ref_model_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              mstar_backend *backend, ref_model **out);
/* Free the device memory (before the backend is destroyed). NULL is a no-op. */
void ref_model_destroy(ref_model *m);
const ref_model_config *ref_model_config_of(const ref_model *m);
/* The dtype of weights, activations and KV pages. */
mstar_dtype ref_model_dtype(const ref_model *m);
/* Times each op of the forwards that follow in `profile` (NULL: stop). Eager forwards only. */
void ref_model_set_profile(ref_model *m, ref_profile *profile);

/* Enqueue one forward on `stream`: every op through the backend's kernels, temporaries from the
 * stream's current allocator (a graph pool while capturing) and given back at the end. Nothing
 * synchronises, so a capture records the whole forward. */
mstar_status ref_model_forward(ref_model *m, mstar_stream *stream, const ref_forward_io *io);

/* Bytes in one page of one pool (page_size × heads × head_dim elements). */
size_t ref_model_page_bytes(const ref_model *m);
/* Copy layer's whole K pool (v = false) or V pool ([num_pages][page bytes]) to host memory and
 * wait for it: what tests compare before and after a step. */
mstar_status ref_model_read_pool(ref_model *m, mstar_stream *stream, int32_t layer, bool v,
                                 void *host_out);

/* Copy `count` fp32 host values to dst on the device as `dtype` (FLOAT32, or BFLOAT16 rounded
 * as ref_f32_to_bf16 does) through stream s, and wait for the stream. */
mstar_status ref_upload_f32(mstar_stream *s, void *dst, const float *host, size_t count,
                            mstar_dtype dtype);
/* Round float32 to bfloat16 (nearest, ties to even), as the CUDA kernels store. */
void ref_f32_to_bf16(const float *in, uint16_t *out, size_t n);
/* n weights uniform in [center - scale, center + scale), drawn from *rng (a splitmix64 state):
 * the same seed gives the same weights. */
void ref_fill_uniform(float *w, size_t n, float center, float scale, uint64_t *rng);
/* Widen bfloat16 to float32 (exact). */
void ref_bf16_to_f32(const uint16_t *in, float *out, size_t n);

#endif
