/*
 * transport_local.h — the transport of a single-process deployment (transport_local.c).
 */
#ifndef MSTAR_TENSORS_TRANSPORT_LOCAL_H
#define MSTAR_TENSORS_TRANSPORT_LOCAL_H

#include "tensors/transport.h"

mstar_status mstar__transport_local_create(const mstar__transport_env *env, mstar__transport **out);

#endif
