/*
 * ref_step.c — a step of the reference model as a runner drives it (see ref_step.h).
 */
#include "ref_step.h"

#include <stdlib.h>

struct ref_step {
    ref_model *model;
    mstar_kv_cache *kv;
    mstar_positions *pos;
    mstar_backend *backend;
    int32_t max_rows, max_tokens;
    int32_t *tokens; /* static buffers, device */
    float *logits;
    int32_t *next;
    mstar_segment *segments; /* [max_rows] the declared step */
    mstar_resource_step step;
};

/* Zero the static token buffer, so tail tokens no step staged are token 0: a valid id. */
static mstar_status zero_tokens(ref_step *st)
{
    mstar_stream *s;
    mstar_status rc = mstar_stream_create(st->backend, MSTAR_STREAM_NON_BLOCKING, &s);
    if (rc != MSTAR_OK)
        return rc;
    rc = mstar_memset_async(s, st->tokens, 0, (size_t)st->max_tokens * sizeof(int32_t));
    mstar_status sync = mstar_stream_synchronize(s);
    mstar_stream_destroy(s);
    return rc != MSTAR_OK ? rc : sync;
}

mstar_status ref_step_create(ref_model *model, mstar_kv_cache *kv, mstar_positions *pos,
                             mstar_backend *backend, int32_t max_rows, int32_t max_tokens,
                             int32_t num_slots, ref_step **out)
{
    if (model == NULL || kv == NULL || pos == NULL || backend == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "reference step: model, resources, backend and out "
                                             "must not be NULL");
    if (max_rows < 1 || max_tokens < max_rows || num_slots < 1)
        return mstar_error_set(MSTAR_EINVAL,
                               "reference step: max_rows %d, max_tokens %d, num_slots %d: need "
                               "1 <= rows <= tokens and slots >= 1",
                               max_rows, max_tokens, num_slots);
    ref_step *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "reference step");
    st->model = model;
    st->kv = kv;
    st->pos = pos;
    st->backend = backend;
    st->max_rows = max_rows;
    st->max_tokens = max_tokens;
    size_t vocab = (size_t)ref_model_config_of(model)->vocab;
    st->segments = calloc((size_t)max_rows, sizeof(*st->segments));
    mstar_status rc =
        st->segments != NULL ? MSTAR_OK : mstar_error_set(MSTAR_ENOMEM, "reference step segments");
    if (rc == MSTAR_OK)
        rc = mstar_kv_cache_build_plans(kv, num_slots, max_rows, max_tokens);
    if (rc == MSTAR_OK)
        rc = mstar_positions_build_plans(pos, num_slots, max_tokens);
    if (rc == MSTAR_OK)
        rc = mstar_caching_alloc(backend, (size_t)max_tokens * sizeof(int32_t),
                                 (void **)&st->tokens);
    if (rc == MSTAR_OK)
        rc = mstar_caching_alloc(backend, (size_t)max_rows * vocab * sizeof(float),
                                 (void **)&st->logits);
    if (rc == MSTAR_OK)
        rc = mstar_caching_alloc(backend, (size_t)max_rows * sizeof(int32_t), (void **)&st->next);
    if (rc == MSTAR_OK)
        rc = zero_tokens(st);
    if (rc != MSTAR_OK) {
        ref_step_destroy(st);
        return mstar_error_wrap("reference step");
    }
    *out = st;
    return MSTAR_OK;
}

void ref_step_destroy(ref_step *st)
{
    if (st == NULL)
        return;
    mstar_caching_free(st->backend, st->tokens);
    mstar_caching_free(st->backend, st->logits);
    mstar_caching_free(st->backend, st->next);
    free(st->segments);
    free(st);
}

mstar_status ref_step_declare(ref_step *st, const int64_t *rows, const int32_t *spans, int32_t n)
{
    if (n < 1 || n > st->max_rows || rows == NULL || spans == NULL)
        return mstar_error_set(MSTAR_EINVAL, "reference step declare: %d rows, not in [1, %d]", n,
                               st->max_rows);
    for (int32_t i = 0; i < n; i++) {
        if (spans[i] < 0 || (rows[i] >= 0 && spans[i] == 0))
            return mstar_error_set(MSTAR_EINVAL,
                                   "reference step declare: row %d (request %lld) adds %d "
                                   "tokens; a real row adds at least one, padding none or more",
                                   i, (long long)rows[i], spans[i]);
    }
    for (int32_t i = 0; i < n; i++)
        st->segments[i] = (mstar_segment){ .request = rows[i], .label = 0, .span = spans[i] };
    st->step = (mstar_resource_step){ .segments = st->segments, .num_segments = n, .commit = true };
    return MSTAR_OK;
}

const mstar_resource_step *ref_step_declared(const ref_step *st)
{
    return &st->step;
}

