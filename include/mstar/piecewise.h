/*
 * mstar/piecewise.h — the piecewise runner: one inner
 * region of a submodule's forward (a transformer block loop, say) captured as a graph per shape
 * and slot, while the preamble around it stays eager and calls the region itself
 * (design.md "Piecewise regions").
 *
 * A region is described by a config: a capture function over named static input buffers, the
 * buffers themselves (made per shape), and the region's own step declaration, which the runner
 * drives through the same admit → plan → commit cycle as a whole forward, so the region's plan
 * lands in the resources' per-(bucket, slot, label) state that its graph reads at fixed
 * addresses. The region's host code runs only at warm-up and capture: whatever it reads off its
 * call is baked into the graph, and only the static buffers carry data into a replay.
 *
 * Shapes and keys. A BATCHED region captures, per batch size bs, bs rows of seq_len tokens; a
 * PACKED region captures, per bs and per total token count t, t tokens spread over bs rows
 * (each row t / bs, the first also t % bs). Each shape is a bucket key with walk
 * MSTAR_PIECEWISE_WALK and cg_key_info = the region's label (design.md "Buckets"). Its padding rows
 * come from a row pool with prefix "pw_<label>" and key "<bs>_<total_tokens>_slot<slot>" (design.md
 * "Padding rows").
 *
 * Memory. Every region of a node captures into the node's one graph pool, shared with its
 * whole-forward runner (design.md "Pools"), through mstar_capture_with_static_outputs: a region's
 * outputs live in buffers outside the pool, which only this region's own next replay overwrites
 * (design.md "Pools", G-18).
 *
 * Lookup never falls back to a larger batch size: a batch pads to the smallest configured bs at
 * least its size, and that exact shape must be captured (G-21; the whole-forward runner does
 * fall back).
 *
 * Threads: a runner belongs to the thread that drives its node's steps.
 */
#ifndef MSTAR_PIECEWISE_H
#define MSTAR_PIECEWISE_H

#include "mstar/core.h"
#include "mstar/device.h"
#include "mstar/graphs.h"
#include "mstar/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The graph walk of every piecewise bucket key. */
#define MSTAR_PIECEWISE_WALK "__piecewise__"

/* One captured shape of the region. */
typedef struct mstar_piecewise_shape {
    int64_t bs;
    const int64_t *seq_lens; /* bs rows */
    int64_t total_tokens;
} mstar_piecewise_shape;

/* What the region's capture function reads, built once per capture: the same call serves both
 * warm-ups and the capture. */
typedef struct mstar_piecewise_call {
    const mstar_tensor_map *static_inputs; /* the shape's static buffers */
    const int64_t *request_ids;            /* the shape's padding rows, bs of them */
    const mstar_forward_info *metadata;    /* their stand-in info, one per row */
    size_t n_requests;
    const mstar_piecewise_shape *shape;
    mstar_step *step;               /* the region's step: context (slot, label) and plan results */
    mstar_step_runner *step_runner; /* the resources */
    void *forward_kwargs;           /* the config's, untouched */
    mstar_compile_mode compile_mode;
    mstar_dtype compute_dtype; /* the autocast dtype; MSTAR_DTYPE_INVALID: the module's own */
    mstar_stream *stream;      /* enqueue here; allocate with mstar_alloc(stream) */
} mstar_piecewise_call;

/* The region: read call->static_inputs, enqueue on call->stream, and put each output in
 * `outputs` (owned entries allocated with mstar_alloc(call->stream), or views of static buffers).
 * Outputs are contiguous and lead with the row dim (BATCHED: bs rows; PACKED: total_tokens). */
typedef mstar_status (*mstar_piecewise_capture_fn)(void *user, const mstar_piecewise_call *call,
                                                   mstar_tensor_map *outputs);
/* The static input buffers of one capture: contiguous, leading
 * with the row dim, allocated with mstar_alloc(stream) (not capturing: the caching allocator) and
 * set owned, or borrowed views of buffers that outlive the runner. */
typedef mstar_status (*mstar_piecewise_static_fn)(void *user, const mstar_piecewise_shape *shape,
                                                  mstar_stream *stream, mstar_tensor_map *out);
