/*
 * tensor_map.c — tensors by name, in insertion order.
 *
 * Maps are small (a step's inputs or outputs: a handful of names), so lookups scan. An entry is
 * either a borrowed view or owned: an owned entry's bytes go back through mstar_free on the
 * stream it was set with, which is what lets a step's outputs come from the current allocator
 * in both eager and captured runs.
 */
#include "step/tensor_map.h"

#include "core/vec.h"

#include <stdlib.h>
#include <string.h>

struct entry {
    char *name;
    mstar_tensor tensor;
    mstar_stream *owner; /* non-NULL: the map frees tensor.data through this stream */
};

struct mstar_tensor_map {
    mstar__vec entries; /* struct entry */
};

mstar_status mstar_tensor_map_create(mstar_tensor_map **out)
{
    if (out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_tensor_map_create: out is NULL");
    mstar_tensor_map *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mstar_tensor_map_create: out of memory");
    mstar__vec_init(&m->entries, sizeof(struct entry));
    *out = m;
    return MSTAR_OK;
}

static void release_entry(struct entry *e)
{
    if (e->owner != NULL && e->tensor.data != NULL &&
        mstar_free(e->owner, e->tensor.data) != MSTAR_OK)
        mstar_log(MSTAR_LOG_WARN, "tensor map: freeing owned entry '%s': %s", e->name,
                  mstar_last_error());
    e->owner = NULL;
}

void mstar_tensor_map_clear(mstar_tensor_map *m)
{
    for (size_t i = 0; i < m->entries.len; i++) {
        struct entry *e = mstar__vec_at(&m->entries, i);
        release_entry(e);
        free(e->name);
    }
    m->entries.len = 0;
}

void mstar_tensor_map_destroy(mstar_tensor_map *m)
{
    if (m == NULL)
        return;
    mstar_tensor_map_clear(m);
    mstar__vec_free(&m->entries);
    free(m);
}

static struct entry *find(const mstar_tensor_map *m, const char *name)
{
    for (size_t i = 0; i < m->entries.len; i++) {
        struct entry *e = mstar__vec_at(&m->entries, i);
        if (strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

static mstar_status put(mstar_tensor_map *m, const char *name, const mstar_tensor *t,
                        mstar_stream *owner)
{
    if (m == NULL || name == NULL || t == NULL)
        return mstar_error_set(MSTAR_EINVAL, "tensor map: map, name and tensor must not be NULL");
    mstar_status st = mstar_name_validate(name, strlen(name), "tensor map key");
    if (st != MSTAR_OK)
        return st;
    struct entry *e = find(m, name);
    if (e != NULL) {
        release_entry(e);
        e->tensor = *t;
        e->owner = owner;
        return MSTAR_OK;
    }
    struct entry ne = { strdup(name), *t, owner };
    if (ne.name == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "tensor map: out of memory");
    st = mstar__vec_push(&m->entries, &ne);
    if (st != MSTAR_OK)
        free(ne.name);
    return st;
}

mstar_status mstar_tensor_map_set(mstar_tensor_map *m, const char *name, const mstar_tensor *t)
{
    return put(m, name, t, NULL);
}

mstar_status mstar_tensor_map_set_owned(mstar_tensor_map *m, const char *name,
                                        const mstar_tensor *t, mstar_stream *stream)
{
    if (stream == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_tensor_map_set_owned: stream is NULL");
    return put(m, name, t, stream);
}

const mstar_tensor *mstar_tensor_map_get(const mstar_tensor_map *m, const char *name)
{
    struct entry *e = name == NULL ? NULL : find(m, name);
    return e == NULL ? NULL : &e->tensor;
}

size_t mstar_tensor_map_count(const mstar_tensor_map *m)
{
    return m->entries.len;
}

const char *mstar_tensor_map_name(const mstar_tensor_map *m, size_t i)
{
    return i < m->entries.len ? ((struct entry *)mstar__vec_at(&m->entries, i))->name : NULL;
}

const mstar_tensor *mstar_tensor_map_at(const mstar_tensor_map *m, size_t i)
{
    return i < m->entries.len ? &((struct entry *)mstar__vec_at(&m->entries, i))->tensor : NULL;
}

/* Let go of every owned entry without freeing it: a capture's outputs now belong to the graph. */
void mstar__tensor_map_disown(mstar_tensor_map *m)
{
    for (size_t i = 0; i < m->entries.len; i++)
        ((struct entry *)mstar__vec_at(&m->entries, i))->owner = NULL;
}
