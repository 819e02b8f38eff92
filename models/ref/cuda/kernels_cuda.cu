/*
 * kernels_cuda.cu — the reference model's CUDA kernels other than its GEMMs (those are cuBLAS
 * calls, ctx_cuda.c): bf16 storage, fp32 arithmetic (see kernels_cuda.h for the contract and
 * kernels_host.h for what each computes).
 *
 * Small ops are fused where one kernel can do the work of two: the silu residual and the next
 * norm; rope of q and k with the KV page write. A block per (token, head) runs attention, its
 * threads splitting the KV positions (a group of lanes per position where head_dim allows
 * 16-byte loads, a warp per position otherwise), each with a single-pass softmax, merged at the
 * end; a block
 * per row runs norms and argmax. Reductions go through fixed butterfly/tree orders and nothing
 * uses atomics, so results are deterministic. Nothing here creates library state, so nothing is
 * created lazily inside a capture.
 */
#include "kernels_cuda.h"
#include "rope_cuda.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>

typedef __nv_bfloat16 bf16;

namespace
{

constexpr int kBlock = 256;   /* threads of the row-per-block kernels */
constexpr int kAttnWarps = 8; /* warps sharing one (token, head) of attention */
constexpr int kMaxChunks = 8; /* head_dim <= 32 * kMaxChunks */

__device__ __forceinline__ float to_f(bf16 v)
{
    return __bfloat162float(v);
}

__device__ __forceinline__ bf16 to_b(float v)
{
    return __float2bfloat16_rn(v);
}

/* Whether 16-byte loads may start at p. */
bool aligned16(const void *p)
{
    return (reinterpret_cast<uintptr_t>(p) % 16) == 0;
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

/* Block per row: r = x + silu(h), x's row picked by rows[] when given (an embedding lookup, a
 * gather), written to x_out when given, then out = rmsnorm(r) * w when out is given. The second
 * pass reads r back from where the first left it (x_out, or x's row); each thread reads only
 * elements it wrote itself, so no barrier is needed between the passes, even when x_out is x. */
__global__ void silu_add_rmsnorm_kernel(const bf16 *x, const int32_t *rows, const bf16 *h,
                                        bf16 *x_out, const bf16 *w, int64_t dim, float eps,
                                        bf16 *out)
{
    int64_t base = (int64_t)blockIdx.x * dim;
    const bf16 *xr = x + (rows != nullptr ? (int64_t)rows[blockIdx.x] : (int64_t)blockIdx.x) * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = to_f(xr[j]);
        if (h != nullptr) {
            float g = to_f(h[base + j]);
            v = to_f(to_b(v + g / (1.0f + expf(-g)))); /* as stored: what the next op reads */
        }
        if (x_out != nullptr)
            x_out[base + j] = to_b(v);
        ss += v * v;
    }
    if (out == nullptr)
        return; /* uniform over the block: the barrier inside block_sum is never split */
    ss = block_sum(ss);
    float scale = rsqrtf(ss / (float)dim + eps);
    const bf16 *src = x_out != nullptr ? x_out + base : xr; /* r: this thread's own elements */
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        out[base + j] = to_b(to_f(src[j]) * scale * to_f(w[j]));
}

/* Thread per (token, head, pair): rotates the pair (d, d + half) of q in place and of k, then
 * writes k (rotated) and v into the token's page slot. k is not written back to qkv: attention
 * reads keys from the pages only. */
__global__ void rope_kv_write_kernel(bf16 *qkv, int64_t ld, const int32_t *pos, int64_t n,
                                     int64_t heads, int64_t head_dim, float theta, bf16 *kp,
                                     bf16 *vp, int64_t page_size, const int32_t *t2p,
                                     const int32_t *t2c)
{
    int64_t half = head_dim / 2, kv_dim = heads * head_dim;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * heads * half)
        return;
    int64_t d = idx % half, h = (idx / half) % heads, i = idx / (half * heads);
    float s, c, r1, r2;
    rope_angle(pos[i], d, head_dim, theta, &s, &c);
    bf16 *q = qkv + i * ld + h * head_dim, *k = q + kv_dim, *v = k + kv_dim;
    rope_rotate(to_f(q[d]), to_f(q[d + half]), s, c, &r1, &r2);
    q[d] = to_b(r1);
    q[d + half] = to_b(r2);
    rope_rotate(to_f(k[d]), to_f(k[d + half]), s, c, &r1, &r2);
    int64_t at = ((int64_t)t2p[i] * page_size + t2c[i]) * kv_dim + h * head_dim;
    kp[at + d] = to_b(r1);
    kp[at + d + half] = to_b(r2);
    vp[at + d] = v[d];
    vp[at + d + half] = v[d + half];
}