/* Declare the region's step over `request_ids` with `seq_lens` tokens each (n rows; padding
 * rows are negative). *declared = false: the region plans nothing this time. The context is the
 * runner's (set before and after the call). */
typedef mstar_status (*mstar_piecewise_declare_fn)(void *user, const int64_t *request_ids,
                                                   const int64_t *seq_lens, size_t n,
                                                   mstar_step *step, bool *declared);
/* Whether this batch may lease the region ahead of its step. */
typedef bool (*mstar_piecewise_can_lease_fn)(void *user, const mstar_node_input *inputs, size_t n);

/* The two region kinds: BATCHED (rows of seq_len tokens each) and PACKED (tokens of all rows
 * packed together, total_tokens). Arrays are copied by the runner. */
typedef struct mstar_piecewise_config {
    mstar_graph_config_kind kind;
    mstar_piecewise_capture_fn capture_fn;        /* required */
    mstar_piecewise_static_fn make_static_inputs; /* required */
    mstar_piecewise_declare_fn declare_step;      /* NULL: the region plans nothing */
    mstar_piecewise_can_lease_fn can_lease;       /* NULL: every batch may */
    void *user;                                   /* the callbacks' first argument */
    void *forward_kwargs;                         /* handed to capture_fn as is */
    const int64_t *capture_batch_sizes;           /* NULL: 1, 2, 4, 8, 16, 32, 64 */
    size_t n_capture_batch_sizes;
    mstar_compile_mode compile_mode;
    /* The outer step plans this region's resources against the lease (mstar_piecewise_runner_
     * lease_slot): a run only stages and replays (the region reuses the
     * outer step's plan). Set wrongly, the region reads whatever plan is live — the runner cannot
     * check the outer lease. */
    bool lease_before_step;
    int64_t seq_len;             /* BATCHED: tokens per row, >= 1 */
    const int64_t *total_tokens; /* PACKED: total tokens per shape */
    size_t n_total_tokens;
} mstar_piecewise_config;

/* Zeroed: BATCHED, default batch sizes, compile NONE, no lease before the step. */
MSTAR_API void mstar_piecewise_config_init(mstar_piecewise_config *config);
/* The checks a runner applies (design.md "Graph configs"): both callbacks, a known kind and compile
 * mode, positive unique sizes, seq_len >= 1 (BATCHED), total_tokens given (PACKED) with no shape
 * whose tokens equal its bs (G-10). MSTAR_EINVAL naming the field. */
MSTAR_API mstar_status mstar_piecewise_config_validate(const mstar_piecewise_config *config);
/*
 * Reference replay_seq_lens(shape, seq_lens, real_bs): the tokens each of shape->bs rows carries
 * in a replay's step. BATCHED: the shape's own lengths, padding rows included (the batch axis is
 * what was captured, so padding rows compute too). PACKED: the real lengths, then 0 for each
 * padding row, so the plan sums to the real token count. `out` has room for shape->bs entries;
 * `seq_lens` (real_bs entries) may be NULL for BATCHED.
 */
MSTAR_API mstar_status mstar_piecewise_replay_seq_lens(const mstar_piecewise_config *config,
                                                       const mstar_piecewise_shape *shape,
                                                       const int64_t *seq_lens, int64_t real_bs,
                                                       int64_t *out);

/* ---------------------------------------------------------------------------------------------
 * Outputs of a replay
 * ------------------------------------------------------------------------------------------- */

/* What a run returns: the region's static output buffers (padded) and how many leading rows are
 * real (BATCHED: the real batch size; PACKED: the real token count). A plain value; valid until
 * the runner is destroyed, its contents until this runner's next run. */
typedef struct mstar_piecewise_output {
    const mstar_tensor_map *outputs;
    int64_t real_len;
    mstar_stream *stream; /* the compute stream the replay ran on */
} mstar_piecewise_output;

MSTAR_API size_t mstar_piecewise_output_count(const mstar_piecewise_output *out);
/* The i-th output's name (insertion order), NULL past the end. */
MSTAR_API const char *mstar_piecewise_output_key(const mstar_piecewise_output *out, size_t i);
MSTAR_API bool mstar_piecewise_output_contains(const mstar_piecewise_output *out, const char *key);
/* The leading real_len rows WITHOUT a copy: a view of the static buffer, overwritten by this
 * runner's next run (nothing else writes there: the buffer is outside the pool). Read it within
 * the step. MSTAR_ENOENT for an unknown key. */
