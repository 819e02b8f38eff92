/*
 * dummy_rows.c — padding rows: the process-wide handle registry and DummyRowPool.
 *
 * A captured replay pads a batch up to the bucket's batch size with padding rows. Their handles
 * are negative (real requests are >= 0), minted from a name "__cg_<prefix>_<key>_<i>__" by one
 * registry per process: -1, -2, … in first-seen order, the same handle for the same name. Minting
 * follows the config order, so every rank mints the same handles. A pool keeps, per key, the rows
 * it has handed out and how many of them it ingested into the resources.
 */
#include "mstar/graphs.h"

#include "core/assert.h"
#include "core/strmap.h"
#include "core/vec.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mstar__strmap registry_by_name; /* name → index */
static mstar__vec registry_names;      /* char *, by index */
static bool registry_ready;

mstar_status mstar_dummy_rid_handle(const char *name, int64_t *out)
{
    if (name == NULL || out == NULL || name[0] == '\0')
        return mstar_error_set(MSTAR_EINVAL, "mstar_dummy_rid_handle: empty or NULL name");
    size_t len = strlen(name);
    pthread_mutex_lock(&registry_lock);
    if (!registry_ready) {
        mstar__strmap_init(&registry_by_name);
        mstar__vec_init(&registry_names, sizeof(char *));
        registry_ready = true;
    }
    mstar_status st = MSTAR_OK;
    uint64_t *found = mstar__strmap_find(&registry_by_name, name, len);
    uint64_t index;
    if (found != NULL) {
        index = *found;
    } else {
        char *copy = strdup(name);
        index = registry_names.len;
        st = copy == NULL ? mstar_error_set(MSTAR_ENOMEM, "dummy rid registry: out of memory")
                          : mstar__vec_push(&registry_names, &copy);
        if (st == MSTAR_OK) {
            st = mstar__strmap_put(&registry_by_name, name, len, index);
            if (st != MSTAR_OK)
                registry_names.len--;
        }
        if (st != MSTAR_OK)
            free(copy);
    }
    pthread_mutex_unlock(&registry_lock);
    if (st == MSTAR_OK)
        *out = -(int64_t)index - 1;
    return st;
}

const char *mstar_dummy_rid_name(int64_t handle)
{
    if (handle >= 0)
        return NULL;
    uint64_t index = (uint64_t)(-(handle + 1));
    const char *name = NULL;
    pthread_mutex_lock(&registry_lock);
    if (registry_ready && index < registry_names.len)
        name = *(char **)mstar__vec_at(&registry_names, index);
    pthread_mutex_unlock(&registry_lock);
    return name;
}

mstar_forward_info mstar_dummy_metadata(const char *graph_walk)
{
    mstar_forward_info info = { graph_walk, false, 0, 0, 1 };
    return info;
}

/* ---- the pool ---------------------------------------------------------------------------------
 */

struct row_set {
    char *key;
    mstar__vec handles; /* int64_t */
    size_t ingested;    /* handles[0, ingested) are open in the resources */
};

struct mstar_dummy_rows {
    char *prefix;
    mstar_step_runner *step_runner;
    mstar__vec sets; /* struct row_set */
};

mstar_status mstar_dummy_rows_create(const char *prefix, mstar_step_runner *sr,
                                     mstar_dummy_rows **out)
{
    if (prefix == NULL || sr == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_dummy_rows_create: NULL argument");
    mstar_dummy_rows *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->prefix = strdup(prefix)) == NULL) {
        free(p);
        return mstar_error_set(MSTAR_ENOMEM, "mstar_dummy_rows_create: out of memory");
    }
    p->step_runner = sr;
    mstar__vec_init(&p->sets, sizeof(struct row_set));
    *out = p;
    return MSTAR_OK;
}

void mstar_dummy_rows_destroy(mstar_dummy_rows *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->sets.len; i++) {
        struct row_set *rs = mstar__vec_at(&p->sets, i);
        for (size_t j = 0; j < rs->ingested; j++)
            mstar_step_runner_remove_request(p->step_runner,
                                             *(int64_t *)mstar__vec_at(&rs->handles, j));
        mstar__vec_free(&rs->handles);
        free(rs->key);
    }
    mstar__vec_free(&p->sets);
    free(p->prefix);
    free(p);
}

