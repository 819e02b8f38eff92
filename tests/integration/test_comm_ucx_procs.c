/*
 * test_comm_ucx_procs.c — two communication managers in two processes over UCX on TCP
 * (127.0.0.1), speaking the real wire format over pipes in place of the control mesh: the
 * producer process stores tensors, stages them (registers their memory) and sends
 * INPUT_SIGNALS; this process reads every descriptor, checks every byte, ACKs with
 * TENSOR_RECEIVED, and the producer frees and unregisters on the ACKs — at the end neither side
 * holds a tensor or a registration. Then the fault: a producer that dies with reads in flight
 * fails those edges (reported once), the consumer cleans up, and a new producer's tensors read.
 *
 * MSTAR_UCX_TEST_MAX_MB (default 64) bounds the largest tensor; MSTAR_UCX_TEST_READS (default
 * 2000) is the number of tensors of the soak, spread over requests of up to 16.
 */
#include "ucx_test.h"

#include "tensors/comm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (UINT64_C(1) << 20)

/* ---- frames: a u32 length, then one encoded message ------------------------------------------ */

static bool io_all(int fd, void *p, size_t n, bool writing)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t k = writing ? write(fd, b, n) : read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        b += k;
        n -= (size_t)k;
    }
    return true;
}

static bool send_frame(int fd, const mstar_msg *msg)
{
    void *data;
    size_t len;
    if (mstar_msg_encode(msg, &data, &len) != MSTAR_OK)
        return false;
    uint32_t n = (uint32_t)len;
    bool ok = io_all(fd, &n, sizeof(n), true) && io_all(fd, data, len, true);
    free(data);
    return ok;
}

static bool recv_frame(int fd, mstar_msg *msg)
{
    uint32_t n;
    if (!io_all(fd, &n, sizeof(n), false))
        return false;
    void *data = malloc(n > 0 ? n : 1);
    bool ok =
        data != NULL && io_all(fd, data, n, false) && mstar_msg_decode(data, n, msg) == MSTAR_OK;
    free(data);
    return ok;
}

/* The send function a manager gets: its messages go down the pipe `ctx` points to, signed with
 * the sender's name as the mesh would. */
typedef struct pipe_out {
    const char *entity;
    int fd;
} pipe_out;

static mstar_status pipe_send(void *ctx, const char *peer, mstar_msg *msg)
{
    const pipe_out *po = ctx;
    (void)peer;
    snprintf(msg->from, sizeof(msg->from), "%s", po->entity);
    return send_frame(po->fd, msg) ? MSTAR_OK : mstar_error_set(MSTAR_EIO, "pipe to the peer");
}

/* A manager over UCX on TCP named out->entity, sending through `out`. */
static mstar_comm *ucx_comm(pipe_out *out)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = out->entity;
    o.transport = MSTAR_TRANSPORT_UCX_TCP;
    o.send = pipe_send;
    o.send_ctx = out;
    mstar_comm *c = NULL;
    if (mstar_comm_create(&o, &c) != MSTAR_OK)
        return NULL;
    return c;
}

/* ---- the producer process ---------------------------------------------------------------------
 */

/* Elements (float32) of tensor i of the soak: empty, one, up to 64 KiB, one of 4 MiB every
 * 500, and a single one of the largest size. */
static int64_t tensor_elems(uint64_t i, uint64_t max_bytes)
{
    if (i == 7)
        return (int64_t)(max_bytes / 4);
    if (i % 500 == 250)
        return (int64_t)(MIB);
    if (i % 8 == 0 || i % 8 == 1)
        return (int64_t)(i % 8);
    return (int64_t)((i * 7919) % 16384);
}

/* argv: self --comm-producer ntensors max_bytes. Frames out on stdout, in on stdin. Exit 0 when
 * every tensor was ACKed, freed and unregistered. */
