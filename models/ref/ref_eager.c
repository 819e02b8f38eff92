/*
 * ref_eager.c — eager steps of the reference decode model (see ref_eager.h).
 *
 * Inputs and outputs cross to the device through buffers from the caching allocator, grown to
 * the largest step seen; each step waits for its stream before returning.
 */
#include "ref_eager.h"

#include <stdlib.h>

struct ref_eager {
    mstar_backend *backend;
    mstar_stream *stream;
    ref_model *model;
    mstar_kv_cache *kv;
    mstar_positions *pos;
    mstar_step_segment *segments; /* [row_cap] */
    int32_t row_cap, token_cap;
    int32_t *dev_tokens; /* [token_cap] */
    float *dev_logits;   /* [row_cap, vocab] */
    int32_t *dev_next;   /* [row_cap] */
};

mstar_status ref_eager_create(const ref_model_config *cfg, const mstar_kv_cache_config *kv_cfg,
                              mstar_backend *backend, ref_eager **out)
{
    ref_eager *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "eager model");
    e->backend = backend;
    mstar_status st = mstar_stream_create(backend, MSTAR_STREAM_NON_BLOCKING, &e->stream);
    if (st == MSTAR_OK)
        st = ref_model_create(cfg, kv_cfg, backend, &e->model);
    if (st == MSTAR_OK)
        st = mstar_kv_cache_create(kv_cfg, backend, &e->kv);
    if (st == MSTAR_OK)
        st = mstar_positions_create(backend, &e->pos);
    if (st != MSTAR_OK) {
        ref_eager_destroy(e);
        return st;
    }
    *out = e;
    return MSTAR_OK;
}

static void free_io(ref_eager *e)
{
    mstar_caching_free(e->backend, e->dev_tokens);
    mstar_caching_free(e->backend, e->dev_logits);
    mstar_caching_free(e->backend, e->dev_next);
    e->dev_tokens = NULL;
    e->dev_logits = NULL;
    e->dev_next = NULL;
}

