/*
 * bench_transport.c — `mstar bench transport [--transport files|arena|ucx-tcp|ucx-rdma]
 * [--device cpu|cuda|host] [--size BYTES [--profile] [--batch K]] [--json] [--quick]`.
 *
 * With --device cuda (bench_transport's second half): the arena carries device tensors of 4 KiB
 * to 256 MiB on cuda:0, once over the CUDA IPC route and once staged, each run in a child of its
 * own, against a device-to-device copy and pinned D2H + H2D in one process, and the arena's 4 KiB
 * round trip of host tensors; the verdict table holds each route to its baseline. With
 * --transport files or a UCX kind, device tensors over that transport beside host tensors over
 * it instead (over UCX the device tensors must stay within 2x the host tensors' 4 KiB round trip
 * and 0.8x their throughput); --device host runs that with the host backend standing in for
 * the GPU.
 *
 * A producer (this process, worker_0) and a consumer (a forked process, worker_1) on one host,
 * talking over the control mesh (ipc), for tensors of 4 KiB to 64 MiB:
 *   - round trip of one handoff: store, stage, INPUT_SIGNALS, the consumer's read and release,
 *     its TENSOR_RECEIVED, and the producer freeing the tensor — p50 and p99;
 *   - sustained throughput with up to 8 tensors in flight, the best of 3 to 12 rounds (other
 *     load on the machine lowers a round, it never raises one).
 * The consumer is an event loop as a worker's is: it sleeps in poll() on its mesh inbox and the
 * manager's event fd, and releases edges when their reads land (at once for the one-host
 * transports, later over UCX).
 * In the same run, two baselines: single-thread memcpy bandwidth (64 MiB buffers, out of cache)
 * and a raw ZeroMQ ipc PUSH/PULL ping-pong of 64 bytes between two processes. Figures are
 * reported as ratios to them: throughput / memcpy, and the 4 KiB round trip / the ping-pong.
 * Beside them, the control mesh's own round trip of a 4 KiB message (encode, send, receive,
 * decode, and back) between two processes over its shared-memory rings and, for comparison,
 * over ZeroMQ (docs/architecture.md, "The ring"); the target is the ring at most 0.5x
 * the raw ping-pong.
 * The floor under a handoff, in the same run (bench_floor.c): two processes ping-ponging 4 bytes
 * through shared memory, the waiting side asleep on a futex, and the same busy-polling; the
 * 4 KiB handoff is reported as a ratio to the futex round trip. Every round trip's CPU time and
 * context switches per handoff are measured on both sides, and the arena's 4 KiB handoff runs
 * once more with the default MSTAR_RING_SPIN_US and with no spinning (each side spins on its
 * rings before it sleeps: the producer in mstar_mesh_recv, the consumer's loop in
 * mstar_mesh_spin). The futex floor and the default's handoff then take two more turns each,
 * one after the other, each keeping its best p50, as this VM's wake-up time drifts. Before the
 * spins, the same handoff's calls run with both ends in this process (bench_calls.c): the
 * library's work of a round trip on this CPU now, which the spinning round trip moves with
 * beside the busy-polling floor.
 * A UCX transport (not run by default: --transport ucx-tcp) is also judged against a raw
 * loopback TCP stream of the same size (bench_tcp.c), one round of it before each round of the
 * transport so that both see the same conditions: the target is at least 0.6x its
 * throughput at >= 1 MiB. The stream's server is forked after the consumer (which must not hold
 * its socket) and before this process touches UCX.
 *
 * --size BYTES measures that one size over files or the arena (the arena with loans and views
 * too) and nothing else: no baselines, no ratios, no targets. The Python suite interleaves such
 * runs with its own, size by size, so both see the machine in the same state. With --profile,
 * each library call of those round trips is timed on the side that makes it (bench_phases.c):
 * the producer's store, stage, message, send and ACK handling, the consumer's receive, read,
 * collect (the ACK goes out there) and release. `--device cuda --transport arena --size N` does
 * the same for device tensors over the CUDA IPC route, whose read call waits for its copy.
 * --batch K puts K tensors of the size in each INPUT_SIGNALS (still IN_FLIGHT tensors in flight,
 * so IN_FLIGHT / K messages): what a handoff costs per message (its wake-up, its read call's
 * submission and landing, its ACK) spreads over K tensors, and what it costs per tensor does
 * not.
 *
 * Both processes set glibc's mmap threshold high, so freed receive buffers are reused rather
 * than returned to the kernel and faulted in again — what a serving process's caching
 * allocator does; without it a 64 MiB read spends more time in page faults than in copying.
 */
#include "bench.h"
#include "bench_tcp.h"

#include "core/json.h"
#include "core/vec.h"
#include "mstar/mstar.h"

#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#define NSIZES      6 /* host runs: to 64 MiB */
#define NSIZES_CUDA MSTAR_BENCH_TRANSPORT_SIZES
static const uint64_t sizes[NSIZES_CUDA] = { 4u << 10,  64u << 10, 1u << 20,  4u << 20,
                                             16u << 20, 64u << 20, 256u << 20 };
#define AT_16MIB        4 /* sizes[AT_16MIB] */
#define IN_FLIGHT       8
#define VIEWS_NAME      "arena, loans and views"
#define ROUNDS          3
#define MAX_ROUNDS      12 /* of the throughput, while the time below lasts */
#define ROUND_BUDGET_MS 250

typedef mstar_bench_transport_row row;

/* Whether `k` tensors a message keep IN_FLIGHT tensors in whole messages (--batch). */
static bool per_message_ok(long k)
{
    return k >= 1 && k <= IN_FLIGHT && IN_FLIGHT % k == 0;
}

static bool is_ucx(mstar_transport_kind kind)
{
    return kind == MSTAR_TRANSPORT_UCX_TCP || kind == MSTAR_TRANSPORT_UCX_RDMA;
}

/* CPU time and context switches of both sides, per handoff. */
static double cost_cpu_us(const mstar_bench_cost *c)
{
    return c->self.cpu_us + c->peer.cpu_us;
}

static double cost_switches(const mstar_bench_cost *c)
{
    return c->self.vol_csw + c->self.invol_csw + c->peer.vol_csw + c->peer.invol_csw;
}

static void fail(const char *what)
{
    fprintf(stderr, "mstar bench transport: %s: %s\n", what, mstar_last_error());
    exit(1);
}

#define CHECK(expr)             \
    do {                        \
        if ((expr) != MSTAR_OK) \
            fail(#expr);        \
    } while (0)

/* ---- baselines ------------------------------------------------------------------------------ */

static double memcpy_gbps(void)
{
    size_t n = 64u << 20;
    char *a = malloc(n), *b = malloc(n);
    if (a == NULL || b == NULL)
        fail("memcpy buffers");
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int r = 0; r < 8; r++) {
        uint64_t t0 = mstar__now_ns();
        memcpy(b, a, n);
        double s = (double)(mstar__now_ns() - t0) * 1e-9;
        best = (double)n / s / 1e9 > best ? (double)n / s / 1e9 : best;
        a[r] = b[n - 1 - (size_t)r];
    }
    free(a);
    free(b);
    return best;
}

/* The other end of a ping-pong: a child that dies with this process, and the pipe on which it
 * says it is ready (ready[1] is its end). Returns fork's result. */
static pid_t fork_peer(int ready[2])
{
    if (pipe(ready) != 0)
        fail("pipe");
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    return pid;
}

/* Raw ZeroMQ: two processes, a PULL each, PUSH to the other, 64-byte messages, waiting in
 * zmq_poll as an event loop does. Returns the p50 round trip in µs (p99 in *p99). */
