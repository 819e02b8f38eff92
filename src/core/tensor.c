/*
 * tensor.c — helpers over mstar_tensor views (DLTensor semantics).
 *
 * A view never owns its bytes. The helpers here answer the questions transport and the graph
 * runner ask of a view: how many elements, how many bytes, is it contiguous, is it well formed.
 */
#include "mstar/core.h"

mstar_status mstar_shape_numel(int32_t ndim, const int64_t *shape, size_t elsize, int64_t *numel)
{
    if (ndim < 0 || ndim > MSTAR_MAX_NDIM)
        return mstar_error_set(MSTAR_EINVAL, "ndim %d is outside 0..%d", (int)ndim, MSTAR_MAX_NDIM);
    if ((ndim > 0 && shape == NULL) || numel == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL (ndim %d)",
                               numel == NULL ? "numel" : "shape", (int)ndim);
    /* `span` is the product of the dims with zeros counted as one: it bounds the contiguous
     * strides, which must fit even when a zero dim makes the element count 0. */
    int64_t n = 1;
    int64_t span = 1;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return mstar_error_set(MSTAR_EINVAL, "dim %d is negative (%lld)", (int)i,
                                   (long long)shape[i]);
        if (shape[i] != 0 && span > INT64_MAX / shape[i])
            return mstar_error_set(MSTAR_ERANGE, "shape overflows 64 bits at dim %d", (int)i);
        span *= shape[i] != 0 ? shape[i] : 1;
        n *= shape[i];
    }
    if (elsize != 0 && n > INT64_MAX / (int64_t)elsize)
        return mstar_error_set(MSTAR_ERANGE, "byte size of %lld elements of %zu bytes overflows",
                               (long long)n, elsize);
    *numel = n;
    return MSTAR_OK;
}

void mstar_shape_contiguous_strides(int32_t ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i] > 0 ? shape[i] : 1;
    }
}

mstar_status mstar_tensor_init(mstar_tensor *t, void *data, mstar_device device, mstar_dtype dtype,
                               int32_t ndim, const int64_t *shape)
{
    int64_t numel;
    if (t == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_tensor_init: the tensor is NULL");
    if (!mstar_dtype_is_valid((int)dtype))
        return mstar_error_set(MSTAR_EINVAL, "invalid dtype code %d", (int)dtype);
    mstar_status st = mstar_shape_numel(ndim, shape, mstar_dtype_size(dtype), &numel);
    if (st != MSTAR_OK)
        return st;
    t->data = data;
    t->device = device;
    t->dtype = dtype;
    t->ndim = ndim;
    t->byte_offset = 0;
    for (int32_t i = 0; i < MSTAR_MAX_NDIM; i++) {
        t->shape[i] = i < ndim ? shape[i] : 0;
        t->strides[i] = 0;
    }
    mstar_shape_contiguous_strides(ndim, t->shape, t->strides);
    return MSTAR_OK;
}

int64_t mstar_tensor_numel(const mstar_tensor *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

uint64_t mstar_tensor_nbytes(const mstar_tensor *t)
{
    return (uint64_t)mstar_tensor_numel(t) * mstar_dtype_size(t->dtype);
}

bool mstar_tensor_is_contiguous(const mstar_tensor *t)
{
    int64_t expect = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 0)
            return true; /* an empty view is trivially contiguous */
        if (t->shape[i] != 1 && t->strides[i] != expect)
            return false;
        expect *= t->shape[i];
    }
    return true;
}

void *mstar_tensor_ptr(const mstar_tensor *t)
{
    /* An empty tensor may have no storage (a zero-byte device allocation is NULL); adding even
     * 0 to a null pointer is undefined. */
    if (t->data == NULL)
        return NULL;
    return (char *)t->data + t->byte_offset;
}

mstar_status mstar_tensor_validate(const mstar_tensor *t, const char *what)
{
    int64_t numel;
    if (t == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", what);
    if (!mstar_dtype_is_valid((int)t->dtype))
        return mstar_error_set(MSTAR_EINVAL, "%s: invalid dtype code %d", what, (int)t->dtype);
    if (mstar_shape_numel(t->ndim, t->shape, mstar_dtype_size(t->dtype), &numel) != MSTAR_OK)
        return mstar_error_wrap("%s", what);
    if (numel > 0 && t->data == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: %lld elements but no data pointer", what,
                               (long long)numel);
    return MSTAR_OK;
}
