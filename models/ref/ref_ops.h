/*
 * ref_ops.h — the reference model's kernels enqueued on a device stream, one table per backend.
 *
 * The forward (ref_model.c) is written once against this table. Each entry enqueues one kernel on
 * the stream and returns at once:
 *   - host backend: mstar_launch of the fp32 host kernel (kernels_host.h), so eager work runs
 *     now and a capture records the call for every replay;
 *   - CUDA backend: a bf16 kernel (cuda/kernels_cuda.h) launched on the stream's native handle,
 *     or a cuBLAS GEMM (cuda/ctx_cuda.h), so a stream capture records it as kernel nodes. A
 *     linear layer of few rows can be one kernel, its norm and epilogue fused in; the model
 *     sets the row limit and MSTAR_REF_SKINNY_GEMM overrides it (0: cuBLAS always).
 * Activations and weights are `act_dtype` (float32 on the host, bfloat16 on CUDA); logits are
 * always float32 and token ids, positions and plan arrays int32. Sizes and meanings are those of
 * kernels_host.h.
 */
#ifndef MSTAR_EXAMPLES_REF_OPS_H
#define MSTAR_EXAMPLES_REF_OPS_H

#include "mstar/mstar.h"

#include <stdbool.h>

/* A model's own state for one backend's kernels, created once with the model: on CUDA the cuBLAS
 * handle and the workspace its GEMMs use, so that nothing is created or allocated while a stream
 * captures; on the host nothing (NULL). One context serves one stream at a time. */
typedef struct ref_ops_ctx ref_ops_ctx;

/* What a fused linear layer (ref_ops.linear) does with the GEMM's result acc = x' · w^T. */
typedef enum ref_epilogue {
    REF_EPI_STORE,    /* out = acc (float32 with out_f32: the logits) */
    REF_EPI_ADD,      /* out = residual + acc (a residual connection) */
    REF_EPI_SILU_ADD, /* out = residual + silu(acc) (the mlp bench model's layer) */
    REF_EPI_GATED,    /* out[:, j] = silu(acc[:, j]) * acc[:, m/2 + j], out is [n, m/2] */
    REF_EPI_ROPE_KV,  /* out = acc, a qkv projection: q and k rotated, k and v to the pages */
} ref_epilogue;

/* What REF_EPI_ROPE_KV needs: the rope_kv_write op's arguments other than qkv and n. */
typedef struct ref_rope_kv {
    const int32_t *pos;
    int64_t heads, head_dim;
    float theta;
    void *k_pages, *v_pages;
    int64_t page_size;
    const int32_t *token_to_page, *token_to_cache;
} ref_rope_kv;

/* One linear layer with what surrounds it: x' = x, or rmsnorm(x) with `norm` (a prologue);
 * rows x_rows[i] of x when x_rows is given (an embedding lookup, a gather of last tokens);
 * acc = x' · w^T; then the epilogue into out. The residual of ADD (which may be out itself) and
 * of SILU_ADD (which may not) is [n, m], or its rows residual_rows[i] when given (ADD only).
 * out must not overlap x: the rows are read by many blocks while others write out.
 *
 * The CUDA backend runs small n (decode) as one kernel; the host backend and CUDA's cuBLAS path
 * run the same work as the separate ops of this table (ref_linear_unfused), through the two
 * scratch buffers: norm_scratch [n, k] for x' (needed with norm or x_rows) and acc_scratch
 * [n, m] for acc (needed with SILU_ADD and GATED), act_dtype both. */
typedef struct ref_linear {
    const void *x;
    const int32_t *x_rows;
    const void *norm;
    float eps;
    const void *w; /* [m, k] */
    int64_t n, k, m;
    ref_epilogue epilogue;
    const void *residual;
    const int32_t *residual_rows;
    bool out_f32;
    void *out;
    void *norm_scratch, *acc_scratch;
    ref_rope_kv rope; /* REF_EPI_ROPE_KV: m = 3 * heads * head_dim */
} ref_linear;

typedef struct ref_ops ref_ops;

/* The linear layer as the table's separate ops: gather/norm, GEMM, epilogue kernel. */
mstar_status ref_linear_unfused(const ref_ops *ops, ref_ops_ctx *ctx, mstar_stream *s,
                                const ref_linear *l);
/* MSTAR_EINVAL naming what is wrong with l, or MSTAR_OK. */
mstar_status ref_linear_check(const ref_linear *l);

