/*
 * piecewise_capture.c — warming and capturing a piecewise region's shapes (design.md
 * "Piecewise regions"; the warm-up record sizing uses, design.md "Planning"), and the sizing hooks
 * built on them.
 *
 * One spec is one (shape, slot): ensure the slot's padding rows, make the shape's static inputs,
 * declare the region's step over the rows with the shape's lengths, check that no resource blocks
 * the capture, admit and plan; build the region's call once; run it eagerly MSTAR_NUM_WARMUP
 * times, each followed by a reset of the rows and a re-plan, so every warm-up and the capture see
 * the same state (G-24); then capture it with its outputs outside the node's pool
 * (mstar_capture_with_static_outputs, design.md "Pools"). The rows are reset, their storage freed,
 * on every exit path — the reference freed them only when the capture succeeded (G-30). Unlike the
 * whole-forward runner's, these captures get no lifetime hints (lifetimes.h): the region's own
 * outputs are freed inside the capture once copied out, so all it allocates in the pool is scratch.
 */
#include "graphs/piecewise.h"

#include "device/backend.h"
#include "step/step_runner.h"

#include <stdio.h>
#include <stdlib.h>

/* What one spec needs while it is warmed and captured (reference WarmedRegion). */
struct region_run {
    mstar_piecewise_runner *pw;
    struct bucket *shape;
    int32_t slot;
    mstar_piecewise_shape view;
    mstar_piecewise_call call;
    struct mstar_graph_slot *g; /* static inputs, and the graph once captured */
    mstar_tensor_map *warm;     /* the last warm-up's outputs: their shapes fix the capture's */
    mstar_event *replayed;      /* the slot's replay event, recorded after the region's work */
};

static mstar_status capture_region(mstar_stream *stream, void *p, mstar_tensor_map *outputs)
{
    struct region_run *rr = p;
    mstar_status st = rr->pw->config.capture_fn(rr->pw->config.user, &rr->call, outputs);
    /* Each replay marks the end of the region's work for a later pre-plan of the slot (G-4);
     * only the copies of its outputs out of the pool follow, and they read no plan buffer. */
    return st != MSTAR_OK ? st : mstar__event_record_in_capture(rr->replayed, stream);
}

static mstar_status make_static_inputs(struct region_run *rr)
{
    mstar_piecewise_runner *pw = rr->pw;
    mstar_tensor_map *in = rr->g->static_inputs;
    if (pw->config.make_static_inputs(pw->config.user, &rr->view, pw->stream, in) != MSTAR_OK)
        return mstar_error_wrap("make_static_inputs");
    for (size_t i = 0; i < mstar_tensor_map_count(in); i++) {
        /* A run zeroes each buffer's tail past the real rows: one contiguous run of bytes. */
        const mstar_tensor *t = mstar_tensor_map_at(in, i);
        if (!mstar_tensor_is_contiguous(t) || t->ndim == 0)
            return mstar_error_set(MSTAR_EINVAL,
                                   "static input '%s' must be contiguous with a leading row dim",
                                   mstar_tensor_map_name(in, i));
    }
    return MSTAR_OK;
}

/* Declare, check for blocking resources, admit and plan: the state a warm-up or capture reads. */
static mstar_status prepare(struct region_run *rr, bool first)
{
    mstar_piecewise_runner *pw = rr->pw;
    bool declared = false;
    mstar_status st = mstar__pw_declare(pw, rr->shape, rr->slot, rr->g->dummy_rids,
                                        rr->shape->row_lens, true, &declared);
    if (st == MSTAR_OK && first)
        st = mstar__spec_capturable(pw->sr, pw->step);
    if (st == MSTAR_OK && declared)
        st = mstar__admit_and_plan(pw->sr, pw->step);
    return st;
}

static void build_call(struct region_run *rr)
{
    mstar_piecewise_runner *pw = rr->pw;
    rr->call = (mstar_piecewise_call){
        .static_inputs = rr->g->static_inputs,
        .request_ids = rr->g->dummy_rids,
        .metadata = rr->g->dummy_metadata,
        .n_requests = rr->g->n_rows,
        .shape = &rr->view,
        .step = pw->step,
        .step_runner = pw->sr,
        .forward_kwargs = pw->config.forward_kwargs,
        .compile_mode = pw->config.compile_mode,
        .compute_dtype = pw->autocast,
        .stream = pw->stream,
    };
}

/* Warm-ups: each runs the region eagerly, then resets the rows and plans again. */
static mstar_status warm_up(struct region_run *rr)
{
    mstar_piecewise_runner *pw = rr->pw;
    mstar_status st = mstar_stream_synchronize(pw->stream);
    for (int w = 0; st == MSTAR_OK && w < MSTAR_NUM_WARMUP; w++) {
        mstar_tensor_map_destroy(
            rr->warm); /* outputs of a warm-up come from the caching allocator */
        rr->warm = NULL;
        st = mstar_tensor_map_create(&rr->warm);
        if (st == MSTAR_OK &&
            pw->config.capture_fn(pw->config.user, &rr->call, rr->warm) != MSTAR_OK)
            st = mstar_error_wrap("warm-up %d", w + 1);
        if (st == MSTAR_OK)
            st = mstar_dummy_rows_reset(pw->rows, rr->g->dummy_rids, rr->g->n_rows, false);
        if (st == MSTAR_OK)
            st = prepare(rr, false);
    }
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(pw->stream);
    return st;
}

