/*
 * step.c — step declarations (segments, per-resource payloads, the context), bucket keys and
 * signals: the plain data a submodule, the step runner and the graph runners pass each other.
 */
#include "mstar/step.h"

#include "core/cond.h"
#include "core/vec.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAYLOAD_MAX 4096

struct payload {
    char *key;
    void *data;
    size_t size;
    void *plan_result;
    bool in_step; /* false: only a plan result was set */
};

struct mstar_step {
    mstar__vec segments; /* mstar_step_segment */
    mstar__vec payloads; /* struct payload */
    char *cg_key_info;
    mstar_step_ctx ctx;
};

mstar_status mstar_step_create(mstar_step **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_create: out is NULL");
    mstar_step *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_step_create: out of memory");
    mstar__vec_init(&s->segments, sizeof(mstar_step_segment));
    mstar__vec_init(&s->payloads, sizeof(struct payload));
    s->ctx.slot = -1;
    *out = s;
    return MSTAR_OK;
}

void mstar_step_reset(mstar_step *s)
{
    for (size_t i = 0; i < s->payloads.len; i++) {
        struct payload *p = mstar__vec_at(&s->payloads, i);
        free(p->key);
        free(p->data);
    }
    s->payloads.len = 0;
    s->segments.len = 0;
    free(s->cg_key_info);
    s->cg_key_info = NULL;
    memset(&s->ctx, 0, sizeof(s->ctx));
    s->ctx.slot = -1;
}

void mstar_step_destroy(mstar_step *s)
{
    if (s == NULL)
        return;
    mstar_step_reset(s);
    mstar__vec_free(&s->segments);
    mstar__vec_free(&s->payloads);
    free(s);
}

mstar_status mstar_step_add_segment(mstar_step *s, int64_t request, uint32_t label, int64_t span)
{
    if (span < 0)
        return mstar_error_set(MSTAR_EINVAL, "segment of request %lld: span %lld is negative",
                               (long long)request, (long long)span);
    mstar_step_segment seg = { request, label, span };
    return mstar__vec_push(&s->segments, &seg);
}

static struct payload *find(const mstar_step *s, const char *key)
{
    for (size_t i = 0; i < s->payloads.len; i++) {
        struct payload *p = mstar__vec_at(&s->payloads, i);
        if (strcmp(p->key, key) == 0)
            return p;
    }
    return NULL;
}

static mstar_status get_or_add(mstar_step *s, const char *key, struct payload **out)
{
    struct payload *p = find(s, key);
    if (p == NULL) {
        struct payload np = { strdup(key), NULL, 0, NULL, false };
        if (np.key == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "step: out of memory");
        mstar_status st = mstar__vec_push(&s->payloads, &np);
        if (st != MSTAR_OK) {
            free(np.key);
            return st;
        }
        p = mstar__vec_at(&s->payloads, s->payloads.len - 1);
    }
    *out = p;
    return MSTAR_OK;
}

mstar_status mstar_step_set_resource(mstar_step *s, const char *key, const void *data, size_t size)
{
    if (key == NULL || (data == NULL && size != 0))
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_set_resource: key is NULL or data is "
                                             "NULL with a size");
    if (size > PAYLOAD_MAX)
        return mstar_error_set(MSTAR_EINVAL, "mstar_step_set_resource(%s): %zu bytes, at most %d",
                               key, size, PAYLOAD_MAX);
    void *copy = malloc(size == 0 ? 1 : size);
    if (copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "step: out of memory");
    if (size != 0)
        memcpy(copy, data, size);
    struct payload *p;
    mstar_status st = get_or_add(s, key, &p);
    if (st != MSTAR_OK) {
        free(copy);
        return st;
    }
    free(p->data);
    p->data = copy;
    p->size = size;
    p->in_step = true;
    return MSTAR_OK;
}

