/*
 * kernels_cuda.cu — the reference model's CUDA kernels: bf16 storage, fp32 arithmetic (see
 * kernels_cuda.h for the contract and kernels_host.h for what each computes).
 *
 * They are kept simple on purpose — this model is a correctness vehicle for capture and replay,
 * not a fast transformer: a warp per output column and four rows for the matmul, a warp per
 * (token, head) for attention with a single-pass softmax, a block per row for norms and argmax.
 * Reductions go through fixed butterfly/tree orders and nothing uses atomics, so results are
 * deterministic. No library handles (cuBLAS and the like) are involved, so nothing is created
 * lazily inside a capture.
 */
#include "kernels_cuda.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

typedef __nv_bfloat16 bf16;

namespace
{

constexpr int kBlock = 256;   /* threads of the row-per-block kernels */
constexpr int kWarps = 4;     /* warps per block of the warp-per-item kernels */
constexpr int kRows = 4;      /* rows a matmul warp computes for its column */
constexpr int kMaxChunks = 8; /* head_dim <= 32 * kMaxChunks */

__device__ __forceinline__ float to_f(bf16 v)
{
    return __bfloat162float(v);
}

__device__ __forceinline__ bf16 to_b(float v)
{
    return __float2bfloat16_rn(v);
}

/* Every lane gets the sum, added in the same butterfly order every time. */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A block of kBlock threads sums v; every thread gets the result. */
__device__ float block_sum(float v)
{
    __shared__ float part[kBlock / 32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    float total = lane < kBlock / 32 ? part[lane] : 0.0f;
    total = warp_sum(total);
    __syncthreads(); /* part[] may be reused by a later call */
    return total;
}

__global__ void embed_kernel(const bf16 *table, int64_t dim, const int32_t *tokens, bf16 *out)
{
    int64_t i = blockIdx.x;
    const bf16 *src = table + (int64_t)tokens[i] * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        out[i * dim + j] = src[j];
}

__global__ void rmsnorm_kernel(const bf16 *x, const bf16 *w, int64_t dim, float eps, bf16 *out)
{
    int64_t i = blockIdx.x;
    const bf16 *row = x + i * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = to_f(row[j]);
        ss += v * v;
    }
    ss = block_sum(ss);
    float scale = rsqrtf(ss / (float)dim + eps);
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        out[i * dim + j] = to_b(to_f(row[j]) * scale * to_f(w[j]));
}

template <typename Out> __device__ __forceinline__ Out store_as(float v);
template <> __device__ __forceinline__ float store_as<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ bf16 store_as<bf16>(float v)
{
    return to_b(v);
}

/* Warp w computes column j = w % m for rows [4 * (w / m), +4): the weight row is read once for
 * four rows, and each output's sum has the same order whatever n is. */
template <typename Out>
__global__ void matmul_nt_kernel(const bf16 *x, const bf16 *w, int64_t n, int64_t k, int64_t m,
                                 Out *out)
{
    int64_t warp = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int64_t groups = (n + kRows - 1) / kRows;
    if (warp >= groups * m)
        return;
    int64_t j = warp % m, i0 = (warp / m) * kRows;
    int rows = (int)(n - i0 < kRows ? n - i0 : kRows);
    const bf16 *wr = w + j * k;
    float acc[kRows] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int64_t p = lane; p < k; p += 32) {
        float wv = to_f(wr[p]);
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            if (r < rows)
                acc[r] += to_f(x[(i0 + r) * k + p]) * wv;
        }
    }
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        float s = warp_sum(acc[r]);
        if (r < rows && lane == 0)
            out[(i0 + r) * m + j] = store_as<Out>(s);
    }
}

__global__ void rope_kernel(bf16 *x, int64_t ld, const int32_t *pos, int64_t n, int64_t heads,
                            int64_t head_dim, float theta)
{
    int64_t half = head_dim / 2;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * heads * half)
        return;
    int64_t d = idx % half, h = (idx / half) % heads, i = idx / (half * heads);
    float inv_freq = powf(theta, -2.0f * (float)d / (float)head_dim);
    float s, c;
    sincosf((float)pos[i] * inv_freq, &s, &c);
    bf16 *v = x + i * ld + h * head_dim;
    float x1 = to_f(v[d]), x2 = to_f(v[d + half]);
    v[d] = to_b(x1 * c - x2 * s);
    v[d + half] = to_b(x2 * c + x1 * s);
}

__global__ void kv_write_kernel(bf16 *kp, bf16 *vp, int64_t page_size, int64_t kv_dim,
                                const bf16 *k, const bf16 *v, int64_t ld, const int32_t *t2p,
                                const int32_t *t2c, int64_t n)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * kv_dim)
        return;
    int64_t i = idx / kv_dim, e = idx % kv_dim;
    int64_t at = ((int64_t)t2p[i] * page_size + t2c[i]) * kv_dim + e;
    kp[at] = k[i * ld + e];
    vp[at] = v[i * ld + e];
}

