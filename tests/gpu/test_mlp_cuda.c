/*
 * test_mlp_cuda.c — the mlp bench model (models/ref/mlp_node.h) on a GPU, bf16:
 *   - each step's rows against a plain double computation on the same (bf16-rounded) weights,
 *     at row counts run as one kernel a layer (1..64) and on cuBLAS (100), for the default
 *     8 x 1024 and for a hidden size of 100 (element loads, a partial column tile);
 *   - replayed steps equal to eager ones bit for bit, and a row's result independent of the
 *     other rows of its step;
 *   - the switch MSTAR_REF_SKINNY_GEMM: 0 runs every layer on cuBLAS (still matching), a bad
 *     value is refused when the model is made.
 * Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include "mlp_node.h"
#include "ref_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ROWS = 100 };

static const int64_t sizes[] = { 1, 8, 64 };

static mlp_node *make_node(mstar_backend *b, ref_mlp_config c)
{
    mlp_node_options o = { .model = c,
                           .max_rows = MAX_ROWS,
                           .batch_sizes = sizes,
                           .n_batch_sizes = sizeof(sizes) / sizeof(sizes[0]) };
    mlp_node *node = NULL;
    assert_mstar_ok(mlp_node_create(b, &o, &node));
    assert_mstar_ok(mlp_node_capture(node));
    return node;
}

/* The weights as the GPU holds them: fp32 rounded to bf16. */
static void bf16_weights(const ref_mlp_config *c, float **norm, float **w)
{
    size_t l = (size_t)c->layers, d = (size_t)c->hidden;
    *norm = malloc(sizeof(float) * l * d);
    *w = malloc(sizeof(float) * l * d * d);
    uint16_t *tmp = malloc(sizeof(uint16_t) * l * d * d);
    assert_non_null(*norm);
    assert_non_null(*w);
    assert_non_null(tmp);
    ref_mlp_init_weights(c, *norm, *w);
    ref_f32_to_bf16(*norm, tmp, l * d);
    ref_bf16_to_f32(tmp, *norm, l * d);
    ref_f32_to_bf16(*w, tmp, l * d * d);
    ref_bf16_to_f32(tmp, *w, l * d * d);
    free(tmp);
}

/* For each layer, r += silu(W · rmsnorm(r) * g), in double. */
static void reference(const ref_mlp_config *c, const float *norm, const float *w, const float *x,
                      double *y)
{
    size_t d = (size_t)c->hidden;
    double *n = malloc(sizeof(double) * 2 * d), *h = n + d;
    assert_non_null(n);
    for (size_t j = 0; j < d; j++)
        y[j] = x[j];
    for (size_t l = 0; l < (size_t)c->layers; l++) {
        double ss = 0;
        for (size_t j = 0; j < d; j++)
            ss += y[j] * y[j];
        double scale = 1.0 / sqrt(ss / (double)d + c->norm_eps);
        for (size_t j = 0; j < d; j++)
            n[j] = y[j] * scale * norm[l * d + j];
        for (size_t o = 0; o < d; o++) {
            h[o] = 0;
            for (size_t k = 0; k < d; k++)
                h[o] += (double)w[(l * d + o) * d + k] * n[k];
        }
        for (size_t o = 0; o < d; o++)
            y[o] += h[o] / (1 + exp(-h[o]));
    }
    free(n);
}

/* The largest difference of rows [0, n) of y from the reference, relative to each row's largest
 * reference value. */
static double worst_rel(mlp_node *node, const ref_mlp_config *c, const float *norm, const float *w,
                        const float *y, int32_t n)
{
    size_t d = (size_t)c->hidden;
    float *x = malloc(sizeof(float) * d);
    double *want = malloc(sizeof(double) * d), worst = 0;
    assert_non_null(x);
    assert_non_null(want);
    for (int32_t i = 0; i < n; i++) {
        assert_mstar_ok(mlp_node_read_state(node, i, x));
        reference(c, norm, w, x, want);
        double diff = 0, scale = 0;
        for (size_t j = 0; j < d; j++) {
            diff = fmax(diff, fabs(y[(size_t)i * d + j] - want[j]));
            scale = fmax(scale, fabs(want[j]));
        }
        worst = fmax(worst, diff / scale);
    }
    free(x);
    free(want);
    return worst;
}

