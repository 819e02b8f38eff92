/*
 * test_cuda_ipc.c — the CUDA IPC route between two processes on a GPU (MSTAR_CUDA_IPC=1). A
 * producer child (worker_0) stores device tensors and sends their descriptors over a pipe; this
 * process (worker_1) reads them over the route and ships its ACKs back the same way. Checked:
 * bytes written by slow producer work queued on the default stream after the descriptor left
 * (the consumer must wait on the producer's event); one segment opened once for many tensors;
 * the producer frees only after the ACK; zero-size and odd sizes; a forged handle and a segment
 * size past the real one refused; a producer killed while the consumer waits on its event fails
 * the read instead of hanging, a later read of it fails too, and the mapping is closed; views of
 * the producer's memory (start_read_views), ACKed only when let go. The
 * consumer uses the last GPU, so on a machine with two GPUs the copy crosses them. Skips (77)
 * without a GPU.
 *
 * The child is forked before this process touches CUDA (a CUDA context does not survive fork).
 */
#include "comm_harness.h"

#include "tensors/comm_internal.h"
#include "tensors/cuda_ipc/cuda_ipc_test_hooks.h"
#include "tensors/transport.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

enum { OP_PRODUCE = 1, OP_ACK, OP_COUNT, OP_QUIT };

struct cmd {
    int op;
    uint32_t n;
    int64_t len; /* elements of uint8 per tensor */
    uint32_t seed;
    int slow_ms; /* producer work on the default stream before the bytes are written */
};

static int to_child[2], from_child[2];
static pid_t child;
static const char *dir;

/* ---- pipe framing ------------------------------------------------------------------------- */

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w <= 0)
            _exit(3);
        c += w, n -= (size_t)w;
    }
}

static bool read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r <= 0)
            return false;
        c += r, n -= (size_t)r;
    }
    return true;
}

static void send_blob(int fd, const void *p, size_t n)
{
    uint64_t len = n;
    write_all(fd, &len, sizeof(len));
    write_all(fd, p, n);
}

static void *recv_blob(int fd, size_t *n)
{
    uint64_t len = 0;
    if (!read_all(fd, &len, sizeof(len)))
        return NULL;
    void *p = malloc(len > 0 ? len : 1);
    if (p == NULL || !read_all(fd, p, len)) {
        free(p);
        return NULL;
    }
    *n = len;
    return p;
}

/* ---- the producer child ------------------------------------------------------------------ */

static void CUDART_CB sleep_ms(void *p)
{
    usleep((useconds_t)(*(int *)p) * 1000u);
}

static void release_device(void *ctx, void *data)
{
    mstar_caching_free(ctx, data);
}

/* n uint8 tensors of `len` bytes: device memory of the caching allocator, first filled with 0xee,
 * then (after c->slow_ms of work on the default stream) with the pattern of `seed`. */
static void child_produce(producer_child *pc, const struct cmd *c, int out)
{
    static int slow;
    slow = c->slow_ms;
    mstar_rid rid = mstar_rid_from_int(c->seed);
    mstar_output o[32];
    void *pinned = NULL;
    if (c->len > 0 && cudaHostAlloc(&pinned, (size_t)c->len * c->n, 0) != cudaSuccess)
        _exit(4);
    if (slow > 0)
        cudaLaunchHostFunc(cudaStreamLegacy, sleep_ms, &slow);
    for (uint32_t i = 0; i < c->n; i++) {
        mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, c->len, c->seed + i);
        void *dev = NULL;
        if (mstar_caching_alloc(pc->b, c->len > 0 ? (size_t)c->len : 1, &dev) != MSTAR_OK)
            _exit(5);
        if (c->len > 0) {
            char *h = (char *)pinned + (size_t)c->len * i;
            memcpy(h, t.data, (size_t)c->len);
            cudaMemset(dev, 0xee, (size_t)c->len); /* synchronous: before the slow work */
            cudaMemcpyAsync(dev, h, (size_t)c->len, cudaMemcpyHostToDevice, cudaStreamLegacy);
        }
        free(t.data);
        t.data = dev;
        t.device = mstar_backend_device(pc->b);
        o[i] = output_of("sig", t);
        o[i].release = release_device;
        o[i].release_ctx = pc->b;
    }
    size_t len;
    void *buf = producer_child_publish(pc, &rid, o, c->n, 1, &len);
    send_blob(out, buf, len);
    free(buf);
    /* The pinned source must outlive the copies. */
    cudaStreamSynchronize(cudaStreamLegacy);
    cudaFreeHost(pinned);
}

