/*
 * vec.c — see vec.h.
 */
#include "vec.h"

#include <stdlib.h>
#include <string.h>

void mstar__vec_init(mstar__vec *v, size_t elsize)
{
    v->data = NULL;
    v->len = 0;
    v->cap = 0;
    v->elsize = elsize;
}

void mstar__vec_free(mstar__vec *v)
{
    free(v->data);
    v->data = NULL;
    v->len = 0;
    v->cap = 0;
}

mstar_status mstar__vec_reserve(mstar__vec *v, size_t n)
{
    if (n <= v->cap)
        return MSTAR_OK;
    size_t ncap = v->cap ? v->cap : 8;
    while (ncap < n) {
        if (ncap > SIZE_MAX / 2 / v->elsize)
            return mstar_error_set(MSTAR_ENOMEM, "array of %zu elements", n);
        ncap *= 2;
    }
    void *d = realloc(v->data, ncap * v->elsize);
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "array of %zu elements of %zu bytes", ncap, v->elsize);
    v->data = d;
    v->cap = ncap;
    return MSTAR_OK;
}

mstar_status mstar__vec_push(mstar__vec *v, const void *elem)
{
    mstar_status st = mstar__vec_reserve(v, v->len + 1);
    if (st != MSTAR_OK)
        return st;
    memcpy(mstar__vec_at(v, v->len), elem, v->elsize);
    v->len++;
    return MSTAR_OK;
}

mstar_status mstar__vec_grow(mstar__vec *v, size_t n, void **first)
{
    mstar_status st = mstar__vec_reserve(v, v->len + n);
    if (st != MSTAR_OK)
        return st;
    void *p = mstar__vec_at(v, v->len);
    memset(p, 0, n * v->elsize);
    v->len += n;
    if (first)
        *first = p;
    return MSTAR_OK;
}

void mstar__vec_remove(mstar__vec *v, size_t index)
{
    char *p = mstar__vec_at(v, index);
    memmove(p, p + v->elsize, (v->len - index - 1) * v->elsize);
    v->len--;
}

void *mstar__scratch_zalloc(void *local, size_t local_size, size_t n, size_t elsize)
{
    if (n <= local_size / elsize) {
        memset(local, 0, n * elsize);
        return local;
    }
    /* Checked here: calloc would refuse it too, but ASan aborts on such a call. */
    if (elsize != 0 && n > SIZE_MAX / elsize)
        return NULL;
    return calloc(n, elsize);
}

void mstar__scratch_free(void *p, const void *local)
{
    if (p != local)
        free(p);
}
