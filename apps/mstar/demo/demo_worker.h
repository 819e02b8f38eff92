/*
 * demo_worker.h — a worker process of the demo and the components it runs.
 *
 * The worker owns the per-request protocol (design.md "Tensor lifecycle", "Teardown and the drain",
 * "Control messages"): NEW_REQUEST opens a request and reads its initial inputs; INPUT_SIGNALS that
 * arrive before it are buffered; ready edges go to the component; DRAIN_REQUEST stops the request,
 * waits until none of its reads is copying and answers READS_DONE; REMOVE_REQUEST cleans the
 * request up (soft, or forced after a drain); inputs of a drained or removed request are
 * acknowledged unread. The component only sees ready inputs, runs steps, and hands outputs back
 * through demo_worker_emit.
 */
#ifndef MSTAR_EXAMPLES_DEMO_WORKER_H
#define MSTAR_EXAMPLES_DEMO_WORKER_H

#include "demo_stats.h"

typedef struct demo_worker demo_worker;

/* Run worker `rank` until SHUTDOWN (or a fatal error); the process exit code. `ipc_dir` and
 * `shm_dir` are the run's private directories. */
int demo_worker_main(const demo_options *opts, int rank, const char *ipc_dir, const char *shm_dir);

typedef struct demo_component_ops {
    /* Build the component (and capture its graphs). */
    mstar_status (*create)(demo_worker *w, void **self);
    void (*destroy)(void *self);
    /* A ready input edge of an open request: the component takes what it needs during the call
     * (the worker releases the descriptors' usage references when it returns). An error fails
     * the request. */
    mstar_status (*input)(void *self, int64_t rid, const mstar_edge *edge);
    /* Run one step if there is work (*worked = false otherwise). Requests a step cannot serve
     * are failed through demo_worker_fail; an error return is fatal for the worker. */
    mstar_status (*step)(void *self, bool *worked);
    /* Forget `rid` (drain or removal): it is never scheduled again. */
    void (*drop)(void *self, int64_t rid);
} demo_component_ops;

extern const demo_component_ops demo_encoder_component;
extern const demo_component_ops demo_decoder_component;

/* What a component may ask of its worker. */
const demo_config *demo_worker_config(const demo_worker *w);
mstar_backend *demo_worker_backend(demo_worker *w);
mstar_comm *demo_worker_comm(demo_worker *w);
bool demo_worker_graphs(const demo_worker *w);
/* The request's max_new_tokens (from its NEW_REQUEST). */
int32_t demo_worker_max_new(const demo_worker *w, int64_t rid);
void demo_worker_count_step(demo_worker *w, const char *walk, const demo_step_info *info);

/* Check that an input edge is the one tensor of `signal` a component takes: MSTAR_EPROTO naming
 * the component (`who`) and what came instead. */
mstar_status demo_worker_check_input(const mstar_edge *edge, const char *who, const char *signal);
/* Send rid's output `t` on: to the next component's worker as INPUT_SIGNALS, or from the last
 * component to the api server as result_tensors. The bytes are copied; `t` stays the caller's. */
mstar_status demo_worker_emit(demo_worker *w, int64_t rid, const char *signal,
                              const mstar_tensor *t);
/* rid's part of the walk is done here: WORKER_GRAPHS_DONE to the conductor with this worker's
 * TX/RX records of the request. */
mstar_status demo_worker_done(demo_worker *w, int64_t rid);
/* rid cannot be served here: FAIL_REQUESTS to the conductor, which tears it down. */
void demo_worker_fail(demo_worker *w, int64_t rid, const char *reason);

#endif
