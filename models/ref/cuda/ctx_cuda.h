/*
 * ctx_cuda.h — the CUDA backend's ref_ops context (a cuBLAS handle and its workspace), its GEMMs
 * and the timing events of a profile (ctx_cuda.c), behind ref_ops_cuda (ops_cuda.c).
 */
#ifndef MSTAR_EXAMPLES_CTX_CUDA_H
#define MSTAR_EXAMPLES_CTX_CUDA_H

#include "ref_ops.h"

mstar_status ref_cuda_ctx_create(mstar_backend *backend, int64_t linear_rows, ref_ops_ctx **out);
void ref_cuda_ctx_destroy(ref_ops_ctx *ctx);
/* out = x · w^T (bf16 or, with out_f32, float32 out), or out += x · w^T with `accumulate`. */
mstar_status ref_cuda_ctx_matmul_nt(ref_ops_ctx *ctx, mstar_stream *s, const void *x, const void *w,
                                    int64_t n, int64_t k, int64_t m, bool accumulate, bool out_f32,
                                    void *out);

/* The most rows a linear layer runs as one kernel (MSTAR_REF_SKINNY_GEMM; 0: none). */
int64_t ref_cuda_ctx_linear_rows(const ref_ops_ctx *ctx);

mstar_status ref_cuda_marks_create(mstar_backend *backend, size_t count, void **out);
void ref_cuda_marks_destroy(void *marks, size_t count);
mstar_status ref_cuda_mark_record(void *marks, size_t i, mstar_stream *s);
mstar_status ref_cuda_mark_elapsed_us(void *marks, size_t a, size_t b, double *out);

#endif
