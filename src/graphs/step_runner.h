/*
 * step_runner.h — what the graph runners need from the step runner beyond the public cycle: the
 * one lease counter per device, and the per-slot "last replay" events that pre-plan waits on.
 */
#ifndef MSTAR_GRAPHS_STEP_RUNNER_H
#define MSTAR_GRAPHS_STEP_RUNNER_H

#include "mstar/step.h"

/* The next slot of the rotating counter, modulo num_slots (§2.6). Thread-safe: the counter is
 * shared by every runner of the device and guarded by a mutex. */
int32_t mstar__step_runner_next_slot(mstar_step_runner *sr, int32_t num_slots);
/* Record, on the compute stream, that a replay on `slot` was enqueued; a later pre-plan of the
 * slot waits for it (§8.4). */
mstar_status mstar__step_runner_replay_enqueued(mstar_step_runner *sr, int32_t slot);
/* Largest max_bs / max_seq_len claimed so far. */
void mstar__step_runner_claimed_sizes(const mstar_step_runner *sr, int64_t *max_bs,
                                      int64_t *max_seq_len);

#endif