static mstar_status check_bucket(const ref_step *st, int32_t rows, int32_t tokens, const char *what)
{
    if (rows < 1 || rows > st->max_rows || tokens < rows || tokens > st->max_tokens)
        return mstar_error_set(MSTAR_ERANGE,
                               "reference step %s: bucket of %d rows and %d tokens, the step "
                               "holds %d and %d",
                               what, rows, tokens, st->max_rows, st->max_tokens);
    return MSTAR_OK;
}

mstar_status ref_step_prepare(ref_step *st, int32_t slot, int32_t bucket_rows,
                              int32_t bucket_tokens, bool preplan, mstar_stream *stream,
                              mstar_admit_result *admitted)
{
    mstar_status rc = check_bucket(st, bucket_rows, bucket_tokens, "prepare");
    if (rc != MSTAR_OK)
        return rc;
    if (st->step.num_segments == 0)
        return mstar_error_set(MSTAR_ESTATE, "reference step prepare: nothing declared");
    return ref_resources_prepare(st->kv, st->pos, &st->step, slot, bucket_rows, bucket_tokens,
                                 preplan, stream, admitted);
}

void ref_step_clear_preplan(ref_step *st, int32_t slot)
{
    mstar_kv_cache_clear_preplan(st->kv, slot);
    mstar_positions_clear_preplan(st->pos, slot);
}

mstar_status ref_step_stage(ref_step *st, const int32_t *tokens, int32_t n, mstar_stream *stream)
{
    int32_t vocab = ref_model_config_of(st->model)->vocab;
    if (n < 0 || n > st->max_tokens || (n > 0 && tokens == NULL))
        return mstar_error_set(MSTAR_EINVAL, "reference step stage: %d tokens, not in [0, %d]", n,
                               st->max_tokens);
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return mstar_error_set(MSTAR_EINVAL,
                                   "reference step stage: tokens[%d] %d, not in [0, %d)", i,
                                   tokens[i], vocab);
    }
    if (n == 0)
        return MSTAR_OK;
    return mstar_memcpy_async(stream, st->tokens, tokens, (size_t)n * sizeof(int32_t),
                              MSTAR_MEMCPY_H2D);
}

mstar_status ref_step_forward(ref_step *st, int32_t slot, int32_t bucket_rows,
                              int32_t bucket_tokens, mstar_stream *stream)
{
    mstar_status rc = check_bucket(st, bucket_rows, bucket_tokens, "forward");
    if (rc != MSTAR_OK)
        return rc;
    ref_forward_io io = { .num_tokens = bucket_tokens,
                          .num_rows = bucket_rows,
                          .tokens = st->tokens,
                          .logits = st->logits,
                          .next_tokens = st->next };
    if ((rc = ref_resources_io(st->kv, st->pos, slot, &io)) != MSTAR_OK)
        return mstar_error_wrap("reference step forward");
    return ref_model_forward(st->model, stream, &io);
}

mstar_status ref_step_commit(ref_step *st)
{
    return ref_resources_commit(st->kv, st->pos, &st->step);
}

int32_t *ref_step_tokens(const ref_step *st)
{
    return st->tokens;
}

float *ref_step_logits(const ref_step *st)
{
    return st->logits;
}

int32_t *ref_step_next(const ref_step *st)
{
    return st->next;
}

mstar_status ref_resources_prepare(mstar_kv_cache *kv, mstar_positions *pos,
                                   const mstar_resource_step *step, int32_t slot,
                                   int32_t bucket_rows, int32_t bucket_tokens, bool preplan,
                                   mstar_stream *stream, mstar_admit_result *admitted)
{
    mstar_admit_result res;
    mstar_status rc = mstar_kv_cache_admit(kv, step, &res);
    if (admitted != NULL)
        *admitted = res;
    if (rc != MSTAR_OK)
        return rc;
    rc = mstar_kv_cache_plan(kv, slot, step, bucket_rows, bucket_tokens, preplan, stream);
    if (rc != MSTAR_OK)
        return rc;
    return mstar_positions_plan(pos, slot, step, bucket_tokens, preplan, stream);
}

mstar_status ref_resources_io(const mstar_kv_cache *kv, const mstar_positions *pos, int32_t slot,
                              ref_forward_io *io)
{
    int32_t *positions, capacity;
    mstar_status rc = mstar_kv_cache_plan_buffers(kv, slot, 0, &io->plan);
    if (rc == MSTAR_OK)
        rc = mstar_positions_plan_buffer(pos, slot, &positions, &capacity);
    if (rc == MSTAR_OK)
        io->positions = positions;
    return rc;
}

mstar_status ref_resources_commit(mstar_kv_cache *kv, mstar_positions *pos,
                                  const mstar_resource_step *step)
{
    mstar_status rc = mstar_kv_cache_commit(kv, step);
    if (rc != MSTAR_OK)
        return rc;
    return mstar_positions_commit(pos, step);
}
