/*
 * arena_transport.h — the shared-memory arena transport (arena_transport.c): tensors staged into
 * slots of this entity's arena segments (arena.h), spills through the files protocol.
 */
#ifndef MSTAR_TENSORS_ARENA_TRANSPORT_H
#define MSTAR_TENSORS_ARENA_TRANSPORT_H

#include "tensors/transport.h"

mstar_status mstar__transport_arena_create(const mstar__transport_env *env, mstar__transport **out);

#endif