static int producer_main(char **argv)
{
    uint64_t ntensors = strtoull(argv[2], NULL, 10), max_bytes = strtoull(argv[3], NULL, 10);
    pipe_out out = { "worker_0", 1 };
    mstar_comm *p = ucx_comm(&out);
    if (p == NULL) {
        fprintf(stderr, "producer: %s\n", mstar_last_error());
        return 2;
    }
    for (uint64_t first = 0, r = 1; first < ntensors; r++) {
        uint32_t n = ntensors - first < 16 ? (uint32_t)(ntensors - first) : 16;
        mstar_output o[16];
        mstar_tensor_info infos[16];
        memset(o, 0, sizeof(o));
        for (uint32_t i = 0; i < n; i++) {
            int64_t elems = tensor_elems(first + i, max_bytes);
            mstar_tensor_init(&o[i].tensor, NULL, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 1,
                              &elems);
            o[i].tensor.data = calloc((size_t)elems * 4 + 1, 1);
            o[i].signal = "sig";
        }
        mstar_rid rid = mstar_rid_from_int((int64_t)r);
        /* The manager copies the bytes (release NULL), so fill after storing: through the
         * descriptor's address, which is what a consumer reads. */
        if (mstar_comm_store_and_return_tensor_info(p, &rid, o, n, NULL, infos) != MSTAR_OK) {
            fprintf(stderr, "producer: %s\n", mstar_last_error());
            return 3;
        }
        mstar_tensor_id held[16];
        for (uint32_t i = 0; i < n; i++) {
            ucx_test_fill((void *)(uintptr_t)infos[i].address, infos[i].nbytes, infos[i].uuid);
            held[i] = infos[i].uuid;
            free(o[i].tensor.data);
        }
        mstar_msg m;
        mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
        m.request_id = rid;
        mstar_edge e;
        mstar_edge_init(&e);
        snprintf(e.name, sizeof(e.name), "sig");
        snprintf(e.next_node, sizeof(e.next_node), "node");
        for (uint32_t i = 0; i < n; i++)
            mstar_edge_add_tensor(&e, &infos[i]);
        if (mstar_comm_increment_ref_batch_uniform(p, held, n, 1) != MSTAR_OK ||
            mstar_comm_set_output_ref_counts(p, held, n, &e, 1) != MSTAR_OK ||
            mstar_comm_register_for_send(p, &rid, infos, n) != MSTAR_OK ||
            mstar_msg_add_edge(&m, &e) != MSTAR_OK || pipe_send(&out, "worker_1", &m) != MSTAR_OK) {
            fprintf(stderr, "producer: %s\n", mstar_last_error());
            return 4;
        }
        mstar_edge_clear(&e);
        mstar_msg_clear(&m);
        first += n;
    }
    mstar_msg m;
    while (recv_frame(0, &m)) {
        bool stop = m.type == MSTAR_MSG_SHUTDOWN;
        if (!stop && mstar_comm_handle_message(p, &m) != MSTAR_OK)
            return 5;
        mstar_msg_clear(&m);
        if (stop)
            break;
    }
    int rc = mstar_comm_num_tensors(p) == 0 && regions_of(p) == 0 ? 0 : 6;
    if (rc != 0)
        fprintf(stderr, "producer: %zu tensors, %zu regions left\n", mstar_comm_num_tensors(p),
                regions_of(p));
    mstar_comm_destroy(p);
    return rc;
}

typedef struct producer {
    pid_t pid;
    int to, from;
} producer;

