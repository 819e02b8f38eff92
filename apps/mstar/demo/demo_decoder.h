/*
 * demo_decoder.h — the decoder component's model side: the reference decode model as a
 * graph-runner node (models/ref/ref_node.h: the model, its paged KV cache and positions registered
 * with a step runner, a whole-forward runner) and the codebook that turns the encoder's states
 * into its prompt.
 *
 * Two captured methods: "decode", a BATCHED config of one token per row over the configured
 * decode batch sizes, and "prefill", a PACKED config over the prefill batch sizes × token
 * lengths. A step leases the tightest captured bucket, is padded with zero-length rows (planned
 * against the sink page), replays, and releases the padding rows; a step no bucket holds (or
 * every step, without graphs) runs the same forward eagerly. The demo's loop is synchronous, so
 * nothing pre-plans and one slot per bucket is enough.
 */
#ifndef MSTAR_EXAMPLES_DEMO_DECODER_H
#define MSTAR_EXAMPLES_DEMO_DECODER_H

#include "demo_stats.h"

typedef struct demo_decoder demo_decoder;

/* The node (KV cache of cfg's pages) and the codebook on `backend` (borrowed); with `graphs`,
 * every bucket captured. */
mstar_status demo_decoder_create(mstar_backend *backend, const demo_config *cfg, bool graphs,
                                 demo_decoder **out);
void demo_decoder_destroy(demo_decoder *d);

/* Map n encoder states ([n, hidden], device memory, contiguous) to the prompt's token ids in
 * tokens[0..n) (host memory), and wait (demo_codebook_lookup). */
mstar_status demo_decoder_codebook(demo_decoder *d, const mstar_tensor *states, int32_t *tokens);

/* A request's KV streams and position; close hands its pages back. */
mstar_status demo_decoder_open(demo_decoder *d, int64_t handle);
void demo_decoder_close(demo_decoder *d, int64_t handle);

/* Pages a request of `tokens` tokens holds at most, and the pages requests can hold. */
int32_t demo_decoder_pages_for(const demo_decoder *d, int64_t tokens);
int32_t demo_decoder_total_pages(const demo_decoder *d);

/* One step over n rows: rows[i] (an open handle) adds spans[i] tokens, packed in `tokens`
 * (host); next[i] gets row i's greedy next token. `prefill` picks the walk. */
mstar_status demo_decoder_step(demo_decoder *d, bool prefill, const int64_t *rows,
                               const int32_t *spans, int32_t n, const int32_t *tokens,
                               int32_t *next, demo_step_info *info);

#endif