/* Block per (token, head), kAttnWarps warps: warp w runs a single-pass softmax over positions
 * w, w + kAttnWarps, ... of the token's KV stream (lane l holds elements l, l + 32, ... of q and
 * of its partial output), then warp 0 merges the warps' partials in warp order. Splitting the
 * positions across warps cuts the serial chain of a decode token's attention by kAttnWarps; the
 * fixed merge order keeps the result deterministic. */
__global__ void paged_attention_kernel(const bf16 *q, int64_t ld_q, const bf16 *kp, const bf16 *vp,
                                       int64_t page_size, const int32_t *page_table,
                                       int64_t pages_per_row, const int32_t *token_row,
                                       const int32_t *token_kv_len, int64_t heads, int64_t head_dim,
                                       bf16 *out)
{
    __shared__ float part_max[kAttnWarps], part_denom[kAttnWarps];
    __shared__ float part_acc[kAttnWarps][32 * kMaxChunks];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t i = blockIdx.x / heads, h = blockIdx.x % heads, kv_dim = heads * head_dim;
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
    for (int32_t p = warp; p < len; p += kAttnWarps) {
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
    if (lane == 0) {
        part_max[warp] = run_max;
        part_denom[warp] = denom;
    }
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++)
        part_acc[warp][lane + 32 * c] = acc[c];
    __syncthreads();
    if (warp != 0)
        return;
    float m = -INFINITY;
    for (int w = 0; w < kAttnWarps; w++)
        m = fmaxf(m, part_max[w]);
    float total = 0.0f, merged[kMaxChunks];
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++)
        merged[c] = 0.0f;
    for (int w = 0; w < kAttnWarps; w++) {
        if (part_denom[w] <= 0.0f)
            continue; /* a warp that saw no position */
        float f = expf(part_max[w] - m);
        total += part_denom[w] * f;
#pragma unroll
        for (int c = 0; c < kMaxChunks; c++)
            merged[c] += part_acc[w][lane + 32 * c] * f;
    }
    bf16 *o = out + i * kv_dim + h * head_dim;
#pragma unroll
    for (int c = 0; c < kMaxChunks; c++) {
        int64_t e = lane + 32 * c;
        if (e < head_dim)
            o[e] = to_b(total > 0.0f ? merged[c] / total : 0.0f);
    }
}

/* Eight bf16 at p (16-byte aligned) as floats, through the read-only cache (kNc: memory no
 * thread of this kernel writes) or a plain load. */