/* One warp per (token, head); lane l holds elements l, l + 32, ... of q and of the output. */
__global__ void paged_attention_kernel(const bf16 *q, int64_t ld_q, const bf16 *kp, const bf16 *vp,
                                       int64_t page_size, const int32_t *page_table,
                                       int64_t pages_per_row, const int32_t *token_row,
                                       const int32_t *token_kv_len, int64_t n, int64_t heads,
                                       int64_t head_dim, bf16 *out)
{
    int64_t warp = (int64_t)blockIdx.x * kWarps + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (warp >= n * heads)
        return;
    int64_t i = warp / heads, h = warp % heads, kv_dim = heads * head_dim;
    const bf16 *qv = q + i * ld_q + h * head_dim;
    const int32_t *pages = page_table + (int64_t)token_row[i] * pages_per_row;
    float qr[kMaxChunks], acc[kMaxChunks];
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++) {
        int64_t e = lane + 32 * c;
        qr[c] = e < head_dim ? to_f(qv[e]) : 0.0f;
        acc[c] = 0.0f;
    }
    float scale = rsqrtf((float)head_dim);
    float run_max = -INFINITY, denom = 0.0f;
    int32_t len = token_kv_len[i];
    for (int32_t p = 0; p < len; p++) {
        int64_t base =
            ((int64_t)pages[p / page_size] * page_size + p % page_size) * kv_dim + h * head_dim;
        float part = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxChunks; c++) {
            int64_t e = lane + 32 * c;
            if (e < head_dim)
                part += qr[c] * to_f(kp[base + e]);
        }
        float s = warp_sum(part) * scale;
        float new_max = fmaxf(run_max, s);
        float correction = expf(run_max - new_max);
        float weight = expf(s - new_max);
        denom = denom * correction + weight;
#pragma unroll
        for (int c = 0; c < kMaxChunks; c++) {
            int64_t e = lane + 32 * c;
            if (e < head_dim)
                acc[c] = acc[c] * correction + weight * to_f(vp[base + e]);
        }
        run_max = new_max;
    }
    bf16 *o = out + i * kv_dim + h * head_dim;
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++) {
        int64_t e = lane + 32 * c;
        if (e < head_dim)
            o[e] = to_b(denom > 0.0f ? acc[c] / denom : 0.0f);
    }
}

__global__ void silu_mul_kernel(const bf16 *gate_up, int64_t n, int64_t f, bf16 *out)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * f)
        return;
    int64_t i = idx / f, j = idx % f;
    float g = to_f(gate_up[i * 2 * f + j]), u = to_f(gate_up[i * 2 * f + f + j]);
    out[idx] = to_b(g / (1.0f + expf(-g)) * u);
}

__global__ void add_kernel(bf16 *x, const bf16 *y, int64_t count)
{
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < count)
        x[idx] = to_b(to_f(x[idx]) + to_f(y[idx]));
}

__global__ void gather_rows_kernel(const bf16 *x, int64_t dim, const int32_t *index, bf16 *out)
{
    int64_t i = blockIdx.x;
    const bf16 *src = x + (int64_t)index[i] * dim;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        out[i * dim + j] = src[j];
}

/* Block per row: each thread keeps its best (value, index), then a tree keeps the larger value,
 * the lower index on a tie — the first maximum, as on the host. */
__global__ void argmax_kernel(const float *logits, int64_t vocab, int32_t *out)
{
    __shared__ float best_v[kBlock];
    __shared__ int32_t best_i[kBlock];
    const float *row = logits + (int64_t)blockIdx.x * vocab;
    float bv = -INFINITY;
    int32_t bi = INT32_MAX; /* a thread past the row's end never wins a tie */
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        if (bi == INT32_MAX || row[j] > bv) {
            bv = row[j];
            bi = (int32_t)j;
        }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float ov = best_v[threadIdx.x + stride];
            int32_t oi = best_i[threadIdx.x + stride];
            float mv = best_v[threadIdx.x];
            int32_t mi = best_i[threadIdx.x];
            if (ov > mv || (ov == mv && oi < mi)) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = best_i[0];
}

int64_t blocks_for(int64_t items, int64_t per_block)
{
    return (items + per_block - 1) / per_block;
}

int launched(void)
{
    return (int)cudaGetLastError();
}

} // namespace

