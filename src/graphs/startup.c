/*
 * startup.c — the startup order of one device (design.md "Startup"): size every runner, agree
 * the costs across ranks, plan under the device's free memory, resize and replan if anything was
 * left out, capture what the plan chose, and make every rank drop whatever any rank failed.
 *
 * Ranks stay in lockstep because every decision is taken on agreed numbers: costs with max (the
 * most any rank needs), free memory and executable credits with min (the least any rank has), so
 * each rank computes the same plan from the same inputs; capture success with min, so a bucket
 * dropped anywhere is dropped everywhere (a rank replaying a graph while another runs eager
 * hangs once the step holds a collective). Values are laid out in runner order, then each
 * runner's capture order — both derived from the configs, identical on every rank.
 */
#include "graphs/capturer.h"

#include "core/vec.h"
#include "device/alloc.h"
#include "ranks/rank_group.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COST_WORDS 6 /* peak, no graph, graph, kept, outside, slots */
#define MiB(x)     ((double)(x) / (1024.0 * 1024.0))

/* Where a bucket of a pool's plan input came from. */
struct origin {
    size_t runner;
    size_t bucket;
};

struct pool_in {
    mstar_graph_pool *pool;
    mstar__vec costs;   /* mstar_bucket_cost */
    mstar__vec origins; /* struct origin */
    uint64_t reserved_before;
};

struct startup {
    const mstar_capture_startup *o;
    mstar__capturer *caps; /* the whole-forward runners, then the piecewise ones */
    size_t ncaps;
    mstar_rank_group *group;
    mstar_backend *backend;
    mstar_capture_sizing **sizings;
    size_t *credit_base; /* per runner: its first walk's index in credits */
    uint64_t *credits;
    size_t ncredits;
    struct pool_in *pools;
    size_t npools;
    uint64_t free_bytes;
    mstar_capture_plan plan;
    bool have_plan;
};

static mstar_status meet(struct startup *s)
{
    return mstar_agree_across_ranks(s->group, NULL, 0, MSTAR_REDUCE_MIN);
}

static int64_t clamp_i64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* ---- preparing ------------------------------------------------------------------------------- */

static mstar_status collect_pools(struct startup *s)
{
    s->pools = calloc(s->ncaps ? s->ncaps : 1, sizeof(*s->pools));
    if (s->pools == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        mstar_graph_pool *pool = s->caps[ri].ops->pool(s->caps[ri].r);
        size_t p = 0;
        while (p < s->npools && s->pools[p].pool != pool)
            p++;
        if (p == s->npools) {
            s->pools[p].pool = pool;
            mstar__vec_init(&s->pools[p].costs, sizeof(mstar_bucket_cost));
            mstar__vec_init(&s->pools[p].origins, sizeof(struct origin));
            s->npools++;
        }
    }
    return MSTAR_OK;
}

static mstar_status prepare(struct startup *s)
{
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        mstar_status st = s->caps[ri].ops->prepare(s->caps[ri].r);
        if (st != MSTAR_OK)
            return st;
    }
    return mstar_step_runner_build_graph_buffers(s->o->step_runner);
}

/* ---- agreeing on the sizing ------------------------------------------------------------------ */

static size_t total_buckets(const struct startup *s)
{
    size_t n = 0;
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        size_t k;
        mstar_capture_sizing_costs(s->sizings[ri], &k);
        n += k;
    }
    return n;
}

/* Free memory and credits are read here, just before agreeing: the throwaway graphs are gone,
 * their pools and the caching allocator trimmed, the executable copies still held. */
static mstar_status read_free(struct startup *s)
{
    for (size_t p = 0; p < s->npools; p++) {
        mstar_status st = mstar_graph_pool_trim(s->pools[p].pool, NULL);
        if (st != MSTAR_OK)
            return st;
    }
    uint64_t total;
    mstar_status st = mstar_caching_trim(s->backend, NULL);
    return st != MSTAR_OK ? st : mstar_mem_info(s->backend, &s->free_bytes, &total);
}

