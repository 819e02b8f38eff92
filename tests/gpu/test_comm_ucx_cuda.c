/*
 * test_comm_ucx_cuda.c — the UCX transport (ucx-tcp) with device tensors on a real GPU: a
 * producer manager stages CUDA tensors through pinned host copies registered with its UCX engine
 * (Debian's UCX has no CUDA transport), a consumer manager with the same device reads them over
 * TCP on 127.0.0.1 into pinned memory and copies them up into device memory before the read
 * completes. Every byte is checked (get_tensor_copy), and at the end nothing is registered,
 * pinned or held on either side. Then the ordering: device work queued on the runtime's default
 * stream before a store is in the staged copy, and device work queued there before a read —
 * here a memset of the very block the read lands in — runs before the read's copy (the CUDA
 * event the reader waits for, as the reference reader does). Skips (77) without a GPU.
 */
#include "comm_harness.h"
#include "ucx_test.h"

#include "tensors/comm_internal.h"
#include "tensors/ucx/ucx_engine.h"
#include "tensors/ucx/ucx_transport.h"

#include <cuda_runtime_api.h>

#define MIB (UINT64_C(1) << 20)

typedef struct gpu_world {
    mstar_backend *b;
    bus bb;
    sender sp, sc;
    mstar_comm *p; /* worker_0 */
    mstar_comm *c; /* worker_1 */
} gpu_world;

static void open_world(gpu_world *w)
{
    memset(w, 0, sizeof(*w));
    w->b = mstar_test_cuda_or_skip(0);
    w->sp = (sender){ &w->bb, "worker_0" };
    w->sc = (sender){ &w->bb, "worker_1" };
    w->p = make_comm_with("worker_0", MSTAR_TRANSPORT_UCX_TCP, NULL, &w->sp, w->b);
    w->c = make_comm_with("worker_1", MSTAR_TRANSPORT_UCX_TCP, NULL, &w->sc, w->b);
}

/* Nothing held, registered or pinned by either manager. */
static void expect_nothing_left(gpu_world *w)
{
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(regions_of(w->p), 0);
    assert_int_equal(regions_of(w->c), 0);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w->p->transport), 0);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w->c->transport), 0);
}

static void close_world(gpu_world *w)
{
    mstar_comm_destroy(w->c);
    mstar_comm_destroy(w->p);
    bus_clear(&w->bb);
    mstar_backend_destroy(w->b);
}

static void release_device(void *ctx, void *data)
{
    mstar_caching_free(ctx, data);
}

/* A device copy of `host` (synchronised), handed to the manager with its release. */
static mstar_output device_output(gpu_world *w, mstar_stream *s, const mstar_tensor *host)
{
    uint64_t n = mstar_tensor_nbytes(host);
    void *p = NULL;
    assert_mstar_ok(mstar_caching_alloc(w->b, n > 0 ? n : 1, &p));
    if (n > 0)
        assert_mstar_ok(mstar_memcpy_async(s, p, host->data, n, MSTAR_MEMCPY_H2D));
    assert_mstar_ok(mstar_stream_synchronize(s));
    mstar_tensor dev = *host;
    dev.data = p;
    dev.device = mstar_backend_device(w->b);
    mstar_output o = output_of("x", dev);
    o.release = release_device;
    o.release_ctx = w->b;
    return o;
}

/* Hold and route `n` stored tensors to one consumer, then stage them. */
static void route_and_stage(gpu_world *w, const mstar_rid *rid, mstar_tensor_info *infos,
                            uint32_t n)
{
    mstar_tensor_id held[8];
    for (uint32_t i = 0; i < n; i++)
        held[i] = infos[i].uuid;
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(w->p, held, n, 1));
    mstar_edge routed = edge_of("x", "node", infos, n);
    assert_mstar_ok(mstar_comm_set_output_ref_counts(w->p, held, n, &routed, 1));
    mstar_edge_clear(&routed);
    assert_mstar_ok(mstar_comm_register_for_send(w->p, rid, infos, n));
}

/* Read one edge into the consumer's device memory and wait for it. */
static void read_edge(gpu_world *w, const mstar_rid *rid, const mstar_tensor_info *infos,
                      uint32_t n)
{
    mstar_edge e = edge_of("x", "node", infos, n);
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->c, rid, &e, 1, &done));
    for (uint32_t i = 0; i < done.n; i++)
        assert_mstar_ok(mstar_completion_wait(done.items[i], 60000));
    mstar_completion_list_clear(&done);
    mstar_ready_set set;
    expect_ready(w->c, &set, 1);
    mstar_ready_set_clear(&set);
    mstar_edge_clear(&e);
}

/* The consumer's copy of `uuid` is in device memory and has `want`'s bytes. */
static void check_device_bytes(gpu_world *w, mstar_tensor_id uuid, const mstar_tensor *want)
{
    mstar_tensor view;
    assert_mstar_ok(mstar_comm_get_tensor(w->c, uuid, &view));
    assert_int_equal(view.device.type, MSTAR_DEVICE_CUDA);
    uint64_t n = mstar_tensor_nbytes(want);
    uint8_t *back = malloc(n > 0 ? n : 1);
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(w->c, uuid, back, n, &cp));
    if (n > 0 && memcmp(back, want->data, n) != 0)
        fail_msg("tensor 0x%016llx of %llu bytes: the device copy differs",
                 (unsigned long long)uuid, (unsigned long long)n);
    free(back);
}

