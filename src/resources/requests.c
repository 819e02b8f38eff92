/*
 * requests.c — see requests.h.
 */
#include "requests.h"

void *mstar__requests_find(const mstar__u64map *map, int64_t request)
{
    uint64_t v;
    if (!mstar__u64map_get(map, (uint64_t)request, &v))
        return NULL;
    return (void *)(uintptr_t)v;
}

mstar_status mstar__requests_lookup(const mstar__u64map *map, int64_t request, const char *what,
                                    void **out)
{
    *out = mstar__requests_find(map, request);
    if (*out == NULL)
        return mstar_error_set(MSTAR_ENOENT, "%s: request %lld was never ingested", what,
                               (long long)request);
    return MSTAR_OK;
}

mstar_status mstar__requests_add(mstar__u64map *map, int64_t request, void *record,
                                 const char *what)
{
    if (mstar__requests_find(map, request) != NULL)
        return mstar_error_set(MSTAR_EEXIST, "%s: request %lld is already open", what,
                               (long long)request);
    if (mstar__u64map_put(map, (uint64_t)request, (uint64_t)(uintptr_t)record) != MSTAR_OK)
        return mstar_error_set(MSTAR_ENOMEM, "%s: request %lld", what, (long long)request);
    return MSTAR_OK;
}

mstar_status mstar__requests_take(mstar__u64map *map, int64_t request, const char *what, void **out)
{
    mstar_status st = mstar__requests_lookup(map, request, what, out);
    if (st == MSTAR_OK)
        mstar__u64map_remove(map, (uint64_t)request, NULL);
    return st;
}

void *mstar__requests_next(const mstar__u64map *map, size_t *it)
{
    uint64_t val;
    if (!mstar__u64map_next(map, it, NULL, &val))
        return NULL;
    return (void *)(uintptr_t)val;
}
