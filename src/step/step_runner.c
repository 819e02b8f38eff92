/*
 * step_runner.c — one per device: the resources, the admit → plan → commit cycle, pre-plan on the
 * plan stream, the one-time build of graph buffers, and the lease counter.
 *
 * Why one lease counter here and not per bucket or per runner (design.md "Slots", G-3):
 * slot-keyed resource buffers (plan state per (slot, label), workspace per label and slot) are
 * shared across buckets and across the runners of nodes that share resources. Counters per
 * bucket let consecutive steps on different buckets pick the same slot and pre-plan over buffers
 * a replay still reads. The counter is behind a mutex because pre-plan may reserve from the plan
 * thread while the main thread reserves for fallthrough steps.
 */
#include "step/step_runner.h"

#include "core/assert.h"
#include "core/vec.h"
#include "device/backend.h"
#include "mstar/piecewise.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPS 16

struct resource {
    char *key;
    const mstar_resource_ops *ops;
    void *self;
    size_t deps[MAX_DEPS]; /* indices of earlier resources */
    size_t ndeps;
};

struct mstar_step_runner {
    mstar_backend *backend;
    mstar_stream *compute;
    mstar_stream *plan;
    mstar__vec resources; /* struct resource */
    mstar__vec claims;    /* mstar_cg_slot_spec */
    int64_t max_bs;
    int64_t max_seq_len;
    bool built;
    pthread_mutex_t lease_lock;
    uint64_t lease_counter;
    /* By slot: the event the slot's graphs record at the end of each replay (NULL until a graph
     * of the slot was captured), and whether such a graph has been launched since. */
    mstar_event *slot_events[MSTAR__MAX_SLOTS];
    atomic_bool slot_replayed[MSTAR__MAX_SLOTS];
    /* By slot, under lease_lock: the cg_key_info of the last leased step planned for it
     * (planned_key_set; the key may be NULL), which run_forward checks its lease against. */
    char *planned_key[MSTAR__MAX_SLOTS];
    bool planned_key_set[MSTAR__MAX_SLOTS];
};

mstar_status mstar_step_runner_create(mstar_backend *b, mstar_stream *compute,
                                      mstar_step_runner **out)
{
    if (b == NULL || compute == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_runner_create: backend, compute stream "
                                             "and out must not be NULL");
    if (mstar_stream_backend(compute) != b)
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_runner_create: the compute stream "
                                             "belongs to another backend");
    mstar_step_runner *sr = calloc(1, sizeof(*sr));
    if (sr == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_step_runner_create: out of memory");
    mstar_status st = mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &sr->plan);
    if (st != MSTAR_OK) {
        free(sr);
        return st;
    }
    sr->backend = b;
    sr->compute = compute;
    mstar__vec_init(&sr->resources, sizeof(struct resource));
    mstar__vec_init(&sr->claims, sizeof(mstar_cg_slot_spec));
    for (int i = 0; i < MSTAR__MAX_SLOTS; i++)
        atomic_init(&sr->slot_replayed[i], false);
    pthread_mutex_init(&sr->lease_lock, NULL);
    *out = sr;
    return MSTAR_OK;
}

void mstar_step_runner_destroy(mstar_step_runner *sr)
{
    if (sr == NULL)
        return;
    for (size_t i = 0; i < sr->resources.len; i++)
        free(((struct resource *)mstar__vec_at(&sr->resources, i))->key);
    for (int i = 0; i < MSTAR__MAX_SLOTS; i++) {
        mstar_event_destroy(sr->slot_events[i]);
        free(sr->planned_key[i]);
    }
    mstar__vec_free(&sr->resources);
    mstar__vec_free(&sr->claims);
    mstar_stream_destroy(sr->plan);
    pthread_mutex_destroy(&sr->lease_lock);
    free(sr);
}

mstar_backend *mstar_step_runner_backend(const mstar_step_runner *sr)
{
    return sr->backend;
}

mstar_stream *mstar_step_runner_compute_stream(const mstar_step_runner *sr)
{
    return sr->compute;
}

mstar_stream *mstar_step_runner_plan_stream(const mstar_step_runner *sr)
{
    return sr->plan;
}

static struct resource *res_at(const mstar_step_runner *sr, size_t i)
{
    return mstar__vec_at(&sr->resources, i);
}

