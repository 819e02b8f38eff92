/*
 * linear_cuda.cu — a linear layer for the few rows of a decode step in one kernel: the rmsnorm of
 * its input rows as a prologue, the bf16 GEMM with fp32 sums, and its epilogue (store, residual
 * add, silu residual, gated silu, or a qkv projection's rope and KV page write) — see
 * ref_linear in ref_ops.h. At a decode step's
 * sizes a layer's cost is launches and weight bytes, not arithmetic: one kernel instead of a
 * norm, a cuBLAS GEMM and an activation cuts the launches, and each weight is read once with
 * 16-byte loads.
 *
 * A block computes one tile of 8 rows x 4 weight rows (columns of out). Its warps split k into
 * 8-element chunks (chunk c goes to thread c mod blockDim), each thread summing its chunks in
 * order; a warp then folds its 32 lanes in a fixed halving order and the warps' partials are
 * added in warp order. The norm is folded in without a second pass over x:
 * sum_k w * (x * g) * s = s * sum_k w * (x * g), with s = rsqrt(mean(x^2) + eps) summed along.
 * Every order depends on k and the launch shape alone (fixed by k), never on other rows or on
 * timing: no atomics, no split of one sum across blocks. So replay equals eager bit for bit and
 * a row's result does not depend on the rest of the call.
 */
#include "kernels_cuda.h"
#include "linear_tile.h"
#include "rope_cuda.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdint.h>

typedef __nv_bfloat16 bf16;

namespace
{

constexpr int kRows = 8;  /* rows of x in a tile */
constexpr int kCols = 4;  /* weight rows in a tile (2 gate + 2 up rows when gated) */
constexpr int kChunk = 8; /* elements per 16-byte load */
constexpr int kWarps = 4; /* most warps sharing a tile's k */
constexpr int kTile = kRows * kCols;
static_assert(kTile == 32, "the lane fold gives each lane one of the tile's 32 sums");

/* Elements e..e+7 of p as floats. kVec: one 16-byte load (p + e 16-byte aligned, e + 8 <= k);
 * otherwise element loads, zeros past k. */
template <bool kVec>
__device__ __forceinline__ void load8(const bf16 *p, int64_t e, int64_t k, float *f)
{
    if (kVec) {
        uint4 u = __ldg(reinterpret_cast<const uint4 *>(p + e));
        const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
        for (int i = 0; i < kChunk / 2; i++) {
            float2 v = __bfloat1622float2(h[i]);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < kChunk; i++)
            f[i] = e + i < k ? __bfloat162float(p[e + i]) : 0.0f;
    }
}

/* One step of fold_lanes: of v[0 .. 2 * kWidth), a lane keeps the upper half when its kWidth bit
 * is set (the lower otherwise), adds its partner's copy of that half and stores it in v[0 ..
 * kWidth). Constant widths keep every index static, so v stays in registers. */
template <int kWidth> __device__ __forceinline__ void fold_step(float (&v)[kTile], int lane)
{
    bool upper = (lane & kWidth) != 0;
#pragma unroll
    for (int i = 0; i < kWidth; i++) {
        float send = upper ? v[i] : v[i + kWidth];
        float keep = upper ? v[i + kWidth] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kWidth);
    }
}

/* v[0..31] of every lane summed over the warp; lane l ends with the sum of v[l] in v[0]: 31
 * shuffles, in an order fixed by the lane numbers. */
