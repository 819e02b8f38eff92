/*
 * test_ref_linear.c — the fused linear layer of the kernel table (ref_ops.h: ref_linear) on the
 * host backend: each epilogue, with and without the norm prologue and gathered rows, against a
 * plain double computation, the rope epilogue against the separate ops; descriptors that make no
 * sense refused with MSTAR_EINVAL before anything is written.
 */
#include "mstar_test.h"

#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 3, K = 12, M = 10, TABLE = 5 };

static mstar_backend *B;
static mstar_stream *S;
static const ref_ops *OPS;
static uint64_t rng = 17;

static int setup(void **state)
{
    (void)state;
    if (mstar_test_host_open(&B, &S) != 0)
        return -1;
    return ref_ops_for(B, &OPS) == MSTAR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    mstar_test_host_close(B, S);
    return 0;
}

static void fill(float *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (float)((double)(mstar_test_rand(&rng) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct fixture {
    float table[TABLE * K], w[M * K], g[K], res[TABLE * M], out[N * M];
    float norm_scratch[N * K], acc_scratch[N * M];
    float before[N * M]; /* out as made, for tests that check what changed in it */
    int32_t rows[N];
} fixture;

/* A fixture of random values (freed by the test), rows 4, 0 and 2 of the table gathered. */
static fixture *make(void)
{
    fixture *f = malloc(sizeof(*f));
    assert_non_null(f);
    fill(f->table, TABLE * K);
    fill(f->w, M * K);
    fill(f->g, K);
    fill(f->res, TABLE * M);
    fill(f->out, N * M);
    memcpy(f->before, f->out, sizeof(f->before));
    const int32_t rows[N] = { 4, 0, 2 };
    memcpy(f->rows, rows, sizeof(rows));
    return f;
}

/* acc[i][j] of row i: x' = table[rows[i]] (normalized with g when norm) times w^T. */
static double acc_of(const fixture *f, bool norm, int i, int j)
{
    const float *x = f->table + f->rows[i] * K;
    double ss = 0, a = 0;
    for (int q = 0; q < K; q++)
        ss += (double)x[q] * x[q];
    double scale = norm ? 1.0 / sqrt(ss / K + 1e-5) : 1.0;
    for (int q = 0; q < K; q++)
        a += (double)f->w[j * K + q] * x[q] * scale * (norm ? f->g[q] : 1.0);
    return a;
}

static double silu(double v)
{
    return v / (1 + exp(-v));
}

static void run(fixture *f, ref_epilogue epi, bool norm, float *out)
{
    ref_linear l = { .x = f->table,
                     .x_rows = f->rows,
                     .norm = norm ? f->g : NULL,
                     .eps = 1e-5f,
                     .w = f->w,
                     .n = N,
                     .k = K,
                     .m = M,
                     .epilogue = epi,
                     .residual = epi == REF_EPI_ADD        ? (const void *)f->res
                                 : epi == REF_EPI_SILU_ADD ? (const void *)f->res
                                                           : NULL,
                     .residual_rows = epi == REF_EPI_ADD ? f->rows : NULL,
                     .out = out,
                     .norm_scratch = f->norm_scratch,
                     .acc_scratch = f->acc_scratch };
    assert_mstar_ok(OPS->linear(NULL, S, &l));
    assert_mstar_ok(mstar_stream_synchronize(S));
}

static void check(double got, double want)
{
    if (fabs(got - want) > 1e-5 * (1 + fabs(want)))
        fail_msg("got %.9g, want %.9g", got, want);
}

static void test_epilogues(void **state)
{
    (void)state;
    fixture *f = make();
    float out[N * M];
    for (int norm = 0; norm <= 1; norm++) {
        run(f, REF_EPI_STORE, norm, out);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M; j++)
                check(out[i * M + j], acc_of(f, norm, i, j));
        /* A gathered residual: row rows[i] of res, plus acc. */
        run(f, REF_EPI_ADD, norm, out);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M; j++)
                check(out[i * M + j], f->res[f->rows[i] * M + j] + acc_of(f, norm, i, j));
        /* A silu residual: row i of res. */
        run(f, REF_EPI_SILU_ADD, norm, out);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M; j++)
                check(out[i * M + j], f->res[i * M + j] + silu(acc_of(f, norm, i, j)));
        /* Gated: [N, M/2] out of gate columns 0..4 and up columns 5..9. */
        run(f, REF_EPI_GATED, norm, out);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M / 2; j++)
                check(out[i * (M / 2) + j],
                      silu(acc_of(f, norm, i, j)) * acc_of(f, norm, i, M / 2 + j));
    }
    free(f);
}

