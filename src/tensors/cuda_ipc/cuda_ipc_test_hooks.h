/*
 * cuda_ipc_test_hooks.h — what tests ask of a transport wrapped in the CUDA IPC route
 * (cuda_ipc_transport.c): its counts of opened segments, reads and caches, and switches that put
 * it in states a test needs. The library itself calls none of these.
 */
#ifndef MSTAR_TENSORS_CUDA_IPC_TEST_HOOKS_H
#define MSTAR_TENSORS_CUDA_IPC_TEST_HOOKS_H

#include "tensors/cuda_ipc/cuda_ipc.h"

/* Segments this manager has opened over the route so far, and those still mapped (0 for any
 * other transport); tests. */
void mstar__transport_cuda_ipc_counts(mstar__transport *t, uint64_t *opens, uint64_t *mapped);
/* Switch a wrapped transport's mode (tests: AUTO on the host stand-in, which the environment
 * turns on only when forced). */
void mstar__transport_cuda_ipc_set_mode(mstar__transport *t, mstar__cuda_ipc_mode mode);
/* Tests: make the next `n` reads that land in the background fail to reach the route's watcher,
 * as if memory ran out, so they wait for their copies in the read call instead. Returns how many
 * such failures were still to come (0 for any other transport). */
unsigned mstar__transport_cuda_ipc_fail_watch(mstar__transport *t, unsigned n);
/* Tests: reads the route's watcher holds, their copies not yet landed (0 for any other
 * transport). */
size_t mstar__transport_cuda_ipc_watching(mstar__transport *t);
/* Tests: read calls that polled for their copies to land (MSTAR_CUDA_IPC_SPIN_US) so far (0 for
 * any other transport). */
uint64_t mstar__transport_cuda_ipc_spins(mstar__transport *t);
/* Tests: segments, events and producers' registries a consumer holds open (0 for any other
 * transport), and the most it keeps of each (n > 0; the default is 256). */
size_t mstar__transport_cuda_ipc_cached(mstar__transport *t);
void mstar__transport_cuda_ipc_set_cache_max(mstar__transport *t, size_t n);

#endif
