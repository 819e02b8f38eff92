/*
 * mstar/graphs.h — the accelerator graph runner: graph pools and capture.
 *
 * Graph pools are this project's own allocator over backend memory with the reference semantics
 * (docs/architecture.md, DESIGN.md "Graph pools"): while a stream captures into a pool, the
 * stream's mstar_alloc calls are served from the pool; blocks freed during a capture return to the
 * pool for later captures; blocks live when the capture ends belong to the graph until it is
 * destroyed. One pool per node, shared by the node's whole-forward runner and its piecewise
 * regions.
 */
#ifndef MSTAR_GRAPHS_H
#define MSTAR_GRAPHS_H

#include "mstar/core.h"
#include "mstar/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Graph pools
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_graph_pool mstar_graph_pool;

/* `name` (a valid mstar name, e.g. the node's) appears in logs and in capture plans. */
mstar_status mstar_graph_pool_create(mstar_backend *backend, const char *name,
                                     mstar_graph_pool **out);
/* Drop the creator's reference. The pool's memory stays until every graph owning blocks of it is
 * destroyed too. NULL is ignored. */
void mstar_graph_pool_destroy(mstar_graph_pool *pool);
const char *mstar_graph_pool_name(const mstar_graph_pool *pool);
mstar_backend *mstar_graph_pool_backend(const mstar_graph_pool *pool);
/* reserved = segments the pool holds; allocated = live blocks (graphs' kept blocks included). */
void mstar_graph_pool_stats(mstar_graph_pool *pool, mstar_alloc_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_GRAPHS_H */
