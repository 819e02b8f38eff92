/*
 * buckets.h — what the whole-forward and the piecewise runner share about their captures: every
 * configured bucket in capture order, each with one graph per slot; claims; lookups by key;
 * drops; and the driver that warms and captures them (design.md "Buckets", "Startup", and
 * "Capture order and interning"). A runner supplies how one (bucket, slot) is warmed and
 * captured.
 */
#ifndef MSTAR_GRAPHS_BUCKETS_H
#define MSTAR_GRAPHS_BUCKETS_H

#include "mstar/graphs.h"

#include "core/vec.h"
#include "device/lifetimes.h"

/* One captured graph and the buffers its replay reads and writes (reference AcceleratorGraphSlot,
 * PiecewiseGraphData). */
struct mstar_graph_slot {
    mstar_graph *graph;
    mstar_tensor_map *static_inputs;  /* whole-forward: views of interned buffers */
    mstar_tensor_map *static_outputs; /* views: of the graph's pool blocks, or (piecewise) of the
                                         output buffers the graph owns outside the pool */
    mstar__vec seq_dims;              /* int32_t per static input, same order (whole-forward) */
    mstar__vec copy_nodes;     /* uint32_t per static input, same order: its copy node in the graph
                                  (device/backend.h), UINT32_MAX for none; empty on the host */
    const int64_t *dummy_rids; /* bs handles, owned by the dummy-row pool */
    size_t n_rows;
    mstar_forward_info *dummy_metadata;
    uint32_t config_idx;
};

/* An empty slot for `key`'s bs rows: maps for static inputs and outputs, the padding rows'
 * stand-in metadata (dummy_rids and the graph are the caller's to set). */
mstar_status mstar__slot_new(const mstar_bucket_key *key, uint32_t config_idx,
                             struct mstar_graph_slot **out);
void mstar__slot_free(struct mstar_graph_slot *s);

/* One captured shape (reference AcceleratorGraphBucket; a piecewise shape). */
struct bucket {
    mstar_bucket_key key;
    uint32_t config_idx;
    bool captured;
    struct mstar_graph_slot **slots; /* num_slots, NULL until captured */
    int64_t *row_lens;               /* input tokens of each of the bs rows at capture */
    mstar_node_input *declare_rows;  /* the whole-forward runner's declare_inputs_for cache */
    /* What the bucket's last warm-ups taught, for a capture that runs none (lent sizing, design.md
     * "Planning"): which allocations of the whole forward outlived it (lifetimes.h), and the names,
     * dtypes and shapes of a piecewise region's outputs (no data). `warmed` once a warm-up ran. */
    bool warmed;
    mstar__lifetimes hints;
    mstar_tensor_map *warm_layout;
};

typedef struct mstar__buckets {
    const char *who; /* names the runner in messages; the runner's string */
    int32_t num_slots;
    mstar__vec all;     /* struct bucket *, capture order once ordered */
    mstar__vec keys;    /* mstar_bucket_key of each, the same order */
    mstar__vec dropped; /* mstar_bucket_key: planned out, failed, blocked or dropped */
    mstar__vec specs;   /* mstar_cg_slot_spec: the last claim */
} mstar__buckets;

static inline struct bucket *mstar__buckets_at(const mstar__buckets *set, size_t i)
{
    return *(struct bucket **)mstar__vec_at(&set->all, i);
}

void mstar__buckets_init(mstar__buckets *set, const char *who, int32_t num_slots);
/* Frees every bucket and its graphs. */
void mstar__buckets_free(mstar__buckets *set);
/*
 * Add a bucket. Its rows carry `seq_len` input tokens each (> 0), or, with seq_len 0, `tokens`
 * input tokens spread over bs rows: tokens / bs each, the first also tokens % bs (reference
 * distribute_tokens). A key that is already there is MSTAR_EINVAL naming both configs.
 */
mstar_status mstar__buckets_add(mstar__buckets *set, const mstar_bucket_key *key,
                                uint32_t config_idx, int64_t seq_len, int64_t tokens);
/* Capture order: descending (bs, num_tokens), then config order (I-21). Call once,
 * after adding. */
