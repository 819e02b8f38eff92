/*
 * demo_decoder.h — the decoder component's model side: the reference decode model with its
 * paged KV cache, and the codebook lookup that turns the encoder's states into its prompt.
 *
 * The reference model reads token ids, not embeddings, so the decoder maps each encoder state to
 * the token whose embedding (its own embedding table) scores highest against it — a codebook
 * lookup, as vector-quantised tokenisers do — and prefills on those tokens. Then it decodes one
 * token per row per step, greedily.
 *
 * Steps run through ref_eager (admit → plan → forward → commit on the KV cache and positions):
 * the graph-runner node of the reference model (the decoder's captured decode buckets with
 * padding rows) is not on main yet, so demo_decoder_graphs() is false and every step is eager.
 * demo_step_info still names the configured bucket each step would replay, so the summary's
 * per-bucket table reads the same in both modes.
 */
#ifndef MSTAR_EXAMPLES_DEMO_DECODER_H
#define MSTAR_EXAMPLES_DEMO_DECODER_H

#include "demo_stats.h"

typedef struct demo_decoder demo_decoder;

/* The model, its KV cache (cfg's pages) and the codebook on `backend` (borrowed). */
mstar_status demo_decoder_create(mstar_backend *backend, const demo_config *cfg,
                                 demo_decoder **out);
void demo_decoder_destroy(demo_decoder *d);

/* Whether steps replay captured graphs (false: see above). */
bool demo_decoder_graphs(const demo_decoder *d);

/* Map n encoder states ([n, hidden], device memory of the model's dtype, contiguous) to token
 * ids in tokens[0..n) (host memory), and wait. MSTAR_EPROTO when `states` has another dtype or
 * shape (it came from another process). */
mstar_status demo_decoder_codebook(demo_decoder *d, const mstar_tensor *states, int32_t *tokens);

/* A request's KV streams and position; close hands its pages back. */
mstar_status demo_decoder_open(demo_decoder *d, int64_t handle);
mstar_status demo_decoder_close(demo_decoder *d, int64_t handle);

/* Pages a request of `tokens` tokens holds at most, and the pages free for new requests. */
int32_t demo_decoder_pages_for(const demo_decoder *d, int64_t tokens);
int32_t demo_decoder_total_pages(const demo_decoder *d);

/* One step over n rows: rows[i] (an open handle) adds spans[i] tokens, packed in `tokens`
 * (host); next[i] gets row i's greedy next token. `prefill` picks the walk whose buckets the
 * step is counted under. */
mstar_status demo_decoder_step(demo_decoder *d, bool prefill, const int64_t *rows,
                               const int32_t *spans, int32_t n, const int32_t *tokens,
                               int32_t *next, demo_step_info *info);

#endif
