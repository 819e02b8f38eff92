/*
 * rope_cuda.cuh — the rotary position embedding's arithmetic, for every CUDA kernel of the
 * reference model that rotates q and k (rope_kv_write and attention in kernels_cuda.cu, the
 * qkv epilogue of linear_cuda.cu): one definition, so kernels that rotate the same values
 * compute the same bits.
 */
#ifndef MSTAR_EXAMPLES_ROPE_CUDA_CUH
#define MSTAR_EXAMPLES_ROPE_CUDA_CUH

#include <stdint.h>

/* The angle of rope pair d (of head_dim / 2) at position pos: its sine and cosine. */
__device__ __forceinline__ void rope_angle(int32_t pos, int64_t d, int64_t head_dim, float theta,
                                           float *s, float *c)
{
    float inv_freq = powf(theta, -2.0f * (float)d / (float)head_dim);
    sincosf((float)pos * inv_freq, s, c);
}

/* Pair (x1, x2), elements d and d + head_dim / 2, rotated. */
__device__ __forceinline__ void rope_rotate(float x1, float x2, float s, float c, float *r1,
                                            float *r2)
{
    *r1 = x1 * c - x2 * s;
    *r2 = x2 * c + x1 * s;
}

#endif