static struct resource *res_find(const mstar_step_runner *sr, const char *key, size_t *index)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        if (strcmp(res_at(sr, i)->key, key) == 0) {
            if (index != NULL)
                *index = i;
            return res_at(sr, i);
        }
    }
    return NULL;
}

mstar_status mstar_step_runner_add_resource(mstar_step_runner *sr, const char *key,
                                            const mstar_resource_ops *ops, void *self,
                                            const char *const *deps, size_t ndeps)
{
    if (sr == NULL || key == NULL || ops == NULL || (deps == NULL && ndeps != 0))
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_runner_add_resource: NULL argument");
    mstar_status st = mstar_name_validate(key, strlen(key), "resource key");
    if (st != MSTAR_OK)
        return st;
    if (res_find(sr, key, NULL) != NULL)
        return mstar_error_set(MSTAR_EEXIST, "resource '%s' is already registered", key);
    if (ndeps > MAX_DEPS)
        return mstar_error_set(MSTAR_EINVAL, "resource '%s': %zu dependencies, at most %d", key,
                               ndeps, MAX_DEPS);
    if (ops->supports_preplan && (ops->pre_admit == NULL || ops->pre_plan == NULL))
        return mstar_error_set(MSTAR_EINVAL,
                               "resource '%s' supports pre-plan but has no "
                               "pre_admit or pre_plan",
                               key);
    struct resource r = { .ops = ops, .self = self, .ndeps = ndeps };
    for (size_t i = 0; i < ndeps; i++) {
        struct resource *d = res_find(sr, deps[i], &r.deps[i]);
        if (d == NULL)
            return mstar_error_set(MSTAR_EINVAL,
                                   "resource '%s' depends on '%s', which is not registered yet "
                                   "(register dependencies first)",
                                   key, deps[i]);
        if (ops->supports_preplan && !d->ops->supports_preplan)
            return mstar_error_set(MSTAR_EINVAL,
                                   "resource '%s' pre-plans but its dependency '%s' does not: it "
                                   "would read the plan of the step still in flight",
                                   key, deps[i]);
    }
    if ((r.key = strdup(key)) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_step_runner_add_resource: out of memory");
    st = mstar__vec_push(&sr->resources, &r);
    if (st != MSTAR_OK)
        free(r.key);
    return st;
}

bool mstar_step_runner_supports_preplan(const mstar_step_runner *sr)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        if (res_at(sr, i)->ops->supports_preplan)
            return true;
    }
    return false;
}

mstar_status mstar_step_runner_default_num_slots(const mstar_step_runner *sr, int32_t *out)
{
    int64_t n = 2;
    mstar_status st = mstar_env_get_int("MSTAR_NUM_SLOTS", 2, 1, 16, &n);
    if (st != MSTAR_OK)
        return st;
    *out = mstar_step_runner_supports_preplan(sr) ? (int32_t)n : 1;
    return MSTAR_OK;
}

/* ---- the cycle --------------------------------------------------------------------------------
 */

static bool in_step(const struct resource *r, const mstar_step *step)
{
    return mstar_step_resource(step, r->key, NULL) != NULL;
}

static mstar_status run_admit(mstar_step_runner *sr, mstar_step *step, mstar_step_admit_result *out,
                              bool pre)
{
    memset(out, 0, sizeof(*out));
    out->ok = out->ready = true;
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (!in_step(r, step) || (pre && !r->ops->supports_preplan))
            continue;
        mstar_status (*fn)(void *, mstar_step *, mstar_step_admit_result *) =
            pre ? r->ops->pre_admit : r->ops->admit;
        if (fn == NULL)
            continue;
        mstar_step_admit_result res = { .ok = true, .ready = true };
        mstar_status st = fn(r->self, step, &res);
        if (st != MSTAR_OK)
            return mstar_error_wrap("%sadmit of resource '%s'", pre ? "pre-" : "", r->key);
        if (!res.ok || !res.ready) {
            *out = res;
            return MSTAR_OK;
        }
    }
    return MSTAR_OK;
}

typedef mstar_status (*phase_fn)(void *, mstar_step *);