static mstar_status agree_costs(struct startup *s)
{
    size_t n = total_buckets(s);
    int64_t *most = calloc(n * COST_WORDS + 1, sizeof(int64_t));
    int64_t *least = calloc(s->ncredits + 1, sizeof(int64_t));
    mstar_status st = most == NULL || least == NULL
                          ? mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory")
                          : read_free(s);
    for (size_t ri = 0, k = 0; st == MSTAR_OK && ri < s->ncaps; ri++) {
        size_t nb;
        mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        for (size_t i = 0; i < nb; i++, k += COST_WORDS) {
            const mstar_capture_cost *c = &costs[i].cost;
            int64_t words[COST_WORDS] = { clamp_i64(c->peak),    !c->has_graph,
                                          clamp_i64(c->graph),   clamp_i64(c->kept),
                                          clamp_i64(c->outside), c->slots };
            memcpy(&most[k], words, sizeof(words));
        }
    }
    if (st == MSTAR_OK) {
        least[0] = clamp_i64(s->free_bytes);
        for (size_t i = 0; i < s->ncredits; i++)
            least[1 + i] = clamp_i64(s->credits[i]);
        st = mstar_agree_across_ranks(s->group, most, n * COST_WORDS, MSTAR_REDUCE_MAX);
    }
    if (st == MSTAR_OK)
        st = mstar_agree_across_ranks(s->group, least, s->ncredits + 1, MSTAR_REDUCE_MIN);
    for (size_t ri = 0, k = 0; st == MSTAR_OK && ri < s->ncaps; ri++) {
        size_t nb;
        mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        for (size_t i = 0; i < nb; i++, k += COST_WORDS) {
            mstar_capture_cost *c = &costs[i].cost;
            c->peak = (uint64_t)most[k];
            c->has_graph = most[k + 1] == 0;
            c->graph = (uint64_t)most[k + 2];
            c->kept = (uint64_t)most[k + 3];
            c->outside = (uint64_t)most[k + 4];
            c->slots = (uint32_t)most[k + 5];
            if (c->kept > c->graph) /* the largest of each, maybe from different ranks */
                c->graph = c->kept;
        }
    }
    if (st == MSTAR_OK) {
        s->free_bytes = (uint64_t)least[0];
        for (size_t i = 0; i < s->ncredits; i++)
            s->credits[i] = (uint64_t)least[1 + i];
    }
    free(most);
    free(least);
    return st;
}

/* ---- sizing and planning --------------------------------------------------------------------- */

static mstar_status size_all(struct startup *s)
{
    s->sizings = calloc(s->ncaps ? s->ncaps : 1, sizeof(*s->sizings));
    s->credit_base = calloc(s->ncaps ? s->ncaps : 1, sizeof(*s->credit_base));
    if (s->sizings == NULL || s->credit_base == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        mstar_status st = mstar__size_captures(s->caps[ri], s->group, &s->sizings[ri]);
        if (st != MSTAR_OK)
            return st;
        s->credit_base[ri] = s->ncredits;
        s->ncredits += mstar_capture_sizing_walks(s->sizings[ri]);
    }
    s->credits = calloc(s->ncredits ? s->ncredits : 1, sizeof(*s->credits));
    if (s->credits == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        for (size_t w = 0; w < mstar_capture_sizing_walks(s->sizings[ri]); w++)
            s->credits[s->credit_base[ri] + w] =
                mstar_exec_memory_held(mstar_capture_sizing_executable(s->sizings[ri], w));
    }
    return MSTAR_OK;
}