static double zmq_pingpong_us(const char *dir, int iters, double *p99)
{
    char a[512], b[512];
    snprintf(a, sizeof(a), "ipc://%s/pp_a.ipc", dir);
    snprintf(b, sizeof(b), "ipc://%s/pp_b.ipc", dir);
    int ready[2];
    pid_t pid = fork_peer(ready);
    if (pid == 0) {
        void *ctx = zmq_ctx_new();
        void *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
        zmq_bind(in, b);
        zmq_connect(out, a);
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        char buf[64];
        for (int i = 0; i < iters + 10; i++) {
            zmq_pollitem_t it = { in, 0, ZMQ_POLLIN, 0 };
            zmq_poll(&it, 1, -1);
            if (zmq_recv(in, buf, sizeof(buf), 0) < 0)
                _exit(1);
            zmq_send(out, buf, sizeof(buf), 0);
        }
        zmq_close(in);
        zmq_close(out);
        zmq_ctx_term(ctx);
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1)
        fail("ping-pong child");
    void *ctx = zmq_ctx_new();
    void *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
    zmq_bind(in, a);
    zmq_connect(out, b);
    double *rt = calloc((size_t)iters, sizeof(double));
    char buf[64] = { 0 };
    for (int i = 0; i < iters + 10; i++) {
        uint64_t t0 = mstar__now_ns();
        zmq_send(out, buf, sizeof(buf), 0);
        zmq_pollitem_t it = { in, 0, ZMQ_POLLIN, 0 };
        zmq_poll(&it, 1, -1);
        if (zmq_recv(in, buf, sizeof(buf), 0) < 0)
            fail("ping-pong receive");
        if (i >= 10) /* the first ones include connecting */
            rt[i - 10] = (double)(mstar__now_ns() - t0) * 1e-3;
    }
    int status;
    waitpid(pid, &status, 0);
    int linger = 0;
    zmq_setsockopt(out, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(in);
    zmq_close(out);
    zmq_ctx_term(ctx);
    close(ready[0]);
    close(ready[1]);
    double p50 = mstar_bench_percentile(rt, (size_t)iters, 0.5);
    *p99 = mstar_bench_percentile(rt, (size_t)iters, 0.99);
    free(rt);
    return p50;
}

/* A message of at least 4 KiB once encoded: TENSOR_RECEIVED with enough counts. */
static void build_4k(mstar_msg *msg)
{
    mstar_msg_init(msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg->request_id = mstar_rid_from_int(1);
    snprintf(msg->from, sizeof(msg->from), "bench_ping"); /* the send sets it too */
    for (uint64_t k = 1;; k++) {
        void *data;
        size_t len;
        if (mstar_msg_encode(msg, &data, &len) != MSTAR_OK)
            fail("encoding the 4 KiB message");
        free(data);
        if (len >= 4096)
            return;
        if (mstar_msg_add_count(msg, mstar_id_make(100, k), 1) != MSTAR_OK)
            fail("building the 4 KiB message");
    }
}

static mstar_mesh *pingpong_mesh(const char *dir, const char *entity)
{
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    mstar_mesh *mesh;
    if (mstar_mesh_create(entity, &opts, &mesh) != MSTAR_OK)
        fail("mesh of the ping-pong");
    return mesh;
}

/* Receive (waiting as an entity's loop does) and send the message straight back. */
static void mesh_bounce(mstar_mesh *mesh, const char *peer, mstar_msg *msg)
{
    mstar_msg_clear(msg);
    mstar_status st;
    while ((st = mstar_mesh_recv(mesh, -1, msg)) == MSTAR_EAGAIN)
        continue;
    if (st != MSTAR_OK || mstar_mesh_send(mesh, peer, msg) != MSTAR_OK)
        fail("mesh ping-pong");
}

/* Set MSTAR_MESH_RING for the meshes (and forked peers) made next: rings only, or ZeroMQ only.
 * Returns what to give mesh_ring_restore: the earlier value (malloc'd) or NULL. */
static char *mesh_ring_set(bool ring)
{
    const char *saved = getenv("MSTAR_MESH_RING");
    char *restore = saved ? strdup(saved) : NULL;
    setenv("MSTAR_MESH_RING", ring ? "1" : "0", 1);
    return restore;
}

static void mesh_ring_restore(char *restore)
{
    if (restore != NULL)
        setenv("MSTAR_MESH_RING", restore, 1);
    else
        unsetenv("MSTAR_MESH_RING");
    free(restore);
}

/* The mesh itself between two processes: a 4 KiB message sent, decoded, sent back and decoded,
 * over rings (MSTAR_MESH_RING=1) or ZeroMQ (=0). Returns the p50 round trip in µs. */
static double mesh_pingpong_us(const char *dir, int iters, bool ring, double *p99)
{
    char *restore = mesh_ring_set(ring);
    int ready[2];
    pid_t pid = fork_peer(ready);
    if (pid == 0) {
        mstar_mesh *mesh = pingpong_mesh(dir, "bench_pong");
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        mstar_msg msg;
        mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
        for (int i = 0; i < iters + 10; i++)
            mesh_bounce(mesh, "bench_ping", &msg);
        mstar_msg_clear(&msg);
        mstar_mesh_destroy(mesh);
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1)
        fail("mesh ping-pong child");
    mstar_mesh *mesh = pingpong_mesh(dir, "bench_ping");
    mstar_msg msg, echo;
    build_4k(&msg);
    mstar_msg_init(&echo, MSTAR_MSG_TENSOR_RECEIVED);
    double *rt = calloc((size_t)iters, sizeof(double));
    for (int i = 0; i < iters + 10; i++) {
        uint64_t t0 = mstar__now_ns();
        if (mstar_mesh_send(mesh, "bench_pong", &msg) != MSTAR_OK)
            fail("mesh ping-pong send");
        mstar_msg_clear(&echo);
        while (mstar_mesh_recv(mesh, -1, &echo) == MSTAR_EAGAIN)
            continue;
        if (i >= 10) /* the first ones include connecting */
            rt[i - 10] = (double)(mstar__now_ns() - t0) * 1e-3;
    }
    int status;
    waitpid(pid, &status, 0);
    mstar_msg_clear(&msg);
    mstar_msg_clear(&echo);
    mstar_mesh_destroy(mesh);
    close(ready[0]);
    close(ready[1]);
    mesh_ring_restore(restore);
    double p50 = mstar_bench_percentile(rt, (size_t)iters, 0.5);
    *p99 = mstar_bench_percentile(rt, (size_t)iters, 0.99);
    free(rt);
    return p50;
}

/* ---- the transport -------------------------------------------------------------------------- */

typedef struct setup {
    mstar_transport_kind kind;
    const char *ipc_dir;
    const char *shm_dir;
    bool cuda;      /* device tensors on cuda:0 in both processes */
    bool standin;   /* with cuda: the host backend stands in for cuda:0 (no GPU needed) */
    bool zero_copy; /* the arena with loans (producer) and views (consumer) */
    bool profile;   /* time each call of the round trips (--profile) */
    bool views;     /* the consumer alone reads in place (device tensors over the CUDA IPC route) */
    int per_message; /* tensors in each INPUT_SIGNALS (--batch) */
} setup;

/* The backend of a process of a device run (NULL: host tensors). Each process makes its own,
 * after the fork: a CUDA context does not survive one. */
static mstar_backend *make_backend(const setup *s)
{
    if (!s->cuda)
        return NULL;
    mstar_device d = s->standin ? mstar_device_cpu() : (mstar_device){ MSTAR_DEVICE_CUDA, 0 };
    mstar_backend *b;
    CHECK(mstar_backend_create(d, &b));
    return b;
}

static mstar_comm *make_comm(const setup *s, const char *entity, mstar_mesh *mesh,
                             mstar_backend *backend)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = s->kind;
    o.shm_dir = s->shm_dir;
    o.send = mstar_comm_send_via_mesh;
    o.send_ctx = mesh;
    o.backend = backend;
    mstar_comm *c;
    CHECK(mstar_comm_create(&o, &c));
    return c;
}

static mstar_mesh *make_mesh(const setup *s, const char *entity)
{
    mstar_mesh_options mo = { MSTAR_MESH_IPC, s->ipc_dir, NULL, 0 };
    mstar_mesh *mesh;
    CHECK(mstar_mesh_create(entity, &mo, &mesh));
    return mesh;
}

static void send_simple(mstar_mesh *mesh, const char *peer, mstar_msg_type type)
{
    mstar_msg m;
    mstar_msg_init(&m, type);
    while (mstar_mesh_send(mesh, peer, &m) == MSTAR_EAGAIN) {
    }
    mstar_msg_clear(&m);
}

/* Wait for the next message of `type`, dropping any other. */
static void wait_for(mstar_mesh *mesh, mstar_msg_type type)
{
    for (;;) {
        mstar_msg m;
        if (mstar_mesh_recv(mesh, -1, &m) != MSTAR_OK)
            continue;
        bool found = m.type == type;
        mstar_msg_clear(&m);
        if (found)
            return;
    }
}

/* --profile: where each side times its calls (NULL: untimed). */
static mstar_bench_phases *phases;

/* Release every edge whose read landed (its ACK went out as it was collected, or goes as its
 * view is released) and end the requests they came in: a worker's step is over once its inputs
 * are consumed. A consumer that kept its requests would carry every one it ever saw. */
static void release_ready(mstar_comm *c)
{
    mstar_ready_set set;
    uint64_t t = mstar_bench_phase_begin(phases);
    CHECK(mstar_comm_get_ready_tensors(c, &set));
    if (set.nrequests > 0) /* an empty poll is the loop's, not a handoff's */
        mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_COLLECT, t);
    /* Released as timed as it was collected: the release of a handoff collected before the
     * producer armed the page (it arms once that handoff's ACK came) is not one it times. */
    t = set.nrequests > 0 && t != 0 ? mstar_bench_phase_begin(phases) : 0;
    if (set.nfailed > 0) {
        fprintf(stderr, "mstar bench transport: a read failed: %s\n", set.failed[0].message);
        exit(1);
    }
    for (uint32_t e = 0; e < set.nedges; e++)
        for (uint32_t i = 0; i < set.edges[e].ntensors; i++)
            CHECK(mstar_comm_dereference(c, set.edges[e].tensor_info[i].uuid, 1));
    for (uint32_t r = 0; r < set.nrequests; r++)
        CHECK(mstar_comm_cleanup_request(c, &set.rids[r]));
    mstar_ready_set_clear(&set);
    mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_RELEASE, t);
}

/* Spin on the rings for MSTAR_RING_SPIN_US, then sleep until a message arrives or a read lands
 * (bounded: a guard against a missed edge of the mesh's edge-triggered fd). A read that lands
 * while it spins is seen when the spin is over (the one-host transports' reads land at once). */
static void wait_for_work(mstar_mesh *mesh, mstar_comm *c)
{
    if (mstar_mesh_spin(mesh))
        return; /* a message came within MSTAR_RING_SPIN_US: no sleep, no wake-up */
    struct pollfd fds[2] = { { mstar_mesh_inbox_fd(mesh), POLLIN, 0 },
                             { mstar_comm_event_fd(c), POLLIN, 0 } };
    poll(fds, 2, 100);
    if (fds[1].revents & POLLIN)
        mstar_comm_event_drain(c);
}

/* The consumer's own CPU time at the handoffs the producer marks (bench.h), made before the
 * consumer is forked. */
static mstar_bench_peer_cpu *peer_cpu;

/* Start the reads of an INPUT_SIGNALS; count a SHUTDOWN (the first is confirmed). */
static void consume_one(const setup *s, mstar_mesh *mesh, mstar_comm *c, const mstar_msg *m,
                        int *shutdowns)
{
    if (m->type == MSTAR_MSG_INPUT_SIGNALS && !m->request_id.is_str)
        mstar_bench_peer_cpu_note(peer_cpu, (uint64_t)m->request_id.num);
    if (m->type == MSTAR_MSG_INPUT_SIGNALS) {
        /* Each message carries the tensors the run groups (--batch), or the figures are of
         * some other handoff than the one they name. */
        if (m->nedges != 1 || m->edges[0].ntensors != (uint32_t)s->per_message) {
            fprintf(stderr,
                    "mstar bench transport: the consumer got a message of %u edges and %u "
                    "tensors, want 1 edge of %d\n",
                    m->nedges, m->nedges > 0 ? m->edges[0].ntensors : 0, s->per_message);
            exit(1);
        }
        uint64_t t = mstar_bench_phase_begin(phases);
        CHECK((s->zero_copy || s->views
                   ? mstar_comm_start_read_views
                   : mstar_comm_start_read_tensors)(c, &m->request_id, m->edges, m->nedges, NULL));
        mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_READ, t);
    } else if (m->type == MSTAR_MSG_SHUTDOWN && ++*shutdowns == 1)
        send_simple(mesh, "worker_0", MSTAR_MSG_SHUTDOWN);
}

/* The consumer: read, release, ACK; until SHUTDOWN (then confirm and wait for the goodbye). As
 * a worker's loop does, it takes every message waiting before it collects what landed, so the
 * ACKs of handoffs that arrived together leave together and wake the producer once. It holds
 * nothing at the end: a tensor or request left over would be one the bench leaked. */
static void consumer(const setup *s)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    mstar_mesh *mesh = make_mesh(s, "worker_1");
    mstar_backend *b = make_backend(s);
    mstar_comm *c = make_comm(s, "worker_1", mesh, b);
    send_simple(mesh, "worker_0", MSTAR_MSG_HELLO);
    int shutdowns = 0;
    while (shutdowns < 2) {
        mstar_msg m;
        mstar_status st;
        uint64_t t = mstar_bench_phase_begin(phases);
        while (shutdowns < 2 && (st = mstar_mesh_recv(mesh, 0, &m)) != MSTAR_EAGAIN) {
            if (st != MSTAR_OK)
                continue;
            if (m.type == MSTAR_MSG_INPUT_SIGNALS)
                mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_RECEIVE, t);
            consume_one(s, mesh, c, &m, &shutdowns);
            mstar_msg_clear(&m);
            t = mstar_bench_phase_begin(phases);
        }
        release_ready(c);
        if (shutdowns < 2)
            wait_for_work(mesh, c);
    }
    size_t left = mstar_comm_num_tensors(c);
    mstar_comm_destroy(c);
    mstar_mesh_destroy(mesh);
    if (b != NULL)
        mstar_backend_destroy(b);
    if (left != 0)
        fprintf(stderr, "mstar bench transport: the consumer still holds %zu tensors\n", left);
    _exit(left != 0);
}

static void no_release(void *ctx, void *data)
{
}

typedef struct producer {
    mstar_mesh *mesh;
    mstar_comm *comm;
    mstar_backend *backend; /* device runs: the source tensors live there */
    pid_t consumer;
    int64_t next_rid;
    bool zero_copy;   /* outputs are loans: computed in place, staged without a copy */
    int per_message;  /* tensors in each INPUT_SIGNALS, all of one size */
    int tcp_fd;       /* the TCP stream baseline's connection (UCX transports), or -1 */
    uint8_t *tcp_buf; /* where it reads */
} producer;

/* Store, hold for one destination, stage and send p->per_message tensors of `size` bytes, all
 * in one INPUT_SIGNALS. Without loans each is `bytes` itself, stored again (no copy): the
 * handoff moves each tensor as if it were another's. */
