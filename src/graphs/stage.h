/*
 * stage.h — static input buffers: interning at capture (design.md "Capture order and interning")
 * and staging at replay (design.md "Replay").
 */
#ifndef MSTAR_GRAPHS_STAGE_H
#define MSTAR_GRAPHS_STAGE_H

#include "mstar/graphs.h"

#include "core/vec.h"

typedef struct mstar__interned {
    uint32_t config_idx;
    char *key;
    int32_t seq_dim;
    mstar_tensor storage; /* the first (largest) capture's shape, from the caching allocator */
} mstar__interned;

/* The buffer of (config_idx, key), created from `value` on first use, and a view of it shaped
 * like `value` (narrowed on the seq dim) with `value` copied in. The seq dim is `declared` when
 * >= 0, else the first dim of size num_tokens, else 0. MSTAR_ERANGE when `value` needs a longer
 * seq dim than the buffer (a smaller bucket captured before a larger one) or other dims differ
 * (G-12). */
mstar_status mstar__intern(mstar__vec *interned, mstar_stream *stream, uint32_t config_idx,
                           const char *key, const mstar_tensor *value, int64_t num_tokens,
                           int32_t declared, mstar_tensor *view, int32_t *seq_dim);
/* A static buffer's copy node in the graph about to be launched (device/backend.h). */
typedef struct mstar__stage_node {
    mstar_graph *graph;
    uint32_t index;
} mstar__stage_node;

/* Every static buffer's: the graph and, per static input in order, its node (uint32_t, UINT32_MAX
 * for none). */
typedef struct mstar__stage_nodes {
    mstar_graph *graph;
    const mstar__vec *index;
} mstar__stage_nodes;

/* Copy `value` into the leading value->shape[seq_dim] positions of `dst` (a view of an interned
 * buffer) on the seq dim, on `stream`; with `zero_tail`, zero dst's positions past them. Other
 * dims must match. A value that is dst's own storage in dst's layout (narrowed on the seq dim) is
 * already in place: no copy, only the tail. With `node` (NULL: none), a value that is one run of
 * bytes on dst's device is given to dst's copy node, which copies it when the graph is launched;
 * otherwise the node is told to copy nothing. */
mstar_status mstar__stage(mstar_stream *stream, const mstar_tensor *dst, int32_t seq_dim,
                          const mstar_tensor *value, const char *key, bool zero_tail,
                          const mstar__stage_node *node);
/* Stage every entry of `values` into the same-named entry of `statics` (design.md "Replay",
 * "Piecewise regions"). A value with no static entry is MSTAR_EINVAL; a static entry with no value
 * keeps its contents and is warned about once per key (the keys warned about are kept in `warned`,
 * char *). seq_dims[i] (int32_t) is the seq dim of statics' i-th entry; NULL: dim 0 for every
 * entry. `nodes` (NULL: none) are the copy nodes of the graph to be launched (a key with no value
 * gets its node told to copy nothing). `who` starts messages. */
mstar_status mstar__stage_inputs(mstar_stream *stream, const char *who,
                                 const mstar_tensor_map *statics, const mstar__vec *seq_dims,
                                 const mstar_tensor_map *values, bool zero_tail, mstar__vec *warned,
                                 const mstar__stage_nodes *nodes);
void mstar__stage_warned_free(mstar__vec *warned);
void mstar__interned_free(mstar__vec *interned, mstar_backend *backend);

#endif
