/*
 * piecewise.c — the piecewise runner (reference PiecewiseAcceleratorGraphRunner): its config,
 * the registry of shapes, the lookups, and run (design.md "Piecewise regions").
 *
 * Every configured shape exists from creation, in capture order (descending (bs, total_tokens));
 * capture marks the ones that made it. A shape's slots are captured together and dropped
 * together, so a lease never lands on a hole (design.md "Buckets").
 *
 * A run stages the real rows into the leased graph's static buffers and zeroes the rest, then
 * either just replays (the outer step already planned the region against the lease) or drives the
 * region's own step around the replay: declare over the real ids and the shape's padding rows,
 * admit, plan, replay, commit. Padding rows of a BATCHED region carry real spans (the batch axis
 * was captured, so they compute), which a resource may back with storage; they are reset with
 * their storage freed on every path out of run, so nothing of theirs stays resident (G-30).
 */
#include "graphs/piecewise.h"

#include "graphs/config.h"
#include "graphs/stage.h"
#include "step/step_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHO "piecewise config"

/* ---- config -----------------------------------------------------------------------------------
 */

void mstar_piecewise_config_init(mstar_piecewise_config *c)
{
    memset(c, 0, sizeof(*c));
    c->kind = MSTAR_GRAPH_BATCHED;
    c->compile_mode = MSTAR_COMPILE_NONE;
}

mstar_status mstar_piecewise_config_validate(const mstar_piecewise_config *c)
{
    if (c == NULL)
        return mstar_error_set(MSTAR_EINVAL, WHO ": NULL");
    if (c->capture_fn == NULL || c->make_static_inputs == NULL)
        return mstar_error_set(MSTAR_EINVAL, WHO ": capture_fn and make_static_inputs are "
                                                 "required");
    if (c->kind != MSTAR_GRAPH_BATCHED && c->kind != MSTAR_GRAPH_PACKED)
        return mstar_error_set(MSTAR_EINVAL, WHO ": unknown kind %d", (int)c->kind);
    if ((unsigned)c->compile_mode > MSTAR_COMPILE_MAX_AUTOTUNE_NO_GRAPHS)
        return mstar_error_set(MSTAR_EINVAL, WHO ": unknown compile_mode %d", (int)c->compile_mode);
    mstar_status st = mstar__check_sizes(c->capture_batch_sizes, c->n_capture_batch_sizes, WHO,
                                         "capture_batch_sizes");
    if (st != MSTAR_OK)
        return st;
    if (c->kind == MSTAR_GRAPH_BATCHED) {
        if (c->seq_len < 1)
            return mstar_error_set(MSTAR_EINVAL, WHO ": a BATCHED region needs seq_len >= 1");
        return MSTAR_OK;
    }
    if (c->n_total_tokens == 0)
        return mstar_error_set(MSTAR_EINVAL, WHO ": a PACKED region needs total_tokens");
    st = mstar__check_sizes(c->total_tokens, c->n_total_tokens, WHO, "total_tokens");
    if (st != MSTAR_OK)
        return st;
    return mstar__check_packed_pairs(c->capture_batch_sizes, c->n_capture_batch_sizes,
                                     c->total_tokens, c->n_total_tokens, WHO);
}

mstar_status mstar_piecewise_replay_seq_lens(const mstar_piecewise_config *c,
                                             const mstar_piecewise_shape *shape,
                                             const int64_t *seq_lens, int64_t real_bs, int64_t *out)
{
    if (c == NULL || shape == NULL || out == NULL || real_bs < 0 || real_bs > shape->bs)
        return mstar_error_set(MSTAR_EINVAL,
                               "replay_seq_lens: NULL argument or real_bs %lld "
                               "outside 0..bs",
                               (long long)real_bs);
    if (c->kind == MSTAR_GRAPH_BATCHED) {
        memcpy(out, shape->seq_lens, (size_t)shape->bs * sizeof(*out));
        return MSTAR_OK;
    }
    if (seq_lens == NULL && real_bs > 0)
        return mstar_error_set(MSTAR_EINVAL, "replay_seq_lens: a PACKED region needs seq_lens");
    for (int64_t i = 0; i < shape->bs; i++)
        out[i] = i < real_bs ? seq_lens[i] : 0;
    return MSTAR_OK;
}

static void config_free(mstar_piecewise_config *c)
{
    free((int64_t *)c->capture_batch_sizes);
    free((int64_t *)c->total_tokens);
}