static mstar_status plan(struct startup *s)
{
    mstar_pool_costs *in = calloc(s->npools ? s->npools : 1, sizeof(*in));
    if (in == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    mstar_status st = MSTAR_OK;
    for (size_t p = 0; p < s->npools; p++) {
        s->pools[p].costs.len = 0;
        s->pools[p].origins.len = 0;
    }
    for (size_t ri = 0; st == MSTAR_OK && ri < s->ncaps; ri++) {
        struct pool_in *pi = s->pools;
        while (pi->pool != s->caps[ri].ops->pool(s->caps[ri].r))
            pi++;
        size_t nb;
        const mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        for (size_t i = 0; st == MSTAR_OK && i < nb; i++) {
            mstar_bucket_cost c = costs[i];
            c.cost.executable += (int32_t)s->credit_base[ri];
            struct origin o = { ri, i };
            st = mstar__vec_push(&pi->costs, &c);
            if (st == MSTAR_OK)
                st = mstar__vec_push(&pi->origins, &o);
        }
    }
    for (size_t p = 0; p < s->npools; p++)
        in[p] = (mstar_pool_costs){ mstar_graph_pool_name(s->pools[p].pool), s->pools[p].costs.data,
                                    s->pools[p].costs.len };
    if (s->have_plan)
        mstar_capture_plan_clear(&s->plan);
    s->have_plan = false;
    uint64_t reusable = s->o->bound_reuse ? s->o->reusable : MSTAR_PLAN_REUSE_UNBOUNDED;
    if (st == MSTAR_OK)
        st = mstar_plan_captures(in, s->npools, s->free_bytes, s->credits, s->ncredits, reusable,
                                 &s->plan);
    s->have_plan = st == MSTAR_OK;
    free(in);
    return st;
}

static size_t planned_count(const struct startup *s)
{
    size_t n = 0;
    for (size_t p = 0; p < s->plan.npools; p++)
        n += s->plan.pools[p].nplanned;
    return n;
}

static bool is_planned(const struct startup *s, size_t runner, size_t bucket)
{
    for (size_t p = 0; p < s->npools; p++) {
        for (size_t j = 0; j < s->pools[p].origins.len; j++) {
            const struct origin *o = mstar__vec_at(&s->pools[p].origins, j);
            if (o->runner == runner && o->bucket == bucket)
                return s->plan.pools[p].planned[j];
        }
    }
    return false;
}

/* ---- capturing ------------------------------------------------------------------------------- */

static mstar_status capture_planned(struct startup *s)
{
    size_t total = planned_count(s), done = 0;
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        mstar__capturer c = s->caps[ri];
        size_t nb;
        const mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        bool any = false;
        for (size_t i = 0; i < nb; i++) {
            if (!is_planned(s, ri, i))
                continue;
            mstar_status st = meet(s);
            if (st != MSTAR_OK)
                return st;
            char name[MSTAR_BUCKET_NAME_MAX];
            mstar_log(MSTAR_LOG_INFO, "capturing %zu/%zu: %s %s (%" PRIu32 " slot%s)", ++done,
                      total, c.ops->name(c.r),
                      mstar_bucket_key_format(&costs[i].key, name, sizeof(name)),
                      costs[i].cost.slots, costs[i].cost.slots == 1 ? "" : "s");
            /* One bucket per call, largest first; each call marks the buckets it was not given
             * as dropped, so after the last call the dropped list is exactly the uncaptured. */
            st = c.ops->capture(c.r, &costs[i].key, 1);
            if (st != MSTAR_OK)
                return st;
            any = true;
        }
        if (!any) {
            static const mstar_bucket_key none;
            mstar_status st = c.ops->capture(c.r, &none, 0);
            if (st != MSTAR_OK)
                return st;
        }
    }
    return MSTAR_OK;
}

static bool locally_dropped(mstar__capturer c, const mstar_bucket_key *key)
{
    size_t n;
    const mstar_bucket_key *dropped = c.ops->dropped(c.r, &n);
    for (size_t i = 0; i < n; i++) {
        if (mstar_bucket_key_equal(&dropped[i], key))
            return true;
    }
    return false;
}

