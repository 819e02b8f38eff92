/*
 * positions.c — the positions resource (see mstar/resources.h).
 *
 * One counter per real request, shared by its labels. A plan block is `tokens` int32 positions,
 * one per token of the step in segment order, zero past the step's tokens. Rows of one request in
 * one step (its labels) must agree on their span; commit advances each request once by it. The
 * end of the file describes the resource's calls to the step-runner adapter (resource.h).
 */
#include "mstar/resources.h"

#include "requests.h"
#include "resource.h"

#include <stdlib.h>
#include <string.h>

typedef struct pos_request {
    int64_t next;
    int32_t span; /* this epoch's span, once marked */
    uint32_t mark;
} pos_request;

struct mstar_positions {
    mstar__u64map requests; /* request handle → pos_request* */
    uint32_t epoch;
    mstar__plan_store plans;
    int32_t slot_tokens, eager_tokens;
    mstar__resource_adapter adapter; /* what a step runner calls */
};

static const mstar__resource_class positions_class;

mstar_status mstar_positions_create(mstar_backend *backend, mstar_positions **out)
{
    if (backend == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "positions: backend and out must not be NULL");
    mstar_positions *pos = calloc(1, sizeof(*pos));
    if (pos == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "positions");
    mstar__u64map_init(&pos->requests);
    mstar__plan_store_init(&pos->plans, backend, 1);
    mstar__resource_adapter_init(&pos->adapter, &positions_class, pos, &pos->plans);
    *out = pos;
    return MSTAR_OK;
}

void mstar_positions_destroy(mstar_positions *pos)
{
    if (pos == NULL)
        return;
    size_t it = 0;
    pos_request *r;
    while ((r = mstar__requests_next(&pos->requests, &it)) != NULL)
        free(r);
    mstar__u64map_free(&pos->requests);
    mstar__plan_store_free(&pos->plans);
    mstar__resource_adapter_free(&pos->adapter);
    free(pos);
}

mstar_status mstar_positions_build_plans(mstar_positions *pos, int32_t num_slots,
                                         int32_t max_tokens)
{
    if (num_slots < 1 || max_tokens < 1)
        return mstar_error_set(MSTAR_EINVAL,
                               "positions: build_plans(num_slots %d, max_tokens %d): "
                               "each must be at least 1",
                               num_slots, max_tokens);
    int32_t tokens = max_tokens > pos->slot_tokens ? max_tokens : pos->slot_tokens;
    if (mstar__plan_store_build(&pos->plans, num_slots, (size_t)tokens) != MSTAR_OK)
        return mstar_error_wrap("positions");
    pos->slot_tokens = tokens;
    return MSTAR_OK;
}

static pos_request *find_request(const mstar_positions *pos, int64_t request)
{
    return mstar__requests_find(&pos->requests, request);
}

static mstar_status lookup(const mstar_positions *pos, int64_t request, pos_request **out)
{
    void *r;
    mstar_status st = mstar__requests_lookup(&pos->requests, request, "positions", &r);
    *out = r;
    return st;
}

mstar_status mstar_positions_ingest(mstar_positions *pos, int64_t request)
{
    if (request < 0)
        return MSTAR_OK;
    pos_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "positions: request %lld", (long long)request);
    mstar_status st = mstar__requests_add(&pos->requests, request, r, "positions");
    if (st != MSTAR_OK)
        free(r);
    return st;
}

mstar_status mstar_positions_reset(mstar_positions *pos, int64_t request)
{
    if (request < 0)
        return MSTAR_OK;
    pos_request *r;
    mstar_status st = lookup(pos, request, &r);
    if (st == MSTAR_OK)
        r->next = 0;
    return st;
}

mstar_status mstar_positions_remove(mstar_positions *pos, int64_t request)
{
    if (request < 0)
        return MSTAR_OK;
    void *r;
    mstar_status st = mstar__requests_take(&pos->requests, request, "positions", &r);
    if (st == MSTAR_OK)
        free(r);
    return st;
}

