/*
 * runner_capture.c — warming and capturing a runner's buckets (design.md "Capture"
 * and "Capture order and interning"), and replaying them (run_forward, design.md "Replay").
 *
 * One spec is one (bucket, slot). Warming it: ensure the slot's padding rows, declare the step
 * over them with the bucket's template inputs, check no resource blocks the capture, then
 * prepare (admit, plan, preprocess, intern the static inputs) and run the forward eagerly
 * MSTAR_NUM_WARMUP times, each time resetting the rows and preparing again, so every warm-up and
 * the capture see identical shapes and state (G-24). The capture then records the forward over
 * the static inputs into the node's pool, its outputs in the pool's kept segments as the last
 * warm-up's allocations show them (lifetimes.h). The rows are reset on every exit path.
 */
#include "graphs/runner.h"

#include "core/assert.h"
#include "device/backend.h"
#include "graphs/config.h"
#include "device/lifetimes.h"
#include "graphs/stage.h"
#include "step/step_runner.h"
#include "step/tensor_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What one spec needs while it is warmed and captured. */
struct spec_run {
    mstar_graph_runner *r;
    struct bucket *b;
    int32_t slot;
    const int64_t *rows;
    mstar_node_input *inputs;
    mstar_tensor_map *preprocessed;
    struct mstar_graph_slot *s; /* static inputs land here */
    mstar_event *replayed;      /* the slot's replay event, recorded at the end of the graph */
};

static mstar_forward_fn forward_of(const mstar_graph_runner *r, const struct bucket *b)
{
    const mstar_graph_config *c = &r->configs[b->config_idx];
    return c->forward != NULL ? c->forward : r->sub->forward;
}

static void fill_ctx(struct spec_run *sr)
{
    mstar_step_ctx *ctx = mstar_step_context(sr->r->step);
    ctx->request_ids = sr->rows;
    ctx->n_requests = (size_t)sr->b->key.bs;
    ctx->graph_walk = sr->b->key.graph_walk;
    ctx->slot = sr->slot;
    ctx->capture = true;
    ctx->is_preplan = false;
    ctx->has_lease = true;
    ctx->lease = (mstar_slot_lease){ sr->slot, sr->b->key };
    ctx->label = NULL;
    ctx->stream = sr->r->stream;
    ctx->compute_dtype = sr->r->autocast;
}

static mstar_status declare(struct spec_run *sr)
{
    mstar_graph_runner *r = sr->r;
    mstar_step_reset(r->step);
    fill_ctx(sr);
    bool declared = false;
    mstar_status st = r->sub->declare_step(r->sub_self, sr->b->key.graph_walk, sr->rows, sr->inputs,
                                           (size_t)sr->b->key.bs, r->step, &declared);
    if (st != MSTAR_OK)
        return mstar_error_wrap("declare_step");
    /* design.md "Replay" / G-16: a step declared with another cg_key_info than its lease's bucket
     * would be captured under a key whose steps declare something else; refuse it, as the engine
     * does. */
    mstar_bucket_key declared_key = sr->b->key;
    declared_key.cg_key_info = mstar_step_cg_key_info(r->step);
    if (declared && !mstar_bucket_key_equal(&declared_key, &sr->b->key))
        return mstar_error_set(MSTAR_EINVAL,
                               "declare_step: the step's cg_key_info '%s' is not the bucket's '%s'",
                               declared_key.cg_key_info ? declared_key.cg_key_info : "(none)",
                               sr->b->key.cg_key_info ? sr->b->key.cg_key_info : "(none)");
    if (!declared)
        mstar_step_reset(r->step);
    fill_ctx(sr); /* the declaration must not move the context */
    return MSTAR_OK;
}