static mstar_status run_phase(mstar_step_runner *sr, mstar_step *step, const char *what,
                              size_t offset, bool preplan_only)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (!in_step(r, step) || (preplan_only && !r->ops->supports_preplan))
            continue;
        phase_fn fn = *(const phase_fn *)((const char *)r->ops + offset);
        if (fn == NULL)
            continue;
        if (fn(r->self, step) != MSTAR_OK)
            return mstar_error_wrap("%s of resource '%s'", what, r->key);
    }
    return MSTAR_OK;
}

static void default_stream(mstar_step_runner *sr, mstar_step *step)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    if (ctx->stream == NULL)
        ctx->stream = sr->compute;
}

static bool same_key_info(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* A whole-forward replay step (leased, not a capture; a piecewise region's lease names its label
 * instead) whose cg_key_info is not its lease's bucket's: the graph was captured for steps that
 * declare something else (design.md "Replay", G-16). */
static bool replay_step_of(const mstar_step *step)
{
    const mstar_step_ctx *ctx = mstar_step_context((mstar_step *)step);
    return ctx->has_lease && !ctx->capture && ctx->lease.bucket.graph_walk != NULL &&
           strcmp(ctx->lease.bucket.graph_walk, MSTAR_PIECEWISE_WALK) != 0;
}

static mstar_status check_lease_key(const mstar_step *step, const char *what)
{
    const mstar_step_ctx *ctx = mstar_step_context((mstar_step *)step);
    const char *key = mstar_step_cg_key_info(step);
    if (!replay_step_of(step) || same_key_info(key, ctx->lease.bucket.cg_key_info))
        return MSTAR_OK;
    char name[MSTAR_BUCKET_NAME_MAX];
    return mstar_error_set(MSTAR_EINVAL, "%s: the step's cg_key_info '%s' is not its lease's (%s)",
                           what, key != NULL ? key : "(none)",
                           mstar_bucket_key_format(&ctx->lease.bucket, name, sizeof(name)));
}

mstar_status mstar_step_runner_admit(mstar_step_runner *sr, mstar_step *step,
                                     mstar_step_admit_result *out)
{
    default_stream(sr, step);
    mstar_status st = check_lease_key(step, "admit");
    return st != MSTAR_OK ? st : run_admit(sr, step, out, false);
}

/* Note the key a replay step of a slot was planned with, for run_forward's check. */
static mstar_status note_planned_key(mstar_step_runner *sr, const mstar_step *step)
{
    const mstar_step_ctx *ctx = mstar_step_context((mstar_step *)step);
    int32_t slot = ctx->lease.slot;
    if (!replay_step_of(step) || slot < 0 || slot >= MSTAR__MAX_SLOTS)
        return MSTAR_OK;
    const char *key = mstar_step_cg_key_info(step);
    char *copy = key != NULL ? strdup(key) : NULL;
    if (key != NULL && copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "plan: out of memory");
    pthread_mutex_lock(&sr->lease_lock);
    free(sr->planned_key[slot]);
    sr->planned_key[slot] = copy;
    sr->planned_key_set[slot] = true;
    pthread_mutex_unlock(&sr->lease_lock);
    return MSTAR_OK;
}

mstar_status mstar_step_runner_plan(mstar_step_runner *sr, mstar_step *step)
{
    default_stream(sr, step);
    mstar_status st = run_phase(sr, step, "plan", offsetof(mstar_resource_ops, plan), false);
    return st != MSTAR_OK ? st : note_planned_key(sr, step);
}

mstar_status mstar__step_runner_check_replay_key(mstar_step_runner *sr,
                                                 const mstar_slot_lease *lease, const char *who)
{
    int32_t slot = lease->slot;
    if (slot < 0 || slot >= MSTAR__MAX_SLOTS)
        return MSTAR_OK;
    pthread_mutex_lock(&sr->lease_lock);
    bool set = sr->planned_key_set[slot];
    bool same = !set || same_key_info(sr->planned_key[slot], lease->bucket.cg_key_info);
    char planned[MSTAR_NAME_MAX + 1] = "(none)";
    if (!same && sr->planned_key[slot] != NULL)
        snprintf(planned, sizeof(planned), "%s", sr->planned_key[slot]);
    pthread_mutex_unlock(&sr->lease_lock);
    if (same)
        return MSTAR_OK;
    char name[MSTAR_BUCKET_NAME_MAX];
    return mstar_error_set(MSTAR_EINVAL,
                           "run_forward(%s): the step planned on slot %d declared cg_key_info "
                           "'%s', not the lease's (%s)",
                           who, (int)slot, planned,
                           mstar_bucket_key_format(&lease->bucket, name, sizeof(name)));
}

mstar_status mstar_step_runner_commit(mstar_step_runner *sr, mstar_step *step)
{
    default_stream(sr, step);
    return run_phase(sr, step, "commit", offsetof(mstar_resource_ops, commit), false);
}

static mstar_status enter_preplan(mstar_step_runner *sr, mstar_step *step)
{
    mstar_step_ctx *ctx = mstar_step_context(step);
    if (!ctx->has_lease)
        return mstar_error_set(MSTAR_ESTATE,
                               "pre-plan needs a slot lease: eager steps share one workspace per "
                               "label with the forward in flight");
    ctx->is_preplan = true;
    ctx->slot = ctx->lease.slot;
    MSTAR__ASSERT(sr->plan != sr->compute); /* I-15: never the compute stream */
    ctx->stream = sr->plan;
    return MSTAR_OK;
}

mstar_status mstar_step_runner_pre_admit(mstar_step_runner *sr, mstar_step *step,
                                         mstar_step_admit_result *out)
{
    mstar_status st = enter_preplan(sr, step);
    if (st == MSTAR_OK)
        st = check_lease_key(step, "pre-admit");
    return st != MSTAR_OK ? st : run_admit(sr, step, out, true);
}

mstar_status mstar_step_runner_pre_plan(mstar_step_runner *sr, mstar_step *step,
                                        mstar_event *plan_done)
{
    mstar_status st = enter_preplan(sr, step);
    if (st != MSTAR_OK)
        return st;
    /* G-4: the slot's buffers may still be read by the last replay that used it (the device
     * can lag two steps behind); the plan stream waits for that replay first. */
    int32_t slot = mstar_step_context(step)->lease.slot;
    if (slot >= 0 && slot < MSTAR__MAX_SLOTS &&
        atomic_load_explicit(&sr->slot_replayed[slot], memory_order_acquire) &&
        (st = mstar_stream_wait_event(sr->plan, sr->slot_events[slot])) != MSTAR_OK)
        return st;
    st = run_phase(sr, step, "pre-plan", offsetof(mstar_resource_ops, pre_plan), true);
    if (st == MSTAR_OK && plan_done != NULL)
        st = mstar_event_record(plan_done, sr->plan);
    return st;
}

void mstar_step_runner_clear_preplan(mstar_step_runner *sr, int32_t slot)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (r->ops->clear_preplan != NULL)
            r->ops->clear_preplan(r->self, slot);
    }
}

