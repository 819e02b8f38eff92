/*
 * transport_world.h — one producer process and two consumer processes talking over the control
 * mesh, shared by the soak and fault tests of the tensor transport.
 *
 * The producer (the test process itself, entity worker_0) plays a worker and the conductor: it
 * stores random tensors (sizes log-uniform from 0 B to a cap, random dtypes and shapes, 0-dim and
 * empty ones included), routes each to one or both consumers, persists some (sent on as the
 * conductor would, then UNPERSISTed with the count it sent, before or after the ACKs arrive),
 * aborts some requests mid-flight (DRAIN_REQUEST to the readers, READS_DONE back, then force
 * cleanup), and soft-cleans the others at once (deferred until their ACKs arrive).
 *
 * Each consumer (forked, worker_1 and worker_2) reads what it is sent, checks every byte against
 * the pattern the uuid determines, holds a few delivered edges before consuming them (so drains
 * find tensors in use), and reports what it verified when told to stop. It is written as a
 * worker's event loop is, for any transport: it sleeps in poll() on its mesh inbox and the
 * manager's event fd, and delivers edges whenever their reads have landed — inside
 * start_read_tensors for the one-host transports, later for a remote one. A drain waits for the
 * request's reads in flight (delivering other requests' edges meanwhile) and counts what it
 * received and never delivered as dropped, so that every descriptor sent is accounted for:
 * verified + dropped == sent (aborted requests' included).
 *
 * Every process has a private shm directory and ipc directory under a tmpdir, so nothing touches
 * other runs. Before a process destroys its mesh (linger 0: undelivered messages are dropped) it
 * waits for its peer to confirm receipt of its last message.
 *
 * With zero_copy (the arena only) the producer stores every output in a loan and the consumers
 * read every descriptor as a view, so the ACKs go when a consumer releases what it holds.
 *
 * The transports to run are a table (files, arena, ucx-tcp) that MSTAR_TEST_TRANSPORTS (a
 * comma-separated list of transport names) overrides. Over ucx-tcp the producer's and the
 * consumers' UCX engines talk over TCP on 127.0.0.1 (every byte crosses a socket), and the end
 * state includes no registered region left in the producer.
 */
#ifndef MSTAR_TEST_TRANSPORT_WORLD_H
#define MSTAR_TEST_TRANSPORT_WORLD_H

#include "mstar_test.h"
#include "ucx_test.h"

#include "tensors/comm_internal.h"
#include "tensors/ucx/ucx_engine.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PRODUCER "worker_0"
#define NCONS    2
extern const char *const consumer_names[NCONS]; /* worker_1, worker_2 */

/* Abort the whole test rather than hang: every wait is bounded by this. */
#define WORLD_DEADLINE_S 600

typedef struct world_cfg {
    mstar_transport_kind kind;
    const char *shm_dir;
    const char *ipc_dir;
    int64_t tensors;    /* total tensors stored */
    uint64_t max_bytes; /* size cap (log-uniform below it) */
    uint64_t seed;
    int64_t kill_after; /* fault test: SIGKILL worker_2 after this many requests; -1: never */
    bool zero_copy;     /* arena: every output a loan, every read a view */
} world_cfg;

/* What a consumer reports when told to stop (HELLO with these keys). */
typedef struct cons_report {
    int64_t tensors; /* descriptors delivered and verified */
    int64_t bytes;   /* bytes verified */
    int64_t bad;     /* descriptors whose bytes or shape were wrong */
    int64_t left;    /* tensors the consumer still held after its last release (must be 0) */
    int64_t failed;  /* read failures reported by get_ready_tensors */
    int64_t dropped; /* descriptors of aborted requests received and never delivered */
} cons_report;

/* ---- transports ----------------------------------------------------------------------------- */

#define WORLD_TRANSPORTS "files,arena,ucx-tcp"

/* The tensors a run over `kind` stores: `knob` (default `def`) for the one-host transports,
 * `ucx_knob` (default `ucx_def`) for UCX, whose every read crosses a socket (CI also runs it
 * under ASan on two cores). At least `min`. */
int64_t world_tensors(mstar_transport_kind kind, const char *knob, int64_t def,
                      const char *ucx_knob, int64_t ucx_def, int64_t min);