template <bool kNc> __device__ __forceinline__ void load8_f(const bf16 *p, float *f)
{
    uint4 u = kNc ? __ldg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 v = __bfloat1622float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

__device__ __forceinline__ void store8_b(bf16 *p, const float *f)
{
    __align__(16) bf16 b[8];
#pragma unroll
    for (int i = 0; i < 8; i++)
        b[i] = to_b(f[i]);
    *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(b);
}

/* A head's vector held 8 elements a lane by a group of kGroup lanes (lane gl: elements 8gl ..
 * 8gl + 7), rotated in place as rope_kv_write_kernel does and rounded to bf16 as it stores
 * them: pair d, d + head_dim / 2 sits in lanes gl and gl ^ kGroup / 2, element j of each. */
/* The sines and cosines of the 8 elements a lane of a group of kGroup lanes holds (lane gl:
 * elements 8gl .. 8gl + 7 of a head's vector; pair d, d + head_dim / 2 sits in lanes gl and
 * gl ^ kGroup / 2, element j of each). */
template <int kGroup>
__device__ __forceinline__ void rope_group_angles(int gl, int32_t pos, float theta, float *s,
                                                  float *c)
{
    constexpr int kDim = 8 * kGroup;
    int d0 = gl < kGroup / 2 ? 8 * gl : 8 * gl - kDim / 2;
#pragma unroll
    for (int j = 0; j < 8; j++)
        rope_angle(pos, d0 + j, kDim, theta, &s[j], &c[j]);
}

/* A head's vector held by a group as above, rotated in place as rope_kv_write_kernel does and
 * rounded to bf16 as it stores it. */
template <int kGroup>
__device__ __forceinline__ void rope_group(float *x, int gl, const float *s, const float *c)
{
    bool first = gl < kGroup / 2;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float other = __shfl_xor_sync(0xffffffffu, x[j], kGroup / 2);
        float r1, r2;
        if (first)
            rope_rotate(x[j], other, s[j], c[j], &r1, &r2);
        else
            rope_rotate(other, x[j], s[j], c[j], &r1, &r2);
        x[j] = to_f(to_b(first ? r1 : r2));
    }
}

/* Where the rope of a decode step's tokens is done in the attention kernel (kRope): the rope
 * and KV-write arguments of rope_kv_write_kernel. */
struct RopeArgs {
    const int32_t *pos;
    float theta;
    bf16 *k_pages, *v_pages;
    const int32_t *t2p, *t2c;
};

/* The same attention for head_dim == 8 * kGroup (64, 128, 256) with 16-byte aligned rows, laid
 * out for short KV streams: a group of kGroup lanes takes one position at a time (lane l of the
 * group holds elements 8l .. 8l + 7 of q and of its partial output, read with one 16-byte load
 * of k and one of v), so the block's 256 threads walk 256 / kGroup positions at once instead of
 * kAttnWarps: a decode token's 65 positions at head_dim 64 take 3 steps, not 9. Group g runs a
 * single-pass softmax over positions g, g + groups, ...; the groups' partials are merged in
 * group order, every sum in an order fixed by the shape alone, so the result is deterministic
 * and a token's output does not depend on the other tokens of the call.
 *
 * kRope: q is the qkv projection as the GEMM left it, and the block first does what
 * rope_kv_write_kernel does for its (token, head): q and k rotated (q kept in registers), k and
 * v written to the token's page slot, which the walk then reads back. Only for steps with one
 * token per row (decode), where no block reads a slot another block writes; the same bits as
 * the two kernels. */
