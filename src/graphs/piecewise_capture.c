/*
 * piecewise_capture.c — warming and capturing a piecewise region's shapes (graph-runner-spec §6
 * "Capture", §4.1's WarmedRegion), and the sizing hooks built on them.
 *
 * One spec is one (shape, slot): ensure the slot's padding rows, make the shape's static inputs,
 * declare the region's step over the rows with the shape's lengths, check that no resource blocks
 * the capture, admit and plan; build the region's call once; run it eagerly MSTAR_NUM_WARMUP
 * times, each followed by a reset of the rows and a re-plan, so every warm-up and the capture see
 * the same state (§8.24); then capture it with its outputs outside the node's pool
 * (mstar_capture_with_static_outputs, §3.4). The rows are reset, their storage freed, on every
 * exit path — the reference freed them only when the capture succeeded (§8.30).
 */
#include "graphs/piecewise.h"

#include "graphs/step_runner.h"

#include <stdio.h>
#include <stdlib.h>

/* What one spec needs while it is warmed and captured (reference WarmedRegion). */
struct region_run {
    mstar_piecewise_runner *pw;
    struct pw_shape *shape;
    int32_t slot;
    mstar_piecewise_shape view;
    mstar_piecewise_call call;
    struct mstar_graph_slot *g; /* static inputs, and the graph once captured */
    mstar_tensor_map *warm;     /* the last warm-up's outputs: their shapes fix the capture's */
};

static mstar_status capture_region(mstar_stream *stream, void *p, mstar_tensor_map *outputs)
{
    struct region_run *rr = p;
    (void)stream; /* rr->call.stream is this stream */
    return rr->pw->config.capture_fn(rr->pw->config.user, &rr->call, outputs);
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
                                        rr->shape->seq_lens, true, &declared);
    if (st == MSTAR_OK && first) {
        const char *blocked[8];
        size_t nb = mstar_blocked_capture_resources(pw->sr, pw->step, blocked, 8);
        if (nb != 0)
            st = mstar_error_set(MSTAR_ENOTSUP, "resource '%s'%s cannot capture this step",
                                 blocked[0], nb > 1 ? " and others" : "");
    }
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

/*
 * Warm one spec up and, with `capture`, capture it. On success with capture, *out_slot is the
 * captured slot or, with `out_graph`, the caller takes the graph. *peak: the caching allocator's
 * peak above the pre-warm baseline.
 */
static mstar_status run_spec(mstar_piecewise_runner *pw, struct pw_shape *shape, int32_t slot,
                             bool capture, unsigned flags, struct mstar_graph_slot **out_slot,
                             mstar_graph **out_graph, mstar_capture_stats *stats, uint64_t *peak)
{
    char key[80];
    snprintf(key, sizeof(key), "%lld_%lld_slot%d", (long long)shape->key.bs,
             (long long)shape->key.num_tokens, (int)slot);
    struct region_run rr = { pw,    shape,
                             slot,  { shape->key.bs, shape->seq_lens, shape->key.num_tokens },
                             { 0 }, NULL,
                             NULL };
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
    mstar_backend *b = mstar_stream_backend(pw->stream);
    mstar_alloc_stats base;
    mstar_caching_stats(b, &base);
    mstar_caching_reset_peak(b);
    if (st == MSTAR_OK)
        st = prepare(&rr, true);
    if (st == MSTAR_OK)
        st = warm_up(&rr);
    if (peak != NULL) {
        mstar_alloc_stats now;
        mstar_caching_stats(b, &now);
        *peak = now.peak > base.allocated ? now.peak - base.allocated : 0;
    }
    if (st == MSTAR_OK && capture)
        st = mstar_capture_with_static_outputs(pw->stream, pw->pool, capture_region, &rr, rr.warm,
                                               flags, &rr.g->graph, rr.g->static_outputs, stats);
    /* Every exit path: the rows hold nothing once this spec is done (§8.30). */
    mstar_status reset = rows == NULL
                             ? MSTAR_OK
                             : mstar_dummy_rows_reset(pw->rows, rows, (size_t)shape->key.bs, true);
    if (st == MSTAR_OK)
        st = reset;
    mstar_tensor_map_destroy(rr.warm);
    mstar_step_reset(pw->step);
    if (st == MSTAR_OK && capture && out_graph != NULL) {
        *out_graph = rr.g->graph;
        rr.g->graph = NULL;
        mstar__slot_free(rr.g);
    } else if (st == MSTAR_OK && capture) {
        *out_slot = rr.g;
    } else {
        mstar__slot_free(rr.g);
    }
    if (st != MSTAR_OK) {
        char name[MSTAR_BUCKET_NAME_MAX];
        mstar_error_wrap("%s: %s slot %d", pw->who,
                         mstar_bucket_key_format(&shape->key, name, sizeof(name)), (int)slot);
    }
    return st;
}

