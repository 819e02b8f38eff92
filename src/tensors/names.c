/*
 * names.c — see names.h.
 */
#include "tensors/names.h"

#include <stdlib.h>
#include <string.h>

void mstar__names_init(mstar__names *n)
{
    mstar__strmap_init(&n->index);
    mstar__vec_init(&n->names, sizeof(char *));
}

void mstar__names_free(mstar__names *n)
{
    for (size_t i = 0; i < n->names.len; i++)
        free(*(char **)mstar__vec_at(&n->names, i));
    mstar__vec_free(&n->names);
    mstar__strmap_free(&n->index);
}

mstar_status mstar__names_intern(mstar__names *n, const char *name, uint32_t *id)
{
    if (name == NULL || name[0] == '\0') {
        *id = 0;
        return MSTAR_OK;
    }
    size_t len = strlen(name);
    uint64_t *hit = mstar__strmap_find(&n->index, name, len);
    if (hit != NULL) {
        *id = (uint32_t)*hit;
        return MSTAR_OK;
    }
    char *copy = strdup(name);
    if (copy == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "interning '%s'", name);
    mstar_status st = mstar__vec_push(&n->names, &copy);
    if (st == MSTAR_OK) {
        st = mstar__strmap_put(&n->index, name, len, n->names.len);
        if (st != MSTAR_OK)
            n->names.len--;
    }
    if (st != MSTAR_OK) {
        free(copy);
        return st;
    }
    *id = (uint32_t)n->names.len;
    return MSTAR_OK;
}

const char *mstar__names_get(const mstar__names *n, uint32_t id)
{
    if (id == 0 || id > n->names.len)
        return "";
    return *(char **)mstar__vec_at(&n->names, id - 1);
}
