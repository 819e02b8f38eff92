/*
 * test_cuda_device.c — the CUDA backend on a real GPU: streams, events, copies, pinned memory,
 * host work, real stream capture and replay, and an invalidated capture leaving the stream
 * usable. Skips (77) without a GPU.
 */
#include "mstar_test.h"

#include "device/backend.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static void test_copies_events_and_host_work(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    assert_string_equal(mstar_backend_name(b), "cuda");
    assert_true(mstar_backend_capability(b) >= 50);
    uint64_t f, t;
    assert_mstar_ok(mstar_mem_info(b, &f, &t));
    assert_true(f > 0 && f <= t);
    mstar_stream *s = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    assert_non_null(mstar_stream_native(s));
    char *host = NULL;
    assert_mstar_ok(mstar_host_alloc_pinned(b, 1 << 20, (void **)&host));
    void *dev = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 1 << 20, &dev));
    for (int i = 0; i < (1 << 20); i++)
        host[i] = (char)(i * 7);
    assert_mstar_ok(mstar_memcpy_async(s, dev, host, 1 << 20, MSTAR_MEMCPY_H2D));
    assert_mstar_ok(mstar_memset_async(s, dev, 0x55, 16));
    char *back = NULL;
    assert_mstar_ok(mstar_host_alloc_pinned(b, 1 << 20, (void **)&back));
    assert_mstar_ok(mstar_memcpy_async(s, back, dev, 1 << 20, MSTAR_MEMCPY_D2H));
    mstar_event *e = NULL;
    assert_mstar_ok(mstar_event_create(b, &e));
    assert_mstar_ok(mstar_event_record(e, s));
    assert_mstar_ok(mstar_event_synchronize(e));
    assert_mstar_ok(mstar_event_query(e));
    assert_int_equal(back[3], 0x55);
    assert_int_equal((unsigned char)back[100], (unsigned char)(100 * 7));
    int acc = 0;
    mstar_test_digit a = { &acc, 4 };
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(acc, 4);

    char *reg = malloc(1 << 16);
    assert_mstar_ok(mstar_host_register(b, reg, 1 << 16, 0));
    assert_mstar_ok(mstar_memcpy_async(s, reg, dev, 1 << 16, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(reg[2], 0x55);
    assert_mstar_ok(mstar_host_unregister(b, reg));
    free(reg);

    mstar_event_destroy(e);
    assert_mstar_ok(mstar_device_free(b, dev));
    assert_mstar_ok(mstar_host_free_pinned(b, host));
    assert_mstar_ok(mstar_host_free_pinned(b, back));
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static void CUDART_CB set_flag(void *arg)
{
    *(volatile int *)arg = 1;
}

/* A wrapped stream (another library's cudaStream_t) orders the library's streams after it and
 * itself after them through events; destroying the wrapper leaves the stream to its owner. */
static void test_wrapped_stream_orders_with_events(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    cudaStream_t theirs;
    assert_int_equal(cudaStreamCreateWithFlags(&theirs, cudaStreamNonBlocking), cudaSuccess);
    mstar_stream *w = NULL, *ours = NULL;
    assert_mstar_ok(mstar_stream_wrap(b, theirs, &w));
    assert_ptr_equal(mstar_stream_native(w), theirs);
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &ours));
    mstar_event *in = NULL, *out = NULL;
    assert_mstar_ok(mstar_event_create(b, &in));
    assert_mstar_ok(mstar_event_create(b, &out));
    char *dev = NULL, *host = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 1 << 20, (void **)&dev));
    assert_mstar_ok(mstar_host_alloc_pinned(b, 1 << 20, (void **)&host));
    /* Their stream is held by a host function until the flag is up: our copy must wait. */
    volatile int gate = 0;
    assert_int_equal(cudaMemsetAsync(dev, 0x11, 1 << 20, theirs), cudaSuccess);
    assert_mstar_ok(mstar_event_record(in, w));
    assert_mstar_ok(mstar_stream_wait_event(ours, in));
    assert_mstar_ok(mstar_memcpy_async(ours, host, dev, 1 << 20, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_event_record(out, ours));
    assert_mstar_ok(mstar_stream_wait_event(w, out));
    assert_int_equal(cudaLaunchHostFunc(theirs, set_flag, (void *)&gate), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(theirs), cudaSuccess);
    assert_int_equal(gate, 1);
    assert_int_equal((unsigned char)host[0], 0x11);
    assert_int_equal((unsigned char)host[(1 << 20) - 1], 0x11);
    /* The legacy default stream (NULL, as torch's default stream is) orders the same way. */
    mstar_stream *legacy = NULL;
    assert_mstar_ok(mstar_stream_wrap(b, NULL, &legacy));
    assert_int_equal(cudaMemsetAsync(dev, 0x22, 1 << 20, 0), cudaSuccess);
    assert_mstar_ok(mstar_event_record(in, legacy));
    assert_mstar_ok(mstar_stream_wait_event(ours, in));
    assert_mstar_ok(mstar_memcpy_async(ours, host, dev, 1 << 20, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(ours));
    assert_int_equal((unsigned char)host[(1 << 20) - 1], 0x22);
    mstar_stream_destroy(legacy);
    mstar_stream_destroy(w); /* the wrapper only */
    assert_int_equal(cudaStreamQuery(theirs), cudaSuccess);
    assert_int_equal(cudaStreamDestroy(theirs), cudaSuccess);
    mstar_event_destroy(in);
    mstar_event_destroy(out);
    assert_mstar_ok(mstar_device_free(b, dev));
    assert_mstar_ok(mstar_host_free_pinned(b, host));
    mstar_stream_destroy(ours);
    mstar_backend_destroy(b);
}

/* mstar__memcpy_on_device_async: a kernel up to MSTAR__KERNEL_COPY_MAX bytes, the copy engines
 * past it; aligned and unaligned ends and lengths; recorded into a capture and replayed. */
static void test_copy_on_device(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *s = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    size_t cap = MSTAR__KERNEL_COPY_MAX + 4096;
    unsigned char *src = NULL, *dst = NULL, *host = NULL, *back = NULL;
    assert_mstar_ok(mstar_device_alloc(b, cap, (void **)&src));
    assert_mstar_ok(mstar_device_alloc(b, cap, (void **)&dst));
    assert_mstar_ok(mstar_host_alloc_pinned(b, cap, (void **)&host));
    assert_mstar_ok(mstar_host_alloc_pinned(b, cap, (void **)&back));
    for (size_t i = 0; i < cap; i++)
        host[i] = (unsigned char)(i * 31 + 7);
    assert_mstar_ok(mstar_memcpy_async(s, src, host, cap, MSTAR_MEMCPY_H2D));
    const size_t cases[][3] = { /* dst offset, src offset, bytes */
                                { 0, 0, 4096 },
                                { 0, 0, 16 },
                                { 1, 3, 4093 },
                                { 16, 32, 100 },
                                { 0, 0, 1 },
                                { 0, 0, 0 },
                                { 0, 0, MSTAR__KERNEL_COPY_MAX },
                                { 8, 0, MSTAR__KERNEL_COPY_MAX + 8 }
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t d = cases[c][0], o = cases[c][1], n = cases[c][2];
        assert_mstar_ok(mstar_memset_async(s, dst, 0xee, cap));
        assert_mstar_ok(mstar__memcpy_on_device_async(s, dst + d, src + o, n));
        assert_mstar_ok(mstar_memcpy_async(s, back, dst, cap, MSTAR_MEMCPY_D2H));
        assert_mstar_ok(mstar_stream_synchronize(s));
        for (size_t i = 0; i < cap; i++) {
            unsigned char want = i >= d && i < d + n ? host[o + i - d] : 0xee;
            if (back[i] != want)
                fail_msg("case %zu: byte %zu is 0x%02x, want 0x%02x", c, i, back[i], want);
        }
    }
    /* Captured: the kernel is a node of the graph and copies at every launch. */
    assert_mstar_ok(mstar_memset_async(s, dst, 0, cap));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar__memcpy_on_device_async(s, dst, src + 5, 3000));
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    assert_mstar_ok(mstar_graph_instantiate(g, false));
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_mstar_ok(mstar_memcpy_async(s, back, dst, 3000, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_memory_equal(back, host + 5, 3000);
    assert_mstar_status(mstar__memcpy_on_device_async(s, NULL, src, 16), MSTAR_EINVAL);
    mstar_graph_destroy(g);
    assert_mstar_ok(mstar_device_free(b, src));
    assert_mstar_ok(mstar_device_free(b, dst));
    assert_mstar_ok(mstar_host_free_pinned(b, host));
    assert_mstar_ok(mstar_host_free_pinned(b, back));
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

static void test_real_stream_capture(void **state)
{
    (void)state;
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *s = NULL;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    void *dev = NULL;
    int *host = NULL;
    assert_mstar_ok(mstar_device_alloc(b, 256, &dev));
    assert_mstar_ok(mstar_host_alloc_pinned(b, 256, (void **)&host));
    int acc = 0;
    mstar_test_digit a = { &acc, 1 };
    assert_mstar_ok(mstar_stream_begin_capture(s));
    assert_mstar_ok(mstar_memset_async(s, dev, 0x11, 256));
    assert_mstar_ok(mstar_memcpy_async(s, host, dev, 256, MSTAR_MEMCPY_D2H));
    assert_mstar_ok(mstar_launch(s, mstar_test_append_digit, &a, sizeof(a)));
    assert_mstar_status(mstar_stream_synchronize(s), MSTAR_ESTATE);
    mstar_graph *g = NULL;
    assert_mstar_ok(mstar_stream_end_capture(s, &g));
    assert_int_equal(acc, 0);
    assert_int_equal(mstar_graph_node_count(g), 3);
    assert_mstar_ok(mstar_graph_instantiate(g, true));
    assert_non_null(mstar_graph_native(g));
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_mstar_ok(mstar_graph_launch(g, s));
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_int_equal(acc, 11);
    assert_int_equal(host[0], 0x11111111);
    mstar_graph_destroy(g);

    /* An invalidated capture leaves the stream usable. */
    assert_mstar_ok(mstar_stream_begin_capture(s));
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)mstar_stream_native(s)); /* illegal */
    assert_int_not_equal(err, cudaSuccess);
    assert_mstar_status(mstar_stream_end_capture(s, &g), MSTAR_EDEVICE);
    assert_false(mstar_stream_is_capturing(s));
    assert_mstar_ok(mstar_memset_async(s, dev, 0, 256));
    assert_mstar_ok(mstar_stream_synchronize(s));

    assert_mstar_ok(mstar_device_free(b, dev));
    assert_mstar_ok(mstar_host_free_pinned(b, host));
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copies_events_and_host_work),
        cmocka_unit_test(test_real_stream_capture),
        cmocka_unit_test(test_wrapped_stream_orders_with_events),
        cmocka_unit_test(test_copy_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
