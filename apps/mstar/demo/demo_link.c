/*
 * demo_link.c — an entity's mesh and manager, sending, and staging an output (see demo_link.h).
 */
#include "demo_link.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double demo_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void demo_worker_entity(int rank, char out[32])
{
    snprintf(out, 32, "worker_%d", rank);
}

mstar_status demo_send(mstar_mesh *mesh, const char *peer, mstar_msg *msg)
{
    mstar_status st = mstar_comm_send_via_mesh(mesh, peer, msg);
    return st != MSTAR_OK ? mstar_error_wrap("send %s to %s", mstar_msg_type_name(msg->type), peer)
                          : MSTAR_OK;
}

mstar_status demo_send_simple(mstar_mesh *mesh, const char *peer, mstar_msg_type type,
                              const mstar_rid *rid)
{
    mstar_msg m;
    mstar_msg_init(&m, type);
    if (rid != NULL)
        m.request_id = *rid;
    mstar_status st = demo_send(mesh, peer, &m);
    mstar_msg_clear(&m);
    return st;
}

static mstar_transport_kind transport_kind(demo_transport t)
{
    switch (t) {
    case DEMO_TRANSPORT_FILES:
        return MSTAR_TRANSPORT_FILES;
    case DEMO_TRANSPORT_UCX_TCP:
        return MSTAR_TRANSPORT_UCX_TCP; /* each entity's engine listens on MSTAR_UCX_ADDRESS */
    case DEMO_TRANSPORT_ARENA:
        break;
    }
    return MSTAR_TRANSPORT_ARENA;
}

mstar_status demo_link_open(const demo_link_options *o, demo_link *out)
{
    memset(out, 0, sizeof(*out));
    mstar_mesh_options mo = { .transport = MSTAR_MESH_IPC, .ipc_dir = o->ipc_dir };
    mstar_status st = mstar_mesh_create(o->entity, &mo, &out->mesh);
    if (st != MSTAR_OK || o->shm_dir == NULL)
        return st;
    mstar_comm_options co;
    mstar_comm_options_init(&co);
    co.entity = o->entity;
    co.transport = transport_kind(o->transport);
    co.shm_dir = o->shm_dir;
    co.backend = o->backend;
    co.send = mstar_comm_send_via_mesh;
    co.send_ctx = out->mesh;
    co.enable_prof = true;
    st = mstar_comm_create(&co, &out->comm);
    /* Results go to the api server's inbox; its preprocess worker reads and acknowledges them. */
    if (st == MSTAR_OK)
        st = mstar_comm_accept_acks_for(out->comm, DEMO_PREPROCESS, DEMO_API_SERVER);
    if (st != MSTAR_OK) {
        demo_link_close(out);
        return mstar_error_wrap("%s", o->entity);
    }
    return MSTAR_OK;
}

void demo_link_close(demo_link *l)
{
    mstar_comm_destroy(l->comm);
    mstar_mesh_destroy(l->mesh);
    l->comm = NULL;
    l->mesh = NULL;
}

mstar_status demo_link_stage_output(demo_link *l, const mstar_rid *rid, const char *signal,
                                    const char *next_node, const mstar_tensor *t, mstar_edge *edge)
{
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = signal;
    o.tensor = *t;
    mstar_store_params params = {
        .node_name = mstar_comm_entity(l->comm), .graph_walk = DEMO_WALK, .tp_size = 1, .tp_rank = 0
    };
    mstar_tensor_info info;
    mstar_edge_init(edge);
    snprintf(edge->name, sizeof(edge->name), "%s", signal);
    snprintf(edge->next_node, sizeof(edge->next_node), "%s", next_node);
    mstar_status st = mstar_comm_store_and_return_tensor_info(l->comm, rid, &o, 1, &params, &info);
    if (st != MSTAR_OK)
        return st;
    /* The safety hold, then the real fanout: one routed edge (the producer's steps of design.md
     * "Tensor lifecycle"). */
    if ((st = mstar_comm_increment_ref(l->comm, info.uuid, 1)) == MSTAR_OK &&
        (st = mstar_edge_add_tensor(edge, &info)) == MSTAR_OK &&
        (st = mstar_comm_set_output_ref_counts(l->comm, &info.uuid, 1, edge, 1)) == MSTAR_OK &&
        (st = mstar_comm_register_for_send(l->comm, rid, edge->tensor_info, 1)) == MSTAR_OK)
        st = mstar_comm_refresh_shm_placement(l->comm, edge, 1);
    if (st != MSTAR_OK) {
        /* Whatever its count reached (0 stored, 1 held or routed), one release collects it. */
        mstar_edge_clear(edge);
        mstar_comm_dereference(l->comm, info.uuid, 1);
        return mstar_error_wrap("staging %s of request %lld", signal, (long long)rid->num);
    }
    return MSTAR_OK;
}
