/*
 * ref_linear.c — a fused linear layer (ref_ops.h: ref_linear) run as the kernel table's separate
 * ops: the gather and norm of its input rows, the GEMM, then the epilogue's kernel. This is the
 * host backend's whole implementation (its fp32 results are those of the model before the layer
 * was fused, bit for bit) and the CUDA backend's cuBLAS path, for many rows or when its one-kernel
 * path is switched off.
 */
#include "ref_ops.h"

#include <stdint.h>

mstar_status ref_linear_check(const ref_linear *l)
{
    const char *why = NULL;
    if (l->n < 0 || l->k < 1 || l->m < 1)
        why = "sizes must be n >= 0, k >= 1, m >= 1";
    else if (l->x == NULL || l->w == NULL || l->out == NULL)
        why = "x, w and out are required";
    else if (l->out == l->x)
        why = "out may not be x";
    else if (l->out_f32 && l->epilogue != REF_EPI_STORE)
        why = "a float32 out is a plain store";
    else if ((l->epilogue == REF_EPI_ADD || l->epilogue == REF_EPI_SILU_ADD) && l->residual == NULL)
        why = "a residual epilogue needs the residual";
    else if (l->epilogue == REF_EPI_ADD && l->residual != l->out && l->residual_rows == NULL)
        why = "an added residual is out itself or gathered rows";
    else if (l->epilogue == REF_EPI_SILU_ADD && (l->residual == l->out || l->residual_rows != NULL))
        why = "a silu residual is rows of its own, not out";
    else if (l->epilogue == REF_EPI_GATED && l->m % 2 != 0)
        why = "a gated epilogue needs an even m";
    else if (l->epilogue == REF_EPI_ROPE_KV &&
             (l->rope.heads < 1 || l->rope.head_dim < 2 || l->rope.head_dim % 2 != 0 ||
              l->rope.head_dim > INT64_MAX / 3 / l->rope.heads ||
              l->m != 3 * l->rope.heads * l->rope.head_dim))
        why = "a rope epilogue needs its arguments, an even head_dim and m = 3 * heads * head_dim";
    else if (l->epilogue > REF_EPI_ROPE_KV)
        why = "unknown epilogue";
    if (why == NULL)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EINVAL, "linear %lld x %lld -> %lld: %s", (long long)l->n,
                           (long long)l->k, (long long)l->m, why);
}

/* x' of the layer: x itself, or its gathered and/or normalized rows in norm_scratch. */
static mstar_status prologue(const ref_ops *op, mstar_stream *s, const ref_linear *l,
                             const void **in)
{
    *in = l->x;
    if (l->norm == NULL && l->x_rows == NULL)
        return MSTAR_OK;
    if (l->norm_scratch == NULL)
        return mstar_error_set(MSTAR_EINVAL, "linear: a norm or gather needs norm_scratch");
    *in = l->norm_scratch;
    if (l->norm == NULL)
        return op->embed(s, l->x, l->k, l->x_rows, l->n, l->norm_scratch);
    if (l->x_rows != NULL)
        return op->gather_rmsnorm(s, l->x, l->x_rows, l->norm, l->n, l->k, l->eps, NULL,
                                  l->norm_scratch);
    return op->rmsnorm(s, l->x, l->norm, l->n, l->k, l->eps, l->norm_scratch);
}

mstar_status ref_linear_unfused(const ref_ops *op, ref_ops_ctx *ctx, mstar_stream *s,
                                const ref_linear *l)
{
    mstar_status st = ref_linear_check(l);
    if (st != MSTAR_OK || l->n == 0)
        return st;
    const void *in;
    if ((st = prologue(op, s, l, &in)) != MSTAR_OK)
        return st;
    int64_t n = l->n, k = l->k, m = l->m;
    switch (l->epilogue) {
    case REF_EPI_STORE:
        return l->out_f32 ? op->matmul_nt_f32(ctx, s, in, l->w, n, k, m, l->out)
                          : op->matmul_nt(ctx, s, in, l->w, n, k, m, false, l->out);
    case REF_EPI_ROPE_KV: {
        const ref_rope_kv *r = &l->rope;
        if ((st = op->matmul_nt(ctx, s, in, l->w, n, k, m, false, l->out)) != MSTAR_OK)
            return st;
        return op->rope_kv_write(s, l->out, m, r->pos, n, r->heads, r->head_dim, r->theta,
                                 r->k_pages, r->v_pages, r->page_size, r->token_to_page,
                                 r->token_to_cache);
    }
    case REF_EPI_ADD:
        /* Gathered residual rows are copied into out first, then the GEMM adds onto them. */
        if (l->residual_rows != NULL &&
            (st = op->embed(s, l->residual, m, l->residual_rows, n, l->out)) != MSTAR_OK)
            return st;
        return op->matmul_nt(ctx, s, in, l->w, n, k, m, true, l->out);
    default:
        break;
    }
    if (l->acc_scratch == NULL)
        return mstar_error_set(MSTAR_EINVAL, "linear: a silu epilogue needs acc_scratch");
    if ((st = op->matmul_nt(ctx, s, in, l->w, n, k, m, false, l->acc_scratch)) != MSTAR_OK)
        return st;
    if (l->epilogue == REF_EPI_GATED)
        return op->silu_mul(s, l->acc_scratch, n, m / 2, l->out);
    return op->silu_add_rmsnorm(s, l->residual, l->acc_scratch, l->out, NULL, n, m, 0.0f, NULL);
}
