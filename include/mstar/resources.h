/*
 * mstar/resources.h — the two step resources the reference model uses: a paged KV cache
 * and positions.
 *
 * A step resource holds per-request state that a model's forward reads and extends: the KV
 * cache keeps each request's cache streams (one per label, e.g. cond and uncond) as lists of
 * fixed-size pages; positions keep each request's next rotary position. Every step goes through
 * the same cycle:
 *
 *   admit   reserve what the step will write (pages); fails with what was short, reserving nothing
 *   plan    write the step's addressing into static plan buffers: per (slot, label) for a captured
 *           graph, which reads them at fixed addresses; the eager state otherwise
 *   forward the model runs (or a captured graph replays) against those buffers
 *   commit  advance the streams of real requests by what the step added
 *
 * Rows of a step are request handles. A real request's handle is >= 0; a padding row's handle
 * is negative. Padding rows never own storage: whatever their span, admit reserves nothing for
 * them, and plan points every token they write at the sink page (page 0, MSTAR_KV_SINK_PAGE)
 * with an attention length of 0, so their output is well-formed, discarded, and no live page is
 * ever touched. Planned buffers are also filled past the step's real rows and tokens up to the
 * captured bucket's size: sink page and offset 0 for tokens, all-sink page tables for rows.
 *
 * Pre-plan (the double-buffer payoff): a plan with `preplan` set writes a slot's buffers ahead of
 * the step and remembers the step's segments as pending; the step's own plan then promotes it
 * (no second write) when its segments match, and rewrites otherwise. mstar_kv_cache_clear_preplan
 * drops a pending plan and hands back the pages its admit took, so a dropped speculation leaves
 * the free pages exactly as they were.
 *
 * Not thread-safe: one thread (the worker's) drives a resource, as the step runner does.
 */
#ifndef MSTAR_RESOURCES_H
#define MSTAR_RESOURCES_H

#include "mstar/core.h"
#include "mstar/device.h"
#include "mstar/step.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The page that padding rows and padded tails write into. Reserved when the cache is built: it
 * is the first page the allocator hands out, and it never holds a request's tokens. */
#define MSTAR_KV_SINK_PAGE 0

/* The slot number of the eager plan state (steps that run without a captured graph). */
#define MSTAR_PLAN_EAGER (-1)

/* Labels per request stream set: cond/uncond and a few more. */
#define MSTAR_KV_MAX_LABELS 8

/* A step as a resource sees it: its segments (mstar/step.h: one request's addition to one
 * labelled stream) in row order, and whether commit advances the streams (false for
 * frozen-prefix loops that rewrite the same positions every step). For each label, the segments
 * of that label are that label's rows, in order; their tokens are packed row after row. A
 * segment's span is 0 .. INT32_MAX; span 0 reads the stream without extending it. */
typedef struct mstar_resource_step {
    const mstar_step_segment *segments;
    size_t num_segments;
    bool commit;
} mstar_resource_step;

/* What a step carries for either resource under its key
 * (mstar_step_set_resource(step, key, &payload, sizeof payload)): the resource takes part in the
 * step, and `commit` says whether commit advances its streams. */
typedef struct mstar_resource_payload {
    bool commit;
} mstar_resource_payload;

/* ---------------------------------------------------------------------------------------------
 * Paged KV cache
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_kv_cache mstar_kv_cache;

typedef struct mstar_kv_cache_config {
    int32_t num_pages;   /* pages in the pool, the sink page included: >= 2 */
    int32_t page_size;   /* tokens per page: >= 1 */
    int32_t num_labels;  /* cache streams per request: 1 .. MSTAR_KV_MAX_LABELS */
    int32_t max_seq_len; /* most tokens one stream may hold: >= 1; sizes each page-table row */
} mstar_kv_cache_config;

/* The addressing a forward reads for one label, in int32 arrays. `rows`, `tokens` and
 * `pages_per_row` are the capacities; a plan fills the leading bucket-sized part.
 *   page_table[r * pages_per_row + i]  row r's i-th page (sink beyond its pages)
 *   token_to_page[t], token_to_cache[t] where token t's k and v go: page, offset in the page
 *   token_row[t]                        the row token t belongs to
 *   token_kv_len[t]                     how many positions of its row token t attends to
 *   row_last_token[r]                   the token whose output is row r's (0 for an empty row) */
typedef struct mstar_kv_plan {
    int32_t *page_table;
    int32_t *token_to_page;
    int32_t *token_to_cache;
    int32_t *token_row;
    int32_t *token_kv_len;
    int32_t *row_last_token;
    int32_t rows;
    int32_t tokens;
    int32_t pages_per_row;
} mstar_kv_plan;

/* Build the page pool; the sink page is taken from it first. Plan buffers will live on `backend`'s
 * device (with pinned host mirrors). MSTAR_EINVAL names a bad field. */
