/*
 * ref_step.h — a step of the reference model in the shape a graph runner drives it.
 *
 * A bucket is (rows, tokens): a decode bucket has one token per row (bs, bs); a packed bucket
 * carries more tokens than rows, split unevenly (prefill). The pieces map onto the runner's step
 * cycle (graph-runner-spec §5, §7):
 *   declare   rows (real request handles, then padding rows with negative handles) and the
 *             tokens each adds → the step's segments. A replay pads with zero-length rows; a
 *             capture's rows are all padding rows and carry the template's tokens.
 *   prepare   admit pages for the real rows, then plan the KV addressing and positions into a
 *             slot's buffers (or the eager state) for the bucket, padded tails on the sink page
 *   stage     copy the real tokens into the static token buffer [0:n]; the tail keeps what it
 *             held, and the plan points its tokens at the sink page
 *   forward   the model over the bucket, reading the static tokens and the slot's plan, writing
 *             the static outputs: what a capture records and a replay re-runs
 *   commit    advance the real rows' KV streams and positions
 * The static buffers (tokens in; logits and next tokens out, one row each) have fixed device
 * addresses sized for the largest bucket; a smaller bucket uses their leading part.
 */
#ifndef MSTAR_EXAMPLES_REF_STEP_H
#define MSTAR_EXAMPLES_REF_STEP_H

#include "ref_model.h"

typedef struct ref_step ref_step;

/* A step over `model` and its two resources for buckets of at most max_rows rows and max_tokens
 * tokens, with num_slots double-buffer slots: builds the resources' plan buffers for them, and
 * the static buffers. The model and the resources must outlive it. */
mstar_status ref_step_create(ref_model *model, mstar_kv_cache *kv, mstar_positions *pos,
                             mstar_backend *backend, int32_t max_rows, int32_t max_tokens,
                             int32_t num_slots, ref_step **out);
void ref_step_destroy(ref_step *st);

/* Declare a step over n rows (at most max_rows): rows[i] adds spans[i] tokens. A real row must
 * add at least one (its output is its last token's). The step is kept until the next declare. */
mstar_status ref_step_declare(ref_step *st, const int64_t *rows, const int32_t *spans, int32_t n);
/* The declared step, as resources see it. */
const mstar_resource_step *ref_step_declared(const ref_step *st);

/* Admit and plan the declared step into `slot` (MSTAR_PLAN_EAGER for an eager step) for a bucket
 * of bucket_rows rows and bucket_tokens tokens, on `stream`; `preplan` marks a pre-plan. On an
 * admit shortage, *admitted (may be NULL) says what was short. */
mstar_status ref_step_prepare(ref_step *st, int32_t slot, int32_t bucket_rows,
                              int32_t bucket_tokens, bool preplan, mstar_stream *stream,
                              mstar_admit_result *admitted);
/* Drop slot's pending pre-plan in both resources, handing back the pages its admit took. */
void ref_step_clear_preplan(ref_step *st, int32_t slot);

/* Copy n tokens (host memory, each checked against the vocabulary) into the static token buffer
 * on `stream`. */
mstar_status ref_step_stage(ref_step *st, const int32_t *tokens, int32_t n, mstar_stream *stream);

/* Enqueue the forward of a bucket against `slot`'s plan on `stream`. */
mstar_status ref_step_forward(ref_step *st, int32_t slot, int32_t bucket_rows,
                              int32_t bucket_tokens, mstar_stream *stream);

/* Advance the declared step's real rows. */
mstar_status ref_step_commit(ref_step *st);

/* The static buffers (device memory): tokens [max_tokens], logits [max_rows, vocab],
 * next [max_rows]. */
int32_t *ref_step_tokens(const ref_step *st);
float *ref_step_logits(const ref_step *st);
int32_t *ref_step_next(const ref_step *st);

/* ---- the resource half, shared with the eager driver (ref_eager.c) ---- */

/* Admit `step` in the KV cache, then plan it into both resources' `slot` state on `stream`. */
mstar_status ref_resources_prepare(mstar_kv_cache *kv, mstar_positions *pos,
                                   const mstar_resource_step *step, int32_t slot,
                                   int32_t bucket_rows, int32_t bucket_tokens, bool preplan,
                                   mstar_stream *stream, mstar_admit_result *admitted);
/* Point io's plan and positions at `slot`'s buffers (device memory). */
mstar_status ref_resources_io(const mstar_kv_cache *kv, const mstar_positions *pos, int32_t slot,
                              ref_forward_io *io);
/* Commit `step` in both resources. */
mstar_status ref_resources_commit(mstar_kv_cache *kv, mstar_positions *pos,
                                  const mstar_resource_step *step);

#endif
