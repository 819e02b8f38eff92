/*
 * test_cuda_piecewise.c — the piecewise runner under real CUDA stream capture: two regions of one
 * node share a graph pool, each copies its input through pool scratch into its output; region B
 * captured first replays over A's scratch, and A's output view stays intact because it lives
 * outside the pool (G-18); a run zeroes the rows past the real ones on the device; get's copy
 * survives the next run. Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include <string.h>

#define W 4 /* int32 values per row */

static mstar_status region_fn(void *user, const mstar_piecewise_call *call,
                              mstar_tensor_map *outputs)
{
    (void)user;
    const mstar_tensor *h = mstar_tensor_map_get(call->static_inputs, "h");
    size_t nbytes = (size_t)mstar_tensor_nbytes(h);
    void *tmp = NULL;
    mstar_tensor y;
    mstar_status st = mstar_tensor_alloc(call->stream, MSTAR_DTYPE_INT32, h->ndim, h->shape, &y);
    if (st == MSTAR_OK)
        st = mstar_alloc(call->stream, nbytes, &tmp);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(call->stream, tmp, h->data, nbytes, MSTAR_MEMCPY_D2D);
    if (st == MSTAR_OK)
        st = mstar_memcpy_async(call->stream, y.data, tmp, nbytes, MSTAR_MEMCPY_D2D);
    if (tmp != NULL)
        mstar_free(call->stream, tmp);
    if (st == MSTAR_OK)
        return mstar_tensor_map_set_owned(outputs, "y", &y, call->stream);
    mstar_tensor_free(call->stream, &y);
    return st;
}

static mstar_status region_statics(void *user, const mstar_piecewise_shape *shape,
                                   mstar_stream *stream, mstar_tensor_map *out)
{
    (void)user;
    int64_t dims[2] = { shape->bs, W };
    mstar_tensor h;
    mstar_status st = mstar_tensor_alloc(stream, MSTAR_DTYPE_INT32, 2, dims, &h);
    if (st == MSTAR_OK)
        st = mstar_memset_async(stream, h.data, 0, (size_t)mstar_tensor_nbytes(&h));
    return st != MSTAR_OK ? st : mstar_tensor_map_set_owned(out, "h", &h, stream);
}

/* Stage rows × W copies of `value` to the device and run the region. */
static mstar_piecewise_output run(mstar_piecewise_runner *pw, mstar_stream *s, int64_t rows,
                                  int32_t value)
{
    int32_t host[4 * W];
    for (int64_t i = 0; i < rows * W; i++)
        host[i] = value;
    int64_t dims[2] = { rows, W };
    mstar_tensor d;
    assert_mstar_ok(mstar_tensor_alloc(s, MSTAR_DTYPE_INT32, 2, dims, &d));
    assert_mstar_ok(
        mstar_memcpy_async(s, d.data, host, (size_t)mstar_tensor_nbytes(&d), MSTAR_MEMCPY_H2D));
    mstar_tensor_map *in;
    assert_mstar_ok(mstar_tensor_map_create(&in));
    assert_mstar_ok(mstar_tensor_map_set_owned(in, "h", &d, s));
    mstar_piecewise_output out;
    assert_mstar_ok(mstar_piecewise_runner_run(pw, in, NULL, NULL, 0, rows, &out));
    assert_mstar_ok(mstar_stream_synchronize(s));
    mstar_tensor_map_destroy(in);
    return out;
}

static void to_host(mstar_stream *s, const void *dev, int32_t *host, size_t n)
{
    assert_mstar_ok(mstar_memcpy_async(s, host, dev, n * sizeof(int32_t), MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(s));
}

static void test_regions_share_a_pool_under_stream_capture(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *s = NULL;
    mstar_graph_pool *pool = NULL;
    mstar_step_runner *sr = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    assert_mstar_ok(mstar_graph_pool_create(b, "gpu_node", &pool));
    assert_mstar_ok(mstar_step_runner_create(b, s, &sr));
    static const int64_t sizes[] = { 2, 4 };
    mstar_piecewise_config c;
    mstar_piecewise_config_init(&c);
    c.capture_fn = region_fn;
    c.make_static_inputs = region_statics;
    c.capture_batch_sizes = sizes;
    c.n_capture_batch_sizes = 2;
    c.seq_len = 1;
    mstar_piecewise_runner *a = NULL, *bb = NULL;
    mstar_piecewise_runner_options o = { "a", &c, sr, pool, 0, MSTAR_DTYPE_INVALID, "gpu_node" };
    assert_mstar_ok(mstar_piecewise_runner_create(&o, &a));
    o.label = "b";
    assert_mstar_ok(mstar_piecewise_runner_create(&o, &bb));
    assert_mstar_ok(mstar_piecewise_runner_prepare_for_capture(a, NULL, NULL));
    assert_mstar_ok(mstar_piecewise_runner_prepare_for_capture(bb, NULL, NULL));
    assert_mstar_ok(mstar_step_runner_build_graph_buffers(sr));
    assert_mstar_ok(mstar_piecewise_runner_warmup_and_capture(bb, NULL, 0)); /* B first */
    assert_mstar_ok(mstar_piecewise_runner_warmup_and_capture(a, NULL, 0));
    assert_true(mstar_piecewise_runner_can_run(a, 3, -1));

    mstar_piecewise_output oa = run(a, s, 4, 11);
    mstar_tensor copy;
    assert_mstar_ok(mstar_piecewise_output_get(&oa, "y", &copy));
    run(bb, s, 4, 77); /* replays over A's scratch */
    mstar_tensor view;
    assert_mstar_ok(mstar_piecewise_output_get_view(&oa, "y", &view));
    int32_t host[4 * W];
    to_host(s, view.data, host, 4 * W);
    for (int i = 0; i < 4 * W; i++)
        assert_int_equal(host[i], 11);

    /* three real rows in the bs-4 shape: the fourth row reads (and so yields) zeros */
    oa = run(a, s, 3, 5);
    assert_int_equal(oa.real_len, 3);
    to_host(s, mstar_tensor_map_get(oa.outputs, "y")->data, host, 4 * W);
    for (int i = 0; i < 4 * W; i++)
        assert_int_equal(host[i], i < 3 * W ? 5 : 0);
    to_host(s, copy.data, host, 4 * W); /* the copy kept the first run's rows */
    for (int i = 0; i < 4 * W; i++)
        assert_int_equal(host[i], 11);
    assert_mstar_ok(mstar_tensor_free(s, &copy));

    mstar_piecewise_runner_destroy(a);
    mstar_piecewise_runner_destroy(bb);
    mstar_step_runner_destroy(sr);
    mstar_alloc_stats cs;
    mstar_caching_stats(b, &cs);
    assert_int_equal(cs.allocated, 0);
    mstar_graph_pool_destroy(pool);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regions_share_a_pool_under_stream_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