static void send_message(producer *p, void *bytes, uint64_t size)
{
    mstar_rid rid = mstar_rid_from_int(p->next_rid++);
    int k = p->per_message;
    mstar_output o[IN_FLIGHT];
    memset(o, 0, (size_t)k * sizeof(o[0]));
    int64_t n = (int64_t)size;
    mstar_device d = p->backend != NULL ? mstar_backend_device(p->backend) : mstar_device_cpu();
    for (int i = 0; i < k; i++) {
        o[i].signal = "x";
        if (p->zero_copy) {
            /* The compute that fills a loan is the node's work, not the handoff's: one byte. */
            CHECK(mstar_comm_loan_output(p->comm, MSTAR_DTYPE_UINT8, &n, 1, &o[i].tensor,
                                         &o[i].loan));
            *(uint8_t *)o[i].tensor.data = 0x5a;
        } else {
            CHECK(mstar_tensor_init(&o[i].tensor, bytes, d, MSTAR_DTYPE_UINT8, 1, &n));
            o[i].release = no_release;
        }
    }
    mstar_tensor_info info[IN_FLIGHT];
    uint64_t t = mstar_bench_phase_begin(phases);
    CHECK(mstar_comm_store_and_return_tensor_info(p->comm, &rid, o, (size_t)k, NULL, info));
    mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_STORE, t);
    t = mstar_bench_phase_begin(phases);
    for (int i = 0; i < k; i++)
        CHECK(mstar_comm_increment_ref(p->comm, info[i].uuid, 1));
    CHECK(mstar_comm_register_for_send(p->comm, &rid, info, (size_t)k));
    mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_STAGE, t);
    t = mstar_bench_phase_begin(phases);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = rid;
    mstar_edge e;
    mstar_edge_init(&e);
    snprintf(e.name, sizeof(e.name), "x");
    snprintf(e.next_node, sizeof(e.next_node), "node");
    e.ntensors = (uint32_t)k;
    e.tensor_info = info;
    CHECK(mstar_msg_add_edge(&m, &e));
    mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_BUILD, t);
    t = mstar_bench_phase_begin(phases);
    mstar_status st;
    while ((st = mstar_mesh_send(p->mesh, "worker_1", &m)) == MSTAR_EAGAIN) {
    }
    mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_SEND, t);
    if (st != MSTAR_OK)
        fail("send INPUT_SIGNALS");
    mstar_msg_clear(&m);
    CHECK(mstar_comm_cleanup_request(p->comm, &rid)); /* freed by the ACK */
}

/* Handle messages until at most `outstanding` tensors are held. */
static void wait_held(producer *p, size_t outstanding)
{
    while (mstar_comm_num_tensors(p->comm) > outstanding) {
        mstar_msg m;
        /* A second without an ACK: a consumer that failed (its error is on stderr) sends none,
         * and the run must end rather than wait for it. */
        mstar_status st = mstar_mesh_recv(p->mesh, 1000, &m);
        if (st == MSTAR_EAGAIN && waitpid(p->consumer, NULL, WNOHANG) == p->consumer) {
            fprintf(stderr, "mstar bench transport: the consumer process exited (its error is "
                            "above)\n");
            exit(1);
        }
        if (st != MSTAR_OK)
            continue;
        if (m.type == MSTAR_MSG_TENSOR_RECEIVED) {
            uint64_t t = mstar_bench_phase_begin(phases);
            CHECK(mstar_comm_handle_message(p->comm, &m));
            mstar_bench_phase_end(phases, MSTAR_BENCH_PHASE_ACK, t);
        }
        mstar_msg_clear(&m);
    }
}

/* The source of every handoff of one size: host memory, or device memory of the backend. */
static void *source_alloc(producer *p, uint64_t size)
{
    if (p->backend == NULL) {
        void *bytes = malloc(size);
        if (bytes == NULL)
            fail("source buffer");
        memset(bytes, 0x5a, size);
        return bytes;
    }
    /* From the caching allocator, which keeps its segments: a consumer may still map one over
     * the CUDA IPC route, and CUDA memory must not be freed while another process maps it. */
    void *bytes;
    mstar_stream *st;
    CHECK(mstar_caching_alloc(p->backend, size, &bytes));
    CHECK(mstar_stream_create(p->backend, MSTAR_STREAM_DEFAULT, &st));
    CHECK(mstar_memset_async(st, bytes, 0x5a, size));
    CHECK(mstar_stream_synchronize(st));
    mstar_stream_destroy(st);
    return bytes;
}

static void source_free(producer *p, void *bytes)
{
    if (p->backend == NULL)
        free(bytes);
    else
        CHECK(mstar_caching_free(p->backend, bytes));
}

/* GB/s of one round: n messages of p->per_message tensors of `size` bytes, IN_FLIGHT tensors in
 * flight. */
static double throughput_round(producer *p, void *bytes, uint64_t size, long n)
{
    size_t k = (size_t)p->per_message;
    uint64_t t0 = mstar__now_ns();
    for (long i = 0; i < n; i++) {
        wait_held(p, IN_FLIGHT - k);
        send_message(p, bytes, size);
    }
    wait_held(p, 0);
    return (double)size * (double)k * (double)n / ((double)(mstar__now_ns() - t0) * 1e-9) / 1e9;
}

static void measure(producer *p, uint64_t size, bool quick, row *out)
{
    void *bytes = source_alloc(p, size);
    /* --quick is for tests, sanitizer builds included: few handoffs of the large sizes. */
    int iters = size <= (1u << 20) ? (quick ? 100 : 1000) : (quick ? 5 : 40);
    if (size >= (64u << 20))
        iters = 20; /* --quick stops at 16 MiB */
    double *rt = calloc((size_t)iters, sizeof(double));
    mstar_bench_cost_clock clock;
    for (int i = 0; i < iters + 3; i++) {
        if (i == 3) { /* warm-up: mappings, first faults */
            mstar_bench_cost_begin(&clock, p->consumer);
            /* The consumer's CPU from this handoff's arrival to the arrival of the one after
             * the last (the first of the warm-up below): iters handoffs. */
            mstar_bench_peer_cpu_arm(peer_cpu, (uint64_t)p->next_rid,
                                     (uint64_t)p->next_rid + (uint64_t)iters);
            mstar_bench_phases_arm(phases, true);
        }
        uint64_t t0 = mstar__now_ns();
        send_message(p, bytes, size);
        wait_held(p, 0);
        if (i >= 3)
            rt[i - 3] = (double)(mstar__now_ns() - t0) * 1e-3;
    }
    mstar_bench_cost_end(&clock, iters, &out->cost);
    mstar_bench_phases_arm(phases, false);
    out->bytes = size;
    out->rt_p50_us = mstar_bench_percentile(rt, (size_t)iters, 0.5);
    out->rt_p99_us = mstar_bench_percentile(rt, (size_t)iters, 0.99);
    out->rt_mean_us = mstar_bench_mean(rt, (size_t)iters);
    free(rt);
    /* Throughput: IN_FLIGHT handoffs in flight, rounds of about 512 MiB / ROUNDS (--quick:
     * 64 MiB / ROUNDS) each, 16..2700 handoffs (--quick: 8..330); the TCP stream moves a
     * round's bytes before each. Device tensors on a GPU move a hundred times faster than
     * memcpy, so their rounds are 8 GiB / ROUNDS: at 16 MiB a round of 512 MiB was 16 handoffs,
     * two windows of IN_FLIGHT, and measured the pipeline filling and draining more than its
     * sustained rate (0.25 ms a round on an H200). */
    bool gpu = p->backend != NULL && mstar_backend_device(p->backend).type == MSTAR_DEVICE_CUDA;
    uint64_t total = quick ? (64u << 20) : gpu ? (8ull << 30) : (512u << 20);
    long n = (long)(total / size / ROUNDS), least = quick ? IN_FLIGHT : 16,
         most = quick ? 330 : 2700;
    n = n < least ? least : n > most ? most : n;
    n /= p->per_message; /* messages: the same bytes whatever their grouping */
    /* Warm-up: the slots (and segments, and the consumer's mappings of them) that IN_FLIGHT
     * tensors of this size use are created before the clock starts. */
    for (int i = 0; i < IN_FLIGHT / p->per_message; i++)
        send_message(p, bytes, size);
    wait_held(p, 0);
    mstar_bench_peer_cpu_apply(peer_cpu, iters, &out->cost);
    out->gbps = out->tcp_gbps = 0;
    /* At least ROUNDS rounds, more while they are short (a round of a few milliseconds that a
     * busy machine preempted once is lost; the best of more of them is what the handoff
     * costs when it gets the cores), within ROUND_BUDGET_MS (--quick: a tenth). */
    uint64_t budget = (uint64_t)ROUND_BUDGET_MS * 1000000u / (quick ? 10u : 1u),
             start = mstar__now_ns();
    for (int round = 0; round < ROUNDS || (round < MAX_ROUNDS && mstar__now_ns() - start < budget);
         round++) {
        if (p->tcp_fd >= 0) {
            bool ok;
            double g = mstar_bench_tcp_stream(p->tcp_fd, p->tcp_buf, size, (uint64_t)n * size, &ok);
            if (!ok)
                fail("the TCP stream read wrong bytes");
            out->tcp_gbps = g > out->tcp_gbps ? g : out->tcp_gbps;
        }
        double g = throughput_round(p, bytes, size, n);
        out->gbps = g > out->gbps ? g : out->gbps;
    }
    source_free(p, bytes);
}

static void run_transport(const setup *s, bool quick, const uint64_t *sz, int nsizes, row *rows)
{
    peer_cpu = mstar_bench_peer_cpu_create();
    if (s->profile && (phases = mstar_bench_phases_create()) == NULL)
        fail("the profile's shared page");
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0)
        consumer(s);
    producer p = { NULL, NULL, NULL, pid, 1, s->zero_copy, s->per_message, -1, NULL };
    pid_t tcp_pid = -1;
    if (is_ucx(s->kind)) {
        p.tcp_fd = mstar_bench_tcp_start(&tcp_pid, sz[nsizes - 1]);
        p.tcp_buf = malloc(sz[nsizes - 1]);
        if (p.tcp_fd < 0 || p.tcp_buf == NULL)
            fail("the TCP stream baseline");
    }
    p.mesh = make_mesh(s, "worker_0");
    p.backend = make_backend(s);
    p.comm = make_comm(s, "worker_0", p.mesh, p.backend);
    wait_for(p.mesh, MSTAR_MSG_HELLO);
    for (int i = 0; i < nsizes; i++) {
        char h[32];
        mstar_bench_size_name(sz[i], h, sizeof(h));
        mstar_bench_progress("transport", "%s, %s",
                             s->zero_copy ? VIEWS_NAME : mstar_transport_kind_name(s->kind), h);
        measure(&p, sz[i], quick, &rows[i]);
    }
    send_simple(p.mesh, "worker_1", MSTAR_MSG_SHUTDOWN);
    wait_for(p.mesh, MSTAR_MSG_SHUTDOWN);
    send_simple(p.mesh, "worker_1", MSTAR_MSG_SHUTDOWN);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("the consumer process (its error is above)");
    if (phases != NULL) { /* one size: the consumer is gone, its samples are all there */
        rows[nsizes - 1].has_phases = true;
        mstar_bench_phases_summarize(phases, &rows[nsizes - 1].phases);
        mstar_bench_phases_destroy(phases);
        phases = NULL;
    }
    mstar_comm_destroy(p.comm);
    mstar_mesh_destroy(p.mesh);
    if (p.backend != NULL)
        mstar_backend_destroy(p.backend);
    mstar_bench_tcp_stop(p.tcp_fd, tcp_pid);
    free(p.tcp_buf);
    mstar_bench_peer_cpu_destroy(peer_cpu);
    peer_cpu = NULL;
}

