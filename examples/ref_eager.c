/*
 * ref_eager.c — eager host steps of the reference decode model (see ref_eager.h).
 */
#include "ref_eager.h"

#include <stdlib.h>

struct ref_eager {
    ref_model *model;
    mstar_kv_cache *kv;
    mstar_positions *pos;
    mstar_segment *segments;
    float *logits;    /* used when the caller passes none */
    int32_t capacity; /* rows the two arrays above hold */
};

mstar_status ref_eager_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              ref_eager **out)
{
    ref_eager *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "eager model");
    mstar_status st = ref_model_create(cfg, kv_cfg, &e->model);
    if (st == MSTAR_OK)
        st = mstar_kv_cache_create(kv_cfg, &e->kv);
    if (st == MSTAR_OK)
        st = mstar_positions_create(&e->pos);
    if (st != MSTAR_OK) {
        ref_eager_destroy(e);
        return st;
    }
    *out = e;
    return MSTAR_OK;
}

void ref_eager_destroy(ref_eager *e)
{
    if (e == NULL)
        return;
    ref_model_destroy(e->model);
    mstar_kv_cache_destroy(e->kv);
    mstar_positions_destroy(e->pos);
    free(e->segments);
    free(e->logits);
    free(e);
}

mstar_status ref_eager_open(ref_eager *e, int64_t request)
{
    mstar_status st = mstar_kv_cache_ingest(e->kv, request);
    if (st != MSTAR_OK)
        return st;
    st = mstar_positions_ingest(e->pos, request);
    if (st != MSTAR_OK)
        mstar_kv_cache_remove(e->kv, request);
    return st;
}

mstar_status ref_eager_close(ref_eager *e, int64_t request)
{
    mstar_status st = mstar_kv_cache_remove(e->kv, request);
    mstar_status st2 = mstar_positions_remove(e->pos, request);
    return st != MSTAR_OK ? st : st2;
}

static mstar_status ensure_capacity(ref_eager *e, int32_t rows)
{
    if (rows <= e->capacity)
        return MSTAR_OK;
    int32_t vocab = ref_model_config_of(e->model)->vocab;
    mstar_segment *segs = realloc(e->segments, (size_t)rows * sizeof(*segs));
    if (segs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "eager step of %d rows", rows);
    e->segments = segs;
    float *logits = realloc(e->logits, (size_t)rows * (size_t)vocab * sizeof(float));
    if (logits == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "eager step of %d rows", rows);
    e->logits = logits;
    e->capacity = rows;
    return MSTAR_OK;
}

mstar_status ref_eager_step(ref_eager *e, const int64_t *rows, const int32_t *spans,
                            int32_t num_rows, const int32_t *tokens, float *logits,
                            int32_t *next_tokens)
{
    if (num_rows < 1 || rows == NULL || spans == NULL || next_tokens == NULL)
        return mstar_error_set(MSTAR_EINVAL,
                               "eager step: needs rows, spans and next_tokens for "
                               "%d >= 1 rows",
                               num_rows);
    mstar_status st = ensure_capacity(e, num_rows);
    if (st != MSTAR_OK)
        return st;
    int32_t vocab = ref_model_config_of(e->model)->vocab;
    int64_t num_tokens = 0;
    for (int32_t i = 0; i < num_rows; i++) {
        if (spans[i] < 0 || num_tokens + spans[i] > INT32_MAX)
            return mstar_error_set(MSTAR_EINVAL, "eager step: spans[%d] %d", i, spans[i]);
        e->segments[i] = (mstar_segment){ .request = rows[i], .label = 0, .span = spans[i] };
        num_tokens += spans[i];
    }
    if (num_tokens == 0 || tokens == NULL)
        return mstar_error_set(MSTAR_EINVAL, "eager step: %lld tokens at %p; a step needs some",
                               (long long)num_tokens, (const void *)tokens);
    for (int64_t t = 0; t < num_tokens; t++) {
        if (tokens[t] < 0 || tokens[t] >= vocab)
            return mstar_error_set(MSTAR_EINVAL, "eager step: tokens[%lld] %d, not in [0, %d)",
                                   (long long)t, tokens[t], vocab);
    }
    mstar_resource_step step = { .segments = e->segments,
                                 .num_segments = num_rows,
                                 .commit = true };
    mstar_admit_result admitted;
    if ((st = mstar_kv_cache_admit(e->kv, &step, &admitted)) != MSTAR_OK)
        return st;
    if ((st = mstar_kv_cache_plan(e->kv, MSTAR_PLAN_EAGER, &step, num_rows, (int32_t)num_tokens,
                                  false)) != MSTAR_OK)
        return st;
    if ((st = mstar_positions_plan(e->pos, MSTAR_PLAN_EAGER, &step, (int32_t)num_tokens, false)) !=
        MSTAR_OK)
        return st;
    ref_forward_io io = { .num_tokens = (int32_t)num_tokens,
                          .num_rows = num_rows,
                          .tokens = tokens,
                          .logits = logits != NULL ? logits : e->logits,
                          .next_tokens = next_tokens };
    int32_t *positions, capacity;
    mstar_kv_cache_plan_buffers(e->kv, MSTAR_PLAN_EAGER, 0, &io.plan);
    mstar_positions_plan_buffer(e->pos, MSTAR_PLAN_EAGER, &positions, &capacity);
    io.positions = positions;
    if ((st = ref_model_forward(e->model, &io)) != MSTAR_OK)
        return st;
    if ((st = mstar_kv_cache_commit(e->kv, &step)) != MSTAR_OK)
        return st;
    return mstar_positions_commit(e->pos, &step);
}

ref_model *ref_eager_model(ref_eager *e)
{
    return e->model;
}

mstar_kv_cache *ref_eager_kv(ref_eager *e)
{
    return e->kv;
}

mstar_positions *ref_eager_positions(ref_eager *e)
{
    return e->pos;
}
