/*
 * test_cuda_graph_pool.c — graph pools under real CUDA stream capture: mstar_alloc on the
 * capturing stream comes from the pool (cudaMalloc during capture), taken/kept are exact, a
 * replay computes, and a capture the runtime invalidated leaves pool and stream usable for the
 * next capture (G-1 on the device). Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include <cuda_runtime_api.h>

struct run_ctx {
    int *out;
    bool invalidate;
};

static mstar_status run(mstar_stream *s, void *p)
{
    struct run_ctx *c = p;
    void *scratch = NULL;
    mstar_status st = mstar_alloc(s, 1 << 20, &scratch);
    if (st == MSTAR_OK)
        st = mstar_memset_async(s, scratch, 0x01, 1 << 20);
    if (st == MSTAR_OK)
        st = mstar_alloc(s, 256, (void **)&c->out);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(s, c->out, scratch, 256, MSTAR_MEMCPY_D2D);
    if (st == MSTAR_OK && c->invalidate)
        cudaStreamSynchronize((cudaStream_t)mstar_stream_native(s)); /* illegal in a capture */
    if (st == MSTAR_OK)
        st = mstar_free(s, scratch);
    return st;
}

static void test_pool_under_stream_capture(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *s = NULL;
    mstar_graph_pool *pool = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    assert_mstar_ok(mstar_graph_pool_create(b, "gpu_pool", &pool));
    struct run_ctx c = { NULL, true };
    mstar_graph *g = NULL;
    assert_mstar_status(mstar_capture_into_graph(s, pool, run, &c, 0, &g, NULL), MSTAR_EDEVICE);
    assert_false(mstar_stream_is_capturing(s));
    mstar_alloc_stats ps;
    mstar_graph_pool_stats(pool, &ps);
    assert_int_equal(ps.allocated, 0);
    c.invalidate = false;
    mstar_capture_stats st;
    assert_mstar_ok(mstar_capture_into_graph(s, pool, run, &c, MSTAR_CAPTURE_KEEP_GRAPH, &g, &st));
    assert_int_equal(st.kept, 512);
    assert_int_equal(st.nodes, 2);
    assert_non_null(mstar_graph_native(g));
    assert_mstar_ok(mstar_graph_launch(g, s));
    int host[64];
    assert_mstar_ok(mstar_memcpy_async(s, host, c.out, sizeof(host), MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(host[10], 0x01010101);
    mstar_graph_destroy(g);
    mstar_graph_pool_destroy(pool);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_under_stream_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
