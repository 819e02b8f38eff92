/*
 * demo_run.h — the driver's state: the requests and where each one is in its walk, the three
 * roles the driver plays, the workers, and what was measured.
 *
 * A request's life in the driver:
 *
 *   PENDING ─submit─▶ RUNNING ─both workers done + result read─▶ DONE
 *                        │
 *                        ├─ABORT_REQUEST────────▶ DRAINING ─every READS_DONE─▶ ABORTED
 *                        └─FAIL_REQUESTS, a worker died, timeout ─▶ DRAINING ─▶ FAILED
 *
 * DRAINING sends DRAIN_REQUEST to every live worker and to the preprocess role, waits for each
 * one's READS_DONE (a dead worker counts as drained), then sends REMOVE_REQUEST with force to
 * each: only then may the producers free what readers might still copy (I-5, I-7).
 */
#ifndef MSTAR_EXAMPLES_DEMO_RUN_H
#define MSTAR_EXAMPLES_DEMO_RUN_H

#include "demo_link.h"
#include "demo_procs.h"
#include "demo_stats.h"

typedef enum dreq_state {
    R_PENDING = 0,
    R_RUNNING,
    R_DRAINING,
    R_DONE,
    R_ABORTED,
    R_FAILED,
} dreq_state;

/* Who must answer a drain: a bit per worker rank, and the preprocess role. */
#define DRAIN_PRE (1u << DEMO_WORKERS)

typedef struct dreq {
    dreq_state state;
    bool failing; /* the drain ends in FAILED (else ABORTED) */
    double t_submit, t_end;
    double t_encoded;  /* the encoder's WORKER_GRAPHS_DONE reached the conductor */
    bool walk_started; /* the conductor sent NEW_REQUEST to the workers */
    bool done_by[DEMO_WORKERS];
    bool completed;      /* the conductor saw every worker done (REMOVE sent, soft) */
    bool complete_seen;  /* REQUEST_COMPLETE reached the api server */
    bool result_read;    /* the api server read the result tokens */
    bool abort_sent;     /* the client asked for the abort */
    bool abort_too_late; /* ... after the walk had completed */
    bool pre_draining, pre_drained;
    unsigned drain_wait; /* DRAIN bits still to answer */
    mstar_tensor_id prompt_uuid;
    int64_t prompt_sends; /* persisted descriptor sent K times (UNPERSIST's count) */
    int32_t *result;      /* [nresult] generated tokens */
    int32_t nresult;
    char reason[256]; /* why it failed */
} dreq;

typedef struct demo_worker_report {
    bool in; /* the last part arrived */
    int64_t tensors_held, live_slots, spill_files, open_requests;
    int64_t done, failed, removed_soft, removed_force, drained;
    int64_t early_dropped; /* early inputs past the worker's bound, acknowledged unread */
    int64_t busy_us;
    demo_step_stats steps;
    /* The first tensor the worker still held at the end, named (held_signal "" when none). */
    int64_t held_uuid, held_request;
    char held_signal[64];
} demo_worker_report;

typedef struct demo_run {
    const demo_options *opts;
    const demo_config *cfg;
    demo_dirs dirs;
    demo_request_spec *specs;
    dreq *reqs;
    demo_link api, cond, pre; /* api_server, conductor (mesh only); preprocess (with a manager) */
    int enc_rank, dec_rank;
    char worker_name[DEMO_WORKERS][32];
    pid_t pid[DEMO_WORKERS];
    bool alive[DEMO_WORKERS];
    bool hello[DEMO_WORKERS];
    bool died[DEMO_WORKERS]; /* ended before its SHUTDOWN */
    int swept[DEMO_WORKERS]; /* files a dead worker left in the shm directory, removed */
    int exit_status[DEMO_WORKERS];
    double startup_s[DEMO_WORKERS];
    demo_worker_report report[DEMO_WORKERS];
    int32_t next_submit;
    int32_t inflight;
    int32_t done, aborted, failed;
    int64_t tokens_out;
    double t_start, t_serve, t_end; /* started, serving from, serving until */
    double t_shutdown, t_checked;   /* the workers gone; the self-check done */
    bool stop_submitting;
    bool killed;     /* the fault injection fired */
    char fatal[512]; /* the first reason the run fails, "" while none */
    demo_traffic traffic;
    int64_t pre_tensors_left, pre_live_slots, pre_spill_files;
    int shm_left;
    int32_t checked, mismatches;
    char mismatch[256];
} demo_run;

/* Record why the run fails (the first reason wins). */
void demo_run_fail(demo_run *run, const char *fmt, ...) MSTAR_PRINTF(2, 3);

/* ---- demo_walk.c: the three roles ---------------------------------------------------------- */

/* Submit request i (the api server and its preprocess worker): store and stage the prompt,
 * persisted, and tell the conductor. */
mstar_status demo_walk_submit(demo_run *run, int32_t i);
/* Handle a message that arrived at the api server, the conductor or the preprocess role. */
void demo_walk_on_api(demo_run *run, mstar_msg *m);
void demo_walk_on_conductor(demo_run *run, mstar_msg *m);
void demo_walk_on_preprocess(demo_run *run, mstar_msg *m);
/* The periodic part: landed result reads, answered drains, timed aborts. */
void demo_walk_poll(demo_run *run);
/* Tear every unfinished request down as failed (a worker died, a timeout, a signal). */
void demo_walk_fail_all(demo_run *run, const char *why);
/* A worker is gone: it answers no drain from now on. */
void demo_walk_worker_died(demo_run *run, int rank);
/* Requests not yet DONE, ABORTED or FAILED among those submitted. */
int32_t demo_walk_unfinished(const demo_run *run);

/* ---- demo_check.c -------------------------------------------------------------------------- */

/* Run a sample of the completed requests again, eagerly, in this process (encoder, codebook,
 * prefill and greedy decode one request at a time) and compare the tokens. */
mstar_status demo_check_eager(demo_run *run);

/* ---- demo_report.c ------------------------------------------------------------------------- */

void demo_report_progress(demo_run *run, bool final);
/* The summary on stdout (text, or JSON with --json). */
void demo_report_summary(demo_run *run);

#endif