static void child_main(void)
{
    close(to_child[1]);
    close(from_child[0]);
    int in = to_child[0], out = from_child[1];
    producer_child pc;
    producer_child_open(&pc, dir);
    struct cmd c;
    while (read_all(in, &c, sizeof(c)) && c.op != OP_QUIT) {
        if (c.op == OP_PRODUCE) {
            child_produce(&pc, &c, out);
        } else if (c.op == OP_ACK) {
            size_t n;
            void *m = recv_blob(in, &n);
            mstar_msg msg;
            if (m == NULL || mstar_msg_decode(m, n, &msg) != MSTAR_OK ||
                mstar_comm_handle_message(pc.p, &msg) != MSTAR_OK)
                _exit(9);
            mstar_msg_clear(&msg);
            free(m);
        } else if (c.op == OP_COUNT) {
            int64_t k = (int64_t)mstar_comm_num_tensors(pc.p);
            write_all(out, &k, sizeof(k));
        }
    }
    producer_child_exit(&pc);
}

/* ---- the consumer (this process) --------------------------------------------------------- */

static mstar_backend *cb;
static mstar_comm *cc;
static bus cbus;
static sender cs = { &cbus, "worker_1" };

static mstar_edge ask_produce(uint32_t n, int64_t len, uint32_t seed, int slow_ms)
{
    struct cmd c = { OP_PRODUCE, n, len, seed, slow_ms };
    write_all(to_child[1], &c, sizeof(c));
    size_t bytes;
    void *buf = recv_blob(from_child[0], &bytes);
    assert_non_null(buf);
    mstar_edge e;
    assert_mstar_ok(mstar_edge_decode(buf, bytes, &e));
    free(buf);
    return e;
}

static int64_t producer_tensors(void)
{
    struct cmd c = { OP_COUNT, 0, 0, 0, 0 };
    write_all(to_child[1], &c, sizeof(c));
    int64_t k = -1;
    assert_true(read_all(from_child[0], &k, sizeof(k)));
    return k;
}

/* Ship every ACK the consumer queued for worker_0 to the child. */
static void ship_acks(void)
{
    for (int i = 0; i < cbus.n; i++) {
        assert_string_equal(cbus.q[i].peer, "worker_0");
        void *buf;
        size_t len;
        assert_mstar_ok(mstar_msg_encode(&cbus.q[i].msg, &buf, &len));
        struct cmd c = { OP_ACK, 0, 0, 0, 0 };
        write_all(to_child[1], &c, sizeof(c));
        send_blob(to_child[1], buf, len);
        free(buf);
    }
    bus_clear(&cbus);
}

/* Read edge `e` (copies, or views of the producer's memory) and wait for it to land. */
static mstar_status read_edge_wait_as(const mstar_rid *rid, const mstar_edge *e, bool views)
{
    mstar_completion_list list;
    mstar_status st =
        (views ? mstar_comm_start_read_views : mstar_comm_start_read_tensors)(cc, rid, e, 1, &list);
    if (st != MSTAR_OK)
        return st;
    for (uint32_t i = 0; i < list.n && st == MSTAR_OK; i++)
        st = mstar_completion_wait(list.items[i], 30000);
    mstar_completion_list_clear(&list);
    return st;
}

static mstar_status read_edge_wait(const mstar_rid *rid, const mstar_edge *e)
{
    return read_edge_wait_as(rid, e, false);
}

