/*
 * test_comm_cuda.c — the tensor transport with device tensors on a real GPU: a device output is
 * staged into the arena (device-to-host copy into a pinned segment, synchronised before
 * registration returns) and into a file; a consumer with the CUDA backend reads it into device
 * memory behind a completion that gates the ACK (T-5); a sharded device output is stored in
 * canonical layout and sliced; shards gathered on the device. Every byte is checked through
 * get_tensor_copy. Skips (77) without a GPU.
 */
#include "comm_harness.h"

static void *device_tensor(mstar_backend *b, mstar_stream *s, const mstar_tensor *host,
                           mstar_tensor *dev)
{
    uint64_t n = mstar_tensor_nbytes(host);
    void *p = NULL;
    assert_mstar_ok(mstar_caching_alloc(b, n > 0 ? n : 1, &p));
    assert_mstar_ok(mstar_memcpy_async(s, p, host->data, n, MSTAR_MEMCPY_H2D));
    assert_mstar_ok(mstar_stream_synchronize(s));
    *dev = *host;
    dev->data = p;
    dev->device = mstar_backend_device(b);
    return p;
}

static void release_device(void *ctx, void *data)
{
    mstar_caching_free(ctx, data);
}

static void roundtrip(mstar_transport_kind kind)
{
    mstar_backend *b = mstar_test_cuda_or_skip(0);
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &s));
    /* The arena lives on tmpfs, as in a deployment: CUDA cannot pin a file mapping on a disk
     * file system (the default TMPDIR), and pinned bytes are asserted below. */
    setenv("TMPDIR", "/dev/shm", 1);
    const char *dir = mstar_test_tmpdir("cuda-comm");
    bus bb = { 0 };
    sender sp = { &bb, "worker_0" }, sc = { &bb, "worker_1" };
    mstar_comm *p = make_comm_with("worker_0", kind, dir, &sp, b);
    mstar_comm *c = make_comm_with("worker_1", kind, dir, &sc, b);
    mstar_rid rid = mstar_rid_from_int(1);
    const char *sigs[1] = { "h" };
    int32_t dims[1] = { 1 };
    mstar_sharding_config cfg = { 1, sigs, dims };
    assert_mstar_ok(mstar_comm_register_request(p, &rid, &cfg));
    int64_t shape[2] = { 64, 1024 }; /* sharded on dim 1: canonical [1024, 64] */
    mstar_tensor host = make_tensor(MSTAR_DTYPE_BFLOAT16, 2, shape, 3);
    mstar_tensor dev;
    device_tensor(b, s, &host, &dev);
    mstar_output o = output_of("h", dev);
    o.release = release_device;
    o.release_ctx = b;
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, &rid, &o, 1, NULL, &info));
    assert_int_equal(info.dims[0], 1024);
    assert_mstar_ok(mstar_comm_increment_ref(p, info.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(p, &rid, &info, 1));
    mstar_edge e = edge_of("h", "n", &info, 1);
    e.shard_dim = 1;
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &rid, &e, 1, &list));
    for (uint32_t i = 0; i < list.n; i++)
        assert_mstar_ok(mstar_completion_wait(list.items[i], 10000));
    mstar_completion_list_clear(&list);
    mstar_ready_set set;
    expect_ready(c, &set, 1);
    mstar_ready_set_clear(&set);
    mstar_tensor view;
    assert_mstar_ok(mstar_comm_get_tensor(c, info.uuid, &view));
    assert_int_equal(view.device.type, MSTAR_DEVICE_CUDA);
    uint16_t *back = malloc(64 * 1024 * 2);
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(c, info.uuid, back, 64 * 1024 * 2, &cp));
    assert_memory_equal(back, host.data, 64 * 1024 * 2);
    bus_deliver(&bb, "worker_0", p);
    assert_int_equal(mstar_comm_num_tensors(p), 0);
    assert_mstar_ok(mstar_comm_dereference(c, info.uuid, 1));
    if (kind == MSTAR_TRANSPORT_ARENA) {
        mstar_arena_stats st;
        assert_mstar_ok(mstar_comm_arena_stats(p, &st));
        assert_true(st.pinned_bytes > 0);
        assert_int_equal(st.live_slots, 0);
    }
    free(back);
    free(host.data);
    mstar_edge_clear(&e);
    mstar_comm_destroy(c);
    mstar_comm_destroy(p);
    bus_clear(&bb);
    mstar_stream_destroy(s);
    mstar_backend_destroy(b);
    assert_int_equal(mstar_test_count_dir(dir), 0);
}

static void test_arena_device_roundtrip(void **state)
{
    (void)state;
    roundtrip(MSTAR_TRANSPORT_ARENA);
}

static void test_files_device_roundtrip(void **state)
{
    (void)state;
    roundtrip(MSTAR_TRANSPORT_FILES);
}

int main(void)
{
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "16", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_device_roundtrip),
        cmocka_unit_test(test_files_device_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