/* Mark each real request of the step once, checking its rows agree on the span and that its
 * positions fit the int32 buffers. *tokens gets the step's token count. */
static mstar_status mark_requests(mstar_positions *pos, const mstar_resource_step *step,
                                  const char *what, int64_t *tokens)
{
    mstar_status st = mstar__resource_step_check(step, INT32_MAX, what); /* any label */
    if (st != MSTAR_OK)
        return st;
    if (++pos->epoch == 0) {
        /* Wrapped: clear every mark so no request looks already seen. */
        size_t it = 0;
        pos_request *r;
        while ((r = mstar__requests_next(&pos->requests, &it)) != NULL)
            r->mark = 0;
        pos->epoch = 1;
    }
    *tokens = 0;
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        *tokens += g->span;
        if (g->request < 0)
            continue;
        pos_request *r;
        if (lookup(pos, g->request, &r) != MSTAR_OK)
            return mstar_error_wrap("%s: segments[%zu]", what, i);
        if (r->mark == pos->epoch) {
            if (r->span != g->span)
                return mstar_error_set(MSTAR_EINVAL,
                                       "%s: request %lld has rows of span %d and "
                                       "%lld in one step",
                                       what, (long long)g->request, r->span, (long long)g->span);
            continue;
        }
        if (r->next + g->span > INT32_MAX)
            return mstar_error_set(MSTAR_ERANGE,
                                   "%s: request %lld: position %lld + %lld passes "
                                   "int32",
                                   what, (long long)g->request, (long long)r->next,
                                   (long long)g->span);
        r->mark = pos->epoch;
        r->span = (int32_t)g->span;
    }
    return MSTAR_OK;
}

mstar_status mstar_positions_plan(mstar_positions *pos, int32_t slot,
                                  const mstar_resource_step *step, int32_t bucket_tokens,
                                  bool preplan, mstar_stream *stream)
{
    int64_t tokens;
    mstar_status st = mark_requests(pos, step, "positions plan", &tokens);
    if (st != MSTAR_OK)
        return st;
    st = mstar__plan_store_check_plan(&pos->plans, slot, preplan, stream, "positions plan");
    if (st != MSTAR_OK)
        return st;
    if (bucket_tokens < 0 || tokens > bucket_tokens)
        return mstar_error_set(MSTAR_ERANGE, "positions plan: %lld tokens, the bucket %d",
                               (long long)tokens, bucket_tokens);
    if (!preplan && mstar__plan_store_promote(&pos->plans, slot, step, bucket_tokens))
        return MSTAR_OK;
    if (slot == MSTAR_PLAN_EAGER) {
        int32_t want = bucket_tokens > 1 ? bucket_tokens : 1;
        if (want > pos->eager_tokens) {
            if (mstar__plan_store_grow_eager(&pos->plans, (size_t)want) != MSTAR_OK)
                return mstar_error_wrap("positions plan");
            pos->eager_tokens = want;
        }
    } else if (bucket_tokens > pos->slot_tokens) {
        return mstar_error_set(MSTAR_ERANGE,
                               "positions plan: bucket of %d tokens, plan buffers "
                               "built for %d",
                               bucket_tokens, pos->slot_tokens);
    }
    int32_t *ids = mstar__plan_store_write_begin(&pos->plans, slot, 0);
    if (ids == NULL)
        return mstar_error_wrap("positions plan");
    int32_t t = 0;
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        int64_t first = g->request < 0 ? 0 : find_request(pos, g->request)->next;
        for (int32_t j = 0; j < g->span; j++)
            ids[t++] = g->request < 0 ? 0 : (int32_t)(first + j);
    }
    for (; t < bucket_tokens; t++)
        ids[t] = 0;
    if ((st = mstar__plan_store_upload(&pos->plans, slot, 0, stream)) != MSTAR_OK)
        return mstar_error_wrap("positions plan: upload");
    return mstar__plan_store_written(&pos->plans, slot, step, bucket_tokens, preplan);
}

