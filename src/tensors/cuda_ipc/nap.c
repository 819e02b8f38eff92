/*
 * nap.c — the poll-then-nap schedule of the CUDA IPC route's waits (nap.h).
 */
#include "tensors/cuda_ipc/nap.h"

#include <sched.h>
#include <time.h>

long mstar__cuda_ipc_nap_ns(uint64_t waited_ns, long last_nap_ns)
{
    if (waited_ns < MSTAR__CUDA_IPC_SPIN_NS)
        return 0;
    if (last_nap_ns <= 0)
        return MSTAR__CUDA_IPC_NAP_FIRST_NS;
    return last_nap_ns < MSTAR__CUDA_IPC_NAP_MAX_NS / 2 ? last_nap_ns * 2
                                                        : MSTAR__CUDA_IPC_NAP_MAX_NS;
}

void mstar__cuda_ipc_pause(long nap_ns)
{
    if (nap_ns == 0) {
        sched_yield();
        return;
    }
    struct timespec ts = { 0, nap_ns };
    nanosleep(&ts, NULL);
}
