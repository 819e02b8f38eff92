/*
 * ref_node.h — the reference decode model as a graph-runner node.
 *
 * A node bundles what a worker holds for one model on one device: the model (ref_model.h), the
 * two resources registered with a step runner ("kv": the paged KV cache, "positions"), one graph
 * pool, and a whole-forward graph runner whose submodule is the model:
 *   declare_step  one segment per row (label 0, the row's tokens) plus both resources' payloads
 *   preprocess    the rows' token ids (host int32 "tokens" tensors) packed into one device
 *                 tensor "tokens", through pinned staging; for a replay that tensor is the
 *                 slot's static input itself (mstar_graph_runner_static_input), so run_forward
 *                 stages without a copy
 *   forward       the model over the step's rows and tokens against the slot's plan (the eager
 *                 state when there is no lease), outputs "logits" [rows, vocab] float32 and
 *                 "next_tokens" [rows] int32
 * ref_node_step is the engine's side of one step: lease a bucket (or run eager), pad the batch
 * with zero-length rows, declare, admit, plan, preprocess, replay (run_forward) or run the
 * forward, copy the real rows' outputs out (copies: a replay's outputs are views the next replay
 * overwrites), commit, release the padding rows.
 */
#ifndef MSTAR_EXAMPLES_REF_NODE_H
#define MSTAR_EXAMPLES_REF_NODE_H

#include "ref_model.h"

/* One captured method: a BATCHED config of one token per row ("decode"), or a PACKED config of
 * rows sharing token_lengths tokens ("prefill"). */
typedef struct ref_capture_config {
    const char *walk;
    bool packed;
    const int64_t *batch_sizes; /* NULL: the runner's default 1, 2, 4, ..., 64 */
    size_t n_batch_sizes;
    const int64_t *token_lengths; /* packed only */
    size_t n_token_lengths;
} ref_capture_config;

typedef struct ref_node_options {
    ref_model_config model;
    mstar_kv_cache_config kv;
    const ref_capture_config *captures;
    size_t n_captures;
    int32_t num_slots; /* 0: MSTAR_NUM_SLOTS (2: the resources pre-plan) */
} ref_node_options;

typedef struct ref_node ref_node;

/* Build the node on `backend` (host or CUDA) with its own compute stream. Captures nothing yet. */
mstar_status ref_node_create(mstar_backend *backend, const ref_node_options *opts, ref_node **out);
/* Free everything (before the backend is destroyed). NULL is a no-op. */
void ref_node_destroy(ref_node *node);

/* Startup: claim the capture jobs, build the resources' graph buffers once, warm up and capture
 * every bucket, hand back the padding rows' storage. */
mstar_status ref_node_capture(ref_node *node);

/* A request's streams in every resource (the step runner's ingest / remove). */
mstar_status ref_node_open(ref_node *node, int64_t request);
void ref_node_close(ref_node *node, int64_t request);

/* One step on walk `walk` over `n` real rows: rows[i] adds spans[i] tokens, packed in row order
 * in `tokens` (host memory). */
typedef struct ref_step_request {
    const char *walk;
    const int64_t *rows;
    const int32_t *spans;
    int32_t n;
    const int32_t *tokens;
    bool use_graphs;        /* replay the tightest captured bucket when one fits, else run eager */
    bool commit;            /* false: a frozen step, nothing advances (benchmarks repeat one) */
    int32_t slot;           /* -1: the next slot; else the slot ref_node_preplan reserved */
    mstar_event *plan_done; /* the pre-plan's event (or NULL): the replay waits for it */
} ref_step_request;

/* Where one step's host time went, in nanoseconds. The runner's host overhead per step is
 * select + launch (lease, then stage and launch). */
typedef struct ref_step_timing {
    bool replayed;       /* a captured bucket ran it */
    int32_t slot;        /* its slot (-1 eager) */
    int64_t bucket_rows; /* the bucket's bs (the real rows when eager) */
    uint64_t select_ns;  /* lease_slot */
    uint64_t prepare_ns; /* pad, declare, admit, plan, preprocess */
    uint64_t launch_ns;  /* run_forward (stage + launch), or the eager forward's enqueue */
    uint64_t finish_ns;  /* output copies (and their wait), commit, release */
} ref_step_timing;

/* Run one step. logits ([n, vocab]) and next_tokens ([n]) are host memory and may be NULL; when
 * either is given the step waits for its outputs, which are copies. timing may be NULL. On an
 * admit shortage MSTAR_ENOSPC with the reason; the padding rows are released on every path. */
mstar_status ref_node_step(ref_node *node, const ref_step_request *req, float *logits,
                           int32_t *next_tokens, ref_step_timing *timing);

/* The same step in the engine's three phases, for callers that time them or re-launch one
 * prepared step (benchmarks). begin: lease (when use_graphs), pad, declare, admit, plan,
 * preprocess; on failure it has already ended the step. launch: stage and replay (run_forward),
 * or enqueue the eager forward; may be called again to re-run the same prepared step. end: copy
 * the outputs out (as ref_node_step), commit if the forward was launched, release the padding
 * rows. The request's arrays must stay valid until end. One step at a time. */
mstar_status ref_node_begin(ref_node *node, const ref_step_request *req, ref_step_timing *timing);
mstar_status ref_node_launch(ref_node *node, ref_step_timing *timing);
mstar_status ref_node_end(ref_node *node, float *logits, int32_t *next_tokens,
                          ref_step_timing *timing);

/* Pre-plan `req` ahead of its step (design.md "Steps"): lease a slot, declare over the
 * padded rows, pre-admit and pre-plan on the plan stream, record `plan_done` there. *slot is the
 * reserved slot: pass it (and plan_done) in the step's request, whose plan then promotes the
 * pre-plan; or drop the speculation with ref_node_drop_preplan. MSTAR_ENOENT when no captured
 * bucket fits (a pre-plan needs a lease). */
mstar_status ref_node_preplan(ref_node *node, const ref_step_request *req, mstar_event *plan_done,
                              int32_t *slot);
/* Drop a pre-planned step that will not run: clear the slot's pending plans (handing back what
 * the pre-admit reserved) and release its padding rows. */
mstar_status ref_node_drop_preplan(ref_node *node, const ref_step_request *req, int32_t slot);

ref_model *ref_node_model(ref_node *node);
mstar_kv_cache *ref_node_kv(ref_node *node);
mstar_positions *ref_node_positions(ref_node *node);
mstar_stream *ref_node_stream(ref_node *node);
mstar_step_runner *ref_node_step_runner(ref_node *node);
mstar_graph_runner *ref_node_runner(ref_node *node);

#endif
