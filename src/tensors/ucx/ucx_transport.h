/*
 * ucx/ucx_transport.h — the UCX transport (ucx_transport.c): its create, and the pinned-memory
 * count its tests read. What every transport shares is in tensors/transport.h.
 */
#ifndef MSTAR_TENSORS_UCX_TRANSPORT_H
#define MSTAR_TENSORS_UCX_TRANSPORT_H

#include "tensors/transport.h"

/* env->ucx must be set. */
mstar_status mstar__transport_ucx_create(const mstar__transport_env *env, mstar__transport **out);
/* Pinned host bytes a UCX transport holds (staged copies of device tensors, reads into device
 * memory in flight); 0 for any other transport. Any thread. */
uint64_t mstar__transport_ucx_pinned_bytes(mstar__transport *t);

#endif