/* The consumer holds `info`'s tensor on its GPU with the bytes of make_vector(seed). */
static void check_tensor(const mstar_tensor_info *info, uint32_t seed)
{
    mstar_tensor view;
    assert_mstar_ok(mstar_comm_get_tensor(cc, info->uuid, &view));
    assert_int_equal(view.device.type, MSTAR_DEVICE_CUDA);
    int64_t len = info->dims[0];
    mstar_tensor want = make_vector(MSTAR_DTYPE_UINT8, len, seed);
    char *back = malloc(len > 0 ? (size_t)len : 1);
    mstar_tensor cp;
    assert_mstar_ok(mstar_comm_get_tensor_copy(cc, info->uuid, back, (uint64_t)len, &cp));
    if (len > 0)
        assert_memory_equal(back, want.data, (size_t)len);
    free(back);
    free(want.data);
}

static void counts(uint64_t *opens, uint64_t *mapped)
{
    mstar__transport_cuda_ipc_counts(cc->transport, opens, mapped);
}

/* The segment handles of every tensor read so far: the consumer has each of them open. */
static uint8_t seen[64][MSTAR_IPC_HANDLE_BYTES];
static int nseen;

static bool handle_seen(const uint8_t *handle)
{
    for (int i = 0; i < nseen; i++)
        if (memcmp(seen[i], handle, MSTAR_IPC_HANDLE_BYTES) == 0)
            return true;
    return false;
}

static void note_handles(const mstar_edge *e)
{
    for (uint32_t i = 0; i < e->ntensors; i++) {
        const uint8_t *h = e->tensor_info[i].cuda_ipc.mem_handle;
        if (e->tensor_info[i].cuda_ipc.host_id[0] != '\0' && !handle_seen(h) && nseen < 64)
            memcpy(seen[nseen++], h, MSTAR_IPC_HANDLE_BYTES);
    }
}

/* Read edge `e` of request `seed`, check every tensor, ACK, and see the producer free them. */
static void read_check_ack(const mstar_edge *e, uint32_t seed)
{
    note_handles(e);
    mstar_rid rid = mstar_rid_from_int(seed);
    int64_t before = producer_tensors();
    assert_mstar_ok(read_edge_wait(&rid, e));
    mstar_ready_set set;
    expect_ready(cc, &set, 1);
    mstar_ready_set_clear(&set);
    for (uint32_t i = 0; i < e->ntensors; i++)
        check_tensor(&e->tensor_info[i], seed + i);
    /* Not freed before the ACK arrives, freed after. */
    assert_int_equal(producer_tensors(), before);
    ship_acks();
    assert_int_equal(producer_tensors(), before - (int64_t)e->ntensors);
    for (uint32_t i = 0; i < e->ntensors; i++)
        assert_mstar_ok(mstar_comm_dereference(cc, e->tensor_info[i].uuid, 1));
}

/* start_read_views over the route: with both managers on one GPU the consumer's tensors are
 * views of the producer's memory (mstar_comm_view_check answers for them), the bytes are those
 * the producer's late work wrote, no ACK goes before the views are let go, and the producer
 * frees only after. On two GPUs the read is a copy, ACKed when collected. */
static void test_views_in_place(void **state)
{
    (void)state;
    mstar_edge e = ask_produce(2, (1 << 20) + 5, 40, 300); /* written 0.3 s late */
    mstar_rid rid = mstar_rid_from_int(40);
    int64_t before = producer_tensors();
    assert_mstar_ok(read_edge_wait_as(&rid, &e, true));
    mstar_ready_set set;
    expect_ready(cc, &set, 1);
    mstar_ready_set_clear(&set);
    bool same_gpu = e.tensor_info[0].cuda_ipc.device == mstar_backend_device(cb).index;
    for (uint32_t i = 0; i < e.ntensors; i++) {
        check_tensor(&e.tensor_info[i], 40 + i);
        assert_mstar_status(mstar_comm_view_check(cc, e.tensor_info[i].uuid),
                            same_gpu ? MSTAR_OK : MSTAR_EINVAL);
    }
    assert_int_equal(cbus.n, same_gpu ? 0 : 1);
    assert_int_equal(producer_tensors(), before);
    for (uint32_t i = 0; i < e.ntensors; i++)
        assert_mstar_ok(mstar_comm_dereference(cc, e.tensor_info[i].uuid, 1));
    assert_true(cbus.n >= 1);
    ship_acks();
    assert_int_equal(producer_tensors(), before - (int64_t)e.ntensors);
    mstar_edge_clear(&e);
}

