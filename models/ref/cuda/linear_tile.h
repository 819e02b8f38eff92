/*
 * linear_tile.h — how the one-kernel linear layer (linear_cuda.cu) maps its tiles onto weight
 * rows and output elements, as plain functions that the kernel and the host both compile: the
 * index arithmetic is where a mistake would put a sum in the wrong place, and a host unit test
 * (unit.test_ref_linear_tiles) holds it to what each epilogue means without a GPU.
 *
 * A tile is 8 rows of x by 4 weight rows. Plain epilogues take 4 consecutive weight rows, one
 * output column each. Paired ones (gated, rope) take two pairs p, p + 1: tile columns 0, 1 are
 * the pairs' first elements, 2, 3 their second ones; gated pair p is gate row p and up row
 * m/2 + p (one output column), rope pair p is element d and d + head_dim/2 of head block
 * p / (head_dim/2) (two output columns).
 */
#ifndef MSTAR_EXAMPLES_LINEAR_TILE_H
#define MSTAR_EXAMPLES_LINEAR_TILE_H

#include "ref_ops.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define REF_TILE_FN __host__ __device__ static inline
#else
#define REF_TILE_FN static inline
#endif

enum { REF_TILE_ROWS = 8, REF_TILE_COLS = 4 };

REF_TILE_FN bool ref_tile_paired(int epilogue)
{
    return epilogue == REF_EPI_GATED || epilogue == REF_EPI_ROPE_KV;
}

/* Column groups of a call: tiles across the weight rows. */
REF_TILE_FN int64_t ref_tile_col_groups(int epilogue, int64_t m)
{
    return ref_tile_paired(epilogue) ? (m / 2 + 1) / 2 : (m + REF_TILE_COLS - 1) / REF_TILE_COLS;
}

/* The weight row of pair p's first (second: `upper`) element, p < m / 2. */
REF_TILE_FN int64_t ref_tile_pair_row(int epilogue, int64_t m, int64_t head_dim, int64_t p,
                                      bool upper)
{
    if (epilogue == REF_EPI_GATED)
        return upper ? m / 2 + p : p;
    int64_t hh = head_dim / 2;
    return (p / hh) * head_dim + p % hh + (upper ? hh : 0);
}

/* The weight row of tile column c in column group cg, or -1 past the end. */
REF_TILE_FN int64_t ref_tile_weight_row(int epilogue, int64_t m, int64_t head_dim, int64_t cg,
                                        int c)
{
    if (!ref_tile_paired(epilogue)) {
        int64_t col = cg * REF_TILE_COLS + c;
        return col < m ? col : -1;
    }
    int64_t p = cg * 2 + c % 2;
    return p < m / 2 ? ref_tile_pair_row(epilogue, m, head_dim, p, c >= 2) : -1;
}

/* What lane `lane` of warp 0 writes: the tile's row r, tile column c (its pair's second element
 * is c + 2) and output index j (the column, or the pair); false when the lane writes nothing
 * (past the last row is checked by the caller). */
REF_TILE_FN bool ref_tile_output(int epilogue, int64_t m, int64_t cg, int lane, int *r, int *c,
                                 int64_t *j)
{
    bool paired = ref_tile_paired(epilogue);
    *r = paired ? lane / 2 : lane / REF_TILE_COLS;
    *c = paired ? lane % 2 : lane % REF_TILE_COLS;
    *j = paired ? cg * 2 + *c : cg * REF_TILE_COLS + *c;
    if (paired && lane >= 2 * REF_TILE_ROWS)
        return false;
    return *j < (paired ? m / 2 : m);
}

#endif