/* Capture success agreed with min; a bucket any rank lacks goes everywhere. */
static mstar_status agree_success(struct startup *s, size_t *captured)
{
    size_t n = total_buckets(s);
    int64_t *ok = calloc(n + 1, sizeof(int64_t));
    if (ok == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    for (size_t ri = 0, k = 0; ri < s->ncaps; ri++) {
        size_t nb;
        const mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        for (size_t i = 0; i < nb; i++, k++)
            ok[k] = !locally_dropped(s->caps[ri], &costs[i].key);
    }
    mstar_status st = mstar_agree_across_ranks(s->group, ok, n, MSTAR_REDUCE_MIN);
    *captured = 0;
    for (size_t ri = 0, k = 0; st == MSTAR_OK && ri < s->ncaps; ri++) {
        mstar__capturer c = s->caps[ri];
        size_t nb;
        const mstar_bucket_cost *costs = mstar_capture_sizing_costs(s->sizings[ri], &nb);
        for (size_t i = 0; st == MSTAR_OK && i < nb; i++, k++) {
            *captured += ok[k] != 0;
            if (ok[k] != 0 || locally_dropped(c, &costs[i].key))
                continue;
            char name[MSTAR_BUCKET_NAME_MAX];
            mstar_log(MSTAR_LOG_WARN, "%s: dropping %s, which another rank failed to capture",
                      c.ops->name(c.r), mstar_bucket_key_format(&costs[i].key, name, sizeof(name)));
            st = c.ops->drop(c.r, &costs[i].key);
        }
    }
    free(ok);
    return st;
}

static mstar_status require_graphs(struct startup *s)
{
    size_t n = 0;
    for (size_t ri = 0; ri < s->ncaps; ri++) {
        size_t k;
        s->caps[ri].ops->dropped(s->caps[ri].r, &k);
        n += k;
    }
    char(*names)[MSTAR_BUCKET_NAME_MAX] = calloc(n ? n : 1, sizeof(*names));
    const char **list = calloc(n ? n : 1, sizeof(*list));
    mstar_status st = names == NULL || list == NULL
                          ? mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory")
                          : MSTAR_OK;
    for (size_t ri = 0, j = 0; st == MSTAR_OK && ri < s->ncaps; ri++) {
        size_t k;
        const mstar_bucket_key *d = s->caps[ri].ops->dropped(s->caps[ri].r, &k);
        for (size_t i = 0; i < k; i++, j++)
            list[j] = mstar_bucket_key_format(&d[i], names[j], sizeof(names[j]));
    }
    if (st == MSTAR_OK)
        st = mstar_fail_if_graphs_required(list, n);
    free(names);
    free(list);
    return st;
}

/* Pool bytes the real captures reserved in pool p. */
static uint64_t pool_took(const struct startup *s, size_t p)
{
    mstar_alloc_stats now;
    mstar_graph_pool_stats(s->pools[p].pool, &now);
    return now.reserved > s->pools[p].reserved_before ? now.reserved - s->pools[p].reserved_before
                                                      : 0;
}

/*
 * Pool p's predicted bytes: the plan's figure, an upper bound of what the captures will take,
 * rounded down to whole segments. A pool reserves whole MSTAR__SEGMENT_ROUND segments
 * (alloc.c), so what it takes is a multiple of one, and a bound of such a multiple stays a
 * bound when rounded down to one. On small pools that rounding is most of the error: the
 * reference model's default configuration predicted 4.5 MiB for the 4.0 MiB (two segments) its
 * captures took. Below one segment the figure is kept as it is.
 */
static uint64_t pool_predicted(const struct startup *s, size_t p)
{
    uint64_t x = s->plan.pools[p].predicted;
    return x < MSTAR__SEGMENT_ROUND ? x : x / MSTAR__SEGMENT_ROUND * MSTAR__SEGMENT_ROUND;
}

/* The boot log's comparison of the plan with what capture took (design.md "Planning"). */
static void log_memory(const struct startup *s, const mstar_capture_report *rep)
{
    for (size_t p = 0; p < s->npools; p++) {
        uint64_t took = pool_took(s, p), want = pool_predicted(s, p);
        mstar_log(MSTAR_LOG_INFO,
                  "capture memory: pool %s: predicted %.1f MiB, captures took %.1f MiB (%+.1f%%)",
                  mstar_graph_pool_name(s->pools[p].pool), MiB(want), MiB(took),
                  want ? 100.0 * ((double)took - (double)want) / (double)want : 0.0);
    }
    mstar_log(MSTAR_LOG_INFO,
              "capture memory: %zu of %zu buckets captured in %.2f s; pools predicted %.1f MiB, "
              "took %.1f MiB; outside the pools predicted %.1f MiB, took %.1f MiB; floor %.1f "
              "MiB of %.1f MiB free",
              rep->captured, rep->buckets, rep->capture_seconds, MiB(rep->predicted),
              MiB(rep->taken), MiB(rep->predicted_outside), MiB(rep->outside), MiB(rep->floor),
              MiB(rep->free_bytes));
}

/* Plan, and resize and replan if any rank left a bucket out (design.md "Planning"). */
static mstar_status decide(struct startup *s, mstar_capture_report *rep)
{
    mstar_status st = agree_costs(s);
    if (st == MSTAR_OK)
        st = plan(s);
    int64_t wanted = st == MSTAR_OK && planned_count(s) < total_buckets(s);
    if (st == MSTAR_OK)
        st = mstar_agree_across_ranks(s->group, &wanted, 1, MSTAR_REDUCE_MAX);
    if (st == MSTAR_OK && wanted) {
        rep->resized = true;
        for (size_t ri = 0; st == MSTAR_OK && ri < s->ncaps; ri++)
            st = mstar_size_lent_captures(s->sizings[ri], true);
        if (st == MSTAR_OK)
            st = agree_costs(s);
        if (st == MSTAR_OK)
            st = plan(s);
    }
    return st;
}

static mstar_status run(struct startup *s, mstar_capture_report *rep)
{
    mstar_status st = collect_pools(s);
    if (st == MSTAR_OK)
        st = prepare(s);
    if (st == MSTAR_OK)
        st = size_all(s);
    if (st == MSTAR_OK)
        st = decide(s, rep);
    if (st != MSTAR_OK)
        return st;
    rep->buckets = total_buckets(s);
    rep->planned = planned_count(s);
    rep->free_bytes = s->free_bytes;
    rep->floor = s->plan.floor;
    for (size_t p = 0; p < s->plan.npools; p++) {
        rep->predicted += pool_predicted(s, p);
        rep->predicted_outside += s->plan.pools[p].outside;
    }

    /* The copies' memory goes back to the driver, which hands it to the real executables. */
    uint64_t held = 0, free_held, free_before, free_after, total;
    for (size_t ri = 0; ri < s->ncaps; ri++) /* this rank's copies (the credits are all ranks') */
        for (size_t w = 0; w < mstar_capture_sizing_walks(s->sizings[ri]); w++)
            held += mstar_exec_memory_held(mstar_capture_sizing_executable(s->sizings[ri], w));
    st = mstar_mem_info(s->backend, &free_held, &total);
    for (size_t ri = 0; ri < s->ncaps; ri++)
        mstar_capture_sizing_release(s->sizings[ri]);
    if (st == MSTAR_OK)
        st = mstar_mem_info(s->backend, &free_before, &total);
    if (st == MSTAR_OK)
        mstar_log(MSTAR_LOG_INFO,
                  "capture memory: the sizing copies held %.1f MiB; releasing them gave %.1f MiB "
                  "back to free memory",
                  MiB(held), free_before > free_held ? MiB(free_before - free_held) : 0.0);
    for (size_t p = 0; p < s->npools; p++) {
        mstar_alloc_stats ps;
        mstar_graph_pool_stats(s->pools[p].pool, &ps);
        s->pools[p].reserved_before = ps.reserved;
    }
    uint64_t t0 = mstar__now_ns();
    if (st == MSTAR_OK)
        st = capture_planned(s);
    rep->capture_seconds = (double)(mstar__now_ns() - t0) / 1e9;
    for (size_t ri = 0; st == MSTAR_OK && ri < s->ncaps; ri++)
        st = mstar_dummy_rows_release_all(s->caps[ri].ops->rows(s->caps[ri].r));
    if (st == MSTAR_OK)
        st = mstar_caching_trim(s->backend, NULL);
    if (st == MSTAR_OK)
        st = mstar_mem_info(s->backend, &free_after, &total);
    if (st == MSTAR_OK)
        st = agree_success(s, &rep->captured);
    if (st != MSTAR_OK)
        return st;
    for (size_t p = 0; p < s->npools; p++)
        rep->taken += pool_took(s, p);
    uint64_t drop = free_before > free_after ? free_before - free_after : 0;
    rep->outside = drop > rep->taken ? drop - rep->taken : 0;
    log_memory(s, rep);
    st = require_graphs(s);
    if (st == MSTAR_OK)
        st = mstar_step_runner_post_warmup_validate(s->o->step_runner);
    if (st == MSTAR_OK)
        st = meet(s); /* nobody schedules while another rank still captures */
    return st;
}

/* Both lists as capturers, each checked to drive the device's step runner. */
static mstar_status collect_runners(struct startup *s)
{
    const mstar_capture_startup *o = s->o;
    s->caps = calloc(o->n_runners + o->n_piecewise + 1, sizeof(*s->caps));
    if (s->caps == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "capture startup: out of memory");
    for (size_t i = 0; i < o->n_runners + o->n_piecewise; i++) {
        bool whole = i < o->n_runners;
        void *r = whole ? (void *)o->runners[i] : (void *)o->piecewise[i - o->n_runners];
        if (r == NULL)
            return mstar_error_set(MSTAR_EINVAL, "capture startup: %s[%zu] is NULL",
                                   whole ? "runners" : "piecewise", whole ? i : i - o->n_runners);
        mstar__capturer c = whole ? mstar__capturer_whole(r) : mstar__capturer_piecewise(r);
        if (c.ops->step_runner(c.r) != o->step_runner)
            return mstar_error_set(MSTAR_EINVAL,
                                   "capture startup: %s drives another step runner than the "
                                   "device's",
                                   c.ops->name(c.r));
        s->caps[s->ncaps++] = c;
    }
    return MSTAR_OK;
}

mstar_status mstar_capture_startup_run(const mstar_capture_startup *opts,
                                       mstar_capture_report *report)
{
    if (opts == NULL || opts->step_runner == NULL ||
        (opts->n_runners > 0 && opts->runners == NULL) ||
        (opts->n_piecewise > 0 && opts->piecewise == NULL))
        return mstar_error_set(MSTAR_EINVAL, "capture startup: opts, its step_runner or a runner "
                                             "list is NULL");
    struct startup s;
    memset(&s, 0, sizeof(s));
    s.o = opts;
    s.backend = mstar_step_runner_backend(opts->step_runner);
    mstar_rank_group *single = NULL;
    mstar_status st = collect_runners(&s);
    if (st == MSTAR_OK && opts->group == NULL)
        st = mstar_rank_group_create_single(&single);
    s.group = opts->group != NULL ? opts->group : single;
    mstar_capture_report rep;
    memset(&rep, 0, sizeof(rep));
    if (st == MSTAR_OK)
        st = run(&s, &rep);
    if (st == MSTAR_OK && report != NULL)
        *report = rep;

    if (s.have_plan)
        mstar_capture_plan_clear(&s.plan);
    for (size_t ri = 0; s.sizings != NULL && ri < s.ncaps; ri++)
        mstar_capture_sizing_destroy(s.sizings[ri]);
    for (size_t p = 0; p < s.npools; p++) {
        mstar__vec_free(&s.pools[p].costs);
        mstar__vec_free(&s.pools[p].origins);
    }
    free(s.pools);
    free(s.sizings);
    free(s.credit_base);
    free(s.credits);
    free(s.caps);
    mstar_rank_group_destroy(single);
    if (st != MSTAR_OK)
        return mstar_error_wrap("capture startup");
    return MSTAR_OK;
}
