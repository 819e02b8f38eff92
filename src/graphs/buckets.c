/*
 * buckets.c — a runner's buckets and their graphs, shared by the whole-forward and the piecewise
 * runner: the registry in capture order, claims, drops, and the driver that warms and captures
 * every (bucket, slot).
 *
 * Every configured bucket exists from creation; capture marks the ones that made it, and lookups
 * see only those. A bucket's slots are captured together: if any slot fails the whole bucket is
 * dropped, so no lease can land on a hole (design.md "Buckets"). Capture goes largest first
 * (design.md "Capture order and interning"): static input interning sizes its buffers by the first
 * capture, and the smaller graphs reuse the largest one's transient pool blocks.
 */
#include "graphs/buckets.h"

#include "core/assert.h"
#include "step/step_runner.h"

#include <stdlib.h>
#include <string.h>

/* ---- slots ------------------------------------------------------------------------------------
 */

mstar_status mstar__slot_new(const mstar_bucket_key *key, uint32_t config_idx,
                             struct mstar_graph_slot **out)
{
    struct mstar_graph_slot *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "graph runner: out of memory");
    mstar__vec_init(&s->seq_dims, sizeof(int32_t));
    mstar__vec_init(&s->copy_nodes, sizeof(uint32_t));
    s->config_idx = config_idx;
    s->n_rows = (size_t)key->bs;
    s->dummy_metadata = calloc((size_t)key->bs, sizeof(*s->dummy_metadata));
    mstar_status st = s->dummy_metadata == NULL
                          ? mstar_error_set(MSTAR_ENOMEM, "graph runner: out of memory")
                          : mstar_tensor_map_create(&s->static_inputs);
    if (st == MSTAR_OK)
        st = mstar_tensor_map_create(&s->static_outputs);
    if (st != MSTAR_OK) {
        mstar__slot_free(s);
        return st;
    }
    for (int64_t i = 0; i < key->bs; i++)
        s->dummy_metadata[i] = mstar_dummy_metadata(key->graph_walk);
    *out = s;
    return MSTAR_OK;
}

void mstar__slot_free(struct mstar_graph_slot *s)
{
    if (s == NULL)
        return;
    mstar_graph_destroy(s->graph);
    mstar_tensor_map_destroy(s->static_inputs);
    mstar_tensor_map_destroy(s->static_outputs);
    mstar__vec_free(&s->seq_dims);
    mstar__vec_free(&s->copy_nodes);
    free(s->dummy_metadata);
    free(s);
}

const mstar_graph *mstar_graph_slot_graph(const mstar_graph_slot *s)
{
    return s->graph;
}

const mstar_tensor_map *mstar_graph_slot_static_inputs(const mstar_graph_slot *s)
{
    return s->static_inputs;
}

const mstar_tensor_map *mstar_graph_slot_static_outputs(const mstar_graph_slot *s)
{
    return s->static_outputs;
}

const int64_t *mstar_graph_slot_dummy_rids(const mstar_graph_slot *s, size_t *n)
{
    if (n != NULL)
        *n = s->n_rows;
    return s->dummy_rids;
}

/* ---- the registry -----------------------------------------------------------------------------
 */

void mstar__buckets_init(mstar__buckets *set, const char *who, int32_t num_slots)
{
    memset(set, 0, sizeof(*set));
    set->who = who;
    set->num_slots = num_slots;
    mstar__vec_init(&set->all, sizeof(struct bucket *));
    mstar__vec_init(&set->keys, sizeof(mstar_bucket_key));
    mstar__vec_init(&set->dropped, sizeof(mstar_bucket_key));
    mstar__vec_init(&set->specs, sizeof(mstar_cg_slot_spec));
}

void mstar__bucket_uncapture(const mstar__buckets *set, struct bucket *b)
{
    for (int32_t i = 0; i < set->num_slots; i++) {
        mstar__slot_free(b->slots[i]);
        b->slots[i] = NULL;
    }
    b->captured = false;
}

