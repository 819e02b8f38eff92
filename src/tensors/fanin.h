/*
 * fanin.h — gathering a sharded input from every source rank (reference BufferedShards,
 * design.md "Sharding").
 *
 * A destination whose slice of a signal is produced by several source ranks receives one edge
 * per rank. Each arriving edge's tensors are kept here (by a reference on their storage, not a
 * copy, so their store entries can be released at once), each under the source rank its own
 * descriptor names: one edge may carry the shards of several ranks.
 * When every rank has arrived, output i is the concatenation over ranks, in ascending rank
 * order, of each rank's tensor i along the shard dim. The tensors are in canonical layout (the
 * shard dim first, contiguous), so that concatenation is the canonical bytes of each shard one
 * after another: a plain copy per shard, the same on the host and on a device.
 *
 * A buffer is keyed by (signal name, destination node): two nodes of one worker that take the
 * same signal gather separately (the reference keys by name alone, T-10).
 */
#ifndef MSTAR_TENSORS_FANIN_H
#define MSTAR_TENSORS_FANIN_H

#include "core/vec.h"
#include "mstar/wire.h"
#include "tensors/buf.h"
#include "tensors/transport.h"

typedef struct mstar__shard {
    int32_t rank;
    uint32_t index; /* position among the rank's tensors */
    mstar__buf *buf;
    mstar_tensor view; /* canonical, contiguous */
} mstar__shard;

typedef struct mstar__fanin {
    char name[MSTAR_NAME_MAX + 1];
    char next_node[MSTAR_NAME_MAX + 1];
    int32_t total_fanin;
    int32_t shard_dim;
    uint32_t nranks;   /* distinct ranks arrived */
    mstar__vec shards; /* mstar__shard */
    mstar_edge edge;   /* the first arriving edge: the template of the emitted one */
} mstar__fanin;

mstar_status mstar__fanin_create(const mstar_edge *first, mstar__fanin **out);
/* Release every shard and the buffer. */
void mstar__fanin_destroy(mstar__fanin *f);
bool mstar__fanin_matches(const mstar__fanin *f, const mstar_edge *edge);

/* Add one edge's tensors, tensor i from source rank ranks[i] (their storage is retained). A
 * rank's tensors keep their order in the edge. A rank that already arrived with an earlier edge
 * is refused with MSTAR_EPROTO and nothing is added. */
mstar_status mstar__fanin_add(mstar__fanin *f, const int32_t *ranks, mstar__buf *const *bufs,
                              const mstar_tensor *views, uint32_t n);
bool mstar__fanin_done(const mstar__fanin *f);

/* Consolidate: outputs[i] (buffers allocated through `env`, views canonical and contiguous) for
 * i < *n. MSTAR_EPROTO when ranks contributed different counts or shapes that do not
 * concatenate. The caller owns the returned buffers and the arrays (free()). */
mstar_status mstar__fanin_consolidate(mstar__fanin *f, const mstar__transport_env *env,
                                      mstar__buf ***bufs, mstar_tensor **views, uint32_t *n);

#endif
