/*
 * kv_cache.c — the paged KV cache resource (see mstar/resources.h).
 *
 * Pages come from a FIFO ring of free page ids. The ring starts as 0, 1, 2, ... so the first page
 * it hands out is page 0, which becomes the sink page and is never returned; FIFO reuse also means
 * a freed page is the last to be handed out again, so a stale reader is the more likely to see its
 * own data. A request holds, per label, a stream: its committed length and the pages that cover
 * it (plus any reserved ahead by admit). A stream's page array is sized for max_seq_len once, at
 * ingest, so admit never allocates and can reserve all or nothing.
 *
 * The end of the file describes the cache's calls to the step-runner adapter (resource.h).
 *
 * A plan block for (slot, label) is laid out as page_table[rows * pages_per_row],
 * token_to_page[tokens], token_to_cache[tokens], token_row[tokens], token_kv_len[tokens],
 * row_last_token[rows].
 */
#include "mstar/resources.h"

#include "core/assert.h"
#include "mstar/planner.h"

#include "requests.h"
#include "resource.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_stream {
    int32_t *pages;
    int32_t num_pages;
    int32_t length;
    uint32_t mark; /* the admit epoch that last saw this stream: catches duplicate segments */
} kv_stream;

typedef struct kv_request {
    kv_stream streams[MSTAR_KV_MAX_LABELS];
} kv_request;

struct mstar_kv_cache {
    mstar_kv_cache_config cfg;
    int32_t pages_per_row;
    int32_t *ring; /* free page ids, FIFO: head is the next handed out */
    int32_t ring_head;
    int32_t ring_count;
    mstar__u64map requests; /* request handle → kv_request* */
    uint32_t epoch;
    mstar__plan_store plans;
    int32_t slot_rows, slot_tokens;   /* capacity of the slot blocks */
    int32_t eager_rows, eager_tokens; /* capacity of the eager blocks */
    mstar__resource_adapter adapter;  /* what a step runner calls */
    mstar_rank_group *tp_group;       /* post-warm-up symmetry check; NULL: this rank alone */
};

static const mstar__resource_class kv_class;

static int32_t page_take(mstar_kv_cache *kv)
{
    int32_t page = kv->ring[kv->ring_head];
    kv->ring_head = (kv->ring_head + 1) % kv->cfg.num_pages;
    kv->ring_count--;
    return page;
}

static void page_give(mstar_kv_cache *kv, int32_t page)
{
    MSTAR__ASSERT(page != MSTAR_KV_SINK_PAGE && kv->ring_count < kv->cfg.num_pages); /* I-16 */
    kv->ring[(kv->ring_head + kv->ring_count) % kv->cfg.num_pages] = page;
    kv->ring_count++;
}

static int32_t pages_for(const mstar_kv_cache *kv, int64_t tokens)
{
    return (int32_t)((tokens + kv->cfg.page_size - 1) / kv->cfg.page_size);
}

/* Hand back a stream's pages beyond the first `keep`, last page first. */
static void stream_trim(mstar_kv_cache *kv, kv_stream *s, int32_t keep)
{
    while (s->num_pages > keep)
        page_give(kv, s->pages[--s->num_pages]);
}

static kv_request *find_request(const mstar_kv_cache *kv, int64_t request)
{
    return mstar__requests_find(&kv->requests, request);
}

static mstar_status lookup(const mstar_kv_cache *kv, int64_t request, kv_request **out)
{
    void *r;
    mstar_status st = mstar__requests_lookup(&kv->requests, request, "kv cache", &r);
    *out = r;
    return st;
}

static void request_free(mstar_kv_cache *kv, kv_request *r)
{
    for (int32_t l = 0; l < kv->cfg.num_labels; l++) {
        stream_trim(kv, &r->streams[l], 0);
        free(r->streams[l].pages);
    }
    free(r);
}