static mstar_status get_set(mstar_dummy_rows *p, const char *key, struct row_set **out)
{
    for (size_t i = 0; i < p->sets.len; i++) {
        struct row_set *rs = mstar__vec_at(&p->sets, i);
        if (strcmp(rs->key, key) == 0) {
            *out = rs;
            return MSTAR_OK;
        }
    }
    struct row_set rs = { strdup(key), { 0 }, 0 };
    if (rs.key == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "dummy rows: out of memory");
    mstar__vec_init(&rs.handles, sizeof(int64_t));
    mstar_status st = mstar__vec_push(&p->sets, &rs);
    if (st != MSTAR_OK) {
        free(rs.key);
        return st;
    }
    *out = mstar__vec_at(&p->sets, p->sets.len - 1);
    return MSTAR_OK;
}

static mstar_status mint(mstar_dummy_rows *p, const char *key, int64_t bs, struct row_set **out)
{
    if (key == NULL || bs < 0)
        return mstar_error_set(MSTAR_EINVAL, "dummy rows: NULL key or negative count %lld",
                               (long long)bs);
    struct row_set *rs = NULL;
    mstar_status st = get_set(p, key, &rs);
    while (st == MSTAR_OK && rs->handles.len < (size_t)bs) {
        char name[MSTAR_NAME_MAX + 1];
        int n = snprintf(name, sizeof(name), "__cg_%s_%s_%zu__", p->prefix, key, rs->handles.len);
        if (n < 0 || (size_t)n >= sizeof(name))
            return mstar_error_set(MSTAR_EINVAL,
                                   "dummy rows: name for prefix '%s' key '%s' is "
                                   "too long",
                                   p->prefix, key);
        int64_t h;
        st = mstar_dummy_rid_handle(name, &h);
        MSTAR__ASSERT(st != MSTAR_OK || h < 0); /* I-16: never a request's handle */
        if (st == MSTAR_OK)
            st = mstar__vec_push(&rs->handles, &h);
    }
    *out = rs;
    return st;
}

mstar_status mstar_dummy_rows_handles(mstar_dummy_rows *p, const char *key, int64_t bs,
                                      const int64_t **out)
{
    struct row_set *rs;
    mstar_status st = mint(p, key, bs, &rs);
    if (st == MSTAR_OK)
        *out = rs->handles.data;
    return st;
}

mstar_status mstar_dummy_rows_ensure(mstar_dummy_rows *p, const char *key, int64_t bs,
                                     const int64_t **out)
{
    struct row_set *rs;
    mstar_status st = mint(p, key, bs, &rs);
    while (st == MSTAR_OK && rs->ingested < (size_t)bs) {
        st = mstar_step_runner_ingest_request(
            p->step_runner, *(int64_t *)mstar__vec_at(&rs->handles, rs->ingested));
        if (st == MSTAR_OK)
            rs->ingested++;
    }
    if (st == MSTAR_OK)
        *out = rs->handles.data;
    return st;
}

mstar_status mstar_dummy_rows_reset(mstar_dummy_rows *p, const int64_t *rids, size_t n,
                                    bool free_storage)
{
    mstar_status first = MSTAR_OK;
    for (size_t i = 0; i < n; i++) { /* every row, even after a failure */
        mstar_status st = mstar_step_runner_reset_request(p->step_runner, rids[i], free_storage);
        if (st != MSTAR_OK && first == MSTAR_OK)
            first = st;
    }
    return first;
}

mstar_status mstar_dummy_rows_release_all(mstar_dummy_rows *p)
{
    mstar_status first = MSTAR_OK;
    for (size_t i = 0; i < p->sets.len; i++) {
        struct row_set *rs = mstar__vec_at(&p->sets, i);
        mstar_status st = mstar_dummy_rows_reset(p, rs->handles.data, rs->ingested, true);
        if (st != MSTAR_OK && first == MSTAR_OK)
            first = st;
    }
    return first;
}
