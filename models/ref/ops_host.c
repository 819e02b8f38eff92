/*
 * ops_host.c — the host backend's ref_ops: each entry packs its arguments into a struct and
 * enqueues the fp32 host kernel with mstar_launch, which runs it now (eager) or records it for
 * every replay (capture). Also ref_ops_for, which picks a backend's table.
 */
#include "ref_ops.h"

#include "kernels_host.h"

#include "core/vec.h" /* mstar__now_ns */

#include <stdlib.h>
#include <string.h>

typedef struct rmsnorm_args {
    const float *x, *weight;
    int64_t n, dim;
    float eps;
    float *out;
} rmsnorm_args;

static void rmsnorm_fn(void *p)
{
    rmsnorm_args *a = p;
    ref_host_rmsnorm(a->x, a->weight, a->n, a->dim, a->eps, a->out);
}

static mstar_status host_rmsnorm(mstar_stream *s, const void *x, const void *weight, int64_t n,
                                 int64_t dim, float eps, void *out)
{
    rmsnorm_args a = { x, weight, n, dim, eps, out };
    return mstar_launch(s, rmsnorm_fn, &a, sizeof(a));
}

typedef struct silu_add_norm_args {
    const float *x, *h;
    float *x_out;
    const float *weight;
    int64_t n, dim;
    float eps;
    float *out;
} silu_add_norm_args;

/* The sum is formed in x_out, then normalized from there; a silu residual therefore needs an
 * x_out (the forwards always give one), as on CUDA. */
static void silu_add_norm_fn(void *p)
{
    silu_add_norm_args *a = p;
    const float *r = a->x;
    if (a->x_out != NULL) {
        if (a->x_out != a->x)
            memmove(a->x_out, a->x, (size_t)(a->n * a->dim) * sizeof(float));
        if (a->h != NULL)
            ref_host_silu_add(a->x_out, a->h, a->n * a->dim);
        r = a->x_out;
    }
    if (a->out != NULL)
        ref_host_rmsnorm(r, a->weight, a->n, a->dim, a->eps, a->out);
}

static mstar_status host_silu_add_rmsnorm(mstar_stream *s, const void *x, const void *h,
                                          void *x_out, const void *weight, int64_t n, int64_t dim,
                                          float eps, void *out)
{
    if (h != NULL && x_out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "silu_add_rmsnorm: a silu residual needs x_out");
    silu_add_norm_args a = { x, h, x_out, weight, n, dim, eps, out };
    return mstar_launch(s, silu_add_norm_fn, &a, sizeof(a));
}

typedef struct matmul_args {
    const float *x, *w;
    int64_t n, k, m;
    bool accumulate;
    float *out;
} matmul_args;

static void matmul_fn(void *p)
{
    matmul_args *a = p;
    ref_host_matmul_nt(a->x, a->w, a->n, a->k, a->m, a->accumulate, a->out);
}

static mstar_status host_matmul_nt(ref_ops_ctx *ctx, mstar_stream *s, const void *x, const void *w,
                                   int64_t n, int64_t k, int64_t m, bool accumulate, void *out)
{
    matmul_args a = { x, w, n, k, m, accumulate, out };
    return mstar_launch(s, matmul_fn, &a, sizeof(a));
}

static mstar_status host_matmul_nt_f32(ref_ops_ctx *ctx, mstar_stream *s, const void *x,
                                       const void *w, int64_t n, int64_t k, int64_t m, float *out)
{
    return host_matmul_nt(ctx, s, x, w, n, k, m, false, out);
}

typedef struct rope_kv_args {
    float *qkv;
    int64_t ld;
    const int32_t *pos;
    int64_t n, heads, head_dim;
    float theta;
    float *k_pages, *v_pages;
    int64_t page_size;
    const int32_t *token_to_page, *token_to_cache;
} rope_kv_args;