MSTAR_API mstar_status mstar_kv_cache_create(const mstar_kv_cache_config *config,
                                             mstar_backend *backend, mstar_kv_cache **out);
/* Free everything (before the backend is destroyed); NULL is a no-op. */
MSTAR_API void mstar_kv_cache_destroy(mstar_kv_cache *kv);

/* Size the static plan buffers of `num_slots` slots for every label: at most `max_rows` rows and
 * `max_tokens` tokens per step. Device memory, zeroed. Repeated calls only grow; a call that does
 * not grow keeps every buffer where it is, so graphs captured against them stay valid. */
MSTAR_API mstar_status mstar_kv_cache_build_plans(mstar_kv_cache *kv, int32_t num_slots,
                                                  int32_t max_rows, int32_t max_tokens);

/* Open empty streams for a request. A padding row (negative handle) owns no state: a no-op.
 * MSTAR_EEXIST if the request is already open. */
MSTAR_API mstar_status mstar_kv_cache_ingest(mstar_kv_cache *kv, int64_t request);
/* Back to empty streams (length 0); `free_pages` also hands its pages back to the pool, else
 * they stay reserved for the request's next tokens. No-op for a padding row; MSTAR_ENOENT for an
 * unknown request. */
MSTAR_API mstar_status mstar_kv_cache_reset(mstar_kv_cache *kv, int64_t request, bool free_pages);
/* Free a request's pages and forget it. No-op for a padding row; MSTAR_ENOENT if unknown. */
MSTAR_API mstar_status mstar_kv_cache_remove(mstar_kv_cache *kv, int64_t request);

/* Reserve the pages each real segment needs to hold length + span tokens. Idempotent: pages a
 * stream already holds count. On a shortage nothing is reserved, *result says what was short
 * (ok false, pages_short for the whole step, the first request and label not served, a reason)
 * and the call returns MSTAR_ENOSPC. MSTAR_EINVAL for a bad segment (label, span, a (request,
 * label) given twice), MSTAR_ENOENT for a request never ingested, MSTAR_ERANGE for a stream that
 * would pass max_seq_len. */
MSTAR_API mstar_status mstar_kv_cache_admit(mstar_kv_cache *kv, const mstar_resource_step *step,
                                            mstar_step_admit_result *result);

/* Plan `step` into `slot`'s buffers (MSTAR_PLAN_EAGER: the eager state, which grows to fit) for
 * every label the step names, filled up to `bucket_rows` rows and `bucket_tokens` tokens per
 * label: written on the host, then copied to the device on `stream` (the plan stream for a
 * pre-plan, the compute stream otherwise), so work enqueued on `stream` afterwards reads it. A
 * plan first waits (on the host) until the previous upload of the same buffers has been read.
 * `preplan` marks the plan pending for slot; a later plan of the same segments promotes it
 * without writing. MSTAR_ESTATE if a real segment was not admitted, MSTAR_ERANGE if the step
 * does not fit the bucket or the bucket does not fit the built buffers. */
MSTAR_API mstar_status mstar_kv_cache_plan(mstar_kv_cache *kv, int32_t slot,
                                           const mstar_resource_step *step, int32_t bucket_rows,
                                           int32_t bucket_tokens, bool preplan,
                                           mstar_stream *stream);

/* Drop `slot`'s pending pre-plan, if any, and hand back the pages its admit reserved beyond what
 * each stream's committed length needs. */
MSTAR_API void mstar_kv_cache_clear_preplan(mstar_kv_cache *kv, int32_t slot);

/* Advance each real segment's stream by its span (if step->commit). Padding rows: nothing. */
MSTAR_API mstar_status mstar_kv_cache_commit(mstar_kv_cache *kv, const mstar_resource_step *step);

/* The plan buffers of (slot, label) in device memory, MSTAR_PLAN_EAGER for the eager state.
 * MSTAR_ESTATE before they were built. The pointers stay valid until a call that grows them. */
MSTAR_API mstar_status mstar_kv_cache_plan_buffers(const mstar_kv_cache *kv, int32_t slot,
                                                   int32_t label, mstar_kv_plan *out);

/* Register the cache with a step runner under `key` (mstar_step_runner_add_resource; no
 * dependencies; it pre-plans). Through the runner, a step's segments and payload drive admit,
 * plan, commit and pre-plan exactly as the calls above do: the slot and bucket come from the
 * step's lease (a capture's or a replay's), the eager state otherwise; an admit shortage is an
 * ok = false result, not an error; build_graph_buffers sizes the slots, rows and tokens from the
 * capture jobs (page tables keep the cache's own max_seq_len). Once per cache. */
