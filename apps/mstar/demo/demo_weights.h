/*
 * demo_weights.h — the demo components' weights: parts of a reference-model weight block
 * (ref_model_init_weights, so a seed gives the same weights everywhere), packed and uploaded to a
 * device in the kernels' dtype.
 *
 * The encoder takes the embedding, the MLP half of its layers and the final norm of a model
 * drawn from its own seed; the decoder takes its model's embedding table as the codebook it maps
 * encoder states onto.
 */
#ifndef MSTAR_EXAMPLES_DEMO_WEIGHTS_H
#define MSTAR_EXAMPLES_DEMO_WEIGHTS_H

#include "demo.h"

/* A run of `count` floats at element `offset` of the weight block. */
typedef struct demo_range {
    size_t offset;
    size_t count;
} demo_range;

/* Draw cfg's weight block, pack ranges[0..n) in order and upload them to raw device memory of
 * `backend` as `dtype` (float32 or bfloat16). packed[i] (may be NULL) receives the element offset
 * of range i in the upload. Free *out with mstar_device_free. */
mstar_status demo_weights_upload(mstar_backend *backend, mstar_dtype dtype,
                                 const ref_model_config *cfg, const demo_range *ranges, size_t n,
                                 void **out, size_t *packed);

#endif