static void producer_start(producer *pr, uint64_t ntensors, uint64_t max_bytes)
{
    int down[2], up[2];
    assert_int_equal(pipe2(down, O_CLOEXEC), 0);
    assert_int_equal(pipe2(up, O_CLOEXEC), 0);
    char self[4096], a_n[32], a_max[32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(len > 0);
    self[len] = '\0';
    snprintf(a_n, sizeof(a_n), "%llu", (unsigned long long)ntensors);
    snprintf(a_max, sizeof(a_max), "%llu", (unsigned long long)max_bytes);
    pr->pid = fork();
    assert_true(pr->pid >= 0);
    if (pr->pid == 0) {
        dup2(down[0], 0);
        dup2(up[1], 1);
        char *args[] = { self, "--comm-producer", a_n, a_max, NULL };
        execv(self, args);
        _exit(10);
    }
    close(down[0]);
    close(up[1]);
    pr->to = down[1];
    pr->from = up[0];
}

static int producer_reap(producer *pr)
{
    int status = 0;
    while (waitpid(pr->pid, &status, 0) < 0 && errno == EINTR) {
    }
    close(pr->to);
    close(pr->from);
    return status;
}

/* ---- the consumer (this process) ------------------------------------------------------------ */

static uint64_t soak_count(void)
{
    int64_t n;
    assert_mstar_ok(mstar_env_get_int("MSTAR_UCX_TEST_READS", 2000, 1, 1000000, &n));
    return (uint64_t)n;
}

static uint64_t max_bytes(void)
{
    int64_t mb;
    assert_mstar_ok(mstar_env_get_int("MSTAR_UCX_TEST_MAX_MB", 64, 1, 4096, &mb));
    return (uint64_t)mb * MIB;
}

/* Deliver ready edges: check each tensor's bytes against its uuid's pattern, then release it
 * as the node would. Returns the number of tensors delivered. */
/* Deliver and check what landed; get_ready_tensors must return `want`. */
static uint64_t consume_ready_st(mstar_comm *c, uint32_t *failed, mstar_status want)
{
    mstar_ready_set set;
    assert_int_equal(mstar_comm_get_ready_tensors(c, &set), want);
    uint64_t n = 0;
    for (uint32_t e = 0; e < set.nedges; e++) {
        for (uint32_t i = 0; i < set.edges[e].ntensors; i++) {
            const mstar_tensor_info *info = &set.edges[e].tensor_info[i];
            mstar_tensor t;
            assert_mstar_ok(mstar_comm_get_tensor(c, info->uuid, &t));
            size_t bad = ucx_test_check(mstar_tensor_ptr(&t), info->nbytes, info->uuid);
            if (bad != SIZE_MAX)
                fail_msg("tensor 0x%016llx of %llu bytes: byte %zu differs",
                         (unsigned long long)info->uuid, (unsigned long long)info->nbytes, bad);
            assert_mstar_ok(mstar_comm_dereference(c, info->uuid, 1));
            n++;
        }
    }
    *failed += set.nfailed;
    mstar_ready_set_clear(&set);
    return n;
}

static uint64_t consume_ready(mstar_comm *c, uint32_t *failed)
{
    return consume_ready_st(c, failed, MSTAR_OK);
}

/* Every descriptor of `ntensors` tensors read concurrently and checked; every ACK sent. */
static void test_soak(void **state)
{
    (void)state;
    uint64_t ntensors = soak_count();
    producer pr;
    producer_start(&pr, ntensors, max_bytes());
    pipe_out acks = { "worker_1", pr.to };
    mstar_comm *c = ucx_comm(&acks);
    assert_non_null(c);
    uint64_t announced = 0, delivered = 0;
    uint32_t failed = 0;
    while (announced < ntensors) {
        mstar_msg m;
        assert_true(recv_frame(pr.from, &m));
        assert_int_equal(m.type, MSTAR_MSG_INPUT_SIGNALS);
        assert_mstar_ok(mstar_comm_start_read_tensors(c, &m.request_id, m.edges, m.nedges, NULL));
        announced += m.edges[0].ntensors;
        mstar_msg_clear(&m);
        delivered += consume_ready(c, &failed); /* deliver what landed meanwhile */
    }
    while (delivered < ntensors) {
        struct pollfd pfd = { mstar_comm_event_fd(c), POLLIN, 0 };
        assert_int_equal(poll(&pfd, 1, -1), 1);
        mstar_comm_event_drain(c);
        delivered += consume_ready(c, &failed);
    }
    assert_int_equal(failed, 0);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    mstar_msg stop;
    mstar_msg_init(&stop, MSTAR_MSG_SHUTDOWN);
    assert_mstar_ok(pipe_send(&acks, "worker_0", &stop));
    int status = producer_reap(&pr);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0); /* everything ACKed, freed, unregistered */
    mstar_comm_destroy(c);
}