extern "C" {

int ref_cuda_embed(void *stream, const void *table, int64_t dim, const int32_t *tokens, int64_t n,
                   void *out)
{
    if (n == 0)
        return 0;
    embed_kernel<<<(unsigned)n, kBlock, 0, (cudaStream_t)stream>>>((const bf16 *)table, dim, tokens,
                                                                   (bf16 *)out);
    return launched();
}

int ref_cuda_rmsnorm(void *stream, const void *x, const void *weight, int64_t n, int64_t dim,
                     float eps, void *out)
{
    if (n == 0)
        return 0;
    rmsnorm_kernel<<<(unsigned)n, kBlock, 0, (cudaStream_t)stream>>>(
        (const bf16 *)x, (const bf16 *)weight, dim, eps, (bf16 *)out);
    return launched();
}

int ref_cuda_matmul_nt(void *stream, const void *x, const void *w, int64_t n, int64_t k, int64_t m,
                       void *out, int out_f32)
{
    if (n == 0 || m == 0)
        return 0;
    int64_t warps = blocks_for(n, kRows) * m;
    unsigned grid = (unsigned)blocks_for(warps, kWarps);
    cudaStream_t s = (cudaStream_t)stream;
    if (out_f32)
        matmul_nt_kernel<float>
            <<<grid, kWarps * 32, 0, s>>>((const bf16 *)x, (const bf16 *)w, n, k, m, (float *)out);
    else
        matmul_nt_kernel<bf16>
            <<<grid, kWarps * 32, 0, s>>>((const bf16 *)x, (const bf16 *)w, n, k, m, (bf16 *)out);
    return launched();
}

int ref_cuda_rope(void *stream, void *x, int64_t ld, const int32_t *pos, int64_t n, int64_t heads,
                  int64_t head_dim, float theta)
{
    int64_t items = n * heads * (head_dim / 2);
    if (items == 0)
        return 0;
    rope_kernel<<<(unsigned)blocks_for(items, kBlock), kBlock, 0, (cudaStream_t)stream>>>(
        (bf16 *)x, ld, pos, n, heads, head_dim, theta);
    return launched();
}

int ref_cuda_kv_write(void *stream, void *k_pages, void *v_pages, int64_t page_size, int64_t kv_dim,
                      const void *k, const void *v, int64_t ld, const int32_t *token_to_page,
                      const int32_t *token_to_cache, int64_t n)
{
    int64_t items = n * kv_dim;
    if (items == 0)
        return 0;
    kv_write_kernel<<<(unsigned)blocks_for(items, kBlock), kBlock, 0, (cudaStream_t)stream>>>(
        (bf16 *)k_pages, (bf16 *)v_pages, page_size, kv_dim, (const bf16 *)k, (const bf16 *)v, ld,
        token_to_page, token_to_cache, n);
    return launched();
}

int ref_cuda_paged_attention(void *stream, const void *q, int64_t ld_q, const void *k_pages,
                             const void *v_pages, int64_t page_size, const int32_t *page_table,
                             int64_t pages_per_row, const int32_t *token_row,
                             const int32_t *token_kv_len, int64_t n, int64_t heads,
                             int64_t head_dim, void *out)
{
    if (head_dim > 32 * kMaxChunks)
        return (int)cudaErrorInvalidValue;
    int64_t warps = n * heads;
    if (warps == 0)
        return 0;
    paged_attention_kernel<<<(unsigned)blocks_for(warps, kWarps), kWarps * 32, 0,
                             (cudaStream_t)stream>>>(
        (const bf16 *)q, ld_q, (const bf16 *)k_pages, (const bf16 *)v_pages, page_size, page_table,
        pages_per_row, token_row, token_kv_len, n, heads, head_dim, (bf16 *)out);
    return launched();
}

int ref_cuda_silu_mul(void *stream, const void *gate_up, int64_t n, int64_t f, void *out)
{
    int64_t items = n * f;
    if (items == 0)
        return 0;
    silu_mul_kernel<<<(unsigned)blocks_for(items, kBlock), kBlock, 0, (cudaStream_t)stream>>>(
        (const bf16 *)gate_up, n, f, (bf16 *)out);
    return launched();
}

int ref_cuda_add(void *stream, void *x, const void *y, int64_t count)
{
    if (count == 0)
        return 0;
    add_kernel<<<(unsigned)blocks_for(count, kBlock), kBlock, 0, (cudaStream_t)stream>>>(
        (bf16 *)x, (const bf16 *)y, count);
    return launched();
}

int ref_cuda_gather_rows(void *stream, const void *x, int64_t dim, const int32_t *index, int64_t n,
                         void *out)
{
    if (n == 0)
        return 0;
    gather_rows_kernel<<<(unsigned)n, kBlock, 0, (cudaStream_t)stream>>>((const bf16 *)x, dim,
                                                                         index, (bf16 *)out);
    return launched();
}

int ref_cuda_argmax(void *stream, const float *logits, int64_t n, int64_t vocab, int32_t *out)
{
    if (n == 0)
        return 0;
    argmax_kernel<<<(unsigned)n, kBlock, 0, (cudaStream_t)stream>>>(logits, vocab, out);
    return launched();
}

const char *ref_cuda_error_string(int error)
{
    return cudaGetErrorString((cudaError_t)error);
}

} // extern "C"
