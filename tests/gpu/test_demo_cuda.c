/*
 * test_demo_cuda.c — `mstar demo --device cuda` end to end on a GPU (the workers' bf16 kernels,
 * real CUDA graphs, transports staging through device memory): the default run passes its
 * self-check and leak check, once with captured graphs and once with --no-graphs, the encoder's
 * states move over the CUDA IPC route (the summary's route column), and the
 * decoder's tokens per second of step time are printed for both, with their ratio (a figure for
 * the report, not an assertion). Skips (77) without a GPU.
 */
#include "demo_harness.h"

static double decoder_tok_per_s(const demo_result *r)
{
    const char *at = strstr(r->out, "\"decoder_per_s\": ");
    assert_non_null(at);
    return strtod(at + strlen("\"decoder_per_s\": "), NULL);
}

static void test_cuda_demo_graphs_against_eager(void **state)
{
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_backend_destroy(b); /* only asked whether there is a GPU; the demo opens its own */
    const char *graphs[] = { "--device", "cuda", "--json", NULL };
    const char *eager[] = { "--device", "cuda", "--no-graphs", "--json", NULL };
    demo_result g = demo_run(600, graphs);
    demo_expect_pass(&g, 64);
    assert_int_equal(demo_json_int(&g, "completed"), 64);
    demo_result e = demo_run(600, eager);
    demo_expect_pass(&e, 64);
    double tg = decoder_tok_per_s(&g), te = decoder_tok_per_s(&e);
    print_message("mstar demo --device cuda: decoder %.1f tok/s with graphs, %.1f tok/s eager "
                  "(--no-graphs): %.2fx\n",
                  tg, te, te > 0 ? tg / te : 0.0);
    /* Every decode step of the graphs run replayed a captured bucket; none of the eager run's. */
    assert_true(demo_json_steps(&g, "decode", "replays") > 0);
    assert_int_equal(demo_json_steps(&g, "decode", "eager"), 0);
    assert_int_equal(demo_json_steps(&e, "decode", "replays"), 0);
    /* The encoder's states (device tensors) move over the CUDA IPC route (MSTAR_CUDA_IPC=AUTO);
     * the prompts, host tensors, over the arena. */
    char route[32];
    assert_string_equal(demo_json_edge_route(&g, "enc_hidden", route, sizeof(route)), "cuda_ipc");
    assert_string_equal(demo_json_edge_route(&g, "prompt", route, sizeof(route)), "arena");
    demo_result_free(&g);
    demo_result_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_demo_graphs_against_eager),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