template <int kGroup, bool kRope>
__global__ void __launch_bounds__(kAttnWarps * 32)
    paged_attention_grouped_kernel(const bf16 *q, int64_t ld_q, const bf16 *kp, const bf16 *vp,
                                   int64_t page_size, const int32_t *page_table,
                                   int64_t pages_per_row, const int32_t *token_row,
                                   const int32_t *token_kv_len, int64_t heads, RopeArgs rope,
                                   bf16 *out)
{
    constexpr int kDim = 8 * kGroup, kGroups = kAttnWarps * 32 / kGroup;
    __shared__ float part_max[kGroups], part_denom[kGroups], factor[kGroups];
    __shared__ float part_acc[kGroups * kDim];
    int t = threadIdx.x, g = t / kGroup, gl = t % kGroup;
    int64_t i = blockIdx.x / heads, h = blockIdx.x % heads, kv_dim = heads * kDim;
    const int32_t *pages = page_table + (int64_t)token_row[i] * pages_per_row;
    float qr[8], acc[8];
    const bf16 *qv = q + i * ld_q + h * kDim + 8 * gl;
    load8_f<true>(qv, qr);
    if (kRope) {
        float kr[8], vr[8];
        load8_f<true>(qv + kv_dim, kr);
        load8_f<true>(qv + 2 * kv_dim, vr);
        float sn[8], cs[8];
        rope_group_angles<kGroup>(gl, rope.pos[i], rope.theta, sn, cs);
        rope_group<kGroup>(qr, gl, sn, cs);
        rope_group<kGroup>(kr, gl, sn, cs);
        if (g == 0) {
            int64_t at =
                ((int64_t)rope.t2p[i] * page_size + rope.t2c[i]) * kv_dim + h * kDim + 8 * gl;
            store8_b(rope.k_pages + at, kr);
            store8_b(rope.v_pages + at, vr);
        }
        __syncthreads(); /* the walk below reads the slot back */
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        acc[j] = 0.0f;
    float scale = rsqrtf((float)kDim);
    float run_max = -INFINITY, denom = 0.0f;
    int32_t len = token_kv_len[i];
    /* A warp's groups step together (the shuffles take the whole warp): while its first group
     * has a position, a group past the end adds nothing. */
    int warp_first = (t / 32) * (32 / kGroup);
    for (int32_t pw = warp_first; pw < len; pw += kGroups) {
        int32_t p = pw + (g - warp_first);
        bool live = p < len;
        float kf[8], vf[8];
        if (live) {
            int64_t base = ((int64_t)pages[p / page_size] * page_size + p % page_size) * kv_dim +
                           h * kDim + 8 * gl;
            load8_f<!kRope>(kp + base, kf);
            load8_f<!kRope>(vp + base, vf);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++)
                kf[j] = vf[j] = 0.0f;
        }
        /* The dot product, summed over the group's lanes: kGroup consecutive lanes of one
         * warp, aligned to kGroup. */
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            part += qr[j] * kf[j];
#pragma unroll
        for (int o = kGroup / 2; o > 0; o >>= 1)
            part += __shfl_xor_sync(0xffffffffu, part, o);
        if (!live)
            continue;
        float sc = part * scale;
        float new_max = fmaxf(run_max, sc);
        float correction = expf(run_max - new_max);
        float weight = expf(sc - new_max);
        denom = denom * correction + weight;
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[j] = acc[j] * correction + weight * vf[j];
        run_max = new_max;
    }
    if (gl == 0) {
        part_max[g] = run_max;
        part_denom[g] = denom;
    }
#pragma unroll
    for (int j = 0; j < 8; j++)
        part_acc[g * kDim + 8 * gl + j] = acc[j];
    __syncthreads();
    if (t < kGroups) {
        float m = -INFINITY;
        for (int w = 0; w < kGroups; w++)
            m = fmaxf(m, part_max[w]);
        factor[t] = part_denom[t] > 0.0f ? expf(part_max[t] - m) : 0.0f; /* 0: no position */
    }
    __syncthreads();
    if (t >= kDim)
        return;
    float total = 0.0f, merged = 0.0f;
    for (int w = 0; w < kGroups; w++) {
        total += part_denom[w] * factor[w];
        merged += part_acc[w * kDim + t] * factor[w];
    }
    out[i * kv_dim + h * kDim + t] = to_b(total > 0.0f ? merged / total : 0.0f);
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

/* The grouped kernel for head_dim 64, 128 or 256 with 16-byte aligned rows; false (nothing
 * launched) otherwise. */
template <bool kRope>
bool launch_grouped(cudaStream_t st, unsigned items, const void *q, int64_t ld_q,
                    const void *k_pages, const void *v_pages, int64_t page_size,
                    const int32_t *page_table, int64_t pages_per_row, const int32_t *token_row,
                    const int32_t *token_kv_len, int64_t heads, int64_t head_dim,
                    const RopeArgs &rope, void *out)
{
    if (ld_q % 8 != 0 || !aligned16(q) || !aligned16(k_pages) || !aligned16(v_pages))
        return false;
    const bf16 *qb = (const bf16 *)q, *kb = (const bf16 *)k_pages, *vb = (const bf16 *)v_pages;
    dim3 grid(items), block(kAttnWarps * 32);
    if (head_dim == 64)
        paged_attention_grouped_kernel<8, kRope>
            <<<grid, block, 0, st>>>(qb, ld_q, kb, vb, page_size, page_table, pages_per_row,
                                     token_row, token_kv_len, heads, rope, (bf16 *)out);
    else if (head_dim == 128)
        paged_attention_grouped_kernel<16, kRope>
            <<<grid, block, 0, st>>>(qb, ld_q, kb, vb, page_size, page_table, pages_per_row,
                                     token_row, token_kv_len, heads, rope, (bf16 *)out);
    else if (head_dim == 256)
        paged_attention_grouped_kernel<32, kRope>
            <<<grid, block, 0, st>>>(qb, ld_q, kb, vb, page_size, page_table, pages_per_row,
                                     token_row, token_kv_len, heads, rope, (bf16 *)out);
    else
        return false;
    return true;
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

int ref_cuda_silu_add_rmsnorm(void *stream, const void *x, const int32_t *rows, const void *h,
                              void *x_out, const void *weight, int64_t n, int64_t dim, float eps,
                              void *out)
{
    if (n == 0 || (x_out == nullptr && out == nullptr))
        return 0;
    if (h != nullptr && x_out == nullptr)
        return (int)cudaErrorInvalidValue;
    silu_add_rmsnorm_kernel<<<(unsigned)n, kBlock, 0, (cudaStream_t)stream>>>(
        (const bf16 *)x, rows, (const bf16 *)h, (bf16 *)x_out, (const bf16 *)weight, dim, eps,
        (bf16 *)out);
    return launched();
}

int ref_cuda_rope_kv_write(void *stream, void *qkv, int64_t ld, const int32_t *pos, int64_t n,
                           int64_t heads, int64_t head_dim, float theta, void *k_pages,
                           void *v_pages, int64_t page_size, const int32_t *token_to_page,
                           const int32_t *token_to_cache)
{
    int64_t items = n * heads * (head_dim / 2);
    if (items == 0)
        return 0;
    rope_kv_write_kernel<<<(unsigned)blocks_for(items, kBlock), kBlock, 0, (cudaStream_t)stream>>>(
        (bf16 *)qkv, ld, pos, n, heads, head_dim, theta, (bf16 *)k_pages, (bf16 *)v_pages,
        page_size, token_to_page, token_to_cache);
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
    int64_t items = n * heads;
    if (items == 0)
        return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (!launch_grouped<false>(st, (unsigned)items, q, ld_q, k_pages, v_pages, page_size,
                               page_table, pages_per_row, token_row, token_kv_len, heads, head_dim,
                               RopeArgs{}, out))
        paged_attention_kernel<<<(unsigned)items, kAttnWarps * 32, 0, st>>>(
            (const bf16 *)q, ld_q, (const bf16 *)k_pages, (const bf16 *)v_pages, page_size,
            page_table, pages_per_row, token_row, token_kv_len, heads, head_dim, (bf16 *)out);
    return launched();
}

int ref_cuda_rope_attention(void *stream, void *qkv, int64_t ld, const int32_t *pos, int64_t heads,
                            int64_t head_dim, float theta, void *k_pages, void *v_pages,
                            int64_t page_size, const int32_t *token_to_page,
                            const int32_t *token_to_cache, const int32_t *page_table,
                            int64_t pages_per_row, const int32_t *token_row,
                            const int32_t *token_kv_len, int64_t n, void *out)
{
    int64_t items = n * heads;
    if (items == 0 || head_dim > 32 * kMaxChunks)
        return items == 0 ? 0 : (int)cudaErrorInvalidValue;
    RopeArgs rope = { pos, theta, (bf16 *)k_pages, (bf16 *)v_pages, token_to_page, token_to_cache };
    if (launch_grouped<true>((cudaStream_t)stream, (unsigned)items, qkv, ld, k_pages, v_pages,
                             page_size, page_table, pages_per_row, token_row, token_kv_len, heads,
                             head_dim, rope, out))
        return launched();
    /* Other shapes: the two kernels. */
    int e = ref_cuda_rope_kv_write(stream, qkv, ld, pos, n, heads, head_dim, theta, k_pages,
                                   v_pages, page_size, token_to_page, token_to_cache);
    if (e != 0)
        return e;
    return ref_cuda_paged_attention(stream, qkv, ld, k_pages, v_pages, page_size, page_table,
                                    pages_per_row, token_row, token_kv_len, n, heads, head_dim,
                                    out);
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
