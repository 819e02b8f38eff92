/*
 * test_cuda_pinning.c — device pinning for cuda:N > 0 (design.md G-25): a backend for the
 * last GPU allocates, creates streams and captures on that GPU even when the thread's current
 * device is 0. Skips (77) without two GPUs.
 */
#include "mstar_test.h"

#include <cuda_runtime_api.h>

static void test_device_pinning(void **state)
{
    (void)state;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2)
        mstar_test_skip("device pinning needs two GPUs");
    mstar_backend *b = mstar_test_cuda_or_skip(count - 1);
    cudaSetDevice(0);
    void *dev = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 4096, &dev));
    struct cudaPointerAttributes attr;
    assert_int_equal(cudaPointerGetAttributes(&attr, dev), cudaSuccess);
    assert_int_equal(attr.device, count - 1);
    mstar_stream *s = NULL;
    cudaSetDevice(0);
    assert_mstar_ok(mstar_stream_create(b, 0, &s));
    int dev_of_stream = -1;
    assert_int_equal(cudaStreamGetDevice((cudaStream_t)mstar_stream_native(s), &dev_of_stream),
                     cudaSuccess);
    assert_int_equal(dev_of_stream, count - 1);
    cudaSetDevice(0);
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar_memset_async(s, dev, 1, 4096));
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    cudaSetDevice(0);
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_mstar_ok(mstar_stream_synchronize(s));
    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_device_free(b, dev));
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_pinning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