static void test_slow_producer(void **state)
{
    (void)state;
    mstar_edge e = ask_produce(1, (64 << 20) + 3, 10, 1500); /* 64 MiB + 3, written 1.5 s late */
    assert_true(e.tensor_info[0].cuda_ipc.host_id[0] != '\0');
    read_check_ack(&e, 10);
    mstar_edge_clear(&e);
}

static void test_one_open_many_tensors(void **state)
{
    (void)state;
    uint64_t opens0, opens1, mapped;
    counts(&opens0, &mapped);
    mstar_edge e = ask_produce(16, 4099, 100, 0);
    for (uint32_t i = 1; i < 16; i++)
        assert_memory_equal(e.tensor_info[i].cuda_ipc.mem_handle,
                            e.tensor_info[0].cuda_ipc.mem_handle, MSTAR_IPC_HANDLE_BYTES);
    /* One open for the batch, or none when the caching allocator carved its blocks from a
     * segment an earlier test's tensor already brought here (it best-fits small blocks into any
     * free block, the freed 64 MiB segment of test_slow_producer included). */
    bool known = handle_seen(e.tensor_info[0].cuda_ipc.mem_handle);
    read_check_ack(&e, 100);
    counts(&opens1, &mapped);
    assert_int_equal(opens1, opens0 + (known ? 0 : 1));
    opens0 = opens1;
    mstar_edge_clear(&e);
    /* Every segment of the producer has held a tensor read here, so a new batch lands in one
     * that is open already: no new open. */
    mstar_edge e2 = ask_produce(4, 1, 200, 0);
    for (uint32_t i = 0; i < 4; i++)
        assert_true(handle_seen(e2.tensor_info[i].cuda_ipc.mem_handle));
    read_check_ack(&e2, 200);
    counts(&opens1, &mapped);
    assert_int_equal(opens1, opens0);
    mstar_edge_clear(&e2);
}

static void test_zero_and_odd_sizes(void **state)
{
    (void)state;
    static const int64_t sizes[] = { 0, 1, 3, 511, 513, 1000001 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        mstar_edge e = ask_produce(1, sizes[i], 300 + (uint32_t)i * 10, 0);
        /* Zero bytes need no route; every other size takes it. */
        assert_int_equal(e.tensor_info[0].cuda_ipc.host_id[0] != '\0', sizes[i] > 0);
        read_check_ack(&e, 300 + (uint32_t)i * 10);
        mstar_edge_clear(&e);
    }
}

static void test_forged_and_out_of_range(void **state)
{
    (void)state;
    mstar_edge e = ask_produce(1, 4096, 400, 0);
    mstar_rid rid = mstar_rid_from_int(400);
    mstar_edge bad;
    assert_mstar_ok(mstar_edge_copy(&bad, &e));
    for (int i = 0; i < MSTAR_IPC_HANDLE_BYTES; i++)
        bad.tensor_info[0].cuda_ipc.mem_handle[i] ^= (uint8_t)(0x5a + i);
    assert_int_not_equal(read_edge_wait(&rid, &bad), MSTAR_OK);
    assert_non_null(strstr(mstar_last_error(), "not what its producer exported"));
    bad.tensor_info[0] = e.tensor_info[0];
    bad.tensor_info[0].cuda_ipc.segment_size *= 4; /* more than the real segment */
    bad.tensor_info[0].cuda_ipc.segment_offset = e.tensor_info[0].cuda_ipc.segment_size * 2;
    assert_mstar_status(read_edge_wait(&rid, &bad), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "not what its producer exported"));
    mstar_edge_clear(&bad);
    /* The good descriptor still reads. */
    read_check_ack(&e, 400);
    mstar_edge_clear(&e);
}

