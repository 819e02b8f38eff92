/*
 * cuda_ipc_registry.h — what a producer exported over the CUDA IPC route, said in memory only it
 * writes: the counterpart of the arena's trailer and slot stamps for device memory
 * (docs/security.md#cuda-ipc).
 *
 * A CUDA IPC handle opens the memory of whichever process exported it, and a descriptor is
 * whatever its sender wrote: on its own, a handle proves nothing about the entity a descriptor
 * names, and a block freed and reused under a late reader looks the same as before. So each
 * producer keeps a registry, a file "mstar_cudaipc_<entity>_<pid>" in the shm directory that it
 * creates (0600, exclusively) and holds an exclusive lock on for as long as it lives:
 *   - a header binding the file to its exporter (entity and pid, as in the name) and listing the
 *     interprocess events the producer records (their handles, written before any descriptor
 *     names them);
 *   - a table of entries, one per tensor on the route: its uuid (the stamp), the segment's
 *     handle and size, where the tensor starts in it, and which event was recorded behind the
 *     work that wrote it (or none: the bytes were written when it was staged).
 * A producer publishes an entry (uuid last, released) when it stages a tensor and clears the
 * uuid when it releases it, before its block can go back to the allocator. An entry lives at
 * slot uuid % slots or one of the MSTAR__IPC_REG_PROBES after it, so a reader finds it from the
 * descriptor alone.
 *
 * A reader opens the registry of the (entity, pid) its descriptor names, refuses one whose
 * header disagrees with its name, that is sparse, or that no process holds locked (its producer
 * is gone, whatever pid lives now), and reads a tensor only if an entry holds the descriptor's
 * uuid and agrees with the descriptor (handle, segment, offset, event) — before its copy, and
 * again once the copy has landed, as the arena's readers do with slot stamps (I-26). Entry loads
 * run under the SIGBUS guard, so a truncated file fails a read, not the process.
 */
#ifndef MSTAR_TENSORS_CUDA_IPC_REGISTRY_H
#define MSTAR_TENSORS_CUDA_IPC_REGISTRY_H

#include "mstar/wire.h"
#include "tensors/shm.h"

#include <stdatomic.h>

#define MSTAR__IPC_REG_PREFIX   "mstar_cudaipc_"
#define MSTAR__IPC_REG_MAGIC    "mstarCR1" /* 8 bytes, no NUL */
#define MSTAR__IPC_REG_EVENTS   16         /* the producer's ring of interprocess events */
#define MSTAR__IPC_REG_SLOTS    4096       /* entries: tensors on the route at once, about */
#define MSTAR__IPC_REG_PROBES   16         /* slots an entry may sit after its home slot */
#define MSTAR__IPC_REG_NO_EVENT UINT32_MAX /* the bytes were written when staged */

typedef struct mstar__ipc_reg_header {
    char magic[8];
    int64_t pid;
    uint32_t slots;
    uint32_t events;
    char entity[MSTAR_NAME_MAX + 1];
    uint8_t event_handles[MSTAR__IPC_REG_EVENTS][MSTAR_IPC_HANDLE_BYTES];
} mstar__ipc_reg_header;

typedef struct mstar__ipc_reg_entry {
    _Atomic uint64_t uuid; /* the stamp: 0 = free */
    uint64_t segment_size;
    uint64_t segment_offset;
    uint32_t event; /* index into the header's event handles, or MSTAR__IPC_REG_NO_EVENT */
    uint32_t reserved;
    uint8_t mem_handle[MSTAR_IPC_HANDLE_BYTES];
} mstar__ipc_reg_entry;

/* ---- the producer's side -------------------------------------------------------------------- */

typedef struct mstar__ipc_registry mstar__ipc_registry;

/* Create `entity`'s registry for this process in `dir`: MSTAR_EEXIST if a live one of this pid
 * holds the name (another manager of the same entity in this process); a stale one (a process
 * that had this pid and died) is replaced. */
mstar_status mstar__ipc_registry_create(const mstar__shm_dir *dir, const char *entity,
                                        mstar__ipc_registry **out);
/* Unmap; unlink too, in the process that created it. NULL is a no-op. */
void mstar__ipc_registry_destroy(mstar__ipc_registry *r);
/* Name interprocess event `k` (< MSTAR__IPC_REG_EVENTS), before any descriptor does. */
void mstar__ipc_registry_set_event(mstar__ipc_registry *r, uint32_t k, const uint8_t *handle);
/* Publish the route of tensor `uuid` (never 0) as `ref` says, its bytes behind event `event` (or
 * MSTAR__IPC_REG_NO_EVENT). MSTAR_ENOSPC when no slot near its home is free. */
mstar_status mstar__ipc_registry_publish(mstar__ipc_registry *r, uint64_t uuid,
                                         const mstar_cuda_ipc_ref *ref, uint32_t event);
/* Clear the stamp of `uuid` (if published): from now on no reader takes its bytes. Call before
 * its block can be reused. */
void mstar__ipc_registry_withdraw(mstar__ipc_registry *r, uint64_t uuid);

/* ---- the reader's side ---------------------------------------------------------------------- */

/* Another producer's registry, mapped read-only. Reference-counted: a read whose copies land on
 * another thread holds it until it has checked the stamps there. */
typedef struct mstar__ipc_peer_reg {
    _Atomic int refs;
    int32_t pid;
    char entity[MSTAR_NAME_MAX + 1];
    const uint8_t *map;
    size_t map_len;
    dev_t dev; /* the file mapped */
    ino_t ino;
} mstar__ipc_peer_reg;

/* Map the registry of `entity` as process `pid`: MSTAR_ENOENT if there is none (that entity
 * exported nothing as that pid), MSTAR_ECLOSED if no process holds it (its producer is gone),
 * MSTAR_EPROTO if it is not one a producer wrote. One reference, for the caller. */
mstar_status mstar__ipc_peer_reg_open(const mstar__shm_dir *dir, const char *entity, int32_t pid,
                                      mstar__ipc_peer_reg **out);
/* Whether the registry's name in `dir` still names the file `p` maps (a manager of the entity
 * restarted in the same process makes a new one under the same name). */
bool mstar__ipc_peer_reg_current(const mstar__shm_dir *dir, const mstar__ipc_peer_reg *p);
mstar__ipc_peer_reg *mstar__ipc_peer_reg_retain(mstar__ipc_peer_reg *p);
/* Drop a reference (any thread); the last one unmaps. NULL is a no-op. */
void mstar__ipc_peer_reg_release(mstar__ipc_peer_reg *p);
/* The entry that publishes `info` (its uuid, handle, segment and offset, and event handle: the
 * producer's word, the event handle all zero only where the entry has no event), in *slot:
 * MSTAR_ENOENT if none holds its uuid (never exported by this producer, or released since: the
 * block may hold another tensor), MSTAR_EPROTO if it disagrees with the descriptor. */
mstar_status mstar__ipc_peer_reg_find(const mstar__ipc_peer_reg *p, const mstar_tensor_info *info,
                                      uint32_t *slot);
/* Whether entry `slot` still holds `uuid` (once a copy has landed: the block held the tensor
 * throughout); MSTAR_ENOENT naming the tensor if not. Any thread. */
mstar_status mstar__ipc_peer_reg_check(const mstar__ipc_peer_reg *p, uint32_t slot, uint64_t uuid);

#endif