mstar_status mstar_kv_cache_create(const mstar_kv_cache_config *config, mstar_backend *backend,
                                   mstar_kv_cache **out)
{
    if (config == NULL || backend == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "kv cache: config, backend and out must not be NULL");
    if (config->num_pages < 2)
        return mstar_error_set(MSTAR_EINVAL,
                               "kv cache: num_pages %d, at least 2 (the sink page "
                               "and one more)",
                               config->num_pages);
    if (config->page_size < 1)
        return mstar_error_set(MSTAR_EINVAL, "kv cache: page_size %d, at least 1",
                               config->page_size);
    if (config->num_labels < 1 || config->num_labels > MSTAR_KV_MAX_LABELS)
        return mstar_error_set(MSTAR_EINVAL, "kv cache: num_labels %d, not in [1, %d]",
                               config->num_labels, MSTAR_KV_MAX_LABELS);
    if (config->max_seq_len < 1)
        return mstar_error_set(MSTAR_EINVAL, "kv cache: max_seq_len %d, at least 1",
                               config->max_seq_len);
    mstar_kv_cache *kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "kv cache");
    kv->cfg = *config;
    kv->pages_per_row = pages_for(kv, config->max_seq_len);
    kv->ring = malloc((size_t)config->num_pages * sizeof(int32_t));
    if (kv->ring == NULL) {
        free(kv);
        return mstar_error_set(MSTAR_ENOMEM, "kv cache: free list of %d pages", config->num_pages);
    }
    for (int32_t i = 0; i < config->num_pages; i++)
        kv->ring[i] = i;
    kv->ring_count = config->num_pages;
    mstar__u64map_init(&kv->requests);
    mstar__plan_store_init(&kv->plans, backend, config->num_labels);
    mstar__resource_adapter_init(&kv->adapter, &kv_class, kv, &kv->plans);
    /* The sink is whatever the allocator hands out first; the kernels and plans assume page 0. */
    int32_t sink = page_take(kv);
    if (sink != MSTAR_KV_SINK_PAGE) {
        mstar_kv_cache_destroy(kv);
        return mstar_error_set(MSTAR_ESTATE,
                               "kv cache: first page handed out is %d, not the sink "
                               "page %d",
                               sink, MSTAR_KV_SINK_PAGE);
    }
    *out = kv;
    return MSTAR_OK;
}

void mstar_kv_cache_destroy(mstar_kv_cache *kv)
{
    if (kv == NULL)
        return;
    size_t it = 0;
    kv_request *r;
    while ((r = mstar__requests_next(&kv->requests, &it)) != NULL)
        request_free(kv, r);
    mstar__u64map_free(&kv->requests);
    mstar__plan_store_free(&kv->plans);
    mstar__resource_adapter_free(&kv->adapter);
    free(kv->ring);
    free(kv);
}

static size_t block_ints(const mstar_kv_cache *kv, int32_t rows, int32_t tokens)
{
    return (size_t)rows * ((size_t)kv->pages_per_row + 1) + 4 * (size_t)tokens;
}

mstar_status mstar_kv_cache_build_plans(mstar_kv_cache *kv, int32_t num_slots, int32_t max_rows,
                                        int32_t max_tokens)
{
    if (num_slots < 1 || max_rows < 1 || max_tokens < 1)
        return mstar_error_set(MSTAR_EINVAL,
                               "kv cache: build_plans(num_slots %d, max_rows %d, "
                               "max_tokens %d): each must be at least 1",
                               num_slots, max_rows, max_tokens);
    int32_t rows = max_rows > kv->slot_rows ? max_rows : kv->slot_rows;
    int32_t tokens = max_tokens > kv->slot_tokens ? max_tokens : kv->slot_tokens;
    if (mstar__plan_store_build(&kv->plans, num_slots, block_ints(kv, rows, tokens)) != MSTAR_OK)
        return mstar_error_wrap("kv cache");
    kv->slot_rows = rows;
    kv->slot_tokens = tokens;
    return MSTAR_OK;
}

