/*
 * transport_files.h — the files transport (transport_files.c), one file per staged tensor in the
 * shm directory, and its per-uuid file protocol, which the arena transport also uses for spills.
 */
#ifndef MSTAR_TENSORS_TRANSPORT_FILES_H
#define MSTAR_TENSORS_TRANSPORT_FILES_H

#include "tensors/transport.h"

mstar_status mstar__transport_files_create(const mstar__transport_env *env, mstar__transport **out);
/* The per-uuid file protocol (transport_files.c), which the arena also uses for spills: write
 * an item's bytes (its host copy, or the tensor copied to the host) as this entity's file for
 * its uuid; read a descriptor's range of its producer's file into `into` (NULL: a new buffer,
 * see mstar__transport_read_dest). */
mstar_status mstar__files_write_one(const mstar__transport_env *env, mstar__stage_item *item);
mstar_status mstar__files_read_one(const mstar__transport_env *env, const mstar_tensor_info *info,
                                   mstar__buf *into, mstar__buf **out);

#endif
