/*
 * layout.c — see layout.h. The copy walks the shape with an index vector; the innermost run is
 * a memcpy when both sides are contiguous along the last dim, which is the common case (a
 * permutation only moves the leading dims).
 */
#include "tensors/layout.h"

#include <string.h>

static void move_dim(const mstar_tensor *t, int32_t from, int32_t to, mstar_tensor *out)
{
    mstar_tensor r = *t;
    int64_t shape = t->shape[from], stride = t->strides[from];
    if (from > to) {
        for (int32_t i = from; i > to; i--) {
            r.shape[i] = t->shape[i - 1];
            r.strides[i] = t->strides[i - 1];
        }
    } else {
        for (int32_t i = from; i < to; i++) {
            r.shape[i] = t->shape[i + 1];
            r.strides[i] = t->strides[i + 1];
        }
    }
    r.shape[to] = shape;
    r.strides[to] = stride;
    *out = r;
}

void mstar__layout_to_canonical(const mstar_tensor *t, int32_t d, mstar_tensor *out)
{
    if (d <= 0 || d >= t->ndim) {
        *out = *t;
        return;
    }
    move_dim(t, d, 0, out);
}

void mstar__layout_from_canonical(const mstar_tensor *t, int32_t d, mstar_tensor *out)
{
    if (d <= 0 || d >= t->ndim) {
        *out = *t;
        return;
    }
    move_dim(t, 0, d, out);
}

void mstar__layout_copy(const mstar_tensor *src, const mstar_tensor *dst_view)
{
    size_t es = mstar_dtype_size(src->dtype);
    int32_t nd = src->ndim;
    int64_t numel = mstar_tensor_numel(src);
    if (numel == 0)
        return;
    const char *s = mstar_tensor_ptr(src);
    char *d = mstar_tensor_ptr(dst_view);
    if (nd == 0) {
        memcpy(d, s, es);
        return;
    }
    /* Merge nothing clever: copy runs along the last dim. */
    int64_t inner = src->shape[nd - 1];
    bool run = src->strides[nd - 1] == 1 && dst_view->strides[nd - 1] == 1;
    int64_t idx[MSTAR_MAX_NDIM] = { 0 };
    int64_t outer = numel / inner;
    for (int64_t o = 0; o < outer; o++) {
        int64_t so = 0, dof = 0;
        for (int32_t i = 0; i < nd - 1; i++) {
            so += idx[i] * src->strides[i];
            dof += idx[i] * dst_view->strides[i];
        }
        if (run) {
            memcpy(d + dof * (int64_t)es, s + so * (int64_t)es, (size_t)inner * es);
        } else {
            for (int64_t k = 0; k < inner; k++)
                memcpy(d + (dof + k * dst_view->strides[nd - 1]) * (int64_t)es,
                       s + (so + k * src->strides[nd - 1]) * (int64_t)es, es);
        }
        for (int32_t i = nd - 2; i >= 0; i--) {
            if (++idx[i] < src->shape[i])
                break;
            idx[i] = 0;
        }
    }
}

void mstar__layout_copy_contiguous(const mstar_tensor *src, void *dst)
{
    if (mstar_tensor_numel(src) == 0)
        return;
    if (mstar_tensor_is_contiguous(src)) {
        memcpy(dst, mstar_tensor_ptr(src), (size_t)mstar_tensor_nbytes(src));
        return;
    }
    mstar_tensor view = *src;
    view.data = dst;
    view.byte_offset = 0;
    mstar_shape_contiguous_strides(view.ndim, view.shape, view.strides);
    mstar__layout_copy(src, &view);
}

mstar_status mstar__layout_extent(const mstar_tensor *t, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    if (mstar_tensor_numel(t) == 0)
        return MSTAR_OK;
    int64_t es = (int64_t)mstar_dtype_size(t->dtype);
    int64_t first = 0, last = 0; /* elements, relative to the first byte */
    for (int32_t i = 0; i < t->ndim; i++) {
        int64_t reach;
        bool over =
            __builtin_mul_overflow(t->shape[i] - 1, t->strides[i], &reach) ||
            __builtin_add_overflow(reach < 0 ? first : last, reach, reach < 0 ? &first : &last);
        if (over)
            return mstar_error_set(MSTAR_EINVAL,
                                   "a view of %lld elements with stride %lld at dim %d spans "
                                   "more than 64 bits of memory",
                                   (long long)t->shape[i], (long long)t->strides[i], (int)i);
    }
    if (__builtin_mul_overflow(first, es, lo) || __builtin_add_overflow(last, 1, &last) ||
        __builtin_mul_overflow(last, es, hi) || __builtin_sub_overflow(*hi, *lo, &last))
        return mstar_error_set(MSTAR_EINVAL, "a view whose strides span more than 64 bits of "
                                             "memory");
    return MSTAR_OK;
}

uint64_t mstar__layout_row_bytes(mstar_dtype dtype, int32_t ndim, const int64_t *dims)
{
    if (ndim == 0)
        return 0;
    uint64_t row = mstar_dtype_size(dtype);
    for (int32_t i = 1; i < ndim; i++)
        row *= (uint64_t)dims[i];
    return row;
}
