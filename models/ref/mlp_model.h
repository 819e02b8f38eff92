/*
 * mlp_model.h — the mlp bench model: L layers of rms_norm → linear D×D (no bias) → silu →
 * residual add over rows of D, bf16 on CUDA (fp32 on the host backend), the same work any
 * framework's CUDA-graph runner can be put beside (`mstar bench graphs --model mlp`).
 *
 * On CUDA a layer is one launch for up to 8 rows (the norm its prologue, silu and the residual
 * its epilogue: ref_ops.h, ref_linear), so a forward is L launches; for more rows, or with
 * MSTAR_REF_SKINNY_GEMM=0, three (norm, cuBLAS GEMM, silu residual).
 */
#ifndef MSTAR_EXAMPLES_MLP_MODEL_H
#define MSTAR_EXAMPLES_MLP_MODEL_H

#include "mstar/mstar.h"
#include "ref_profile.h"

typedef struct ref_mlp_config {
    int32_t layers, hidden;
    float norm_eps;
    uint64_t seed;
} ref_mlp_config;

typedef struct ref_mlp ref_mlp;

/* 8 layers of 1024. */
ref_mlp_config ref_mlp_config_default(void);

/* The weights on the host in fp32: norm [layers][hidden] and w [layers][hidden][hidden] (each
 * layer's [out, in]); what the model uploads (rounded to bf16 on CUDA). */
void ref_mlp_init_weights(const ref_mlp_config *cfg, float *norm, float *w);

mstar_status ref_mlp_create(const ref_mlp_config *cfg, mstar_backend *backend, ref_mlp **out);
void ref_mlp_destroy(ref_mlp *m); /* NULL is ignored */
mstar_dtype ref_mlp_dtype(const ref_mlp *m);
const ref_mlp_config *ref_mlp_config_of(const ref_mlp *m);
/* Times each op of the forwards that follow in `profile` (NULL: stop). Eager forwards only. */
void ref_mlp_set_profile(ref_mlp *m, ref_profile *profile);

/* Enqueue y = the model applied to x, both [n, hidden] of the model's dtype on the device (y may
 * not be x). Temporaries come from the stream's current allocator (a graph pool in a capture). */
mstar_status ref_mlp_forward(ref_mlp *m, mstar_stream *s, const void *x, int64_t n, void *y);

#endif