MSTAR_API mstar_status mstar_piecewise_output_get_view(const mstar_piecewise_output *out,
                                                       const char *key, mstar_tensor *view);
/* An owned copy of the leading real_len rows, safe past the next run: allocated with
 * mstar_tensor_alloc(out->stream) and copied on that stream (after the replay); give it back
 * with mstar_tensor_free(out->stream, copy). MSTAR_ENOENT for an unknown key. */
MSTAR_API mstar_status mstar_piecewise_output_get(const mstar_piecewise_output *out,
                                                  const char *key, mstar_tensor *copy);

/* ---------------------------------------------------------------------------------------------
 * The runner
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_piecewise_runner mstar_piecewise_runner;

typedef struct mstar_piecewise_runner_options {
    const char *label;                    /* the region's label, a valid name */
    const mstar_piecewise_config *config; /* copied */
    mstar_step_runner *step_runner;       /* borrowed; its compute stream replays */
    mstar_graph_pool *pool;               /* the node's pool (memory_pool), borrowed */
    int32_t num_slots;                    /* 0: mstar_step_runner_default_num_slots */
    mstar_dtype autocast_dtype;           /* MSTAR_DTYPE_INVALID: none */
    const char *node_name;                /* for logs; NULL: none */
} mstar_piecewise_runner_options;

MSTAR_API mstar_status mstar_piecewise_runner_create(const mstar_piecewise_runner_options *opts,
                                                     mstar_piecewise_runner **out);
/* Destroys the graphs (their pool blocks go back to the pool, their output buffers are freed),
 * the static inputs the runner owns and its padding rows. NULL is ignored. */
MSTAR_API void mstar_piecewise_runner_destroy(mstar_piecewise_runner *runner);
MSTAR_API const char *mstar_piecewise_runner_label(const mstar_piecewise_runner *runner);
MSTAR_API int32_t mstar_piecewise_runner_num_slots(const mstar_piecewise_runner *runner);
MSTAR_API mstar_dummy_rows *mstar_piecewise_runner_dummy_rows(mstar_piecewise_runner *runner);

/* Every configured shape as a bucket key, in capture order: descending (bs, total_tokens).
 * Borrowed. */
MSTAR_API const mstar_bucket_key *
mstar_piecewise_runner_buckets(const mstar_piecewise_runner *runner, size_t *n);
/* Claim every (shape, slot) with the step runner; call on every runner of the device, then
 * mstar_step_runner_build_graph_buffers once. */
MSTAR_API mstar_status mstar_piecewise_runner_prepare_for_capture(mstar_piecewise_runner *runner,
                                                                  const mstar_cg_slot_spec **specs,
                                                                  size_t *n);
/* Sizing hooks (design.md "Planning"): warm every slot of a shape (declare,
 * admit, plan, 2 eager runs each followed by a reset and re-plan) without capturing; *peak = the
 * largest caching-allocator peak above the pre-warm baseline. */
MSTAR_API mstar_status mstar_piecewise_runner_warm_bucket(mstar_piecewise_runner *runner,
                                                          const mstar_bucket_key *bucket,
                                                          uint64_t *peak);
/* Capture slot 0 of a shape once and hand the graph to the caller instead of keeping it; `stats`
 * reports the pool bytes it took and kept (flags as mstar_capture_into_graph). */
MSTAR_API mstar_status mstar_piecewise_runner_capture_throwaway(mstar_piecewise_runner *runner,
                                                                const mstar_bucket_key *bucket,
                                                                unsigned flags, mstar_graph **out,
                                                                mstar_capture_stats *stats);
/* Capture the planned shapes (NULL: every shape), largest first, each slot warmed first. A shape
 * whose capture fails on any slot, or whose step a resource blocks, is dropped whole and logged;
 * the rest still capture. Padding rows are reset (storage freed) after every capture, failed ones
 * included (G-30). MSTAR_ESTATE before the graph buffers are built. */
MSTAR_API mstar_status mstar_piecewise_runner_warmup_and_capture(mstar_piecewise_runner *runner,
                                                                 const mstar_bucket_key *planned,
                                                                 size_t n);
/* Shapes not captured: planned out, failed or blocked (borrowed). */
MSTAR_API const mstar_bucket_key *
mstar_piecewise_runner_dropped_shapes(const mstar_piecewise_runner *runner, size_t *n);
/* Forget a captured shape (another rank dropped it, design.md "Rank agreement"): lookups then miss
 * it. */
MSTAR_API mstar_status mstar_piecewise_runner_drop_shape(mstar_piecewise_runner *runner,
                                                         const mstar_bucket_key *bucket);
MSTAR_API bool mstar_piecewise_runner_any_graphs(const mstar_piecewise_runner *runner);

/* Lookups (design.md "Piecewise regions"). The batch pads to the smallest configured bs >=
 * batch_size, and that exact shape must be captured: BATCHED (padded bs, seq_len·padded bs),
 * total_tokens ignored; PACKED the smallest captured total >= total_tokens at the padded bs
 * (total_tokens < 0: none, no shape). */
MSTAR_API bool mstar_piecewise_runner_can_run(const mstar_piecewise_runner *runner,
                                              int64_t batch_size, int64_t total_tokens);
/* The shape and slot a batch would replay on, asked before the forward, so the outer step can
 * plan the region's resources against it. The slot is the runner's current one (set_slot).
 * false: no shape (the region runs eager). */
MSTAR_API bool mstar_piecewise_runner_lease_slot(const mstar_piecewise_runner *runner,
                                                 int64_t batch_size, int64_t total_tokens,
                                                 mstar_slot_lease *out);
MSTAR_API bool mstar_piecewise_runner_lease_before_step(const mstar_piecewise_runner *runner);
/* The config's can_lease for this batch; true when it has none. */
MSTAR_API bool mstar_piecewise_runner_can_lease(const mstar_piecewise_runner *runner,
                                                const mstar_node_input *inputs, size_t n);
/* Pin the region to `slot` (the outer lease's, so its plan buffers double-buffer in step with
 * the outer pre-plan). MSTAR_EINVAL outside 0..num_slots-1. The initial slot is 0. */
MSTAR_API mstar_status mstar_piecewise_runner_set_slot(mstar_piecewise_runner *runner,
                                                       int32_t slot);
/* The captured graph of a lease: graph, static inputs, static
 * outputs and padding rows through the mstar_graph_slot accessors; NULL for an unknown lease. */
MSTAR_API const mstar_graph_slot *
mstar_piecewise_runner_slot_for(const mstar_piecewise_runner *runner,
                                const mstar_slot_lease *lease);

/*
 * Replay the region for a batch:
 *   1. real_bs: `real_bs` if >= 0, else n (request_ids or seq_lens must then be given); n must
 *      equal real_bs when an array is given. total = Σ seq_lens (PACKED needs seq_lens).
 *   2. The shape, as lease_slot finds it; MSTAR_ENOENT when there is none (check can_run).
 *   3. Each entry of `static_inputs` is copied into the same-named buffer's leading rows and the
 *      rest of the buffer is ZEROED (a batched region computes over its padding rows, which must
 *      read zeros, not the last step's values). An unknown name is MSTAR_EINVAL; a buffer with no
 *      entry keeps its contents and is warned about once.
 *   4. lease_before_step (or no declare_step): only stage and replay.
 *   5. Otherwise declare the region's step over request_ids then the shape's padding rows
 *      [real_bs, bs), with mstar_piecewise_replay_seq_lens; admit (refused: MSTAR_ENOSPC), plan,
 *      replay, commit; the padding rows are reset with their storage freed on every path (G-30).
 * *out is the region's outputs with real_len = total (PACKED) or real_bs (BATCHED).
 */
MSTAR_API mstar_status mstar_piecewise_runner_run(mstar_piecewise_runner *runner,
                                                  const mstar_tensor_map *static_inputs,
                                                  const int64_t *request_ids,
                                                  const int64_t *seq_lens, size_t n,
                                                  int64_t real_bs, mstar_piecewise_output *out);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_PIECEWISE_H */
