/*
 * ref_profile.h — per-op timing of a forward: the reference model (and the mlp bench model) put a
 * pair of marks around each op they enqueue while a profile is set, and the profile adds them up
 * by op name once the stream has run. On CUDA a mark is an event with timing, so the figures are
 * GPU time per op; on the host backend they are wall time (eager host work runs at its launch).
 *
 * Meant for eager steps only: a mark recorded while a stream captures would end up in the graph.
 */
#ifndef MSTAR_EXAMPLES_REF_PROFILE_H
#define MSTAR_EXAMPLES_REF_PROFILE_H

#include "mstar/mstar.h"

#include <stddef.h>

typedef struct ref_profile ref_profile;

/* One row of a summary: op name, how many times it ran, its total microseconds. */
typedef struct ref_profile_row {
    const char *op;
    int calls;
    double total_us;
} ref_profile_row;

/* Room for `max_ops` timed ops between resets. */
mstar_status ref_profile_create(mstar_backend *backend, size_t max_ops, ref_profile **out);
void ref_profile_destroy(ref_profile *p); /* NULL is ignored */
/* Forget the ops timed so far. */
void ref_profile_reset(ref_profile *p);

/* Marks the start and the end of op `name` (a string that outlives the profile) on `s`. Both
 * return MSTAR_OK at once when p is NULL, so a forward calls them unconditionally. */
mstar_status ref_profile_op_begin(ref_profile *p, mstar_stream *s, const char *name);
mstar_status ref_profile_op_end(ref_profile *p, mstar_stream *s);

/* After the stream has run the timed work: one row per op name, in order of first use. *n gets
 * the number of rows (at most max). */
mstar_status ref_profile_summary(const ref_profile *p, ref_profile_row *rows, size_t max,
                                 size_t *n);

#endif