/* Steps of 1, 5, 8, 64 (one kernel a layer, unless `kernel` is false: switched off) and 100
 * rows (cuBLAS) against the reference. The kernel's steps replayed give their eager bits, and a
 * row its bits alone; cuBLAS may pick another algorithm for a padded replay's row count, so
 * its replays are held to the reference. */
static void check_model(mstar_backend *b, ref_mlp_config c, bool kernel)
{
    mlp_node *node = make_node(b, c);
    float *norm, *w;
    bf16_weights(&c, &norm, &w);
    size_t d = (size_t)c.hidden;
    float *y = malloc(sizeof(float) * MAX_ROWS * d), *r = malloc(sizeof(float) * MAX_ROWS * d);
    float *alone = malloc(sizeof(float) * d);
    assert_non_null(y);
    assert_non_null(r);
    assert_non_null(alone);
    assert_mstar_ok(mlp_node_step(node, 0, 1, false, alone, NULL));
    const int32_t counts[] = { 1, 5, 8, 64, 100 };
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        int32_t n = counts[k];
        bool replayed = true;
        assert_mstar_ok(mlp_node_step(node, 0, n, false, y, &replayed));
        assert_false(replayed);
        double worst = worst_rel(node, &c, norm, w, y, n);
        print_message("mlp %d x %d, %d rows: bf16 vs double, largest relative difference %g\n",
                      c.layers, c.hidden, n, worst);
        assert_true(worst < 3e-2);
        if (n > 64)
            continue; /* cuBLAS; no bucket holds it */
        assert_mstar_ok(mlp_node_step(node, 0, n, true, r, &replayed));
        assert_true(replayed);
        if (!kernel) {
            assert_true(worst_rel(node, &c, norm, w, r, n) < 3e-2);
            continue;
        }
        assert_memory_equal(y, r, sizeof(float) * (size_t)n * d);
        /* Row 0 does not depend on the rows beside it. */
        assert_memory_equal(alone, y, sizeof(float) * d);
    }
    free(y);
    free(r);
    free(alone);
    free(norm);
    free(w);
    mlp_node_destroy(node);
}

static void test_mlp_matches_reference(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    /* The kernel up to 64 rows (the model's default stops at 8, cuBLAS beyond). */
    assert_int_equal(setenv("MSTAR_REF_SKINNY_GEMM", "64", 1), 0);
    check_model(b, ref_mlp_config_default(), true);
    ref_mlp_config odd = ref_mlp_config_default();
    odd.layers = 2;
    odd.hidden = 100;
    check_model(b, odd, true);
    unsetenv("MSTAR_REF_SKINNY_GEMM");
    /* The default: the kernel's rows and cuBLAS's both held to the reference. */
    check_model(b, ref_mlp_config_default(), false);
    mstar_backend_destroy(b);
}

static void test_switch(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    ref_mlp_config c = ref_mlp_config_default();
    c.layers = 2;
    c.hidden = 256;
    mlp_node_options o = {
        .model = c, .max_rows = MAX_ROWS, .batch_sizes = sizes, .n_batch_sizes = 3
    };
    mlp_node *node = NULL;
    assert_int_equal(setenv("MSTAR_REF_SKINNY_GEMM", "many", 1), 0);
    assert_mstar_status(mlp_node_create(b, &o, &node), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "MSTAR_REF_SKINNY_GEMM"));
    /* Off: every layer on cuBLAS, still the model. */
    assert_int_equal(setenv("MSTAR_REF_SKINNY_GEMM", "0", 1), 0);
    check_model(b, c, false);
    unsetenv("MSTAR_REF_SKINNY_GEMM");
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_matches_reference),
        cmocka_unit_test(test_switch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