/* Keep the names, dtypes and shapes of the last warm-up's outputs in the shape, for a capture
 * that runs no warm-up (lent sizing) but must size its static output buffers the same way. */
static mstar_status keep_layout(struct region_run *rr)
{
    mstar_tensor_map *layout = NULL;
    mstar_status st = mstar_tensor_map_create(&layout);
    for (size_t i = 0; st == MSTAR_OK && i < mstar_tensor_map_count(rr->warm); i++) {
        mstar_tensor t = *mstar_tensor_map_at(rr->warm, i);
        t.data = NULL; /* the warm-up's bytes are gone once it is destroyed */
        st = mstar_tensor_map_set(layout, mstar_tensor_map_name(rr->warm, i), &t);
    }
    if (st != MSTAR_OK) {
        mstar_tensor_map_destroy(layout);
        return st;
    }
    mstar_tensor_map_destroy(rr->shape->warm_layout);
    rr->shape->warm_layout = layout;
    rr->shape->warmed = true;
    return MSTAR_OK;
}

/* Warm one spec up (mstar__spec_fn) and, as the job asks, capture it. */
static mstar_status run_spec(void *runner, struct bucket *shape, int32_t slot,
                             const mstar__spec_job *job, struct mstar_graph_slot **slot_out)
{
    mstar_piecewise_runner *pw = runner;
    char key[80];
    snprintf(key, sizeof(key), "%lld_%lld_slot%d", (long long)shape->key.bs,
             (long long)shape->key.num_tokens, (int)slot);
    struct region_run rr = { pw,    shape,
                             slot,  { shape->key.bs, shape->row_lens, shape->key.num_tokens },
                             { 0 }, NULL,
                             NULL,  NULL };
    const int64_t *rows = NULL;
    mstar_status st = mstar__slot_new(&shape->key, 0, &rr.g);
    if (st == MSTAR_OK)
        st = mstar_dummy_rows_ensure(pw->rows, key, shape->key.bs, &rows);
    if (st == MSTAR_OK) {
        rr.g->dummy_rids = rows;
        build_call(&rr);
        st = make_static_inputs(&rr);
    }
    /* The static buffers stay for the graph's life: the peak is what the eager step adds. */
    mstar_backend *backend = mstar_stream_backend(pw->stream);
    uint64_t base;
    mstar__spec_peak_begin(backend, &base);
    if (st == MSTAR_OK)
        st = prepare(&rr, true);
    if (st == MSTAR_OK && !job->no_warmup)
        st = warm_up(&rr);
    if (st == MSTAR_OK && !job->no_warmup)
        st = keep_layout(&rr);
    mstar__spec_peak_end(backend, base, job);
    if (st == MSTAR_OK && job->capture)
        st = mstar__step_runner_replay_event(pw->sr, slot, &rr.replayed);
    const mstar_tensor_map *layout = job->no_warmup ? shape->warm_layout : rr.warm;
    if (st == MSTAR_OK && job->capture)
        st = mstar_capture_with_static_outputs(pw->stream, pw->pool, capture_region, &rr, layout,
                                               job->flags, &rr.g->graph, rr.g->static_outputs,
                                               job->stats);
    /* Every exit path: the rows hold nothing once this spec is done (G-30). */
    mstar_status reset = rows == NULL
                             ? MSTAR_OK
                             : mstar_dummy_rows_reset(pw->rows, rows, (size_t)shape->key.bs, true);
    if (st == MSTAR_OK)
        st = reset;
    mstar_tensor_map_destroy(rr.warm);
    mstar_step_reset(pw->step);
    return mstar__spec_finish(&pw->set, shape, slot, job, st, rr.g, slot_out);
}

mstar_status mstar_piecewise_runner_warm_bucket(mstar_piecewise_runner *pw,
                                                const mstar_bucket_key *key, uint64_t *peak)
{
    return mstar__buckets_warm(&pw->set, run_spec, pw, key, peak);
}

mstar_status mstar_piecewise_runner_capture_throwaway(mstar_piecewise_runner *pw,
                                                      const mstar_bucket_key *key, unsigned flags,
                                                      mstar_graph **out, mstar_capture_stats *stats)
{
    return mstar__buckets_throwaway(&pw->set, run_spec, pw, key, flags, out, stats);
}

mstar_status mstar_piecewise_runner_warmup_and_capture(mstar_piecewise_runner *pw,
                                                       const mstar_bucket_key *planned, size_t n)
{
    return mstar__buckets_capture(&pw->set, run_spec, pw, pw->sr, planned, n);
}
