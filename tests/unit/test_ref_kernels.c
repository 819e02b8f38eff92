/*
 * test_ref_kernels.c — the reference model's fp32 host kernels against naive formulas computed in
 * double, and paged attention against dense attention over the same K and V.
 */
#include "mstar_test.h"

#include "kernels_host.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 2024;

static float frand(void)
{
    return (float)((double)(mstar_test_rand(&rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_array(size_t n)
{
    float *a = malloc(n * sizeof(float));
    assert_non_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = frand();
    return a;
}

static void assert_close(double got, double want, double tol)
{
    if (fabs(got - want) > tol * (1.0 + fabs(want)))
        fail_msg("got %.9g, want %.9g (tolerance %g)", got, want, tol);
}

static void test_embed_and_gather(void **state)
{
    (void)state;
    float *table = rand_array(10 * 6);
    int32_t tokens[] = { 3, 0, 9, 3 };
    float out[4 * 6];
    ref_host_embed(table, 6, tokens, 4, out);
    for (int i = 0; i < 4; i++)
        assert_memory_equal(out + i * 6, table + tokens[i] * 6, 6 * sizeof(float));
    int32_t idx[] = { 2, 2, 0 };
    float g[3 * 6];
    ref_host_gather_rows(out, 6, idx, 3, g);
    assert_memory_equal(g, out + 12, 6 * sizeof(float));
    assert_memory_equal(g + 6, out + 12, 6 * sizeof(float));
    assert_memory_equal(g + 12, out, 6 * sizeof(float));
    free(table);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    enum { N = 3, D = 50 };
    float *x = rand_array(N * D), *w = rand_array(D), out[N * D];
    ref_host_rmsnorm(x, w, N, D, 1e-5f, out);
    for (int i = 0; i < N; i++) {
        double ss = 0;
        for (int j = 0; j < D; j++)
            ss += (double)x[i * D + j] * x[i * D + j];
        double scale = 1.0 / sqrt(ss / D + 1e-5);
        for (int j = 0; j < D; j++)
            assert_close(out[i * D + j], x[i * D + j] * scale * w[j], 1e-5);
    }
    free(x);
    free(w);
}

static void test_matmul_nt(void **state)
{
    (void)state;
    /* m = 10 exercises the blocked four-at-a-time path and the remainder. */
    enum { N = 3, K = 37, M = 10 };
    float *x = rand_array(N * K), *w = rand_array(M * K), out[N * M];
    ref_host_matmul_nt(x, w, N, K, M, false, out);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < M; j++) {
            double acc = 0, mag = 0;
            for (int p = 0; p < K; p++) {
                acc += (double)x[i * K + p] * w[j * K + p];
                mag += fabs((double)x[i * K + p] * w[j * K + p]);
            }
            if (fabs(out[i * M + j] - acc) > 1e-6 * (1 + mag))
                fail_msg("out[%d,%d] = %g, want %g", i, j, out[i * M + j], acc);
        }
    }
    /* A row's result does not depend on the other rows of the call: the same bits alone. */
    float one[M];
    ref_host_matmul_nt(x + 2 * K, w, 1, K, M, false, one);
    assert_memory_equal(one, out + 2 * M, sizeof(one));
    /* accumulate adds the product to what out held (a residual folded into the GEMM). */
    float sum[M];
    for (int j = 0; j < M; j++)
        sum[j] = (float)j - 4.5f;
    ref_host_matmul_nt(x + 2 * K, w, 1, K, M, true, sum);
    for (int j = 0; j < M; j++)
        assert_true(sum[j] == one[j] + ((float)j - 4.5f));
    free(x);
    free(w);
}

static void test_rope(void **state)
{
    (void)state;
    enum { N = 4, H = 2, DH = 8, LD = 20 };
    float *x = rand_array(N * LD), *orig = malloc(N * LD * sizeof(float));
    memcpy(orig, x, N * LD * sizeof(float));
    int32_t pos[N] = { 0, 1, 17, 100 };
    ref_host_rope(x, LD, pos, N, H, DH, 10000.0f);
    for (int i = 0; i < N; i++) {
        for (int h = 0; h < H; h++) {
            for (int d = 0; d < DH / 2; d++) {
                double ang = pos[i] * pow(10000.0, -2.0 * d / DH);
                double x1 = orig[i * LD + h * DH + d], x2 = orig[i * LD + h * DH + d + DH / 2];
                assert_close(x[i * LD + h * DH + d], x1 * cos(ang) - x2 * sin(ang), 1e-4);
                assert_close(x[i * LD + h * DH + d + DH / 2], x2 * cos(ang) + x1 * sin(ang), 1e-4);
            }
        }
        /* Elements past the heads (the rest of the row) are untouched. */
        for (int j = H * DH; j < LD; j++)
            assert_true(x[i * LD + j] == orig[i * LD + j]);
    }
    /* Position 0 is the identity. */
    assert_memory_equal(x, orig, H * DH * sizeof(float));
    free(x);
    free(orig);
}

static void test_kv_write(void **state)
{
    (void)state;
    enum { PAGES = 4, PS = 3, KVD = 5, LD = 12, N = 3 };
    float kp[PAGES * PS * KVD] = { 0 }, vp[PAGES * PS * KVD] = { 0 };
    float *k = rand_array(N * LD), *v = rand_array(N * LD);
    int32_t t2p[N] = { 2, 0, 3 }, t2c[N] = { 1, 0, 2 };
    ref_host_kv_write(kp, vp, PS, KVD, k, v, LD, t2p, t2c, N);
    for (int i = 0; i < N; i++) {
        size_t at = ((size_t)t2p[i] * PS + (size_t)t2c[i]) * KVD;
        assert_memory_equal(kp + at, k + i * LD, KVD * sizeof(float));
        assert_memory_equal(vp + at, v + i * LD, KVD * sizeof(float));
    }
    int written = 0;
    for (int i = 0; i < PAGES * PS * KVD; i++)
        written += kp[i] != 0.0f;
    assert_int_equal(written, N * KVD);
    free(k);
    free(v);
}

/* Dense causal attention in double over contiguous K and V: the naive formula. */
static void dense_attention(const float *q, const float *k, const float *v, int len, int dh,
                            double *out)
{
    double s[256], mx = -INFINITY, sum = 0;
    for (int p = 0; p < len; p++) {
        double dot = 0;
        for (int d = 0; d < dh; d++)
            dot += (double)q[d] * k[p * dh + d];
        s[p] = dot / sqrt(dh);
        mx = s[p] > mx ? s[p] : mx;
    }
    for (int p = 0; p < len; p++)
        sum += (s[p] = exp(s[p] - mx));
    for (int d = 0; d < dh; d++) {
        double acc = 0;
        for (int p = 0; p < len; p++)
            acc += s[p] * v[p * dh + d];
        out[d] = len > 0 ? acc / sum : 0.0;
    }
}

/* Two rows whose streams sit in scattered pages; every token of both attends causally. The
 * paged result equals dense attention over the same K and V laid out contiguously. */
static void test_paged_attention_equals_dense(void **state)
{
    (void)state;
    enum { H = 2, DH = 16, KVD = H * DH, PS = 4, PAGES = 12, PPR = 5, L0 = 13, L1 = 6 };
    int32_t table[2 * PPR] = { 7, 2, 9, 4, 0, 5, 11, 0, 0, 0 };
    int lens[2] = { L0, L1 };
    float *kp = rand_array(PAGES * PS * KVD), *vp = rand_array(PAGES * PS * KVD);
    enum { T = L0 + L1 };
    float *q = rand_array(T * KVD), out[T * KVD];
    int32_t token_row[T], kv_len[T];
    for (int t = 0; t < T; t++) {
        token_row[t] = t < L0 ? 0 : 1;
        kv_len[t] = t < L0 ? t + 1 : t - L0 + 1;
    }
    ref_host_paged_attention(q, KVD, kp, vp, PS, table, PPR, token_row, kv_len, T, H, DH, out);
    for (int t = 0; t < T; t++) {
        int r = token_row[t];
        for (int h = 0; h < H; h++) {
            /* Gather this row's stream, head h, into dense arrays. */
            float kd[L0 * DH], vd[L0 * DH];
            for (int p = 0; p < lens[r]; p++) {
                size_t at = ((size_t)table[r * PPR + p / PS] * PS + p % PS) * KVD + h * DH;
                memcpy(kd + p * DH, kp + at, DH * sizeof(float));
                memcpy(vd + p * DH, vp + at, DH * sizeof(float));
            }
            double want[DH];
            dense_attention(q + t * KVD + h * DH, kd, vd, kv_len[t], DH, want);
            for (int d = 0; d < DH; d++)
                assert_close(out[t * KVD + h * DH + d], want[d], 1e-5);
        }
    }
    /* A token with kv length 0 (a padding row's) reads nothing and gets zeros. */
    int32_t zero = 0, row0 = 0;
    float z[KVD];
    memset(z, 0x7f, sizeof(z));
    ref_host_paged_attention(q, KVD, kp, vp, PS, table, PPR, &row0, &zero, 1, H, DH, z);
    for (int d = 0; d < KVD; d++)
        assert_true(z[d] == 0.0f);
    free(kp);
    free(vp);
    free(q);
}

static void test_silu_add_argmax(void **state)
{
    (void)state;
    enum { N = 2, F = 7 };
    float *gu = rand_array(N * 2 * F), out[N * F];
    ref_host_silu_mul(gu, N, F, out);
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < F; j++) {
            double g = gu[i * 2 * F + j], u = gu[i * 2 * F + F + j];
            assert_close(out[i * F + j], g / (1 + exp(-g)) * u, 1e-6);
        }
    }
    float a[3] = { 1, 2, 3 }, b[3] = { 0.0f, -2, 4 };
    ref_host_silu_add(a, b, 3);
    assert_true(a[0] == 1.0f); /* silu(0) = 0 */
    assert_close(a[1], 2 + -2 / (1 + exp(2.0)), 1e-6);
    assert_close(a[2], 3 + 4 / (1 + exp(-4.0)), 1e-6);
    float logits[2 * 4] = { 0.1f, 0.9f, 0.9f, -1, -3, -2, -5, -2.5f };
    int32_t best[2];
    ref_host_argmax(logits, 2, 4, best);
    assert_int_equal(best[0], 1); /* ties go to the first */
    assert_int_equal(best[1], 1);
    free(gu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embed_and_gather),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_matmul_nt),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_kv_write),
        cmocka_unit_test(test_paged_attention_equals_dense),
        cmocka_unit_test(test_silu_add_argmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
