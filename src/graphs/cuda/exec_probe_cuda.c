/*
 * exec_probe_cuda.c — the device side of the executable-memory measurement on a CUDA backend:
 * instantiate executable copies of a kept graph and read the driver's free memory, all through
 * the device backend (mstar__graph_exec_copy, mstar_mem_info), never the CUDA runtime itself.
 */
#include "graphs/exec_memory.h"

#include "device/backend.h"

static mstar_status probe_instantiate(mstar__exec_probe *p, void **copy)
{
    return mstar__graph_exec_copy(p->graph, copy);
}

static void probe_destroy(mstar__exec_probe *p, void *copy)
{
    mstar__graph_exec_copy_destroy(p->backend, copy);
}

static mstar_status probe_free_bytes(mstar__exec_probe *p, uint64_t *out)
{
    uint64_t total;
    return mstar_mem_info(p->backend, out, &total);
}

mstar_status mstar__cuda_exec_probe(mstar_graph *graph, mstar__exec_probe *out)
{
    if (mstar_graph_native(graph) == NULL)
        return mstar_error_set(MSTAR_EINVAL, "executable memory: the graph was not kept "
                                             "(instantiate it with keep_graph)");
    *out = (mstar__exec_probe){ .instantiate = probe_instantiate,
                                .destroy = probe_destroy,
                                .free_bytes = probe_free_bytes,
                                .graph = graph,
                                .backend = mstar_graph_backend(graph) };
    return MSTAR_OK;
}
