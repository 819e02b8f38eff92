/*
 * demo_codebook.c — encoder states to token ids (see demo_codebook.h): logits = states ·
 * embedding^T, then argmax, on the reference model's kernels.
 */
#include "demo_codebook.h"

#include "demo_weights.h"
#include "ref_ops.h"

#include <stdlib.h>

struct demo_codebook {
    mstar_backend *backend;
    const ref_ops *ops;
    ref_ops_ctx *ctx; /* the kernels' state (cuBLAS on CUDA), made once */
    int32_t vocab, hidden;
    void *table; /* device: [vocab, hidden] */
};

mstar_status demo_codebook_create(mstar_backend *backend, const ref_model_config *model,
                                  demo_codebook **out)
{
    demo_codebook *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "codebook");
    c->backend = backend;
    c->vocab = model->vocab;
    c->hidden = model->hidden;
    ref_weight_layout layout = { 0 };
    mstar_status st = ref_ops_for(backend, &c->ops);
    if (st == MSTAR_OK)
        st = ref_weight_layout_init(&layout, model);
    if (st == MSTAR_OK) {
        demo_range embed = { layout.embed, (size_t)c->vocab * (size_t)c->hidden };
        st = demo_weights_upload(backend, c->ops->act_dtype, model, &embed, 1, &c->table, NULL);
    }
    ref_weight_layout_free(&layout);
    if (st == MSTAR_OK)
        st = c->ops->ctx_create(backend, 0, &c->ctx);
    if (st != MSTAR_OK) {
        demo_codebook_destroy(c);
        return mstar_error_wrap("codebook");
    }
    *out = c;
    return MSTAR_OK;
}

void demo_codebook_destroy(demo_codebook *c)
{
    if (c == NULL)
        return;
    if (c->ops != NULL)
        c->ops->ctx_destroy(c->ctx);
    if (c->table != NULL)
        mstar_device_free(c->backend, c->table);
    free(c);
}

mstar_status demo_codebook_lookup(demo_codebook *c, mstar_stream *s, const mstar_tensor *states,
                                  int32_t *tokens)
{
    int64_t n = states->ndim == 2 ? states->shape[0] : -1, h = c->hidden, v = c->vocab;
    if (states->dtype != c->ops->act_dtype || n < 1 || states->shape[1] != h ||
        !mstar_tensor_is_contiguous(states))
        return mstar_error_set(MSTAR_EPROTO,
                               "codebook: encoder states must be contiguous %s [n >= 1, %lld], got "
                               "%s with %d dims",
                               mstar_dtype_name(c->ops->act_dtype), (long long)h,
                               mstar_dtype_name(states->dtype), states->ndim);
    float *logits = NULL;
    int32_t *ids = NULL;
    mstar_status st = mstar_alloc(s, (size_t)(n * v) * sizeof(float), (void **)&logits);
    if (st == MSTAR_OK)
        st = mstar_alloc(s, (size_t)n * sizeof(int32_t), (void **)&ids);
    if (st == MSTAR_OK)
        st = c->ops->matmul_nt_f32(c->ctx, s, mstar_tensor_ptr(states), c->table, n, h, v, logits);
    if (st == MSTAR_OK)
        st = c->ops->argmax(s, logits, n, v, ids);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(s, tokens, ids, (size_t)n * sizeof(int32_t), MSTAR_MEMCPY_D2H);
    mstar_status sync = mstar_stream_synchronize(s);
    st = st != MSTAR_OK ? st : sync;
    if (ids != NULL)
        mstar_free(s, ids);
    if (logits != NULL)
        mstar_free(s, logits);
    return st != MSTAR_OK ? mstar_error_wrap("codebook lookup of %lld states", (long long)n)
                          : MSTAR_OK;
}
