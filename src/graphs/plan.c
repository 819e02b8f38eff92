/*
 * plan.c — plan_captures (design.md "Planning"): which buckets of every graph pool on a device
 * to capture, chosen from their sized costs before any is captured.
 *
 * The model: graphs of one pool are captured largest first and reuse each other's transient
 * blocks, so a pool holds what every graph keeps plus the most any one graph needs beyond that.
 * Each graph also holds executable memory outside the pools; a walk's held measurement copies
 * (ExecutableMemory) are released just before the real captures and the driver hands their
 * memory to the first executables, so they pay for part of it, once per walk. Candidates are
 * taken cheapest first, in an order every rank computes identically, and the walk stops at the
 * first one that no longer fits beside the largest eager step (dropped shapes still run eager).
 */
#include "mstar/planner.h"

#include "core/assert.h"
#include "core/vec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct candidate {
    size_t pool;
    const char *pool_name;
    size_t index; /* in its pool's buckets */
    const mstar_bucket_cost *bc;
    uint64_t standalone; /* slots·kept + (graph − kept) + slots·outside */
    uint64_t kept_all;   /* slots·kept */
    uint64_t exec_need;  /* slots·outside */
} candidate;

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int cmp_i64(int64_t a, int64_t b)
{
    return a < b ? -1 : a > b;
}

static int cmp_opt_str(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return (a != NULL) - (b != NULL);
    return strcmp(a, b);
}

/* Everything but the cost: the rank-independent identity of a candidate. Equal means the same
 * bucket listed twice in one pool. */
static int cmp_identity(const candidate *x, const candidate *y)
{
    const mstar_bucket_key *a = &x->bc->key, *b = &y->bc->key;
    int c = cmp_i64(a->bs, b->bs);
    if (c == 0)
        c = cmp_i64(a->num_tokens, b->num_tokens);
    if (c == 0)
        c = strcmp(x->pool_name, y->pool_name);
    if (c == 0)
        c = cmp_u64(x->bc->config_idx, y->bc->config_idx);
    if (c == 0)
        c = strcmp(a->graph_walk, b->graph_walk);
    if (c == 0)
        c = cmp_opt_str(a->cg_key_info, b->cg_key_info);
    return c;
}

static int cmp_candidate(const void *pa, const void *pb)
{
    const candidate *x = pa, *y = pb;
    int c = cmp_u64(x->standalone, y->standalone);
    return c != 0 ? c : cmp_identity(x, y);
}

static mstar_status check_bucket(const mstar_pool_costs *pool, size_t i, size_t ncredits)
{
    const mstar_bucket_cost *bc = &pool->buckets[i];
    const mstar_bucket_key *k = &bc->key;
    const mstar_capture_cost *c = &bc->cost;
    char name[MSTAR_BUCKET_NAME_MAX];
    if (k->graph_walk == NULL)
        return mstar_error_set(MSTAR_EINVAL, "pools[%s].buckets[%zu].key.graph_walk is NULL",
                               pool->name, i);
    if (mstar_name_validate(k->graph_walk, strlen(k->graph_walk), "walk") != MSTAR_OK)
        return mstar_error_wrap("pools[%s].buckets[%zu]", pool->name, i);
    if (k->cg_key_info != NULL && strlen(k->cg_key_info) > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL,
                               "pools[%s].buckets[%zu].key.cg_key_info is %zu bytes, at most %d",
                               pool->name, i, strlen(k->cg_key_info), MSTAR_NAME_MAX);
    mstar_bucket_key_format(k, name, sizeof(name));
    if (k->bs < 1 || k->num_tokens < 1)
        return mstar_error_set(MSTAR_EINVAL, "pool %s bucket %s: bs and num_tokens must be >= 1",
                               pool->name, name);
    if (c->slots < 1)
        return mstar_error_set(MSTAR_EINVAL, "pool %s bucket %s: cost.slots is 0", pool->name,
                               name);
    if (c->has_graph && c->kept > c->graph)
        return mstar_error_set(MSTAR_EINVAL,
                               "pool %s bucket %s: cost.kept %" PRIu64
                               " exceeds cost.graph %" PRIu64
                               " (kept bytes are part of the graph's pool bytes)",
                               pool->name, name, c->kept, c->graph);
    if (c->executable < -1 || (c->executable >= 0 && (size_t)c->executable >= ncredits))
        return mstar_error_set(MSTAR_EINVAL,
                               "pool %s bucket %s: cost.executable %d is not -1 or an index below "
                               "%zu credits",
                               pool->name, name, (int)c->executable, ncredits);
    return MSTAR_OK;
}

