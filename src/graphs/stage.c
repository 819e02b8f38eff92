/*
 * stage.c — static input buffers shared by every bucket and slot of a config.
 *
 * A graph reads its inputs at fixed addresses, so each (config_idx, key) gets one buffer, sized by
 * the first capture — the largest, since captures go largest first (I-21) — and every smaller
 * bucket reads a prefix of it along the key's seq dim. Where the reference moves a non-leading seq
 * dim (mrope's [3, seq]) to the front for storage and permutes the view back, this keeps the buffer
 * in the value's own layout and narrows the seq dim in place: the view is the same strided [3, n]
 * either way, and staging is one contiguous copy per index of the dims before the seq dim. The
 * buffers are shared across slots and buckets: replays on one device are serialised on one stream
 * (design.md "Slots").
 *
 * Staging a step's values (both runners) checks the keys: a value with no static buffer is an
 * error (a graph cannot read it), and a static buffer with no value keeps its last contents, which
 * is warned about once per key (G-17). The piecewise runner also zeroes the tail past the
 * value's length, because a batched region computes over its padded rows (design.md
 * "Piecewise regions"). A value that already is the static buffer, narrowed (a preprocess that
 * built its tensor in place through mstar_graph_runner_static_input), is not copied: staging it
 * costs no device call, which is what keeps a replay's host time near the bare launch.
 */
#include "graphs/stage.h"

#include "device/backend.h"

#include <stdlib.h>
#include <string.h>

static void warn_missing_once(mstar__vec *warned, const char *who, const char *key)
{
    for (size_t i = 0; i < warned->len; i++) {
        if (strcmp(*(char **)mstar__vec_at(warned, i), key) == 0)
            return;
    }
    char *copy = strdup(key);
    if (copy != NULL && mstar__vec_push(warned, &copy) != MSTAR_OK)
        free(copy);
    mstar_log(MSTAR_LOG_WARN,
              "%s: captured input '%s' is missing at replay; the graph reads its previous contents",
              who, key);
}

static mstar_status stage_copy(mstar_stream *stream, bool on_device, void *dst, const void *src,
                               size_t n)
{
    return on_device ? mstar__memcpy_on_device_async(stream, dst, src, n)
                     : mstar_memcpy_async(stream, dst, src, n, MSTAR_MEMCPY_D2D);
}