mstar_status mstar_step_runner_ingest_request(mstar_step_runner *sr, int64_t request)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (r->ops->ingest_request != NULL && r->ops->ingest_request(r->self, request) != MSTAR_OK)
            return mstar_error_wrap("ingest of request %lld by resource '%s'", (long long)request,
                                    r->key);
    }
    return MSTAR_OK;
}

mstar_status mstar_step_runner_reset_request(mstar_step_runner *sr, int64_t request,
                                             bool free_storage)
{
    mstar_status first = MSTAR_OK;
    for (size_t i = 0; i < sr->resources.len; i++) { /* every resource, even after a failure */
        struct resource *r = res_at(sr, i);
        if (r->ops->reset_request != NULL &&
            r->ops->reset_request(r->self, request, free_storage) != MSTAR_OK && first == MSTAR_OK)
            first = mstar_error_wrap("reset of request %lld by resource '%s'", (long long)request,
                                     r->key);
    }
    return first;
}

void mstar_step_runner_remove_request(mstar_step_runner *sr, int64_t request)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (r->ops->remove_request != NULL)
            r->ops->remove_request(r->self, request);
    }
}

/* ---- graph buffers ----------------------------------------------------------------------------
 */

mstar_status mstar_step_runner_claim(mstar_step_runner *sr, const mstar_cg_slot_spec *specs,
                                     size_t n, int64_t max_bs, int64_t max_seq_len)
{
    if (sr->built)
        return mstar_error_set(MSTAR_ESTATE,
                               "graph buffers are already built: a claim now would move buffers "
                               "that captured graphs hold; every runner must claim "
                               "(prepare_for_capture) before the one build");
    for (size_t i = 0; i < n; i++) {
        mstar_status st = mstar__vec_push(&sr->claims, &specs[i]);
        if (st != MSTAR_OK)
            return st;
    }
    if (max_bs > sr->max_bs)
        sr->max_bs = max_bs;
    if (max_seq_len > sr->max_seq_len)
        sr->max_seq_len = max_seq_len;
    return MSTAR_OK;
}

