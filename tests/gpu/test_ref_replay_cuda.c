/*
 * test_ref_replay_cuda.c — the reference model on a GPU (bf16 kernels, real CUDA graphs):
 *   - replayed outputs against eager ones at every batch size 1..64, padded ones included:
 *     relative difference below 1e-2 (the bar; the kernels are deterministic, so equal
 *     bits are expected), KV streams alike, padding rows never touching a live page (pages
 *     compared before and after each step), no page taken for padding;
 *   - the bf16 kernels against the fp32 host kernels on the same weights and tokens, with the
 *     one-kernel linear layers and with MSTAR_REF_SKINNY_GEMM sending them to cuBLAS.
 * Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include "ref_twin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_cuda_replay_matches_eager_every_batch_size(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    ref_model_config cfg = ref_model_config_default();
    mstar_kv_cache_config kv = {
        .num_pages = 1024, .page_size = 16, .num_labels = 1, .max_seq_len = 512
    };
    ref_capture_config captures[] = { { .walk = "decode" } }; /* 1, 2, 4, ..., 64 */
    ref_twin t;
    assert_mstar_ok(ref_twin_create(&t, b, &cfg, &kv, captures, 1, 1e-2));
    int padded;
    double worst = ref_twin_replay_every_batch_size(&t, 1000, 64, &padded);
    print_message("bf16 replay vs eager over batch sizes 1..64 (%d padded): largest relative "
                  "difference %g\n",
                  padded, worst);
    assert_int_equal(padded, 64 - 7);
    ref_twin_destroy(&t);
    mstar_backend_destroy(b);
}

/* Prefill three prompts and decode eight steps on both backends, the GPU fed the host's tokens:
 * every row's logits within 5e-2 of the fp32 ones (relative to the largest), which bf16 storage
 * through two layers stays well inside, and a wrong kernel does not. `skinny` is the value of
 * MSTAR_REF_SKINNY_GEMM for the GPU model (NULL: unset, every step's linear layers one kernel
 * each; "0": all on cuBLAS and the separate kernels; "4": the 26-token prefill on cuBLAS, the
 * 3-row decode steps one kernel). */
static void kernels_match_host(const char *skinny)
{
    mstar_backend *gpu = mstar_test_cuda_or_skip(0), *cpu;
    mstar_device host = { MSTAR_DEVICE_CPU, 0 };
    assert_mstar_ok(mstar_backend_create(host, &cpu));
    ref_model_config cfg = ref_model_config_default();
    mstar_kv_cache_config kv = {
        .num_pages = 64, .page_size = 16, .num_labels = 1, .max_seq_len = 256
    };
    ref_eager *g, *h;
    if (skinny != NULL)
        assert_int_equal(setenv("MSTAR_REF_SKINNY_GEMM", skinny, 1), 0);
    mstar_status made = ref_eager_create(&cfg, &kv, gpu, &g);
    unsetenv("MSTAR_REF_SKINNY_GEMM");
    assert_mstar_ok(made);
    assert_mstar_ok(ref_eager_create(&cfg, &kv, cpu, &h));
    int64_t reqs[3] = { 0, 1, 2 };
    int32_t spans[3] = { 9, 4, 13 }, tokens[26], ones[3] = { 1, 1, 1 };
    for (int i = 0; i < 26; i++)
        tokens[i] = (i * 97 + 5) % cfg.vocab;
    for (int i = 0; i < 3; i++) {
        assert_mstar_ok(ref_eager_open(g, reqs[i]));
        assert_mstar_ok(ref_eager_open(h, reqs[i]));
    }
    size_t v = (size_t)cfg.vocab;
    float *lg = malloc(3 * v * sizeof(float)), *lh = malloc(3 * v * sizeof(float));
    int32_t ng[3], nh[3] = { 0, 0, 0 };
    double worst = 0;
    for (int step = 0; step <= 8; step++) {
        int32_t fed[3];
        memcpy(fed, nh, sizeof(fed)); /* after the prefill: the host's last tokens, to both */
        const int32_t *sp = step == 0 ? spans : ones, *in = step == 0 ? tokens : fed;
        assert_mstar_ok(ref_eager_step(g, reqs, sp, 3, in, lg, ng));
        assert_mstar_ok(ref_eager_step(h, reqs, sp, 3, in, lh, nh));
        for (size_t r = 0; r < 3; r++) {
            double diff = 0, scale = 0;
            for (size_t j = 0; j < v; j++) {
                diff = fmax(diff, fabs((double)lg[r * v + j] - lh[r * v + j]));
                scale = fmax(scale, fabs((double)lh[r * v + j]));
            }
            double rel = diff / scale;
            worst = fmax(worst, rel);
            if (rel > 5e-2)
                fail_msg("step %d row %zu: bf16 logits differ from fp32 by %g (relative)", step, r,
                         rel);
        }
    }
    print_message("bf16 CUDA vs fp32 host logits (MSTAR_REF_SKINNY_GEMM %s): largest relative "
                  "difference %g\n",
                  skinny != NULL ? skinny : "unset", worst);
    free(lg);
    free(lh);
    ref_eager_destroy(g);
    ref_eager_destroy(h);
    mstar_backend_destroy(cpu);
    mstar_backend_destroy(gpu);
}

static void test_cuda_kernels_match_host(void **state)
{
    (void)state;
    kernels_match_host(NULL);
}

static void test_cuda_cublas_path_matches_host(void **state)
{
    (void)state;
    kernels_match_host("0");
    kernels_match_host("4");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_replay_matches_eager_every_batch_size),
        cmocka_unit_test(test_cuda_kernels_match_host),
        cmocka_unit_test(test_cuda_cublas_path_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
