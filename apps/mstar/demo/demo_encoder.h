/*
 * demo_encoder.h — the encoder component: a stateless model that turns prompt tokens into
 * hidden states, captured per (batch size, token count) through the graph runner.
 *
 *   tokens → embedding → layers × [ RMSNorm → SiLU-gated MLP → residual ] → RMSNorm → hidden
 *
 * Its weights are the embedding, the MLP half of each layer and the final norm of a reference
 * model drawn from the encoder's own seed; the ops are the reference model's kernels (host fp32
 * or CUDA bf16). Every op works token by token, so a prompt's states do not depend on what it
 * was batched with, and a graph of a bucket computes the real tokens exactly as an eager step
 * does (the padded tail is computed and ignored).
 *
 * Through the runner: one PACKED config (walk "encode", the configured batch sizes and token
 * lengths); the submodule declares no resources (the encoder keeps no state), preprocess packs
 * the rows' tokens into one device tensor "tokens", and the forward writes "hidden" [tokens,
 * hidden]. A batch that no captured bucket holds runs the same forward eagerly.
 */
#ifndef MSTAR_EXAMPLES_DEMO_ENCODER_H
#define MSTAR_EXAMPLES_DEMO_ENCODER_H

#include "demo_stats.h"

typedef struct demo_encoder demo_encoder;

/* Weights on `backend` (borrowed; must outlive the encoder) and, with `graphs`, a runner for
 * cfg's encoder buckets. Captures nothing yet. */
mstar_status demo_encoder_create(mstar_backend *backend, const demo_config *cfg, bool graphs,
                                 demo_encoder **out);
void demo_encoder_destroy(demo_encoder *e);

/* Startup: build the runner's buffers, warm up and capture every bucket (no-op without graphs).
 * Buckets that fail to capture are dropped with a warning and run eagerly. */
mstar_status demo_encoder_capture(demo_encoder *e);

/* The most rows and tokens one batch should carry to fit the largest bucket. */
int64_t demo_encoder_max_rows(const demo_encoder *e);
int64_t demo_encoder_max_tokens(const demo_encoder *e);

/* Encode n prompts (host token ids) as one packed batch, wait for it, and point *hidden at the
 * states of their tokens, row after row: [Σ lens, hidden] in device memory of the model's dtype,
 * valid until the next run. *info says how the step ran. */
mstar_status demo_encoder_run(demo_encoder *e, const int32_t *const *prompts, const int32_t *lens,
                              int32_t n, mstar_tensor *hidden, demo_step_info *info);

/* The model's dtype (float32 on the host backend, bfloat16 on CUDA). */
mstar_dtype demo_encoder_dtype(const demo_encoder *e);

#endif