/* slots·kept, slots·outside and the standalone cost, each checked for overflow. */
static mstar_status price(const mstar_pool_costs *pool, candidate *cand)
{
    const mstar_capture_cost *c = &cand->bc->cost;
    uint64_t slots = c->slots, standalone;
    if (!mstar__mul_u64(slots, c->kept, &cand->kept_all) ||
        !mstar__mul_u64(slots, c->outside, &cand->exec_need) ||
        !mstar__add_u64(cand->kept_all, c->graph - c->kept, &standalone) ||
        !mstar__add_u64(standalone, cand->exec_need, &cand->standalone)) {
        char name[MSTAR_BUCKET_NAME_MAX];
        return mstar_error_set(MSTAR_ERANGE, "pool %s bucket %s: cost overflows 64 bits",
                               pool->name,
                               mstar_bucket_key_format(&cand->bc->key, name, sizeof(name)));
    }
    return MSTAR_OK;
}

static mstar_status check_pools(const mstar_pool_costs *pools, size_t npools, size_t ncredits,
                                size_t *ncandidates)
{
    size_t n = 0;
    for (size_t p = 0; p < npools; p++) {
        const mstar_pool_costs *pool = &pools[p];
        if (pool->name == NULL)
            return mstar_error_set(MSTAR_EINVAL, "pools[%zu].name is NULL", p);
        if (mstar_name_validate(pool->name, strlen(pool->name), "pool name") != MSTAR_OK)
            return mstar_error_wrap("pools[%zu]", p);
        for (size_t q = 0; q < p; q++) {
            if (strcmp(pools[q].name, pool->name) == 0)
                return mstar_error_set(MSTAR_EINVAL, "pools[%zu] and pools[%zu] are both named %s",
                                       q, p, pool->name);
        }
        if (pool->nbuckets > 0 && pool->buckets == NULL)
            return mstar_error_set(MSTAR_EINVAL, "pools[%s].buckets is NULL with %zu buckets",
                                   pool->name, pool->nbuckets);
        for (size_t i = 0; i < pool->nbuckets; i++) {
            mstar_status st = check_bucket(pool, i, ncredits);
            if (st != MSTAR_OK)
                return st;
            n += pool->buckets[i].cost.has_graph;
        }
    }
    *ncandidates = n;
    return MSTAR_OK;
}

