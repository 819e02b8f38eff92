/*
 * stage.h — static input buffers: interning at capture (§3.7) and staging at replay (§5.2).
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
 * (§8.12). */
mstar_status mstar__intern(mstar__vec *interned, mstar_stream *stream, uint32_t config_idx,
                           const char *key, const mstar_tensor *value, int64_t num_tokens,
                           int32_t declared, mstar_tensor *view, int32_t *seq_dim);
/* Copy `value` into the leading value->shape[seq_dim] positions of `dst` (a view of an interned
 * buffer) on the seq dim, on `stream`. Other dims must match. */
mstar_status mstar__stage(mstar_stream *stream, const mstar_tensor *dst, int32_t seq_dim,
                          const mstar_tensor *value, const char *key);
void mstar__interned_free(mstar__vec *interned, mstar_backend *backend);

#endif
