/*
 * ref_eager.h — the reference decode model run eagerly, step by step, with its two resources: the
 * plain reference every captured replay is compared with. Runs on any backend with kernels (host
 * fp32, CUDA bf16); each step is synchronous (its outputs are in the caller's memory on return).
 *
 * A step is a list of rows (request handles; negative for padding rows), how many tokens each
 * adds (its span: the prompt length for prefill, 1 for decode, 0 for a zero-length padding row)
 * and the rows' tokens packed in order. The step admits its pages, plans into the resources'
 * eager state, runs the forward and commits: the admit → plan → forward → commit cycle without a
 * runner.
 */
#ifndef MSTAR_EXAMPLES_REF_EAGER_H
#define MSTAR_EXAMPLES_REF_EAGER_H

#include "ref_model.h"

typedef struct ref_eager ref_eager;

mstar_status ref_eager_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              mstar_backend *backend, ref_eager **out);
/* Free everything (before the backend is destroyed). NULL is a no-op. */
void ref_eager_destroy(ref_eager *e);

/* Open a request's KV streams and position; close hands its pages back. */
mstar_status ref_eager_open(ref_eager *e, int64_t request);
mstar_status ref_eager_close(ref_eager *e, int64_t request);

/* One step over num_rows rows. tokens (host memory) holds Σ spans ids in [0, vocab). logits
 * ([num_rows, vocab], may be NULL) and next_tokens ([num_rows]), host memory, get each row's
 * output; a row of span 0 gets a
 * well-formed output of no meaning. MSTAR_EINVAL for a bad token or span, MSTAR_ENOSPC (with the
 * KV cache's message) when pages ran out — then nothing was reserved and nothing advanced. */
mstar_status ref_eager_step(ref_eager *e, const int64_t *rows, const int32_t *spans,
                            int32_t num_rows, const int32_t *tokens, float *logits,
                            int32_t *next_tokens);

ref_model *ref_eager_model(ref_eager *e);
/* The stream the steps run on. */
mstar_stream *ref_eager_stream(ref_eager *e);
mstar_kv_cache *ref_eager_kv(ref_eager *e);
mstar_positions *ref_eager_positions(ref_eager *e);

#endif