/* Kills the producer a moment after the consumer has started waiting on its event. */
static void *kill_producer_soon(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    kill(child, SIGKILL);
    int status;
    waitpid(child, &status, 0);
    return NULL;
}

/* Last: the producer is killed while this process has its segment mapped and waits on its
 * event: a tensor whose bytes come after ten minutes of producer work (the event fires only
 * then), the producer killed while the consumer waits, fails the read with MSTAR_ECLOSED at once
 * instead of hanging; a later read of the dead producer fails before anything is queued. */
static void test_producer_killed(void **state)
{
    (void)state;
    mstar_edge e = ask_produce(2, 8192, 500, 0);
    mstar_edge first = e, second = e;
    first.ntensors = second.ntensors = 1;
    second.tensor_info = &e.tensor_info[1];
    mstar_rid rid = mstar_rid_from_int(500);
    assert_mstar_ok(read_edge_wait(&rid, &first)); /* the segment is now mapped here */
    uint64_t opens, mapped;
    counts(&opens, &mapped);
    assert_true(mapped >= 1);
    mstar_edge slow = ask_produce(1, 4096, 600, 600 * 1000);
    mstar_rid slow_rid = mstar_rid_from_int(600);
    pthread_t killer;
    assert_int_equal(pthread_create(&killer, NULL, kill_producer_soon, NULL), 0);
    assert_mstar_status(read_edge_wait(&slow_rid, &slow), MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "exited"));
    pthread_join(killer, NULL);
    child = 0;
    mstar_edge_clear(&slow);
    assert_mstar_status(read_edge_wait(&rid, &second), MSTAR_ECLOSED);
    assert_non_null(strstr(mstar_last_error(), "has exited"));
    /* The upkeep, with no read copying, closes the dead producer's mapping. */
    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(cc, &set));
    mstar_ready_set_clear(&set);
    uint64_t mapped_after;
    counts(&opens, &mapped_after);
    assert_int_equal(mapped_after, 0);
    bus_clear(&cbus);
    e.ntensors = 2;
    mstar_edge_clear(&e);
}

int main(void)
{
    setenv("MSTAR_CUDA_IPC", "1", 1);
    setenv("TMPDIR", "/dev/shm", 1);
    dir = mstar_test_tmpdir("cuda-ipc");
    if (pipe(to_child) != 0 || pipe(from_child) != 0)
        return 1;
    child = fork();
    if (child == 0)
        child_main();
    close(to_child[0]);
    close(from_child[1]);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        mstar_test_skip("the CUDA IPC route needs a GPU");
    }
    cb = mstar_test_cuda_or_skip(count - 1);
    cc = make_comm_with("worker_1", MSTAR_TRANSPORT_ARENA, dir, &cs, cb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_producer),      cmocka_unit_test(test_one_open_many_tensors),
        cmocka_unit_test(test_zero_and_odd_sizes), cmocka_unit_test(test_forged_and_out_of_range),
        cmocka_unit_test(test_views_in_place),     cmocka_unit_test(test_producer_killed),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    /* The mappings close before the producer frees its segments (freeing memory another process
     * still maps is undefined behaviour in CUDA). */
    mstar_comm_destroy(cc);
    bus_clear(&cbus);
    if (child > 0) {
        struct cmd c = { OP_QUIT, 0, 0, 0, 0 };
        write_all(to_child[1], &c, sizeof(c));
        waitpid(child, NULL, 0);
    }
    mstar_backend_destroy(cb);
    return failed;
}
