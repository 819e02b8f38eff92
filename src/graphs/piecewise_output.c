/*
 * piecewise_output.c — what a piecewise run returns (reference PiecewiseOutput): the region's
 * static output buffers, of which only the leading real_len rows mean anything.
 *
 * get_view hands out that slice as it is; get copies it, because the buffer is overwritten by
 * the region's next run (never by another region's replay: the buffers live outside the pool).
 * A copy is what a caller keeps past the step, e.g. sampled tokens held across two steps (G-19).
 */
#include "mstar/piecewise.h"

#include <string.h>

size_t mstar_piecewise_output_count(const mstar_piecewise_output *out)
{
    return out->outputs == NULL ? 0 : mstar_tensor_map_count(out->outputs);
}

const char *mstar_piecewise_output_key(const mstar_piecewise_output *out, size_t i)
{
    return out->outputs == NULL ? NULL : mstar_tensor_map_name(out->outputs, i);
}

bool mstar_piecewise_output_contains(const mstar_piecewise_output *out, const char *key)
{
    return out->outputs != NULL && mstar_tensor_map_get(out->outputs, key) != NULL;
}

mstar_status mstar_piecewise_output_get_view(const mstar_piecewise_output *out, const char *key,
                                             mstar_tensor *view)
{
    const mstar_tensor *t = out->outputs == NULL ? NULL : mstar_tensor_map_get(out->outputs, key);
    if (t == NULL)
        return mstar_error_set(MSTAR_ENOENT, "piecewise output: no output '%s'",
                               key == NULL ? "(null)" : key);
    *view = *t;
    if (t->ndim == 0)
        return MSTAR_OK;
    if (out->real_len < 0 || out->real_len > t->shape[0])
        return mstar_error_set(MSTAR_ERANGE,
                               "piecewise output '%s': %lld real rows, but the buffer has %lld",
                               key, (long long)out->real_len, (long long)t->shape[0]);
    view->shape[0] = out->real_len;
    return MSTAR_OK;
}

mstar_status mstar_piecewise_output_get(const mstar_piecewise_output *out, const char *key,
                                        mstar_tensor *copy)
{
    mstar_tensor view;
    mstar_status st = mstar_piecewise_output_get_view(out, key, &view);
    if (st != MSTAR_OK)
        return st;
    mstar_tensor c;
    st = mstar_tensor_alloc(out->stream, view.dtype, view.ndim, view.shape, &c);
    if (st != MSTAR_OK)
        return st;
    /* The static buffers are contiguous, so the leading rows are one run of bytes. */
    size_t nbytes = (size_t)mstar_tensor_nbytes(&view);
    if (nbytes != 0)
        st = mstar_memcpy_async(out->stream, c.data, mstar_tensor_ptr(&view), nbytes,
                                MSTAR_MEMCPY_D2D);
    if (st != MSTAR_OK) {
        mstar_tensor_free(out->stream, &c);
        return st;
    }
    *copy = c;
    return MSTAR_OK;
}
