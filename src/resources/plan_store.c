/*
 * plan_store.c — see plan_store.h.
 */
#include "plan_store.h"

#include <stdlib.h>
#include <string.h>

void mstar__plan_store_init(mstar__plan_store *ps, int32_t num_labels)
{
    memset(ps, 0, sizeof(*ps));
    ps->num_labels = num_labels;
}

static void free_slots(mstar__plan_store *ps)
{
    for (int32_t i = 0; i < ps->num_slots * ps->num_labels; i++)
        free(ps->slot_blocks[i]);
    free(ps->slot_blocks);
    for (int32_t s = 0; s < ps->num_slots; s++)
        mstar__vec_free(&ps->pending[s]);
    free(ps->pending);
    free(ps->has_pending);
    free(ps->pending_shape);
    ps->slot_blocks = NULL;
    ps->pending = NULL;
    ps->pending_shape = NULL;
    ps->has_pending = NULL;
    ps->num_slots = 0;
    ps->slot_ints = 0;
}

void mstar__plan_store_free(mstar__plan_store *ps)
{
    free_slots(ps);
    for (int32_t l = 0; l < ps->num_labels; l++)
        free(ps->eager_blocks[l]);
    memset(ps, 0, sizeof(*ps));
}

static int32_t *alloc_block(size_t ints)
{
    if (ints > SIZE_MAX / sizeof(int32_t))
        return NULL;
    return calloc(ints, sizeof(int32_t));
}

mstar_status mstar__plan_store_build(mstar__plan_store *ps, int32_t num_slots, size_t ints,
                                     bool *moved)
{
    *moved = false;
    if (num_slots <= ps->num_slots && ints <= ps->slot_ints)
        return MSTAR_OK;
    int32_t slots = num_slots > ps->num_slots ? num_slots : ps->num_slots;
    size_t size = ints > ps->slot_ints ? ints : ps->slot_ints;
    size_t nblocks = (size_t)slots * (size_t)ps->num_labels;
    int32_t **blocks = calloc(nblocks, sizeof(*blocks));
    mstar__vec *pending = calloc((size_t)slots, sizeof(*pending));
    bool *has_pending = calloc((size_t)slots, sizeof(*has_pending));
    int64_t *pending_shape = calloc((size_t)slots, sizeof(*pending_shape));
    bool ok = blocks != NULL && pending != NULL && has_pending != NULL && pending_shape != NULL;
    for (size_t i = 0; ok && i < nblocks; i++) {
        blocks[i] = alloc_block(size);
        ok = blocks[i] != NULL;
    }
    if (!ok) {
        for (size_t i = 0; blocks != NULL && i < nblocks; i++)
            free(blocks[i]);
        free(blocks);
        free(pending);
        free(has_pending);
        free(pending_shape);
        return mstar_error_set(MSTAR_ENOMEM, "plan buffers: %d slots of %zu ints", slots, size);
    }
    free_slots(ps);
    for (int32_t s = 0; s < slots; s++)
        mstar__vec_init(&pending[s], sizeof(mstar_segment));
    ps->slot_blocks = blocks;
    ps->pending = pending;
    ps->has_pending = has_pending;
    ps->pending_shape = pending_shape;
    ps->num_slots = slots;
    ps->slot_ints = size;
    *moved = true;
    return MSTAR_OK;
}

mstar_status mstar__plan_store_grow_eager(mstar__plan_store *ps, size_t ints, bool *moved)
{
    *moved = false;
    if (ints <= ps->eager_ints)
        return MSTAR_OK;
    int32_t *fresh[MSTAR_KV_MAX_LABELS] = { NULL };
    for (int32_t l = 0; l < ps->num_labels; l++) {
        fresh[l] = alloc_block(ints);
        if (fresh[l] == NULL) {
            for (int32_t i = 0; i < l; i++)
                free(fresh[i]);
            return mstar_error_set(MSTAR_ENOMEM, "eager plan buffers of %zu ints", ints);
        }
    }
    for (int32_t l = 0; l < ps->num_labels; l++) {
        free(ps->eager_blocks[l]);
        ps->eager_blocks[l] = fresh[l];
    }
    ps->eager_ints = ints;
    *moved = true;
    return MSTAR_OK;
}

int32_t *mstar__plan_store_block(const mstar__plan_store *ps, int32_t slot, int32_t label)
{
    if (label < 0 || label >= ps->num_labels)
        return NULL;
    if (slot == MSTAR_PLAN_EAGER)
        return ps->eager_blocks[label];
    if (slot < 0 || slot >= ps->num_slots)
        return NULL;
    return ps->slot_blocks[(size_t)slot * (size_t)ps->num_labels + (size_t)label];
}

mstar_status mstar__plan_store_check_slot(const mstar__plan_store *ps, int32_t slot,
                                          const char *what)
{
    if (slot == MSTAR_PLAN_EAGER || (slot >= 0 && slot < ps->num_slots))
        return MSTAR_OK;
    return mstar_error_set(MSTAR_ERANGE, "%s: slot %d, but plan buffers were built for %d slots",
                           what, slot, ps->num_slots);
}

mstar_status mstar__resource_step_check(const mstar_resource_step *step, int32_t num_labels,
                                        const char *what)
{
    if (step == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s: step is NULL", what);
    if (step->num_segments < 0 || (step->num_segments > 0 && step->segments == NULL))
        return mstar_error_set(MSTAR_EINVAL, "%s: step.num_segments %d with segments %p", what,
                               step->num_segments, (const void *)step->segments);
    for (int32_t i = 0; i < step->num_segments; i++) {
        const mstar_segment *g = &step->segments[i];
        if (g->label < 0 || g->label >= num_labels)
            return mstar_error_set(MSTAR_EINVAL, "%s: segments[%d].label %d, not in [0, %d)", what,
                                   i, g->label, num_labels);
        if (g->span < 0)
            return mstar_error_set(MSTAR_EINVAL, "%s: segments[%d].span %d is negative", what, i,
                                   g->span);
    }
    return MSTAR_OK;
}

static bool same_segments(const mstar__vec *v, const mstar_resource_step *step)
{
    if (v->len != (size_t)step->num_segments)
        return false;
    const mstar_segment *a = v->data;
    for (int32_t i = 0; i < step->num_segments; i++) {
        const mstar_segment *b = &step->segments[i];
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
    mstar_status st = mstar__vec_reserve(v, (size_t)step->num_segments);
    if (st != MSTAR_OK)
        return st;
    if (step->num_segments > 0)
        memcpy(v->data, step->segments, (size_t)step->num_segments * sizeof(mstar_segment));
    v->len = (size_t)step->num_segments;
    ps->pending_shape[slot] = shape;
    ps->has_pending[slot] = true;
    return MSTAR_OK;
}

const mstar_segment *mstar__plan_store_take_pending(mstar__plan_store *ps, int32_t slot, size_t *n)
{
    *n = 0;
    if (slot < 0 || slot >= ps->num_slots || !ps->has_pending[slot])
        return NULL;
    ps->has_pending[slot] = false;
    *n = ps->pending[slot].len;
    return ps->pending[slot].data;
}
