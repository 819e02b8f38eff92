/*
 * mesh_harness.c — a mesh over ipc and numbered messages for the ring tests (mesh_harness.h).
 */
#include "mesh_harness.h"

mstar_mesh *mesh_harness_open(const char *dir, const char *entity)
{
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    mstar_mesh *mesh = NULL;
    assert_mstar_ok(mstar_mesh_create(entity, &opts, &mesh));
    return mesh;
}

mesh_pair mesh_pair_open(const char *dir)
{
    mesh_pair p;
    p.rx = mesh_harness_open(dir, "worker_0");
    p.tx = mesh_harness_open(dir, "conductor");
    return p;
}

void mesh_pair_close(mesh_pair *p)
{
    mstar_mesh_destroy(p->tx);
    mstar_mesh_destroy(p->rx);
}

void mesh_harness_send(mstar_mesh *tx, const char *to, int64_t n)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
    msg.request_id = mstar_rid_from_int(n);
    assert_mstar_ok(mstar_mesh_send(tx, to, &msg));
    mstar_msg_clear(&msg);
}

void mesh_harness_recv(mstar_mesh *rx, const char *from, int64_t n)
{
    mstar_msg got;
    assert_mstar_ok(mstar_mesh_recv(rx, 10000, &got));
    assert_string_equal(got.from, from);
    assert_int_equal(got.request_id.num, n);
    mstar_msg_clear(&got);
}