static void bucket_free(const mstar__buckets *set, struct bucket *b)
{
    if (b == NULL)
        return;
    if (b->slots != NULL)
        mstar__bucket_uncapture(set, b);
    free(b->slots);
    free(b->row_lens);
    free(b->declare_rows);
    mstar__lifetimes_free(&b->hints);
    mstar_tensor_map_destroy(b->warm_layout);
    free(b);
}

void mstar__buckets_free(mstar__buckets *set)
{
    for (size_t i = 0; i < set->all.len; i++)
        bucket_free(set, mstar__buckets_at(set, i));
    mstar__vec_free(&set->all);
    mstar__vec_free(&set->keys);
    mstar__vec_free(&set->dropped);
    mstar__vec_free(&set->specs);
}

struct bucket *mstar__buckets_find(const mstar__buckets *set, const mstar_bucket_key *key)
{
    for (size_t i = 0; key != NULL && i < set->all.len; i++) {
        if (mstar_bucket_key_equal(&mstar__buckets_at(set, i)->key, key))
            return mstar__buckets_at(set, i);
    }
    return NULL;
}

mstar_status mstar__buckets_add(mstar__buckets *set, const mstar_bucket_key *key,
                                uint32_t config_idx, int64_t seq_len, int64_t tokens)
{
    const struct bucket *same = mstar__buckets_find(set, key);
    if (same != NULL) {
        char name[MSTAR_BUCKET_NAME_MAX];
        return mstar_error_set(MSTAR_EINVAL,
                               "config %u: bucket %s is already captured by config %u (give "
                               "one of them a cg_key_info)",
                               config_idx, mstar_bucket_key_format(key, name, sizeof(name)),
                               same->config_idx);
    }
    struct bucket *b = calloc(1, sizeof(*b));
    if (b == NULL || (b->slots = calloc((size_t)set->num_slots, sizeof(*b->slots))) == NULL ||
        (b->row_lens = calloc((size_t)key->bs, sizeof(*b->row_lens))) == NULL) {
        bucket_free(set, b);
        return mstar_error_set(MSTAR_ENOMEM, "%s: out of memory", set->who);
    }
    mstar__lifetimes_init(&b->hints);
    b->key = *key;
    b->config_idx = config_idx;
    for (int64_t i = 0; i < key->bs; i++)
        b->row_lens[i] = seq_len > 0 ? seq_len : tokens / key->bs + (i == 0 ? tokens % key->bs : 0);
    mstar_status st = mstar__vec_push(&set->all, &b);
    if (st != MSTAR_OK)
        bucket_free(set, b);
    return st;
}

static int cmp_bucket_desc(const void *pa, const void *pb)
{
    const struct bucket *a = *(struct bucket *const *)pa, *b = *(struct bucket *const *)pb;
    if (a->key.bs != b->key.bs)
        return a->key.bs > b->key.bs ? -1 : 1;
    if (a->key.num_tokens != b->key.num_tokens)
        return a->key.num_tokens > b->key.num_tokens ? -1 : 1;
    return (a->config_idx > b->config_idx) - (a->config_idx < b->config_idx);
}

