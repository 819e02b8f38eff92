/*
 * kernels_host.c — fp32 host kernels of the reference decode model (see kernels_host.h).
 *
 * Every sum runs in index order with one accumulator per output, however the loops are blocked,
 * so a kernel's result for one row never depends on which other rows share the call: a decode
 * step and a prefill over the same tokens give the same bits, and so do an eager step and its
 * replay.
 */
#include "kernels_host.h"

#include <math.h>
#include <string.h>

/* An embedding lookup is a gather of the table's rows by token id. */
void ref_host_embed(const float *table, int64_t dim, const int32_t *tokens, int64_t n, float *out)
{
    ref_host_gather_rows(table, dim, tokens, n, out);
}

void ref_host_rmsnorm(const float *x, const float *weight, int64_t n, int64_t dim, float eps,
                      float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *row = x + i * dim;
        float ss = 0.0f;
        for (int64_t j = 0; j < dim; j++)
            ss += row[j] * row[j];
        float scale = 1.0f / sqrtf(ss / (float)dim + eps);
        for (int64_t j = 0; j < dim; j++)
            out[i * dim + j] = row[j] * scale * weight[j];
    }
}

/* Four outputs of one row at a time: the x row is read once per four weight rows, and the four
 * independent accumulators keep the FPU busy without reordering any one sum. */
void ref_host_matmul_nt(const float *x, const float *w, int64_t n, int64_t k, int64_t m,
                        bool accumulate, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *xr = x + i * k;
        int64_t j = 0;
        for (; j + 4 <= m; j += 4) {
            const float *w0 = w + j * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                float xv = xr[p];
                a0 += xv * w0[p];
                a1 += xv * w1[p];
                a2 += xv * w2[p];
                a3 += xv * w3[p];
            }
            out[i * m + j] = a0 + (accumulate ? out[i * m + j] : 0.0f);
            out[i * m + j + 1] = a1 + (accumulate ? out[i * m + j + 1] : 0.0f);
            out[i * m + j + 2] = a2 + (accumulate ? out[i * m + j + 2] : 0.0f);
            out[i * m + j + 3] = a3 + (accumulate ? out[i * m + j + 3] : 0.0f);
        }
        for (; j < m; j++) {
            const float *wr = w + j * k;
            float a = 0.0f;
            for (int64_t p = 0; p < k; p++)
                a += xr[p] * wr[p];
            out[i * m + j] = a + (accumulate ? out[i * m + j] : 0.0f);
        }
    }
}

void ref_host_rope(float *x, int64_t ld, const int32_t *pos, int64_t n, int64_t heads,
                   int64_t head_dim, float theta)
{
    int64_t half = head_dim / 2;
    for (int64_t i = 0; i < n; i++) {
        for (int64_t d = 0; d < half; d++) {
            float inv_freq = powf(theta, -2.0f * (float)d / (float)head_dim);
            float angle = (float)pos[i] * inv_freq;
            float c = cosf(angle), s = sinf(angle);
            for (int64_t h = 0; h < heads; h++) {
                float *v = x + i * ld + h * head_dim;
                float x1 = v[d], x2 = v[d + half];
                v[d] = x1 * c - x2 * s;
                v[d + half] = x2 * c + x1 * s;
            }
        }
    }
}

void ref_host_kv_write(float *k_pages, float *v_pages, int64_t page_size, int64_t kv_dim,
                       const float *k, const float *v, int64_t ld, const int32_t *token_to_page,
                       const int32_t *token_to_cache, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t at = ((int64_t)token_to_page[i] * page_size + token_to_cache[i]) * kv_dim;
        memcpy(k_pages + at, k + i * ld, (size_t)kv_dim * sizeof(float));
        memcpy(v_pages + at, v + i * ld, (size_t)kv_dim * sizeof(float));
    }
}

void ref_host_paged_attention(const float *q, int64_t ld_q, const float *k_pages,
                              const float *v_pages, int64_t page_size, const int32_t *page_table,
                              int64_t pages_per_row, const int32_t *token_row,
                              const int32_t *token_kv_len, int64_t n, int64_t heads,
                              int64_t head_dim, float *out)
{
    int64_t kv_dim = heads * head_dim;
    float scale = 1.0f / sqrtf((float)head_dim);
    for (int64_t i = 0; i < n; i++) {
        const int32_t *pages = page_table + (int64_t)token_row[i] * pages_per_row;
        for (int64_t h = 0; h < heads; h++) {
            const float *qv = q + i * ld_q + h * head_dim;
            float *acc = out + i * kv_dim + h * head_dim;
            memset(acc, 0, (size_t)head_dim * sizeof(float));
            float run_max = -INFINITY, denom = 0.0f;
            for (int64_t p = 0; p < token_kv_len[i]; p++) {
                int64_t at = ((int64_t)pages[p / page_size] * page_size + p % page_size) * kv_dim +
                             h * head_dim;
                const float *kv = k_pages + at, *vv = v_pages + at;
                float s = 0.0f;
                for (int64_t d = 0; d < head_dim; d++)
                    s += qv[d] * kv[d];
                s *= scale;
                float new_max = s > run_max ? s : run_max;
                float correction = expf(run_max - new_max);
                float weight = expf(s - new_max);
                denom = denom * correction + weight;
                for (int64_t d = 0; d < head_dim; d++)
                    acc[d] = acc[d] * correction + weight * vv[d];
                run_max = new_max;
            }
            if (denom > 0.0f) {
                for (int64_t d = 0; d < head_dim; d++)
                    acc[d] /= denom;
            }
        }
    }
}

void ref_host_silu_mul(const float *gate_up, int64_t n, int64_t f, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *g = gate_up + i * 2 * f, *u = g + f;
        for (int64_t j = 0; j < f; j++)
            out[i * f + j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
}

void ref_host_silu_add(float *x, const float *h, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] += h[i] / (1.0f + expf(-h[i]));
}

void ref_host_gather_rows(const float *x, int64_t dim, const int32_t *index, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(out + i * dim, x + (int64_t)index[i] * dim, (size_t)dim * sizeof(float));
}

void ref_host_argmax(const float *logits, int64_t n, int64_t vocab, int32_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *row = logits + i * vocab;
        int64_t best = 0;
        for (int64_t j = 1; j < vocab; j++) {
            if (row[j] > row[best])
                best = j;
        }
        out[i] = (int32_t)best;
    }
}