MSTAR_API mstar_status mstar_kv_cache_register(mstar_kv_cache *kv, mstar_step_runner *step_runner,
                                               const char *key);

/* Pages in the pool that nobody holds. */
MSTAR_API int32_t mstar_kv_cache_free_pages(const mstar_kv_cache *kv);

typedef struct mstar_rank_group mstar_rank_group; /* mstar/planner.h */
/* The TP group whose ranks hold this cache's twins (NULL, the default: this rank alone). Kept,
 * not owned: it must outlive the cache's last validation. */
MSTAR_API void mstar_kv_cache_set_tp_group(mstar_kv_cache *kv, mstar_rank_group *group);
/* The post-warm-up TP-symmetry check, which a registered cache also runs from
 * mstar_step_runner_post_warmup_validate: one agreement across the TP group (collective: every
 * rank calls it); MSTAR_ESTATE on every rank when their free page counts differ, naming the
 * fewest and the most. With no group it checks nothing. */
MSTAR_API mstar_status mstar_kv_cache_post_warmup_validate(mstar_kv_cache *kv);
/* The configuration the cache was built with. */
MSTAR_API const mstar_kv_cache_config *mstar_kv_cache_config_of(const mstar_kv_cache *kv);
/* A request's stream for `label`: its committed length and the pages it holds (valid until the
 * next call that changes them). MSTAR_ENOENT for an unknown request. */
MSTAR_API mstar_status mstar_kv_cache_stream(const mstar_kv_cache *kv, int64_t request,
                                             int32_t label, int32_t *length, const int32_t **pages,
                                             int32_t *num_pages);

/* ---------------------------------------------------------------------------------------------
 * Positions
 *
 * Each real request has one position counter, shared by all of its labels. A step's tokens get
 * positions counter, counter+1, ... row by row (a request's cond and uncond rows get the same
 * ones); padding rows and padded tails get 0. Commit advances each request once, by its span,
 * however many labels it has rows for: a loop over labels would advance it twice.
 * ------------------------------------------------------------------------------------------- */

typedef struct mstar_positions mstar_positions;

/* Position buffers live on `backend`'s device, as the KV cache's plans do. */
MSTAR_API mstar_status mstar_positions_create(mstar_backend *backend, mstar_positions **out);
/* Free everything (before the backend is destroyed); NULL is a no-op. */
MSTAR_API void mstar_positions_destroy(mstar_positions *pos);

/* As the KV cache's: only grows; a call that does not grow moves nothing. */
MSTAR_API mstar_status mstar_positions_build_plans(mstar_positions *pos, int32_t num_slots,
                                                   int32_t max_tokens);
/* Start a request at position 0. No-op for a padding row; MSTAR_EEXIST if already open. */
MSTAR_API mstar_status mstar_positions_ingest(mstar_positions *pos, int64_t request);
/* Back to position 0. No-op for a padding row; MSTAR_ENOENT for an unknown request. */
MSTAR_API mstar_status mstar_positions_reset(mstar_positions *pos, int64_t request);
/* Forget a request. No-op for a padding row; MSTAR_ENOENT for an unknown request. */
MSTAR_API mstar_status mstar_positions_remove(mstar_positions *pos, int64_t request);
/* Write each token's position into slot's buffer, 0 up to bucket_tokens, uploaded on `stream` as
 * the KV cache's plan is. MSTAR_EINVAL if one request's rows disagree on their span;
 * MSTAR_ENOENT for a request never ingested. */
MSTAR_API mstar_status mstar_positions_plan(mstar_positions *pos, int32_t slot,
                                            const mstar_resource_step *step, int32_t bucket_tokens,
                                            bool preplan, mstar_stream *stream);
/* Drop `slot`'s pending pre-plan, if any (positions reserve nothing to hand back). */
MSTAR_API void mstar_positions_clear_preplan(mstar_positions *pos, int32_t slot);
/* Advance each real request once by its span (if step->commit), with the checks of plan. */
MSTAR_API mstar_status mstar_positions_commit(mstar_positions *pos,
                                              const mstar_resource_step *step);
/* The position buffer of `slot` ([capacity] int32, device memory) and its capacity. */
MSTAR_API mstar_status mstar_positions_plan_buffer(const mstar_positions *pos, int32_t slot,
                                                   int32_t **ids, int32_t *capacity);
/* Register with a step runner under `key`, as mstar_kv_cache_register does. */
MSTAR_API mstar_status mstar_positions_register(mstar_positions *pos,
                                                mstar_step_runner *step_runner, const char *key);
/* A request's next position. MSTAR_ENOENT if unknown. */
MSTAR_API mstar_status mstar_positions_get(const mstar_positions *pos, int64_t request,
                                           int64_t *position);

#ifdef __cplusplus
}
#endif

#endif /* MSTAR_RESOURCES_H */