mstar_status mstar__buckets_order(mstar__buckets *set)
{
    qsort(set->all.data, set->all.len, sizeof(struct bucket *), cmp_bucket_desc);
    set->keys.len = 0;
    for (size_t i = 0; i < set->all.len; i++) {
        /* I-21: largest first */
        MSTAR__ASSERT(i == 0 || cmp_bucket_desc(mstar__vec_at(&set->all, i - 1),
                                                mstar__vec_at(&set->all, i)) <= 0);
        mstar_status st = mstar__vec_push(&set->keys, &mstar__buckets_at(set, i)->key);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

bool mstar__buckets_any_captured(const mstar__buckets *set)
{
    for (size_t i = 0; i < set->all.len; i++) {
        if (mstar__buckets_at(set, i)->captured)
            return true;
    }
    return false;
}

mstar_status mstar__buckets_drop(mstar__buckets *set, const mstar_bucket_key *key)
{
    struct bucket *b = mstar__buckets_find(set, key);
    if (b == NULL)
        return mstar_error_set(MSTAR_ENOENT, "%s: no such bucket", set->who);
    if (!b->captured)
        return MSTAR_OK;
    mstar__bucket_uncapture(set, b);
    return mstar__vec_push(&set->dropped, &b->key);
}

mstar_status mstar__buckets_claim(mstar__buckets *set, mstar_step_runner *sr,
                                  const mstar_cg_slot_spec **specs, size_t *n)
{
    set->specs.len = 0;
    int64_t max_bs = 0, max_tokens = 0;
    for (size_t i = 0; i < set->all.len; i++) {
        const struct bucket *b = mstar__buckets_at(set, i);
        for (int32_t s = 0; s < set->num_slots; s++) {
            mstar_cg_slot_spec spec = { b->key, s, b->config_idx };
            mstar_status st = mstar__vec_push(&set->specs, &spec);
            if (st != MSTAR_OK)
                return st;
        }
        if (b->key.bs > max_bs)
            max_bs = b->key.bs;
        if (b->key.num_tokens > max_tokens)
            max_tokens = b->key.num_tokens;
    }
    if (mstar_step_runner_claim(sr, set->specs.data, set->specs.len, max_bs, max_tokens) !=
        MSTAR_OK)
        return mstar_error_wrap("%s: prepare_for_capture", set->who);
    if (specs != NULL)
        *specs = set->specs.data;
    if (n != NULL)
        *n = set->specs.len;
    return MSTAR_OK;
}

/* ---- warming and capturing --------------------------------------------------------------------
 */

void mstar__spec_peak_begin(mstar_backend *backend, uint64_t *base)
{
    mstar_alloc_stats now;
    mstar_caching_stats(backend, &now);
    *base = now.allocated;
    mstar_caching_reset_peak(backend);
}

void mstar__spec_peak_end(mstar_backend *backend, uint64_t base, const mstar__spec_job *job)
{
    if (job->peak == NULL)
        return;
    mstar_alloc_stats now;
    mstar_caching_stats(backend, &now);
    *job->peak = now.peak > base ? now.peak - base : 0;
}

mstar_status mstar__spec_capturable(const mstar_step_runner *sr, const mstar_step *step)
{
    const char *blocked[8];
    size_t nb = mstar_blocked_capture_resources(sr, step, blocked, 8);
    if (nb == 0)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_ENOTSUP, "resource '%s'%s cannot capture this step", blocked[0],
                           nb > 1 ? " and others" : "");
}

mstar_status mstar__spec_finish(const mstar__buckets *set, const struct bucket *b, int32_t slot,
                                const mstar__spec_job *job, mstar_status st,
                                struct mstar_graph_slot *s, struct mstar_graph_slot **slot_out)
{
    if (st == MSTAR_OK && job->capture && job->throwaway != NULL) {
        *job->throwaway = s->graph;
        s->graph = NULL;
        mstar__slot_free(s);
    } else if (st == MSTAR_OK && job->capture) {
        *slot_out = s;
    } else {
        mstar__slot_free(s);
    }
    if (st != MSTAR_OK) {
        char name[MSTAR_BUCKET_NAME_MAX];
        mstar_error_wrap("%s: %s slot %d", set->who,
                         mstar_bucket_key_format(&b->key, name, sizeof(name)), (int)slot);
    }
    return st;
}

static mstar_status find_or_fail(const mstar__buckets *set, const mstar_bucket_key *key,
                                 struct bucket **out)
{
    *out = mstar__buckets_find(set, key);
    if (*out == NULL)
        return mstar_error_set(MSTAR_ENOENT, "%s: no such bucket", set->who);
    return MSTAR_OK;
}

mstar_status mstar__buckets_warm(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                 const mstar_bucket_key *key, uint64_t *peak)
{
    struct bucket *b;
    mstar_status st = find_or_fail(set, key, &b);
    uint64_t most = 0;
    for (int32_t s = 0; st == MSTAR_OK && s < set->num_slots; s++) {
        uint64_t p = 0;
        mstar__spec_job job = { .peak = &p };
        st = fn(runner, b, s, &job, NULL);
        if (p > most)
            most = p;
    }
    if (st == MSTAR_OK && peak != NULL)
        *peak = most;
    return st;
}

mstar_status mstar__buckets_throwaway(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                      const mstar_bucket_key *key, unsigned flags,
                                      mstar_graph **out, mstar_capture_stats *stats)
{
    struct bucket *b;
    mstar_status st = find_or_fail(set, key, &b);
    if (st == MSTAR_OK && out == NULL)
        st = mstar_error_set(MSTAR_EINVAL, "capture_throwaway: out is NULL");
    bool no_warmup = (flags & MSTAR__CAPTURE_NO_WARMUP) != 0;
    if (st == MSTAR_OK && no_warmup && !b->warmed) {
        char name[MSTAR_BUCKET_NAME_MAX];
        st = mstar_error_set(MSTAR_ESTATE,
                             "%s: %s was never warmed up, so it cannot be captured "
                             "without a warm-up",
                             set->who, mstar_bucket_key_format(&b->key, name, sizeof(name)));
    }
    mstar__spec_job job = { .capture = true,
                            .no_warmup = no_warmup,
                            .flags = flags & ~MSTAR__CAPTURE_NO_WARMUP,
                            .throwaway = out,
                            .stats = stats };
    return st != MSTAR_OK ? st : fn(runner, b, 0, &job, NULL);
}

static bool is_planned(const mstar_bucket_key *planned, size_t n, const mstar_bucket_key *k)
{
    for (size_t i = 0; i < n; i++) {
        if (mstar_bucket_key_equal(&planned[i], k))
            return true;
    }
    return false;
}

mstar_status mstar__buckets_capture(mstar__buckets *set, mstar__spec_fn fn, void *runner,
                                    mstar_step_runner *sr, const mstar_bucket_key *planned,
                                    size_t n)
{
    if (!mstar_step_runner_buffers_built(sr))
        return mstar_error_set(MSTAR_ESTATE,
                               "%s: build the graph buffers first (every runner's "
                               "prepare_for_capture, then mstar_step_runner_build_graph_buffers)",
                               set->who);
    set->dropped.len = 0;
    mstar__spec_job job = { .capture = true };
    for (size_t i = 0; i < set->all.len; i++) { /* capture order: largest first */
        struct bucket *b = mstar__buckets_at(set, i);
        if (b->captured)
            continue;
        mstar_status st = MSTAR_OK;
        if (planned != NULL && !is_planned(planned, n, &b->key)) {
            if ((st = mstar__vec_push(&set->dropped, &b->key)) != MSTAR_OK)
                return st;
            continue;
        }
        for (int32_t s = 0; st == MSTAR_OK && s < set->num_slots; s++)
            st = fn(runner, b, s, &job, &b->slots[s]);
        if (st == MSTAR_OK) {
            b->captured = true;
            continue;
        }
        /* A hole in a bucket's slots would let a lease land on nothing: drop it whole (design.md
         * "Buckets"). */
        mstar_log(MSTAR_LOG_WARN, "%s: dropped a bucket: %s", set->who, mstar_last_error());
        mstar__bucket_uncapture(set, b);
        if ((st = mstar__vec_push(&set->dropped, &b->key)) != MSTAR_OK)
            return st;
    }
    mstar_error_clear();
    return MSTAR_OK;
}
