/*
 * exec_memory.h — how the executable measurement reaches the device: a probe that instantiates one
 * copy of a graph, destroys one, and reads device free memory. The CUDA backend supplies one
 * (cuda/exec_probe_cuda.c); tests supply a simulated driver, so the measuring loop, the holding
 * of copies and the cleanup on failure run in CI.
 */
#ifndef MSTAR_GRAPHS_EXEC_MEMORY_H
#define MSTAR_GRAPHS_EXEC_MEMORY_H

#include "mstar/device.h"
#include "mstar/planner.h"

typedef struct mstar__exec_probe mstar__exec_probe;

struct mstar__exec_probe {
    /* Instantiate one more executable copy of `graph`; *copy is what destroy takes. */
    mstar_status (*instantiate)(mstar__exec_probe *probe, void **copy);
    void (*destroy)(mstar__exec_probe *probe, void *copy);
    /* Device free memory now, in bytes. */
    mstar_status (*free_bytes)(mstar__exec_probe *probe, uint64_t *out);
    void *graph;            /* what copies are made of (the CUDA probe: a kept mstar_graph) */
    mstar_backend *backend; /* for free_bytes and destroy (it outlives the graph) */
    void *user;             /* a simulated driver's state */
};

/* Measure with `probe` (copied into em, which then holds the copies until release). */
mstar_status mstar__exec_memory_measure_with(mstar_exec_memory *em, const mstar__exec_probe *probe,
                                             uint64_t nodes);

#ifdef MSTAR_HAVE_CUDA
/* The CUDA probe for a kept graph (mstar_graph_native not NULL). */
mstar_status mstar__cuda_exec_probe(mstar_graph *graph, mstar__exec_probe *out);
#endif

#endif