/* ---- small helpers ------------------------------------------------------------------------ */

double world_now(void);

void world_die(const char *who, const char *what);

#define WORLD_CHECK(who, expr)     \
    do {                           \
        if ((expr) != MSTAR_OK)    \
            world_die(who, #expr); \
    } while (0)

void world_send_simple(const char *who, mstar_mesh *mesh, const char *peer, mstar_msg_type type,
                       const mstar_rid *rid);

/* ---- consumer ----------------------------------------------------------------------------- */

#define CONS_HOLD 3 /* delivered edges a consumer keeps before consuming the oldest */

typedef struct held_edge {
    mstar_rid rid;
    mstar_edge edge;
} held_edge;

/* Per request (rids are the producer's request numbers): descriptors received in INPUT_SIGNALS
 * and descriptors delivered, so that a drain knows how many it dropped. */
typedef struct cons_count {
    int64_t received;
    int64_t delivered;
} cons_count;

typedef struct consumer {
    const char *me;
    mstar_mesh *mesh;
    mstar_comm *comm;
    cons_report rep;
    held_edge held[CONS_HOLD + 1];
    int nheld;
    mstar_completion **reading; /* handles of reads still running (a remote transport's) */
    size_t nreading, cap_reading;
    cons_count *counts; /* by rid number */
    size_t ncounts;
    bool zero_copy; /* reads are views */
} consumer;

/* ---- producer ----------------------------------------------------------------------------- */

typedef struct pending_unpersist {
    mstar_tensor_id uuid;
    int64_t k;
} pending_unpersist;

typedef struct drain {
    mstar_rid rid;
    bool waiting[NCONS]; /* READS_DONE still to come from each consumer */
} drain;

typedef struct producer {
    const world_cfg *cfg;
    mstar_mesh *mesh;
    mstar_comm *comm;
    uint64_t rng;
    pid_t pids[NCONS];
    bool dead[NCONS];
    pending_unpersist *unpersist;
    size_t nunpersist, cap_unpersist;
    drain *drains;
    size_t ndrains, cap_drains;
    bool reports_in[NCONS];
    cons_report reports[NCONS];
    int64_t sent_tensors[NCONS]; /* descriptors sent to each consumer (deliveries) */
    int64_t sent_bytes[NCONS];
    int64_t aborted_deliveries[NCONS]; /* of requests aborted: may or may not be delivered */
    int64_t aborted_requests;
    int64_t persisted;
    int64_t stored;
} producer;

uint64_t prod_rand(producer *p);

/* The conductor learns that consumer c died: it will send no READS_DONE. */
void reader_died(producer *p, int c);

/* Handle one message; false when none came within timeout_ms. */
bool prod_pump(producer *p, int timeout_ms);

void prod_unpersist_one(producer *p, size_t i);

/* One request: k tensors, each to one or both consumers, some persisted, some aborted. */
void prod_request(producer *p, int64_t index, int k);

/* Starts the world of `cfg`: forks the consumers, opens the producer's mesh and manager, and
 * waits for every consumer's HELLO. */
void prod_start(producer *p, const world_cfg *cfg);

/* Consumer `c` reported, with nothing bad and no read failed, and every descriptor sent to it was
 * read and verified or — of an aborted request — dropped by the drain. A one-host transport reads
 * inside start_read_tensors, before the drain that follows the INPUT_SIGNALS, so it verifies them
 * all; over UCX a drain may find a read still running. */
void prod_check_report(const producer *p, int c);

/* Tells consumer `c` to stop (its goodbye) and waits for it: it exits 0. */
void prod_stop_consumer(producer *p, int c);

/* Nothing the producer's transport holds is left: no registered region (UCX), no live slot or
 * spill file (arena). */
void prod_check_released(const producer *p);

/* Releases what prod_start opened and the producer's lists. */
void prod_close(producer *p);

/* ---- main ------------------------------------------------------------------------------------ */

/* A world test's main: UCX's settings (under the sanitizers too), small arena segments so that
 * growth, dedicated segments and spills all happen, then one cmocka test `name` that runs `run`
 * for each transport. */
int world_main(int argc, char **argv, const char *name, void (*run)(mstar_transport_kind kind));

#endif