mstar_status mstar_kv_cache_ingest(mstar_kv_cache *kv, int64_t request)
{
    if (request < 0)
        return MSTAR_OK;
    kv_request *r = calloc(1, sizeof(*r));
    bool ok = r != NULL;
    for (int32_t l = 0; ok && l < kv->cfg.num_labels; l++) {
        r->streams[l].pages = malloc((size_t)kv->pages_per_row * sizeof(int32_t));
        ok = r->streams[l].pages != NULL;
    }
    if (!ok) {
        if (r != NULL)
            request_free(kv, r);
        return mstar_error_set(MSTAR_ENOMEM, "kv cache: streams of request %lld",
                               (long long)request);
    }
    mstar_status st = mstar__requests_add(&kv->requests, request, r, "kv cache");
    if (st != MSTAR_OK)
        request_free(kv, r);
    return st;
}

mstar_status mstar_kv_cache_reset(mstar_kv_cache *kv, int64_t request, bool free_pages)
{
    if (request < 0)
        return MSTAR_OK;
    kv_request *r;
    mstar_status st = lookup(kv, request, &r);
    if (st != MSTAR_OK)
        return st;
    for (int32_t l = 0; l < kv->cfg.num_labels; l++) {
        r->streams[l].length = 0;
        if (free_pages)
            stream_trim(kv, &r->streams[l], 0);
    }
    return MSTAR_OK;
}

mstar_status mstar_kv_cache_remove(mstar_kv_cache *kv, int64_t request)
{
    if (request < 0)
        return MSTAR_OK;
    void *r;
    mstar_status st = mstar__requests_take(&kv->requests, request, "kv cache", &r);
    if (st == MSTAR_OK)
        request_free(kv, r);
    return st;
}

/* A new admit epoch; on wrap-around, clear every mark so no stream looks already seen. */
static void next_epoch(mstar_kv_cache *kv)
{
    if (++kv->epoch != 0)
        return;
    size_t it = 0;
    kv_request *r;
    while ((r = mstar__requests_next(&kv->requests, &it)) != NULL) {
        for (int32_t l = 0; l < kv->cfg.num_labels; l++)
            r->streams[l].mark = 0;
    }
    kv->epoch = 1;
}

mstar_status mstar_kv_cache_admit(mstar_kv_cache *kv, const mstar_resource_step *step,
                                  mstar_step_admit_result *result)
{
    mstar_status st = mstar__resource_step_check(step, kv->cfg.num_labels, "kv cache admit");
    if (st != MSTAR_OK)
        return st;
    if (result == NULL)
        return mstar_error_set(MSTAR_EINVAL, "kv cache admit: result is NULL");
    mstar_step_admit_result res = { .ok = true };
    next_epoch(kv);
    /* Pass 1: validate and count, touching nothing but the duplicate marks. */
    int64_t need = 0;
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->request < 0)
            continue;
        kv_request *r;
        if ((st = lookup(kv, g->request, &r)) != MSTAR_OK)
            return mstar_error_wrap("kv cache admit: segments[%zu]", i);
        kv_stream *s = &r->streams[g->label];
        if (s->mark == kv->epoch)
            return mstar_error_set(MSTAR_EINVAL,
                                   "kv cache admit: segments[%zu]: request %lld "
                                   "label %u appears twice in one step",
                                   i, (long long)g->request, g->label);
        s->mark = kv->epoch;
        int64_t len = (int64_t)s->length + g->span;
        if (len > kv->cfg.max_seq_len)
            return mstar_error_set(MSTAR_ERANGE,
                                   "kv cache admit: request %lld label %u: %d + %lld "
                                   "tokens pass max_seq_len %d",
                                   (long long)g->request, g->label, s->length, (long long)g->span,
                                   kv->cfg.max_seq_len);
        int32_t want = pages_for(kv, len);
        if (want > s->num_pages)
            need += want - s->num_pages;
        if (need > kv->ring_count && res.ok) {
            res.ok = false;
            res.request = g->request;
            res.label = g->label;
        }
    }
    if (!res.ok) {
        res.pages_short = need - kv->ring_count;
        snprintf(res.reason, sizeof(res.reason),
                 "kv cache: %lld pages short (the step needs %lld, %d free), first at request "
                 "%lld label %u",
                 (long long)res.pages_short, (long long)need, kv->ring_count,
                 (long long)res.request, res.label);
        *result = res;
        return mstar_error_set(MSTAR_ENOSPC, "%s", res.reason);
    }
    /* Pass 2: take the pages; it cannot fail. */
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->request < 0)
            continue;
        kv_stream *s = &find_request(kv, g->request)->streams[g->label];
        int32_t want = pages_for(kv, (int64_t)s->length + g->span);
        while (s->num_pages < want)
            s->pages[s->num_pages++] = page_take(kv);
    }
    *result = res;
    return MSTAR_OK;
}

