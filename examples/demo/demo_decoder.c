/*
 * demo_decoder.c — the decoder's model side (see demo_decoder.h).
 */
#include "demo_decoder.h"

#include "demo_weights.h"
#include "ref_eager.h"
#include "ref_ops.h"

#include <stdlib.h>
#include <string.h>

struct demo_decoder {
    mstar_backend *backend;
    const ref_ops *ops;
    ref_model_config model;
    mstar_kv_cache_config kv;
    ref_eager *eager;
    void *codebook; /* device: the model's embedding table [vocab, hidden] */
    demo_sizes decode_sizes, prefill_sizes, prefill_tokens;
};

mstar_status demo_decoder_create(mstar_backend *backend, const demo_config *cfg, demo_decoder **out)
{
    demo_decoder *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "decoder");
    d->backend = backend;
    d->model = cfg->model;
    d->kv = (mstar_kv_cache_config){ .num_pages = cfg->kv_pages,
                                     .page_size = cfg->page_size,
                                     .num_labels = 1,
                                     .max_seq_len = cfg->prompt_max + cfg->output_max };
    d->decode_sizes = cfg->decode_batch_sizes;
    d->prefill_sizes = cfg->prefill_batch_sizes;
    d->prefill_tokens = cfg->prefill_token_lengths;
    ref_weight_layout layout = { 0 };
    mstar_status st = ref_ops_for(backend, &d->ops);
    if (st == MSTAR_OK)
        st = ref_eager_create(&d->model, &d->kv, backend, &d->eager);
    if (st == MSTAR_OK)
        st = ref_weight_layout_init(&layout, &d->model);
    if (st == MSTAR_OK) {
        demo_range embed = { layout.embed, (size_t)d->model.vocab * (size_t)d->model.hidden };
        st = demo_weights_upload(backend, d->ops->act_dtype, &d->model, &embed, 1, &d->codebook,
                                 NULL);
    }
    ref_weight_layout_free(&layout);
    if (st != MSTAR_OK) {
        demo_decoder_destroy(d);
        return mstar_error_wrap("decoder");
    }
    *out = d;
    return MSTAR_OK;
}

void demo_decoder_destroy(demo_decoder *d)
{
    if (d == NULL)
        return;
    ref_eager_destroy(d->eager);
    if (d->codebook != NULL)
        mstar_device_free(d->backend, d->codebook);
    free(d);
}

bool demo_decoder_graphs(const demo_decoder *d)
{
    return false;
}

mstar_status demo_decoder_codebook(demo_decoder *d, const mstar_tensor *states, int32_t *tokens)
{
    int64_t n = states->ndim == 2 ? states->shape[0] : -1, h = d->model.hidden;
    if (states->dtype != d->ops->act_dtype || n < 1 || states->shape[1] != h ||
        !mstar_tensor_is_contiguous(states))
        return mstar_error_set(MSTAR_EPROTO,
                               "decoder: encoder states must be contiguous %s [n >= 1, %lld], got "
                               "%s with %d dims",
                               mstar_dtype_name(d->ops->act_dtype), (long long)h,
                               mstar_dtype_name(states->dtype), states->ndim);
    mstar_stream *s = ref_eager_stream(d->eager);
    int64_t v = d->model.vocab;
    float *logits = NULL;
    int32_t *ids = NULL;
    mstar_status st = mstar_alloc(s, (size_t)(n * v) * sizeof(float), (void **)&logits);
    if (st == MSTAR_OK)
        st = mstar_alloc(s, (size_t)n * sizeof(int32_t), (void **)&ids);
    if (st == MSTAR_OK)
        st = d->ops->matmul_nt_f32(s, mstar_tensor_ptr(states), d->codebook, n, h, v, logits);
    if (st == MSTAR_OK)
        st = d->ops->argmax(s, logits, n, v, ids);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(s, tokens, ids, (size_t)n * sizeof(int32_t), MSTAR_MEMCPY_D2H);
    mstar_status sync = mstar_stream_synchronize(s);
    st = st != MSTAR_OK ? st : sync;
    if (ids != NULL)
        mstar_free(s, ids);
    if (logits != NULL)
        mstar_free(s, logits);
    return st != MSTAR_OK ? mstar_error_wrap("decoder codebook lookup of %lld states", (long long)n)
                          : MSTAR_OK;
}

mstar_status demo_decoder_open(demo_decoder *d, int64_t handle)
{
    return ref_eager_open(d->eager, handle);
}

mstar_status demo_decoder_close(demo_decoder *d, int64_t handle)
{
    return ref_eager_close(d->eager, handle);
}

int32_t demo_decoder_pages_for(const demo_decoder *d, int64_t tokens)
{
    return (int32_t)((tokens + d->kv.page_size - 1) / d->kv.page_size);
}

int32_t demo_decoder_total_pages(const demo_decoder *d)
{
    return d->kv.num_pages - 1; /* the sink page holds no request */
}

mstar_status demo_decoder_step(demo_decoder *d, bool prefill, const int64_t *rows,
                               const int32_t *spans, int32_t n, const int32_t *tokens,
                               int32_t *next, demo_step_info *info)
{
    double t0 = demo_now();
    int64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += spans[i];
    memset(info, 0, sizeof(*info));
    if (prefill)
        demo_bucket_fit(&d->prefill_sizes, &d->prefill_tokens, n, total, &info->bs, &info->tokens);
    else
        demo_bucket_fit(&d->decode_sizes, NULL, n, n, &info->bs, &info->tokens);
    mstar_status st = ref_eager_step(d->eager, rows, spans, n, tokens, NULL, next);
    if (st != MSTAR_OK)
        return mstar_error_wrap("decoder %s step of %d rows", prefill ? "prefill" : "decode", n);
    info->rows = n;
    info->real_tokens = total;
    info->seconds = demo_now() - t0;
    return MSTAR_OK;
}
