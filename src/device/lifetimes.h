/*
 * lifetimes.h — which allocations of a run outlive it, learned from an eager run and used by the
 * capture of the same run, so that a graph pool can keep a graph's outputs apart from the
 * scratch that every capture of the pool shares (the pool model of design.md "Planning").
 *
 * Why: a pool holds what every graph keeps plus the most any one graph needs beyond that only if
 * kept blocks never land in the shared scratch. With one kind of segment they do: the second
 * slot of a bucket puts its output into the first slot's freed scratch, and its own scratch,
 * as large as the first one's, no longer fits there, so the pool grows by nearly a whole scratch
 * more than the model says. An allocator cannot tell an output from scratch when it is asked;
 * the warm-up just before each capture can: it runs the same forward, with the same requests in
 * the same order, and what it has not freed when the forward returns is what the capture keeps.
 *
 * While a stream records, its mstar_alloc and mstar_free outside a capture are noted, in order.
 * While it applies a recording, each allocation it makes inside a capture is matched with the
 * recorded one of the same index: same size, and that one outlived its run, means a kept
 * segment. The first mismatch (the capture allocates differently) ends the hints for the rest
 * of the capture: everything after it is shared, as without a recording. Hints only place
 * blocks; nothing else depends on them.
 */
#ifndef MSTAR_DEVICE_LIFETIMES_H
#define MSTAR_DEVICE_LIFETIMES_H

#include "device/backend.h"

typedef struct mstar__lifetimes {
    mstar__vec allocs; /* struct mstar__lifetime, in allocation order */
    size_t next;       /* applying: the index the next allocation is matched with */
    bool diverged;     /* applying: a mismatch ended the hints; recording: a note was lost */
} mstar__lifetimes;

void mstar__lifetimes_init(mstar__lifetimes *lt);
void mstar__lifetimes_free(mstar__lifetimes *lt);

/* Start recording stream s's allocations into lt (emptied first); NULL stops. */
void mstar__lifetimes_record(mstar_stream *s, mstar__lifetimes *lt);
/* Hint stream s's capture allocations from lt, from its first; NULL stops. */
void mstar__lifetimes_apply(mstar_stream *s, mstar__lifetimes *lt);

/* What a capture of the recorded run keeps in its pool, as its stats would count it: the
 * allocator's charge (mstar__allocator_kept_charge) of every allocation that outlived the run.
 * False when the recording is empty or lost a note. */
bool mstar__lifetimes_kept_bytes(const mstar__lifetimes *lt, uint64_t *bytes);

/* backend.c's mstar_alloc / mstar_free outside a capture: note them while s records. */
void mstar__lifetimes_note_alloc(mstar_stream *s, size_t nbytes, void *ptr);
void mstar__lifetimes_note_free(mstar_stream *s, void *ptr);
/* backend.c's mstar_alloc inside a capture: where the next block of nbytes goes. */
mstar__seg_kind mstar__lifetimes_next_kind(mstar_stream *s, size_t nbytes);

#endif