static void remove_tree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "mstar bench transport: could not remove %s\n", dir);
}

/* A run's scratch directories: the mesh's ipc files in /tmp, the tensors in /dev/shm. */
typedef struct scratch {
    char ipc_dir[sizeof("/tmp/mstar-bench-ipc-XXXXXX")];
    char shm_dir[sizeof("/dev/shm/mstar-bench-XXXXXX")];
} scratch;

/* A run over `kind` in `sc`'s directories: host tensors, one a message, copied; the caller sets
 * what its run does otherwise. */
static setup setup_of(mstar_transport_kind kind, const scratch *sc)
{
    return (
        setup){ .kind = kind, .ipc_dir = sc->ipc_dir, .shm_dir = sc->shm_dir, .per_message = 1 };
}

/* What every run sets up: malloc tuned as the file comment says, the scratch directories (made
 * unique, named in the progress lines), the arena segment size, SIGPIPE ignored (a baseline
 * peer that died is an error, not a signal). */
static mstar_status prepare(scratch *sc)
{
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    snprintf(sc->ipc_dir, sizeof(sc->ipc_dir), "/tmp/mstar-bench-ipc-XXXXXX");
    snprintf(sc->shm_dir, sizeof(sc->shm_dir), "/dev/shm/mstar-bench-XXXXXX");
    if (mkdtemp(sc->ipc_dir) == NULL)
        return mstar_error_set(MSTAR_EIO, "%s: %s", sc->ipc_dir, strerror(errno));
    if (mkdtemp(sc->shm_dir) == NULL) {
        mstar_status st = mstar_error_set(MSTAR_EIO, "%s: %s", sc->shm_dir, strerror(errno));
        remove_tree(sc->ipc_dir);
        return st;
    }
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "256", 0);
    signal(SIGPIPE, SIG_IGN);
    mstar_bench_progress("transport", "scratch directories %s and %s", sc->ipc_dir, sc->shm_dir);
    return MSTAR_OK;
}

static void scratch_remove(const scratch *sc)
{
    remove_tree(sc->ipc_dir);
    remove_tree(sc->shm_dir);
}

/* The spin the bench would set beside a default of 0 (MSTAR_RING_SPIN_US was 0 by default
 * until it spun only while a CPU is spare): long enough that two processes handing off to each
 * other both stay awake on a 2-core machine. Beside a default that spins, the other row is 0,
 * asleep. */
#define SPIN_LONG_US 1000

/* Keep the lower of two round trips of one size (p50 decides; its p99, its mean and the CPU
 * time of the same handoffs go with it). */
static void keep_faster(row *into, const row *turn)
{
    if (turn->rt_p50_us < into->rt_p50_us) {
        into->rt_p50_us = turn->rt_p50_us;
        into->rt_p99_us = turn->rt_p99_us;
        into->rt_mean_us = turn->rt_mean_us;
        into->cost = turn->cost;
    }
}

/* Turns of a measurement and its baseline, one after the other, each keeping its best p50: the
 * latencies of this VM drift over seconds and minutes. */
#define RT_TURNS 3

/* Round trips of a floor ping-pong (bench_floor.c). */
static int floor_iters(bool quick)
{
    return quick ? 2000 : 10000;
}

static void spin_env_set(int us)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", us);
    setenv("MSTAR_RING_SPIN_US", v, 1);
}

/* The arena's 4 KiB handoff with the library's default spin and with another (bench.h). */
static void run_spins(const setup *s, bool quick, mstar_bench_transport_result *out)
{
    const char *saved = getenv("MSTAR_RING_SPIN_US");
    char *restore = saved ? strdup(saved) : NULL;
    out->nspins = MSTAR_BENCH_TRANSPORT_SPINS;
    out->spin_us[0] = MSTAR_RING_SPIN_US_DEFAULT;
    out->spin_us[1] = MSTAR_RING_SPIN_US_DEFAULT != 0 ? 0 : SPIN_LONG_US;
    for (int i = 0; i < out->nspins; i++) {
        mstar_bench_progress("transport", "arena, 4 KiB, spinning %d us before sleeping",
                             out->spin_us[i]);
        spin_env_set(out->spin_us[i]);
        run_transport(s, quick, sizes, 1, &out->spins[i]);
    }
    /* The default's bar is a ratio to the futex floor, and both move with how long this VM's
     * idle CPUs take to wake (the floor read 5.9 to 52 µs in runs minutes apart): so both take
     * RT_TURNS - 1 more turns, one after the other, each keeping its best p50. */
    spin_env_set(out->spin_us[0]);
    for (int t = 1; t < RT_TURNS; t++) {
        mstar_bench_progress("transport",
                             "the futex floor and the default's 4 KiB handoff, turn "
                             "%d of %d",
                             t + 1, RT_TURNS);
        mstar_bench_floor f;
        if (mstar_bench_floor_run(false, floor_iters(quick), &f) == MSTAR_OK &&
            f.p50_us < out->futex.p50_us)
            out->futex = f;
        row turn;
        run_transport(s, quick, sizes, 1, &turn);
        keep_faster(&out->spins[0], &turn);
    }
    if (restore != NULL)
        setenv("MSTAR_RING_SPIN_US", restore, 1);
    else
        unsetenv("MSTAR_RING_SPIN_US");
    free(restore);
}

mstar_status mstar_bench_transport_run(const mstar_transport_kind *kinds, int nkinds, bool quick,
                                       mstar_bench_transport_result *out)
{
    memset(out, 0, sizeof(*out));
    if (nkinds < 1 || nkinds > MSTAR_BENCH_TRANSPORT_KINDS)
        return mstar_error_set(MSTAR_EINVAL, "nkinds: %d, want 1..%d", nkinds,
                               MSTAR_BENCH_TRANSPORT_KINDS);
    for (int k = 0; k < nkinds; k++)
        if (kinds[k] != MSTAR_TRANSPORT_FILES && kinds[k] != MSTAR_TRANSPORT_ARENA &&
            !(is_ucx(kinds[k]) && nkinds == 1))
            return mstar_error_set(MSTAR_EINVAL,
                                   "kinds[%d]: %s, want files or arena, or a UCX kind alone", k,
                                   mstar_transport_kind_name(kinds[k]));
    scratch sc;
    mstar_status st = prepare(&sc);
    if (st != MSTAR_OK)
        return st;
    mstar_bench_progress("transport", "baselines: memcpy, ZeroMQ ping-pong");
    out->has_baselines = true;
    out->memcpy_gbps = memcpy_gbps();
    out->zmq_p50_us = zmq_pingpong_us(sc.ipc_dir, quick ? 500 : 3000, &out->zmq_p99_us);
    mstar_bench_progress("transport", "the floor: futex and busy-poll ping-pongs of 4 bytes");
    st = mstar_bench_floor_run(false, floor_iters(quick), &out->futex);
    if (st == MSTAR_OK)
        st = mstar_bench_floor_run(true, floor_iters(quick), &out->busy);
    if (st != MSTAR_OK) {
        scratch_remove(&sc);
        return st;
    }
    mstar_bench_progress("transport", "the mesh's 4 KiB ping-pong over rings and over ZeroMQ");
    out->ring_p50_us = mesh_pingpong_us(sc.ipc_dir, quick ? 500 : 3000, true, &out->ring_p99_us);
    out->mesh_zmq_p50_us =
        mesh_pingpong_us(sc.ipc_dir, quick ? 500 : 3000, false, &out->mesh_zmq_p99_us);
    out->in_flight = IN_FLIGHT;
    out->per_message = 1;
    out->nsizes = quick ? NSIZES - 1 : NSIZES; /* --quick, for tests: no 64 MiB handoffs */
    out->nkinds = nkinds;
    /* The handoffs' control messages go over the rings (what AUTO picks on one host, made sure
     * of here), and the arena's 4 KiB handoff once more over ZeroMQ to show what the rings
     * save. */
    char *restore = mesh_ring_set(true);
    for (int k = 0; k < nkinds; k++) {
        out->kinds[k] = kinds[k];
        setup s = setup_of(kinds[k], &sc);
        run_transport(&s, quick, sizes, out->nsizes, out->rows[k]);
        if (kinds[k] != MSTAR_TRANSPORT_ARENA)
            continue;
        s.zero_copy = out->has_views = true;
        run_transport(&s, quick, sizes, out->nsizes, out->views);
        s.zero_copy = false;
        mstar_bench_progress("transport", "arena, 4 KiB, control messages over ZeroMQ");
        setenv("MSTAR_MESH_RING", "0", 1);
        run_transport(&s, quick, sizes, 1, &out->arena_zmq);
        out->has_arena_zmq = true;
        setenv("MSTAR_MESH_RING", "1", 1);
        mstar_bench_progress("transport", "arena, 4 KiB, both ends in this process");
        st = mstar_bench_calls_run(sc.ipc_dir, sc.shm_dir, quick, &out->calls);
        if (st != MSTAR_OK) {
            mesh_ring_restore(restore);
            scratch_remove(&sc);
            return st;
        }
        out->has_calls = true;
        run_spins(&s, quick, out);
    }
    mesh_ring_restore(restore);
    scratch_remove(&sc);
    return MSTAR_OK;
}

static mstar_status run_device_route(const setup *s, const char *route, bool quick,
                                     const uint64_t *sz, int nsizes, row *rows);

/* One size over files or the arena (with loans and views too), and nothing else; with `cuda`,
 * device tensors over the arena's CUDA IPC route (run_device_route), whose read of at most 4 MiB
 * waits in its start call for its copy to land (MSTAR_CUDA_IPC_SPIN_US), so the profile's read
 * row holds the copy too. */
mstar_status mstar_bench_transport_size_run(const mstar_bench_size_options *o,
                                            mstar_bench_transport_result *out)
{
    memset(out, 0, sizeof(*out));
    if (o->kind != MSTAR_TRANSPORT_FILES && o->kind != MSTAR_TRANSPORT_ARENA)
        return mstar_error_set(MSTAR_EINVAL, "--size: the transport is %s, want files or arena",
                               mstar_transport_kind_name(o->kind));
    uint64_t most = sizes[(o->cuda ? NSIZES_CUDA : NSIZES) - 1];
    if (o->size == 0 || o->size > most)
        return mstar_error_set(MSTAR_EINVAL, "--size %llu: want 1 byte to %llu bytes",
                               (unsigned long long)o->size, (unsigned long long)most);
    if (!per_message_ok(o->per_message))
        return mstar_error_set(MSTAR_EINVAL, "--batch %d: want 1, 2, 4 or 8 tensors a message",
                               o->per_message);
    scratch sc;
    mstar_status st = prepare(&sc);
    if (st != MSTAR_OK)
        return st;
    out->in_flight = IN_FLIGHT;
    out->per_message = o->per_message;
    out->nsizes = out->nkinds = 1;
    out->kinds[0] = o->kind;
    out->cuda_ipc[0] = o->cuda;
    char *restore = mesh_ring_set(true);
    setup s = setup_of(o->kind, &sc);
    s.cuda = o->cuda;
    s.profile = o->profile;
    s.per_message = o->per_message;
    uint64_t size = o->size;
    if (o->cuda) {
        st = run_device_route(&s, "1", o->quick, &size, 1, out->rows[0]);
    } else {
        run_transport(&s, o->quick, &size, 1, out->rows[0]);
        if (o->kind == MSTAR_TRANSPORT_ARENA) {
            s.zero_copy = out->has_views = true;
            run_transport(&s, o->quick, &size, 1, out->views);
        }
    }
    mesh_ring_restore(restore);
    scratch_remove(&sc);
    return st;
}