mstar_status mstar__buckets_order(mstar__buckets *set);
/* The bucket registered under `key` (captured or not), or NULL. */
struct bucket *mstar__buckets_find(const mstar__buckets *set, const mstar_bucket_key *key);
bool mstar__buckets_any_captured(const mstar__buckets *set);
/* Free a bucket's graphs; it is no longer captured. */
void mstar__bucket_uncapture(const mstar__buckets *set, struct bucket *b);
/* Forget a captured bucket and list it as dropped (MSTAR_ENOENT for an unknown key). */
mstar_status mstar__buckets_drop(mstar__buckets *set, const mstar_bucket_key *key);
/* Claim every (bucket, slot) with the step runner (reference prepare_for_capture). */
mstar_status mstar__buckets_claim(mstar__buckets *set, mstar_step_runner *sr,
                                  const mstar_cg_slot_spec **specs, size_t *n);

/* A flag for mstar__buckets_throwaway, above mstar_capture_into_graph's: capture only, with no
 * warm-up (no forward), from what the bucket's earlier warm-ups recorded. */
#define MSTAR__CAPTURE_NO_WARMUP (1u << 30)

/* What one warm-up of a (bucket, slot) is asked for. */
typedef struct mstar__spec_job {
    bool capture;               /* capture it after the warm-ups */
    bool no_warmup;             /* capture only: the bucket was warmed before (lent sizing) */
    unsigned flags;             /* as mstar_capture_into_graph's */
    mstar_graph **throwaway;    /* non-NULL: the caller takes the graph (sizing) */
    mstar_capture_stats *stats; /* may be NULL */
    uint64_t *peak;             /* may be NULL: the warm-ups' allocator peak above baseline */
} mstar__spec_job;

/* Warm (and capture) one (bucket, slot) of `runner`; a kept capture lands in *slot_out. */
typedef mstar_status (*mstar__spec_fn)(void *runner, struct bucket *b, int32_t slot,
                                       const mstar__spec_job *job,
                                       struct mstar_graph_slot **slot_out);

/* Before a spec's warm-ups: note the caching allocator's use and reset its peak. */
void mstar__spec_peak_begin(mstar_backend *backend, uint64_t *base);
/* After them: job->peak (when set) = the allocator's peak above `base`. */
void mstar__spec_peak_end(mstar_backend *backend, uint64_t base, const mstar__spec_job *job);
/* MSTAR_ENOTSUP naming the resources of `step` that cannot capture it (design.md "Capture"), else
 * OK. */
mstar_status mstar__spec_capturable(const mstar_step_runner *sr, const mstar_step *step);
/*
 * The end of a spec, `st` being how it went: a kept capture hands `s` to *slot_out; a throwaway
 * hands its graph to *job->throwaway and frees `s`; anything else frees `s`. A failure is wrapped
 * naming the runner, the bucket and the slot. Returns `st`.
 */
mstar_status mstar__spec_finish(const mstar__buckets *set, const struct bucket *b, int32_t slot,
                                const mstar__spec_job *job, mstar_status st,
                                struct mstar_graph_slot *s, struct mstar_graph_slot **slot_out);

/* Warm every slot of a bucket without capturing; *peak = the largest peak of its slots. */
mstar_status mstar__buckets_warm(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                 const mstar_bucket_key *key, uint64_t *peak);
/* Capture slot 0 of a bucket once and hand the graph to the caller. With
 * MSTAR__CAPTURE_NO_WARMUP in flags no warm-up runs (MSTAR_ESTATE if the bucket never warmed). */
mstar_status mstar__buckets_throwaway(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                      const mstar_bucket_key *key, unsigned flags,
                                      mstar_graph **out, mstar_capture_stats *stats);
/* Capture the planned buckets (NULL: all), largest first, every slot. A bucket that fails on
 * any slot is dropped whole and logged; the rest still capture. MSTAR_ESTATE before the step
 * runner's graph buffers are built. */
mstar_status mstar__buckets_capture(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                    mstar_step_runner *sr, const mstar_bucket_key *planned,
                                    size_t n);

#endif