static void rope_kv_fn(void *p)
{
    rope_kv_args *a = p;
    int64_t q = a->heads * a->head_dim;
    ref_host_rope(a->qkv, a->ld, a->pos, a->n, a->heads, a->head_dim, a->theta);
    ref_host_rope(a->qkv + q, a->ld, a->pos, a->n, a->heads, a->head_dim, a->theta);
    ref_host_kv_write(a->k_pages, a->v_pages, a->page_size, q, a->qkv + q, a->qkv + 2 * q, a->ld,
                      a->token_to_page, a->token_to_cache, a->n);
}

static mstar_status host_rope_kv_write(mstar_stream *s, void *qkv, int64_t ld, const int32_t *pos,
                                       int64_t n, int64_t heads, int64_t head_dim, float theta,
                                       void *k_pages, void *v_pages, int64_t page_size,
                                       const int32_t *token_to_page, const int32_t *token_to_cache)
{
    rope_kv_args a = { qkv,   ld,      pos,     n,         heads,         head_dim,
                       theta, k_pages, v_pages, page_size, token_to_page, token_to_cache };
    return mstar_launch(s, rope_kv_fn, &a, sizeof(a));
}

typedef struct attention_args {
    const float *q;
    int64_t ld_q;
    const float *k_pages, *v_pages;
    int64_t page_size;
    const int32_t *page_table;
    int64_t pages_per_row;
    const int32_t *token_row, *token_kv_len;
    int64_t n, heads, head_dim;
    float *out;
} attention_args;

static void attention_fn(void *p)
{
    attention_args *a = p;
    ref_host_paged_attention(a->q, a->ld_q, a->k_pages, a->v_pages, a->page_size, a->page_table,
                             a->pages_per_row, a->token_row, a->token_kv_len, a->n, a->heads,
                             a->head_dim, a->out);
}

static mstar_status host_paged_attention(mstar_stream *s, const void *q, int64_t ld_q,
                                         const void *k_pages, const void *v_pages,
                                         int64_t page_size, const int32_t *page_table,
                                         int64_t pages_per_row, const int32_t *token_row,
                                         const int32_t *token_kv_len, int64_t n, int64_t heads,
                                         int64_t head_dim, void *out)
{
    attention_args a = { q,          ld_q,          k_pages,   v_pages,      page_size,
                         page_table, pages_per_row, token_row, token_kv_len, n,
                         heads,      head_dim,      out };
    return mstar_launch(s, attention_fn, &a, sizeof(a));
}

typedef struct silu_args {
    const float *gate_up;
    int64_t n, f;
    float *out;
} silu_args;

static void silu_fn(void *p)
{
    silu_args *a = p;
    ref_host_silu_mul(a->gate_up, a->n, a->f, a->out);
}

static mstar_status host_silu_mul(mstar_stream *s, const void *gate_up, int64_t n, int64_t f,
                                  void *out)
{
    silu_args a = { gate_up, n, f, out };
    return mstar_launch(s, silu_fn, &a, sizeof(a));
}

typedef struct gather_args {
    const float *x;
    int64_t dim;
    const int32_t *index;
    int64_t n;
    float *out;
} gather_args;

static void gather_fn(void *p)
{
    gather_args *a = p;
    ref_host_gather_rows(a->x, a->dim, a->index, a->n, a->out);
}

static mstar_status host_gather_rows(mstar_stream *s, const void *x, int64_t dim,
                                     const int32_t *index, int64_t n, void *out)
{
    gather_args a = { x, dim, index, n, out };
    return mstar_launch(s, gather_fn, &a, sizeof(a));
}

typedef struct gather_norm_args {
    const float *x;
    const int32_t *rows;
    const float *weight;
    int64_t n, dim;
    float eps;
    float *x_out, *out;
} gather_norm_args;

static void gather_norm_fn(void *p)
{
    gather_norm_args *a = p;
    if (a->x_out != NULL)
        ref_host_gather_rows(a->x, a->dim, a->rows, a->n, a->x_out);
    for (int64_t i = 0; i < a->n; i++)
        ref_host_rmsnorm(a->x + (int64_t)a->rows[i] * a->dim, a->weight, 1, a->dim, a->eps,
                         a->out + i * a->dim);
}

