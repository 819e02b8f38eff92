/*
 * pool.h — graph pools inside the library: how a capture routes allocations into its pool, and
 * what a graph owns when its capture ends. The public half is in mstar/graphs.h. The device layer
 * reaches a pool only through the hooks pool.c installs (device/backend.h).
 */
#ifndef MSTAR_GRAPHS_POOL_H
#define MSTAR_GRAPHS_POOL_H

#include "device/backend.h"

/* mstar_alloc / mstar_free on a stream that captures into `pool`. `kind`: MSTAR__SEG_KEPT for a
 * block expected to outlive the capture (lifetimes.h), so that it never splits shared scratch. */
mstar_status mstar__pool_capture_alloc(mstar_graph_pool *pool, size_t nbytes, mstar__seg_kind kind,
                                       void **out);
mstar_status mstar__pool_capture_free(mstar_graph_pool *pool, void *ptr);
bool mstar__pool_owns(mstar_graph_pool *pool, const void *ptr);
/* Bytes the pool holds in kept segments (graphs' outputs), the rest of its reserve is shared. */
uint64_t mstar__pool_reserved_kept(mstar_graph_pool *pool);
/* mstar_free of a pool block with no capture running: refused for a graph's block. */
mstar_status mstar__pool_free_outside_capture(mstar_graph_pool *pool, void *ptr);

/* Route the stream's allocations into the pool for one capture. MSTAR_ESTATE if the pool is
 * already capturing on another stream (graphs of one pool never capture or replay concurrently). */
mstar_status mstar__pool_route_begin(mstar_graph_pool *pool, mstar_stream *stream);
/* Stop routing. With `g`, the blocks the capture left live become the graph's (it takes a pool
 * reference) and `taken`/`kept`/`peak` are filled; without, a failed capture's live blocks go
 * back to the pool. Always leaves the stream allocating from the caching allocator again. */
mstar_status mstar__pool_route_end(mstar_graph_pool *pool, mstar_stream *stream, mstar_graph *g,
                                   uint64_t *taken, uint64_t *kept, uint64_t *peak);

#endif
