/*
 * mstar/step.h — the step a graph runner drives: tensor maps, step declarations, resources, the
 * step runner (admit → plan → forward → commit, with pre-plan on the plan stream), and signals.
 *
 * A *resource* is per-request state a step reads and advances: a paged KV cache, positions, a
 * sampler. A submodule *declares* each step (mstar_step: segments of requests per labelled stream
 * plus one payload per resource); the *step runner* (one per device, shared by every runner whose
 * nodes share resources) drives the resources through the cycle in dependency order:
 *   admit   reserve capacity ({ok, ready, reason}); padding rows reserve nothing;
 *   plan    write the plan (e.g. per-(slot, label) static plan buffers a graph reads);
 *   commit  record consumption (advance lengths and positions) for real rows.
 * Pre-plan runs admit/plan for the next step early, into each resource's pending state for the
 * leased slot, on the plan stream; the full plan then promotes that state (design.md "Steps").
 *
 * Threads: a step runner's lease counter (mstar__ internal, used by the graph runners) is the one
 * thread-safe part; everything else belongs to the thread that drives steps. Signals are
 * thread-safe.
 */
#ifndef MSTAR_STEP_H
#define MSTAR_STEP_H

#include "mstar/core.h"
#include "mstar/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Tensor maps: tensors by name
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_tensor_map mstar_tensor_map;

MSTAR_API mstar_status mstar_tensor_map_create(mstar_tensor_map **out);
/* Frees the owned entries (see set_owned) and the map. NULL is ignored. */
MSTAR_API void mstar_tensor_map_destroy(mstar_tensor_map *map);
/* Add or replace `name` (a valid mstar name, copied) with a borrowed view. */
MSTAR_API mstar_status mstar_tensor_map_set(mstar_tensor_map *map, const char *name,
                                            const mstar_tensor *t);
/* Same, but the map owns t->data: it is given back with mstar_free(stream, …) when the entry is
 * replaced, cleared or the map destroyed. */
MSTAR_API mstar_status mstar_tensor_map_set_owned(mstar_tensor_map *map, const char *name,
                                                  const mstar_tensor *t, mstar_stream *stream);
/* NULL when absent. Valid until the map changes. */
MSTAR_API const mstar_tensor *mstar_tensor_map_get(const mstar_tensor_map *map, const char *name);
MSTAR_API size_t mstar_tensor_map_count(const mstar_tensor_map *map);
/* Entries in insertion order. */
MSTAR_API const char *mstar_tensor_map_name(const mstar_tensor_map *map, size_t i);
MSTAR_API const mstar_tensor *mstar_tensor_map_at(const mstar_tensor_map *map, size_t i);
/* Drop every entry (owned ones are freed). */
MSTAR_API void mstar_tensor_map_clear(mstar_tensor_map *map);

/* ---------------------------------------------------------------------------------------------
 * Buckets, leases and capture jobs (design.md "Buckets", "Slots")
 * ------------------------------------------------------------------------------------------- */

/* One captured shape. Strings are owned by the runner that produced the key. Printed as
 * "walk[bs=8,tokens=8]" or "walk[bs=8,tokens=8,key=cfg]": the name mstar_fail_if_graphs_required
 * lists. */
typedef struct mstar_bucket_key {
    const char *graph_walk;
    int64_t bs;
    int64_t num_tokens;
    const char *cg_key_info; /* NULL: none */
} mstar_bucket_key;

#define MSTAR_BUCKET_NAME_MAX 600
/* Writes the bucket's name (truncated to `size`); returns `buf`. */
MSTAR_API char *mstar_bucket_key_format(const mstar_bucket_key *key, char *buf, size_t size);
MSTAR_API bool mstar_bucket_key_equal(const mstar_bucket_key *a, const mstar_bucket_key *b);

/* Which bucket and double-buffer slot a step replays on. The bucket always names the CAPTURE walk,
 * even when found through a replay alias (design.md "Buckets", G-14): resources key per-slot state
 * on it. */
typedef struct mstar_slot_lease {
    int32_t slot;
    mstar_bucket_key bucket;
} mstar_slot_lease;

/* One capture job: resources build the per-(bucket, slot, label) state it will read. */
typedef struct mstar_cg_slot_spec {
    mstar_bucket_key bucket;
    int32_t slot;
    uint32_t config_idx;
} mstar_cg_slot_spec;

/* ---------------------------------------------------------------------------------------------
 * Step declarations (design.md "Steps")
 * ------------------------------------------------------------------------------------------- */

/* One request's addition to one labelled stream this step. Span 0 reads without extending:
 * admit reserves nothing and commit is a no-op. Padding rows have negative handles. */
typedef struct mstar_step_segment {
    int64_t request;
    uint32_t label;
    int64_t span;
} mstar_step_segment;

