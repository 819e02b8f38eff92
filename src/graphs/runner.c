/*
 * runner.c — the whole-forward runner (reference AcceleratorGraphRunner): buckets and slots, the
 * tightest-fit lookups, leases, padding, capture with warm-ups, and run_forward.
 *
 * The buckets (every configured one, in capture order) live in an mstar__buckets (buckets.c),
 * shared with the piecewise runner; lookups see only the captured ones. Keys point at strings of
 * the runner's own config copies, so they stay valid for the runner's life.
 */
#include "graphs/runner.h"

#include "core/assert.h"
#include "graphs/config.h"
#include "graphs/stage.h"
#include "step/step_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mstar_graph_config *config_of(const mstar_graph_runner *r, const struct bucket *b)
{
    return &r->configs[b->config_idx];
}

static mstar_status build_buckets(mstar_graph_runner *r)
{
    for (uint32_t i = 0; i < r->n_configs; i++) {
        const mstar_graph_config *c = &r->configs[i];
        bool batched = c->kind == MSTAR_GRAPH_BATCHED;
        size_t n = batched ? 1 : c->n_capture_token_lengths;
        for (size_t j = 0; j < c->n_capture_batch_sizes; j++) {
            int64_t bs = c->capture_batch_sizes[j];
            for (size_t k = 0; k < n; k++) {
                mstar_bucket_key key = { c->capture_graph_walk, bs,
                                         batched ? mstar__config_batched_tokens(c, bs)
                                                 : c->capture_token_lengths[k],
                                         c->cg_key_info };
                /* rows: seq_len each, or the input tokens (plan tokens / multiplier) spread */
                mstar_status st = mstar__buckets_add(
                    &r->set, &key, i, batched ? c->seq_len : 0,
                    batched ? 0 : key.num_tokens / c->plan_tokens_per_input_token);
                if (st != MSTAR_OK)
                    return st;
            }
        }
    }
    return mstar__buckets_order(&r->set);
}

mstar_status mstar__admit_and_plan(mstar_step_runner *sr, mstar_step *step)
{
    mstar_step_admit_result admit;
    mstar_status st = mstar_step_runner_admit(sr, step, &admit);
    if (st == MSTAR_OK && !admit.ok)
        st = mstar_error_set(MSTAR_ENOSPC, "admit failed for request %lld label %u: %s",
                             (long long)admit.request, admit.label, admit.reason);
    if (st == MSTAR_OK)
        st = mstar_step_runner_plan(sr, step);
    return st;
}

void mstar_graph_runner_destroy(mstar_graph_runner *r)
{
    if (r == NULL)
        return;
    mstar__buckets_free(&r->set);
    for (size_t i = 0; i < r->templates.len; i++) {
        struct template_row *t = mstar__vec_at(&r->templates, i);
        mstar_tensor_map_destroy(t->full);
        mstar_tensor_map_destroy(t->empty);
    }
    mstar__stage_warned_free(&r->warned);
    mstar__interned_free(&r->interned, mstar_stream_backend(r->stream));
    mstar_dummy_rows_destroy(r->rows);
    for (size_t i = 0; i < r->n_configs; i++)
        mstar__config_free(&r->configs[i]);
    free(r->configs);
    mstar__vec_free(&r->templates);
    mstar_step_destroy(r->step);
    free(r->name);
    free(r->who);
    free(r);
}