/* ---- device tensors (--device cuda) --------------------------------------------------------- */

/* A pair run's rows: device tensors, and host tensors over the same transport. */
#define PAIR_DEVICE 0
#define PAIR_HOST   1

static void json_row_open(FILE *out, const row *w, int i);

/* The arena with device tensors and MSTAR_CUDA_IPC=`route`, in a child of its own: this process
 * must not touch CUDA before its later forks. The rows come back over a pipe; a child that
 * failed (no GPU) is an error, not the end of `mstar bench all`. */
static mstar_status run_device_route(const setup *s, const char *route, bool quick,
                                     const uint64_t *sz, int nsizes, row *rows)
{
    int fds[2];
    if (pipe(fds) != 0)
        fail("pipe");
    pid_t pid = fork();
    if (pid < 0)
        fail("fork");
    if (pid == 0) {
        close(fds[0]);
        setenv("MSTAR_CUDA_IPC", route, 1);
        run_transport(s, quick, sz, nsizes, rows);
        size_t n = sizeof(row) * (size_t)nsizes;
        _exit(write(fds[1], rows, n) == (ssize_t)n ? 0 : 1);
    }
    close(fds[1]);
    size_t want = sizeof(row) * (size_t)nsizes, got = 0;
    for (ssize_t r = 1; got < want && r > 0; got += r > 0 ? (size_t)r : 0)
        r = read(fds[0], (char *)rows + got, want - got);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != want || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return mstar_error_set(MSTAR_EIO,
                               "the device run over %s with MSTAR_CUDA_IPC=%s failed (its error "
                               "is above)",
                               mstar_transport_kind_name(s->kind), route);
    return MSTAR_OK;
}

/* GB/s of copies of `size` bytes on one stream, best of ROUNDS: device to device, or device to
 * pinned host then back (`staged`), as one process would move a tensor without the transport.
 * The copies land in dst[0..ndst-1] in turn. */
static double copy_gbps(mstar_stream *st, void *src, void *const *dst, int ndst, void *pinned,
                        uint64_t size, bool staged)
{
    int reps = size <= (1u << 20) ? 200 : 20;
    double best = 0;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t t0 = mstar__now_ns();
        for (int i = 0; i < reps; i++) {
            void *to = dst[i % ndst];
            if (staged) {
                CHECK(mstar_memcpy_async(st, pinned, src, size, MSTAR_MEMCPY_D2H));
                CHECK(mstar_memcpy_async(st, to, pinned, size, MSTAR_MEMCPY_H2D));
            } else {
                CHECK(mstar_memcpy_async(st, to, src, size, MSTAR_MEMCPY_D2D));
            }
        }
        CHECK(mstar_stream_synchronize(st));
        double g = (double)size * reps / ((double)(mstar__now_ns() - t0) * 1e-9) / 1e9;
        best = g > best ? g : best;
    }
    return best;
}

/* The in-process baselines per size. The d2d copy goes back and forth between two buffers, as
 * the baseline does: up to 16 MiB both stay in the GPU's L2 (50 MB on an H200), and it
 * runs near L2 speed. The route's reads cannot: each lands in a buffer of its own (the consumer
 * holds up to IN_FLIGHT of them, 128 MiB at 16 MiB), so every copy writes HBM. d2d_spread copies
 * into IN_FLIGHT + 1 buffers in turn, the most the GPU gives for that pattern: the route's
 * ceiling, shown beside the baseline. */
static void device_baselines(int nsizes, mstar_bench_transport_result *out)
{
    enum { SPREAD = IN_FLIGHT + 1 };
    mstar_backend *b;
    mstar_stream *st;
    CHECK(mstar_backend_create((mstar_device){ MSTAR_DEVICE_CUDA, 0 }, &b));
    CHECK(mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &st));
    uint64_t most = sizes[nsizes - 1];
    void *src, *dst[SPREAD], *pinned;
    CHECK(mstar_device_alloc(b, most, &src));
    for (int i = 0; i < SPREAD; i++)
        CHECK(mstar_device_alloc(b, most, &dst[i]));
    CHECK(mstar_host_alloc_pinned(b, most, &pinned));
    for (int i = 0; i < nsizes; i++) {
        out->d2d_gbps[i] = copy_gbps(st, src, dst, 1, pinned, sizes[i], false);
        out->d2d_spread_gbps[i] = copy_gbps(st, src, dst, SPREAD, pinned, sizes[i], false);
        out->staged_gbps[i] = copy_gbps(st, src, dst, 1, pinned, sizes[i], true);
    }
    CHECK(mstar_host_free_pinned(b, pinned));
    for (int i = 0; i < SPREAD; i++)
        CHECK(mstar_device_free(b, dst[i]));
    CHECK(mstar_device_free(b, src));
    mstar_stream_destroy(st);
    mstar_backend_destroy(b);
}

/* The 4 KiB round trip over the route is held to a bar against the host arena's, and this
 * machine's latency drifts over seconds: so after the first runs of each, all take RT_TURNS - 1
 * more turns at 4 KiB, one after the other (the host arena, the route copying, the route read as
 * views), and each keeps its best p50. */
static mstar_status take_rt_turns(const setup *host, const setup *dev, bool quick, row *host_rt,
                                  row *ipc_rt, row *views_rt)
{
    mstar_status st = MSTAR_OK;
    for (int t = 1; t < RT_TURNS && st == MSTAR_OK; t++) {
        mstar_bench_progress("transport",
                             "4 KiB round trips, turn %d of %d: host arena, CUDA IPC, its views",
                             t + 1, RT_TURNS);
        row turn;
        run_transport(host, quick, sizes, 1, &turn);
        keep_faster(host_rt, &turn);
        st = run_device_route(dev, "1", quick, sizes, 1, &turn);
        if (st == MSTAR_OK)
            keep_faster(ipc_rt, &turn);
        if (st != MSTAR_OK)
            continue;
        setup viewing = *dev;
        viewing.views = true;
        st = run_device_route(&viewing, "1", quick, sizes, 1, &turn);
        if (st == MSTAR_OK)
            keep_faster(views_rt, &turn);
    }
    return st;
}

mstar_status mstar_bench_transport_cuda_run(bool quick, mstar_bench_transport_result *out)
{
    memset(out, 0, sizeof(*out));
    scratch sc;
    mstar_status st = prepare(&sc);
    if (st != MSTAR_OK)
        return st;
    out->device = true;
    out->in_flight = IN_FLIGHT;
    out->per_message = 1;
    out->nsizes = quick ? AT_16MIB + 1 : NSIZES_CUDA;
    out->nkinds = 2;
    /* The host arena's 4 KiB round trip first: it needs no CUDA, and this process must not
     * start CUDA before it forks. */
    mstar_bench_progress("transport", "baseline: the arena's 4 KiB round trip, host tensors");
    setup host = setup_of(MSTAR_TRANSPORT_ARENA, &sc);
    row host_row;
    run_transport(&host, quick, sizes, 1, &host_row);
    static const char *const routes[2] = { "1", "0" };
    setup dev = setup_of(MSTAR_TRANSPORT_ARENA, &sc);
    dev.cuda = true;
    for (int k = 0; k < 2 && st == MSTAR_OK; k++) {
        out->kinds[k] = MSTAR_TRANSPORT_ARENA;
        out->cuda_ipc[k] = k == 0;
        mstar_bench_progress("transport", "device tensors, MSTAR_CUDA_IPC=%s", routes[k]);
        st = run_device_route(&dev, routes[k], quick, sizes, out->nsizes, out->rows[k]);
    }
    if (st == MSTAR_OK) {
        /* The route again, the consumer viewing the producer's memory instead of copying it. */
        mstar_bench_progress("transport", "device tensors, MSTAR_CUDA_IPC=1, read as views");
        setup viewing = dev;
        viewing.views = true;
        st = run_device_route(&viewing, "1", quick, sizes, out->nsizes, out->views);
        out->has_views = st == MSTAR_OK;
    }
    if (st == MSTAR_OK)
        st = take_rt_turns(&host, &dev, quick, &host_row, &out->rows[0][0], &out->views[0]);
    out->host_rt_p50_us = host_row.rt_p50_us;
    out->host_rt_p99_us = host_row.rt_p99_us;
    if (st == MSTAR_OK) {
        mstar_bench_progress("transport", "baselines: device-to-device, pinned D2H + H2D");
        device_baselines(out->nsizes, out);
    }
    scratch_remove(&sc);
    return st;
}

/* Device tensors over a staged transport (files, UCX) beside host tensors over the same one:
 * the host run first, in this process (no CUDA before the forks), then the device run in a
 * child of its own as above. */
mstar_status mstar_bench_transport_device_pair_run(mstar_transport_kind kind, bool standin,
                                                   bool quick, mstar_bench_transport_result *out)
{
    memset(out, 0, sizeof(*out));
    if (kind != MSTAR_TRANSPORT_FILES && !is_ucx(kind))
        return mstar_error_set(MSTAR_EINVAL, "device pair run over %s: want files or a UCX kind",
                               mstar_transport_kind_name(kind));
    scratch sc;
    mstar_status st = prepare(&sc);
    if (st != MSTAR_OK)
        return st;
    out->device = out->host_pair = true;
    out->standin = standin;
    out->in_flight = IN_FLIGHT;
    out->per_message = 1;
    out->nsizes = quick ? NSIZES - 1 : NSIZES;
    out->nkinds = 2;
    out->kinds[0] = out->kinds[1] = kind;
    mstar_bench_progress("transport", "host tensors over %s", mstar_transport_kind_name(kind));
    setup host = setup_of(kind, &sc);
    run_transport(&host, quick, sizes, out->nsizes, out->rows[PAIR_HOST]);
    mstar_bench_progress("transport", "device tensors over %s", mstar_transport_kind_name(kind));
    setup dev = setup_of(kind, &sc);
    dev.cuda = true;
    dev.standin = standin;
    st = run_device_route(&dev, "0", quick, sizes, out->nsizes, out->rows[PAIR_DEVICE]);
    scratch_remove(&sc);
    return st;
}

static const char *device_name(const mstar_bench_transport_result *r)
{
    return r->standin ? "the host backend (standing in for cuda:0)" : "cuda:0";
}

static void print_pair_table(const mstar_bench_transport_result *r)
{
    bool remote = is_ucx(r->kinds[0]);
    printf("transport %s, device tensors on %s beside host tensors: one producer, one consumer "
           "process; %d in flight%s\n\n",
           mstar_transport_kind_name(r->kinds[0]), device_name(r), r->in_flight,
           remote ? "; a raw loopback TCP stream of each size (tcp GB/s)" : "");
    printf("  %-8s %12s %12s %12s %12s %8s %10s %10s %8s", "size", "dev p50 us", "dev p99 us",
           "host p50 us", "host p99 us", "rt d/h", "dev GB/s", "host GB/s", "GB/s d/h");
    printf(remote ? " %10s\n" : "\n", "tcp GB/s");
    for (int i = 0; i < r->nsizes; i++) {
        const row *d = &r->rows[PAIR_DEVICE][i], *h = &r->rows[PAIR_HOST][i];
        char name[32];
        mstar_bench_size_name(d->bytes, name, sizeof(name));
        printf("  %-8s %12.1f %12.1f %12.1f %12.1f %7.2fx %10.2f %10.2f %7.2fx", name, d->rt_p50_us,
               d->rt_p99_us, h->rt_p50_us, h->rt_p99_us, d->rt_p50_us / h->rt_p50_us, d->gbps,
               h->gbps, d->gbps / h->gbps);
        if (remote)
            printf(" %10.2f", h->tcp_gbps);
        printf("\n");
    }
    printf("\n");
    mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
    mstar_bench_targets_print(t, mstar_bench_transport_targets(r, t), stdout);
}

