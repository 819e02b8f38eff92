/*
 * ops_host.c — the host backend's ref_ops: each entry packs its arguments into a struct and
 * enqueues the fp32 host kernel with mstar_launch, which runs it now (eager) or records it for
 * every replay (capture). Also ref_ops_for, which picks a backend's table.
 */
#include "ref_ops.h"

#include "kernels_host.h"

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

typedef struct matmul_args {
    const float *x, *w;
    int64_t n, k, m;
    float *out;
} matmul_args;

static void matmul_fn(void *p)
{
    matmul_args *a = p;
    ref_host_matmul_nt(a->x, a->w, a->n, a->k, a->m, a->out);
}

static mstar_status host_matmul_nt(mstar_stream *s, const void *x, const void *w, int64_t n,
                                   int64_t k, int64_t m, void *out)
{
    matmul_args a = { x, w, n, k, m, out };
    return mstar_launch(s, matmul_fn, &a, sizeof(a));
}

static mstar_status host_matmul_nt_f32(mstar_stream *s, const void *x, const void *w, int64_t n,
                                       int64_t k, int64_t m, float *out)
{
    return host_matmul_nt(s, x, w, n, k, m, out);
}

typedef struct rope_args {
    float *x;
    int64_t ld;
    const int32_t *pos;
    int64_t n, heads, head_dim;
    float theta;
} rope_args;

static void rope_fn(void *p)
{
    rope_args *a = p;
    ref_host_rope(a->x, a->ld, a->pos, a->n, a->heads, a->head_dim, a->theta);
}

static mstar_status host_rope(mstar_stream *s, void *x, int64_t ld, const int32_t *pos, int64_t n,
                              int64_t heads, int64_t head_dim, float theta)
{
    rope_args a = { x, ld, pos, n, heads, head_dim, theta };
    return mstar_launch(s, rope_fn, &a, sizeof(a));
}

typedef struct kv_write_args {
    float *k_pages, *v_pages;
    int64_t page_size, kv_dim;
    const float *k, *v;
    int64_t ld;
    const int32_t *token_to_page, *token_to_cache;
    int64_t n;
} kv_write_args;

static void kv_write_fn(void *p)
{
    kv_write_args *a = p;
    ref_host_kv_write(a->k_pages, a->v_pages, a->page_size, a->kv_dim, a->k, a->v, a->ld,
                      a->token_to_page, a->token_to_cache, a->n);
}

static mstar_status host_kv_write(mstar_stream *s, void *k_pages, void *v_pages, int64_t page_size,
                                  int64_t kv_dim, const void *k, const void *v, int64_t ld,
                                  const int32_t *token_to_page, const int32_t *token_to_cache,
                                  int64_t n)
{
    kv_write_args a = { k_pages, v_pages, page_size,     kv_dim,         k,
                        v,       ld,      token_to_page, token_to_cache, n };
    return mstar_launch(s, kv_write_fn, &a, sizeof(a));
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

typedef struct add_args {
    float *x;
    const float *y;
    int64_t count;
} add_args;

static void add_fn(void *p)
{
    add_args *a = p;
    ref_host_add(a->x, a->y, a->count);
}

static mstar_status host_add(mstar_stream *s, void *x, const void *y, int64_t count)
{
    add_args a = { x, y, count };
    return mstar_launch(s, add_fn, &a, sizeof(a));
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

const ref_ops ref_ops_host = {
    .name = "host fp32",
    .act_dtype = MSTAR_DTYPE_FLOAT32,
    /* An embedding lookup is a gather of the table's rows by token id: one launch serves both. */
    .embed = host_gather_rows,
    .rmsnorm = host_rmsnorm,
    .matmul_nt = host_matmul_nt,
    .matmul_nt_f32 = host_matmul_nt_f32,
    .rope = host_rope,
    .kv_write = host_kv_write,
    .paged_attention = host_paged_attention,
    .silu_mul = host_silu_mul,
    .add = host_add,
    .gather_rows = host_gather_rows,
    .argmax = host_argmax,
};

mstar_status ref_ops_for(const mstar_backend *backend, const ref_ops **out)
{
    const char *name = mstar_backend_name(backend);
    if (strcmp(name, "host") == 0) {
        *out = &ref_ops_host;
        return MSTAR_OK;
    }
#ifdef MSTAR_HAVE_CUDA
    if (strcmp(name, "cuda") == 0) {
        *out = &ref_ops_cuda;
        return MSTAR_OK;
    }
#endif
    return mstar_error_set(MSTAR_ENOTSUP, "reference model: no kernels for the %s backend", name);
}