/* Pointers into a block laid out as the comment at the top says. */
static mstar_kv_plan plan_view(const mstar_kv_cache *kv, int32_t *block, int32_t rows,
                               int32_t tokens)
{
    mstar_kv_plan p;
    p.rows = rows;
    p.tokens = tokens;
    p.pages_per_row = kv->pages_per_row;
    p.page_table = block;
    p.token_to_page = p.page_table + (size_t)rows * (size_t)kv->pages_per_row;
    p.token_to_cache = p.token_to_page + tokens;
    p.token_row = p.token_to_cache + tokens;
    p.token_kv_len = p.token_row + tokens;
    p.row_last_token = p.token_kv_len + tokens;
    return p;
}

mstar_status mstar_kv_cache_plan_buffers(const mstar_kv_cache *kv, int32_t slot, int32_t label,
                                         mstar_kv_plan *out)
{
    int32_t *block = mstar__plan_store_device(&kv->plans, slot, label);
    if (block == NULL)
        return mstar_error_set(MSTAR_ESTATE, "kv cache: no plan buffers for slot %d label %d", slot,
                               label);
    if (slot == MSTAR_PLAN_EAGER)
        *out = plan_view(kv, block, kv->eager_rows, kv->eager_tokens);
    else
        *out = plan_view(kv, block, kv->slot_rows, kv->slot_tokens);
    return MSTAR_OK;
}

/* MSTAR_OK if segment i (a real request's) holds pages for its length + span. */
static mstar_status check_admitted(const mstar_kv_cache *kv, const mstar_resource_step *step,
                                   size_t i, const char *what)
{
    const mstar_step_segment *g = &step->segments[i];
    kv_request *r;
    if (lookup(kv, g->request, &r) != MSTAR_OK)
        return mstar_error_wrap("%s: segments[%zu]", what, i);
    const kv_stream *s = &r->streams[g->label];
    if ((int64_t)s->num_pages * kv->cfg.page_size < (int64_t)s->length + g->span)
        return mstar_error_set(MSTAR_ESTATE,
                               "%s: request %lld label %u: %d + %lld tokens were not admitted "
                               "(%d pages held)",
                               what, (long long)g->request, g->label, s->length, (long long)g->span,
                               s->num_pages);
    return MSTAR_OK;
}

/* Check the step fits the bucket, label by label, and that every real segment was admitted. */
static mstar_status plan_check(const mstar_kv_cache *kv, const mstar_resource_step *step,
                               int32_t bucket_rows, int32_t bucket_tokens)
{
    int32_t rows[MSTAR_KV_MAX_LABELS] = { 0 };
    int64_t tokens[MSTAR_KV_MAX_LABELS] = { 0 };
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        rows[g->label]++;
        tokens[g->label] += g->span;
        if (g->request < 0)
            continue;
        mstar_status st = check_admitted(kv, step, i, "kv cache plan");
        if (st != MSTAR_OK)
            return st;
    }
    for (int32_t l = 0; l < kv->cfg.num_labels; l++) {
        if (rows[l] > bucket_rows || tokens[l] > bucket_tokens)
            return mstar_error_set(MSTAR_ERANGE,
                                   "kv cache plan: label %d has %d rows and %lld "
                                   "tokens, the bucket %d and %d",
                                   l, rows[l], (long long)tokens[l], bucket_rows, bucket_tokens);
    }
    return MSTAR_OK;
}

static void fill_i32(int32_t *p, int64_t n, int32_t v)
{
    for (int64_t i = 0; i < n; i++)
        p[i] = v;
}