static mstar_status config_copy(const mstar_piecewise_config *src, mstar_piecewise_config *dst)
{
    mstar_status st = mstar_piecewise_config_validate(src);
    if (st != MSTAR_OK)
        return st;
    bool failed = false;
    *dst = *src;
    dst->capture_batch_sizes =
        mstar__sorted_batch_sizes(src->capture_batch_sizes, &dst->n_capture_batch_sizes, &failed);
    dst->total_tokens = mstar__sorted_copy(src->total_tokens, src->n_total_tokens, &failed);
    if (failed) {
        config_free(dst);
        return mstar_error_set(MSTAR_ENOMEM, WHO ": out of memory");
    }
    return MSTAR_OK;
}

/* ---- shapes ----------------------------------------------------------------------------------
 */

static mstar_status build_shapes(mstar_piecewise_runner *pw)
{
    const mstar_piecewise_config *c = &pw->config;
    bool batched = c->kind == MSTAR_GRAPH_BATCHED;
    size_t n = batched ? 1 : c->n_total_tokens;
    for (size_t i = 0; i < c->n_capture_batch_sizes; i++) {
        int64_t bs = c->capture_batch_sizes[i];
        for (size_t k = 0; k < n; k++) {
            mstar_bucket_key key = { MSTAR_PIECEWISE_WALK, bs,
                                     batched ? c->seq_len * bs : c->total_tokens[k], pw->label };
            /* rows: seq_len each, or the total spread over bs rows (distribute_tokens) */
            mstar_status st = mstar__buckets_add(&pw->set, &key, 0, batched ? c->seq_len : 0,
                                                 batched ? 0 : key.num_tokens);
            if (st != MSTAR_OK)
                return st;
        }
    }
    return mstar__buckets_order(&pw->set);
}

/* ---- create / destroy -------------------------------------------------------------------------
 */

void mstar_piecewise_runner_destroy(mstar_piecewise_runner *pw)
{
    if (pw == NULL)
        return;
    mstar__buckets_free(&pw->set);
    mstar_dummy_rows_destroy(pw->rows);
    mstar__stage_warned_free(&pw->warned);
    mstar_step_destroy(pw->step);
    config_free(&pw->config);
    free(pw->ids);
    free(pw->lens);
    free(pw->label);
    free(pw->who);
    free(pw);
}

static mstar_status check_options(const mstar_piecewise_runner_options *o)
{
    if (o == NULL || o->label == NULL || o->config == NULL || o->step_runner == NULL ||
        o->pool == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_piecewise_runner_create: label, config, "
                                             "step_runner and pool are required");
    mstar_status st = mstar_name_validate(o->label, strlen(o->label), "piecewise region label");
    if (st != MSTAR_OK)
        return st;
    if (o->num_slots < 0 || o->num_slots > 16)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_piecewise_runner_create(%s): num_slots %d outside 0..16",
                               o->label, (int)o->num_slots);
    if (mstar_graph_pool_backend(o->pool) != mstar_step_runner_backend(o->step_runner))
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_piecewise_runner_create(%s): the pool and the step runner "
                               "belong to different backends",
                               o->label);
    return MSTAR_OK;
}