static void pair_json(const mstar_bench_transport_result *r, FILE *out)
{
    fprintf(out,
            "{\"suite\":\"transport\",\"device\":\"%s\",\"transport\":\"%s\","
            "\"in_flight\":%d,\"runs\":[",
            r->standin ? "host-standin" : "cuda:0", mstar_transport_kind_name(r->kinds[0]),
            r->in_flight);
    for (int k = 0; k < 2; k++) {
        fprintf(out, "%s{\"tensors\":\"%s\",\"sizes\":[", k ? "," : "",
                k == PAIR_DEVICE ? "device" : "host");
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = &r->rows[k][i];
            json_row_open(out, w, i);
            if (is_ucx(r->kinds[k]))
                mstar_bench_json_field(out, "tcp_stream_gbps", w->tcp_gbps, 4);
            if (k == PAIR_DEVICE) {
                const row *h = &r->rows[PAIR_HOST][i];
                mstar_bench_json_field(out, "rt_vs_host", w->rt_p50_us / h->rt_p50_us, 3);
                mstar_bench_json_field(out, "gbps_vs_host", w->gbps / h->gbps, 3);
            }
            fprintf(out, "}");
        }
        fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
}

static void print_device_table(const mstar_bench_transport_result *r)
{
    if (r->host_pair) {
        print_pair_table(r);
        return;
    }
    printf("transport, device tensors on cuda:0: one producer, one consumer process; %d in flight\n"
           "baselines in one process: a device-to-device copy between two buffers (d2d), the same "
           "into %d buffers in turn as the route's reads land (spread: the route's ceiling), and "
           "pinned D2H then H2D (staged); the arena's 4 KiB round trip of host tensors: p50 %.1f "
           "us, p99 %.1f us\n"
           "the 4 KiB round trips of host tensors and over the CUDA IPC route took %d turns each "
           "(best p50 shown)\n\n",
           r->in_flight, r->in_flight + 1, r->host_rt_p50_us, r->host_rt_p99_us, RT_TURNS);
    for (int k = 0; k < r->nkinds; k++) {
        printf("arena, %s\n  %-8s %12s %12s %10s %10s %10s %10s %10s %10s\n",
               r->cuda_ipc[k] ? "CUDA IPC route (MSTAR_CUDA_IPC=1)" : "staged (MSTAR_CUDA_IPC=0)",
               "size", "rt p50 us", "rt p99 us", "GB/s", "d2d GB/s", "spread", "staged",
               "/baseline", "/spread");
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = &r->rows[k][i];
            char h[32];
            mstar_bench_size_name(w->bytes, h, sizeof(h));
            double base = r->cuda_ipc[k] ? r->d2d_gbps[i] : r->staged_gbps[i];
            printf("  %-8s %12.1f %12.1f %10.2f %10.2f %10.2f %10.2f %9.2fx %9.2fx\n", h,
                   w->rt_p50_us, w->rt_p99_us, w->gbps, r->d2d_gbps[i], r->d2d_spread_gbps[i],
                   r->staged_gbps[i], w->gbps / base, w->gbps / r->d2d_spread_gbps[i]);
        }
        printf("\n");
    }
    if (r->has_views) {
        printf("arena, CUDA IPC route, read as views (mstar_comm_start_read_views: no copy)\n"
               "  %-8s %12s %12s %10s %10s\n",
               "size", "rt p50 us", "rt p99 us", "GB/s", "/d2d");
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = &r->views[i];
            char h[32];
            mstar_bench_size_name(w->bytes, h, sizeof(h));
            printf("  %-8s %12.1f %12.1f %10.2f %9.2fx\n", h, w->rt_p50_us, w->rt_p99_us, w->gbps,
                   w->gbps / r->d2d_gbps[i]);
        }
        printf("\n");
    }
    mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
    mstar_bench_targets_print(t, mstar_bench_transport_targets(r, t), stdout);
}

/* CPU time and context switches per round trip, of each side. */
static void cost_json(FILE *out, const mstar_bench_cost *c)
{
    mstar_bench_json_field(out, "cpu_us_producer", c->self.cpu_us, 4);
    mstar_bench_json_field(out, "cpu_us_consumer", c->peer.cpu_us, 4);
    mstar_bench_json_field(out, "switches_producer", c->self.vol_csw + c->self.invol_csw, 4);
    mstar_bench_json_field(out, "switches_consumer", c->peer.vol_csw + c->peer.invol_csw, 4);
}

/* The start of one size's JSON object: the fields every run measures (the caller closes it). */
static void json_row_open(FILE *out, const row *w, int i)
{
    fprintf(out, "%s{\"bytes\":%llu", i ? "," : "", (unsigned long long)w->bytes);
    mstar_bench_json_field(out, "rt_p50_us", w->rt_p50_us, 4);
    mstar_bench_json_field(out, "rt_p99_us", w->rt_p99_us, 4);
    mstar_bench_json_field(out, "gbps", w->gbps, 4);
    cost_json(out, &w->cost);
    if (!w->has_phases)
        return;
    fprintf(out, ",\"profile\":{\"calls\":[");
    for (int k = 0; k < MSTAR_BENCH_PHASES; k++) {
        fprintf(out, "%s{\"call\":\"%s\",\"side\":\"%s\",\"n\":%u", k ? "," : "",
                mstar_bench_phase_name(k),
                mstar_bench_phase_on_producer(k) ? "producer" : "consumer", w->phases.calls[k]);
        mstar_bench_json_field(out, "p50_us", w->phases.p50_us[k], 4);
        mstar_bench_json_field(out, "p99_us", w->phases.p99_us[k], 4);
        fprintf(out, "}");
    }
    fprintf(out, "]");
    mstar_bench_json_field(out, "clock_us", w->phases.clock_us, 4);
    fprintf(out, "}");
}

void mstar_bench_transport_cuda_json(const mstar_bench_transport_result *r, FILE *out)
{
    if (r->host_pair) {
        pair_json(r, out);
        return;
    }
    fprintf(out, "{\"suite\":\"transport\",\"device\":\"cuda:0\",\"in_flight\":%d", r->in_flight);
    mstar_bench_json_field(out, "host_arena_4k_rt_p50_us", r->host_rt_p50_us, 4);
    mstar_bench_json_field(out, "host_arena_4k_rt_p99_us", r->host_rt_p99_us, 4);
    fprintf(out, ",\"routes\":[");
    for (int k = 0; k < r->nkinds; k++) {
        fprintf(out, "%s{\"route\":\"%s\",\"sizes\":[", k ? "," : "",
                r->cuda_ipc[k] ? "cuda_ipc" : "staged");
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = &r->rows[k][i];
            json_row_open(out, w, i);
            mstar_bench_json_field(out, "d2d_gbps", r->d2d_gbps[i], 4);
            mstar_bench_json_field(out, "d2d_spread_gbps", r->d2d_spread_gbps[i], 4);
            mstar_bench_json_field(out, "staged_gbps", r->staged_gbps[i], 4);
            fprintf(out, "}");
        }
        fprintf(out, "]}");
    }
    if (r->has_views) {
        fprintf(out, ",{\"route\":\"cuda_ipc_views\",\"sizes\":[");
        for (int i = 0; i < r->nsizes; i++) {
            json_row_open(out, &r->views[i], i);
            mstar_bench_json_field(out, "d2d_gbps", r->d2d_gbps[i], 4);
            fprintf(out, "}");
        }
        fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
}

/* A UCX transport's throughput at >= 1 MiB against the TCP stream (lowest ratio). */
static size_t ucx_target(const mstar_bench_transport_result *r, int k, mstar_bench_target *out)
{
    const row *rows = r->rows[k];
    int worst = 2;
    for (int i = 2; i < r->nsizes; i++)
        worst =
            rows[i].gbps / rows[i].tcp_gbps < rows[worst].gbps / rows[worst].tcp_gbps ? i : worst;
    double v = rows[worst].gbps / rows[worst].tcp_gbps;
    char h[32];
    mstar_bench_size_name(rows[worst].bytes, h, sizeof(h));
    mstar_bench_target t = { "UCX TCP transport throughput at >= 1 MiB / raw TCP stream (lowest)",
                             ">= 0.6x", v, "", v >= 0.6 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET };
    snprintf(t.shown, sizeof(t.shown), "%.2fx (at %s)", v, h);
    *out = t;
    return 1;
}

/* The lowest ratio of route k's throughput at sizes[from] and above to its baseline (`base` per
 * size), and where it was. */
static double lowest_from(const mstar_bench_transport_result *r, int k, const double *base,
                          int from, int *at)
{
    *at = from;
    for (int i = from; i < r->nsizes; i++)
        if (r->rows[k][i].gbps / base[i] < r->rows[k][*at].gbps / base[*at])
            *at = i;
    return r->rows[k][*at].gbps / base[*at];
}

static mstar_bench_target ratio_target(const char *name, const char *bar, double v, bool met,
                                       int at)
{
    mstar_bench_target t = { name, bar, v, "", met ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET };
    char h[32];
    if (at >= 0) {
        mstar_bench_size_name(sizes[at], h, sizeof(h));
        snprintf(t.shown, sizeof(t.shown), "%.2fx (at %s)", v, h);
    } else {
        snprintf(t.shown, sizeof(t.shown), "%.2fx", v);
    }
    return t;
}

/* A device run: the CUDA IPC route at 16 MiB against the copy into a buffer per read (its
 * ceiling: the route's pattern, in one process), from 64 MiB against the plain device copy (a
 * full run only); the staged route against its floor; the 4 KiB IPC round trip against the host
 * arena's. */
static size_t device_targets(const mstar_bench_transport_result *r, mstar_bench_target *out)
{
    if (r->nsizes <= AT_16MIB)
        return 0;
    int ipc = r->cuda_ipc[0] ? 0 : 1, staged = 1 - ipc, at;
    size_t n = 0;
    double v = r->rows[ipc][AT_16MIB].gbps / r->d2d_spread_gbps[AT_16MIB];
    out[n++] = ratio_target("CUDA IPC route throughput at 16 MiB / copies into a buffer per read "
                            "(spread)",
                            ">= 0.8x", v, v >= 0.8, AT_16MIB);
    if (r->nsizes > AT_16MIB + 1) {
        v = lowest_from(r, ipc, r->d2d_gbps, AT_16MIB + 1, &at);
        out[n++] = ratio_target("CUDA IPC route throughput at >= 64 MiB / device-to-device copy "
                                "(lowest)",
                                ">= 0.9x", v, v >= 0.9, at);
    }
    v = lowest_from(r, staged, r->staged_gbps, AT_16MIB, &at);
    out[n++] = ratio_target("staged route throughput at >= 16 MiB / pinned D2H + H2D (lowest)",
                            ">= 0.8x", v, v >= 0.8, at);
    v = r->rows[ipc][0].rt_p50_us / r->host_rt_p50_us;
    out[n++] = ratio_target("4 KiB round trip p50 over CUDA IPC / host arena 4 KiB round trip p50",
                            "<= 1.5x", v, v <= 1.5, -1);
    if (r->has_views) {
        v = r->views[0].rt_p50_us / r->host_rt_p50_us;
        out[n++] = ratio_target("4 KiB round trip p50 over CUDA IPC, read as views / host arena "
                                "4 KiB round trip p50",
                                "<= 1.5x", v, v <= 1.5, -1);
    }
    return n;
}

