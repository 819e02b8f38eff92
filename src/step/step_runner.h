/*
 * step_runner.h — what the graph runners need from the step runner beyond the public cycle: the
 * one lease counter per device, and the per-slot "last replay" events that pre-plan waits on.
 */
#ifndef MSTAR_STEP_STEP_RUNNER_H
#define MSTAR_STEP_STEP_RUNNER_H

#include "mstar/step.h"

/* The next slot of the rotating counter, modulo num_slots (design.md "Slots"). Thread-safe: the
 * counter is shared by every runner of the device and guarded by a mutex. */
int32_t mstar__step_runner_next_slot(mstar_step_runner *sr, int32_t num_slots);
/* Slots are 0 .. MSTAR__MAX_SLOTS - 1 (MSTAR_NUM_SLOTS and the runners' num_slots: 1..16). */
#define MSTAR__MAX_SLOTS 16

/*
 * G-4: a pre-plan of a slot waits, on the plan stream, for the last replay that used the slot.
 * The replay's graph itself records the slot's event: a runner takes the event here before it
 * captures a graph for `slot` (created on first use; never inside a capture), records it at the
 * end of the captured work (mstar__event_record_in_capture), and calls replay_launched after each
 * launch. Every launch then records the event on the device; the host makes no event call.
 */
mstar_status mstar__step_runner_replay_event(mstar_step_runner *sr, int32_t slot,
                                             mstar_event **out);
/* A graph captured with the slot's replay event was launched: pre-plans of `slot` wait for it
 * from now on. One store, no device call; thread-safe against a pre-plan on another thread. */
void mstar__step_runner_replay_launched(mstar_step_runner *sr, int32_t slot);
/* run_forward's check (design.md "Replay", G-16): MSTAR_EINVAL when the last leased step planned
 * for the lease's slot declared another cg_key_info than the lease's bucket; OK when none was
 * planned. */
mstar_status mstar__step_runner_check_replay_key(mstar_step_runner *sr,
                                                 const mstar_slot_lease *lease, const char *who);
/* Largest max_bs / max_seq_len claimed so far. */
void mstar__step_runner_claimed_sizes(const mstar_step_runner *sr, int64_t *max_bs,
                                      int64_t *max_seq_len);

#endif