/* Write one label's plan: its rows in step order, tokens packed, then the padded tails. */
static void plan_label(const mstar_kv_cache *kv, const mstar_kv_plan *p,
                       const mstar_resource_step *step, int32_t label, int32_t bucket_rows,
                       int32_t bucket_tokens)
{
    int32_t ps = kv->cfg.page_size, ppr = kv->pages_per_row;
    int32_t r = 0, t = 0;
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->label != (uint32_t)label)
            continue;
        int32_t *row = p->page_table + (size_t)r * (size_t)ppr;
        if (g->request < 0) {
            fill_i32(row, ppr, MSTAR_KV_SINK_PAGE);
            for (int32_t j = 0; j < g->span; j++, t++) {
                p->token_to_page[t] = MSTAR_KV_SINK_PAGE;
                p->token_to_cache[t] = 0;
                p->token_row[t] = r;
                p->token_kv_len[t] = 0;
            }
        } else {
            const kv_stream *s = &find_request(kv, g->request)->streams[g->label];
            memcpy(row, s->pages, (size_t)s->num_pages * sizeof(int32_t));
            fill_i32(row + s->num_pages, ppr - s->num_pages, MSTAR_KV_SINK_PAGE);
            for (int32_t j = 0; j < g->span; j++, t++) {
                int32_t pos = s->length + j;
                p->token_to_page[t] = s->pages[pos / ps];
                p->token_to_cache[t] = pos % ps;
                p->token_row[t] = r;
                p->token_kv_len[t] = pos + 1;
            }
        }
        p->row_last_token[r] = g->span > 0 ? t - 1 : 0;
        r++;
    }
    fill_i32(p->page_table + (size_t)r * (size_t)ppr, (int64_t)(bucket_rows - r) * ppr,
             MSTAR_KV_SINK_PAGE);
    fill_i32(p->row_last_token + r, bucket_rows - r, 0);
    fill_i32(p->token_to_page + t, bucket_tokens - t, MSTAR_KV_SINK_PAGE);
    fill_i32(p->token_to_cache + t, bucket_tokens - t, 0);
    fill_i32(p->token_row + t, bucket_tokens - t, 0);
    fill_i32(p->token_kv_len + t, bucket_tokens - t, 0);
}

mstar_status mstar_kv_cache_plan(mstar_kv_cache *kv, int32_t slot, const mstar_resource_step *step,
                                 int32_t bucket_rows, int32_t bucket_tokens, bool preplan,
                                 mstar_stream *stream)
{
    mstar_status st = mstar__resource_step_check(step, kv->cfg.num_labels, "kv cache plan");
    if (st != MSTAR_OK)
        return st;
    st = mstar__plan_store_check_plan(&kv->plans, slot, preplan, stream, "kv cache plan");
    if (st != MSTAR_OK)
        return st;
    if (bucket_rows < 0 || bucket_tokens < 0)
        return mstar_error_set(MSTAR_EINVAL, "kv cache plan: bucket of %d rows and %d tokens",
                               bucket_rows, bucket_tokens);
    if ((st = plan_check(kv, step, bucket_rows, bucket_tokens)) != MSTAR_OK)
        return st;
    int64_t shape = (int64_t)bucket_rows << 32 | (uint32_t)bucket_tokens;
    if (!preplan && mstar__plan_store_promote(&kv->plans, slot, step, shape))
        return MSTAR_OK;
    if (slot == MSTAR_PLAN_EAGER) {
        int32_t rows = bucket_rows > kv->eager_rows ? bucket_rows : kv->eager_rows;
        int32_t tokens = bucket_tokens > kv->eager_tokens ? bucket_tokens : kv->eager_tokens;
        if (mstar__plan_store_grow_eager(&kv->plans, block_ints(kv, rows, tokens)) != MSTAR_OK)
            return mstar_error_wrap("kv cache plan");
        kv->eager_rows = rows;
        kv->eager_tokens = tokens;
    } else if (bucket_rows > kv->slot_rows || bucket_tokens > kv->slot_tokens) {
        return mstar_error_set(MSTAR_ERANGE,
                               "kv cache plan: bucket of %d rows and %d tokens, "
                               "plan buffers built for %d and %d",
                               bucket_rows, bucket_tokens, kv->slot_rows, kv->slot_tokens);
    }
    bool seen[MSTAR_KV_MAX_LABELS] = { false };
    for (size_t i = 0; i < step->num_segments; i++)
        seen[step->segments[i].label] = true;
    for (int32_t l = 0; l < kv->cfg.num_labels; l++) {
        if (!seen[l])
            continue;
        int32_t *mirror = mstar__plan_store_write_begin(&kv->plans, slot, l);
        if (mirror == NULL)
            return mstar_error_wrap("kv cache plan");
        mstar_kv_plan p = slot == MSTAR_PLAN_EAGER
                              ? plan_view(kv, mirror, kv->eager_rows, kv->eager_tokens)
                              : plan_view(kv, mirror, kv->slot_rows, kv->slot_tokens);
        plan_label(kv, &p, step, l, bucket_rows, bucket_tokens);
        if ((st = mstar__plan_store_upload(&kv->plans, slot, l, stream)) != MSTAR_OK)
            return mstar_error_wrap("kv cache plan: upload");
    }
    /* A stale pending pre-plan, just overwritten, leaves its pages with their requests: admit is
     * idempotent, and reset or remove hands them back. */
    return mstar__plan_store_written(&kv->plans, slot, step, shape, preplan);
}

