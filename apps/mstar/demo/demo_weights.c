/*
 * demo_weights.c — parts of a reference-model weight block on a device (see demo_weights.h).
 */
#include "demo_weights.h"

#include <stdlib.h>
#include <string.h>

/* Pack the ranges of `block` into `out` (float32) and return how many floats that is. */
static size_t pack(const float *block, const demo_range *ranges, size_t n, float *out,
                   size_t *packed)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (out != NULL)
            memcpy(out + at, block + ranges[i].offset, ranges[i].count * sizeof(float));
        if (packed != NULL)
            packed[i] = at;
        at += ranges[i].count;
    }
    return at;
}

static mstar_status copy_to_device(mstar_backend *backend, const void *src, size_t nbytes,
                                   void *dst)
{
    mstar_stream *s;
    mstar_status st = mstar_stream_create(backend, MSTAR_STREAM_NON_BLOCKING, &s);
    if (st != MSTAR_OK)
        return st;
    st = mstar_memcpy_async(s, dst, src, nbytes, MSTAR_MEMCPY_H2D);
    mstar_status sync = mstar_stream_synchronize(s);
    mstar_stream_destroy(s);
    return st != MSTAR_OK ? st : sync;
}

mstar_status demo_weights_upload(mstar_backend *backend, mstar_dtype dtype,
                                 const ref_model_config *cfg, const demo_range *ranges, size_t n,
                                 void **out, size_t *packed)
{
    if (dtype != MSTAR_DTYPE_FLOAT32 && dtype != MSTAR_DTYPE_BFLOAT16)
        return mstar_error_set(MSTAR_EINVAL, "demo weights: dtype %s, not float32 or bfloat16",
                               mstar_dtype_name(dtype));
    ref_weight_layout layout;
    mstar_status st = ref_weight_layout_init(&layout, cfg);
    if (st != MSTAR_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        if (ranges[i].offset > layout.total || ranges[i].count > layout.total - ranges[i].offset) {
            ref_weight_layout_free(&layout);
            return mstar_error_set(MSTAR_ERANGE, "demo weights: range %zu past the %zu weights", i,
                                   layout.total);
        }
    }
    size_t total = pack(NULL, ranges, n, NULL, packed);
    float *block = malloc(layout.total * sizeof(float));
    float *packed_f32 = malloc((total ? total : 1) * sizeof(float));
    uint16_t *narrow = dtype == MSTAR_DTYPE_BFLOAT16 ? malloc((total ? total : 1) * 2) : NULL;
    void *dev = NULL;
    if (block == NULL || packed_f32 == NULL || (dtype == MSTAR_DTYPE_BFLOAT16 && narrow == NULL))
        st = mstar_error_set(MSTAR_ENOMEM, "demo weights: %zu floats", layout.total);
    if (st == MSTAR_OK) {
        ref_model_init_weights(cfg, &layout, block);
        pack(block, ranges, n, packed_f32, NULL);
        const void *src = packed_f32;
        if (narrow != NULL) {
            ref_f32_to_bf16(packed_f32, narrow, total);
            src = narrow;
        }
        size_t nbytes = (total ? total : 1) * mstar_dtype_size(dtype);
        st = mstar_device_alloc(backend, nbytes, &dev);
        if (st == MSTAR_OK)
            st = copy_to_device(backend, src, nbytes, dev);
        if (st != MSTAR_OK) {
            mstar_device_free(backend, dev);
            dev = NULL;
        }
    }
    free(block);
    free(packed_f32);
    free(narrow);
    ref_weight_layout_free(&layout);
    if (st == MSTAR_OK)
        *out = dev;
    return st;
}