void ref_eager_destroy(ref_eager *e)
{
    if (e == NULL)
        return;
    if (e->stream != NULL)
        mstar_stream_synchronize(e->stream);
    free_io(e);
    ref_model_destroy(e->model);
    mstar_kv_cache_destroy(e->kv);
    mstar_positions_destroy(e->pos);
    mstar_stream_destroy(e->stream);
    free(e->segments);
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

/* Room for a step of `rows` rows and `tokens` tokens, host and device. */
static mstar_status ensure_capacity(ref_eager *e, int32_t rows, int32_t tokens)
{
    if (rows <= e->row_cap && tokens <= e->token_cap)
        return MSTAR_OK;
    rows = rows > e->row_cap ? rows : e->row_cap;
    tokens = tokens > e->token_cap ? tokens : e->token_cap;
    size_t vocab = (size_t)ref_model_config_of(e->model)->vocab;
    mstar_step_segment *segs = realloc(e->segments, (size_t)rows * sizeof(*segs));
    if (segs == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "eager step of %d rows", rows);
    e->segments = segs;
    mstar_status st = mstar_stream_synchronize(e->stream); /* nothing may still read the old ones */
    if (st != MSTAR_OK)
        return st;
    free_io(e);
    e->row_cap = e->token_cap = 0;
    if ((st = mstar_caching_alloc(e->backend, (size_t)tokens * sizeof(int32_t),
                                  (void **)&e->dev_tokens)) != MSTAR_OK ||
        (st = mstar_caching_alloc(e->backend, (size_t)rows * vocab * sizeof(float),
                                  (void **)&e->dev_logits)) != MSTAR_OK ||
        (st = mstar_caching_alloc(e->backend, (size_t)rows * sizeof(int32_t),
                                  (void **)&e->dev_next)) != MSTAR_OK) {
        free_io(e);
        return mstar_error_wrap("eager step buffers");
    }
    e->row_cap = rows;
    e->token_cap = tokens;
    return MSTAR_OK;
}

/* Admit the step, then plan it into both resources' eager state on the stream. */
static mstar_status prepare(ref_eager *e, const mstar_resource_step *step, int32_t num_rows,
                            int32_t num_tokens)
{
    mstar_step_admit_result admitted;
    mstar_status st = mstar_kv_cache_admit(e->kv, step, &admitted);
    if (st == MSTAR_OK)
        st = mstar_kv_cache_plan(e->kv, MSTAR_PLAN_EAGER, step, num_rows, num_tokens, false,
                                 e->stream);
    if (st == MSTAR_OK)
        st = mstar_positions_plan(e->pos, MSTAR_PLAN_EAGER, step, num_tokens, false, e->stream);
    return st;
}

/* Admit, plan into the eager state, run the forward and copy the outputs back. */
static mstar_status run_step(ref_eager *e, const mstar_resource_step *step, int32_t num_rows,
                             int32_t num_tokens, const int32_t *tokens, float *logits,
                             int32_t *next_tokens)
{
    mstar_stream *s = e->stream;
    size_t vocab = (size_t)ref_model_config_of(e->model)->vocab;
    mstar_status st = prepare(e, step, num_rows, num_tokens);
    if (st != MSTAR_OK)
        return st;
    ref_forward_io io = { .num_tokens = num_tokens,
                          .num_rows = num_rows,
                          .tokens = e->dev_tokens,
                          .logits = e->dev_logits,
                          .next_tokens = e->dev_next,
                          .one_token_per_row = ref_step_one_token_per_row(
                              step->segments, step->num_segments, num_rows, num_tokens) };
    int32_t *positions, capacity;
    mstar_kv_cache_plan_buffers(e->kv, MSTAR_PLAN_EAGER, 0, &io.plan);
    mstar_positions_plan_buffer(e->pos, MSTAR_PLAN_EAGER, &positions, &capacity);
    io.positions = positions;
    if ((st = mstar_memcpy_async(s, e->dev_tokens, tokens, (size_t)num_tokens * sizeof(int32_t),
                                 MSTAR_MEMCPY_H2D)) != MSTAR_OK ||
        (st = ref_model_forward(e->model, s, &io)) != MSTAR_OK ||
        (st = mstar_memcpy_async(s, next_tokens, e->dev_next, (size_t)num_rows * sizeof(int32_t),
                                 MSTAR_MEMCPY_D2H)) != MSTAR_OK)
        return st;
    if (logits != NULL &&
        (st = mstar_memcpy_async(s, logits, e->dev_logits, (size_t)num_rows * vocab * sizeof(float),
                                 MSTAR_MEMCPY_D2H)) != MSTAR_OK)
        return st;
    if ((st = mstar_stream_synchronize(s)) != MSTAR_OK ||
        (st = mstar_kv_cache_commit(e->kv, step)) != MSTAR_OK)
        return st;
    return mstar_positions_commit(e->pos, step);
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
    int32_t vocab = ref_model_config_of(e->model)->vocab;
    int64_t num_tokens = 0;
    for (int32_t i = 0; i < num_rows; i++) {
        if (spans[i] < 0 || num_tokens + spans[i] > INT32_MAX)
            return mstar_error_set(MSTAR_EINVAL, "eager step: spans[%d] %d", i, spans[i]);
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
    mstar_status st = ensure_capacity(e, num_rows, (int32_t)num_tokens);
    if (st != MSTAR_OK)
        return st;
    for (int32_t i = 0; i < num_rows; i++)
        e->segments[i] = (mstar_step_segment){ .request = rows[i], .label = 0, .span = spans[i] };
    mstar_resource_step step = { .segments = e->segments,
                                 .num_segments = (size_t)num_rows,
                                 .commit = true };
    return run_step(e, &step, num_rows, (int32_t)num_tokens, tokens, logits, next_tokens);
}

ref_model *ref_eager_model(ref_eager *e)
{
    return e->model;
}

mstar_stream *ref_eager_stream(ref_eager *e)
{
    return e->stream;
}

mstar_kv_cache *ref_eager_kv(ref_eager *e)
{
    return e->kv;
}

mstar_positions *ref_eager_positions(ref_eager *e)
{
    return e->pos;
}
