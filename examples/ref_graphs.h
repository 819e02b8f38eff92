/*
 * ref_graphs.h — capture the reference step's buckets into device graphs and replay them.
 *
 * The minimal driver the tests and `mstar bench graphs` use: per bucket (rows, tokens) and per
 * slot, it warms the step up twice (each warm-up re-plans, so each sees the same shapes), then
 * captures one forward into a graph whose temporaries come from one graph pool, largest bucket
 * first. Every row of a capture is a padding row (negative handle), so captures take no page
 * from the KV cache: their tokens go to the sink page. A replay is: declare the real rows plus
 * zero-length padding rows, prepare into the slot, stage the real tokens, launch the graph,
 * commit — ref_graphs_step does exactly that.
 */
#ifndef MSTAR_EXAMPLES_REF_GRAPHS_H
#define MSTAR_EXAMPLES_REF_GRAPHS_H

#include "ref_step.h"

typedef struct ref_bucket {
    int32_t rows;
    int32_t tokens;
} ref_bucket;

typedef struct ref_graphs ref_graphs;

/* Capture every bucket (rows >= 1, rows <= tokens, within the step's maxima) in num_slots slots
 * on `stream`, from a fresh graph pool named `pool_name`. */
mstar_status ref_graphs_capture(ref_step *step, mstar_backend *backend, mstar_stream *stream,
                                const ref_bucket *buckets, int32_t num_buckets, int32_t num_slots,
                                const char *pool_name, ref_graphs **out);
/* Destroy the graphs, then the pool. NULL is a no-op. */
void ref_graphs_destroy(ref_graphs *g);

/* The tightest captured bucket for `rows` rows and `tokens` tokens: fewest tokens, then fewest
 * rows (graph-runner-spec §2.4). -1 when none fits (run eager). */
int32_t ref_graphs_select(const ref_graphs *g, int32_t rows, int32_t tokens);
const ref_bucket *ref_graphs_bucket(const ref_graphs *g, int32_t index);
/* The next slot, rotating over num_slots. */
int32_t ref_graphs_next_slot(ref_graphs *g);

/* Launch bucket `index`'s graph of `slot` on `stream`: the raw replay. */
mstar_status ref_graphs_launch(ref_graphs *g, int32_t index, int32_t slot, mstar_stream *stream);

/* One replayed step: the real rows with their spans and tokens (host memory) on bucket `index`
 * and `slot`: declare with zero-length padding rows up to the bucket, prepare, stage, launch,
 * commit. The outputs are in the step's static buffers (rows [0, n)), valid until the next
 * replay; nothing here waits for the stream. */
mstar_status ref_graphs_step(ref_graphs *g, int32_t index, int32_t slot, const int64_t *rows,
                             const int32_t *spans, int32_t n, const int32_t *tokens,
                             mstar_stream *stream);

/* Bytes the captures took from the pool and kept after capture (the graphs' live blocks). */
void ref_graphs_pool_bytes(const ref_graphs *g, uint64_t *taken, uint64_t *kept);

#endif
