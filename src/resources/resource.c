/*
 * resource.c — the step checks and the step-runner adapter both reference resources share (see
 * resource.h).
 */
#include "resource.h"

#include <stdlib.h>
#include <string.h>

mstar_status mstar__resource_step_check(const mstar_resource_step *step, int32_t num_labels,
                                        const char *what)
{
    if (step == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: step is NULL", what);
    if (step->num_segments > 0 && step->segments == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: step.segments is NULL for %zu segments", what,
                               step->num_segments);
    if (step->num_segments > INT32_MAX)
        return mstar_error_set(MSTAR_EINVAL, "%s: %zu segments, at most %d", what,
                               step->num_segments, INT32_MAX);
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->label >= (uint32_t)num_labels)
            return mstar_error_set(MSTAR_EINVAL, "%s: segments[%zu].label %u, not below %d", what,
                                   i, g->label, num_labels);
        if (g->span < 0 || g->span > INT32_MAX)
            return mstar_error_set(MSTAR_EINVAL, "%s: segments[%zu].span %lld, not in [0, %d]",
                                   what, i, (long long)g->span, INT32_MAX);
    }
    return MSTAR_OK;
}

void mstar__resource_adapter_init(mstar__resource_adapter *ad, const mstar__resource_class *cls,
                                  void *res, const mstar__plan_store *plans)
{
    ad->cls = cls;
    ad->res = res;
    ad->plans = plans;
    ad->key = NULL;
}

void mstar__resource_adapter_free(mstar__resource_adapter *ad)
{
    free(ad->key);
    ad->key = NULL;
}

/* The step as the resource sees it: the step's segments and its payload's commit flag.
 * MSTAR_EINVAL for a payload of the wrong size. */
static mstar_status view(const mstar__resource_adapter *ad, const mstar_step *step,
                         mstar_resource_step *out)
{
    size_t size = 0, n = 0;
    const mstar_resource_payload *p = mstar_step_resource(step, ad->key, &size);
    if (p == NULL || size != sizeof(*p))
        return mstar_error_set(MSTAR_EINVAL,
                               "resource '%s': the step's payload has %zu bytes, a "
                               "mstar_resource_payload has %zu",
                               ad->key, size, sizeof(*p));
    out->segments = mstar_step_segments(step, &n);
    out->num_segments = n;
    out->commit = p->commit;
    return MSTAR_OK;
}

/* Where a plan goes: a pre-plan to the lease's slot, a leased step to its slot, both for the
 * lease's bucket (rows = bs, tokens = num_tokens); an unleased step to the eager state, for
 * `eager_rows` rows and `eager_tokens` tokens. MSTAR_ERANGE for a bucket past int32. */
static mstar_status target(const mstar_step_ctx *ctx, bool preplan, int64_t eager_rows,
                           int64_t eager_tokens, int32_t *slot, int32_t *rows, int32_t *tokens)
{
    int64_t r = eager_rows, t = eager_tokens;
    *slot = MSTAR_PLAN_EAGER;
    if (ctx->has_lease && (preplan || ctx->slot >= 0)) {
        *slot = preplan ? ctx->lease.slot : ctx->slot;
        r = ctx->lease.bucket.bs;
        t = ctx->lease.bucket.num_tokens;
    }
    if (r < 0 || r > INT32_MAX || t < 0 || t > INT32_MAX)
        return mstar_error_set(MSTAR_ERANGE, "a bucket of %lld rows and %lld tokens", (long long)r,
                               (long long)t);
    *rows = (int32_t)r;
    *tokens = (int32_t)t;
    return MSTAR_OK;
}

/* ---- the step runner's ops ------------------------------------------------------------------- */

static mstar_status op_admit(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    const mstar__resource_adapter *ad = self;
    if (ad->cls->admit == NULL)
        return MSTAR_OK;
    mstar_resource_step rs;
    mstar_status st = view(ad, step, &rs);
    if (st == MSTAR_OK)
        st = ad->cls->admit(ad->res, &rs, out);
    if (st == MSTAR_ENOSPC) {
        out->ready = true; /* short of capacity: a result (out->ok is false), not an error */
        mstar_error_clear();
        return MSTAR_OK;
    }
    return st;
}

static mstar_status plan_into(const mstar__resource_adapter *ad, mstar_step *step, bool preplan)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    mstar_resource_step rs;
    mstar_status st = view(ad, step, &rs);
    if (st != MSTAR_OK)
        return st;
    int64_t eager_rows, eager_tokens;
    ad->cls->eager_size(ad->res, &rs, &eager_rows, &eager_tokens);
    int32_t slot, rows = 0, tokens = 0;
    if (target(ctx, preplan, eager_rows, eager_tokens, &slot, &rows, &tokens) != MSTAR_OK)
        return mstar_error_wrap("%s plan", ad->cls->what);
    return ad->cls->plan(ad->res, slot, &rs, rows, tokens, preplan, ctx->stream);
}

