/*
 * comm_harness.h — what the communication-manager tests share: an in-memory message bus that
 * stands in for the control mesh (it records every TENSOR_RECEIVED a manager sends and delivers
 * them on request), helpers to build managers of each transport in a private shm directory, and
 * tensors with recognisable bytes.
 */
#ifndef MSTAR_TEST_COMM_HARNESS_H
#define MSTAR_TEST_COMM_HARNESS_H

#include "mstar_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUS_MAX 512

typedef struct bus_msg {
    char peer[MSTAR_NAME_MAX + 1];
    char from[MSTAR_NAME_MAX + 1];
    mstar_msg msg;
} bus_msg;

typedef struct bus {
    bus_msg q[BUS_MAX];
    int n;
    int sent; /* total ever sent */
} bus;

/* The sender a manager gets: ctx is a `struct sender` naming the bus and the sending entity. */
typedef struct sender {
    bus *b;
    char entity[MSTAR_NAME_MAX + 1];
} sender;

mstar_status bus_send(void *ctx, const char *peer, mstar_msg *msg);

/* Messages waiting for `peer`. */
int bus_count(const bus *b, const char *peer);

/* Hand every message for `peer` to its manager; returns how many. */
int bus_deliver(bus *b, const char *peer, mstar_comm *c);

/* Drop every queued message (a lost ACK, or a consumer that died before sending it). */
void bus_drop(bus *b, const char *peer);

void bus_clear(bus *b);

/* Total count a queued TENSOR_RECEIVED for `peer` carries for `uuid` (0 if none). */
int64_t bus_ack_count(const bus *b, const char *peer, mstar_tensor_id uuid);

mstar_comm *make_comm_with(const char *entity, mstar_transport_kind kind, const char *dir,
                           sender *s, mstar_backend *backend);

mstar_comm *make_comm(const char *entity, mstar_transport_kind kind, const char *dir, sender *s);

/* The fixture of the two-manager tests: a bus; worker_0 (the producer) and worker_1 (the
 * consumer) sending on it; a private shm directory; and their managers when the test keeps the
 * same two throughout (comm_pair_make), NULL otherwise. */
typedef struct comm_pair {
    bus b;
    sender sp, sc;
    const char *dir;
    mstar_comm *p, *c;
} comm_pair;

/* Fill `w` (zeroed first) with senders and a directory named after `tag`. */
void comm_pair_init(comm_pair *w, const char *tag);
/* The same in an existing directory `dir` (a test that makes many pairs: tmpdirs are few). */
void comm_pair_init_in(comm_pair *w, const char *dir);
/* Create w->p (worker_0) and w->c (worker_1) on transport `kind`. */
void comm_pair_make(comm_pair *w, mstar_transport_kind kind);
/* Destroy the managers made (the consumer first), drop what the bus still holds, and check that
 * nothing is left in the directory. */
void comm_pair_fini(comm_pair *w);

/* The fixture of the three-manager tests: worker_0 (the producer), worker_1 and worker_2 (two
 * consumers) sending on one bus, their managers over transport `kind` in directory `dir` (NULL
 * where the transport keeps no files). */
typedef struct comm_trio {
    mstar_transport_kind kind;
    const char *dir;
    bus b;
    sender sp, sc, sd;
    mstar_comm *p; /* worker_0, the producer */
    mstar_comm *c; /* worker_1, a consumer */
    mstar_comm *d; /* worker_2, another consumer */
} comm_trio;

/* A cmocka state: a comm_trio (allocated) with its three managers made. */
comm_trio *comm_trio_new(mstar_transport_kind kind, const char *dir);
/* Its teardown: destroy the managers (the producer first), drop what the bus still holds, check
 * that nothing (files, spills, segments) is left in the directory when there is one, and free
 * the trio. */
int comm_trio_teardown(void **state);

/* The producer of the GPU tests that read from another process: worker_0's manager over the
 * arena in a shared directory, with a backend of CUDA device 0, sending on a bus of its own. It
 * lives in a child forked before the test process touches CUDA (a CUDA context does not survive
 * fork), so its failures end the child with a status instead of asserting. */
