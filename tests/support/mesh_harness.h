/*
 * mesh_harness.h — what the tests of the mesh over shared-memory rings share (unit.test_mesh_ring
 * and hostile.test_hostile_ring): a mesh opened over ipc in the test's directory, the
 * conductor and worker_0 opened as a pair, and a TENSOR_RECEIVED numbered by its request id sent
 * and received, so that order and loss show.
 */
#ifndef MSTAR_TEST_MESH_HARNESS_H
#define MSTAR_TEST_MESH_HARNESS_H

#include "mstar_test.h"

/* A mesh for `entity` over ipc in directory `dir`, asserting that it opens. */
mstar_mesh *mesh_harness_open(const char *dir, const char *entity);

/* The pair most ring tests talk over: the conductor sending to worker_0, both over ipc in one
 * directory (worker_0 opened first, so that its bell is there before anyone sends). */
typedef struct mesh_pair {
    mstar_mesh *tx; /* conductor */
    mstar_mesh *rx; /* worker_0 */
} mesh_pair;

mesh_pair mesh_pair_open(const char *dir);

/* Destroy both meshes, the sender first. */
void mesh_pair_close(mesh_pair *p);

/* Send `to` a TENSOR_RECEIVED whose request id is `n`, asserting success. */
void mesh_harness_send(mstar_mesh *tx, const char *to, int64_t n);

/* Receive one message within 10 s and check that `from` sent it with request id `n`. */
void mesh_harness_recv(mstar_mesh *rx, const char *from, int64_t n);

#endif
