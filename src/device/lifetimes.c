/*
 * lifetimes.c — recording which allocations of an eager run outlive it, and replaying that as
 * placement hints for the capture of the same run (see lifetimes.h).
 */
#include "device/lifetimes.h"

struct mstar__lifetime {
    size_t nbytes;
    void *ptr;     /* while recording: to match a free with its allocation */
    bool outlived; /* not freed before the recording stopped */
};

void mstar__lifetimes_init(mstar__lifetimes *lt)
{
    mstar__vec_init(&lt->allocs, sizeof(struct mstar__lifetime));
    lt->next = 0;
    lt->diverged = false;
}

void mstar__lifetimes_free(mstar__lifetimes *lt)
{
    mstar__vec_free(&lt->allocs);
}

void mstar__lifetimes_record(mstar_stream *s, mstar__lifetimes *lt)
{
    if (lt != NULL) {
        lt->allocs.len = 0;
        lt->diverged = false;
    }
    s->recording = lt;
}

void mstar__lifetimes_apply(mstar_stream *s, mstar__lifetimes *lt)
{
    if (lt != NULL)
        lt->next = 0;
    s->applying = lt;
}

bool mstar__lifetimes_kept_bytes(const mstar__lifetimes *lt, uint64_t *bytes)
{
    if (lt->allocs.len == 0 || lt->diverged)
        return false;
    uint64_t sum = 0;
    for (size_t i = 0; i < lt->allocs.len; i++) {
        const struct mstar__lifetime *l = mstar__vec_at(&lt->allocs, i);
        if (l->outlived)
            sum += mstar__allocator_kept_charge(l->nbytes);
    }
    *bytes = sum;
    return true;
}

void mstar__lifetimes_note_alloc(mstar_stream *s, size_t nbytes, void *ptr)
{
    mstar__lifetimes *lt = s->recording;
    if (lt == NULL || lt->diverged)
        return;
    struct mstar__lifetime l = { nbytes, ptr, true };
    if (mstar__vec_push(&lt->allocs, &l) != MSTAR_OK) {
        mstar_error_clear(); /* only a hint is lost: the capture shares every block */
        lt->diverged = true;
    }
}

void mstar__lifetimes_note_free(mstar_stream *s, void *ptr)
{
    mstar__lifetimes *lt = s->recording;
    if (lt == NULL)
        return;
    /* The latest live allocation at ptr: an address freed earlier in the run may come back. */
    for (size_t i = lt->allocs.len; i-- > 0;) {
        struct mstar__lifetime *l = mstar__vec_at(&lt->allocs, i);
        if (l->ptr == ptr && l->outlived) {
            l->outlived = false;
            return;
        }
    }
}

mstar__seg_kind mstar__lifetimes_next_kind(mstar_stream *s, size_t nbytes)
{
    mstar__lifetimes *lt = s->applying;
    if (lt == NULL || lt->diverged)
        return MSTAR__SEG_SHARED;
    if (lt->next >= lt->allocs.len) {
        lt->diverged = true;
        return MSTAR__SEG_SHARED;
    }
    const struct mstar__lifetime *l = mstar__vec_at(&lt->allocs, lt->next++);
    if (l->nbytes != nbytes) {
        lt->diverged = true;
        return MSTAR__SEG_SHARED;
    }
    return l->outlived ? MSTAR__SEG_KEPT : MSTAR__SEG_SHARED;
}
