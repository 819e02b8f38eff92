/*
 * test_comm_read_into_cuda.c — mstar_comm_start_read_into on a GPU: device tensors of a producer
 * child (worker_0, arena with MSTAR_CUDA_IPC=AUTO, so each descriptor offers both routes) read
 * by this process into a buffer it cudaMalloc'd, on a stream it made, over the CUDA IPC route
 * (worker_1, MSTAR_CUDA_IPC=1) and over the staged route (worker_2, MSTAR_CUDA_IPC=0, the
 * host-to-device copy from the arena). Before the read the caller queues slow work on its stream
 * that ends by overwriting the buffer, and after it a device-to-device copy of the buffer: the
 * bytes that copy sees prove the read's copy ran after the caller's earlier work and before its
 * later work, with no synchronisation in between. The node's tensor is the caller's pointer; an
 * untargeted descriptor of the same edge lands as before. Skips (77) without a GPU.
 *
 * The child is forked before this process touches CUDA (a CUDA context does not survive fork);
 * the edge comes back as one datagram of a SOCK_SEQPACKET socket pair.
 */
#include "comm_harness.h"

#include <cuda_runtime_api.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN0 ((int64_t)(8 << 20) + 5) /* the targeted tensor: uint8, odd-sized */
#define LEN1 ((int64_t)4099)          /* the untargeted one */
#define SEED 40

static int sock[2];
static const char *dir;

/* ---- the producer child ------------------------------------------------------------------ */

static void release_device(void *ctx, void *data)
{
    mstar_caching_free(ctx, data);
}

/* A device tensor of `len` uint8 with the bytes of make_vector(seed). */
static mstar_output device_output(mstar_backend *b, int64_t len, uint32_t seed)
{
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, len, seed);
    void *dev = NULL;
    if (mstar_caching_alloc(b, (size_t)len, &dev) != MSTAR_OK ||
        cudaMemcpy(dev, t.data, (size_t)len, cudaMemcpyHostToDevice) != cudaSuccess)
        _exit(5);
    free(t.data);
    t.data = dev;
    t.device = mstar_backend_device(b);
    mstar_output o = output_of("sig", t);
    o.release = release_device;
    o.release_ctx = b;
    return o;
}

/* Store both tensors for two consumers, send their edge, and keep them until told to stop. */
static void child_main(void)
{
    close(sock[0]);
    unsetenv("MSTAR_CUDA_IPC");
    producer_child pc;
    producer_child_open(&pc, dir);
    mstar_rid rid = mstar_rid_from_int(SEED);
    mstar_output o[2] = { device_output(pc.b, LEN0, SEED), device_output(pc.b, LEN1, SEED + 1) };
    size_t len;
    void *buf = producer_child_publish(&pc, &rid, o, 2, 2, &len); /* one ref per consumer */
    if (send(sock[1], buf, len, 0) != (ssize_t)len)
        _exit(8);
    free(buf);
    char quit;
    (void)!recv(sock[1], &quit, 1, 0); /* the consumer has closed its mappings */
    producer_child_exit(&pc);
}

/* ---- the consumer (this process) --------------------------------------------------------- */

static mstar_backend *cb;
static mstar_edge edge;

static void slow_host_step(void *args)
{
    (void)args;
    usleep(200 * 1000); /* widens the window a copy that did not wait would fall into */
}

/* Read the edge as `entity` under MSTAR_CUDA_IPC=`mode` into a cudaMalloc'd target on a stream
 * of its own, and check the bytes the caller's later work sees. */