typedef struct mstar_step_ctx {
    const int64_t *request_ids; /* padded: real ids, then padding handles */
    size_t n_requests;
    const char *graph_walk;
    int32_t slot; /* -1: no slot (eager) */
    bool capture; /* warm-up or capture of a bucket */
    bool is_preplan;
    bool has_lease;
    mstar_slot_lease lease;
    const char *label;    /* a piecewise region's label; NULL for the whole forward */
    mstar_stream *stream; /* where resources enqueue: compute stream, plan stream in pre-plan */
    mstar_dtype compute_dtype; /* the autocast dtype; MSTAR_DTYPE_INVALID: the module's own */
} mstar_step_ctx;

typedef struct mstar_step mstar_step;

MSTAR_API mstar_status mstar_step_create(mstar_step **out);
MSTAR_API void mstar_step_destroy(mstar_step *step);
/* Forget segments, payloads, key and plan results; the context is zeroed (slot -1). */
MSTAR_API void mstar_step_reset(mstar_step *step);
MSTAR_API mstar_status mstar_step_add_segment(mstar_step *step, int64_t request, uint32_t label,
                                              int64_t span);
/* The payload for the resource registered as `key` (copied, at most 4096 bytes): a KV step, a
 * position step… Its presence is what makes the resource part of the step. */
MSTAR_API mstar_status mstar_step_set_resource(mstar_step *step, const char *key, const void *data,
                                               size_t size);
/* The step's capture discriminator (copied; NULL: none). */
MSTAR_API mstar_status mstar_step_set_cg_key_info(mstar_step *step, const char *key);
MSTAR_API const mstar_step_segment *mstar_step_segments(const mstar_step *step, size_t *n);
/* The payload of `key`, or NULL when the resource is not in the step. */
MSTAR_API const void *mstar_step_resource(const mstar_step *step, const char *key, size_t *size);
MSTAR_API const char *mstar_step_cg_key_info(const mstar_step *step);
MSTAR_API mstar_step_ctx *mstar_step_context(mstar_step *step);
/* A resource's plan result for its dependents (attention reads the KV plan). Borrowed. */
MSTAR_API mstar_status mstar_step_set_plan_result(mstar_step *step, const char *key, void *result);
MSTAR_API void *mstar_step_plan_result(const mstar_step *step, const char *key);

/* ---------------------------------------------------------------------------------------------
 * Resources
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_step_admit_result {
    bool ok;          /* capacity reserved */
    bool ready;       /* inputs it depends on are ready */
    char reason[160]; /* why not, for logs */
    int64_t pages_short;
    uint32_t label;
    int64_t request;
} mstar_step_admit_result;

/* A resource implements these; NULL entries are skipped (pre_* must be set when
 * supports_preplan). `self` is what was registered. Each reads its payload with
 * mstar_step_resource(step, its key) and the context with mstar_step_context(step). */
typedef struct mstar_resource_ops {
    bool supports_preplan;
    /* false (or a function returning false) blocks capturing a step that uses it */
    bool (*can_capture)(void *self, const mstar_step *step);
    mstar_status (*admit)(void *self, mstar_step *step, mstar_step_admit_result *out);
    mstar_status (*plan)(void *self, mstar_step *step);
    mstar_status (*commit)(void *self, mstar_step *step);
    /* Pre-plan into the pending state of ctx->lease.slot, enqueueing on ctx->stream (the plan
     * stream). The next plan() of that slot promotes it. */
    mstar_status (*pre_admit)(void *self, mstar_step *step, mstar_step_admit_result *out);
    mstar_status (*pre_plan)(void *self, mstar_step *step);
    /* Discard pending pre-plan state of `slot` only (-1: every slot). */
    void (*clear_preplan)(void *self, int32_t slot);
    mstar_status (*ingest_request)(void *self, int64_t request);
    /* Back to a clean stream (length 0); `free_storage` also gives its storage back. */
    mstar_status (*reset_request)(void *self, int64_t request, bool free_storage);
    void (*remove_request)(void *self, int64_t request);
    /* Build the static buffers every capture job reads, sized by max_bs / max_seq_len. Called
     * once per device, after every runner claimed. */
    mstar_status (*build_graph_buffers)(void *self, const mstar_cg_slot_spec *specs, size_t n,
                                        int64_t max_bs, int64_t max_seq_len);
    mstar_status (*post_warmup_validate)(void *self);
} mstar_resource_ops;

/* ---------------------------------------------------------------------------------------------
 * The step runner (one per device)
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_step_runner mstar_step_runner;

/* `compute` is the stream forwards and replays run on (borrowed). The runner creates its own
 * non-blocking plan stream. */
MSTAR_API mstar_status mstar_step_runner_create(mstar_backend *backend, mstar_stream *compute,
                                                mstar_step_runner **out);