__device__ __forceinline__ float fold_lanes(float (&v)[kTile])
{
    int lane = threadIdx.x % 32;
    fold_step<16>(v, lane);
    fold_step<8>(v, lane);
    fold_step<4>(v, lane);
    fold_step<2>(v, lane);
    fold_step<1>(v, lane);
    return v[0];
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float silu(float v)
{
    return v / (1.0f + expf(-v));
}

/* Pair p of token i's qkv row (x1, x2 its two elements): q and k rotated by the token's
 * position, as the rope_kv_write kernel does, stored to qkv; k and v also to the page slot. */
__device__ void rope_epilogue(const ref_linear &a, int64_t i, int64_t p, float x1, float x2)
{
    int64_t hh = a.rope.head_dim / 2, kv_dim = a.rope.heads * a.rope.head_dim;
    int64_t block = p / hh / a.rope.heads, h = (p / hh) % a.rope.heads, d = p % hh;
    int64_t col = ref_tile_pair_row(a.epilogue, a.m, a.rope.head_dim, p, false);
    if (block < 2) {
        float s, c;
        rope_angle(a.rope.pos[i], d, a.rope.head_dim, a.rope.theta, &s, &c);
        rope_rotate(x1, x2, s, c, &x1, &x2);
    }
    bf16 b1 = __float2bfloat16_rn(x1), b2 = __float2bfloat16_rn(x2);
    bf16 *out = static_cast<bf16 *>(a.out) + i * a.m;
    out[col] = b1;
    out[col + hh] = b2;
    if (block == 0)
        return;
    int64_t at =
        ((int64_t)a.rope.token_to_page[i] * a.rope.page_size + a.rope.token_to_cache[i]) * kv_dim +
        h * a.rope.head_dim + d;
    bf16 *pages = static_cast<bf16 *>(block == 1 ? a.rope.k_pages : a.rope.v_pages);
    pages[at] = b1;
    pages[at + hh] = b2;
}

/* Writes out[i, j] of the tile from the sums: acc (its column), up (the pair's other element)
 * and the row's sum of squares. */
__device__ void epilogue(const ref_linear &a, int64_t i, int64_t j, float acc, float up, float ss)
{
    bool gated = a.epilogue == REF_EPI_GATED;
    int64_t ld = gated ? a.m / 2 : a.m;
    float scale = a.norm != nullptr ? rsqrtf(ss / (float)a.k + a.eps) : 1.0f;
    float v = acc * scale;
    if (a.epilogue == REF_EPI_ROPE_KV) {
        rope_epilogue(a, i, j, v, up * scale);
        return;
    }
    if (a.epilogue == REF_EPI_ADD || a.epilogue == REF_EPI_SILU_ADD) {
        int64_t r = a.residual_rows != nullptr ? (int64_t)a.residual_rows[i] : i;
        float res = __bfloat162float(static_cast<const bf16 *>(a.residual)[r * a.m + j]);
        v = res + (a.epilogue == REF_EPI_SILU_ADD ? silu(v) : v);
    } else if (gated) {
        v = silu(v) * (up * scale);
    }
    if (a.out_f32)
        static_cast<float *>(a.out)[i * ld + j] = v;
    else
        static_cast<bf16 *>(a.out)[i * ld + j] = __float2bfloat16_rn(v);
}

template <bool kVec>
__global__ void __launch_bounds__(kWarps * 32) linear_kernel(ref_linear a, int64_t col_groups)
{
    __shared__ float part[kWarps][kTile + kRows];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int64_t cg = blockIdx.x % col_groups, row0 = (blockIdx.x / col_groups) * kRows;
    bool pairs = ref_tile_paired(a.epilogue);

    /* The tile's weight rows (NULL past the end). */
    const bf16 *wr[kCols];
#pragma unroll
    for (int c = 0; c < kCols; c++) {
        int64_t row = ref_tile_weight_row(a.epilogue, a.m, a.rope.head_dim, cg, c);
        wr[c] = row >= 0 ? static_cast<const bf16 *>(a.w) + row * a.k : nullptr;
    }
    const bf16 *xr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; r++) {
        int64_t i = row0 + r;
        xr[r] = i < a.n ? static_cast<const bf16 *>(a.x) +
                              (a.x_rows != nullptr ? (int64_t)a.x_rows[i] : i) * a.k
                        : nullptr;
    }

    float acc[kTile], ss[kRows];
#pragma unroll
    for (int t = 0; t < kTile; t++)
        acc[t] = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; r++)
        ss[r] = 0.0f;
    int64_t step = (int64_t)blockDim.x * kChunk;
    for (int64_t e = (int64_t)threadIdx.x * kChunk; e < a.k; e += step) {
        float wf[kCols][kChunk], g[kChunk];
#pragma unroll
        for (int c = 0; c < kCols; c++) {
            if (wr[c] != nullptr) {
                load8<kVec>(wr[c], e, a.k, wf[c]);
            } else {
#pragma unroll
                for (int q = 0; q < kChunk; q++)
                    wf[c][q] = 0.0f;
            }
        }
        if (a.norm != nullptr)
            load8<kVec>(static_cast<const bf16 *>(a.norm), e, a.k, g);
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            if (xr[r] == nullptr)
                continue;
            float xf[kChunk];
            load8<kVec>(xr[r], e, a.k, xf);
            if (a.norm != nullptr) {
#pragma unroll
                for (int q = 0; q < kChunk; q++) {
                    ss[r] += xf[q] * xf[q];
                    xf[q] *= g[q];
                }
            }
#pragma unroll
            for (int c = 0; c < kCols; c++)
#pragma unroll
                for (int q = 0; q < kChunk; q++)
                    acc[r * kCols + c] += wf[c][q] * xf[q];
        }
    }

    /* Lanes, then warps in order, then one thread per output element. */
    float mine = fold_lanes(acc);
    part[warp][lane] = mine;
    if (a.norm != nullptr) {
#pragma unroll
        for (int r = 0; r < kRows; r++) {
            float s = warp_sum(ss[r]);
            if (lane == 0)
                part[warp][kTile + r] = s;
        }
    }
    __syncthreads();
    if (warp != 0)
        return;
    int r, c;
    int64_t j;
    if (!ref_tile_output(a.epilogue, a.m, cg, lane, &r, &c, &j) || row0 + r >= a.n)
        return;
    int64_t i = row0 + r;
    float sum = part[0][r * kCols + c], up = pairs ? part[0][r * kCols + c + 2] : 0.0f;
    float sq = a.norm != nullptr ? part[0][kTile + r] : 0.0f;
    for (int w = 1; w < warps; w++) {
        sum += part[w][r * kCols + c];
        if (pairs)
            up += part[w][r * kCols + c + 2];
        if (a.norm != nullptr)
            sq += part[w][kTile + r];
    }
    epilogue(a, i, j, sum, up, sq);
}