static mstar_status host_gather_rmsnorm(mstar_stream *s, const void *x, const int32_t *rows,
                                        const void *weight, int64_t n, int64_t dim, float eps,
                                        void *x_out, void *out)
{
    gather_norm_args a = { x, rows, weight, n, dim, eps, x_out, out };
    return mstar_launch(s, gather_norm_fn, &a, sizeof(a));
}

typedef struct argmax_args {
    const float *logits;
    int64_t n, vocab;
    int32_t *out;
} argmax_args;

static void argmax_fn(void *p)
{
    argmax_args *a = p;
    ref_host_argmax(a->logits, a->n, a->vocab, a->out);
}

static mstar_status host_argmax(mstar_stream *s, const float *logits, int64_t n, int64_t vocab,
                                int32_t *out)
{
    argmax_args a = { logits, n, vocab, out };
    return mstar_launch(s, argmax_fn, &a, sizeof(a));
}

static mstar_status host_linear(ref_ops_ctx *ctx, mstar_stream *s, const ref_linear *l)
{
    return ref_linear_unfused(&ref_ops_host, ctx, s, l);
}

static mstar_status host_ctx_create(mstar_backend *backend, int64_t linear_rows, ref_ops_ctx **out)
{
    *out = NULL; /* the host kernels keep no state */
    return MSTAR_OK;
}

static void host_ctx_destroy(ref_ops_ctx *ctx)
{
}

/* Eager host work has run when its launch returns, so a mark is the wall clock. */
static mstar_status host_marks_create(mstar_backend *backend, size_t count, void **out)
{
    *out = calloc(count ? count : 1, sizeof(uint64_t));
    return *out != NULL ? MSTAR_OK : mstar_error_set(MSTAR_ENOMEM, "profile: %zu marks", count);
}

static void host_marks_destroy(void *marks, size_t count)
{
    free(marks);
}

static mstar_status host_mark_record(void *marks, size_t i, mstar_stream *s)
{
    ((uint64_t *)marks)[i] = mstar__now_ns();
    return MSTAR_OK;
}

static mstar_status host_mark_elapsed_us(void *marks, size_t a, size_t b, double *out)
{
    const uint64_t *t = marks;
    *out = (double)(t[b] - t[a]) / 1e3;
    return MSTAR_OK;
}

const ref_ops ref_ops_host = {
    .name = "host fp32",
    .act_dtype = MSTAR_DTYPE_FLOAT32,
    /* An embedding lookup is a gather of the table's rows by token id: one launch serves both. */
    .embed = host_gather_rows,
    .ctx_create = host_ctx_create,
    .ctx_destroy = host_ctx_destroy,
    .rmsnorm = host_rmsnorm,
    .silu_add_rmsnorm = host_silu_add_rmsnorm,
    .matmul_nt = host_matmul_nt,
    .matmul_nt_f32 = host_matmul_nt_f32,
    .rope_kv_write = host_rope_kv_write,
    .paged_attention = host_paged_attention,
    .silu_mul = host_silu_mul,
    .gather_rmsnorm = host_gather_rmsnorm,
    .argmax = host_argmax,
    .linear = host_linear,
    .marks_create = host_marks_create,
    .marks_destroy = host_marks_destroy,
    .mark_record = host_mark_record,
    .mark_elapsed_us = host_mark_elapsed_us,
};

mstar_status ref_ops_for(const mstar_backend *backend, const ref_ops **out)
{
    const char *name = mstar_backend_name(backend);
    if (strcmp(name, "host") == 0) {
        *out = &ref_ops_host;
        return MSTAR_OK;
    }
#ifdef MSTAR_REFMODEL_CUDA
    if (strcmp(name, "cuda") == 0) {
        *out = &ref_ops_cuda;
        return MSTAR_OK;
    }
#endif
    return mstar_error_set(MSTAR_ENOTSUP, "reference model: no kernels for the %s backend", name);
}
