/*
 * worker_world.h — the fixture of the tests that drive one real demo worker process (worker_1,
 * the decoder) message by message: the worker spawned with the small config, and the entities
 * that talk to it (conductor, producers, api server) opened in the test process, each a
 * demo_link. Pumping hands every TENSOR_RECEIVED to the manager of the link it reached and keeps
 * the messages of the links that asked for it, with the entity that received each, for
 * worker_world_expect. Shared by integration.test_demo_worker and
 * hostile.test_hostile_mesh_demo, which only differ in the entities they play.
 */
#ifndef MSTAR_TEST_WORKER_WORLD_H
#define MSTAR_TEST_WORKER_WORLD_H

#include "demo_harness.h"

#include "demo/demo_link.h"
#include "demo/demo_procs.h"

#define WORKER_WORLD_LINKS 4
#define WORKER_WORLD_SEEN  256

/* An entity the test plays: with a manager in the run's shm directory when `comm`; its messages
 * are kept for worker_world_expect when `keep`. */
typedef struct worker_world_entity {
    const char *name;
    bool comm;
    bool keep;
} worker_world_entity;

typedef struct worker_world {
    demo_options opts;
    demo_dirs dirs;
    pid_t pid; /* worker_1; 0 once it exited */
    demo_link links[WORKER_WORLD_LINKS];
    worker_world_entity ents[WORKER_WORLD_LINKS];
    int nlinks;
    mstar_msg seen[WORKER_WORLD_SEEN];
    char at[WORKER_WORLD_SEEN][MSTAR_NAME_MAX + 1];
    int nseen;
} worker_world;

/* Spawn worker_1, open the `n` entities and wait for the worker's HELLO (rank 1). */
worker_world *worker_world_open(const worker_world_entity *ents, int n);
/* Close the links, kill the worker if it still runs, remove the run's directories. */
void worker_world_close(worker_world *w);

demo_link *worker_world_link(worker_world *w, const char *entity);

/* Receive what is pending at every link, waiting up to `timeout_ms` for the first message. */
void worker_world_pump(worker_world *w, int timeout_ms);

/* The first message of `type` for request `rid` (any when rid < 0; FAIL_REQUESTS matches its
 * first failed rid) that reached `entity`, waiting up to 30 s; taken out of the list, the caller
 * clears it. */
mstar_msg worker_world_expect(worker_world *w, const char *entity, mstar_msg_type type,
                              int64_t rid);

/* Whether a message of `type` for `rid` reached `entity` (after 200 ms of pumping). */
bool worker_world_seen(worker_world *w, const char *entity, mstar_msg_type type, int64_t rid);

/* Send `m` from `from` to `peer` and clear it. */
void worker_world_send(demo_link *from, const char *peer, mstar_msg *m);

/* worker_0 stages `t` as output `signal` of request `rid` and sends it to worker_1 (the decoder)
 * as INPUT_SIGNALS. */
void worker_world_send_input(worker_world *w, int64_t rid, const char *signal,
                             const mstar_tensor *t);

/* DRAIN_REQUEST `rid` to the worker, its READS_DONE, then REMOVE_REQUEST with force. */
void worker_world_drain(worker_world *w, int64_t rid);

/* Ask the worker to shut down and return its report's first part (the one with its counters),
 * checked to say it holds no tensor and no open request. */
mstar_msg worker_world_report(worker_world *w);
/* Acknowledge the report; the worker exits with status 0, leaving nothing in the shm directory. */
void worker_world_exits(worker_world *w);

#endif