mstar_status mstar_step_set_cg_key_info(mstar_step *s, const char *key)
{
    char *copy = NULL;
    if (key != NULL && (copy = strdup(key)) == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "step: out of memory");
    free(s->cg_key_info);
    s->cg_key_info = copy;
    return MSTAR_OK;
}

const mstar_step_segment *mstar_step_segments(const mstar_step *s, size_t *n)
{
    *n = s->segments.len;
    return s->segments.data;
}

const void *mstar_step_resource(const mstar_step *s, const char *key, size_t *size)
{
    struct payload *p = find(s, key);
    if (p == NULL || !p->in_step)
        return NULL;
    if (size != NULL)
        *size = p->size;
    return p->data;
}

const char *mstar_step_cg_key_info(const mstar_step *s)
{
    return s->cg_key_info;
}

mstar_step_ctx *mstar_step_context(mstar_step *s)
{
    return &s->ctx;
}

mstar_status mstar_step_set_plan_result(mstar_step *s, const char *key, void *result)
{
    struct payload *p;
    mstar_status st = get_or_add(s, key, &p);
    if (st == MSTAR_OK)
        p->plan_result = result;
    return st;
}

void *mstar_step_plan_result(const mstar_step *s, const char *key)
{
    struct payload *p = find(s, key);
    return p == NULL ? NULL : p->plan_result;
}

/* ---- bucket keys ------------------------------------------------------------------------------
 */

char *mstar_bucket_key_format(const mstar_bucket_key *k, char *buf, size_t size)
{
    if (k->cg_key_info != NULL)
        snprintf(buf, size, "%s[bs=%lld,tokens=%lld,key=%s]", k->graph_walk, (long long)k->bs,
                 (long long)k->num_tokens, k->cg_key_info);
    else
        snprintf(buf, size, "%s[bs=%lld,tokens=%lld]", k->graph_walk, (long long)k->bs,
                 (long long)k->num_tokens);
    return buf;
}

static bool str_equal(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool mstar_bucket_key_equal(const mstar_bucket_key *a, const mstar_bucket_key *b)
{
    return a->bs == b->bs && a->num_tokens == b->num_tokens &&
           str_equal(a->graph_walk, b->graph_walk) && str_equal(a->cg_key_info, b->cg_key_info);
}

/* ---- signals ----------------------------------------------------------------------------------
 */

struct mstar_signal {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool set;
};

mstar_status mstar_signal_create(mstar_signal **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_signal_create: out is NULL");
    mstar_signal *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_signal_create: out of memory");
    pthread_mutex_init(&s->lock, NULL);
    mstar__cond_init_monotonic(&s->cond);
    *out = s;
    return MSTAR_OK;
}

void mstar_signal_destroy(mstar_signal *s)
{
    if (s == NULL)
        return;
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void mstar_signal_set(mstar_signal *s)
{
    pthread_mutex_lock(&s->lock);
    s->set = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void mstar_signal_reset(mstar_signal *s)
{
    pthread_mutex_lock(&s->lock);
    s->set = false;
    pthread_mutex_unlock(&s->lock);
}

bool mstar_signal_is_set(mstar_signal *s)
{
    pthread_mutex_lock(&s->lock);
    bool set = s->set;
    pthread_mutex_unlock(&s->lock);
    return set;
}

mstar_status mstar_signal_wait(mstar_signal *s, int64_t timeout_ms)
{
    struct timespec deadline = mstar__deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    while (!s->set && rc != ETIMEDOUT) {
        if (timeout_ms < 0)
            pthread_cond_wait(&s->cond, &s->lock);
        else
            rc = pthread_cond_timedwait(&s->cond, &s->lock, &deadline);
    }
    bool set = s->set;
    pthread_mutex_unlock(&s->lock);
    return set ? MSTAR_OK
               : mstar_error_set(MSTAR_ETIMEDOUT, "signal not set within %lld ms",
                                 (long long)timeout_ms);
}
