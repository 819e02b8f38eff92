/*
 * ref_profile.c — per-op timing of a forward (see ref_profile.h): a begin and an end mark per op
 * from the backend's kernel table (ref_ops.h), summed by op name afterwards.
 */
#include "ref_profile.h"

#include "ref_ops.h"

#include <stdlib.h>
#include <string.h>

struct ref_profile {
    const ref_ops *ops;
    void *marks;        /* 2 * max_ops: begin and end of op i at 2i and 2i + 1 */
    const char **names; /* [max_ops] */
    size_t max_ops, n_ops;
    bool open; /* an op has begun and not ended */
};

mstar_status ref_profile_create(mstar_backend *backend, size_t max_ops, ref_profile **out)
{
    const ref_ops *ops;
    mstar_status st = ref_ops_for(backend, &ops);
    if (st != MSTAR_OK)
        return st;
    if (max_ops == 0 || max_ops > SIZE_MAX / 2 / sizeof(const char *))
        return mstar_error_set(MSTAR_EINVAL, "profile: room for %zu ops", max_ops);
    ref_profile *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->names = calloc(max_ops, sizeof(*p->names))) == NULL) {
        free(p);
        return mstar_error_set(MSTAR_ENOMEM, "profile");
    }
    p->ops = ops;
    p->max_ops = max_ops;
    if ((st = ops->marks_create(backend, 2 * max_ops, &p->marks)) != MSTAR_OK) {
        free(p->names);
        free(p);
        return mstar_error_wrap("profile");
    }
    *out = p;
    return MSTAR_OK;
}

void ref_profile_destroy(ref_profile *p)
{
    if (p == NULL)
        return;
    p->ops->marks_destroy(p->marks, 2 * p->max_ops);
    free(p->names);
    free(p);
}

void ref_profile_reset(ref_profile *p)
{
    p->n_ops = 0;
    p->open = false;
}

mstar_status ref_profile_op_begin(ref_profile *p, mstar_stream *s, const char *name)
{
    if (p == NULL)
        return MSTAR_OK;
    if (p->open || p->n_ops == p->max_ops)
        return mstar_error_set(MSTAR_ESTATE, "profile: op %s %s", name,
                               p->open ? "begins inside another" : "is past the profile's room");
    p->names[p->n_ops] = name;
    p->open = true;
    return p->ops->mark_record(p->marks, 2 * p->n_ops, s);
}

mstar_status ref_profile_op_end(ref_profile *p, mstar_stream *s)
{
    if (p == NULL)
        return MSTAR_OK;
    if (!p->open)
        return mstar_error_set(MSTAR_ESTATE, "profile: an op ends that did not begin");
    p->open = false;
    return p->ops->mark_record(p->marks, 2 * p->n_ops++ + 1, s);
}

mstar_status ref_profile_summary(const ref_profile *p, ref_profile_row *rows, size_t max, size_t *n)
{
    *n = 0;
    for (size_t i = 0; i < p->n_ops; i++) {
        double us;
        mstar_status st = p->ops->mark_elapsed_us(p->marks, 2 * i, 2 * i + 1, &us);
        if (st != MSTAR_OK)
            return st;
        size_t r = 0;
        while (r < *n && strcmp(rows[r].op, p->names[i]) != 0)
            r++;
        if (r == *n) {
            if (r == max)
                return mstar_error_set(MSTAR_ERANGE, "profile: more than %zu op names", max);
            rows[(*n)++] = (ref_profile_row){ p->names[i], 0, 0.0 };
        }
        rows[r].calls++;
        rows[r].total_us += us;
    }
    return MSTAR_OK;
}