static int64_t inner_elems(const mstar_tensor *t, int32_t d)
{
    int64_t n = 1;
    for (int32_t i = d + 1; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* Whether `value` is `dst`'s own storage in dst's layout: the same first element and the same
 * strides on every dim that has more than one element (shapes were checked by the caller). */
static bool same_place(const mstar_tensor *value, const mstar_tensor *dst)
{
    if (mstar_tensor_ptr(value) != mstar_tensor_ptr(dst))
        return false;
    for (int32_t i = 0; i < value->ndim; i++) {
        if (value->shape[i] > 1 && value->strides[i] != dst->strides[i])
            return false;
    }
    return true;
}

/* The copy node gives nothing to copy: a value built in place, one staged by a copy before the
 * launch, a key with no value. Never left with a source of an earlier step, freed since. */
static mstar_status node_idle(const mstar__stage_node *node, void *dst)
{
    return node == NULL ? MSTAR_OK : mstar__graph_set_copy(node->graph, node->index, dst, dst, 0);
}

mstar_status mstar__stage(mstar_stream *stream, const mstar_tensor *dst, int32_t d,
                          const mstar_tensor *value, const char *key, bool zero_tail,
                          const mstar__stage_node *node)
{
    if (value->dtype != dst->dtype || value->ndim != dst->ndim)
        return mstar_error_set(MSTAR_EINVAL,
                               "staging '%s': dtype or rank differs from its "
                               "static buffer",
                               key);
    for (int32_t i = 0; i < value->ndim; i++) {
        if (i == d ? value->shape[i] > dst->shape[i] : value->shape[i] != dst->shape[i])
            return mstar_error_set(MSTAR_EINVAL,
                                   "staging '%s': dim %d is %lld, the static buffer's is %lld "
                                   "(seq dim %d)",
                                   key, (int)i, (long long)value->shape[i],
                                   (long long)dst->shape[i], (int)d);
    }
    /* Built in place (mstar_graph_runner_static_input): nothing to copy, only the tail. A value
     * on the static buffer's own device is copied by mstar__memcpy_on_device_async (a kernel for
     * a small one: a third of a cudaMemcpyAsync's host time), or, when it is one run of bytes
     * and the graph has a copy node for the buffer, by that node at the launch (no device call
     * here at all). */
    bool in_place = same_place(value, dst);
    bool on_device =
        value->device.type == dst->device.type && value->device.index == dst->device.index;
    if (!in_place && !mstar_tensor_is_contiguous(value))
        return mstar_error_set(MSTAR_EINVAL, "staging '%s': the value is not contiguous", key);
    size_t es = mstar_dtype_size(value->dtype);
    int64_t outer = 1;
    for (int32_t i = 0; i < d; i++)
        outer *= value->shape[i];
    size_t inner = value->ndim == 0 ? es : (size_t)inner_elems(value, d) * es;
    size_t row = value->ndim == 0 ? es : (size_t)value->shape[d] * inner;
    size_t tail =
        zero_tail && value->ndim > 0 ? (size_t)(dst->shape[d] - value->shape[d]) * inner : 0;
    const char *src = mstar_tensor_ptr(value);
    char *out = mstar_tensor_ptr(dst);
    if (node != NULL && !in_place && on_device && outer == 1 && tail == 0 &&
        row <= MSTAR__KERNEL_COPY_MAX)
        return mstar__graph_set_copy(node->graph, node->index, out, src, row);
    mstar_status st = node_idle(node, out);
    if (st != MSTAR_OK || value->ndim == 0)
        return st != MSTAR_OK || in_place ? st : stage_copy(stream, on_device, out, src, row);
    size_t dst_pitch = d == 0 ? row + tail : (size_t)dst->strides[d - 1] * es;
    for (int64_t o = 0; o < outer; o++) {
        char *at = out + (size_t)o * dst_pitch;
        st = in_place ? MSTAR_OK : stage_copy(stream, on_device, at, src + (size_t)o * row, row);
        if (st == MSTAR_OK && tail != 0)
            st = mstar_memset_async(stream, at + row, 0, tail);
        if (st != MSTAR_OK)
            return st;
    }
    return MSTAR_OK;
}

mstar_status mstar__stage_inputs(mstar_stream *stream, const char *who,
                                 const mstar_tensor_map *statics, const mstar__vec *seq_dims,
                                 const mstar_tensor_map *values, bool zero_tail, mstar__vec *warned,
                                 const mstar__stage_nodes *nodes)
{
    for (size_t i = 0; i < mstar_tensor_map_count(values); i++) {
        const char *key = mstar_tensor_map_name(values, i);
        if (mstar_tensor_map_get(statics, key) == NULL)
            return mstar_error_set(
                MSTAR_EINVAL, "%s: input '%s' was not captured; a graph cannot read it", who, key);
    }
    for (size_t i = 0; i < mstar_tensor_map_count(statics); i++) {
        const char *key = mstar_tensor_map_name(statics, i);
        const mstar_tensor *dst = mstar_tensor_map_at(statics, i);
        const mstar_tensor *v = mstar_tensor_map_get(values, key);
        uint32_t index = nodes == NULL ? UINT32_MAX : *(uint32_t *)mstar__vec_at(nodes->index, i);
        mstar__stage_node node = { nodes == NULL ? NULL : nodes->graph, index };
        const mstar__stage_node *n = index == UINT32_MAX ? NULL : &node;
        mstar_status st = MSTAR_OK;
        if (v == NULL) {
            warn_missing_once(warned, who, key);
            st = node_idle(n, mstar_tensor_ptr(dst));
        } else {
            int32_t d = seq_dims == NULL ? 0 : *(int32_t *)mstar__vec_at(seq_dims, i);
            st = mstar__stage(stream, dst, d, v, key, zero_tail, n);
        }
        if (st != MSTAR_OK)
            return mstar_error_wrap("%s", who);
    }
    return MSTAR_OK;
}

void mstar__stage_warned_free(mstar__vec *warned)
{
    for (size_t i = 0; i < warned->len; i++)
        free(*(char **)mstar__vec_at(warned, i));
    mstar__vec_free(warned);
}

static mstar__interned *find(mstar__vec *v, uint32_t config_idx, const char *key)
{
    for (size_t i = 0; i < v->len; i++) {
        mstar__interned *e = mstar__vec_at(v, i);
        if (e->config_idx == config_idx && strcmp(e->key, key) == 0)
            return e;
    }
    return NULL;
}

mstar_status mstar__intern(mstar__vec *v, mstar_stream *stream, uint32_t config_idx,
                           const char *key, const mstar_tensor *value, int64_t num_tokens,
                           int32_t declared, mstar_tensor *view, int32_t *seq_dim)
{
    mstar__interned *e = find(v, config_idx, key);
    if (e == NULL) {
        int32_t d = declared;
        if (d < 0) {
            d = 0;
            for (int32_t i = 0; i < value->ndim; i++) {
                if (value->shape[i] == num_tokens) {
                    d = i;
                    break;
                }
            }
        }
        if (value->ndim > 0 && d >= value->ndim)
            return mstar_error_set(MSTAR_EINVAL,
                                   "input '%s': declared seq dim %d, but it has %d "
                                   "dims",
                                   key, (int)d, (int)value->ndim);
        mstar__interned ne = { config_idx, strdup(key), d, { 0 } };
        if (ne.key == NULL)
            return mstar_error_set(MSTAR_ENOMEM, "interning '%s': out of memory", key);
        mstar_status st = mstar_tensor_init(&ne.storage, NULL, value->device, value->dtype,
                                            value->ndim, value->shape);
        if (st == MSTAR_OK)
            st = mstar_caching_alloc(mstar_stream_backend(stream),
                                     (size_t)mstar_tensor_nbytes(&ne.storage), &ne.storage.data);
        if (st == MSTAR_OK && (st = mstar__vec_push(v, &ne)) != MSTAR_OK)
            mstar_caching_free(mstar_stream_backend(stream), ne.storage.data);
        if (st != MSTAR_OK) {
            free(ne.key);
            return st;
        }
        e = mstar__vec_at(v, v->len - 1);
    }
    int32_t d = e->seq_dim;
    if (value->ndim != e->storage.ndim || value->dtype != e->storage.dtype)
        return mstar_error_set(MSTAR_ERANGE,
                               "interning '%s' of config %u: dtype or rank differs "
                               "from the first capture's",
                               key, config_idx);
    for (int32_t i = 0; i < value->ndim; i++) {
        if (i == d && value->shape[i] > e->storage.shape[i])
            return mstar_error_set(MSTAR_ERANGE,
                                   "interning '%s' of config %u: needs %lld on seq dim %d but the "
                                   "buffer has %lld: a smaller bucket was captured before a "
                                   "larger one (capture largest first)",
                                   key, config_idx, (long long)value->shape[i], (int)d,
                                   (long long)e->storage.shape[i]);
        if (i != d && value->shape[i] != e->storage.shape[i])
            return mstar_error_set(MSTAR_ERANGE,
                                   "interning '%s' of config %u: dim %d is %lld, the buffer's is "
                                   "%lld (only the seq dim %d may differ)",
                                   key, config_idx, (int)i, (long long)value->shape[i],
                                   (long long)e->storage.shape[i], (int)d);
    }
    *view = e->storage;
    if (value->ndim > 0)
        view->shape[d] = value->shape[d];
    *seq_dim = d;
    return mstar__stage(stream, view, d, value, key, false, NULL);
}

void mstar__interned_free(mstar__vec *v, mstar_backend *b)
{
    for (size_t i = 0; i < v->len; i++) {
        mstar__interned *e = mstar__vec_at(v, i);
        mstar_caching_free(b, e->storage.data);
        free(e->key);
    }
    mstar__vec_free(v);
}
