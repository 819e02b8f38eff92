/*
 * demo_codebook.h — how the decoder reads the encoder's states: each state becomes the token
 * whose embedding (the decoder model's own embedding table) scores highest against it, a
 * codebook lookup as vector-quantised tokenisers do. The reference model reads token ids, not
 * embeddings; this is the adapter between the two components.
 */
#ifndef MSTAR_EXAMPLES_DEMO_CODEBOOK_H
#define MSTAR_EXAMPLES_DEMO_CODEBOOK_H

#include "demo.h"

typedef struct demo_codebook demo_codebook;

/* The embedding table of `model`'s weights on `backend` (borrowed), in its kernels' dtype. */
mstar_status demo_codebook_create(mstar_backend *backend, const ref_model_config *model,
                                  demo_codebook **out);
void demo_codebook_destroy(demo_codebook *c);

/* Map n states ([n, hidden], device memory of the kernels' dtype, contiguous) to token ids in
 * tokens[0..n) (host memory), on `stream`, and wait. MSTAR_EPROTO when `states` has another dtype
 * or shape (it came from another process). */
mstar_status demo_codebook_lookup(demo_codebook *c, mstar_stream *stream,
                                  const mstar_tensor *states, int32_t *tokens);

#endif
