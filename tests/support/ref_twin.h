/*
 * ref_twin.h — the reference model run through the graph runner on one side and by the plain
 * eager driver on an identical twin, for tests that compare replays with eager steps
 * (tests/unit/test_ref_replay.c on the host backend, tests/gpu/test_ref_replay_cuda.c on a GPU).
 *
 * The graphed side is a runner node (ref_node.h) with its buckets captured; it prefills eagerly
 * through the runner's submodule. The twin (ref_eager.h) has the same weights and never touches
 * the runner. Both see the same requests and tokens, so their outputs and KV streams must agree:
 * bit for bit in fp32 (tolerance 0), within a relative tolerance in bf16. The helpers assert
 * with cmocka.
 */
#ifndef MSTAR_TEST_REF_TWIN_H
#define MSTAR_TEST_REF_TWIN_H

#include "ref_eager.h"
#include "ref_node.h"

typedef struct ref_twin {
    mstar_backend *backend;
    ref_model_config cfg;
    mstar_kv_cache_config kv_cfg;
    ref_node *node;
    ref_eager *eager;
    double tolerance; /* 0: exact */
} ref_twin;

/* Build both sides and capture the node's configs. MSTAR_OK or the failing call's status. */
mstar_status ref_twin_create(ref_twin *t, mstar_backend *backend, const ref_model_config *cfg,
                             const mstar_kv_cache_config *kv_cfg,
                             const ref_capture_config *captures, size_t n_captures,
                             double tolerance);
/* Both sides, nothing captured yet (for tests that capture through mstar_capture_startup_run). */
mstar_status ref_twin_create_uncaptured(ref_twin *t, mstar_backend *backend,
                                        const ref_model_config *cfg,
                                        const mstar_kv_cache_config *kv_cfg,
                                        const ref_capture_config *captures, size_t n_captures,
                                        double tolerance);
void ref_twin_destroy(ref_twin *t);

/* A committing step of `walk` over n rows (rows[i] with spans[i] tokens from `tokens`), through
 * the captured graphs when `use_graphs`, on no reserved slot. */
ref_step_request ref_twin_request(const char *walk, const int64_t *rows, const int32_t *spans,
                                  int32_t n, const int32_t *tokens, bool use_graphs);
/* mstar_capture_startup_run over the graphed side's runner (one rank alone); `rep` may be NULL. */
mstar_status ref_twin_capture_startup(ref_twin *t, mstar_capture_report *rep);

/* Open n requests from `first` on both sides and prefill distinct prompts; next[i] gets each
 * one's first token (the sides agree on it). */
void ref_twin_open_and_prefill(ref_twin *t, int64_t first, int32_t n, int32_t *next);
void ref_twin_close(ref_twin *t, int64_t first, int32_t n);

/* Bytes of every layer's K and V pools of one side, and a copy of them (graphed: the node's;
 * else the twin's). */
size_t ref_twin_pools_bytes(const ref_twin *t);
void ref_twin_read_pools(ref_twin *t, bool graphed, char *out);

/* Between two snapshots of the graphed side, no token slot outside the sink page changed that
 * the real rows `reqs` do not own. */
void ref_twin_assert_only_real_rows_written(ref_twin *t, const char *before, const char *after,
                                            const int64_t *reqs, int32_t n);
/* The graphed side's KV streams of `reqs` hold the twin's, token by token (page ids may differ).
 * a and b are scratch of ref_twin_pools_bytes. */
void ref_twin_assert_streams_match(ref_twin *t, char *a, char *b, const int64_t *reqs, int32_t n);

/* The largest |got - want| over the largest |want| (0 when equal). Fails beyond the tolerance,
 * or on any difference when the tolerance is 0. */
double ref_twin_compare(const ref_twin *t, const float *got, const float *want, size_t n,
                        const char *what);

/* The Must-show loop: for every batch size 1..max_bs, a "decode" step replayed on the tightest
 * bucket (padded with zero-length rows when bs is not captured) against the twin's eager step —
 * logits, tokens (when exact), the KV streams, the pages padding must not touch, and the free
 * pages. Opens and closes requests [first, first + max_bs). Returns the largest relative
 * difference seen and counts the padded batch sizes in *padded. */
double ref_twin_replay_every_batch_size(ref_twin *t, int64_t first, int32_t max_bs, int *padded);
/* The same checks at the batch sizes sizes[0..nsizes) (ascending), where a batch size no
 * captured bucket fits (a dropped bucket) runs eager through the node's submodule; *replays
 * counts the replayed ones. */
double ref_twin_decode_batch_sizes(ref_twin *t, int64_t first, const int32_t *sizes, int32_t nsizes,
                                   int *replays);

#endif
