/*
 * exec_memory.c — ExecutableMemory (design.md "Executable memory"): measure a walk's executable
 * memory per graph node on copies of its first throwaway graph, and hold the copies until the real
 * captures.
 *
 * Why copies are held rather than destroyed after reading: the driver keeps a destroyed
 * executable's memory for reuse and maps new memory beside it, so after any destroy, free memory
 * drops by less than a copy takes and a second measurement would read low. Held, they are also
 * memory the walk's real executables will reuse once released — the planner's reuse credit.
 * The arithmetic lives in exec_estimate.c; the device side comes through a probe
 * (exec_memory.h), so the loop here runs against a simulated driver in CI.
 */
#include "graphs/exec_memory.h"

#include <stdlib.h>
#include <string.h>

#define TOTAL_COPIES (MSTAR_EXEC_COUNTS * MSTAR_EXEC_COPIES_PER_COUNT)

struct mstar_exec_memory {
    mstar__exec_probe probe; /* how the held copies are destroyed */
    void *copies[TOTAL_COPIES];
    size_t ncopies;
    mstar_exec_estimate est;
};

mstar_status mstar_exec_memory_create(mstar_exec_memory **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "out is NULL");
    mstar_exec_memory *em = calloc(1, sizeof(*em));
    if (em == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_exec_memory_create: out of memory");
    *out = em;
    return MSTAR_OK;
}

void mstar_exec_memory_release(mstar_exec_memory *em)
{
    if (em == NULL)
        return;
    while (em->ncopies > 0) {
        em->ncopies--;
        em->probe.destroy(&em->probe, em->copies[em->ncopies]);
    }
    em->est.held = 0;
}

void mstar_exec_memory_destroy(mstar_exec_memory *em)
{
    mstar_exec_memory_release(em);
    free(em);
}

mstar_status mstar__exec_memory_measure_with(mstar_exec_memory *em, const mstar__exec_probe *probe,
                                             uint64_t nodes)
{
    if (em->ncopies > 0)
        return mstar_error_set(MSTAR_ESTATE,
                               "executable memory: %zu copies of an earlier "
                               "measurement are still held (release them first)",
                               em->ncopies);
    if (nodes == 0)
        return mstar_error_set(MSTAR_EINVAL, "executable memory: the graph has no nodes");
    em->probe = *probe;
    uint64_t readings[MSTAR_EXEC_COUNTS * (MSTAR_EXEC_COPIES_PER_COUNT + 1)];
    mstar_status st = MSTAR_OK;
    for (size_t c = 0; c < MSTAR_EXEC_COUNTS && st == MSTAR_OK; c++) {
        uint64_t *r = readings + c * (MSTAR_EXEC_COPIES_PER_COUNT + 1);
        st = em->probe.free_bytes(&em->probe, &r[0]);
        for (size_t i = 0; i < MSTAR_EXEC_COPIES_PER_COUNT && st == MSTAR_OK; i++) {
            st = em->probe.instantiate(&em->probe, &em->copies[em->ncopies]);
            if (st != MSTAR_OK)
                break;
            em->ncopies++;
            st = em->probe.free_bytes(&em->probe, &r[i + 1]);
        }
    }
    mstar_exec_estimate est;
    if (st == MSTAR_OK)
        st = mstar_exec_memory_estimate(readings, MSTAR_EXEC_COUNTS, MSTAR_EXEC_COPIES_PER_COUNT,
                                        nodes, &est);
    if (st != MSTAR_OK) {
        mstar_error_wrap("executable memory: copy %zu of %d", em->ncopies + 1, TOTAL_COPIES);
        mstar_exec_memory_release(em);
        return mstar_last_status();
    }
    em->est = est;
    if (est.has_per_node)
        mstar_log(MSTAR_LOG_INFO,
                  "executable memory: %.0f bytes per node over %llu nodes (%u of %d counts kept), "
                  "%llu bytes held in %zu copies",
                  est.per_node, (unsigned long long)nodes, est.kept_counts, MSTAR_EXEC_COUNTS,
                  (unsigned long long)est.held, em->ncopies);
    else
        mstar_log(MSTAR_LOG_INFO,
                  "executable memory: no copy of the %llu-node graph took free memory; per node "
                  "unknown",
                  (unsigned long long)nodes);
    return MSTAR_OK;
}

mstar_status mstar_exec_memory_measure(mstar_exec_memory *em, mstar_graph *graph)
{
    if (em == NULL || graph == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", em == NULL ? "em" : "graph");
    if (em->ncopies > 0)
        return mstar_error_set(MSTAR_ESTATE,
                               "executable memory: %zu copies of an earlier "
                               "measurement are still held (release them first)",
                               em->ncopies);
    mstar_backend *backend = mstar_graph_backend(graph);
    if (mstar_backend_device(backend).type != MSTAR_DEVICE_CUDA) {
        /* Host executables live in ordinary memory the planner already counts. */
        memset(&em->est, 0, sizeof(em->est));
        return MSTAR_OK;
    }
#ifdef MSTAR_HAVE_CUDA
    mstar__exec_probe probe;
    mstar_status st = mstar__cuda_exec_probe(graph, &probe);
    if (st != MSTAR_OK)
        return st;
    return mstar__exec_memory_measure_with(em, &probe, mstar_graph_node_count(graph));
#else
    return mstar_error_set(MSTAR_ENOTSUP, "executable memory: this build has no CUDA backend");
#endif
}

bool mstar_exec_memory_per_node(const mstar_exec_memory *em, double *per_node)
{
    if (em == NULL || !em->est.has_per_node)
        return false;
    if (per_node != NULL)
        *per_node = em->est.per_node;
    return true;
}

uint64_t mstar_exec_memory_held(const mstar_exec_memory *em)
{
    return em == NULL ? 0 : em->est.held;
}

size_t mstar_exec_memory_copies(const mstar_exec_memory *em)
{
    return em == NULL ? 0 : em->ncopies;
}
