/*
 * nap.h — how the CUDA IPC route waits for an event from the host: poll, yielding the CPU, for a
 * while, then sleep between polls in naps that double up to a maximum. A reader waiting for a
 * producer's event (cuda_ipc_transport.c) and the watcher waiting for a read's copies to land
 * (landing.c) both wait this way.
 */
#ifndef MSTAR_TENSORS_CUDA_IPC_NAP_H
#define MSTAR_TENSORS_CUDA_IPC_NAP_H

#include <stdint.h>

/* How long a reader polls a producer's event before it starts to sleep between polls, and
 * the naps after that. The event has usually fired within microseconds of the descriptor's
 * arrival, but not always before it (the record and the message race), and a sleep costs at
 * least the kernel's timer slack (about 50 us): napping after a handful of polls put hundreds
 * of microseconds on every handoff whose event was a little late. */
#define MSTAR__CUDA_IPC_SPIN_NS      1000000L /* 1 ms of polling (yielding the CPU) */
#define MSTAR__CUDA_IPC_NAP_FIRST_NS 10000L
#define MSTAR__CUDA_IPC_NAP_MAX_NS   1000000L
/* The nap before the next poll, `waited_ns` into a wait whose last nap was `last_nap_ns` (0:
 * none yet): 0 (poll again at once) within the spin, then naps doubling to the maximum. */
long mstar__cuda_ipc_nap_ns(uint64_t waited_ns, long last_nap_ns);
/* Pause before the next poll: yield the CPU when `nap_ns` is 0, else sleep that long. */
void mstar__cuda_ipc_pause(long nap_ns);

#endif