/* A producer that dies with reads in flight: those edges fail, once; cleanup leaves nothing;
 * the next producer's tensors read. */
static void test_producer_dies_mid_read(void **state)
{
    (void)state;
    producer dying;
    producer_start(&dying, 16, 16 * MIB);
    pipe_out acks = { "worker_1", dying.to }; /* fd -1 once the producer is gone */
    mstar_comm *c = ucx_comm(&acks);
    assert_non_null(c);
    mstar_msg m;
    assert_true(recv_frame(dying.from, &m));
    kill(dying.pid, SIGSTOP); /* it can no longer answer */
    mstar_completion_list done;
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &m.request_id, m.edges, m.nedges, &done));
    assert_true(mstar_comm_has_inflight_reads(c, &m.request_id));
    kill(dying.pid, SIGKILL);
    producer_reap(&dying);
    acks.fd = -1;
    for (uint32_t i = 0; i < done.n; i++)
        assert_int_equal(mstar_completion_wait(done.items[i], -1), MSTAR_EREMOTE);
    mstar_completion_list_clear(&done);
    uint32_t failed = 0;
    mstar_test_log_capture_begin(MSTAR_LOG_ERROR);
    /* The read failure is reported; its failure ACK cannot reach the dead producer, and that
     * error is returned too. */
    assert_int_equal(consume_ready_st(c, &failed, MSTAR_EIO), 0);
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("not sent"));
    assert_non_null(strstr(mstar_last_error(), "TENSOR_RECEIVED to 'worker_0'"));
    assert_int_equal(failed, 1);
    mstar_comm_security_stats sec;
    assert_mstar_ok(mstar_comm_get_security_stats(c, &sec));
    assert_int_equal(sec.acks_queued, 1); /* kept for a resend */
    mstar_test_log_capture_begin(MSTAR_LOG_ERROR);
    assert_int_equal(consume_ready_st(c, &failed, MSTAR_EIO), 0); /* resent, failed again */
    mstar_test_log_capture_end();
    assert_int_equal(failed, 1); /* the read failure is reported once */
    /* The request's cleanup gives the ACK up: later calls succeed. */
    mstar_test_log_capture_begin(MSTAR_LOG_WARN);
    assert_mstar_ok(mstar_comm_cleanup_request(c, &m.request_id));
    mstar_test_log_capture_end();
    assert_true(mstar_test_log_contains("given up at the request's cleanup"));
    assert_mstar_ok(mstar_comm_get_security_stats(c, &sec));
    assert_int_equal(sec.acks_queued, 0);
    assert_int_equal(sec.acks_lost, 1);
    assert_int_equal(consume_ready(c, &failed), 0);
    assert_int_equal(failed, 1);
    assert_int_equal(mstar_comm_num_tensors(c), 0);
    mstar_msg_clear(&m);
    mstar_comm_destroy(c);

    producer next;
    producer_start(&next, 16, MIB);
    acks.fd = next.to;
    c = ucx_comm(&acks);
    assert_non_null(c);
    assert_true(recv_frame(next.from, &m));
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &m.request_id, m.edges, m.nedges, &done));
    for (uint32_t i = 0; i < done.n; i++)
        assert_mstar_ok(mstar_completion_wait(done.items[i], -1));
    mstar_completion_list_clear(&done);
    assert_int_equal(consume_ready(c, &failed), 16);
    assert_int_equal(failed, 1);
    mstar_msg_clear(&m);
    mstar_msg stop;
    mstar_msg_init(&stop, MSTAR_MSG_SHUTDOWN);
    assert_mstar_ok(pipe_send(&acks, "worker_0", &stop));
    int status = producer_reap(&next);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    mstar_comm_destroy(c);
}

int main(int argc, char **argv)
{
    ucx_test_setup(argc, argv);
    if (argc == 4 && strcmp(argv[1], "--comm-producer") == 0)
        return producer_main(argv);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soak),
        cmocka_unit_test(test_producer_dies_mid_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