static mstar_status find_or_fail(mstar_piecewise_runner *pw, const mstar_bucket_key *key,
                                 struct pw_shape **out)
{
    *out = mstar__pw_find(pw, key);
    if (*out == NULL)
        return mstar_error_set(MSTAR_ENOENT, "%s: no such shape", pw->who);
    return MSTAR_OK;
}

mstar_status mstar_piecewise_runner_warm_bucket(mstar_piecewise_runner *pw,
                                                const mstar_bucket_key *key, uint64_t *peak)
{
    struct pw_shape *s;
    mstar_status st = find_or_fail(pw, key, &s);
    uint64_t most = 0;
    for (int32_t slot = 0; st == MSTAR_OK && slot < pw->num_slots; slot++) {
        uint64_t p = 0;
        st = run_spec(pw, s, slot, false, 0, NULL, NULL, NULL, &p);
        if (p > most)
            most = p;
    }
    if (st == MSTAR_OK && peak != NULL)
        *peak = most;
    return st;
}

mstar_status mstar_piecewise_runner_capture_throwaway(mstar_piecewise_runner *pw,
                                                      const mstar_bucket_key *key, unsigned flags,
                                                      mstar_graph **out, mstar_capture_stats *stats)
{
    struct pw_shape *s;
    mstar_status st = find_or_fail(pw, key, &s);
    if (st == MSTAR_OK && out == NULL)
        st = mstar_error_set(MSTAR_EINVAL, "capture_throwaway: out is NULL");
    return st != MSTAR_OK ? st : run_spec(pw, s, 0, true, flags, NULL, out, stats, NULL);
}

static bool is_planned(const mstar_bucket_key *planned, size_t n, const mstar_bucket_key *k)
{
    for (size_t i = 0; i < n; i++) {
        if (mstar_bucket_key_equal(&planned[i], k))
            return true;
    }
    return false;
}

mstar_status mstar_piecewise_runner_warmup_and_capture(mstar_piecewise_runner *pw,
                                                       const mstar_bucket_key *planned, size_t n)
{
    if (!mstar_step_runner_buffers_built(pw->sr))
        return mstar_error_set(MSTAR_ESTATE,
                               "%s: build the graph buffers first (every runner's "
                               "prepare_for_capture, then mstar_step_runner_build_graph_buffers)",
                               pw->who);
    pw->dropped.len = 0;
    for (size_t i = 0; i < pw->shapes.len; i++) { /* capture order: largest first */
        struct pw_shape *s = mstar__pw_shape_at(pw, i);
        if (s->captured)
            continue;
        mstar_status st = MSTAR_OK;
        if (planned != NULL && !is_planned(planned, n, &s->key)) {
            if ((st = mstar__vec_push(&pw->dropped, &s->key)) != MSTAR_OK)
                return st;
            continue;
        }
        for (int32_t slot = 0; st == MSTAR_OK && slot < pw->num_slots; slot++)
            st = run_spec(pw, s, slot, true, 0, &s->slots[slot], NULL, NULL, NULL);
        if (st == MSTAR_OK) {
            s->captured = true;
            continue;
        }
        /* A hole in a shape's slots would let a lease land on nothing: drop it whole (§2.3). */
        mstar_log(MSTAR_LOG_WARN, "%s: dropped a shape: %s", pw->who, mstar_last_error());
        mstar__pw_uncapture(pw, s);
        if ((st = mstar__vec_push(&pw->dropped, &s->key)) != MSTAR_OK)
            return st;
    }
    mstar_error_clear();
    return MSTAR_OK;
}
