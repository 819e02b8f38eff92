/*
 * requests.h — the per-request records a resource keeps, by request handle.
 *
 * Both reference resources keep one heap record per real request in a u64 map (handle →
 * pointer); these helpers give them the same lookups and the same messages. Padding rows
 * (negative handles) are never stored: callers skip them before asking.
 */
#ifndef MSTAR_RESOURCES_REQUESTS_H
#define MSTAR_RESOURCES_REQUESTS_H

#include "core/u64map.h"

/* The record of `request`, or NULL. */
void *mstar__requests_find(const mstar__u64map *map, int64_t request);

/* The record of `request` in *out; MSTAR_ENOENT naming `what` (the resource) if there is none. */
mstar_status mstar__requests_lookup(const mstar__u64map *map, int64_t request, const char *what,
                                    void **out);

/* Store `record` under `request`: MSTAR_EEXIST if one is there, MSTAR_ENOMEM if the map cannot
 * grow. The caller keeps ownership of `record` on failure. */
mstar_status mstar__requests_add(mstar__u64map *map, int64_t request, void *record,
                                 const char *what);

/* Remove `request`'s record from the map and hand it to *out (the caller frees it);
 * MSTAR_ENOENT naming `what` if there is none. */
mstar_status mstar__requests_take(mstar__u64map *map, int64_t request, const char *what,
                                  void **out);

/* Every record in turn: `size_t it = 0; while ((r = mstar__requests_next(map, &it)) != NULL)`;
 * NULL after the last. */
void *mstar__requests_next(const mstar__u64map *map, size_t *it);

#endif
