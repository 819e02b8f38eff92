/*
 * mlp_model.c — the mlp bench model (see mlp_model.h): its weights and its forward through the
 * backend's kernel table (ref_ops.h), so the same code runs bf16 on CUDA and fp32 on the host.
 */
#include "mlp_model.h"

#include "ref_model.h"
#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>

/* Layers of up to 8 rows run as one kernel each, more on cuBLAS. On the H200 the one-kernel
 * layer made a step of 8 x 1024 take 28.9 us at 1 row and 43.3 at 8 (cuBLAS: 83.9 and 55.7),
 * but 89.4 at 32 rows and 165.0 at 64 (cuBLAS: 56.8 and 57.0): each block recomputes its rows'
 * norm and reads its weights once per 8 rows. */
#define MLP_LINEAR_ROWS 8

struct ref_mlp {
    ref_mlp_config cfg;
    mstar_backend *backend;
    const ref_ops *ops;
    ref_ops_ctx *ctx;
    ref_profile *profile;
    size_t elsize;
    char *weights; /* device: norms [L][D], then matrices [L][D][D] */
};

ref_mlp_config ref_mlp_config_default(void)
{
    return (ref_mlp_config){ .layers = 8, .hidden = 1024, .norm_eps = 1e-5f, .seed = 7 };
}

void ref_mlp_init_weights(const ref_mlp_config *cfg, float *norm, float *w)
{
    size_t l = (size_t)cfg->layers, d = (size_t)cfg->hidden;
    uint64_t rng = cfg->seed;
    ref_fill_uniform(norm, l * d, 1.0f, 0.1f, &rng);
    ref_fill_uniform(w, l * d * d, 0.0f, 1.0f / sqrtf((float)d), &rng);
}

/* Weights in the kernels' dtype, copied to the device. */
static mstar_status upload(ref_mlp *m, size_t count)
{
    size_t l = (size_t)m->cfg.layers, d = (size_t)m->cfg.hidden;
    float *host = malloc(count * sizeof(float));
    if (host == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp model: %zu host weights", count);
    ref_mlp_init_weights(&m->cfg, host, host + l * d);
    mstar_stream *s;
    mstar_status st = mstar_stream_create(m->backend, MSTAR_STREAM_NON_BLOCKING, &s);
    if (st == MSTAR_OK) {
        st = ref_upload_f32(s, m->weights, host, count, m->ops->act_dtype);
        mstar_stream_destroy(s);
    }
    free(host);
    return st;
}

mstar_status ref_mlp_create(const ref_mlp_config *cfg, mstar_backend *backend, ref_mlp **out)
{
    if (cfg == NULL || cfg->layers < 1 || cfg->layers > 1024 || cfg->hidden < 1 ||
        cfg->hidden > 65536)
        return mstar_error_set(MSTAR_EINVAL, "mlp model: layers must be in [1, 1024] and hidden "
                                             "in [1, 65536]");
    const ref_ops *ops;
    mstar_status st = ref_ops_for(backend, &ops);
    if (st != MSTAR_OK)
        return st;
    ref_mlp *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mlp model");
    m->cfg = *cfg;
    m->backend = backend;
    m->ops = ops;
    m->elsize = mstar_dtype_size(ops->act_dtype);
    /* At most 1024 * (65536 + 65536^2) elements: far from overflowing size_t. */
    size_t d = (size_t)cfg->hidden, count = (size_t)cfg->layers * (d + d * d);
    st = mstar_device_alloc(backend, count * m->elsize, (void **)&m->weights);
    if (st == MSTAR_OK)
        st = upload(m, count);
    if (st == MSTAR_OK)
        st = ops->ctx_create(backend, MLP_LINEAR_ROWS, &m->ctx);
    if (st != MSTAR_OK) {
        ref_mlp_destroy(m);
        return mstar_error_wrap("mlp model");
    }
    *out = m;
    return MSTAR_OK;
}

void ref_mlp_destroy(ref_mlp *m)
{
    if (m == NULL)
        return;
    m->ops->ctx_destroy(m->ctx);
    if (m->weights != NULL)
        mstar_device_free(m->backend, m->weights);
    free(m);
}

mstar_dtype ref_mlp_dtype(const ref_mlp *m)
{
    return m->ops->act_dtype;
}

const ref_mlp_config *ref_mlp_config_of(const ref_mlp *m)
{
    return &m->cfg;
}

void ref_mlp_set_profile(ref_mlp *m, ref_profile *profile)
{
    m->profile = profile;
}

/* Layer l's norm weight and matrix. */
static const void *norm_of(const ref_mlp *m, int32_t l)
{
    return m->weights + (size_t)l * (size_t)m->cfg.hidden * m->elsize;
}

static const void *matrix_of(const ref_mlp *m, int32_t l)
{
    size_t d = (size_t)m->cfg.hidden;
    return m->weights + ((size_t)m->cfg.layers * d + (size_t)l * d * d) * m->elsize;
}

/* Layer l: out = in + silu(W · rmsnorm(in)), one kernel on CUDA for a decode step's rows. The
 * layers alternate between y and tmp (ending in y) so that no layer writes the rows it reads:
 * many blocks read each input row while others write the output. normed and acc are the
 * unfused path's scratch (the host, or cuBLAS for many rows). */
static mstar_status run(ref_mlp *m, mstar_stream *s, const void *x, int64_t n, void *y, void *tmp,
                        void *normed, void *acc)
{
    int64_t d = m->cfg.hidden;
    const void *in = x;
    for (int32_t l = 0; l < m->cfg.layers; l++) {
        void *out = (m->cfg.layers - 1 - l) % 2 == 0 ? y : tmp;
        ref_linear layer = { .x = in,
                             .norm = norm_of(m, l),
                             .eps = m->cfg.norm_eps,
                             .w = matrix_of(m, l),
                             .n = n,
                             .k = d,
                             .m = d,
                             .epilogue = REF_EPI_SILU_ADD,
                             .residual = in,
                             .out = out,
                             .norm_scratch = normed,
                             .acc_scratch = acc };
        mstar_status st = ref_profile_op_begin(m->profile, s, "rmsnorm+linear+silu+residual");
        if (st == MSTAR_OK)
            st = m->ops->linear(m->ctx, s, &layer);
        if (st == MSTAR_OK)
            st = ref_profile_op_end(m->profile, s);
        if (st != MSTAR_OK)
            return st;
        in = out;
    }
    return MSTAR_OK;
}

mstar_status ref_mlp_forward(ref_mlp *m, mstar_stream *s, const void *x, int64_t n, void *y)
{
    if (n < 0 || x == y)
        return mstar_error_set(MSTAR_EINVAL, "mlp forward: %lld rows%s", (long long)n,
                               x == y ? ", y is x" : "");
    if (n == 0)
        return MSTAR_OK;
    size_t bytes = (size_t)n * (size_t)m->cfg.hidden * m->elsize;
    void *buf[3] = { NULL, NULL, NULL }; /* tmp, normed, acc */
    mstar_status st = MSTAR_OK;
    for (int i = 0; st == MSTAR_OK && i < 3; i++)
        st = mstar_alloc(s, bytes, &buf[i]);
    if (st == MSTAR_OK)
        st = run(m, s, x, n, y, buf[0], buf[1], buf[2]);
    for (int i = 2; i >= 0; i--)
        if (buf[i] != NULL)
            mstar_free(s, buf[i]);
    return st;
}
