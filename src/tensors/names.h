/*
 * names.h — interned names (signals, nodes, walks, entities) so a per-tensor record carries a
 * 32-bit id instead of a 256-byte string. Id 0 means "none". Names are few (the signals and
 * nodes of a model), so the table only grows. Not thread-safe.
 */
#ifndef MSTAR_TENSORS_NAMES_H
#define MSTAR_TENSORS_NAMES_H

#include "core/strmap.h"
#include "core/vec.h"

typedef struct mstar__names {
    mstar__strmap index; /* name → id */
    mstar__vec names;    /* char *, id - 1 */
} mstar__names;

void mstar__names_init(mstar__names *n);
void mstar__names_free(mstar__names *n);
/* The id of `name` (NULL or "": 0), adding it on first sight. */
mstar_status mstar__names_intern(mstar__names *n, const char *name, uint32_t *id);
/* The name of `id`, "" for 0. */
const char *mstar__names_get(const mstar__names *n, uint32_t id);

#endif
