/*
 * test_mlp_model.c — the mlp bench model (models/ref/mlp_node.h) on the host backend: a step's
 * output against a plain C computation of rms_norm → linear → silu → residual add, eager against
 * replayed through the graph runner (equal bits, at a captured batch size and padded to one),
 * the per-op profile of an eager step, and bad arguments refused.
 */
#include "mstar_test.h"

#include "mlp_node.h"
#include "ref_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L = 3, D = 24, ROWS = 8 };

static const int64_t sizes[] = { 2, 4, 8 };

static ref_mlp_config tiny(void)
{
    ref_mlp_config c = ref_mlp_config_default();
    c.layers = L;
    c.hidden = D;
    return c;
}

static mlp_node *make_node(void)
{
    mlp_node_options o = { .model = tiny(),
                           .max_rows = ROWS,
                           .batch_sizes = sizes,
                           .n_batch_sizes = sizeof(sizes) / sizeof(sizes[0]) };
    mlp_node *node = NULL;
    assert_mstar_ok(mlp_node_create(mstar_test_host_backend(), &o, &node));
    assert_mstar_ok(mlp_node_capture(node));
    return node;
}

/* The model written out plainly, in double: for each layer, r += silu(W · rmsnorm(r) * g). */
static void reference(const float *x, double *y)
{
    ref_mlp_config c = tiny();
    float *norm = malloc(sizeof(float) * L * D), *w = malloc(sizeof(float) * L * D * D);
    assert_non_null(norm);
    assert_non_null(w);
    ref_mlp_init_weights(&c, norm, w);
    double r[D], n[D];
    for (int j = 0; j < D; j++)
        r[j] = x[j];
    for (int l = 0; l < L; l++) {
        double ss = 0;
        for (int j = 0; j < D; j++)
            ss += r[j] * r[j];
        double scale = 1.0 / sqrt(ss / D + c.norm_eps);
        for (int j = 0; j < D; j++)
            n[j] = r[j] * scale * norm[l * D + j];
        for (int o = 0; o < D; o++) {
            double h = 0;
            for (int k = 0; k < D; k++)
                h += (double)w[((size_t)l * D + o) * D + k] * n[k];
            r[o] += h / (1 + exp(-h));
        }
    }
    memcpy(y, r, sizeof(r));
    free(norm);
    free(w);
}

static void test_step_matches_plain_computation(void **state)
{
    (void)state;
    mlp_node *node = make_node();
    float y[3 * D], x[D];
    bool replayed = true;
    assert_mstar_ok(mlp_node_step(node, 2, 3, false, y, &replayed));
    assert_false(replayed);
    for (int i = 0; i < 3; i++) {
        double want[D];
        assert_mstar_ok(mlp_node_read_state(node, 2 + i, x));
        reference(x, want);
        for (int j = 0; j < D; j++)
            if (fabs(y[i * D + j] - want[j]) > 1e-4 * (1 + fabs(want[j])))
                fail_msg("row %d, y[%d] = %g, want %g", i, j, y[i * D + j], want[j]);
        /* The step did something: the output is not its input. */
        assert_true(memcmp(x, y + i * D, sizeof(x)) != 0);
    }
    mlp_node_destroy(node);
}

/* Replays (4 rows: a captured size; 3 and 5 rows: padded to 4 and 8) give the eager bits. */
static void test_replay_equals_eager(void **state)
{
    (void)state;
    mlp_node *node = make_node();
    const int32_t counts[] = { 4, 3, 5 };
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        int32_t n = counts[c];
        float eager[ROWS * D], replay[ROWS * D];
        bool replayed;
        assert_mstar_ok(mlp_node_step(node, 1, n, false, eager, &replayed));
        assert_false(replayed);
        assert_mstar_ok(mlp_node_step(node, 1, n, true, replay, &replayed));
        assert_true(replayed);
        assert_memory_equal(eager, replay, sizeof(float) * (size_t)n * D);
    }
    mlp_node_destroy(node);
}

/* An eager step's profile names each op with its count: L fused layers (norm, linear, silu,
 * residual). */
static void test_profile_counts_ops(void **state)
{
    (void)state;
    mlp_node *node = make_node();
    ref_profile *p;
    assert_mstar_ok(ref_profile_create(mstar_test_host_backend(), 64, &p));
    ref_mlp_set_profile(mlp_node_model(node), p);
    assert_mstar_ok(mlp_node_step(node, 0, 4, false, NULL, NULL));
    ref_mlp_set_profile(mlp_node_model(node), NULL);
    ref_profile_row rows[8];
    size_t n;
    assert_mstar_ok(ref_profile_summary(p, rows, 8, &n));
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].op, "rmsnorm+linear+silu+residual");
    assert_int_equal(rows[0].calls, L);
    assert_true(rows[0].total_us >= 0);
    /* Too little room for the names is an error, not a short summary. */
    assert_mstar_status(ref_profile_summary(p, rows, 0, &n), MSTAR_ERANGE);
    /* Marks out of order are refused. */
    ref_profile_reset(p);
    assert_mstar_status(ref_profile_op_end(p, mlp_node_stream(node)), MSTAR_ESTATE);
    assert_mstar_ok(ref_profile_op_begin(p, mlp_node_stream(node), "a"));
    assert_mstar_status(ref_profile_op_begin(p, mlp_node_stream(node), "b"), MSTAR_ESTATE);
    ref_profile_destroy(p);
    mlp_node_destroy(node);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    mlp_node *node = make_node();
    assert_mstar_status(mlp_node_step(node, ROWS - 2, 3, false, NULL, NULL), MSTAR_ERANGE);
    assert_mstar_status(mlp_node_step(node, -1, 1, false, NULL, NULL), MSTAR_ERANGE);
    assert_mstar_status(mlp_node_step(node, 0, 0, false, NULL, NULL), MSTAR_ERANGE);
    assert_mstar_ok(mlp_node_begin(node, 0, 1, false, -1, NULL));
    assert_mstar_status(mlp_node_begin(node, 0, 1, false, -1, NULL), MSTAR_ESTATE);
    assert_mstar_ok(mlp_node_end(node, NULL));
    assert_mstar_status(mlp_node_end(node, NULL), MSTAR_ESTATE);
    mlp_node_destroy(node);

    mlp_node_options o = {
        .model = tiny(), .max_rows = 4, .batch_sizes = sizes, .n_batch_sizes = 3
    };
    assert_mstar_status(mlp_node_create(mstar_test_host_backend(), &o, &node),
                        MSTAR_EINVAL); /* bs 8 > 4 rows */
    o.max_rows = 8;
    o.model.layers = 0;
    assert_mstar_status(mlp_node_create(mstar_test_host_backend(), &o, &node), MSTAR_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_matches_plain_computation),
        cmocka_unit_test(test_replay_equals_eager),
        cmocka_unit_test(test_profile_counts_ops),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, mstar_test_host_backend_setup,
                                  mstar_test_host_backend_teardown);
}
