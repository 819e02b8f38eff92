/*
 * cuda_ipc_world.h — two communication managers in one process with the CUDA IPC route on
 * (MSTAR_CUDA_IPC=1) over the host backend's in-process stand-in, as the route's unit tests
 * (tests/unit/test_cuda_ipc.c) and its hostile tests (tests/hostile/test_hostile_cuda_ipc.c)
 * both set them up, and the helpers both use.
 */
#ifndef MSTAR_TEST_CUDA_IPC_WORLD_H
#define MSTAR_TEST_CUDA_IPC_WORLD_H

#include "comm_harness.h"

#include <stdbool.h>
#include <sys/types.h>

typedef struct cuda_ipc_world {
    const char *dir;
    mstar_backend *bp, *bc;
    bus b;
    sender sp, sc;
    mstar_comm *p; /* worker_0, the producer */
    mstar_comm *c; /* worker_1, the consumer */
} cuda_ipc_world;

/* A world in a fresh shm directory named after `name`. `async`: both managers' streams run their
 * work on threads of their own, so work can still be queued when a tensor is staged. `spin_us`
 * is MSTAR_CUDA_IPC_SPIN_US (how long a small read polls for its copies); `timeout_s`
 * MSTAR_CUDA_IPC_TIMEOUT_S, or NULL for the library's. The variables are unset again. */
cuda_ipc_world *cuda_ipc_world_new(const char *name, bool async, const char *spin_us,
                                   const char *timeout_s);
/* Destroy both managers and check that they left nothing in the directory. */
void cuda_ipc_world_free(cuda_ipc_world *w);

/* How many segments the manager's route opened so far, and how many it has mapped now. */
uint64_t cuda_ipc_opens(mstar_comm *c);
uint64_t cuda_ipc_mapped(mstar_comm *c);

/* A child that sleeps until killed (a producer pid that is alive and is not ours). */
pid_t cuda_ipc_spawn_sleeper(void);
/* Host work for mstar_launch that holds its stream until a byte arrives on the fd in `args`. */
void cuda_ipc_hold_stream(void *args);

#endif
