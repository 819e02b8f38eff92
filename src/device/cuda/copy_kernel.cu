/*
 * copy_kernel.cu — the device-to-device copy kernel of copy_kernel.h.
 *
 * A grid-stride loop over 16-byte words when both ends and the length allow it, else over
 * bytes. A small copy needs few blocks: the grid is sized by the words to move, at most
 * COPY_BLOCKS, each thread moving several when the copy is larger.
 */
#include "device/cuda/copy_kernel.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define COPY_THREADS 256
#define COPY_BLOCKS  264 /* two per SM of an H100 */

__global__ void copy_words(uint4 *dst, const uint4 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

__global__ void copy_bytes(unsigned char *dst, const unsigned char *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

static unsigned blocks_for(size_t n)
{
    size_t b = (n + COPY_THREADS - 1) / COPY_THREADS;
    return (unsigned)(b < COPY_BLOCKS ? (b > 0 ? b : 1) : COPY_BLOCKS);
}

extern "C" int mstar__cuda_copy_kernel(void *dst, const void *src, size_t nbytes, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    bool aligned = ((uintptr_t)dst % 16) == 0 && ((uintptr_t)src % 16) == 0 && nbytes % 16 == 0;
    if (aligned) {
        size_t n = nbytes / 16;
        copy_words<<<blocks_for(n), COPY_THREADS, 0, s>>>((uint4 *)dst, (const uint4 *)src, n);
    } else {
        copy_bytes<<<blocks_for(nbytes), COPY_THREADS, 0, s>>>((unsigned char *)dst,
                                                               (const unsigned char *)src, nbytes);
    }
    return (int)cudaGetLastError();
}