mstar_status mstar_step_runner_build_graph_buffers(mstar_step_runner *sr)
{
    /* The reference's resources tolerate repeated builds and only grow. Claims after the build
     * are refused (they would move buffers captured graphs hold), so a repeat has nothing to
     * grow: it is a no-op, and the buffers stay where the graphs read them. */
    if (sr->built)
        return MSTAR_OK;
    size_t nclaims = sr->claims.len;
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (r->ops->build_graph_buffers != NULL &&
            r->ops->build_graph_buffers(r->self, sr->claims.data, sr->claims.len, sr->max_bs,
                                        sr->max_seq_len) != MSTAR_OK)
            return mstar_error_wrap("building graph buffers of resource '%s'", r->key);
    }
    MSTAR__ASSERT(sr->claims.len == nclaims); /* I-24: every claim came before the build */
    (void)nclaims;
    sr->built = true;
    return MSTAR_OK;
}

bool mstar_step_runner_buffers_built(const mstar_step_runner *sr)
{
    return sr->built;
}

void mstar__step_runner_claimed_sizes(const mstar_step_runner *sr, int64_t *max_bs,
                                      int64_t *max_seq_len)
{
    *max_bs = sr->max_bs;
    *max_seq_len = sr->max_seq_len;
}

mstar_status mstar_step_runner_post_warmup_validate(mstar_step_runner *sr)
{
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (r->ops->post_warmup_validate != NULL &&
            r->ops->post_warmup_validate(r->self) != MSTAR_OK)
            return mstar_error_wrap("post-warmup validation of resource '%s'", r->key);
    }
    return MSTAR_OK;
}

size_t mstar_blocked_capture_resources(const mstar_step_runner *sr, const mstar_step *step,
                                       const char **keys, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < sr->resources.len; i++) {
        struct resource *r = res_at(sr, i);
        if (!in_step(r, step) || r->ops->can_capture == NULL || r->ops->can_capture(r->self, step))
            continue;
        if (n < cap)
            keys[n] = r->key;
        n++;
    }
    return n;
}

/* ---- leases and slot events -------------------------------------------------------------------
 */

int32_t mstar__step_runner_next_slot(mstar_step_runner *sr, int32_t num_slots)
{
    pthread_mutex_lock(&sr->lease_lock);
    int32_t slot = (int32_t)(sr->lease_counter % (uint64_t)num_slots);
    MSTAR__ASSERT(num_slots >= 1 && slot >= 0 && slot < num_slots); /* I-14 */
    sr->lease_counter++;
    pthread_mutex_unlock(&sr->lease_lock);
    return slot;
}

mstar_status mstar__step_runner_replay_event(mstar_step_runner *sr, int32_t slot, mstar_event **out)
{
    if (slot < 0 || slot >= MSTAR__MAX_SLOTS)
        return mstar_error_set(MSTAR_EINVAL, "replay event of slot %d: slots are 0..%d", (int)slot,
                               MSTAR__MAX_SLOTS - 1);
    /* Created at startup, while the runners capture: the plan thread reads the pointer only
     * after the replay_launched store that publishes it. */
    if (sr->slot_events[slot] == NULL) {
        mstar_status st = mstar_event_create(sr->backend, &sr->slot_events[slot]);
        if (st != MSTAR_OK)
            return st;
    }
    *out = sr->slot_events[slot];
    return MSTAR_OK;
}

void mstar__step_runner_replay_launched(mstar_step_runner *sr, int32_t slot)
{
    /* A graph of the slot records its event only if it was captured with it, which created it. */
    if (slot >= 0 && slot < MSTAR__MAX_SLOTS && sr->slot_events[slot] != NULL)
        atomic_store_explicit(&sr->slot_replayed[slot], true, memory_order_release);
}