/* An in-place residual (out is the residual) adds onto out. */
static void test_add_in_place(void **state)
{
    (void)state;
    fixture *f = make();
    ref_linear l = { .x = f->table,
                     .x_rows = f->rows,
                     .w = f->w,
                     .n = N,
                     .k = K,
                     .m = M,
                     .epilogue = REF_EPI_ADD,
                     .residual = f->out,
                     .out = f->out,
                     .norm_scratch = f->norm_scratch };
    assert_mstar_ok(OPS->linear(NULL, S, &l));
    assert_mstar_ok(mstar_stream_synchronize(S));
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++)
            check(f->out[i * M + j], f->before[i * M + j] + acc_of(f, false, i, j));
    free(f);
}

/* A qkv projection with rope and the KV write as its epilogue: the same bits as the GEMM then
 * the rope_kv_write op, on the host; the pages written at the tokens' slots. */
static void test_rope_kv(void **state)
{
    (void)state;
    enum { HEADS = 2, HD = 4, Q = HEADS * HD, PAGES = 3, PS = 2 };
    fixture *f = make();
    float w[3 * Q * K], got[N * 3 * Q], want[N * 3 * Q];
    float kp[2][PAGES * PS * Q], vp[2][PAGES * PS * Q];
    fill(w, 3 * Q * K);
    memset(kp, 0, sizeof(kp));
    memset(vp, 0, sizeof(vp));
    const int32_t pos[N] = { 0, 5, 9 }, t2p[N] = { 1, 2, 2 }, t2c[N] = { 1, 0, 1 };
    ref_rope_kv rope = { .pos = pos,
                         .heads = HEADS,
                         .head_dim = HD,
                         .theta = 10000.0f,
                         .k_pages = kp[0],
                         .v_pages = vp[0],
                         .page_size = PS,
                         .token_to_page = t2p,
                         .token_to_cache = t2c };
    ref_linear l = { .x = f->table,
                     .x_rows = f->rows,
                     .norm = f->g,
                     .eps = 1e-5f,
                     .w = w,
                     .n = N,
                     .k = K,
                     .m = 3 * Q,
                     .epilogue = REF_EPI_ROPE_KV,
                     .out = got,
                     .norm_scratch = f->norm_scratch,
                     .rope = rope };
    assert_mstar_ok(OPS->linear(NULL, S, &l));
    l.epilogue = REF_EPI_STORE;
    l.out = want;
    assert_mstar_ok(OPS->linear(NULL, S, &l));
    assert_mstar_ok(OPS->rope_kv_write(S, want, 3 * Q, pos, N, HEADS, HD, 10000.0f, kp[1], vp[1],
                                       PS, t2p, t2c));
    assert_mstar_ok(mstar_stream_synchronize(S));
    assert_memory_equal(got, want, sizeof(got));
    assert_memory_equal(kp[0], kp[1], sizeof(kp[0]));
    assert_memory_equal(vp[0], vp[1], sizeof(vp[0]));
    /* Token 1's v (unrotated) sits at page 2, slot 0. */
    assert_memory_equal(vp[0] + (2 * PS + 0) * Q, got + 1 * 3 * Q + 2 * Q, Q * sizeof(float));
    /* A head_dim that does not make m is refused. */
    l.rope.head_dim = 3;
    l.epilogue = REF_EPI_ROPE_KV;
    assert_mstar_status(OPS->linear(NULL, S, &l), MSTAR_EINVAL);
    free(f);
}

static void test_bad_descriptors(void **state)
{
    (void)state;
    fixture *f = make();
    ref_linear good = {
        .x = f->table, .w = f->w, .n = N, .k = K, .m = M, .epilogue = REF_EPI_STORE, .out = f->out
    };
    ref_linear bad[9];
    for (size_t i = 0; i < 9; i++)
        bad[i] = good;
    bad[0].k = 0;
    bad[1].out = (void *)f->table; /* out is x */
    bad[2].out_f32 = true, bad[2].epilogue = REF_EPI_ADD, bad[2].residual = f->out;
    bad[3].epilogue = REF_EPI_ADD;                           /* no residual */
    bad[4].epilogue = REF_EPI_ADD, bad[4].residual = f->res; /* neither out nor gathered */
    bad[5].epilogue = REF_EPI_SILU_ADD, bad[5].residual = f->out,
    bad[5].acc_scratch = f->acc_scratch;
    bad[6].epilogue = REF_EPI_GATED, bad[6].m = M - 1, bad[6].acc_scratch = f->acc_scratch;
    bad[7].epilogue = (ref_epilogue)9;
    bad[8].norm = f->g; /* a norm without its scratch */
    for (size_t i = 0; i < 9; i++) {
        assert_mstar_status(OPS->linear(NULL, S, &bad[i]), MSTAR_EINVAL);
        assert_non_null(strstr(mstar_last_error(), "linear"));
    }
    assert_mstar_ok(mstar_stream_synchronize(S));
    assert_memory_equal(f->before, f->out, sizeof(f->before));
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epilogues),
        cmocka_unit_test(test_add_in_place),
        cmocka_unit_test(test_rope_kv),
        cmocka_unit_test(test_bad_descriptors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