void mstar_kv_cache_clear_preplan(mstar_kv_cache *kv, int32_t slot)
{
    size_t n;
    const mstar_step_segment *segs = mstar__plan_store_take_pending(&kv->plans, slot, &n);
    for (size_t i = 0; i < n; i++) {
        if (segs[i].request < 0)
            continue;
        kv_request *r = find_request(kv, segs[i].request);
        if (r == NULL)
            continue; /* removed since: its pages went back then */
        kv_stream *s = &r->streams[segs[i].label];
        stream_trim(kv, s, pages_for(kv, s->length));
    }
}

mstar_status mstar_kv_cache_commit(mstar_kv_cache *kv, const mstar_resource_step *step)
{
    mstar_status st = mstar__resource_step_check(step, kv->cfg.num_labels, "kv cache commit");
    if (st != MSTAR_OK || !step->commit)
        return st;
    /* Check everything first, so a bad step advances nothing. */
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->request < 0)
            continue;
        if ((st = check_admitted(kv, step, i, "kv cache commit")) != MSTAR_OK)
            return st;
    }
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *g = &step->segments[i];
        if (g->request >= 0)
            find_request(kv, g->request)->streams[g->label].length += g->span;
    }
    return MSTAR_OK;
}

int32_t mstar_kv_cache_free_pages(const mstar_kv_cache *kv)
{
    return kv->ring_count;
}

void mstar_kv_cache_set_tp_group(mstar_kv_cache *kv, mstar_rank_group *group)
{
    kv->tp_group = group;
}

/*
 * The ranks of a TP group run the same steps on the same requests, so after the warm-ups and
 * captures every rank's pool must have as many free pages as every other's. A rank that holds
 * more (a capture's padding rows left resident, a leak) would admit differently from the others
 * at the first real step, and ranks that admit differently run different steps: a hang in the
 * first collective. One agreement of (free, −free) with min gives every rank the fewest and the
 * most free pages at once, so all ranks fail together, naming both.
 */
mstar_status mstar_kv_cache_post_warmup_validate(mstar_kv_cache *kv)
{
    if (kv == NULL)
        return mstar_error_set(MSTAR_EINVAL, "kv cache validate: NULL argument");
    if (kv->tp_group == NULL)
        return MSTAR_OK;
    int64_t v[2] = { kv->ring_count, -(int64_t)kv->ring_count };
    mstar_status st = mstar_agree_across_ranks(kv->tp_group, v, 2, MSTAR_REDUCE_MIN);
    if (st != MSTAR_OK)
        return mstar_error_wrap("kv cache: post-warm-up symmetry check");
    if (v[0] == -v[1])
        return MSTAR_OK;
    return mstar_error_set(MSTAR_ESTATE,
                           "kv cache: free pages differ across the TP group after warm-up: "
                           "%lld to %lld (rank %d has %d); the ranks would admit differently",
                           (long long)v[0], (long long)-v[1],
                           (int)mstar_rank_group_rank(kv->tp_group), (int)kv->ring_count);
}