static mstar_status alloc_plan(const mstar_pool_costs *pools, size_t npools,
                               mstar_capture_plan *plan)
{
    memset(plan, 0, sizeof(*plan));
    if (npools == 0)
        return MSTAR_OK;
    plan->pools = calloc(npools, sizeof(*plan->pools));
    if (plan->pools == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture plan: %zu pools", npools);
    plan->npools = npools;
    for (size_t p = 0; p < npools; p++) {
        if (pools[p].nbuckets == 0)
            continue;
        plan->pools[p].planned = calloc(pools[p].nbuckets, sizeof(bool));
        if (plan->pools[p].planned == NULL) {
            mstar_capture_plan_clear(plan);
            return mstar_error_set(MSTAR_ENOMEM, "capture plan: pool %s, %zu buckets",
                                   pools[p].name, pools[p].nbuckets);
        }
    }
    return MSTAR_OK;
}

/* Per-pool running state of the walk over candidates. */
typedef struct pool_state {
    uint64_t kept_sum;
    uint64_t extra_max;
    uint64_t exec_sum;
} pool_state;

/*
 * The greedy walk itself. Sums cannot overflow: every accepted Δ keeps total + floor <= free.
 */
static void choose(const mstar_pool_costs *pools, candidate *cands, size_t ncands,
                   uint64_t free_bytes, uint64_t floor, uint64_t *credit, uint64_t reusable,
                   pool_state *state, mstar_capture_plan *plan)
{
    uint64_t total = 0, reuse_used = 0;
    for (size_t i = 0; i < ncands; i++) {
        candidate *cand = &cands[i];
        const mstar_capture_cost *c = &cand->bc->cost;
        pool_state *ps = &state[cand->pool];
        uint64_t extra = c->graph - c->kept;
        uint64_t grow = extra > ps->extra_max ? extra - ps->extra_max : 0;
        uint64_t reuse = 0;
        if (c->executable >= 0) {
            reuse = cand->exec_need;
            if (credit[c->executable] < reuse)
                reuse = credit[c->executable];
            if (reusable != MSTAR_PLAN_REUSE_UNBOUNDED && reusable - reuse_used < reuse)
                reuse = reusable - reuse_used;
        }
        /* Δ = kept_all + grow + exec_need − reuse. total + Δ + floor > free, rearranged so that
         * nothing overflows: total never exceeds free − floor once a candidate was accepted. */
        uint64_t room = floor <= free_bytes ? free_bytes - floor - total : 0;
        uint64_t delta = UINT64_MAX;
        bool fits = floor <= free_bytes && mstar__add_u64(cand->kept_all, grow, &delta) &&
                    mstar__add_u64(delta, cand->exec_need - reuse, &delta) && delta <= room;
        if (!fits) {
            char name[MSTAR_BUCKET_NAME_MAX];
            mstar_log(MSTAR_LOG_DEBUG,
                      "capture plan: stop at pool %s bucket %s (needs %" PRIu64 " bytes, %" PRIu64
                      " left beside the floor)",
                      pools[cand->pool].name,
                      mstar_bucket_key_format(&cand->bc->key, name, sizeof(name)), delta, room);
            return;
        }
        plan->pools[cand->pool].planned[cand->index] = true;
        plan->pools[cand->pool].nplanned++;
        ps->kept_sum += cand->kept_all;
        if (extra > ps->extra_max)
            ps->extra_max = extra;
        ps->exec_sum += cand->exec_need - reuse;
        if (c->executable >= 0)
            credit[c->executable] -= reuse;
        reuse_used += reuse;
        total += delta;
        MSTAR__ASSERT(floor <= free_bytes && total <= free_bytes - floor); /* I-23 */
    }
}

mstar_status mstar_plan_captures(const mstar_pool_costs *pools, size_t npools, uint64_t free_bytes,
                                 const uint64_t *credits, size_t ncredits, uint64_t reusable,
                                 mstar_capture_plan *out)
{
    if (npools > 0 && pools == NULL)
        return mstar_error_set(MSTAR_EINVAL, "pools is NULL with npools %zu", npools);
    if (ncredits > 0 && credits == NULL)
        return mstar_error_set(MSTAR_EINVAL, "credits is NULL with ncredits %zu", ncredits);
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "out is NULL");
    size_t ncands = 0;
    mstar_status st = check_pools(pools, npools, ncredits, &ncands);
    if (st != MSTAR_OK)
        return st;

    candidate *cands = calloc(ncands ? ncands : 1, sizeof(*cands));
    uint64_t *credit = calloc(ncredits ? ncredits : 1, sizeof(*credit));
    pool_state *state = calloc(npools ? npools : 1, sizeof(*state));
    mstar_capture_plan plan;
    memset(&plan, 0, sizeof(plan));
    if (cands == NULL || credit == NULL || state == NULL) {
        st = mstar_error_set(MSTAR_ENOMEM, "capture plan: %zu candidates", ncands);
        goto done;
    }
    if (ncredits > 0)
        memcpy(credit, credits, ncredits * sizeof(*credit));

    uint64_t floor = 0;
    size_t n = 0;
    for (size_t p = 0; p < npools; p++) {
        for (size_t i = 0; i < pools[p].nbuckets; i++) {
            const mstar_bucket_cost *bc = &pools[p].buckets[i];
            if (bc->cost.peak > floor)
                floor = bc->cost.peak;
            if (!bc->cost.has_graph)
                continue;
            cands[n] = (candidate){ .pool = p, .pool_name = pools[p].name, .index = i, .bc = bc };
            st = price(&pools[p], &cands[n]);
            if (st != MSTAR_OK)
                goto done;
            n++;
        }
    }
    qsort(cands, n, sizeof(*cands), cmp_candidate);
    for (size_t i = 1; i < n; i++) {
        if (cmp_identity(&cands[i - 1], &cands[i]) == 0) {
            char name[MSTAR_BUCKET_NAME_MAX];
            st = mstar_error_set(MSTAR_EINVAL, "pool %s lists bucket %s (config %u) twice",
                                 pools[cands[i].pool].name,
                                 mstar_bucket_key_format(&cands[i].bc->key, name, sizeof(name)),
                                 cands[i].bc->config_idx);
            goto done;
        }
    }

    st = alloc_plan(pools, npools, &plan);
    if (st != MSTAR_OK)
        goto done;
    plan.floor = floor;
    choose(pools, cands, n, free_bytes, floor, credit, reusable, state, &plan);
    for (size_t p = 0; p < npools; p++) {
        plan.pools[p].predicted = state[p].kept_sum + state[p].extra_max;
        plan.pools[p].outside = state[p].exec_sum;
        mstar_log(MSTAR_LOG_INFO,
                  "capture plan: pool %s captures %zu of %zu buckets, predicted %" PRIu64
                  " pool bytes + %" PRIu64 " outside (free %" PRIu64 ", floor %" PRIu64 ")",
                  pools[p].name, plan.pools[p].nplanned, pools[p].nbuckets, plan.pools[p].predicted,
                  plan.pools[p].outside, free_bytes, floor);
    }
    *out = plan;

done:
    free(cands);
    free(credit);
    free(state);
    return st;
}

void mstar_capture_plan_clear(mstar_capture_plan *plan)
{
    if (plan == NULL)
        return;
    for (size_t p = 0; p < plan->npools; p++)
        free(plan->pools[p].planned);
    free(plan->pools);
    memset(plan, 0, sizeof(*plan));
}