mstar_status mstar_graph_runner_create(const mstar_graph_runner_options *o,
                                       mstar_graph_runner **out)
{
    if (o == NULL || out == NULL || o->submodule == NULL || o->step_runner == NULL ||
        o->pool == NULL || o->submodule_name == NULL || (o->configs == NULL && o->n_configs != 0))
        return mstar_error_set(MSTAR_EINVAL, "mstar_graph_runner_create: submodule_name, "
                                             "submodule, step_runner, pool and out are required");
    if (o->submodule->declare_step == NULL || o->submodule->preprocess == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_graph_runner_create(%s): the submodule needs "
                               "declare_step and preprocess",
                               o->submodule_name);
    if (o->num_slots < 0 || o->num_slots > 16)
        return mstar_error_set(MSTAR_EINVAL,
                               "mstar_graph_runner_create(%s): num_slots %d outside "
                               "0..16",
                               o->submodule_name, (int)o->num_slots);
    mstar_graph_runner *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_graph_runner_create: out of memory");
    mstar__buckets_init(&r->set, NULL, 0); /* who and num_slots once known */
    mstar__vec_init(&r->interned, sizeof(mstar__interned));
    mstar__vec_init(&r->templates, sizeof(struct template_row));
    mstar__vec_init(&r->warned, sizeof(char *));
    r->sub = o->submodule;
    r->sub_self = o->submodule_self;
    r->sr = o->step_runner;
    r->stream = mstar_step_runner_compute_stream(o->step_runner);
    r->pool = o->pool;
    r->autocast = o->autocast_dtype;
    r->num_slots = o->num_slots;
    mstar_status st = MSTAR_OK;
    if (r->num_slots == 0)
        st = mstar_step_runner_default_num_slots(o->step_runner, &r->num_slots);
    size_t who_len = strlen(o->submodule_name) + sizeof("graph runner ");
    if (st == MSTAR_OK &&
        ((r->name = strdup(o->submodule_name)) == NULL || (r->who = malloc(who_len)) == NULL ||
         (r->configs = calloc(o->n_configs + 1, sizeof(*r->configs))) == NULL))
        st = mstar_error_set(MSTAR_ENOMEM, "mstar_graph_runner_create: out of memory");
    if (st == MSTAR_OK) {
        snprintf(r->who, who_len, "graph runner %s", r->name);
        r->set.who = r->who;
        r->set.num_slots = r->num_slots;
    }
    for (size_t i = 0; st == MSTAR_OK && i < o->n_configs; i++) {
        st = mstar__config_copy(&o->configs[i], (uint32_t)i, &r->configs[i]);
        if (st == MSTAR_OK)
            r->n_configs++;
    }
    if (st == MSTAR_OK)
        st = mstar_dummy_rows_create(r->name, r->sr, &r->rows);
    if (st == MSTAR_OK)
        st = mstar_step_create(&r->step);
    if (st == MSTAR_OK)
        st = build_buckets(r);
    if (st != MSTAR_OK) {
        mstar_error_wrap("graph runner %s", o->submodule_name);
        mstar_graph_runner_destroy(r);
        return st;
    }
    *out = r;
    return MSTAR_OK;
}

int32_t mstar_graph_runner_num_slots(const mstar_graph_runner *r)
{
    return r->num_slots;
}

mstar_stream *mstar_graph_runner_plan_stream(const mstar_graph_runner *r)
{
    return mstar_step_runner_plan_stream(r->sr);
}

mstar_dummy_rows *mstar_graph_runner_dummy_rows(mstar_graph_runner *r)
{
    return r->rows;
}

const mstar_bucket_key *mstar_graph_runner_buckets(const mstar_graph_runner *r, size_t *n)
{
    *n = r->set.keys.len;
    return r->set.keys.data;
}

/* ---- templates --------------------------------------------------------------------------------
 */

/* The seq dim of a per-request template tensor of `len` tokens: declared, else the first dim of
 * that size, else 0. */
static int32_t row_seq_dim(const mstar_graph_config *c, const char *key, const mstar_tensor *t,
                           int64_t len)
{
    int32_t d = mstar__config_seq_dim(c, key);
    if (d >= 0)
        return d;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (t->shape[i] == len)
            return i;
    }
    return 0;
}

mstar_status mstar__runner_template(mstar_graph_runner *r, uint32_t idx, int64_t len,
                                    struct template_row **out)
{
    for (size_t i = 0; i < r->templates.len; i++) {
        struct template_row *t = mstar__vec_at(&r->templates, i);
        if (t->config_idx == idx && t->len == len) {
            *out = t;
            return MSTAR_OK;
        }
    }
    const mstar_graph_config *c = &r->configs[idx];
    struct template_row t = { idx, len, NULL, NULL };
    mstar_status st = mstar_tensor_map_create(&t.full);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&t.empty);
    if (st == MSTAR_OK &&
        (st = c->make_node_input(c->template_user, r->stream, len, t.full)) != MSTAR_OK)
        mstar_error_wrap("config %u: make_node_input(%lld)", idx, (long long)len);
    for (size_t i = 0; st == MSTAR_OK && i < mstar_tensor_map_count(t.full); i++) {
        /* Padding rows are the template cut to length 0 on the seq dim (design.md "Padding rows"):
         * a view of the same bytes that holds nothing, so padding allocates nothing. */
        mstar_tensor e = *mstar_tensor_map_at(t.full, i);
        const char *name = mstar_tensor_map_name(t.full, i);
        if (e.ndim > 0)
            e.shape[row_seq_dim(c, name, &e, len)] = 0;
        st = mstar_tensor_map_set(t.empty, name, &e);
    }
    if (st == MSTAR_OK)
        st = mstar__vec_push(&r->templates, &t);
    if (st != MSTAR_OK) {
        mstar_tensor_map_destroy(t.full);
        mstar_tensor_map_destroy(t.empty);
        return st;
    }
    *out = mstar__vec_at(&r->templates, r->templates.len - 1);
    return MSTAR_OK;
}