/* admit, plan, preprocess, and stage into the interned static inputs. */
static mstar_status prepare(struct spec_run *sr)
{
    mstar_graph_runner *r = sr->r;
    mstar_status st = mstar__admit_and_plan(r->sr, r->step);
    if (st != MSTAR_OK)
        return st;
    mstar_tensor_map_clear(sr->preprocessed);
    st = r->sub->preprocess(r->sub_self, r->step, sr->inputs, (size_t)sr->b->key.bs,
                            sr->preprocessed);
    if (st != MSTAR_OK)
        return mstar_error_wrap("preprocess");
    const mstar_graph_config *c = &r->configs[sr->b->config_idx];
    for (size_t i = 0; i < mstar_tensor_map_count(sr->preprocessed); i++) {
        const char *key = mstar_tensor_map_name(sr->preprocessed, i);
        mstar_tensor view;
        int32_t seq_dim;
        st = mstar__intern(&r->interned, r->stream, sr->b->config_idx, key,
                           mstar_tensor_map_at(sr->preprocessed, i), sr->b->key.num_tokens,
                           mstar__config_seq_dim(c, key), &view, &seq_dim);
        if (st == MSTAR_OK)
            st = mstar_tensor_map_set(sr->s->static_inputs, key, &view);
        if (st == MSTAR_OK && sr->s->seq_dims.len <= i)
            st = mstar__vec_push(&sr->s->seq_dims, &seq_dim);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

/* First in the graph: a copy node per static input (one that fits the copy kernel), so that a
 * replay's staging is part of its launch (design.md "Replay"). None on the host backend. */
static mstar_status add_copy_nodes(struct mstar_graph_slot *s, mstar_stream *stream)
{
    s->copy_nodes.len = 0;
    for (size_t i = 0; i < mstar_tensor_map_count(s->static_inputs); i++) {
        const mstar_tensor *t = mstar_tensor_map_at(s->static_inputs, i);
        uint32_t index = UINT32_MAX;
        mstar_status st = MSTAR_OK;
        if (mstar_tensor_nbytes(t) <= MSTAR__KERNEL_COPY_MAX)
            st = mstar__capture_copy_node(stream, mstar_tensor_ptr(t), &index);
        if (st == MSTAR_ENOTSUP) {
            mstar_error_clear();
            s->copy_nodes.len = 0;
            return MSTAR_OK;
        }
        if (st == MSTAR_OK)
            st = mstar__vec_push(&s->copy_nodes, &index);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

static mstar_status capture_run(mstar_stream *stream, void *p)
{
    struct spec_run *sr = p;
    mstar_status st = add_copy_nodes(sr->s, stream);
    if (st == MSTAR_OK)
        st = forward_of(sr->r, sr->b)(sr->r->sub_self, sr->r->step, sr->s->static_inputs,
                                      sr->s->static_outputs);
    /* Last: each replay then marks its own end for a later pre-plan of the slot (G-4). */
    return st != MSTAR_OK ? st : mstar__event_record_in_capture(sr->replayed, stream);
}

/* Warm one spec up (mstar__spec_fn) and, as the job asks, capture it. */
static mstar_status run_spec(void *runner, struct bucket *b, int32_t slot,
                             const mstar__spec_job *job, struct mstar_graph_slot **slot_out)
{
    mstar_graph_runner *r = runner;
    char key[48];
    snprintf(key, sizeof(key), "%u_slot%d", b->config_idx, (int)slot);
    struct spec_run sr = { r, b, slot, NULL, NULL, NULL, NULL, NULL };
    mstar_status st = mstar__slot_new(&b->key, b->config_idx, &sr.s);
    if (st == MSTAR_OK)
        st = mstar_dummy_rows_ensure(r->rows, key, b->key.bs, &sr.rows);
    if (st == MSTAR_OK) {
        sr.s->dummy_rids = sr.rows;
        sr.inputs = calloc((size_t)b->key.bs, sizeof(*sr.inputs));
        st = sr.inputs == NULL ? mstar_error_set(MSTAR_ENOMEM, "graph runner: out of memory")
                               : mstar__runner_node_inputs(r, b, sr.inputs);
    }
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&sr.preprocessed);
    if (st == MSTAR_OK)
        st = declare(&sr);
    if (st == MSTAR_OK)
        st = mstar__spec_capturable(r->sr, r->step);
    mstar_backend *backend = mstar_stream_backend(r->stream);
    uint64_t base;
    mstar__spec_peak_begin(backend, &base);
    if (st == MSTAR_OK)
        st = prepare(&sr);
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(r->stream);
    /* Each warm-up notes which of its allocations outlive the forward; the capture, which makes
     * the same ones, keeps those apart from the pool's shared scratch (lifetimes.h). The bucket
     * keeps the notes for a capture without warm-ups (lent sizing: no forward runs there). */
    for (int w = 0; st == MSTAR_OK && !job->no_warmup && w < MSTAR_NUM_WARMUP; w++) {
        mstar_tensor_map *outs = NULL;
        st = mstar_tensor_map_create(&outs);
        mstar__lifetimes_record(r->stream, &b->hints);
        if (st == MSTAR_OK)
            st = forward_of(r, b)(r->sub_self, r->step, sr.s->static_inputs, outs);
        mstar__lifetimes_record(r->stream, NULL);
        mstar_tensor_map_destroy(outs); /* warm-up outputs come from the caching allocator */
        if (st == MSTAR_OK)
            st = mstar_dummy_rows_reset(r->rows, sr.rows, (size_t)b->key.bs, false);
        if (st == MSTAR_OK)
            st = declare(&sr);
        if (st == MSTAR_OK)
            st = prepare(&sr);
    }
    if (st == MSTAR_OK)
        st = mstar_stream_synchronize(r->stream);
    if (st == MSTAR_OK && !job->no_warmup)
        b->warmed = true;
    mstar__spec_peak_end(backend, base, job);
    if (st == MSTAR_OK && job->capture)
        st = mstar__step_runner_replay_event(r->sr, slot, &sr.replayed);
    if (st == MSTAR_OK && job->capture) {
        mstar__lifetimes_apply(r->stream, &b->hints);
        st = mstar_capture_into_graph(r->stream, r->pool, capture_run, &sr, job->flags,
                                      &sr.s->graph, job->stats);
        mstar__lifetimes_apply(r->stream, NULL);
        /* The outputs live in the graph's pool blocks now; the map only views them. */
        mstar__tensor_map_disown(sr.s->static_outputs);
    }
    /* Back to clean rows; their storage stays until release_all, for the next capture. */
    mstar_status reset = sr.rows == NULL
                             ? MSTAR_OK
                             : mstar_dummy_rows_reset(r->rows, sr.rows, (size_t)b->key.bs, false);
    if (st == MSTAR_OK)
        st = reset;
    mstar_tensor_map_destroy(sr.preprocessed);
    free(sr.inputs);
    mstar_step_reset(r->step);
    return mstar__spec_finish(&r->set, b, slot, job, st, sr.s, slot_out);
}

mstar_status mstar_graph_runner_warm_bucket(mstar_graph_runner *r, const mstar_bucket_key *key,
                                            uint64_t *peak)
{
    return mstar__buckets_warm(&r->set, run_spec, r, key, peak);
}

mstar_status mstar_graph_runner_capture_throwaway(mstar_graph_runner *r,
                                                  const mstar_bucket_key *key, unsigned flags,
                                                  mstar_graph **out, mstar_capture_stats *stats)
{
    return mstar__buckets_throwaway(&r->set, run_spec, r, key, flags, out, stats);
}

mstar_status mstar_graph_runner_warmup_and_capture(mstar_graph_runner *r,
                                                   const mstar_bucket_key *planned, size_t n)
{
    return mstar__buckets_capture(&r->set, run_spec, r, r->sr, planned, n);
}

/* ---- run_forward (design.md "Replay") -----------------------------------------------------------
 */

mstar_status mstar_graph_runner_static_input(const mstar_graph_runner *r,
                                             const mstar_slot_lease *lease, const char *key,
                                             int64_t len, mstar_tensor *out)
{
    if (r == NULL || key == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_graph_runner_static_input: runner, key and out are required");
    const mstar_graph_slot *s = mstar_graph_runner_slot_for(r, lease);
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOENT,
                               "%s: static input '%s': the lease names no captured bucket or slot",
                               r->who, key);
    for (size_t i = 0; i < mstar_tensor_map_count(s->static_inputs); i++) {
        if (strcmp(mstar_tensor_map_name(s->static_inputs, i), key) != 0)
            continue;
        /* The slot's view is the bucket's captured length; the step's is a prefix of it. */
        *out = *mstar_tensor_map_at(s->static_inputs, i);
        if (out->ndim == 0)
            return MSTAR_OK;
        int32_t d = *(const int32_t *)mstar__vec_at(&s->seq_dims, i);
        if (len < 0 || len > out->shape[d])
            return mstar_error_set(MSTAR_ERANGE,
                                   "%s: static input '%s': length %lld outside 0..%lld (its "
                                   "captured length on seq dim %d)",
                                   r->who, key, (long long)len, (long long)out->shape[d], (int)d);
        out->shape[d] = len;
        return MSTAR_OK;
    }
    return mstar_error_set(MSTAR_ENOENT, "%s: the bucket captured no input '%s'", r->who, key);
}

static mstar_status stage_and_launch(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                     const mstar_tensor_map *pre, mstar_event *plan_done,
                                     mstar_signal *launch_started, const mstar_tensor_map **outputs)
{
    const mstar_graph_slot *s = mstar_graph_runner_slot_for(r, lease);
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOENT,
                               "run_forward(%s): the lease names no captured "
                               "bucket or slot",
                               r->name);
    if (pre == NULL)
        return mstar_error_set(MSTAR_EINVAL, "run_forward(%s): preprocessed is NULL", r->name);
    mstar_status st = mstar__step_runner_check_replay_key(r->sr, lease, r->name);
    if (st != MSTAR_OK)
        return st;
    mstar__stage_nodes nodes = { s->graph, &s->copy_nodes };
    st = mstar__stage_inputs(r->stream, r->who, s->static_inputs, &s->seq_dims, pre, false,
                             &r->warned, s->copy_nodes.len > 0 ? &nodes : NULL);
    if (st != MSTAR_OK)
        return st;
    if (plan_done != NULL) {
        /* On the device: the pre-plan wrote this slot's buffers on the plan stream. */
        st = mstar_stream_wait_event(r->stream, plan_done);
        if (st != MSTAR_OK)
            return st;
    }
    /* Just before the launch, so the submitting thread's work overlaps the launch, not the
     * staging (design.md "Replay"). */
    if (launch_started != NULL)
        mstar_signal_set(launch_started);
    st = mstar_graph_launch(s->graph, r->stream);
    if (st != MSTAR_OK)
        return st;
    /* The graph recorded the slot's replay event itself (capture_run). */
    mstar__step_runner_replay_launched(r->sr, lease->slot);
    *outputs = s->static_outputs;
    return MSTAR_OK;
}

mstar_status mstar_graph_runner_run_forward(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                            const mstar_tensor_map *preprocessed,
                                            mstar_event *plan_done, mstar_signal *launch_started,
                                            const mstar_tensor_map **outputs)
{
    mstar_status st =
        outputs == NULL
            ? mstar_error_set(MSTAR_EINVAL, "run_forward: outputs is NULL")
            : stage_and_launch(r, lease, preprocessed, plan_done, launch_started, outputs);
    /* Every waiter is released on every path, failures included (G-27). */
    if (launch_started != NULL)
        mstar_signal_set(launch_started);
    MSTAR__ASSERT(launch_started == NULL || mstar_signal_is_set(launch_started)); /* I-25 */
    return st;
}
