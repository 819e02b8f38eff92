/*
 * test_ref_linear_tiles.c — the tile mapping of the one-kernel CUDA linear layer
 * (models/ref/cuda/linear_tile.h), run on the host over every block and lane of a launch: each
 * output element written by exactly one lane, from the weight rows its epilogue means (a plain
 * column; gate j with up m/2 + j; a rope pair's two halves of one head), nothing past the end.
 * The kernel's arithmetic needs a GPU (gpu.test_mlp_cuda, gpu.test_ref_replay_cuda); where its
 * sums land does not.
 */
#include "mstar_test.h"

#include "cuda/linear_tile.h"

#include <stdlib.h>

typedef struct shape {
    int epilogue;
    int64_t m, heads, head_dim;
} shape;

/* Columns of out: one per gated pair, else one per weight row. */
static int64_t out_cols(const shape *s)
{
    return s->epilogue == REF_EPI_GATED ? s->m / 2 : s->m;
}

/* Walks every tile and lane of a launch of n rows, counting writes per output element. */
static void check_shape(const shape *s, int64_t n)
{
    int64_t cols = out_cols(s), groups = ref_tile_col_groups(s->epilogue, s->m);
    int *writes = calloc((size_t)(n * cols), sizeof(int));
    assert_non_null(writes);
    int64_t hh = s->head_dim / 2;
    for (int64_t row0 = 0; row0 < n; row0 += REF_TILE_ROWS) {
        for (int64_t cg = 0; cg < groups; cg++) {
            int64_t wr[REF_TILE_COLS];
            for (int c = 0; c < REF_TILE_COLS; c++) {
                wr[c] = ref_tile_weight_row(s->epilogue, s->m, s->head_dim, cg, c);
                assert_true(wr[c] >= -1 && wr[c] < s->m);
            }
            for (int lane = 0; lane < 32; lane++) {
                int r, c;
                int64_t j;
                if (!ref_tile_output(s->epilogue, s->m, cg, lane, &r, &c, &j) || row0 + r >= n)
                    continue;
                int64_t i = row0 + r;
                assert_true(r < REF_TILE_ROWS && c < REF_TILE_COLS);
                if (s->epilogue == REF_EPI_ROPE_KV) {
                    /* Pair j: element d and d + hh of head block j / hh. */
                    int64_t block = j / hh, d = j % hh;
                    assert_int_equal(wr[c], block * s->head_dim + d);
                    assert_int_equal(wr[c + 2], block * s->head_dim + d + hh);
                    writes[i * cols + wr[c]]++;
                    writes[i * cols + wr[c + 2]]++;
                } else if (s->epilogue == REF_EPI_GATED) {
                    assert_int_equal(wr[c], j);
                    assert_int_equal(wr[c + 2], s->m / 2 + j);
                    writes[i * cols + j]++;
                } else {
                    assert_int_equal(wr[c], j);
                    writes[i * cols + j]++;
                }
            }
        }
    }
    for (int64_t e = 0; e < n * cols; e++)
        if (writes[e] != 1)
            fail_msg("epilogue %d, m %lld, %lld rows: element %lld written %d times", s->epilogue,
                     (long long)s->m, (long long)n, (long long)e, writes[e]);
    free(writes);
}

static void test_every_element_once(void **state)
{
    (void)state;
    const shape shapes[] = {
        { REF_EPI_STORE, 1, 0, 0 },
        { REF_EPI_STORE, 4, 0, 0 },
        { REF_EPI_STORE, 10, 0, 0 },
        { REF_EPI_ADD, 256, 0, 0 },
        { REF_EPI_SILU_ADD, 100, 0, 0 },
        { REF_EPI_GATED, 2, 0, 0 },
        { REF_EPI_GATED, 6, 0, 0 },
        { REF_EPI_GATED, 1024, 0, 0 },
        { REF_EPI_ROPE_KV, 3 * 2, 1, 2 },
        { REF_EPI_ROPE_KV, 3 * 2 * 6, 2, 6 },
        { REF_EPI_ROPE_KV, 3 * 4 * 64, 4, 64 },
    };
    const int64_t rows[] = { 1, 5, 8, 9, 64 };
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++)
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
            check_shape(&shapes[k], rows[r]);
}

/* Weight rows past the end are -1 (the kernel reads nothing for them). */
static void test_past_the_end(void **state)
{
    (void)state;
    assert_int_equal(ref_tile_col_groups(REF_EPI_STORE, 10), 3);
    assert_int_equal(ref_tile_weight_row(REF_EPI_STORE, 10, 0, 2, 1), 9);
    assert_int_equal(ref_tile_weight_row(REF_EPI_STORE, 10, 0, 2, 2), -1);
    assert_int_equal(ref_tile_col_groups(REF_EPI_GATED, 6), 2);
    assert_int_equal(ref_tile_weight_row(REF_EPI_GATED, 6, 0, 1, 0), 2);
    assert_int_equal(ref_tile_weight_row(REF_EPI_GATED, 6, 0, 1, 2), 5);
    assert_int_equal(ref_tile_weight_row(REF_EPI_GATED, 6, 0, 1, 1), -1);
    assert_int_equal(ref_tile_weight_row(REF_EPI_GATED, 6, 0, 1, 3), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_element_once),
        cmocka_unit_test(test_past_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
