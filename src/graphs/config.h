/*
 * config.h — what the runners need of a config beyond the public checks: deep copies (a runner
 * owns its configs, sorted), token arithmetic and per-key lookups.
 */
#ifndef MSTAR_GRAPHS_CONFIG_H
#define MSTAR_GRAPHS_CONFIG_H

#include "mstar/graphs.h"

/* Validate `src` and copy it with every string and array owned; batch sizes and token lengths
 * sorted; the capture walk first among the replay walks; default sizes filled in. */
mstar_status mstar__config_copy(const mstar_graph_config *src, uint32_t idx,
                                mstar_graph_config *dst);
void mstar__config_free(mstar_graph_config *c);
/* Positive and unique; MSTAR_EINVAL naming `who` ("config 3") and the field. */
mstar_status mstar__check_sizes(const int64_t *v, size_t n, const char *who, const char *field);
/* A sorted, owned copy (never NULL unless *failed is set). */
int64_t *mstar__sorted_copy(const int64_t *v, size_t n, bool *failed);
/* The same for capture batch sizes: `v` NULL gives the defaults and sets *n. */
int64_t *mstar__sorted_batch_sizes(const int64_t *v, size_t *n, bool *failed);
/* Refuse a PACKED (bs, tokens) pair with tokens == bs (G-10); `sizes` NULL: the default batch
 * sizes. `who` starts the message ("config 3"). */
mstar_status mstar__check_packed_pairs(const int64_t *sizes, size_t n, const int64_t *tokens,
                                       size_t m, const char *who);
/* A BATCHED config's plan tokens at batch size bs. */
int64_t mstar__config_batched_tokens(const mstar_graph_config *c, int64_t bs);
/* The declared seq dim of an input key, or -1. */
int32_t mstar__config_seq_dim(const mstar_graph_config *c, const char *key);
/* Whether the config's captures replay `walk` (the capture walk or an alias). */
bool mstar__config_replays(const mstar_graph_config *c, const char *walk);

#endif
