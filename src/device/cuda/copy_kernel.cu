/*
 * copy_kernel.cu — the device-to-device copy kernel of copy_kernel.h.
 *
 * A grid-stride loop over 16-byte words when both ends and the length allow it, else over
 * bytes. A small copy needs few blocks: the grid is sized by the words to move, at most
 * COPY_BLOCKS, each thread moving several when the copy is larger. The same kernel is a graph's
 * copy node (backend.h, mstar__capture_copy_node): captured copying nothing, given its copy per
 * replay by updating the node's parameters in the executable.
 */
#include "device/cuda/copy_kernel.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define COPY_THREADS 256
#define COPY_BLOCKS  264 /* two per SM of an H100 */

/* One kernel for every copy, so that a copy node can be given any copy: 16-byte words when
 * both ends and the length allow it, else bytes (the test is the same for every thread). */
__global__ void copy_any(void *dst, const void *src, size_t n)
{
    size_t step = (size_t)gridDim.x * blockDim.x,
           first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if ((((uintptr_t)dst | (uintptr_t)src | n) & 15) == 0) {
        uint4 *d = (uint4 *)dst;
        const uint4 *s = (const uint4 *)src;
        for (size_t i = first; i < n / 16; i += step)
            d[i] = s[i];
    } else {
        unsigned char *d = (unsigned char *)dst;
        const unsigned char *s = (const unsigned char *)src;
        for (size_t i = first; i < n; i += step)
            d[i] = s[i];
    }
}

/* Blocks for n bytes: a thread per word (a byte copy's threads move several each). */
static unsigned blocks_for(size_t n)
{
    size_t words = (n + 15) / 16;
    size_t b = (words + COPY_THREADS - 1) / COPY_THREADS;
    return (unsigned)(b < COPY_BLOCKS ? (b > 0 ? b : 1) : COPY_BLOCKS);
}

/* The runtime keeps the error of any earlier failed call on this thread (ours, or torch's, or a
 * probe's that was handled) until it is read: read it first, so a launch reports its own. */
static void forget_earlier_errors(void)
{
    (void)cudaGetLastError();
}

extern "C" int mstar__cuda_copy_kernel(void *dst, const void *src, size_t nbytes, void *stream)
{
    forget_earlier_errors();
    copy_any<<<blocks_for(nbytes), COPY_THREADS, 0, (cudaStream_t)stream>>>(dst, src, nbytes);
    return (int)cudaGetLastError();
}

extern "C" int mstar__cuda_copy_node_capture(void *dst, void *stream, void **node)
{
    cudaStream_t s = (cudaStream_t)stream;
    forget_earlier_errors();
    copy_any<<<1, COPY_THREADS, 0, s>>>(dst, dst, 0);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess)
        return (int)err;
    cudaStreamCaptureStatus status;
    const cudaGraphNode_t *deps = NULL;
    size_t n = 0;
    err = cudaStreamGetCaptureInfo(s, &status, NULL, NULL, &deps, NULL, &n);
    if (err != cudaSuccess)
        return (int)err;
    if (status != cudaStreamCaptureStatusActive || n != 1)
        return (int)cudaErrorStreamCaptureInvalidated;
    *node = deps[0];
    return 0;
}

extern "C" int mstar__cuda_copy_node_set(void *exec, void *node, void *dst, const void *src,
                                         size_t nbytes)
{
    void *args[] = { &dst, (void *)&src, &nbytes };
    cudaKernelNodeParams p = {};
    p.func = (void *)copy_any;
    p.gridDim = dim3(blocks_for(nbytes));
    p.blockDim = dim3(COPY_THREADS);
    p.kernelParams = args;
    return (int)cudaGraphExecKernelNodeSetParams((cudaGraphExec_t)exec, (cudaGraphNode_t)node, &p);
}