static mstar_status class_validate(void *res)
{
    return mstar_kv_cache_post_warmup_validate(res);
}

const mstar_kv_cache_config *mstar_kv_cache_config_of(const mstar_kv_cache *kv)
{
    return &kv->cfg;
}

mstar_status mstar_kv_cache_stream(const mstar_kv_cache *kv, int64_t request, int32_t label,
                                   int32_t *length, const int32_t **pages, int32_t *num_pages)
{
    if (label < 0 || label >= kv->cfg.num_labels)
        return mstar_error_set(MSTAR_EINVAL, "kv cache: label %d, not in [0, %d)", label,
                               kv->cfg.num_labels);
    kv_request *r;
    mstar_status st = lookup(kv, request, &r);
    if (st != MSTAR_OK)
        return st;
    *length = r->streams[label].length;
    *pages = r->streams[label].pages;
    *num_pages = r->streams[label].num_pages;
    return MSTAR_OK;
}

/* ---- for the step-runner adapter (resource.h) ------------------------------------------------ */

static mstar_status class_admit(void *res, const mstar_resource_step *step,
                                mstar_step_admit_result *out)
{
    return mstar_kv_cache_admit(res, step, out);
}

/* Eager: as many rows and tokens as the largest label has. */
static void class_eager_size(void *res, const mstar_resource_step *step, int64_t *max_rows,
                             int64_t *max_tokens)
{
    const mstar_kv_cache *kv = res;
    int64_t rows[MSTAR_KV_MAX_LABELS] = { 0 }, tokens[MSTAR_KV_MAX_LABELS] = { 0 };
    *max_rows = *max_tokens = 0;
    for (size_t i = 0; i < step->num_segments; i++) {
        uint32_t l = step->segments[i].label;
        if (l >= (uint32_t)kv->cfg.num_labels)
            continue; /* plan refuses it with the reason */
        rows[l]++;
        tokens[l] += step->segments[i].span;
        *max_rows = rows[l] > *max_rows ? rows[l] : *max_rows;
        *max_tokens = tokens[l] > *max_tokens ? tokens[l] : *max_tokens;
    }
}

static mstar_status class_plan(void *res, int32_t slot, const mstar_resource_step *step,
                               int32_t rows, int32_t tokens, bool preplan, mstar_stream *stream)
{
    return mstar_kv_cache_plan(res, slot, step, rows, tokens, preplan, stream);
}

static mstar_status class_commit(void *res, const mstar_resource_step *step)
{
    return mstar_kv_cache_commit(res, step);
}

static void class_clear_preplan(void *res, int32_t slot)
{
    mstar_kv_cache_clear_preplan(res, slot);
}

static mstar_status class_ingest(void *res, int64_t request)
{
    return mstar_kv_cache_ingest(res, request);
}

static mstar_status class_reset(void *res, int64_t request, bool free_storage)
{
    return mstar_kv_cache_reset(res, request, free_storage);
}

static mstar_status class_remove(void *res, int64_t request)
{
    return mstar_kv_cache_remove(res, request);
}

static mstar_status class_build(void *res, int32_t slots, int32_t rows, int32_t tokens)
{
    return mstar_kv_cache_build_plans(res, slots, rows, tokens);
}

static const mstar__resource_class kv_class = {
    .what = "kv cache",
    .admit = class_admit,
    .eager_size = class_eager_size,
    .plan = class_plan,
    .commit = class_commit,
    .clear_preplan = class_clear_preplan,
    .ingest = class_ingest,
    .reset = class_reset,
    .remove = class_remove,
    .build = class_build,
    .post_warmup_validate = class_validate,
};

mstar_status mstar_kv_cache_register(mstar_kv_cache *kv, mstar_step_runner *step_runner,
                                     const char *key)
{
    if (kv == NULL)
        return mstar_error_set(MSTAR_EINVAL, "kv cache register: NULL argument");
    return mstar__resource_adapter_register(&kv->adapter, step_runner, key);
}
