/*
 * mstar_test_partial.h — free memory that makes capture startup plan only part of a runner's
 * buckets, derived from the runner's own sized costs instead of guessed.
 *
 * A probe runner, built like the one under test but never captured, is prepared and sized as
 * startup sizes it when memory is short: mstar_size_captures, then mstar_size_lent_captures, so
 * every bucket carries its own cost. need[k] is the least free memory at the plan for which
 * mstar_plan_captures plans k buckets. The target lies halfway between need[k] and need[k + 1]
 * for the k whose need is nearest to half of what every bucket needs, so a drift in free memory
 * smaller than half that gap (a device's noise, a driver's cached executables) cannot change the
 * plan. `overhead` is the free memory that preparing and sizing took and still hold (graph
 * buffers, per-slot warm-up state, held executable copies): leave overhead + target free before
 * the real startup and its plan sees about `target`.
 */
#ifndef MSTAR_TEST_PARTIAL_H
#define MSTAR_TEST_PARTIAL_H

#include "mstar/mstar.h"

#define MSTAR_TEST_PARTIAL_MAX 32 /* buckets a probe handles */

typedef struct mstar_test_partial {
    size_t nbuckets;
    uint64_t need[MSTAR_TEST_PARTIAL_MAX + 1]; /* need[0] = 0 */
    size_t planned;                            /* k: buckets a plan at `target` captures */
    uint64_t target;                           /* free memory at the plan */
    uint64_t predicted;                        /* that plan's predicted pool bytes */
    uint64_t floor;                            /* that plan's floor */
    uint64_t overhead;                         /* free memory the probe's sizing held */
} mstar_test_partial;

/*
 * Prepare and size `runner` (uncaptured, the only runner of step runner `sr`), fill *out and
 * leave the runner sized but uncaptured: destroy it afterwards. MSTAR_ERANGE if no k with
 * 1 <= k < nbuckets exists (every bucket costs the same, or only one bucket).
 */
mstar_status mstar_test_partial_probe(mstar_graph_runner *runner, mstar_step_runner *sr,
                                      mstar_test_partial *out);

#endif