/* Device tensors of several sizes (bf16 64x1024 up to 64 MiB, an empty one) in one edge. */
static void test_device_tensors_over_tcp(void **state)
{
    (void)state;
    gpu_world w;
    open_world(&w);
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(w.b, MSTAR_STREAM_NON_BLOCKING, &s));
    int64_t s_bf16[2] = { 64, 1024 }, s_one[1] = { 1 }, s_odd[1] = { (int64_t)MIB + 3 },
            s_half[2] = { 4096, 2048 }, s_big[1] = { (int64_t)(64 * MIB) }, s_empty[2] = { 3, 0 };
    mstar_tensor hosts[6] = {
        make_tensor(MSTAR_DTYPE_BFLOAT16, 2, s_bf16, 1),
        make_tensor(MSTAR_DTYPE_FLOAT32, 1, s_one, 2),
        make_tensor(MSTAR_DTYPE_UINT8, 1, s_odd, 3),
        make_tensor(MSTAR_DTYPE_FLOAT16, 2, s_half, 4),
        make_tensor(MSTAR_DTYPE_UINT8, 1, s_big, 5),
        make_tensor(MSTAR_DTYPE_INT32, 2, s_empty, 6),
    };
    mstar_output outs[6];
    uint64_t staged = 0;
    for (int i = 0; i < 6; i++) {
        outs[i] = device_output(&w, s, &hosts[i]);
        staged += mstar_tensor_nbytes(&hosts[i]);
    }
    mstar_rid rid = mstar_rid_from_int(1);
    mstar_tensor_info infos[6];
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w.p, &rid, outs, 6, NULL, infos));
    route_and_stage(&w, &rid, infos, 6);
    /* Staged through pinned copies: registered in the device memory's place. */
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.p->transport), staged);
    assert_int_equal(regions_of(w.p), 5); /* the empty tensor needs none */
    for (int i = 0; i < 5; i++)
        assert_true(infos[i].remote_key_len > 0);
    read_edge(&w, &rid, infos, 6);
    assert_int_equal(mstar__transport_ucx_pinned_bytes(w.c->transport), 0);
    for (int i = 0; i < 6; i++) {
        check_device_bytes(&w, infos[i].uuid, &hosts[i]);
        assert_mstar_ok(mstar_comm_dereference(w.c, infos[i].uuid, 1));
    }
    assert_int_equal(bus_deliver(&w.bb, "worker_0", w.p), 1);
    expect_nothing_left(&w);
    for (int i = 0; i < 6; i++)
        free(hosts[i].data);
    mstar_stream_destroy(s);
    close_world(&w);
}

/* Queue `memsets` memsets of 256 MiB of scratch on the runtime's legacy default stream (about
 * 0.1 ms each on an H200), so that what is queued after them there runs late. */
static void busy_default_stream(void *scratch, int memsets)
{
    for (int i = 0; i < memsets; i++)
        assert_int_equal(cudaMemsetAsync(scratch, i & 0xff, 256 * MIB, 0), cudaSuccess);
}

/* The staged copy comes after the producing work on the default stream; the read's copy into
 * device memory comes after the work the default stream still has on its destination block. */
static void test_ordered_after_default_stream(void **state)
{
    (void)state;
    gpu_world w;
    open_world(&w);
    uint64_t n = 16 * MIB;
    int64_t shape[1] = { (int64_t)n };
    mstar_tensor host = make_tensor(MSTAR_DTYPE_UINT8, 1, shape, 7);

    /* Producer: the tensor's bytes arrive by a copy (from pinned memory: asynchronous) queued
     * behind ~0.2 s of default-stream work, and it is stored and staged at once, without
     * waiting. */
    void *scratch = NULL, *pinned = NULL, *dev = NULL;
    assert_mstar_ok(mstar_device_alloc(w.b, 256 * MIB, &scratch));
    assert_mstar_ok(mstar_host_alloc_pinned(w.b, n, &pinned));
    memcpy(pinned, host.data, n);
    busy_default_stream(scratch, 2000);
    assert_mstar_ok(mstar_caching_alloc(w.b, n, &dev));
    assert_int_equal(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, 0), cudaSuccess);
    mstar_tensor t = host;
    t.data = dev;
    t.device = mstar_backend_device(w.b);
    mstar_output o = output_of("x", t);
    o.release = release_device;
    o.release_ctx = w.b;
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w.p, &rid, &o, 1, NULL, &info));
    route_and_stage(&w, &rid, &info, 1);

    /* Consumer: a block the default stream will still overwrite (behind ~0.2 s of work) goes
     * back to the caching allocator, which hands it to the read. */
    void *reused = NULL;
    assert_mstar_ok(mstar_caching_alloc(w.b, n, &reused));
    busy_default_stream(scratch, 2000);
    assert_int_equal(cudaMemsetAsync(reused, 0xEE, n, 0), cudaSuccess);
    assert_mstar_ok(mstar_caching_free(w.b, reused));
    read_edge(&w, &rid, &info, 1);
    mstar_tensor view;
    assert_mstar_ok(mstar_comm_get_tensor(w.c, info.uuid, &view));
    assert_ptr_equal(view.data, reused); /* the hazard is real: the same block */
    check_device_bytes(&w, info.uuid, &host);
    assert_mstar_ok(mstar_comm_dereference(w.c, info.uuid, 1));
    assert_int_equal(bus_deliver(&w.bb, "worker_0", w.p), 1);
    expect_nothing_left(&w);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_mstar_ok(mstar_device_free(w.b, scratch));
    assert_mstar_ok(mstar_host_free_pinned(w.b, pinned));
    free(host.data);
    close_world(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_tensors_over_tcp),
        cmocka_unit_test(test_ordered_after_default_stream),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