void mstar_positions_clear_preplan(mstar_positions *pos, int32_t slot)
{
    size_t n;
    mstar__plan_store_take_pending(&pos->plans, slot, &n);
}

mstar_status mstar_positions_commit(mstar_positions *pos, const mstar_resource_step *step)
{
    int64_t tokens;
    mstar_status st = mark_requests(pos, step, "positions commit", &tokens);
    if (st != MSTAR_OK || !step->commit)
        return st;
    /* Each request advances once: the first of its rows carries the mark for this epoch. */
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->request < 0)
            continue;
        pos_request *r = find_request(pos, g->request);
        if (r->mark == pos->epoch) {
            r->next += r->span;
            r->mark = 0;
        }
    }
    return MSTAR_OK;
}

mstar_status mstar_positions_plan_buffer(const mstar_positions *pos, int32_t slot, int32_t **ids,
                                         int32_t *capacity)
{
    int32_t *block = mstar__plan_store_device(&pos->plans, slot, 0);
    if (block == NULL)
        return mstar_error_set(MSTAR_ESTATE, "positions: no plan buffer for slot %d", slot);
    *ids = block;
    *capacity = slot == MSTAR_PLAN_EAGER ? pos->eager_tokens : pos->slot_tokens;
    return MSTAR_OK;
}

mstar_status mstar_positions_get(const mstar_positions *pos, int64_t request, int64_t *position)
{
    pos_request *r;
    mstar_status st = lookup(pos, request, &r);
    if (st == MSTAR_OK)
        *position = r->next;
    return st;
}

/* ---- for the step-runner adapter (resource.h) ------------------------------------------------ */

/* Eager: a row per segment, every token of the step. */
static void class_eager_size(void *res, const mstar_resource_step *step, int64_t *rows,
                             int64_t *tokens)
{
    *rows = (int64_t)step->num_segments;
    *tokens = 0;
    for (size_t i = 0; i < step->num_segments; i++)
        *tokens += step->segments[i].span;
}

static mstar_status class_plan(void *res, int32_t slot, const mstar_resource_step *step,
                               int32_t rows, int32_t tokens, bool preplan, mstar_stream *stream)
{
    return mstar_positions_plan(res, slot, step, tokens, preplan, stream);
}

static mstar_status class_commit(void *res, const mstar_resource_step *step)
{
    return mstar_positions_commit(res, step);
}

static void class_clear_preplan(void *res, int32_t slot)
{
    mstar_positions_clear_preplan(res, slot);
}

static mstar_status class_ingest(void *res, int64_t request)
{
    return mstar_positions_ingest(res, request);
}

/* A position counter has no storage to hand back. */
static mstar_status class_reset(void *res, int64_t request, bool free_storage)
{
    return mstar_positions_reset(res, request);
}

static mstar_status class_remove(void *res, int64_t request)
{
    return mstar_positions_remove(res, request);
}

static mstar_status class_build(void *res, int32_t slots, int32_t rows, int32_t tokens)
{
    return mstar_positions_build_plans(res, slots, tokens);
}

/* Positions reserve nothing: no admit. */
static const mstar__resource_class positions_class = {
    .what = "positions",
    .eager_size = class_eager_size,
    .plan = class_plan,
    .commit = class_commit,
    .clear_preplan = class_clear_preplan,
    .ingest = class_ingest,
    .reset = class_reset,
    .remove = class_remove,
    .build = class_build,
};

mstar_status mstar_positions_register(mstar_positions *pos, mstar_step_runner *step_runner,
                                      const char *key)
{
    if (pos == NULL)
        return mstar_error_set(MSTAR_EINVAL, "positions register: NULL argument");
    return mstar__resource_adapter_register(&pos->adapter, step_runner, key);
}