mstar_status mstar_piecewise_runner_create(const mstar_piecewise_runner_options *o,
                                           mstar_piecewise_runner **out)
{
    mstar_status st = out == NULL ? mstar_error_set(MSTAR_EINVAL, "mstar_piecewise_runner_create: "
                                                                  "out is NULL")
                                  : check_options(o);
    if (st != MSTAR_OK)
        return st;
    mstar_piecewise_runner *pw = calloc(1, sizeof(*pw));
    if (pw == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_piecewise_runner_create: out of memory");
    mstar__buckets_init(&pw->set, NULL, 0); /* who and num_slots once known */
    mstar__vec_init(&pw->warned, sizeof(char *));
    pw->sr = o->step_runner;
    pw->stream = mstar_step_runner_compute_stream(o->step_runner);
    pw->pool = o->pool;
    pw->autocast = o->autocast_dtype;
    pw->num_slots = o->num_slots;
    if (pw->num_slots == 0)
        st = mstar_step_runner_default_num_slots(o->step_runner, &pw->num_slots);
    char who[2 * MSTAR_NAME_MAX + 64];
    snprintf(who, sizeof(who), "piecewise region %s%s%s", o->label,
             o->node_name != NULL ? " of node " : "", o->node_name != NULL ? o->node_name : "");
    char prefix[MSTAR_NAME_MAX + 4];
    snprintf(prefix, sizeof(prefix), "pw_%s", o->label);
    if (st == MSTAR_OK &&
        ((pw->label = strdup(o->label)) == NULL || (pw->who = strdup(who)) == NULL))
        st = mstar_error_set(MSTAR_ENOMEM, "mstar_piecewise_runner_create: out of memory");
    pw->set.who = pw->who;
    pw->set.num_slots = pw->num_slots;
    if (st == MSTAR_OK)
        st = config_copy(o->config, &pw->config);
    if (st == MSTAR_OK) {
        int64_t max_bs = pw->config.capture_batch_sizes[pw->config.n_capture_batch_sizes - 1];
        pw->ids = calloc((size_t)max_bs, sizeof(*pw->ids));
        pw->lens = calloc((size_t)max_bs, sizeof(*pw->lens));
        if (pw->ids == NULL || pw->lens == NULL)
            st = mstar_error_set(MSTAR_ENOMEM, "mstar_piecewise_runner_create: out of memory");
    }
    if (st == MSTAR_OK)
        st = mstar_dummy_rows_create(prefix, pw->sr, &pw->rows);
    if (st == MSTAR_OK)
        st = mstar_step_create(&pw->step);
    if (st == MSTAR_OK)
        st = build_shapes(pw);
    if (st != MSTAR_OK) {
        mstar_error_wrap("piecewise region %s", o->label);
        mstar_piecewise_runner_destroy(pw);
        return st;
    }
    *out = pw;
    return MSTAR_OK;
}

const char *mstar_piecewise_runner_label(const mstar_piecewise_runner *pw)
{
    return pw->label;
}

int32_t mstar_piecewise_runner_num_slots(const mstar_piecewise_runner *pw)
{
    return pw->num_slots;
}

mstar_dummy_rows *mstar_piecewise_runner_dummy_rows(mstar_piecewise_runner *pw)
{
    return pw->rows;
}

const mstar_bucket_key *mstar_piecewise_runner_buckets(const mstar_piecewise_runner *pw, size_t *n)
{
    *n = pw->set.keys.len;
    return pw->set.keys.data;
}

mstar_status mstar_piecewise_runner_prepare_for_capture(mstar_piecewise_runner *pw,
                                                        const mstar_cg_slot_spec **specs, size_t *n)
{
    return mstar__buckets_claim(&pw->set, pw->sr, specs, n);
}

/* ---- lookups (design.md "Piecewise regions", G-21) ----------------------------------------------
 */

/* The captured shape a batch replays on. The batch pads to the smallest CONFIGURED bs that holds
 * it, and only shapes of exactly that bs answer: when that shape was dropped the region runs
 * eager, even if a larger one is captured (the reference piecewise lookup; G-21). */
static struct bucket *lookup(const mstar_piecewise_runner *pw, int64_t bs, int64_t total)
{
    const mstar_piecewise_config *c = &pw->config;
    int64_t padded = -1;
    for (size_t i = 0; bs >= 1 && i < c->n_capture_batch_sizes && padded < 0; i++) {
        if (c->capture_batch_sizes[i] >= bs)
            padded = c->capture_batch_sizes[i];
    }
    if (padded < 0 || (c->kind == MSTAR_GRAPH_PACKED && total < 0))
        return NULL;
    struct bucket *best = NULL;
    for (size_t i = 0; i < pw->set.all.len; i++) {
        struct bucket *s = mstar__buckets_at(&pw->set, i);
        if (!s->captured || s->key.bs != padded)
            continue;
        if (c->kind == MSTAR_GRAPH_BATCHED)
            return s;
        if (s->key.num_tokens >= total &&
            (best == NULL || s->key.num_tokens < best->key.num_tokens))
            best = s;
    }
    return best;
}

bool mstar_piecewise_runner_can_run(const mstar_piecewise_runner *pw, int64_t bs, int64_t total)
{
    return lookup(pw, bs, total) != NULL;
}

bool mstar_piecewise_runner_lease_slot(const mstar_piecewise_runner *pw, int64_t bs, int64_t total,
                                       mstar_slot_lease *out)
{
    const struct bucket *s = lookup(pw, bs, total);
    if (s != NULL && out != NULL)
        *out = (mstar_slot_lease){ pw->slot, s->key };
    return s != NULL;
}

bool mstar_piecewise_runner_lease_before_step(const mstar_piecewise_runner *pw)
{
    return pw->config.lease_before_step;
}

bool mstar_piecewise_runner_can_lease(const mstar_piecewise_runner *pw,
                                      const mstar_node_input *inputs, size_t n)
{
    return pw->config.can_lease == NULL || pw->config.can_lease(pw->config.user, inputs, n);
}

mstar_status mstar_piecewise_runner_set_slot(mstar_piecewise_runner *pw, int32_t slot)
{
    if (slot < 0 || slot >= pw->num_slots)
        return mstar_error_set(MSTAR_EINVAL, "%s: set_slot(%d) outside 0..%d", pw->who, (int)slot,
                               (int)pw->num_slots - 1);
    pw->slot = slot;
    return MSTAR_OK;
}

const mstar_graph_slot *mstar_piecewise_runner_slot_for(const mstar_piecewise_runner *pw,
                                                        const mstar_slot_lease *lease)
{
    if (lease == NULL || lease->slot < 0 || lease->slot >= pw->num_slots)
        return NULL;
    const struct bucket *s = mstar__buckets_find(&pw->set, &lease->bucket);
    return s != NULL && s->captured ? s->slots[lease->slot] : NULL;
}

const mstar_bucket_key *mstar_piecewise_runner_dropped_shapes(const mstar_piecewise_runner *pw,
                                                              size_t *n)
{
    *n = pw->set.dropped.len;
    return pw->set.dropped.data;
}

mstar_status mstar_piecewise_runner_drop_shape(mstar_piecewise_runner *pw,
                                               const mstar_bucket_key *key)
{
    return mstar__buckets_drop(&pw->set, key);
}

bool mstar_piecewise_runner_any_graphs(const mstar_piecewise_runner *pw)
{
    return mstar__buckets_any_captured(&pw->set);
}

/* ---- the region's step ------------------------------------------------------------------------
 */

static void fill_ctx(mstar_piecewise_runner *pw, const struct bucket *s, int32_t slot,
                     const int64_t *ids, bool capture)
{
    *mstar_step_context(pw->step) = (mstar_step_ctx){
        .request_ids = ids,
        .n_requests = (size_t)s->key.bs,
        .graph_walk = s->key.graph_walk,
        .slot = slot,
        .capture = capture,
        .has_lease = true,
        .lease = { slot, s->key },
        .label = pw->label,
        .stream = pw->stream,
        .compute_dtype = pw->autocast,
    };
}

mstar_status mstar__pw_declare(mstar_piecewise_runner *pw, const struct bucket *s, int32_t slot,
                               const int64_t *ids, const int64_t *lens, bool capture,
                               bool *declared)
{
    mstar_step_reset(pw->step);
    fill_ctx(pw, s, slot, ids, capture);
    *declared = false;
    if (pw->config.declare_step == NULL)
        return MSTAR_OK;
    if (pw->config.declare_step(pw->config.user, ids, lens, (size_t)s->key.bs, pw->step,
                                declared) != MSTAR_OK)
        return mstar_error_wrap("declare_step"); /* callers name the region */
    if (!*declared)
        mstar_step_reset(pw->step);
    fill_ctx(pw, s, slot, ids, capture); /* the declaration must not move the context */
    return MSTAR_OK;
}

/* ---- run --------------------------------------------------------------------------------------
 */

/* Steps 1–2 of run: the real batch size, the total tokens (-1 without seq_lens) and the shape. */
static mstar_status resolve(mstar_piecewise_runner *pw, const int64_t *ids, const int64_t *lens,
                            size_t n, int64_t *real_bs, int64_t *total, struct bucket **out)
{
    bool arrays = ids != NULL || lens != NULL;
    if (*real_bs < 0 && !arrays)
        return mstar_error_set(MSTAR_EINVAL, "%s: run needs real_bs, request_ids or seq_lens",
                               pw->who);
    if (*real_bs < 0)
        *real_bs = (int64_t)n;
    else if (arrays && (int64_t)n != *real_bs)
        return mstar_error_set(MSTAR_EINVAL, "%s: run got %zu rows but real_bs %lld", pw->who, n,
                               (long long)*real_bs);
    *total = lens == NULL ? -1 : 0;
    for (size_t i = 0; lens != NULL && i < n; i++) {
        if (lens[i] < 0 || __builtin_add_overflow(*total, lens[i], total))
            return mstar_error_set(MSTAR_EINVAL,
                                   "%s: seq_lens[%zu] = %lld is negative or "
                                   "overflows the total",
                                   pw->who, i, (long long)lens[i]);
    }
    if (pw->config.kind == MSTAR_GRAPH_PACKED && *total < 0)
        return mstar_error_set(MSTAR_EINVAL, "%s: a PACKED region's run needs seq_lens", pw->who);
    *out = lookup(pw, *real_bs, *total);
    if (*out == NULL)
        return mstar_error_set(MSTAR_ENOENT,
                               "%s: no captured shape for bs=%lld tokens=%lld (check can_run "
                               "before running the region)",
                               pw->who, (long long)*real_bs, (long long)*total);
    return MSTAR_OK;
}

static mstar_status replay(mstar_piecewise_runner *pw, const struct mstar_graph_slot *g)
{
    mstar_status st = mstar_graph_launch(g->graph, pw->stream);
    if (st == MSTAR_OK) /* the graph recorded the slot's replay event (G-4) */
        mstar__step_runner_replay_launched(pw->sr, pw->slot);
    return st;
}

/* Step 5 of run: the region's own step around the replay. */
static mstar_status step_and_replay(mstar_piecewise_runner *pw, const struct bucket *s,
                                    const struct mstar_graph_slot *g, const int64_t *ids,
                                    const int64_t *lens, int64_t real_bs)
{
    if (ids == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "%s: run needs request_ids to declare the region's "
                               "step",
                               pw->who);
    memcpy(pw->ids, ids, (size_t)real_bs * sizeof(*ids));
    memcpy(pw->ids + real_bs, g->dummy_rids + real_bs,
           (size_t)(s->key.bs - real_bs) * sizeof(*ids));
    const mstar_piecewise_shape shape = { s->key.bs, s->row_lens, s->key.num_tokens };
    bool declared = false;
    mstar_status st = mstar_piecewise_replay_seq_lens(&pw->config, &shape, lens, real_bs, pw->lens);
    if (st == MSTAR_OK)
        st = mstar__pw_declare(pw, s, pw->slot, pw->ids, pw->lens, false, &declared);
    if (st == MSTAR_OK && declared)
        st = mstar__admit_and_plan(pw->sr, pw->step);
    if (st == MSTAR_OK)
        st = replay(pw, g);
    if (st == MSTAR_OK && declared)
        st = mstar_step_runner_commit(pw->sr, pw->step);
    /* On every path: the padding rows hold nothing once the step is over (G-30). */
    mstar_status reset = mstar_dummy_rows_reset(pw->rows, g->dummy_rids + real_bs,
                                                (size_t)(s->key.bs - real_bs), true);
    mstar_step_reset(pw->step);
    if (st != MSTAR_OK)
        return mstar_error_wrap("%s", pw->who);
    return reset;
}

mstar_status mstar_piecewise_runner_run(mstar_piecewise_runner *pw,
                                        const mstar_tensor_map *static_inputs,
                                        const int64_t *request_ids, const int64_t *seq_lens,
                                        size_t n, int64_t real_bs, mstar_piecewise_output *out)
{
    if (pw == NULL || static_inputs == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_piecewise_runner_run: runner, static_inputs "
                                             "and out must not be NULL");
    int64_t total;
    struct bucket *s;
    mstar_status st = resolve(pw, request_ids, seq_lens, n, &real_bs, &total, &s);
    if (st != MSTAR_OK)
        return st;
    const struct mstar_graph_slot *g = s->slots[pw->slot];
    /* Zero the tails: a batched region computes over its padding rows
     * (design.md "Piecewise regions"). */
    st = mstar__stage_inputs(pw->stream, pw->who, g->static_inputs, NULL, static_inputs, true,
                             &pw->warned, NULL);
    if (st != MSTAR_OK)
        return st;
    if (pw->config.lease_before_step || pw->config.declare_step == NULL)
        st = replay(pw, g); /* the outer step planned the region against the lease */
    else
        st = step_and_replay(pw, s, g, request_ids, seq_lens, real_bs);
    if (st != MSTAR_OK)
        return st;
    *out = (mstar_piecewise_output){ g->static_outputs,
                                     pw->config.kind == MSTAR_GRAPH_PACKED ? total : real_bs,
                                     pw->stream };
    return MSTAR_OK;
}