typedef struct producer_child {
    mstar_backend *b;
    bus bb;
    sender sp;
    mstar_comm *p;
} producer_child;

/* Open it in `dir`; without a GPU the child ends with status 77, which skips the test. */
void producer_child_open(producer_child *pc, const char *dir);

/* Store the `n` outputs `o` of signal "sig" in `rid`, hold each `refs` times (one per consumer),
 * register them for sending and return the edge "sig" -> "node" carrying them, placed and
 * encoded (malloc'd, *len bytes). Ends the child with status 6, 7 or 8 when storing, registering
 * or encoding fails. */
void *producer_child_publish(producer_child *pc, const mstar_rid *rid, mstar_output *o, uint32_t n,
                             int64_t refs, size_t *len);

/* Release the manager, the bus and the backend, and end the child with status 0. */
void producer_child_exit(producer_child *pc) __attribute__((noreturn));

/* The arena figures of manager `c`. */
mstar_arena_stats arena_stats_of(mstar_comm *c);
/* Unset every MSTAR_SHM_ARENA_* knob the arena tests set. */
void arena_knobs_clear(void);
/* The arena tests' fixture: a comm_pair (allocated) with 1 MiB segments; its managers made over
 * the arena when `managers`. The teardown undoes it, the knobs included. */
comm_pair *arena_pair_new(const char *tag, bool managers);
int arena_pair_teardown(void **state);

mstar_rid rid_str(const char *s);

/* A host tensor of `dtype` and shape with bytes derived from `seed` (owned by the caller). */
mstar_tensor make_tensor(mstar_dtype dtype, int32_t ndim, const int64_t *shape, uint32_t seed);

/* make_tensor of one dimension: `n` elements. */
mstar_tensor make_vector(mstar_dtype dtype, int64_t n, uint32_t seed);

mstar_output output_of(const char *signal, mstar_tensor t);

/* An edge named `name` to node `next` carrying copies of `infos`. */
mstar_edge edge_of(const char *name, const char *next, const mstar_tensor_info *infos, uint32_t n);

/* Store `n` (at most 8) outputs of signal "sig" on producer `p`, hold them, route them to
 * `fanout` (at most 4) destinations and stage them; their descriptors land in infos[0..n). */
void produce(mstar_comm *p, const mstar_rid *rid, const mstar_tensor *ts, uint32_t n, int fanout,
             mstar_tensor_info *infos);

/* The output of the two-tensor read tests: vectors of `n0` elements of `d0` (bytes from `seed`)
 * and of `n1` elements of `d1` (bytes from seed + 1), produced by `p` in `rid` for one consumer.
 * ts[] gets the tensors (the caller frees their data), infos[] their descriptors; returns the
 * edge "sig" -> "node" that carries both. */
mstar_edge produce_two_vectors(mstar_comm *p, const mstar_rid *rid, mstar_dtype d0, int64_t n0,
                               mstar_dtype d1, int64_t n1, uint32_t seed, mstar_tensor ts[2],
                               mstar_tensor_info infos[2]);

/* `c` holds tensor `uuid` with the dtype, shape and bytes of `want`. */
void check_bytes(mstar_comm *c, mstar_tensor_id uuid, const mstar_tensor *want);

/* The setup of T-4: an 8x4 int32 output of signal "h" sharded on dim 0 in request `rid`, stored
 * by `p` (*t holds its bytes; the caller frees t->data), and its edge to node "mlp" fanned out
 * to worker_1 and worker_2 (rows 0-3 and 4-7) before anything was staged. */
void store_sharded_fanout(mstar_comm *p, const mstar_rid *rid, mstar_tensor *t,
                          mstar_tensor_info *info, mstar_edge *e, mstar_fanout *fo);

/* Collect ready edges, expecting exactly `want` edges over all requests. */
void expect_ready(mstar_comm *c, mstar_ready_set *set, uint32_t want);

/* Collect exactly `want` ready edges, whose contents the test does not look at. */
void collect_ready(mstar_comm *c, uint32_t want);

#endif
