/*
 * ops_cuda.c — the CUDA backend's ref_ops: each entry launches a bf16 kernel of kernels_cuda.cu
 * on the stream's native handle and turns a launch error into MSTAR_EDEVICE naming the kernel;
 * GEMMs go to cuBLAS through the model's context (ctx_cuda.c). Built only with the CUDA backend
 * and cuBLAS.
 */
#include "ref_ops.h"

#include "cuda/ctx_cuda.h"
#include "cuda/kernels_cuda.h"

static mstar_status check(int error, const char *kernel)
{
    if (error == 0)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EDEVICE, "reference model: %s kernel: %s", kernel,
                           ref_cuda_error_string(error));
}

static mstar_status cuda_embed(mstar_stream *s, const void *table, int64_t dim,
                               const int32_t *tokens, int64_t n, void *out)
{
    return check(ref_cuda_embed(mstar_stream_native(s), table, dim, tokens, n, out), "embed");
}

static mstar_status cuda_rmsnorm(mstar_stream *s, const void *x, const void *weight, int64_t n,
                                 int64_t dim, float eps, void *out)
{
    /* A plain norm is the fused kernel with no silu residual and nothing stored back. */
    return check(ref_cuda_silu_add_rmsnorm(mstar_stream_native(s), x, NULL, NULL, NULL, weight, n,
                                           dim, eps, out),
                 "rmsnorm");
}

static mstar_status cuda_silu_add_rmsnorm(mstar_stream *s, const void *x, const void *h,
                                          void *x_out, const void *weight, int64_t n, int64_t dim,
                                          float eps, void *out)
{
    return check(ref_cuda_silu_add_rmsnorm(mstar_stream_native(s), x, NULL, h, x_out, weight, n,
                                           dim, eps, out),
                 "silu_add_rmsnorm");
}

static mstar_status cuda_matmul_nt(ref_ops_ctx *ctx, mstar_stream *s, const void *x, const void *w,
                                   int64_t n, int64_t k, int64_t m, bool accumulate, void *out)
{
    return ref_cuda_ctx_matmul_nt(ctx, s, x, w, n, k, m, accumulate, false, out);
}

static mstar_status cuda_matmul_nt_f32(ref_ops_ctx *ctx, mstar_stream *s, const void *x,
                                       const void *w, int64_t n, int64_t k, int64_t m, float *out)
{
    return ref_cuda_ctx_matmul_nt(ctx, s, x, w, n, k, m, false, true, out);
}

static mstar_status cuda_rope_kv_write(mstar_stream *s, void *qkv, int64_t ld, const int32_t *pos,
                                       int64_t n, int64_t heads, int64_t head_dim, float theta,
                                       void *k_pages, void *v_pages, int64_t page_size,
                                       const int32_t *token_to_page, const int32_t *token_to_cache)
{
    return check(ref_cuda_rope_kv_write(mstar_stream_native(s), qkv, ld, pos, n, heads, head_dim,
                                        theta, k_pages, v_pages, page_size, token_to_page,
                                        token_to_cache),
                 "rope_kv_write");
}

static mstar_status cuda_paged_attention(mstar_stream *s, const void *q, int64_t ld_q,
                                         const void *k_pages, const void *v_pages,
                                         int64_t page_size, const int32_t *page_table,
                                         int64_t pages_per_row, const int32_t *token_row,
                                         const int32_t *token_kv_len, int64_t n, int64_t heads,
                                         int64_t head_dim, void *out)
{
    return check(ref_cuda_paged_attention(mstar_stream_native(s), q, ld_q, k_pages, v_pages,
                                          page_size, page_table, pages_per_row, token_row,
                                          token_kv_len, n, heads, head_dim, out),
                 "paged_attention");
}

static mstar_status cuda_rope_attention(mstar_stream *s, void *qkv, int64_t ld,
                                        const ref_rope_kv *r, const int32_t *page_table,
                                        int64_t pages_per_row, const int32_t *token_row,
                                        const int32_t *token_kv_len, int64_t n, void *out)
{
    return check(ref_cuda_rope_attention(
                     mstar_stream_native(s), qkv, ld, r->pos, r->heads, r->head_dim, r->theta,
                     r->k_pages, r->v_pages, r->page_size, r->token_to_page, r->token_to_cache,
                     page_table, pages_per_row, token_row, token_kv_len, n, out),
                 "rope_attention");
}

static mstar_status cuda_silu_mul(mstar_stream *s, const void *gate_up, int64_t n, int64_t f,
                                  void *out)
{
    return check(ref_cuda_silu_mul(mstar_stream_native(s), gate_up, n, f, out), "silu_mul");
}

static mstar_status cuda_gather_rmsnorm(mstar_stream *s, const void *x, const int32_t *rows,
                                        const void *weight, int64_t n, int64_t dim, float eps,
                                        void *x_out, void *out)
{
    return check(ref_cuda_silu_add_rmsnorm(mstar_stream_native(s), x, rows, NULL, x_out, weight, n,
                                           dim, eps, out),
                 "gather_rmsnorm");
}

static mstar_status cuda_argmax(mstar_stream *s, const float *logits, int64_t n, int64_t vocab,
                                int32_t *out)
{
    return check(ref_cuda_argmax(mstar_stream_native(s), logits, n, vocab, out), "argmax");
}

/* Few rows (a decode step): the layer as one kernel. Many (a prefill), or with the kernel
 * switched off: the table's separate ops, the GEMM on cuBLAS. The choice depends on n alone, so
 * a capture at a batch size records what an eager step of that size runs. */
static mstar_status cuda_linear(ref_ops_ctx *ctx, mstar_stream *s, const ref_linear *l)
{
    mstar_status st = ref_linear_check(l);
    if (st != MSTAR_OK)
        return st;
    if (l->n > ref_cuda_ctx_linear_rows(ctx))
        return ref_linear_unfused(&ref_ops_cuda, ctx, s, l);
    return check(ref_cuda_linear_launch(mstar_stream_native(s), l), "linear");
}

const ref_ops ref_ops_cuda = {
    .name = "cuda bf16",
    .act_dtype = MSTAR_DTYPE_BFLOAT16,
    .ctx_create = ref_cuda_ctx_create,
    .ctx_destroy = ref_cuda_ctx_destroy,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .silu_add_rmsnorm = cuda_silu_add_rmsnorm,
    .matmul_nt = cuda_matmul_nt,
    .matmul_nt_f32 = cuda_matmul_nt_f32,
    .rope_kv_write = cuda_rope_kv_write,
    .paged_attention = cuda_paged_attention,
    .rope_attention = cuda_rope_attention,
    .silu_mul = cuda_silu_mul,
    .gather_rmsnorm = cuda_gather_rmsnorm,
    .argmax = cuda_argmax,
    .linear = cuda_linear,
    .marks_create = ref_cuda_marks_create,
    .marks_destroy = ref_cuda_marks_destroy,
    .mark_record = ref_cuda_mark_record,
    .mark_elapsed_us = ref_cuda_mark_elapsed_us,
};