MSTAR_API void mstar_step_runner_destroy(mstar_step_runner *sr);
MSTAR_API mstar_backend *mstar_step_runner_backend(const mstar_step_runner *sr);
MSTAR_API mstar_stream *mstar_step_runner_compute_stream(const mstar_step_runner *sr);
/* The dedicated pre-plan stream: never the compute stream. */
MSTAR_API mstar_stream *mstar_step_runner_plan_stream(const mstar_step_runner *sr);

/* Register a resource under `key` (copied). Its dependencies must be registered already, so
 * registration order is a dependency order. A pre-planning resource whose dependency does not
 * pre-plan is refused (it would read the plan of the step still in flight). */
MSTAR_API mstar_status mstar_step_runner_add_resource(mstar_step_runner *sr, const char *key,
                                                      const mstar_resource_ops *ops, void *self,
                                                      const char *const *deps, size_t ndeps);
/* Whether any resource pre-plans. */
MSTAR_API bool mstar_step_runner_supports_preplan(const mstar_step_runner *sr);
/* MSTAR_NUM_SLOTS (default 2) when some resource pre-plans, else 1. */
MSTAR_API mstar_status mstar_step_runner_default_num_slots(const mstar_step_runner *sr,
                                                           int32_t *out);

/* The cycle. Each runs the resources of the step, in registration order. admit stops at the
 * first resource that is not ok and reports it in *out (MSTAR_OK still: not an error). */
MSTAR_API mstar_status mstar_step_runner_admit(mstar_step_runner *sr, mstar_step *step,
                                               mstar_step_admit_result *out);
MSTAR_API mstar_status mstar_step_runner_plan(mstar_step_runner *sr, mstar_step *step);
MSTAR_API mstar_status mstar_step_runner_commit(mstar_step_runner *sr, mstar_step *step);

/* Pre-plan (needs ctx->has_lease): sets ctx->is_preplan and ctx->stream = the plan stream, and
 * runs the pre-planning resources only. pre_plan first makes the plan stream wait for the last
 * replay that used the leased slot (G-4), then records `plan_done` (may be NULL) on the plan
 * stream; run_forward waits for it on the device. */
MSTAR_API mstar_status mstar_step_runner_pre_admit(mstar_step_runner *sr, mstar_step *step,
                                                   mstar_step_admit_result *out);
MSTAR_API mstar_status mstar_step_runner_pre_plan(mstar_step_runner *sr, mstar_step *step,
                                                  mstar_event *plan_done);
/* Discard pending pre-plan state of one slot (-1: all) in every resource. */
MSTAR_API void mstar_step_runner_clear_preplan(mstar_step_runner *sr, int32_t slot);

MSTAR_API mstar_status mstar_step_runner_ingest_request(mstar_step_runner *sr, int64_t request);
MSTAR_API mstar_status mstar_step_runner_reset_request(mstar_step_runner *sr, int64_t request,
                                                       bool free_storage);
MSTAR_API void mstar_step_runner_remove_request(mstar_step_runner *sr, int64_t request);

/* Capture jobs claimed by runners (their prepare_for_capture), accumulated until
 * the one build. MSTAR_ESTATE after the build: a later claim would move buffers that captured
 * graphs already hold (G-26). */
MSTAR_API mstar_status mstar_step_runner_claim(mstar_step_runner *sr,
                                               const mstar_cg_slot_spec *specs, size_t n,
                                               int64_t max_bs, int64_t max_seq_len);
/* Build every resource's graph buffers once, over all claims. Called again it does nothing
 * (no claim can follow the build, so there is nothing to grow) and returns MSTAR_OK. */
MSTAR_API mstar_status mstar_step_runner_build_graph_buffers(mstar_step_runner *sr);
MSTAR_API bool mstar_step_runner_buffers_built(const mstar_step_runner *sr);
MSTAR_API mstar_status mstar_step_runner_post_warmup_validate(mstar_step_runner *sr);

/* Reference blocked_capture_resources: keys of resources in the step that cannot capture it.
 * Writes at most `cap` keys (borrowed from the runner) and returns how many there are. */
MSTAR_API size_t mstar_blocked_capture_resources(const mstar_step_runner *sr,
                                                 const mstar_step *step, const char **keys,
                                                 size_t cap);

/* ---------------------------------------------------------------------------------------------
 * Signals: one-shot flags a thread waits on (launch_started, commit_done, outputs_ready)
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_signal mstar_signal;

MSTAR_API mstar_status mstar_signal_create(mstar_signal **out);
MSTAR_API void mstar_signal_destroy(mstar_signal *signal);
MSTAR_API void mstar_signal_set(mstar_signal *signal);
MSTAR_API void mstar_signal_reset(mstar_signal *signal);
MSTAR_API bool mstar_signal_is_set(mstar_signal *signal);
/* MSTAR_OK once set, MSTAR_ETIMEDOUT after timeout_ms (negative: wait forever). */
MSTAR_API mstar_status mstar_signal_wait(mstar_signal *signal, int64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_STEP_H */