bool aligned16(const void *p)
{
    return p == nullptr || (reinterpret_cast<uintptr_t>(p) % 16) == 0;
}

} // namespace

extern "C" int ref_cuda_linear_launch(void *stream, const ref_linear *l)
{
    if (l->n == 0)
        return 0;
    bool pairs = ref_tile_paired(l->epilogue);
    bool rope = l->epilogue == REF_EPI_ROPE_KV;
    if (l->n < 0 || l->n > REF_CUDA_LINEAR_MAX_ROWS || l->k < 1 || l->m < 1 ||
        l->epilogue < REF_EPI_STORE || l->epilogue > REF_EPI_ROPE_KV || (pairs && l->m % 2 != 0) ||
        (l->out_f32 && l->epilogue != REF_EPI_STORE) ||
        ((l->epilogue == REF_EPI_ADD || l->epilogue == REF_EPI_SILU_ADD) && l->residual == nullptr))
        return (int)cudaErrorInvalidValue;
    if (rope && (l->rope.heads < 1 || l->rope.head_dim < 2 || l->rope.head_dim % 2 != 0 ||
                 l->rope.head_dim > INT64_MAX / 3 / l->rope.heads ||
                 l->m != 3 * l->rope.heads * l->rope.head_dim || l->rope.pos == nullptr ||
                 l->rope.k_pages == nullptr || l->rope.v_pages == nullptr ||
                 l->rope.token_to_page == nullptr || l->rope.token_to_cache == nullptr))
        return (int)cudaErrorInvalidValue;
    int64_t col_groups = ref_tile_col_groups(l->epilogue, l->m);
    int64_t row_groups = (l->n + kRows - 1) / kRows;
    if (col_groups > INT32_MAX / row_groups)
        return (int)cudaErrorInvalidValue; /* more blocks than a grid's x holds */
    int64_t warps = (l->k + 32 * kChunk - 1) / (32 * kChunk);
    warps = warps > kWarps ? kWarps : warps;
    /* The kernel reads the description as given; head_dim only enters the tile arithmetic of
     * the other epilogues, which needs it even (any value does). */
    ref_linear a = *l;
    if (!rope)
        a.rope.head_dim = 2;
    /* 16-byte loads need every row start aligned: the bases, and k a multiple of 8. */
    bool vec = l->k % kChunk == 0 && aligned16(l->x) && aligned16(l->w) && aligned16(l->norm);
    dim3 grid((unsigned)(col_groups * row_groups)), block((unsigned)(warps * 32));
    if (vec)
        linear_kernel<true><<<grid, block, 0, (cudaStream_t)stream>>>(a, col_groups);
    else
        linear_kernel<false><<<grid, block, 0, (cudaStream_t)stream>>>(a, col_groups);
    return (int)cudaGetLastError();
}