static mstar_status op_plan(void *self, mstar_step *step)
{
    return plan_into(self, step, false);
}

static mstar_status op_pre_plan(void *self, mstar_step *step)
{
    return plan_into(self, step, true);
}

static mstar_status op_commit(void *self, mstar_step *step)
{
    const mstar__resource_adapter *ad = self;
    mstar_resource_step rs;
    mstar_status st = view(ad, step, &rs);
    return st != MSTAR_OK ? st : ad->cls->commit(ad->res, &rs);
}

/* `slot` only, or every slot for -1. */
static void op_clear_preplan(void *self, int32_t slot)
{
    const mstar__resource_adapter *ad = self;
    for (int32_t s = 0; s < ad->plans->num_slots; s++) {
        if (slot < 0 || s == slot)
            ad->cls->clear_preplan(ad->res, s);
    }
}

static mstar_status op_ingest(void *self, int64_t request)
{
    const mstar__resource_adapter *ad = self;
    return ad->cls->ingest(ad->res, request);
}

static mstar_status op_reset(void *self, int64_t request, bool free_storage)
{
    const mstar__resource_adapter *ad = self;
    return ad->cls->reset(ad->res, request, free_storage);
}

/* The runner's remove cannot fail: an unknown request is only worth a debug line. */
static void op_remove(void *self, int64_t request)
{
    const mstar__resource_adapter *ad = self;
    if (ad->cls->remove(ad->res, request) != MSTAR_OK)
        mstar_log(MSTAR_LOG_DEBUG, "%s: %s", ad->cls->what, mstar_last_error());
}

/* Slots, rows and tokens from the capture jobs. Page tables keep their own sizing (the KV cache's
 * max_seq_len, which admit enforces per stream), so max_bs and max_seq_len are not used. */
static mstar_status op_build(void *self, const mstar_cg_slot_spec *specs, size_t n, int64_t max_bs,
                             int64_t max_seq_len)
{
    const mstar__resource_adapter *ad = self;
    if (n == 0)
        return MSTAR_OK;
    int64_t slots = 0, rows = 0, tokens = 0;
    for (size_t i = 0; i < n; i++) {
        slots = specs[i].slot + 1 > slots ? specs[i].slot + 1 : slots;
        rows = specs[i].bucket.bs > rows ? specs[i].bucket.bs : rows;
        tokens = specs[i].bucket.num_tokens > tokens ? specs[i].bucket.num_tokens : tokens;
    }
    if (rows > INT32_MAX || tokens > INT32_MAX || slots > INT32_MAX)
        return mstar_error_set(MSTAR_ERANGE, "%s: capture jobs of %lld rows and %lld tokens",
                               ad->cls->what, (long long)rows, (long long)tokens);
    return ad->cls->build(ad->res, (int32_t)slots, (int32_t)rows, (int32_t)tokens);
}

static mstar_status op_validate(void *self)
{
    const mstar__resource_adapter *ad = self;
    return ad->cls->post_warmup_validate == NULL ? MSTAR_OK
                                                 : ad->cls->post_warmup_validate(ad->res);
}

static const mstar_resource_ops adapter_ops = {
    .supports_preplan = true,
    .admit = op_admit,
    .plan = op_plan,
    .commit = op_commit,
    .pre_admit = op_admit,
    .pre_plan = op_pre_plan,
    .clear_preplan = op_clear_preplan,
    .ingest_request = op_ingest,
    .reset_request = op_reset,
    .remove_request = op_remove,
    .build_graph_buffers = op_build,
    .post_warmup_validate = op_validate,
};

mstar_status mstar__resource_adapter_register(mstar__resource_adapter *ad,
                                              mstar_step_runner *step_runner, const char *key)
{
    const char *what = ad->cls->what;
    if (step_runner == NULL || key == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s register: NULL argument", what);
    if (ad->key != NULL)
        return mstar_error_set(MSTAR_ESTATE, "%s register: already registered as '%s'", what,
                               ad->key);
    char *copy = strdup(key);
    if (copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "%s register", what);
    mstar_status st = mstar_step_runner_add_resource(step_runner, key, &adapter_ops, ad, NULL, 0);
    if (st != MSTAR_OK) {
        free(copy);
        return st;
    }
    ad->key = copy;
    return MSTAR_OK;
}
