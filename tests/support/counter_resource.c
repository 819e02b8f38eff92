/*
 * counter_resource.c — the counting resource of counter_resource.h.
 */
#include "counter_resource.h"

#include <string.h>

int64_t *mstar_test_counter_len(mstar_test_counter *c, int64_t rid)
{
    return rid >= 0 ? &c->lens[rid] : &c->pad_lens[-rid - 1];
}

int64_t *mstar_test_counter_resv(mstar_test_counter *c, int64_t rid)
{
    return rid >= 0 ? &c->resv[rid] : &c->pad_resv[-rid - 1];
}

static mstar_status c_admit(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    mstar_test_counter *c = self;
    size_t n;
    const mstar_step_segment *seg = mstar_step_segments(step, &n);
    for (size_t i = 0; i < n; i++) {
        int64_t need = *mstar_test_counter_len(c, seg[i].request) + seg[i].span;
        int64_t *held = mstar_test_counter_resv(c, seg[i].request);
        if (need <= *held)
            continue;
        if (c->pages_used + need - *held > c->capacity) {
            out->ok = false;
            out->request = seg[i].request;
            return MSTAR_OK;
        }
        c->pages_used += need - *held;
        *held = need;
    }
    return MSTAR_OK;
}

static mstar_status c_plan(void *self, mstar_step *step)
{
    mstar_test_counter *c = self;
    mstar_step_ctx *ctx = mstar_step_context(step);
    if (c->fail_plan)
        return mstar_error_set(MSTAR_EDEVICE, "injected plan failure");
    c->plans++;
    if (ctx->slot < 0)
        return MSTAR_OK;
    c->pending[ctx->slot] = false; /* promote */
    for (size_t i = 0; i < ctx->n_requests; i++) {
        int64_t rid = ctx->request_ids[i];
        if (ctx->capture && *mstar_test_counter_len(c, rid) != 0)
            c->capture_plans_with_dirty_rows++;
        c->plan_buf[ctx->slot][i] = (float)*mstar_test_counter_len(c, rid);
    }
    return MSTAR_OK;
}

static mstar_status c_commit(void *self, mstar_step *step)
{
    mstar_test_counter *c = self;
    size_t n;
    const mstar_step_segment *seg = mstar_step_segments(step, &n);
    for (size_t i = 0; i < n; i++)
        *mstar_test_counter_len(c, seg[i].request) += seg[i].span;
    return MSTAR_OK;
}

static mstar_status c_pre_admit(void *self, mstar_step *step, mstar_step_admit_result *out)
{
    (void)self;
    (void)step;
    (void)out;
    return MSTAR_OK;
}

static mstar_status c_pre_plan(void *self, mstar_step *step)
{
    mstar_test_counter *c = self;
    mstar_step_ctx *ctx = mstar_step_context(step);
    c->preplan_stream = ctx->stream;
    c->pending[ctx->lease.slot] = true;
    return MSTAR_OK;
}

static void c_clear_preplan(void *self, int32_t slot)
{
    mstar_test_counter *c = self;
    for (int i = 0; i < MSTAR_TEST_COUNTER_SLOTS; i++) {
        if (slot < 0 || slot == i)
            c->pending[i] = false;
    }
}

static mstar_status c_ingest(void *self, int64_t rid)
{
    ((mstar_test_counter *)self)->ingested++;
    return MSTAR_OK;
}

static mstar_status c_reset(void *self, int64_t rid, bool free_storage)
{
    mstar_test_counter *c = self;
    if (free_storage) {
        c->pages_used -= *mstar_test_counter_resv(c, rid);
        *mstar_test_counter_resv(c, rid) = 0;
    }
    *mstar_test_counter_len(c, rid) = 0;
    return MSTAR_OK;
}

static mstar_status c_build(void *self, const mstar_cg_slot_spec *specs, size_t n, int64_t max_bs,
                            int64_t max_seq_len)
{
    mstar_test_counter *c = self;
    c->builds++;
    for (int s = 0; s < MSTAR_TEST_COUNTER_SLOTS; s++) {
        if (c->plan_buf[s] == NULL &&
            mstar_caching_alloc(c->b, MSTAR_TEST_COUNTER_ROWS * sizeof(float),
                                (void **)&c->plan_buf[s]) != MSTAR_OK)
            return mstar_last_status();
    }
    return MSTAR_OK;
}

const mstar_resource_ops mstar_test_counter_ops = {
    .supports_preplan = true,
    .admit = c_admit,
    .plan = c_plan,
    .commit = c_commit,
    .pre_admit = c_pre_admit,
    .pre_plan = c_pre_plan,
    .clear_preplan = c_clear_preplan,
    .ingest_request = c_ingest,
    .reset_request = c_reset,
    .build_graph_buffers = c_build,
};

void mstar_test_counter_init(mstar_test_counter *c, mstar_backend *b, int64_t capacity)
{
    memset(c, 0, sizeof(*c));
    c->b = b;
    c->capacity = capacity;
}

void mstar_test_counter_free(mstar_test_counter *c)
{
    for (int s = 0; s < MSTAR_TEST_COUNTER_SLOTS; s++) {
        mstar_caching_free(c->b, c->plan_buf[s]);
        c->plan_buf[s] = NULL;
    }
}

int64_t mstar_test_counter_padding_held(const mstar_test_counter *c)
{
    int64_t held = 0;
    for (int i = 0; i < MSTAR_TEST_COUNTER_PADDING; i++)
        held += c->pad_lens[i] + c->pad_resv[i];
    return held;
}