/* A UCX pair run: device tensors against host tensors over the same transport, the 4 KiB round
 * trip and the lowest throughput ratio at >= 1 MiB. No target for files: none was set. */
static size_t pair_targets(const mstar_bench_transport_result *r, mstar_bench_target *out)
{
    if (!is_ucx(r->kinds[0]) || r->nsizes < 3)
        return 0;
    const row *d = r->rows[PAIR_DEVICE], *h = r->rows[PAIR_HOST];
    int worst = 2;
    for (int i = 2; i < r->nsizes; i++)
        worst = d[i].gbps / h[i].gbps < d[worst].gbps / h[worst].gbps ? i : worst;
    double rt = d[0].rt_p50_us / h[0].rt_p50_us, bw = d[worst].gbps / h[worst].gbps;
    mstar_bench_target t[2] = {
        { "UCX TCP 4 KiB round trip p50, device / host tensors", "<= 2x", rt, "",
          rt <= 2 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
        { "UCX TCP throughput at >= 1 MiB, device / host tensors (lowest)", ">= 0.8x", bw, "",
          bw >= 0.8 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
    };
    char name[32];
    mstar_bench_size_name(d[worst].bytes, name, sizeof(name));
    snprintf(t[0].shown, sizeof(t[0].shown), "%.2fx", rt);
    snprintf(t[1].shown, sizeof(t[1].shown), "%.2fx (at %s)", bw, name);
    memcpy(out, t, sizeof(t));
    return 2;
}

/* The row of the lowest throughput at >= 1 MiB (sizes from index 2). */
static int worst_gbps(const row *rows, int nsizes)
{
    int worst = 2;
    for (int i = 2; i < nsizes; i++)
        worst = rows[i].gbps < rows[worst].gbps ? i : worst;
    return worst;
}

/* Loans and views: the handoff at >= 1 MiB copies no byte, so it must beat memcpy by far. */
static size_t views_target(const mstar_bench_transport_result *r, mstar_bench_target *out)
{
    int worst = worst_gbps(r->views, r->nsizes);
    double v = r->views[worst].gbps / r->memcpy_gbps;
    char h[32];
    mstar_bench_size_name(r->views[worst].bytes, h, sizeof(h));
    mstar_bench_target t = { "arena loan+view throughput at >= 1 MiB / memcpy (lowest)", ">= 3x", v,
                             "", v >= 3 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET };
    snprintf(t.shown, sizeof(t.shown), "%.2fx (at %s)", v, h);
    *out = t;
    return 1;
}

/* The floor: the 4 KiB handoff with the default settings within 1.1x a futex ping-pong, and
 * at most 5 µs with both sides spinning (the spin row that is not 0). */
static size_t spin_targets(const mstar_bench_transport_result *r, mstar_bench_target *out)
{
    if (r->nspins == 0)
        return 0;
    const row *def = &r->spins[0], *spin = &r->spins[r->spin_us[0] != 0 ? 0 : 1];
    int spin_us = r->spin_us[r->spin_us[0] != 0 ? 0 : 1];
    double v = def->rt_p50_us / r->futex.p50_us;
    mstar_bench_target t[2] = {
        { "4 KiB arena round trip p50, default settings / futex ping-pong p50", "<= 1.1x", v, "",
          v <= 1.1 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
        { "4 KiB arena round trip p50, both sides spinning (MSTAR_RING_SPIN_US)", "<= 5 us",
          spin->rt_p50_us, "", spin->rt_p50_us <= 5.0 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
    };
    snprintf(t[0].shown, sizeof(t[0].shown), "%.2fx (%.1f / %.1f us)", v, def->rt_p50_us,
             r->futex.p50_us);
    char calls[48] = ""; /* the handoff's calls on the fastest and slowest CPU, when measured */
    if (r->has_calls) {
        double lo, hi;
        mstar_bench_calls_range(&r->calls, &lo, &hi);
        snprintf(calls, sizeof(calls), "; calls %.1f-%.1f us", lo, hi);
    }
    snprintf(t[1].shown, sizeof(t[1].shown), "%.1f us (spin %d us, CPU %.1f us%s)", spin->rt_p50_us,
             spin_us, cost_cpu_us(&spin->cost), calls);
    memcpy(out, t, sizeof(t));
    return 2;
}

size_t mstar_bench_transport_targets(const mstar_bench_transport_result *r, mstar_bench_target *out)
{
    if (r->device)
        return r->host_pair ? pair_targets(r, out) : device_targets(r, out);
    if (!r->has_baselines)
        return 0;
    for (int k = 0; k < r->nkinds; k++) {
        if (is_ucx(r->kinds[k]))
            return ucx_target(r, k, out); /* a UCX kind runs alone */
        if (r->kinds[k] != MSTAR_TRANSPORT_ARENA)
            continue;
        const row *rows = r->rows[k];
        int worst = worst_gbps(rows, r->nsizes); /* the lowest ratio at >= 1 MiB */
        char h[32];
        mstar_bench_size_name(rows[worst].bytes, h, sizeof(h));
        /* The rings' bar: a 4 KiB handoff whose control messages (INPUT_SIGNALS,
         * TENSOR_RECEIVED) go over them in at most half a raw ZeroMQ ping-pong. */
        double bw = rows[worst].gbps / r->memcpy_gbps, rt = rows[0].rt_p50_us / r->zmq_p50_us;
        mstar_bench_target t[2] = {
            { "arena throughput at >= 1 MiB / memcpy (lowest)", ">= 0.45x", bw, "",
              bw >= 0.45 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
            { "4 KiB arena round trip, control over the ring, p50 / raw ZeroMQ ping-pong p50",
              "<= 0.5x", rt, "", rt <= 0.5 ? MSTAR_BENCH_MET : MSTAR_BENCH_NOT_MET },
        };
        snprintf(t[0].shown, sizeof(t[0].shown), "%.2fx (at %s)", bw, h);
        snprintf(t[1].shown, sizeof(t[1].shown), "%.2fx", rt);
        out[0] = t[0];
        out[1] = t[1];
        size_t n = r->has_views ? 2 + views_target(r, out + 2) : 2;
        return n + spin_targets(r, out + n);
    }
    return 0;
}

/* Each kind's rows; with the baselines, their ratios to them. */
static void transports_json(const mstar_bench_transport_result *r, FILE *out)
{
    fprintf(out, ",\"transports\":[");
    for (int k = 0; k < r->nkinds + r->has_views; k++) {
        bool views = k == r->nkinds;
        fprintf(out, "%s{\"transport\":\"%s\",\"sizes\":[", k ? "," : "",
                views ? "arena-views" : mstar_transport_kind_name(r->kinds[k]));
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = views ? &r->views[i] : &r->rows[k][i];
            json_row_open(out, w, i);
            if (r->has_baselines) {
                mstar_bench_json_field(out, "vs_memcpy", w->gbps / r->memcpy_gbps, 3);
                mstar_bench_json_field(out, "rt_vs_zmq", w->rt_p50_us / r->zmq_p50_us, 3);
                mstar_bench_json_field(out, "rt_vs_futex", w->rt_p50_us / r->futex.p50_us, 3);
            }
            if (!views && is_ucx(r->kinds[k])) {
                mstar_bench_json_field(out, "tcp_stream_gbps", w->tcp_gbps, 4);
                mstar_bench_json_field(out, "vs_tcp", w->gbps / w->tcp_gbps, 3);
            }
            fprintf(out, "}");
        }
        fprintf(out, "]}");
    }
    fprintf(out, "]}\n");
}

/* `,"name":{p50, p99, costs}` of one ping-pong floor. */
static void floor_json(FILE *out, const char *name, const mstar_bench_floor *f)
{
    fprintf(out, ",\"%s\":{", name);
    fprintf(out, "\"p50_us\":");
    mstar__json_number(out, f->p50_us, 4);
    mstar_bench_json_field(out, "p99_us", f->p99_us, 4);
    cost_json(out, &f->cost);
    fprintf(out, "}");
}

void mstar_bench_transport_json(const mstar_bench_transport_result *r, FILE *out)
{
    fprintf(out, "{\"suite\":\"transport\",\"in_flight\":%d,\"tensors_per_message\":%d",
            r->in_flight, r->per_message);
    if (r->has_baselines) {
        mstar_bench_json_field(out, "memcpy_gbps", r->memcpy_gbps, 4);
        mstar_bench_json_field(out, "zmq_pingpong_p50_us", r->zmq_p50_us, 4);
        mstar_bench_json_field(out, "zmq_pingpong_p99_us", r->zmq_p99_us, 4);
        mstar_bench_json_field(out, "ring_4k_p50_us", r->ring_p50_us, 4);
        mstar_bench_json_field(out, "ring_4k_p99_us", r->ring_p99_us, 4);
        mstar_bench_json_field(out, "mesh_zmq_4k_p50_us", r->mesh_zmq_p50_us, 4);
        mstar_bench_json_field(out, "mesh_zmq_4k_p99_us", r->mesh_zmq_p99_us, 4);
        floor_json(out, "futex_pingpong", &r->futex);
        floor_json(out, "busy_pingpong", &r->busy);
    }
    if (r->has_calls)
        mstar_bench_calls_json(&r->calls, out);
    if (r->has_arena_zmq) {
        mstar_bench_json_field(out, "arena_zmq_4k_rt_p50_us", r->arena_zmq.rt_p50_us, 4);
        mstar_bench_json_field(out, "arena_zmq_4k_rt_p99_us", r->arena_zmq.rt_p99_us, 4);
    }
    if (r->nspins > 0) {
        fprintf(out, ",\"spins\":[");
        for (int i = 0; i < r->nspins; i++) {
            const row *w = &r->spins[i];
            fprintf(out, "%s{\"spin_us\":%d", i ? "," : "", r->spin_us[i]);
            mstar_bench_json_field(out, "rt_p50_us", w->rt_p50_us, 4);
            mstar_bench_json_field(out, "rt_p99_us", w->rt_p99_us, 4);
            mstar_bench_json_field(out, "rt_mean_us", w->rt_mean_us, 4);
            cost_json(out, &w->cost);
            mstar_bench_json_field(out, "rt_vs_futex", w->rt_p50_us / r->futex.p50_us, 3);
            fprintf(out, "}");
        }
        fprintf(out, "]");
    }
    transports_json(r, out);
}

/* Which of a run's kinds is the arena, or -1. */
static int arena_kind(const mstar_bench_transport_result *r)
{
    for (int k = 0; k < r->nkinds; k++)
        if (r->kinds[k] == MSTAR_TRANSPORT_ARENA)
            return k;
    return -1;
}

/* The rows alone, of a run without baselines (--size). */
/* --profile: each call of the round trips, on the side that makes it, in the order a handoff
 * makes them. */
static void print_phases(const mstar_bench_phase_row *ph)
{
    printf("  the round trip's calls (--profile), each timed where it runs; timing adds %.2f us "
           "a call\n  %-9s %-9s %8s %10s %10s\n",
           ph->clock_us, "side", "call", "calls", "p50 us", "p99 us");
    for (int k = 0; k < MSTAR_BENCH_PHASES; k++)
        printf("  %-9s %-9s %8u %10.2f %10.2f\n",
               mstar_bench_phase_on_producer(k) ? "producer" : "consumer",
               mstar_bench_phase_name(k), ph->calls[k], ph->p50_us[k], ph->p99_us[k]);
    printf("\n");
}

static void print_rows(const mstar_bench_transport_result *r)
{
    printf("one size, no baselines (--size): no ratios and no targets\n");
    if (r->per_message > 1)
        printf("%d tensors of that size in each message (--batch): a round trip is one message's, "
               "and GB/s counts every tensor\n",
               r->per_message);
    printf("\n");
    for (int k = 0; k < r->nkinds + r->has_views; k++) {
        bool views = k == r->nkinds;
        const row *w = views ? &r->views[0] : &r->rows[k][0];
        char h[32];
        mstar_bench_size_name(w->bytes, h, sizeof(h));
        printf("%s%s\n  %-8s %12s %12s %10s\n  %-8s %12.1f %12.1f %10.2f\n\n",
               views ? VIEWS_NAME : mstar_transport_kind_name(r->kinds[k]),
               !views && r->cuda_ipc[k] ? ", device tensors over CUDA IPC" : "", "size",
               "rt p50 us", "rt p99 us", "GB/s", h, w->rt_p50_us, w->rt_p99_us, w->gbps);
        if (w->has_phases)
            print_phases(&w->phases);
    }
}

/* The arena's 4 KiB round trip per spin setting, against both floors, with its CPU time. */
static void print_spins(const mstar_bench_transport_result *r)
{
    if (r->nspins == 0)
        return;
    printf("spin, then sleep (MSTAR_RING_SPIN_US): the arena's 4 KiB handoff round trip; CPU time "
           "and context switches per handoff, producer + consumer (means: a side that spins uses "
           "about the mean round trip)\n  %-9s %10s %10s %10s %10s %10s %16s %16s\n",
           "spin us", "p50 us", "p99 us", "mean us", "/futex", "/busy", "cpu us", "switches");
    for (int i = 0; i < r->nspins; i++) {
        const row *w = &r->spins[i];
        char name[32];
        snprintf(name, sizeof(name), "%d%s", r->spin_us[i], i == 0 ? " (def)" : "");
        printf("  %-9s %10.1f %10.1f %10.1f %9.2fx %9.1fx %7.1f + %-6.1f %7.2f + %-6.2f\n", name,
               w->rt_p50_us, w->rt_p99_us, w->rt_mean_us, w->rt_p50_us / r->futex.p50_us,
               w->rt_p50_us / r->busy.p50_us, w->cost.self.cpu_us, w->cost.peer.cpu_us,
               w->cost.self.vol_csw + w->cost.self.invol_csw,
               w->cost.peer.vol_csw + w->cost.peer.invol_csw);
    }
    printf("\n");
}

static void print_table(const mstar_bench_transport_result *r)
{
    printf("transport: one producer, one consumer, ipc control mesh; %d in flight\n", r->in_flight);
    if (!r->has_baselines) {
        print_rows(r);
        return;
    }
    bool remote = is_ucx(r->kinds[0]);
    printf("baselines: memcpy %.2f GB/s (64 MiB, one thread); ZeroMQ ipc ping-pong 64 B "
           "p50 %.1f us, p99 %.1f us%s\n\n",
           r->memcpy_gbps, r->zmq_p50_us, r->zmq_p99_us,
           remote ? "; a raw loopback TCP stream of each size (tcp GB/s)" : "");
    printf("floor: 4 B ping-pong through shared memory, woken by a futex p50 %.1f us, p99 %.1f "
           "us, CPU %.1f + %.1f us and %.2f + %.2f context switches per round trip (this side + "
           "the other); busy-polling p50 %.2f us, p99 %.2f us, CPU %.1f + %.1f us\n\n",
           r->futex.p50_us, r->futex.p99_us, r->futex.cost.self.cpu_us, r->futex.cost.peer.cpu_us,
           r->futex.cost.self.vol_csw + r->futex.cost.self.invol_csw,
           r->futex.cost.peer.vol_csw + r->futex.cost.peer.invol_csw, r->busy.p50_us,
           r->busy.p99_us, r->busy.cost.self.cpu_us, r->busy.cost.peer.cpu_us);
    if (r->has_calls) {
        char each[192];
        mstar_bench_calls_format(&r->calls, "us", false, each, sizeof(each));
        printf("calls: the arena's 4 KiB handoff with both ends in this process, on each CPU in "
               "turn: %s a handoff (the library's work of a round trip there now, no cache line "
               "moving between cores and no side waiting)\n\n",
               each);
    }
    printf("mesh 4 KiB round trip: over the ring p50 %.1f us, p99 %.1f us (%.2fx ZeroMQ "
           "ping-pong); over ZeroMQ p50 %.1f us, p99 %.1f us\n\n",
           r->ring_p50_us, r->ring_p99_us, r->ring_p50_us / r->zmq_p50_us, r->mesh_zmq_p50_us,
           r->mesh_zmq_p99_us);
    int a = arena_kind(r);
    if (r->has_arena_zmq && a >= 0)
        printf("arena 4 KiB handoff round trip: control over the rings p50 %.1f us (%.2fx "
               "ZeroMQ ping-pong, the arena row below); over ZeroMQ p50 %.1f us, p99 %.1f us "
               "(%.2fx)\n\n",
               r->rows[a][0].rt_p50_us, r->rows[a][0].rt_p50_us / r->zmq_p50_us,
               r->arena_zmq.rt_p50_us, r->arena_zmq.rt_p99_us,
               r->arena_zmq.rt_p50_us / r->zmq_p50_us);
    print_spins(r);
    for (int k = 0; k < r->nkinds + r->has_views; k++) {
        bool views = k == r->nkinds;
        printf("%s\n  %-8s %12s %12s %10s %10s %10s %10s %10s %10s",
               views ? VIEWS_NAME : mstar_transport_kind_name(r->kinds[k]), "size", "rt p50 us",
               "rt p99 us", "rt/zmq", "rt/futex", "cpu us", "switches", "GB/s", "/memcpy");
        printf(remote ? " %10s %10s\n" : "\n", "tcp GB/s", "/tcp");
        for (int i = 0; i < r->nsizes; i++) {
            const row *w = views ? &r->views[i] : &r->rows[k][i];
            char h[32];
            mstar_bench_size_name(w->bytes, h, sizeof(h));
            printf("  %-8s %12.1f %12.1f %9.2fx %9.2fx %10.1f %10.2f %10.2f %9.2fx", h,
                   w->rt_p50_us, w->rt_p99_us, w->rt_p50_us / r->zmq_p50_us,
                   w->rt_p50_us / r->futex.p50_us, cost_cpu_us(&w->cost), cost_switches(&w->cost),
                   w->gbps, w->gbps / r->memcpy_gbps);
            if (remote)
                printf(" %10.2f %9.2fx", w->tcp_gbps, w->gbps / w->tcp_gbps);
            printf("\n");
        }
        printf("\n");
    }
    mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
    mstar_bench_targets_print(t, mstar_bench_transport_targets(r, t), stdout);
}

/* A --size argument: bytes, or a count of KiB, MiB or GiB ("4K", "16M"). False if malformed. */
static bool parse_size(const char *arg, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno != 0 || end == arg || arg[0] == '-')
        return false;
    unsigned shift = 0;
    if (*end != '\0') {
        const char *units = "KMG", *u = strchr(units, *end);
        if (u == NULL || *end == '\0' || end[1] != '\0')
            return false;
        shift = 10u * (unsigned)(u - units + 1);
    }
    if (v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

int mstar_bench_transport(int argc, char **argv)
{
    bool json = false, quick = false, cuda = false, standin = false, profile = false;
    uint64_t one_size = 0;
    long batch = 0;
    int nkinds = 2;
    mstar_transport_kind kinds[2] = { MSTAR_TRANSPORT_FILES, MSTAR_TRANSPORT_ARENA };
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--profile") == 0) {
            profile = true;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "cuda") != 0 && strcmp(d, "cpu") != 0 && strcmp(d, "host") != 0) {
                fprintf(stderr, "mstar bench transport: --device cpu|cuda|host\n");
                return 2;
            }
            cuda = strcmp(d, "cpu") != 0;
            standin = strcmp(d, "host") == 0;
        } else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) {
            if (mstar_transport_kind_from_name(argv[++i], &kinds[0]) != MSTAR_OK ||
                kinds[0] == MSTAR_TRANSPORT_LOCAL) {
                fprintf(stderr,
                        "mstar bench transport: --transport files|arena|ucx-tcp|ucx-rdma\n");
                return 2;
            }
            nkinds = 1;
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            char *end;
            batch = strtol(argv[++i], &end, 10);
            if (*end != '\0' || end == argv[i] || !per_message_ok(batch)) {
                fprintf(stderr,
                        "mstar bench transport: --batch %s: want 1, 2, 4 or 8 tensors "
                        "a message\n",
                        argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (!parse_size(argv[++i], &one_size) || one_size == 0) {
                fprintf(stderr,
                        "mstar bench transport: --size %s: want bytes, or a count with "
                        "K, M or G (4K, 16M)\n",
                        argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: mstar bench transport [--transport files|arena|ucx-tcp|"
                            "ucx-rdma] [--device cpu|cuda|host] [--size BYTES [--profile] "
                            "[--batch K]] [--json] [--quick]\n");
            return 2;
        }
    }
    if (batch != 0 && one_size == 0) {
        fprintf(stderr, "mstar bench transport: --batch groups one size's tensors into "
                        "messages: give --transport files|arena and --size\n");
        return 2;
    }
    if (profile && one_size == 0) {
        fprintf(stderr, "mstar bench transport: --profile times the calls of one size's round "
                        "trips: give --transport files|arena and --size\n");
        return 2;
    }
    /* One size of device tensors: the arena over the CUDA IPC route. */
    bool cuda_size =
        one_size != 0 && cuda && !standin && nkinds == 1 && kinds[0] == MSTAR_TRANSPORT_ARENA;
    if (one_size != 0 && !cuda_size && (cuda || nkinds != 1)) {
        fprintf(stderr, "mstar bench transport: --size needs --transport files|arena (device "
                        "tensors: --device cuda --transport arena)\n");
        return 2;
    }
    /* A device run over files or UCX sets device tensors beside host tensors on that transport;
     * otherwise the arena's routes against the device baselines, which need CUDA. */
    bool pair = cuda && nkinds == 1 && kinds[0] != MSTAR_TRANSPORT_ARENA;
    if (standin && !pair) {
        fprintf(stderr, "mstar bench transport: --device host needs --transport "
                        "files|ucx-tcp|ucx-rdma\n");
        return 2;
    }
    mstar_bench_progress_enable(!json);
    mstar_bench_transport_result r;
    mstar_bench_size_options so = { .kind = kinds[0],
                                    .size = one_size,
                                    .quick = quick,
                                    .profile = profile,
                                    .cuda = cuda_size,
                                    .per_message = batch > 0 ? (int)batch : 1 };
    mstar_status st = one_size != 0 ? mstar_bench_transport_size_run(&so, &r)
                      : pair ? mstar_bench_transport_device_pair_run(kinds[0], standin, quick, &r)
                      : cuda ? mstar_bench_transport_cuda_run(quick, &r)
                             : mstar_bench_transport_run(kinds, nkinds, quick, &r);
    if (st != MSTAR_OK) {
        fprintf(stderr, "mstar bench transport: %s\n", mstar_last_error());
        return 1;
    }
    if (cuda && !cuda_size && json)
        mstar_bench_transport_cuda_json(&r, stdout);
    else if (cuda && !cuda_size)
        print_device_table(&r);
    else if (json)
        mstar_bench_transport_json(&r, stdout);
    else
        print_table(&r);
    return 0;
}
