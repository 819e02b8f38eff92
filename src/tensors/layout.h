/*
 * layout.h — tensor layouts the transport moves between (design.md "Sharding").
 *
 * A sharded signal is stored in canonical layout: its shard dim moved to position 0 and the
 * bytes contiguous, so that any destination's slice is one contiguous byte range (offset,
 * nbytes). The helpers here permute views (no copy), copy a strided host view into contiguous
 * bytes or into another strided view (concatenation along the shard dim writes each shard into
 * a sub-view of the output), and cut row ranges out of a canonical tensor.
 */
#ifndef MSTAR_TENSORS_LAYOUT_H
#define MSTAR_TENSORS_LAYOUT_H

#include "mstar/core.h"

/* A view with dim `d` moved to position 0, the others keeping their order (to canonical). */
void mstar__layout_to_canonical(const mstar_tensor *t, int32_t d, mstar_tensor *out);
/* The inverse: dim 0 moved back to position `d` (from canonical). */
void mstar__layout_from_canonical(const mstar_tensor *t, int32_t d, mstar_tensor *out);

/* Copy the elements of host view `src` (any strides, negative ones included) into `dst_view`, a
 * host view of the same shape and dtype (any strides). */
void mstar__layout_copy(const mstar_tensor *src, const mstar_tensor *dst_view);
/* Copy host view `src` into `dst` as contiguous C-order bytes (mstar_tensor_nbytes(src)). */
void mstar__layout_copy_contiguous(const mstar_tensor *src, void *dst);

/* The bytes view `t` touches, relative to its first byte (mstar_tensor_ptr): from *lo (<= 0,
 * where negative strides reach back) up to *hi (exclusive); 0 and 0 for an empty view. A copy of
 * the view's memory must cover exactly that span, whatever the signs of the strides. MSTAR_EINVAL
 * naming the dim when a stride makes the span overflow 64 bits. */
mstar_status mstar__layout_extent(const mstar_tensor *t, int64_t *lo, int64_t *hi);

/* Bytes of one row along dim 0 (element size × product of dims 1..), 0 for a 0-dim tensor. */
uint64_t mstar__layout_row_bytes(mstar_dtype dtype, int32_t ndim, const int64_t *dims);

#endif