mstar_status mstar__runner_node_inputs(mstar_graph_runner *r, const struct bucket *b,
                                       mstar_node_input *rows)
{
    for (int64_t i = 0; i < b->key.bs; i++) {
        struct template_row *t;
        mstar_status st = mstar__runner_template(r, b->config_idx, b->row_lens[i], &t);
        if (st != MSTAR_OK)
            return st;
        rows[i] = (mstar_node_input){ b->row_lens[i], t->full };
    }
    return MSTAR_OK;
}

/* ---- claims -----------------------------------------------------------------------------------
 */

mstar_status mstar_graph_runner_prepare_for_capture(mstar_graph_runner *r,
                                                    const mstar_cg_slot_spec **specs, size_t *n)
{
    return mstar__buckets_claim(&r->set, r->sr, specs, n);
}

/* ---- lookups (design.md "Lookup") ---------------------------------------------------------------
 */

static bool key_info_equal(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

struct bucket *mstar__runner_find_bucket(const mstar_graph_runner *r, const mstar_bucket_key *key)
{
    return mstar__buckets_find(&r->set, key);
}

static bool candidate(const mstar_graph_runner *r, const struct bucket *b, const char *walk,
                      int64_t bs, const char *key)
{
    return b->captured && b->key.bs >= bs && key_info_equal(b->key.cg_key_info, key) &&
           mstar__config_replays(config_of(r, b), walk);
}

static const struct bucket *select_bucket(const mstar_graph_runner *r, const char *walk, int64_t bs,
                                          int64_t num_tokens, const char *key)
{
    const struct bucket *best = NULL;
    for (size_t i = 0; walk != NULL && i < r->set.all.len; i++) {
        const struct bucket *b = mstar__buckets_at(&r->set, i);
        if (!candidate(r, b, walk, bs, key))
            continue;
        /* The request counts input tokens; the bucket counts the tokens its plan carries. */
        int64_t need = num_tokens * config_of(r, b)->plan_tokens_per_input_token;
        if (b->key.num_tokens < need)
            continue;
        if (best == NULL || b->key.num_tokens < best->key.num_tokens ||
            (b->key.num_tokens == best->key.num_tokens && b->key.bs < best->key.bs))
            best = b;
    }
    return best;
}

static const struct bucket *select_batched(const mstar_graph_runner *r, const char *walk,
                                           int64_t bs, const char *key)
{
    const struct bucket *best = NULL;
    for (size_t i = 0; walk != NULL && i < r->set.all.len; i++) {
        const struct bucket *b = mstar__buckets_at(&r->set, i);
        const mstar_graph_config *c = config_of(r, b);
        if (!candidate(r, b, walk, bs, key) || c->kind != MSTAR_GRAPH_BATCHED ||
            b->key.num_tokens != mstar__config_batched_tokens(c, b->key.bs))
            continue;
        if (best == NULL || b->key.bs < best->key.bs ||
            (b->key.bs == best->key.bs && b->key.num_tokens < best->key.num_tokens))
            best = b;
    }
    return best;
}

bool mstar_graph_runner_select_bucket(const mstar_graph_runner *r, const char *walk, int64_t bs,
                                      int64_t num_tokens, const char *key, mstar_bucket_key *out)
{
    const struct bucket *b = num_tokens < 0 ? select_batched(r, walk, bs, key)
                                            : select_bucket(r, walk, bs, num_tokens, key);
    if (b != NULL && out != NULL)
        *out = b->key;
    return b != NULL;
}

bool mstar_graph_runner_select_batched_bucket(const mstar_graph_runner *r, const char *walk,
                                              int64_t bs, const char *key, mstar_bucket_key *out)
{
    const struct bucket *b = select_batched(r, walk, bs, key);
    if (b != NULL && out != NULL)
        *out = b->key;
    return b != NULL;
}

bool mstar_graph_runner_lease_slot(mstar_graph_runner *r, const char *walk, int64_t bs,
                                   int32_t slot, int64_t num_tokens, const char *key,
                                   mstar_slot_lease *out)
{
    const struct bucket *b = num_tokens < 0 ? select_batched(r, walk, bs, key)
                                            : select_bucket(r, walk, bs, num_tokens, key);
    if (b == NULL)
        return false;
    if (slot < 0)
        slot = mstar__step_runner_next_slot(r->sr, r->num_slots);
    /* The key names the capture walk even when `walk` is an alias (design.md "Buckets", G-14). */
    out->slot = slot % r->num_slots;
    MSTAR__ASSERT(strcmp(b->key.graph_walk, config_of(r, b)->capture_graph_walk) == 0); /* I-22 */
    out->bucket = b->key;
    return true;
}

bool mstar_graph_runner_can_run(const mstar_graph_runner *r, const char *walk, int64_t bs,
                                int64_t num_tokens, const char *key)
{
    return mstar_graph_runner_select_bucket(r, walk, bs, num_tokens, key, NULL);
}

bool mstar_graph_runner_captures_walk(const mstar_graph_runner *r, const char *walk)
{
    for (size_t i = 0; walk != NULL && i < r->set.all.len; i++) {
        const struct bucket *b = mstar__buckets_at(&r->set, i);
        if (b->captured && mstar__config_replays(config_of(r, b), walk))
            return true;
    }
    return false;
}

bool mstar_graph_runner_any_graphs(const mstar_graph_runner *r)
{
    return mstar__buckets_any_captured(&r->set);
}

int64_t mstar_graph_runner_max_batch_size_for(const mstar_graph_runner *r, const char *walk)
{
    /* Configured sizes, captured or not (design.md "Lookup", G-20): a dropped largest bucket still
     * caps the batch, and those batches run eager rather than being split differently per rank. */
    int64_t cap = -1;
    for (size_t i = 0; walk != NULL && i < r->n_configs; i++) {
        const mstar_graph_config *c = &r->configs[i];
        if (!c->caps_eager_batch_size || !mstar__config_replays(c, walk))
            continue;
        int64_t largest = c->capture_batch_sizes[c->n_capture_batch_sizes - 1];
        if (largest > cap)
            cap = largest;
    }
    return cap;
}

static const struct bucket *leased_bucket(const mstar_graph_runner *r,
                                          const mstar_slot_lease *lease)
{
    if (lease == NULL || lease->slot < 0 || lease->slot >= r->num_slots)
        return NULL;
    const struct bucket *b = mstar__runner_find_bucket(r, &lease->bucket);
    return b != NULL && b->captured ? b : NULL;
}

bool mstar_graph_runner_is_packed(const mstar_graph_runner *r, const mstar_slot_lease *lease)
{
    const struct bucket *b = leased_bucket(r, lease);
    return b != NULL && config_of(r, b)->kind == MSTAR_GRAPH_PACKED;
}

const mstar_graph_config *mstar_graph_runner_config_for(const mstar_graph_runner *r,
                                                        const mstar_slot_lease *lease,
                                                        uint32_t *config_idx)
{
    const struct bucket *b = leased_bucket(r, lease);
    if (b == NULL)
        return NULL;
    if (config_idx != NULL)
        *config_idx = b->config_idx;
    return config_of(r, b);
}

const mstar_graph_slot *mstar_graph_runner_slot_for(const mstar_graph_runner *r,
                                                    const mstar_slot_lease *lease)
{
    const struct bucket *b = leased_bucket(r, lease);
    return b == NULL ? NULL : b->slots[lease->slot];
}

/* ---- padding (design.md "Padding rows") ---------------------------------------------------------
 */

static mstar_status lease_check(const mstar_graph_runner *r, const mstar_slot_lease *lease,
                                size_t n, const struct bucket **out)
{
    const struct bucket *b = leased_bucket(r, lease);
    if (b == NULL)
        return mstar_error_set(MSTAR_ENOENT,
                               "graph runner %s: the lease names no captured "
                               "bucket or slot",
                               r->name);
    if ((int64_t)n > b->key.bs)
        return mstar_error_set(MSTAR_EINVAL, "graph runner %s: %zu rows do not fit bucket bs %lld",
                               r->name, n, (long long)b->key.bs);
    *out = b;
    return MSTAR_OK;
}

mstar_status mstar_graph_runner_pad_inputs(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                           const mstar_node_input *inputs, size_t n,
                                           mstar_node_input *out)
{
    const struct bucket *b = NULL;
    mstar_status st = lease_check(r, lease, n, &b);
    if (st != MSTAR_OK)
        return st;
    struct template_row *t;
    /* any row's template serves: padding cuts it to length 0 */
    if ((st = mstar__runner_template(r, b->config_idx, b->row_lens[0], &t)) != MSTAR_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        out[i] = inputs[i];
    for (int64_t i = (int64_t)n; i < b->key.bs; i++)
        out[i] = (mstar_node_input){ 0, t->empty }; /* length 0: admit reserves nothing */
    return MSTAR_OK;
}

/* The real rows first, then the slot's padding rows [n, bs): the one shape of step_ids and
 * step_metadata: `metadata` picks the slot's dummy_metadata, else its dummy_rids. */
static mstar_status pad_rows(mstar_graph_runner *r, const mstar_slot_lease *lease, const void *real,
                             size_t n, bool metadata, void *out)
{
    const struct bucket *b = NULL;
    mstar_status st = lease_check(r, lease, n, &b);
    if (st != MSTAR_OK)
        return st;
    const struct mstar_graph_slot *s = b->slots[lease->slot];
    size_t elem = metadata ? sizeof(*s->dummy_metadata) : sizeof(*s->dummy_rids);
    const char *pad = metadata ? (const char *)s->dummy_metadata : (const char *)s->dummy_rids;
    if (n != 0)
        memcpy(out, real, n * elem);
    memcpy((char *)out + n * elem, pad + n * elem, ((size_t)b->key.bs - n) * elem);
    return MSTAR_OK;
}

mstar_status mstar_graph_runner_step_ids(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                         const int64_t *real_ids, size_t n, int64_t *out)
{
    return pad_rows(r, lease, real_ids, n, false, out);
}

mstar_status mstar_graph_runner_step_metadata(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                              const mstar_forward_info *real, size_t n,
                                              mstar_forward_info *out)
{
    return pad_rows(r, lease, real, n, true, out);
}

mstar_status mstar_graph_runner_declare_inputs_for(mstar_graph_runner *r,
                                                   const mstar_slot_lease *lease,
                                                   const mstar_node_input **rows, size_t *n)
{
    const struct bucket *cb = NULL;
    mstar_status st = lease_check(r, lease, 0, &cb);
    if (st != MSTAR_OK)
        return st;
    struct bucket *b = (struct bucket *)cb;
    if (b->declare_rows == NULL) {
        mstar_node_input *built = calloc((size_t)b->key.bs, sizeof(*built));
        if (built == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "declare_inputs_for: out of memory");
        if ((st = mstar__runner_node_inputs(r, b, built)) != MSTAR_OK) {
            free(built);
            return st;
        }
        b->declare_rows = built;
    }
    *rows = b->declare_rows;
    *n = (size_t)b->key.bs;
    return MSTAR_OK;
}

mstar_status mstar_graph_runner_release(mstar_graph_runner *r, const mstar_slot_lease *lease,
                                        int64_t real_bs)
{
    /* A negative count would index the slot's padding rows before their start. */
    if (real_bs < 0)
        return mstar_error_set(MSTAR_EINVAL, "graph runner %s: release with real_bs %lld < 0",
                               r->name, (long long)real_bs);
    const struct bucket *b = NULL;
    mstar_status st = lease_check(r, lease, (size_t)real_bs, &b);
    if (st != MSTAR_OK)
        return st;
    const struct mstar_graph_slot *s = b->slots[lease->slot];
    /* Padding rows run against the sinks, so nothing of theirs stays resident (I-16, G-13). */
    return mstar_dummy_rows_reset(r->rows, s->dummy_rids + real_bs, (size_t)(b->key.bs - real_bs),
                                  true);
}

const mstar_bucket_key *mstar_graph_runner_dropped_buckets(const mstar_graph_runner *r, size_t *n)
{
    *n = r->set.dropped.len;
    return r->set.dropped.data;
}

mstar_status mstar_graph_runner_drop_bucket(mstar_graph_runner *r, const mstar_bucket_key *key)
{
    return mstar__buckets_drop(&r->set, key);
}
