/*
 * cuda_ipc.h — the CUDA IPC route as the communication manager sees it (cuda_ipc_transport.c):
 * whether to use it (MSTAR_CUDA_IPC, the backend, the host a descriptor comes from), how a reader
 * waits for a producer's event, and the wrap that puts the route around the staged transport.
 * What only tests ask of the route is in cuda_ipc_test_hooks.h.
 */
#ifndef MSTAR_TENSORS_CUDA_IPC_H
#define MSTAR_TENSORS_CUDA_IPC_H

#include "tensors/transport.h"

/* MSTAR_CUDA_IPC: 0 off, 1 forced (the route alone), AUTO (the default: on for CUDA backends,
 * beside the staged copy). */
typedef enum mstar__cuda_ipc_mode {
    MSTAR__CUDA_IPC_OFF = 0,
    MSTAR__CUDA_IPC_ON = 1,
    MSTAR__CUDA_IPC_AUTO = 2,
} mstar__cuda_ipc_mode;

mstar_status mstar__cuda_ipc_mode_get(mstar__cuda_ipc_mode *out);
/* Whether a manager with `backend` (NULL: host tensors only) wraps its transport in the route. */
bool mstar__cuda_ipc_wanted(mstar__cuda_ipc_mode mode, const mstar_backend *backend);
/* Whether a consumer on host `host_id` may read `info` over the route. */
bool mstar__cuda_ipc_usable(const char *host_id, const mstar_tensor_info *info);
/* The host identity in `path` (a boot id file): a name of 1..MSTAR_HOST_ID_MAX bytes into
 * out[MSTAR_HOST_ID_MAX + 1]. */
mstar_status mstar__host_id_read(const char *path, char *out);
/* The most bytes a read call's copies may have for the reader to poll for them to land (up to
 * MSTAR_CUDA_IPC_SPIN_US): a small handoff's latency is then a copy, not a wake-up of the caller's
 * loop. Larger copies land in the background, so the copies of many reads in flight overlap. */
#define MSTAR__CUDA_IPC_SPIN_MAX_BYTES (4u << 20)
/* Wait from the host until `event` (a producer's, opened here) has fired: MSTAR_OK once it has,
 * MSTAR_ECLOSED once process `pid` has exited (or is a zombie) with it unfired, MSTAR_ETIMEDOUT
 * after `timeout_s` (0: no limit) with the producer alive; `what` names the read in the error. */
mstar_status mstar__cuda_ipc_wait_event(mstar_event *event, int32_t pid, double timeout_s,
                                        const char *what);
/* Wrap `inner` (files or arena) in the route; owns `inner` from the call on, even on failure. */
mstar_status mstar__transport_cuda_ipc_wrap(const mstar__transport_env *env,
                                            mstar__cuda_ipc_mode mode, mstar__transport *inner,
                                            mstar__transport **out);

#endif