static void read_into_device(const char *entity, const char *mode)
{
    setenv("MSTAR_CUDA_IPC", mode, 1);
    bus b = { 0 };
    sender s = { &b, "" };
    snprintf(s.entity, sizeof(s.entity), "%s", entity);
    mstar_comm *c = make_comm_with(entity, MSTAR_TRANSPORT_ARENA, dir, &s, cb);
    mstar_stream *st;
    assert_mstar_ok(mstar_stream_create(cb, MSTAR_STREAM_NON_BLOCKING, &st));
    uint8_t *target = NULL, *seen = NULL;
    assert_int_equal(cudaMalloc((void **)&target, (size_t)LEN0), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&seen, (size_t)LEN0), cudaSuccess);
    /* The caller's earlier work: slow, then it overwrites the buffer (the read must come after). */
    assert_mstar_ok(mstar_launch(st, slow_host_step, NULL, 0));
    assert_mstar_ok(mstar_memset_async(st, target, 0x11, (size_t)LEN0));
    mstar_read_target tg = {
        .uuid = edge.tensor_info[0].uuid, .data = target, .capacity = (uint64_t)LEN0, .stream = st
    };
    mstar_rid rid = mstar_rid_from_int(SEED);
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_into(c, &rid, &edge, 1, &tg, 1, &list));
    /* The caller's later work: it must see the read's bytes. */
    assert_mstar_ok(mstar_memcpy_async(st, seen, target, (size_t)LEN0, MSTAR_MEMCPY_D2D));
    assert_mstar_ok(mstar_stream_synchronize(st));
    mstar_tensor want = make_vector(MSTAR_DTYPE_UINT8, LEN0, SEED);
    uint8_t *back = malloc((size_t)LEN0);
    assert_int_equal(cudaMemcpy(back, seen, (size_t)LEN0, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_memory_equal(back, want.data, (size_t)LEN0);
    for (uint32_t i = 0; i < list.n; i++)
        assert_mstar_ok(mstar_completion_wait(list.items[i], 30000));
    mstar_completion_list_clear(&list);
    collect_ready(c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(c, tg.uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), target);
    assert_int_equal(got.device.type, MSTAR_DEVICE_CUDA);
    /* The untargeted descriptor landed in the manager's memory, bytes intact. */
    mstar_tensor want1 = make_vector(MSTAR_DTYPE_UINT8, LEN1, SEED + 1);
    mstar_tensor cp;
    assert_mstar_ok(
        mstar_comm_get_tensor_copy(c, edge.tensor_info[1].uuid, back, (size_t)LEN1, &cp));
    assert_memory_equal(back, want1.data, (size_t)LEN1);
    for (uint32_t i = 0; i < 2; i++)
        assert_mstar_ok(mstar_comm_dereference(c, edge.tensor_info[i].uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    mstar_stream_destroy(st);
    mstar_comm_destroy(c);
    bus_clear(&b);
    /* Still the caller's: the manager freed none of it. */
    assert_int_equal(cudaFree(target), cudaSuccess);
    assert_int_equal(cudaFree(seen), cudaSuccess);
    free(back);
    free(want.data);
    free(want1.data);
}

static void test_cuda_ipc_route(void **state)
{
    (void)state;
    read_into_device("worker_1", "1");
}

static void test_staged_route(void **state)
{
    (void)state;
    read_into_device("worker_2", "0");
}

/* The GPU this process reads on: the last one (with two, the IPC copy crosses them). Without
 * one, the child (which found none either, or finds its peer gone) is reaped and the test skips. */
static int last_gpu_or_skip(pid_t child)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
        return count - 1;
    close(sock[0]);
    waitpid(child, NULL, 0);
    mstar_test_skip("reading into a device buffer needs a GPU");
}

int main(void)
{
    setenv("TMPDIR", "/dev/shm", 1);
    dir = mstar_test_tmpdir("read-into-cuda");
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sock) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0)
        child_main();
    close(sock[1]);
    int gpu = last_gpu_or_skip(child);
    cb = mstar_test_cuda_or_skip(gpu);
    if (cudaSetDevice(gpu) != cudaSuccess) /* where the targets are allocated */
        return 1;
    static char msg[1 << 16];
    ssize_t n = recv(sock[0], msg, sizeof(msg), 0);
    if (n <= 0 || mstar_edge_decode(msg, (size_t)n, &edge) != MSTAR_OK) {
        int status = 0;
        waitpid(child, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
            mstar_test_skip("the producer found no GPU");
        fprintf(stderr, "no edge from the producer (status %d)\n", status);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_ipc_route),
        cmocka_unit_test(test_staged_route),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    mstar_edge_clear(&edge);
    (void)!send(sock[0], "q", 1, 0);
    int status = 0;
    waitpid(child, &status, 0);
    mstar_backend_destroy(cb);
    return failed != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
