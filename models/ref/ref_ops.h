/*
 * ref_ops.h — the reference model's kernels enqueued on a device stream, one table per backend.
 *
 * The forward (ref_model.c) is written once against this table. Each entry enqueues one kernel on
 * the stream and returns at once:
 *   - host backend: mstar_launch of the fp32 host kernel (kernels_host.h), so eager work runs
 *     now and a capture records the call for every replay;
 *   - CUDA backend: a bf16 kernel (cuda/kernels_cuda.h) launched on the stream's native handle,
 *     so a stream capture records it as a kernel node.
 * Activations and weights are `act_dtype` (float32 on the host, bfloat16 on CUDA); logits are
 * always float32 and token ids, positions and plan arrays int32. Sizes and meanings are those of
 * kernels_host.h.
 */
#ifndef MSTAR_EXAMPLES_REF_OPS_H
#define MSTAR_EXAMPLES_REF_OPS_H

#include "mstar/mstar.h"

typedef struct ref_ops {
    const char *name;
    mstar_dtype act_dtype;
    mstar_status (*embed)(mstar_stream *s, const void *table, int64_t dim, const int32_t *tokens,
                          int64_t n, void *out);
    mstar_status (*rmsnorm)(mstar_stream *s, const void *x, const void *weight, int64_t n,
                            int64_t dim, float eps, void *out);
    /* out (act_dtype) = x · w^T */
    mstar_status (*matmul_nt)(mstar_stream *s, const void *x, const void *w, int64_t n, int64_t k,
                              int64_t m, void *out);
    /* The same with a float32 out: the logits. */
    mstar_status (*matmul_nt_f32)(mstar_stream *s, const void *x, const void *w, int64_t n,
                                  int64_t k, int64_t m, float *out);
    mstar_status (*rope)(mstar_stream *s, void *x, int64_t ld, const int32_t *pos, int64_t n,
                         int64_t heads, int64_t head_dim, float theta);
    mstar_status (*kv_write)(mstar_stream *s, void *k_pages, void *v_pages, int64_t page_size,
                             int64_t kv_dim, const void *k, const void *v, int64_t ld,
                             const int32_t *token_to_page, const int32_t *token_to_cache,
                             int64_t n);
    mstar_status (*paged_attention)(mstar_stream *s, const void *q, int64_t ld_q,
                                    const void *k_pages, const void *v_pages, int64_t page_size,
                                    const int32_t *page_table, int64_t pages_per_row,
                                    const int32_t *token_row, const int32_t *token_kv_len,
                                    int64_t n, int64_t heads, int64_t head_dim, void *out);
    mstar_status (*silu_mul)(mstar_stream *s, const void *gate_up, int64_t n, int64_t f, void *out);
    mstar_status (*add)(mstar_stream *s, void *x, const void *y, int64_t count);
    mstar_status (*gather_rows)(mstar_stream *s, const void *x, int64_t dim, const int32_t *index,
                                int64_t n, void *out);
    mstar_status (*argmax)(mstar_stream *s, const float *logits, int64_t n, int64_t vocab,
                           int32_t *out);
} ref_ops;

/* The table for a backend: host, or CUDA when built in. MSTAR_ENOTSUP otherwise. */
mstar_status ref_ops_for(const mstar_backend *backend, const ref_ops **out);

extern const ref_ops ref_ops_host;
#ifdef MSTAR_HAVE_CUDA
extern const ref_ops ref_ops_cuda;
#endif

#endif
