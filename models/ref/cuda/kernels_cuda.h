/*
 * kernels_cuda.h — launchers of the reference model's CUDA kernels (kernels_cuda.cu, and the
 * one-kernel linear layer of linear_cuda.cu), callable from C. GEMMs of many rows are cuBLAS
 * calls (ctx_cuda.c).
 *
 * Same meanings and sizes as kernels_host.h, in bf16 storage with fp32 arithmetic: every pointer
 * named bf16 points at bfloat16 elements, logits are float32, ids and plans int32. Each launcher
 * enqueues one kernel on `stream` (a cudaStream_t) and returns the launch's cudaError_t (0 on
 * success); a zero-sized call launches nothing. The kernels sum in a fixed order and use no
 * atomics, so a result depends only on its inputs — a replay gives the eager step's bits — and
 * one row's output does not depend on the other rows of the call.
 */
#ifndef MSTAR_EXAMPLES_KERNELS_CUDA_H
#define MSTAR_EXAMPLES_KERNELS_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int ref_cuda_embed(void *stream, const void *table_bf16, int64_t dim, const int32_t *tokens,
                   int64_t n, void *out_bf16);
/* r = x[row] + silu(h) (x[row] when h is NULL; row rows[i] of x, or row i when rows is NULL),
 * stored to x_out when not NULL (may be x when rows is NULL; required with h), then out =
 * rmsnorm(r) * weight when out is not NULL: with rows, h and x_out NULL, a plain rmsnorm. */
int ref_cuda_silu_add_rmsnorm(void *stream, const void *x, const int32_t *rows, const void *h,
                              void *x_out, const void *weight, int64_t n, int64_t dim, float eps,
                              void *out);
/* Rope of q and k of each token's qkv row (q in place), k and v written to the pages. */
int ref_cuda_rope_kv_write(void *stream, void *qkv, int64_t ld, const int32_t *pos, int64_t n,
                           int64_t heads, int64_t head_dim, float theta, void *k_pages,
                           void *v_pages, int64_t page_size, const int32_t *token_to_page,
                           const int32_t *token_to_cache);
/* head_dim at most 256. */
int ref_cuda_paged_attention(void *stream, const void *q_bf16, int64_t ld_q,
                             const void *k_pages_bf16, const void *v_pages_bf16, int64_t page_size,
                             const int32_t *page_table, int64_t pages_per_row,
                             const int32_t *token_row, const int32_t *token_kv_len, int64_t n,
                             int64_t heads, int64_t head_dim, void *out_bf16);
/* ref_cuda_rope_kv_write, then ref_cuda_paged_attention over q = qkv, for a step with one token
 * per row (a decode step): one kernel where the attention kernel's grouped layout applies (each
 * (token, head) rotates its own q and k and writes its own page slot before it reads the
 * slots back), the two otherwise; the same bits either way. */
int ref_cuda_rope_attention(void *stream, void *qkv, int64_t ld, const int32_t *pos, int64_t heads,
                            int64_t head_dim, float theta, void *k_pages, void *v_pages,
                            int64_t page_size, const int32_t *token_to_page,
                            const int32_t *token_to_cache, const int32_t *page_table,
                            int64_t pages_per_row, const int32_t *token_row,
                            const int32_t *token_kv_len, int64_t n, void *out_bf16);
int ref_cuda_silu_mul(void *stream, const void *gate_up_bf16, int64_t n, int64_t f, void *out_bf16);
int ref_cuda_argmax(void *stream, const float *logits, int64_t n, int64_t vocab, int32_t *out);

/* A linear layer for few rows in one kernel (linear_cuda.cu): ref_linear (ref_ops.h) as the
 * model describes it, read by the kernel as it stands; its w and every row [k] are bf16, out is
 * bf16, or float32 with out_f32. Each output element's sum runs in an order fixed by k alone. */
struct ref_linear;

/* The most rows one call takes (more is cudaErrorInvalidValue: use the GEMM path). */
#define REF_CUDA_LINEAR_MAX_ROWS 1024

int ref_cuda_linear_launch(void *stream, const struct ref_linear *l);

/* The runtime's message for an error a launcher returned. */
const char *ref_cuda_error_string(int error);

#ifdef __cplusplus
}
#endif

#endif
