/*
 * exec_probe_cuda.c — the CUDA side of ExecutableMemory: instantiate executable copies of a kept
 * cudaGraph_t and read the driver's free memory (mstar_mem_info, which asks cuMemGetInfo).
 */
#include "graphs/exec_memory.h"

#include <cuda_runtime_api.h>

static mstar_status probe_error(mstar__exec_probe *p, cudaError_t err, const char *what)
{
    cudaGetLastError();
    return mstar_error_set(MSTAR_EDEVICE, "cuda:%d: %s failed: %s",
                           (int)mstar_backend_device(p->backend).index, what,
                           cudaGetErrorString(err));
}

static mstar_status probe_instantiate(mstar__exec_probe *p, void **copy)
{
    cudaError_t err = cudaSetDevice(mstar_backend_device(p->backend).index);
    if (err != cudaSuccess)
        return probe_error(p, err, "cudaSetDevice");
    cudaGraphExec_t exec;
    err = cudaGraphInstantiate(&exec, (cudaGraph_t)p->graph, 0);
    if (err != cudaSuccess)
        return probe_error(p, err, "cudaGraphInstantiate (executable-memory copy)");
    *copy = exec;
    return MSTAR_OK;
}

static void probe_destroy(mstar__exec_probe *p, void *copy)
{
    if (cudaSetDevice(mstar_backend_device(p->backend).index) == cudaSuccess)
        cudaGraphExecDestroy((cudaGraphExec_t)copy);
}

static mstar_status probe_free_bytes(mstar__exec_probe *p, uint64_t *out)
{
    uint64_t total;
    return mstar_mem_info(p->backend, out, &total);
}

mstar_status mstar__cuda_exec_probe(mstar_graph *graph, mstar__exec_probe *out)
{
    void *native = mstar_graph_native(graph);
    if (native == NULL)
        return mstar_error_set(MSTAR_EINVAL, "executable memory: the graph was not kept "
                                             "(instantiate it with keep_graph)");
    *out = (mstar__exec_probe){ .instantiate = probe_instantiate,
                                .destroy = probe_destroy,
                                .free_bytes = probe_free_bytes,
                                .graph = native,
                                .backend = mstar_graph_backend(graph) };
    return MSTAR_OK;
}
