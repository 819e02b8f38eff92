/*
 * plan_store.c — see plan_store.h.
 */
#include "plan_store.h"

#include <stdlib.h>
#include <string.h>

void mstar__plan_store_init(mstar__plan_store *ps, mstar_backend *backend, int32_t num_labels)
{
    memset(ps, 0, sizeof(*ps));
    ps->backend = backend;
    ps->num_labels = num_labels;
}

static void block_free(mstar_backend *b, mstar__plan_block *blk)
{
    if (blk->copied != NULL) {
        mstar_event_synchronize(blk->copied);
        mstar_event_destroy(blk->copied);
    }
    if (blk->host != NULL)
        mstar_host_free_pinned(b, blk->host);
    if (blk->dev != NULL)
        mstar_device_free(b, blk->dev);
    memset(blk, 0, sizeof(*blk));
}

/* A zeroed block: the mirror is cleared and copied over the device side on `stream`. */
static mstar_status block_alloc(mstar_backend *b, size_t ints, mstar_stream *stream,
                                mstar__plan_block *blk)
{
    memset(blk, 0, sizeof(*blk));
    if (ints > SIZE_MAX / sizeof(int32_t))
        return mstar_error_set(MSTAR_ENOMEM, "plan buffer of %zu ints", ints);
    size_t bytes = (ints ? ints : 1) * sizeof(int32_t);
    mstar_status st = mstar_host_alloc_pinned(b, bytes, (void **)&blk->host);
    if (st == MSTAR_OK)
        st = mstar_device_alloc(b, bytes, (void **)&blk->dev);
    if (st == MSTAR_OK)
        st = mstar_event_create(b, &blk->copied);
    if (st == MSTAR_OK) {
        memset(blk->host, 0, bytes);
        st = mstar_memcpy_async(stream, blk->dev, blk->host, bytes, MSTAR_MEMCPY_H2D);
    }
    if (st != MSTAR_OK) {
        block_free(b, blk);
        return mstar_error_wrap("plan buffer of %zu ints", ints);
    }
    return MSTAR_OK;
}

/* Allocate n zeroed blocks, all or none; the zeroing copies finish before this returns. */
static mstar_status blocks_alloc(mstar_backend *b, size_t ints, mstar__plan_block *blocks, size_t n)
{
    mstar_stream *stream;
    mstar_status st = mstar_stream_create(b, MSTAR_STREAM_NON_BLOCKING, &stream);
    if (st != MSTAR_OK)
        return st;
    size_t done = 0;
    while (st == MSTAR_OK && done < n) {
        st = block_alloc(b, ints, stream, &blocks[done]);
        done += st == MSTAR_OK;
    }
    mstar_status sync = mstar_stream_synchronize(stream);
    mstar_stream_destroy(stream);
    if (st == MSTAR_OK)
        st = sync;
    if (st != MSTAR_OK) {
        for (size_t i = 0; i < done; i++)
            block_free(b, &blocks[i]);
    }
    return st;
}

static void free_slots(mstar__plan_store *ps)
{
    for (int32_t i = 0; i < ps->num_slots * ps->num_labels; i++)
        block_free(ps->backend, &ps->slot_blocks[i]);
    free(ps->slot_blocks);
    for (int32_t s = 0; s < ps->num_slots; s++)
        mstar__vec_free(&ps->pending[s]);
    free(ps->pending);
    free(ps->has_pending);
    free(ps->pending_shape);
    ps->slot_blocks = NULL;
    ps->pending = NULL;
    ps->has_pending = NULL;
    ps->pending_shape = NULL;
    ps->num_slots = 0;
    ps->slot_ints = 0;
}

void mstar__plan_store_free(mstar__plan_store *ps)
{
    free_slots(ps);
    for (int32_t l = 0; l < ps->num_labels; l++)
        block_free(ps->backend, &ps->eager_blocks[l]);
    memset(ps, 0, sizeof(*ps));
}

mstar_status mstar__plan_store_build(mstar__plan_store *ps, int32_t num_slots, size_t ints)
{
    if (num_slots <= ps->num_slots && ints <= ps->slot_ints)
        return MSTAR_OK;
    int32_t slots = num_slots > ps->num_slots ? num_slots : ps->num_slots;
    size_t size = ints > ps->slot_ints ? ints : ps->slot_ints;
    size_t nblocks = (size_t)slots * (size_t)ps->num_labels;
    mstar__plan_block *blocks = calloc(nblocks, sizeof(*blocks));
    mstar__vec *pending = calloc((size_t)slots, sizeof(*pending));
    bool *has_pending = calloc((size_t)slots, sizeof(*has_pending));
    int64_t *pending_shape = calloc((size_t)slots, sizeof(*pending_shape));
    mstar_status st = MSTAR_OK;
    if (blocks == NULL || pending == NULL || has_pending == NULL || pending_shape == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "plan buffers: %d slots", slots);
    if (st == MSTAR_OK)
        st = blocks_alloc(ps->backend, size, blocks, nblocks);
    if (st != MSTAR_OK) {
        free(blocks);
        free(pending);
        free(has_pending);
        free(pending_shape);
        return mstar_error_wrap("plan buffers: %d slots of %zu ints", slots, size);
    }
    free_slots(ps);
    for (int32_t s = 0; s < slots; s++)
        mstar__vec_init(&pending[s], sizeof(mstar_step_segment));
    ps->slot_blocks = blocks;
    ps->pending = pending;
    ps->has_pending = has_pending;
    ps->pending_shape = pending_shape;
    ps->num_slots = slots;
    ps->slot_ints = size;
    return MSTAR_OK;
}

