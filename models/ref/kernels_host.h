/*
 * kernels_host.h — the reference decode model's fp32 host kernels, one op per function.
 *
 * Each kernel works on raw pointers with explicit sizes, allocates nothing and sums in a fixed
 * order, so the same inputs give the same bits on every run: that is what lets a replayed host
 * graph be compared with the eager forward for exact equality. Matrices are row-major; `ld` is a
 * row stride in elements, for kernels that read one part of a wider row (q, k and v sit side by
 * side in one projection output).
 *
 * KV pages: a layer's K pool (and V pool) is [num_pages][page_size][kv_dim] floats. Token t of a
 * step lives at (token_to_page[t], token_to_cache[t]) — page id and offset inside the page — and
 * a row's page table lists its pages in stream order, `pages_per_row` entries per row. Page 0 is
 * the sink page: padding tokens write there and nobody reads it back.
 *
 * The model's CUDA kernels (cuda/kernels_cuda.h) have the same meaning in bf16 storage.
 */
#ifndef MSTAR_EXAMPLES_KERNELS_HOST_H
#define MSTAR_EXAMPLES_KERNELS_HOST_H

#include <stdbool.h>
#include <stdint.h>

/* out[i, :] = table[tokens[i], :] for i < n; every token must be in [0, vocab). */
void ref_host_embed(const float *table, int64_t dim, const int32_t *tokens, int64_t n, float *out);

/* out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight, for n rows of `dim`. */
void ref_host_rmsnorm(const float *x, const float *weight, int64_t n, int64_t dim, float eps,
                      float *out);

/* out[n, m] = x[n, k] · w[m, k]^T (a linear layer with weight [out_features, in_features]), or
 * out += x · w^T with `accumulate` (a residual connection folded into the layer). */
void ref_host_matmul_nt(const float *x, const float *w, int64_t n, int64_t k, int64_t m,
                        bool accumulate, float *out);

/* Rotary positions in place, rotate-half form: for each of n rows (stride ld), each of `heads`
 * heads of `head_dim` (even) elements, pair i with i + head_dim/2 and rotate the pair by
 * pos[row] * theta^(-2i/head_dim). */
void ref_host_rope(float *x, int64_t ld, const int32_t *pos, int64_t n, int64_t heads,
                   int64_t head_dim, float theta);

/* Scatter n tokens' k and v rows (stride ld, kv_dim elements) into the page pools. */
void ref_host_kv_write(float *k_pages, float *v_pages, int64_t page_size, int64_t kv_dim,
                       const float *k, const float *v, int64_t ld, const int32_t *token_to_page,
                       const int32_t *token_to_cache, int64_t n);

/* Paged causal attention, one query token at a time: token t (query row stride ld_q, `heads` ×
 * head_dim) attends to the first token_kv_len[t] positions of row token_row[t]'s stream, read
 * through that row's page table. A token with kv length 0 (padding) gets zeros. The softmax is
 * the single-pass (running max) form, positions in order. out is [n][heads * head_dim]. */
void ref_host_paged_attention(const float *q, int64_t ld_q, const float *k_pages,
                              const float *v_pages, int64_t page_size, const int32_t *page_table,
                              int64_t pages_per_row, const int32_t *token_row,
                              const int32_t *token_kv_len, int64_t n, int64_t heads,
                              int64_t head_dim, float *out);

/* out[i, j] = silu(gate_up[i, j]) * gate_up[i, f + j] for n rows; gate_up is [n][2f]. */
void ref_host_silu_mul(const float *gate_up, int64_t n, int64_t f, float *out);

/* x[i] += silu(h[i]) for `count` elements (the residual connection of a silu block). */
void ref_host_silu_add(float *x, const float *h, int64_t count);

/* out[i, :] = x[index[i], :] for n rows of `dim`. */
void ref_host_gather_rows(const float *x, int64_t dim, const int32_t *index, int64_t n, float *out);

/* out[i] = the first index of the largest of logits[i, 0:vocab] (greedy sampling). */
void ref_host_argmax(const float *logits, int64_t n, int64_t vocab, int32_t *out);

#endif