struct ref_ops {
    const char *name;
    mstar_dtype act_dtype;
    /* `linear_rows`: the model's default for the most rows a linear layer runs as one kernel
     * (CUDA; MSTAR_REF_SKINNY_GEMM overrides it; 0: never). */
    mstar_status (*ctx_create)(mstar_backend *backend, int64_t linear_rows, ref_ops_ctx **out);
    void (*ctx_destroy)(ref_ops_ctx *ctx); /* NULL is ignored */
    mstar_status (*embed)(mstar_stream *s, const void *table, int64_t dim, const int32_t *tokens,
                          int64_t n, void *out);
    mstar_status (*rmsnorm)(mstar_stream *s, const void *x, const void *weight, int64_t n,
                            int64_t dim, float eps, void *out);
    /* r = x + silu(h) (just x when h is NULL: the residual of a silu block); x_out = r when
     * x_out is not NULL (it may be x); out = rmsnorm(r) with `weight` when out is not NULL. One
     * kernel on CUDA. All are [n, dim]. */
    mstar_status (*silu_add_rmsnorm)(mstar_stream *s, const void *x, const void *h, void *x_out,
                                     const void *weight, int64_t n, int64_t dim, float eps,
                                     void *out);
    /* out (act_dtype) = x · w^T, or out += x · w^T with `accumulate` (a residual added in the
     * GEMM's epilogue, so no separate add). */
    mstar_status (*matmul_nt)(ref_ops_ctx *ctx, mstar_stream *s, const void *x, const void *w,
                              int64_t n, int64_t k, int64_t m, bool accumulate, void *out);
    /* The same with a float32 out: the logits. */
    mstar_status (*matmul_nt_f32)(ref_ops_ctx *ctx, mstar_stream *s, const void *x, const void *w,
                                  int64_t n, int64_t k, int64_t m, float *out);
    /* Rotates q (heads * head_dim at qkv) and k (next heads * head_dim) of each of the n tokens
     * (row stride ld) by its position, in place, and writes k and v (the third block) into the
     * token's page slot (token_to_page, token_to_cache): rope and the KV write in one kernel. */
    mstar_status (*rope_kv_write)(mstar_stream *s, void *qkv, int64_t ld, const int32_t *pos,
                                  int64_t n, int64_t heads, int64_t head_dim, float theta,
                                  void *k_pages, void *v_pages, int64_t page_size,
                                  const int32_t *token_to_page, const int32_t *token_to_cache);
    mstar_status (*paged_attention)(mstar_stream *s, const void *q, int64_t ld_q,
                                    const void *k_pages, const void *v_pages, int64_t page_size,
                                    const int32_t *page_table, int64_t pages_per_row,
                                    const int32_t *token_row, const int32_t *token_kv_len,
                                    int64_t n, int64_t heads, int64_t head_dim, void *out);
    /* Optional (NULL: rope_kv_write, then paged_attention over q = qkv): both for a step with
     * one token per row (a decode step), in one kernel where the backend can; the same results.
     * qkv is the qkv projection as its GEMM left it (ld = 3 * heads * head_dim). */
    mstar_status (*rope_attention)(mstar_stream *s, void *qkv, int64_t ld, const ref_rope_kv *rope,
                                   const int32_t *page_table, int64_t pages_per_row,
                                   const int32_t *token_row, const int32_t *token_kv_len, int64_t n,
                                   void *out);
    mstar_status (*silu_mul)(mstar_stream *s, const void *gate_up, int64_t n, int64_t f, void *out);
    /* Row i of x_out (when not NULL; it may not overlap x) = x[rows[i]], and row i of out =
     * rmsnorm(x[rows[i]]) with `weight`, for n rows of dim: an embedding lookup or a gather of
     * the rows' last tokens, with the norm that follows it, in one kernel on CUDA. */
    mstar_status (*gather_rmsnorm)(mstar_stream *s, const void *x, const int32_t *rows,
                                   const void *weight, int64_t n, int64_t dim, float eps,
                                   void *x_out, void *out);
    mstar_status (*argmax)(mstar_stream *s, const float *logits, int64_t n, int64_t vocab,
                           int32_t *out);
    /* A fused linear layer (ref_linear above). */
    mstar_status (*linear)(ref_ops_ctx *ctx, mstar_stream *s, const ref_linear *l);
    /* Op timing for a profile (ref_profile.h): `count` marks; mark i records when the stream's
     * work so far has run (a CUDA event with timing on CUDA, the wall clock on the host, where
     * eager work has run by the time its launch returns). */
    mstar_status (*marks_create)(mstar_backend *backend, size_t count, void **out);
    void (*marks_destroy)(void *marks, size_t count);
    mstar_status (*mark_record)(void *marks, size_t i, mstar_stream *s);
    /* Microseconds from mark a to mark b, both recorded and their work complete. */
    mstar_status (*mark_elapsed_us)(void *marks, size_t a, size_t b, double *out);
};

/* The table for a backend: host, or CUDA when built in. MSTAR_ENOTSUP otherwise. */
mstar_status ref_ops_for(const mstar_backend *backend, const ref_ops **out);

extern const ref_ops ref_ops_host;
#ifdef MSTAR_REFMODEL_CUDA
extern const ref_ops ref_ops_cuda;
#endif

#endif
