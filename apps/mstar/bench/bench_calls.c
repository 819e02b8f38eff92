/*
 * bench_calls.c — the calls of the arena's 4 KiB handoff with both ends in one process: store,
 * hold, stage, build and send INPUT_SIGNALS; receive it, start the read, collect it (the ACK
 * leaves), release; receive the ACK and handle it. No cache line moves between cores and no
 * side waits, so what it measures is how fast this machine runs the library's work of a handoff
 * now. `mstar bench transport` reports it beside the floors: on the 2-core VM the bench runs on,
 * these calls took 4.9-5.1 µs a handoff in one sitting and 7.3 µs in another minutes later, and
 * the spinning round trip moved with them, 3.6-4.4 µs against 5.9 (docs/architecture.md, "What a
 * spinning round trip is made of").
 */
#include "bench.h"

#include "core/vec.h"
#include "mstar/mstar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WARMUP_ROUNDS 2

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
    mstar_status st = MSTAR_OK;
    for (int i = 0; i < 2 && st == MSTAR_OK; i++) {
        st = mstar_mesh_create(entity[i], &mo, &e->mesh[i]);
        mstar_comm_options o;
        mstar_comm_options_init(&o);
        o.entity = entity[i];
        o.entity_index = st == MSTAR_OK ? mstar_mesh_entity_index(e->mesh[i]) : 0;
        o.transport = MSTAR_TRANSPORT_ARENA;
        o.shm_dir = shm_dir;
        o.send = mstar_comm_send_via_mesh;
        o.send_ctx = e->mesh[i];
        if (st == MSTAR_OK)
            st = mstar_comm_create(&o, &e->comm[i]);
    }
    if (st != MSTAR_OK)
        ends_destroy(e);
    return st;
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

/* The consumer's half: read, collect (the ACK leaves), release and end the request. */
static mstar_status consume(ends *e)
{
    mstar_msg m;
    mstar_status st = recv_now(e->mesh[1], &m);
    if (st != MSTAR_OK)
        return st;
    st = mstar_comm_start_read_tensors(e->comm[1], &m.request_id, m.edges, m.nedges, NULL);
    mstar_msg_clear(&m);
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
    mstar_msg m;
    mstar_status st = recv_now(e->mesh[0], &m);
    if (st != MSTAR_OK)
        return st;
    st = mstar_comm_handle_message(e->comm[0], &m);
    mstar_msg_clear(&m);
    if (st == MSTAR_OK && mstar_comm_num_tensors(e->comm[0]) != 0)
        st = mstar_error_set(MSTAR_EPROTO,
                             "bench calls: the producer still holds %zu tensors "
                             "after the ACK",
                             mstar_comm_num_tensors(e->comm[0]));
    return st;
}

mstar_status mstar_bench_calls_run(const char *ipc_dir, const char *shm_dir, bool quick, double *us)
{
    int rounds = quick ? 5 : 11, per_round = quick ? 400 : 3000;
    ends e;
    mstar_status st = ends_create(ipc_dir, shm_dir, &e);
    if (st != MSTAR_OK)
        return st;
    uint8_t *bytes = calloc(4096, 1);
    double *per = calloc((size_t)rounds, sizeof(double));
    if (bytes == NULL || per == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "bench calls");
    int64_t next = 1;
    for (int r = -WARMUP_ROUNDS; r < rounds && st == MSTAR_OK; r++) {
        uint64_t t0 = mstar__now_ns();
        for (int i = 0; i < per_round && st == MSTAR_OK; i++) {
            mstar_rid rid = mstar_rid_from_int(next++);
            st = produce(&e, &rid, bytes);
            if (st == MSTAR_OK)
                st = consume(&e);
            if (st == MSTAR_OK)
                st = take_ack(&e);
        }
        if (r >= 0)
            per[r] = (double)(mstar__now_ns() - t0) * 1e-3 / per_round;
    }
    if (st == MSTAR_OK)
        *us = mstar_bench_percentile(per, (size_t)rounds, 0.5);
    free(per);
    free(bytes);
    ends_destroy(&e);
    return st;
}
