/*
 * plan_store.h — the static plan buffers of one resource, and its pending pre-plans.
 *
 * A resource writes each step's addressing into int32 buffers that the forward reads on the
 * device: one block per (slot, label) for captured graphs, whose addresses the graphs record, and
 * one growable eager block per label. Each block has a device copy (what kernels read) and a
 * pinned host mirror (what a plan writes), uploaded with one asynchronous copy on the plan's
 * stream; an event recorded after that copy tells the next plan of the block when the mirror may
 * be written again, so a pre-plan in flight on the plan stream is never overwritten under it. On
 * the host backend both sides are host memory and the copy runs at once.
 *
 * The store also keeps, per slot, the segments of a pending pre-plan, so the step's own plan can
 * tell whether to promote it or write afresh. What the ints of a block mean is the resource's
 * business (kv_cache.c, positions.c).
 */
#ifndef MSTAR_RESOURCES_PLAN_STORE_H
#define MSTAR_RESOURCES_PLAN_STORE_H

#include "core/vec.h"
#include "mstar/device.h"
#include "mstar/resources.h"

typedef struct mstar__plan_block {
    int32_t *host;       /* pinned mirror */
    int32_t *dev;        /* device copy */
    mstar_event *copied; /* recorded after the last upload */
} mstar__plan_block;

typedef struct mstar__plan_store {
    mstar_backend *backend;
    int32_t num_labels;
    int32_t num_slots;              /* slots built so far */
    size_t slot_ints;               /* int32s in each slot block */
    mstar__plan_block *slot_blocks; /* [num_slots * num_labels] */
    mstar__plan_block eager_blocks[MSTAR_KV_MAX_LABELS];
    size_t eager_ints;
    mstar__vec *pending;    /* [num_slots] of mstar_step_segment */
    int64_t *pending_shape; /* [num_slots] the bucket a pending pre-plan was written for */
    bool *has_pending;      /* [num_slots] */
} mstar__plan_store;

void mstar__plan_store_init(mstar__plan_store *ps, mstar_backend *backend, int32_t num_labels);
/* Waits for uploads in flight, then frees every block. */
void mstar__plan_store_free(mstar__plan_store *ps);

/* Make num_slots slot blocks of `ints` int32s each (per label), zeroed. Nothing moves unless one
 * of the two grows; then every slot block is reallocated and pending pre-plans are forgotten. */
mstar_status mstar__plan_store_build(mstar__plan_store *ps, int32_t num_slots, size_t ints);

/* Make the eager blocks hold at least `ints` int32s. */
mstar_status mstar__plan_store_grow_eager(mstar__plan_store *ps, size_t ints);

/* The device copy of (slot, label); slot MSTAR_PLAN_EAGER is the eager block. NULL when not
 * built. */
int32_t *mstar__plan_store_device(const mstar__plan_store *ps, int32_t slot, int32_t label);

/* The host mirror of a built (slot, label), once its last upload has been read: write the plan
 * there, then upload it. NULL (with the error set) if waiting for the upload failed. */
int32_t *mstar__plan_store_write_begin(mstar__plan_store *ps, int32_t slot, int32_t label);
/* Copy the mirror of (slot, label) to its device copy on `stream`. */
mstar_status mstar__plan_store_upload(mstar__plan_store *ps, int32_t slot, int32_t label,
                                      mstar_stream *stream);

/* The arguments every resource's plan call shares: MSTAR_ERANGE unless slot is MSTAR_PLAN_EAGER
 * or a built slot; MSTAR_EINVAL for a pre-plan of the eager slot (a pre-plan needs a lease) or a
 * NULL stream. The message names `what`. */
mstar_status mstar__plan_store_check_plan(const mstar__plan_store *ps, int32_t slot, bool preplan,
                                          const mstar_stream *stream, const char *what);

/* Whether slot's pending pre-plan covers exactly these segments for the same bucket `shape` (the
 * resource's encoding of the bucket's size); if so it is promoted (the pending record is
 * dropped: the buffers already hold the plan). */
bool mstar__plan_store_promote(mstar__plan_store *ps, int32_t slot, const mstar_resource_step *step,
                               int64_t shape);

/* Record that slot's buffers were just written for `step` on bucket `shape`: a pre-plan becomes
 * slot's pending one; any other write drops whatever was pending (it was overwritten, so it must
 * never promote). No-op for the eager state. */
mstar_status mstar__plan_store_written(mstar__plan_store *ps, int32_t slot,
                                       const mstar_resource_step *step, int64_t shape,
                                       bool preplan);

/* Forget slot's pending pre-plan. Returns its segments (count in *n; NULL if none), valid until
 * the next call on the store. */
const mstar_step_segment *mstar__plan_store_take_pending(mstar__plan_store *ps, int32_t slot,
                                                         size_t *n);

#endif
