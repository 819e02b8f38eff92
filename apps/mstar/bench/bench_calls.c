/*
 * bench_calls.c — the calls of the arena's 4 KiB handoff with both ends in one process: store,
 * hold, stage, build and send INPUT_SIGNALS; receive it, start the read, collect it (the ACK
 * leaves), release; receive the ACK and handle it. No cache line moves between cores and no
 * side waits, so what it measures is how fast this machine runs the library's work of a handoff
 * now, on each CPU it may use in turn (up to MSTAR_BENCH_CALLS_CPUS). `mstar bench transport`
 * reports it beside the floors: on the 2-core VM the bench runs on, these calls took 3.8 µs a
 * handoff on one vCPU and 6.0 µs on the other, and 4.0 µs on both twenty seconds later; the two
 * processes of a round trip run on both, and it moves with the slower (docs/architecture.md,
 * "What a spinning round trip is made of").
 */
#include "bench.h"

#include "core/vec.h"
#include "mstar/mstar.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Handoffs before any is timed: more than one lap of the default 4 MiB rings at about 450 bytes
 * of messages a handoff. Until its ring has wrapped, each frame lands on lines and pages no frame
 * touched yet: the first 6,000 handoffs took 4.7 µs each where the ones after took 3.9. */
#define WARMUP_HANDOFFS 12000

/* Both ends: a mesh and a manager each. */
typedef struct ends {
    mstar_mesh *mesh[2];
    mstar_comm *comm[2];
} ends;

static const char *const entity[2] = { "calls_producer", "calls_consumer" };

static void ends_destroy(ends *e)
{
    for (int i = 0; i < 2; i++) {
        if (e->comm[i] != NULL)
            mstar_comm_destroy(e->comm[i]);
        if (e->mesh[i] != NULL)
            mstar_mesh_destroy(e->mesh[i]);
    }
}

static mstar_status ends_create(const char *ipc_dir, const char *shm_dir, ends *e)
{
    memset(e, 0, sizeof(*e));
    mstar_mesh_options mo = { MSTAR_MESH_IPC, ipc_dir, NULL, 0 };
    for (int i = 0; i < 2; i++) {
        mstar_mesh *mesh;
        mstar_status st = mstar_mesh_create(entity[i], &mo, &mesh);
        if (st != MSTAR_OK) {
            ends_destroy(e);
            return st;
        }
        e->mesh[i] = mesh;
        mstar_comm_options o;
        mstar_comm_options_init(&o);
        o.entity = entity[i];
        o.entity_index = mstar_mesh_entity_index(mesh);
        o.transport = MSTAR_TRANSPORT_ARENA;
        o.shm_dir = shm_dir;
        o.send = mstar_comm_send_via_mesh;
        o.send_ctx = mesh;
        mstar_comm *comm;
        if ((st = mstar_comm_create(&o, &comm)) != MSTAR_OK) {
            ends_destroy(e);
            return st;
        }
        e->comm[i] = comm;
    }
    return MSTAR_OK;
}

static void no_release(void *ctx, void *data)
{
}

/* The next message for `mesh`: it is in the ring already, the sender being this thread. */
static mstar_status recv_now(mstar_mesh *mesh, mstar_msg *out)
{
    mstar_status st;
    for (int tries = 0; tries < 1000; tries++)
        if ((st = mstar_mesh_recv(mesh, 0, out)) != MSTAR_EAGAIN)
            return st;
    return mstar_error_set(MSTAR_EPROTO, "bench calls: a message sent in this process never came");
}

/* The producer's half up to the send (as bench_transport.c's send_message). */
static mstar_status produce(ends *e, const mstar_rid *rid, void *bytes)
{
    int64_t n = 4096;
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = "x";
    o.release = no_release;
    mstar_tensor_info info;
    mstar_status st =
        mstar_tensor_init(&o.tensor, bytes, mstar_device_cpu(), MSTAR_DTYPE_UINT8, 1, &n);
    if (st == MSTAR_OK)
        st = mstar_comm_store_and_return_tensor_info(e->comm[0], rid, &o, 1, NULL, &info);
    if (st == MSTAR_OK)
        st = mstar_comm_increment_ref(e->comm[0], info.uuid, 1);
    if (st == MSTAR_OK)
        st = mstar_comm_register_for_send(e->comm[0], rid, &info, 1);
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = *rid;
    mstar_edge edge;
    mstar_edge_init(&edge);
    snprintf(edge.name, sizeof(edge.name), "x");
    snprintf(edge.next_node, sizeof(edge.next_node), "node");
    edge.ntensors = 1;
    edge.tensor_info = &info;
    if (st == MSTAR_OK)
        st = mstar_msg_add_edge(&m, &edge);
    if (st == MSTAR_OK)
        st = mstar_mesh_send(e->mesh[0], entity[1], &m);
    mstar_msg_clear(&m);
    if (st == MSTAR_OK)
        st = mstar_comm_cleanup_request(e->comm[0], rid); /* freed by the ACK */
    return st;
}

/* What a side does with the message it takes (take_message). */
typedef mstar_status (*use_fn)(ends *e, const mstar_msg *m);

static mstar_status start_read(ends *e, const mstar_msg *m)
{
    return mstar_comm_start_read_tensors(e->comm[1], &m->request_id, m->edges, m->nedges, NULL);
}

static mstar_status handle(ends *e, const mstar_msg *m)
{
    return mstar_comm_handle_message(e->comm[0], m);
}

/* Take the next message for side `side` (0 the producer, 1 the consumer) and use it. */
static mstar_status take_message(ends *e, int side, use_fn use)
{
    mstar_msg m;
    mstar_status st = recv_now(e->mesh[side], &m);
    if (st != MSTAR_OK)
        return st;
    st = use(e, &m);
    mstar_msg_clear(&m);
    return st;
}

/* The consumer's half: read, collect (the ACK leaves), release and end the request. */
static mstar_status consume(ends *e)
{
    mstar_status st = take_message(e, 1, start_read);
    mstar_ready_set set;
    if (st == MSTAR_OK)
        st = mstar_comm_get_ready_tensors(e->comm[1], &set);
    if (st != MSTAR_OK)
        return st;
    if (set.nedges != 1 || set.nfailed != 0)
        st = mstar_error_set(MSTAR_EPROTO,
                             "bench calls: %u edges ready and %u reads failed, "
                             "want 1 and 0",
                             set.nedges, set.nfailed);
    for (uint32_t k = 0; k < set.nedges && st == MSTAR_OK; k++)
        for (uint32_t i = 0; i < set.edges[k].ntensors && st == MSTAR_OK; i++)
            st = mstar_comm_dereference(e->comm[1], set.edges[k].tensor_info[i].uuid, 1);
    for (uint32_t r = 0; r < set.nrequests && st == MSTAR_OK; r++)
        st = mstar_comm_cleanup_request(e->comm[1], &set.rids[r]);
    mstar_ready_set_clear(&set);
    return st;
}

/* The producer takes the ACK: its tensor is freed. */
static mstar_status take_ack(ends *e)
{
    mstar_status st = take_message(e, 0, handle);
    if (st == MSTAR_OK && mstar_comm_num_tensors(e->comm[0]) != 0)
        st = mstar_error_set(MSTAR_EPROTO,
                             "bench calls: the producer still holds %zu tensors "
                             "after the ACK",
                             mstar_comm_num_tensors(e->comm[0]));
    return st;
}

/* One round of handoffs; *us, its mean µs a handoff. */
static mstar_status run_round(ends *e, void *bytes, int n, int64_t *next, double *us)
{
    mstar_status st = MSTAR_OK;
    uint64_t t0 = mstar__now_ns();
    for (int i = 0; i < n && st == MSTAR_OK; i++) {
        mstar_rid rid = mstar_rid_from_int((*next)++);
        st = produce(e, &rid, bytes);
        if (st == MSTAR_OK)
            st = consume(e);
        if (st == MSTAR_OK)
            st = take_ack(e);
    }
    *us = (double)(mstar__now_ns() - t0) * 1e-3 / n;
    return st;
}

/* The first MSTAR_BENCH_CALLS_CPUS CPUs this thread may run on; where its affinity cannot be
 * read, a single entry of cpu -1 (timed wherever the kernel keeps the thread). */
static void pick_cpus(const cpu_set_t *allowed, bool known, mstar_bench_calls *out)
{
    out->ncpus = 0;
    for (int c = 0; known && c < CPU_SETSIZE && out->ncpus < MSTAR_BENCH_CALLS_CPUS; c++)
        if (CPU_ISSET(c, allowed))
            out->cpu[out->ncpus++] = c;
    if (out->ncpus == 0)
        out->cpu[out->ncpus++] = -1;
}

/* Run on `cpu` alone (-1: anywhere this thread may). False if the kernel refused. */
static bool run_on(int cpu, const cpu_set_t *allowed)
{
    if (cpu < 0)
        return sched_setaffinity(0, sizeof(*allowed), allowed) == 0;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one) == 0;
}

mstar_status mstar_bench_calls_run(const char *ipc_dir, const char *shm_dir, bool quick,
                                   mstar_bench_calls *out)
{
    memset(out, 0, sizeof(*out));
    cpu_set_t allowed;
    bool known = sched_getaffinity(0, sizeof(allowed), &allowed) == 0;
    pick_cpus(&allowed, known, out);
    int rounds = quick ? 5 : 11, per_round = quick ? 1000 : 3000;
    ends e;
    mstar_status st = ends_create(ipc_dir, shm_dir, &e);
    if (st != MSTAR_OK)
        return st;
    uint8_t *bytes = calloc(4096, 1);
    double *per = calloc((size_t)(rounds * out->ncpus), sizeof(double));
    if (bytes == NULL || per == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "bench calls");
    /* The CPUs take turns round by round, so that each is measured over the same stretch of
     * time: on the VM the benchmarks run on, one vCPU ran these calls 1.5x slower than the
     * other for a minute, then as fast again. */
    int64_t next = 1;
    double us;
    if (st == MSTAR_OK)
        st = run_round(&e, bytes, WARMUP_HANDOFFS, &next, &us);
    for (int r = 0; r < rounds && st == MSTAR_OK; r++) {
        for (int c = 0; c < out->ncpus && st == MSTAR_OK; c++) {
            if (!run_on(out->cpu[c], &allowed))
                out->cpu[c] = -1; /* measured wherever the kernel keeps this thread */
            st = run_round(&e, bytes, per_round, &next, &us);
            per[c * rounds + r] = us;
        }
    }
    if (known)
        sched_setaffinity(0, sizeof(allowed), &allowed);
    for (int c = 0; c < out->ncpus && st == MSTAR_OK; c++)
        out->us[c] = mstar_bench_percentile(per + c * rounds, (size_t)rounds, 0.5);
    free(per);
    free(bytes);
    ends_destroy(&e);
    return st;
}

void mstar_bench_calls_range(const mstar_bench_calls *c, double *lo, double *hi)
{
    *lo = *hi = c->ncpus > 0 ? c->us[0] : 0;
    for (int i = 1; i < c->ncpus; i++) {
        *lo = c->us[i] < *lo ? c->us[i] : *lo;
        *hi = c->us[i] > *hi ? c->us[i] : *hi;
    }
}

void mstar_bench_calls_format(const mstar_bench_calls *c, const char *unit, bool bold, char *buf,
                              size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->ncpus && len < cap; i++) {
        char where[32] = "unpinned";
        if (c->cpu[i] >= 0)
            snprintf(where, sizeof(where), "CPU %d", c->cpu[i]);
        int n = snprintf(buf + len, cap - len, "%s%s%.2f %s%s on %s", i ? ", " : "",
                         bold ? "**" : "", c->us[i], unit, bold ? "**" : "", where);
        if (n < 0)
            break;
        len += (size_t)n;
    }
}

void mstar_bench_calls_json(const mstar_bench_calls *c, FILE *out)
{
    fprintf(out, ",\"calls_4k\":[");
    for (int i = 0; i < c->ncpus; i++) {
        fprintf(out, "%s{\"cpu\":%d", i ? "," : "", c->cpu[i]);
        mstar_bench_json_field(out, "us", c->us[i], 4);
        fprintf(out, "}");
    }
    fprintf(out, "]");
}
