/*
 * copy_kernel.h — a copy between two buffers of one device, run as a kernel (copy_kernel.cu).
 *
 * Why a kernel: on an H100 with CUDA 13 a small cudaMemcpyAsync device-to-device took about 7 us
 * of the calling thread's time, a kernel launch a third of that, and small copies sit on the hot
 * path of a replay's staging and of a CUDA IPC read (backend_cuda.c, cuda_copy_on_device).
 */
#ifndef MSTAR_DEVICE_CUDA_COPY_KERNEL_H
#define MSTAR_DEVICE_CUDA_COPY_KERNEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue a copy of `nbytes` from `src` to `dst` (both on the current device, not overlapping)
 * on the cudaStream_t `stream`. Returns the cudaError_t of the launch (0: queued). */
int mstar__cuda_copy_kernel(void *dst, const void *src, size_t nbytes, void *stream);
/* While `stream` captures: the copy kernel copying nothing into `dst`, its node in *node. */
int mstar__cuda_copy_node_capture(void *dst, void *stream, void **node);
/* The node's copy in the cudaGraphExec_t `exec`, for the launches that follow. */
int mstar__cuda_copy_node_set(void *exec, void *node, void *dst, const void *src, size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif
