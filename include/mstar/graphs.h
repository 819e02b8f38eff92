/*
 * mstar/graphs.h — the accelerator graph runner: graph pools and capture.
 *
 * Graph pools are this project's own allocator over backend memory (docs/architecture.md,
 * docs/design.md "Pools"): while a stream captures into a pool, the stream's mstar_alloc calls are
 * served from the pool; blocks freed during a capture return to the pool for later captures; blocks
 * live when the capture ends belong to the graph until it is destroyed. One pool per node, shared
 * by the node's whole-forward runner and its piecewise regions.
 */
#ifndef MSTAR_GRAPHS_H
#define MSTAR_GRAPHS_H

#include "mstar/core.h"
#include "mstar/device.h"
#include "mstar/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Graph pools
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_graph_pool mstar_graph_pool;

/* `name` (a valid mstar name, e.g. the node's) appears in logs and in capture plans. */
MSTAR_API mstar_status mstar_graph_pool_create(mstar_backend *backend, const char *name,
                                               mstar_graph_pool **out);
/* Drop the creator's reference. The pool's memory stays until every graph owning blocks of it is
 * destroyed too. NULL is ignored. */
MSTAR_API void mstar_graph_pool_destroy(mstar_graph_pool *pool);
MSTAR_API const char *mstar_graph_pool_name(const mstar_graph_pool *pool);
MSTAR_API mstar_backend *mstar_graph_pool_backend(const mstar_graph_pool *pool);
/* reserved = segments the pool holds; allocated = live blocks (graphs' kept blocks included). */
MSTAR_API void mstar_graph_pool_stats(mstar_graph_pool *pool, mstar_alloc_stats *out);
/* Give every segment that holds no live block back to the backend (a pool's memory once its
 * graphs are gone; capture planning trims after each throwaway capture, so free memory and the
 * next capture's `taken` start clean). *released (may be NULL) gets the bytes. MSTAR_ESTATE while
 * the pool captures. */
MSTAR_API mstar_status mstar_graph_pool_trim(mstar_graph_pool *pool, uint64_t *released);

/* ---------------------------------------------------------------------------------------------
 * Capture
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_capture_stats {
    uint64_t taken; /* pool bytes the capture reserved (the planner's `graph`) */
    uint64_t kept;  /* pool bytes live at capture end: now the graph's (the planner's `kept`); a
                     * block over 1 MiB counts with its segment's 2 MiB rounding */
    uint64_t peak;  /* most pool bytes live during the capture, above its start */
    size_t nodes;   /* mstar_graph_node_count */
} mstar_capture_stats;

enum {
    /* Keep the un-instantiated graph (mstar_graph_native) for measurements. */
    MSTAR_CAPTURE_KEEP_GRAPH = 1,
};

/* The work to capture: enqueue everything on `stream` and allocate with mstar_alloc(stream). */
typedef mstar_status (*mstar_capture_fn)(mstar_stream *stream, void *user);

/*
 * Capture run(stream, user) into a new, instantiated graph whose allocations come from `pool`.
 * On failure (run fails, the runtime invalidates the capture, instantiation fails) everything is
 * undone before returning: the stream no longer captures, its allocations route to the caching
 * allocator again, the pool takes back the capture's blocks, and the next capture on the same
 * pool and stream works (G-1). The error names the pool and the cause. `stats` may be NULL.
 */
MSTAR_API mstar_status mstar_capture_into_graph(mstar_stream *stream, mstar_graph_pool *pool,
                                                mstar_capture_fn run, void *user, unsigned flags,
                                                mstar_graph **out, mstar_capture_stats *stats);

/* Like mstar_capture_fn, for a run that returns named outputs: it fills `outputs` with views of
 * tensors allocated with mstar_alloc(stream) (or of static buffers). */
typedef mstar_status (*mstar_capture_outputs_fn)(mstar_stream *stream, void *user,
                                                 mstar_tensor_map *outputs);

/*
 * Capture run so its outputs land in buffers allocated OUTSIDE the pool (design.md "Pools").
 * `warm_outputs` (what run returned in a warm-up) fixes each output's name, shape and dtype; one
 * buffer per output is taken from the caching allocator before the capture, and the graph ends with
 * a device-to-device copy of each output into its buffer. Such a buffer stays valid until this
 * graph's own next replay, whatever other graphs of the pool replay in between — unlike a pool
 * block, which a later capture may reuse as scratch. `static_outputs` receives views of the
 * buffers (owned by the graph). run's outputs must match the warm outputs (MSTAR_EINVAL names the
 * one that does not).
 */
MSTAR_API mstar_status mstar_capture_with_static_outputs(
    mstar_stream *stream, mstar_graph_pool *pool, mstar_capture_outputs_fn run, void *user,
    const mstar_tensor_map *warm_outputs, unsigned flags, mstar_graph **out,
    mstar_tensor_map *static_outputs, mstar_capture_stats *stats);

/* ---------------------------------------------------------------------------------------------
 * Padding rows
 * ------------------------------------------------------------------------------------------- */

/* The handle minted for a padding-row name: a process-wide registry hands out -1, -2, … in
 * first-seen order and returns the same handle for the same name (so minting follows config order
 * and is identical on every rank). Real requests have handles >= 0. Thread-safe. */
MSTAR_API mstar_status mstar_dummy_rid_handle(const char *name, int64_t *out);
/* The name a padding handle was minted from, for logs; NULL for an unknown handle. */
MSTAR_API const char *mstar_dummy_rid_name(int64_t handle);
static inline bool mstar_is_padding_row(int64_t handle)
{
    return handle < 0;
}

typedef struct mstar_dummy_rows mstar_dummy_rows;

/* Padding rows named "__cg_<prefix>_<key>_<i>__". Rows are ingested into the step runner's
 * resources once and kept for the pool's life (a re-ingest would orphan storage). */
MSTAR_API mstar_status mstar_dummy_rows_create(const char *prefix, mstar_step_runner *step_runner,
                                               mstar_dummy_rows **out);
/* Removes every row it ingested from the resources. */
MSTAR_API void mstar_dummy_rows_destroy(mstar_dummy_rows *rows);
/* The first `bs` handles of `key` (borrowed; valid until the pool is destroyed). */
MSTAR_API mstar_status mstar_dummy_rows_handles(mstar_dummy_rows *rows, const char *key, int64_t bs,
                                                const int64_t **out);
/* Same, ingesting any row not opened yet. */
MSTAR_API mstar_status mstar_dummy_rows_ensure(mstar_dummy_rows *rows, const char *key, int64_t bs,
                                               const int64_t **out);
/* Back to a clean stream (length 0) in every resource; `free_storage` gives storage back. */
MSTAR_API mstar_status mstar_dummy_rows_reset(mstar_dummy_rows *rows, const int64_t *rids, size_t n,
                                              bool free_storage);
/* Give back every row's storage once capture is done: replays pad with zero-length rows. */
MSTAR_API mstar_status mstar_dummy_rows_release_all(mstar_dummy_rows *rows);

/* Stand-in request info for padding rows: what a padded step's forward reads for them. */
typedef struct mstar_forward_info {
    const char *graph_walk;
    bool requires_cfg;
    int64_t fwd_index;
    uint64_t random_seed;
    int64_t max_tokens;
} mstar_forward_info;

/* graph_walk, requires_cfg = false, fwd_index = 0, random_seed = 0, max_tokens = 1. */
MSTAR_API mstar_forward_info mstar_dummy_metadata(const char *graph_walk);

/* ---------------------------------------------------------------------------------------------
 * Graph configs (design.md "Graph configs")
 * ------------------------------------------------------------------------------------------- */

typedef enum mstar_graph_config_kind {
    /* bs rows of a fixed per-request length: the bucket follows from bs (pre-plan possible) */
    MSTAR_GRAPH_BATCHED = 0,
    /* (bs, token length) pairs: the bucket is known only once inputs exist */
    MSTAR_GRAPH_PACKED = 1,
} mstar_graph_config_kind;

typedef enum mstar_compile_mode {
    MSTAR_COMPILE_NONE = 0,
    MSTAR_COMPILE_DEFAULT = 1,
    MSTAR_COMPILE_MAX_AUTOTUNE_NO_GRAPHS = 2, /* never a mode that builds graphs itself */
} mstar_compile_mode;

/* One request's inputs to a node for one step (a row of the batch). */
typedef struct mstar_node_input {
    int64_t seq_len;                 /* input tokens this step; 0 for a padding row */
    const mstar_tensor_map *tensors; /* per-request tensors (may be NULL) */
} mstar_node_input;

/* A declared seq dim for one input key (G-11): staging narrows on it. */
typedef struct mstar_seq_dim {
    const char *key;
    int32_t dim;
} mstar_seq_dim;

/* Fill `out` with one template row of `len` tokens (a padding row's inputs): entries set borrowed
 * or owned (mstar_tensor_map_set_owned with `stream`, whose allocations then come from the caching
 * allocator). */
typedef mstar_status (*mstar_template_fn)(void *user, mstar_stream *stream, int64_t len,
                                          mstar_tensor_map *out);

/* The captured method: read `inputs` (the static buffers), enqueue on ctx->stream, allocate
 * temporaries and outputs with mstar_alloc(ctx->stream) and put outputs in `outputs` (owned
 * entries through mstar_tensor_map_set_owned). */
typedef mstar_status (*mstar_forward_fn)(void *self, mstar_step *step,
                                         const mstar_tensor_map *inputs, mstar_tensor_map *outputs);

typedef struct mstar_graph_config {
    mstar_graph_config_kind kind;
    const char *capture_graph_walk;
    const char *const *replay_graph_walks; /* NULL: just the capture walk */
    size_t n_replay_graph_walks;
    const char *cg_key_info; /* the config's additional_key_info; NULL: none */
    mstar_compile_mode compile_mode;
    const int64_t *capture_batch_sizes; /* NULL: 1, 2, 4, 8, 16, 32, 64 */
    size_t n_capture_batch_sizes;
    bool caps_eager_batch_size;           /* default true (mstar_graph_config_init) */
    int64_t plan_tokens_per_input_token;  /* the token multiplier, >= 1 */
    int64_t seq_len;                      /* BATCHED: tokens per row */
    const int64_t *capture_token_lengths; /* PACKED: total tokens per bucket */
    size_t n_capture_token_lengths;
    mstar_template_fn make_node_input;
    void *template_user;
    const mstar_seq_dim *seq_dims; /* declared seq dims per input key */
    size_t n_seq_dims;
    mstar_forward_fn forward; /* NULL: the submodule's forward (capture_forward_method) */
} mstar_graph_config;

#define MSTAR_DEFAULT_CAPTURE_BATCH_SIZES \
    {                                     \
        1, 2, 4, 8, 16, 32, 64            \
    }
#define MSTAR_NUM_WARMUP 2

/* Defaults: BATCHED, caps_eager_batch_size true, multiplier 1, compile NONE, default sizes. */
MSTAR_API void mstar_graph_config_init(mstar_graph_config *config);
/* The checks a runner applies to each config (design.md "Graph configs"): walk names, positive
 * unique sizes (stored sorted), a template, PACKED buckets with num_tokens == bs rejected (G-10),
 * multiplier >= 1, a known compile mode. MSTAR_EINVAL naming config_idx and the field. */
MSTAR_API mstar_status mstar_graph_config_validate(const mstar_graph_config *config,
                                                   uint32_t config_idx);

/* ---------------------------------------------------------------------------------------------
 * The submodule a runner drives
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_submodule_ops {
    /* Declare the step over `ids` (padded) and their inputs; *declared = false: it plans nothing.
     * Set the step's cg_key_info; the context is the runner's. */
    mstar_status (*declare_step)(void *self, const char *graph_walk, const int64_t *ids,
                                 const mstar_node_input *inputs, size_t n, mstar_step *step,
                                 bool *declared);
    /* The batched tensors the forward reads, as owned or borrowed
     * entries of `out`, allocated with mstar_alloc(ctx->stream). */
    mstar_status (*preprocess)(void *self, mstar_step *step, const mstar_node_input *inputs,
                               size_t n, mstar_tensor_map *out);
    mstar_forward_fn forward; /* forward_batched */
} mstar_submodule_ops;

/* ---------------------------------------------------------------------------------------------
 * The graph runner: a whole forward captured per bucket
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_graph_runner mstar_graph_runner;

typedef struct mstar_graph_runner_options {
    const char *submodule_name;
    const mstar_submodule_ops *submodule;
    void *submodule_self;
    const mstar_graph_config *configs; /* copied; position = config_idx */
    size_t n_configs;
    mstar_step_runner *step_runner; /* borrowed; its compute stream replays */
    mstar_graph_pool *pool;         /* the node's pool, borrowed */
    int32_t num_slots;              /* 0: mstar_step_runner_default_num_slots */
    mstar_dtype autocast_dtype;     /* MSTAR_DTYPE_INVALID: none */
} mstar_graph_runner_options;

MSTAR_API mstar_status mstar_graph_runner_create(const mstar_graph_runner_options *opts,
                                                 mstar_graph_runner **out);
MSTAR_API void mstar_graph_runner_destroy(mstar_graph_runner *runner);
MSTAR_API int32_t mstar_graph_runner_num_slots(const mstar_graph_runner *runner);
MSTAR_API mstar_stream *mstar_graph_runner_plan_stream(const mstar_graph_runner *runner);
MSTAR_API mstar_dummy_rows *mstar_graph_runner_dummy_rows(mstar_graph_runner *runner);

/* Every configured bucket, in capture order: descending (bs, num_tokens) (I-21). Borrowed. */
MSTAR_API const mstar_bucket_key *mstar_graph_runner_buckets(const mstar_graph_runner *runner,
                                                             size_t *n);
/* Claim this runner's capture jobs with the step runner; call on every runner of the device, then
 * mstar_step_runner_build_graph_buffers once. */
MSTAR_API mstar_status mstar_graph_runner_prepare_for_capture(mstar_graph_runner *runner,
                                                              const mstar_cg_slot_spec **specs,
                                                              size_t *n);

/* Warm every slot of `bucket` up (2 forwards, each after a reset and re-plan) without capturing;
 * *peak = the largest caching-allocator peak above the pre-warm baseline. A hook for sizing. */
MSTAR_API mstar_status mstar_graph_runner_warm_bucket(mstar_graph_runner *runner,
                                                      const mstar_bucket_key *bucket,
                                                      uint64_t *peak);
/* Capture one slot of `bucket` once and hand the graph to the caller instead of registering it
 * (sizing's throwaway capture; flags as mstar_capture_into_graph). */
MSTAR_API mstar_status mstar_graph_runner_capture_throwaway(mstar_graph_runner *runner,
                                                            const mstar_bucket_key *bucket,
                                                            unsigned flags, mstar_graph **out,
                                                            mstar_capture_stats *stats);
/* Capture the planned buckets (NULL: every bucket), each slot warmed first, largest first. A
 * bucket whose capture fails, or whose step a resource blocks, is dropped (all its slots) and
 * logged; the rest still capture. Fails only on errors that leave nothing usable. */
MSTAR_API mstar_status mstar_graph_runner_warmup_and_capture(mstar_graph_runner *runner,
                                                             const mstar_bucket_key *planned,
                                                             size_t n);
/* Buckets not captured: planned out, failed or blocked (borrowed). */
MSTAR_API const mstar_bucket_key *
mstar_graph_runner_dropped_buckets(const mstar_graph_runner *runner, size_t *n);
/* Forget a captured bucket (e.g. another rank dropped it, design.md "Rank agreement"): lookups then
 * miss it. */
MSTAR_API mstar_status mstar_graph_runner_drop_bucket(mstar_graph_runner *runner,
                                                      const mstar_bucket_key *bucket);

/* Lookups (design.md "Lookup"). num_tokens < 0: the inputs are not built yet (batched search). */
MSTAR_API bool mstar_graph_runner_select_bucket(const mstar_graph_runner *runner,
                                                const char *graph_walk, int64_t bs,
                                                int64_t num_tokens, const char *cg_key_info,
                                                mstar_bucket_key *out);
MSTAR_API bool mstar_graph_runner_select_batched_bucket(const mstar_graph_runner *runner,
                                                        const char *graph_walk, int64_t bs,
                                                        const char *cg_key_info,
                                                        mstar_bucket_key *out);
/* slot < 0 takes the next slot of the device's one lease counter; a caller that reserved one
 * (pre-plan) passes it back. false: no bucket (run eager). */
MSTAR_API bool mstar_graph_runner_lease_slot(mstar_graph_runner *runner, const char *graph_walk,
                                             int64_t bs, int32_t slot, int64_t num_tokens,
                                             const char *cg_key_info, mstar_slot_lease *out);
MSTAR_API bool mstar_graph_runner_can_run(const mstar_graph_runner *runner, const char *graph_walk,
                                          int64_t bs, int64_t num_tokens, const char *cg_key_info);
MSTAR_API bool mstar_graph_runner_captures_walk(const mstar_graph_runner *runner,
                                                const char *graph_walk);
MSTAR_API bool mstar_graph_runner_any_graphs(const mstar_graph_runner *runner);
/* Largest configured bs over configs replaying the walk that cap the eager batch; -1: no cap. */
MSTAR_API int64_t mstar_graph_runner_max_batch_size_for(const mstar_graph_runner *runner,
                                                        const char *graph_walk);
MSTAR_API bool mstar_graph_runner_is_packed(const mstar_graph_runner *runner,
                                            const mstar_slot_lease *lease);
/* The lease's config (NULL for an unknown lease); *config_idx may be NULL. */
MSTAR_API const mstar_graph_config *mstar_graph_runner_config_for(const mstar_graph_runner *runner,
                                                                  const mstar_slot_lease *lease,
                                                                  uint32_t *config_idx);

/* One captured graph and the buffers its replay reads and writes (a slot of a bucket). */
typedef struct mstar_graph_slot mstar_graph_slot;
MSTAR_API const mstar_graph_slot *mstar_graph_runner_slot_for(const mstar_graph_runner *runner,
                                                              const mstar_slot_lease *lease);
MSTAR_API const mstar_graph *mstar_graph_slot_graph(const mstar_graph_slot *slot);
MSTAR_API const mstar_tensor_map *mstar_graph_slot_static_inputs(const mstar_graph_slot *slot);
MSTAR_API const mstar_tensor_map *mstar_graph_slot_static_outputs(const mstar_graph_slot *slot);
MSTAR_API const int64_t *mstar_graph_slot_dummy_rids(const mstar_graph_slot *slot, size_t *n);

/* The step around a replay (design.md "Padding rows"). `out` has room for lease->bucket.bs
 * entries. */
MSTAR_API mstar_status mstar_graph_runner_pad_inputs(mstar_graph_runner *runner,
                                                     const mstar_slot_lease *lease,
                                                     const mstar_node_input *inputs, size_t n,
                                                     mstar_node_input *out);
MSTAR_API mstar_status mstar_graph_runner_step_ids(mstar_graph_runner *runner,
                                                   const mstar_slot_lease *lease,
                                                   const int64_t *real_ids, size_t n, int64_t *out);
MSTAR_API mstar_status mstar_graph_runner_step_metadata(mstar_graph_runner *runner,
                                                        const mstar_slot_lease *lease,
                                                        const mstar_forward_info *real, size_t n,
                                                        mstar_forward_info *out);
/* Template rows for a declare-only call, cached per bucket: read-only, shared by every caller
 * (G-15). Only for declare_step; never mutate them or preprocess them. */
MSTAR_API mstar_status mstar_graph_runner_declare_inputs_for(mstar_graph_runner *runner,
                                                             const mstar_slot_lease *lease,
                                                             const mstar_node_input **rows,
                                                             size_t *n);
/* Reset the padding rows [real_bs, bs) after a leased step, on success or failure. */
MSTAR_API mstar_status mstar_graph_runner_release(mstar_graph_runner *runner,
                                                  const mstar_slot_lease *lease, int64_t real_bs);

/*
 * Zero-copy staging (a C addition): the leased slot's static input `key` — the buffer its graph
 * reads — as a view narrowed to `len` on the key's seq dim (0 <= len <= the bucket's captured
 * length; a 0-dim input ignores len). A preprocess that writes the step's value into this view
 * (on the compute stream) and puts the view itself in `preprocessed` saves run_forward the copy:
 * staging finds the value already in place and enqueues nothing for that key. The buffer is
 * shared by every bucket and slot of the lease's config, as staging's copies are: what is written
 * holds until the next write or staging of the same key, so write it for the step about to be
 * replayed, after the previous replay was enqueued (stream order does the rest). Positions past
 * `len` keep their contents, as after a staging copy. MSTAR_ENOENT: the lease names no captured
 * bucket or slot, or the bucket captured no input `key`; MSTAR_ERANGE: len out of range.
 */
MSTAR_API mstar_status mstar_graph_runner_static_input(const mstar_graph_runner *runner,
                                                       const mstar_slot_lease *lease,
                                                       const char *key, int64_t len,
                                                       mstar_tensor *out);

/*
 * Stage `preprocessed` into the slot's static inputs (each narrowed on its recorded seq dim, on
 * the compute stream), make the compute stream wait for `plan_done` (may be NULL) on the device,
 * set `launch_started` (may be NULL) just before the launch, replay, and point *outputs at the
 * slot's static outputs (views; valid until the slot's next replay). A value that already is
 * the static buffer (mstar_graph_runner_static_input) is not copied. An unknown key is
 * MSTAR_EINVAL; a captured key missing from `preprocessed` keeps its last contents and is warned
 * about once per key (G-17). launch_started is set on every path, failures included (G-27).
 */
MSTAR_API mstar_status mstar_graph_runner_run_forward(
    mstar_graph_runner *runner, const mstar_slot_lease *lease, const mstar_tensor_map *preprocessed,
    mstar_event *plan_done, mstar_signal *launch_started, const mstar_tensor_map **outputs);

/*
 * Loaned outputs (a C addition): a replay writes its outputs into the slot's static buffers,
 * which the next replay overwrites, so a node that sends an output has its manager copy it when
 * storing, and staging copies it again into shared memory. A node that opts an output in here
 * gets it in memory lent by the caller's loaner instead (for a manager: an arena slot,
 * mstar_comm_output_loan), filled by one copy the runner enqueues on the compute stream after
 * the replay; storing that loan then copies nothing, and neither does staging.
 *
 * The loaner lends contiguous host memory of `dtype` and `shape` as *tensor and names it with
 * *id (never 0). MSTAR_ENOSPC from `loan` means no memory now: that output is not loaned and the
 * caller stores its static view as before (copied). `release` gives back a loan that will not be
 * stored. The runner knows nothing of what the memory is.
 */
typedef struct mstar_output_loaner {
    mstar_status (*loan)(void *user, mstar_dtype dtype, const int64_t *shape, int32_t ndim,
                         mstar_tensor *tensor, uint64_t *id);
    void (*release)(void *user, uint64_t id);
    void *user;
} mstar_output_loaner;

/* One output's loan: id 0 (and tensor.data NULL) when the loaner had no memory for it. */
typedef struct mstar_output_loan {
    mstar_tensor tensor; /* the loaned memory: the output's dtype and shape, contiguous */
    uint64_t id;         /* the loaner's id (for a manager: the mstar_loan_id to store) */
} mstar_output_loan;

/*
 * Call right after mstar_graph_runner_run_forward of `lease`, before the next replay is
 * enqueued: for each of the n static outputs `keys` (the node's opt-in, per output), take a loan
 * of its dtype and shape and enqueue on the compute stream the copy of the static buffer into
 * it (a device-to-host copy on a device backend, into the pinned arena slot); loans[i] is
 * keys[i]'s. The bytes are there once the compute stream has passed the copy: store a loan
 * (mstar_output.loan = id, tensor = the loan's) after waiting for the step, as for any output
 * computed on a stream, and give back one that is not stored only then too. The caller owns
 * every loan with an id: each is stored once or given back through the loaner's release.
 * MSTAR_ENOENT: the lease names no captured slot, or the slot has no output keys[i];
 * MSTAR_EINVAL: a key named twice, a NULL argument, or a static output that is not contiguous.
 * Those are checked before any loan is taken. Any other failure gives back every loan this call
 * took (after the stream passed the copies already enqueued) and returns with none.
 */
MSTAR_API mstar_status mstar_graph_runner_loan_outputs(mstar_graph_runner *runner,
                                                       const mstar_slot_lease *lease,
                                                       const char *const *keys, size_t n,
                                                       const mstar_output_loaner *loaner,
                                                       mstar_output_loan *loans);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_GRAPHS_H */