mstar_status mstar__plan_store_grow_eager(mstar__plan_store *ps, size_t ints)
{
    if (ints <= ps->eager_ints)
        return MSTAR_OK;
    mstar__plan_block fresh[MSTAR_KV_MAX_LABELS];
    mstar_status st = blocks_alloc(ps->backend, ints, fresh, (size_t)ps->num_labels);
    if (st != MSTAR_OK)
        return mstar_error_wrap("eager plan buffers of %zu ints", ints);
    for (int32_t l = 0; l < ps->num_labels; l++) {
        block_free(ps->backend, &ps->eager_blocks[l]);
        ps->eager_blocks[l] = fresh[l];
    }
    ps->eager_ints = ints;
    return MSTAR_OK;
}

static mstar__plan_block *block_of(const mstar__plan_store *ps, int32_t slot, int32_t label)
{
    if (label < 0 || label >= ps->num_labels)
        return NULL;
    if (slot == MSTAR_PLAN_EAGER)
        return ps->eager_ints ? (mstar__plan_block *)&ps->eager_blocks[label] : NULL;
    if (slot < 0 || slot >= ps->num_slots)
        return NULL;
    return &ps->slot_blocks[(size_t)slot * (size_t)ps->num_labels + (size_t)label];
}

int32_t *mstar__plan_store_device(const mstar__plan_store *ps, int32_t slot, int32_t label)
{
    mstar__plan_block *blk = block_of(ps, slot, label);
    return blk != NULL ? blk->dev : NULL;
}

int32_t *mstar__plan_store_write_begin(mstar__plan_store *ps, int32_t slot, int32_t label)
{
    mstar__plan_block *blk = block_of(ps, slot, label);
    if (blk == NULL) {
        mstar_error_set(MSTAR_ESTATE, "plan buffers of slot %d label %d are not built", slot,
                        label);
        return NULL;
    }
    if (mstar_event_synchronize(blk->copied) != MSTAR_OK) {
        mstar_error_wrap("waiting for the last upload of slot %d label %d", slot, label);
        return NULL;
    }
    return blk->host;
}

mstar_status mstar__plan_store_upload(mstar__plan_store *ps, int32_t slot, int32_t label,
                                      mstar_stream *stream)
{
    mstar__plan_block *blk = block_of(ps, slot, label);
    size_t ints = slot == MSTAR_PLAN_EAGER ? ps->eager_ints : ps->slot_ints;
    mstar_status st =
        mstar_memcpy_async(stream, blk->dev, blk->host, ints * sizeof(int32_t), MSTAR_MEMCPY_H2D);
    if (st == MSTAR_OK)
        st = mstar_event_record(blk->copied, stream);
    return st;
}

mstar_status mstar__plan_store_check_plan(const mstar__plan_store *ps, int32_t slot, bool preplan,
                                          const mstar_stream *stream, const char *what)
{
    if (slot != MSTAR_PLAN_EAGER && (slot < 0 || slot >= ps->num_slots))
        return mstar_error_set(MSTAR_ERANGE,
                               "%s: slot %d, but plan buffers were built for %d slots", what, slot,
                               ps->num_slots);
    if (preplan && slot == MSTAR_PLAN_EAGER)
        return mstar_error_set(MSTAR_EINVAL, "%s: a pre-plan needs a slot (a lease)", what);
    if (stream == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: stream is NULL", what);
    return MSTAR_OK;
}

static bool same_segments(const mstar__vec *v, const mstar_resource_step *step)
{
    if (v->len != step->num_segments)
        return false;
    const mstar_step_segment *a = v->data;
    for (size_t i = 0; i < step->num_segments; i++) {
        const mstar_step_segment *b = &step->segments[i];
        if (a[i].request != b->request || a[i].label != b->label || a[i].span != b->span)
            return false;
    }
    return true;
}

bool mstar__plan_store_promote(mstar__plan_store *ps, int32_t slot, const mstar_resource_step *step,
                               int64_t shape)
{
    if (slot < 0 || slot >= ps->num_slots || !ps->has_pending[slot])
        return false;
    if (ps->pending_shape[slot] != shape || !same_segments(&ps->pending[slot], step))
        return false;
    ps->has_pending[slot] = false;
    return true;
}

mstar_status mstar__plan_store_written(mstar__plan_store *ps, int32_t slot,
                                       const mstar_resource_step *step, int64_t shape, bool preplan)
{
    if (slot < 0 || slot >= ps->num_slots)
        return MSTAR_OK;
    ps->has_pending[slot] = false;
    if (!preplan)
        return MSTAR_OK;
    mstar__vec *v = &ps->pending[slot];
    v->len = 0;
    mstar_status st = mstar__vec_reserve(v, step->num_segments);
    if (st != MSTAR_OK)
        return st;
    if (step->num_segments > 0)
        memcpy(v->data, step->segments, step->num_segments * sizeof(mstar_step_segment));
    v->len = step->num_segments;
    ps->pending_shape[slot] = shape;
    ps->has_pending[slot] = true;
    return MSTAR_OK;
}

const mstar_step_segment *mstar__plan_store_take_pending(mstar__plan_store *ps, int32_t slot,
                                                         size_t *n)
{
    *n = 0;
    if (slot < 0 || slot >= ps->num_slots || !ps->has_pending[slot])
        return NULL;
    ps->has_pending[slot] = false;
    *n = ps->pending[slot].len;
    return ps->pending[slot].data;
}
