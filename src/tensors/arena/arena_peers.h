/*
 * arena_peers.h — a consumer's mappings of other processes' arena segments (design.md
 * "Transports", read side).
 *
 * A segment is mapped read-only the first time a descriptor names it and kept, so a steady
 * stream of reads costs no syscalls. A producer's segments disappear when it exits (or is
 * swept), and a restarted producer uses new names, so mappings of segments whose file is gone
 * (or was replaced) are evicted — only when no copy from them can be pending, which the caller
 * guarantees. Pinning is delegated to hooks so the budget shared with the producer side stays
 * in one place.
 *
 * Every read of a slot goes through its stamp (arena.h): the slot must hold the descriptor's
 * uuid before the copy and still after it, or the read fails with MSTAR_ENOENT. The check is a
 * load before and a load after (behind an acquire fence), under the SIGBUS guard like the copy,
 * with no retry: whatever another process writes into the segment, a read ends, and at worst it
 * fails. Not thread-safe, except the slot references, which may be checked on any thread.
 */
#ifndef MSTAR_TENSORS_ARENA_PEERS_H
#define MSTAR_TENSORS_ARENA_PEERS_H

#include "core/strmap.h"
#include "core/vec.h"
#include "tensors/shm.h"

#include <stdatomic.h>
#include <sys/types.h>

typedef struct mstar__arena_peer {
    char name[MSTAR_NAME_MAX + 1];  /* "" marks a free slot */
    char owner[MSTAR_NAME_MAX + 1]; /* the entity the name says made the segment */
    const uint8_t *base;
    uint64_t size;                  /* usable bytes (stamps and trailer excluded) */
    uint64_t map_len;               /* the whole file */
    const _Atomic uint64_t *stamps; /* base + size */
    dev_t dev;
    ino_t ino;
    bool pinned;
} mstar__arena_peer;

typedef struct mstar__arena_peer_hooks {
    /* Try to pin a new mapping; true if pinned (then unpin runs before it is unmapped). */
    bool (*pin)(void *ctx, const void *base, uint64_t len, bool read_only);
    void (*unpin)(void *ctx, const void *base, uint64_t len);
    void *ctx;
} mstar__arena_peer_hooks;

typedef struct mstar__arena_peers {
    const mstar__shm_dir *dir;
    mstar__arena_peer_hooks hooks;
    mstar__strmap index; /* name → slot */
    mstar__vec slots;    /* mstar__arena_peer */
} mstar__arena_peers;

void mstar__arena_peers_init(mstar__arena_peers *p, const mstar__shm_dir *dir,
                             const mstar__arena_peer_hooks *hooks);
/* Unpin and unmap everything. */
void mstar__arena_peers_free(mstar__arena_peers *p);

/* The mapping of segment `name` (already checked by the caller), mapping it on first use, once
 * the file is known to be a segment an arena wrote (a regular file of ours, fully allocated,
 * with a trailer that matches its name and size: MSTAR_EPROTO otherwise). MSTAR_ENOENT when the
 * segment does not exist (its producer freed it or is gone). The pointer
 * is valid until the next evict or free. */
mstar_status mstar__arena_peers_get(mstar__arena_peers *p, const char *name,
                                    const mstar__arena_peer **out);
/* The mapping of segment `name` if it is mapped already, else NULL (nothing is mapped). Valid
 * until the next evict or free. */
const mstar__arena_peer *mstar__arena_peers_find(const mstar__arena_peers *p, const char *name);
/* Copy n bytes at `skip` into the slot that starts at `slot` (a multiple of MSTAR__ARENA_ALIGN;
 * the caller checked the range against the usable size) into host memory `dst`, if the slot
 * holds tensor `uuid` before the copy and after it. MSTAR_ENOENT naming the tensor and segment
 * when it did not (freed before the copy, or during it: the bytes may be torn), MSTAR_EIO when
 * the file faulted (truncated). */
mstar_status mstar__arena_peer_copy(const mstar__arena_peer *peer, uint64_t slot, uint64_t skip,
                                    uint64_t n, uint64_t uuid, void *dst);

/* One slot's stamp, for a copy that another engine makes (a device's host-to-device copy): the
 * reader checks it before it queues the copy and again once the copy landed, on whatever thread
 * learns that. It holds no pointer into the peer table, so it stays valid as long as the
 * mapping does (which the caller keeps until no copy is pending, as for the copy itself). */
typedef struct mstar__arena_slot_ref {
    const uint8_t *map; /* the whole mapping: the guarded range */
    uint64_t map_len;
    const _Atomic uint64_t *stamp;
    uint64_t slot;
    uint64_t uuid;
    char name[MSTAR_NAME_MAX + 1];
} mstar__arena_slot_ref;

void mstar__arena_peer_slot(const mstar__arena_peer *peer, uint64_t slot, uint64_t uuid,
                            mstar__arena_slot_ref *out);
/* Whether the slot holds its uuid now: before the copy (`landed` false) or after it landed.
 * The errors of mstar__arena_peer_copy. */
mstar_status mstar__arena_slot_check(const mstar__arena_slot_ref *ref, bool landed);

/* Unmap segments whose file is gone or was replaced. Returns how many were evicted. */
int mstar__arena_peers_evict_dead(mstar__arena_peers *p);
size_t mstar__arena_peers_count(const mstar__arena_peers *p);

#endif
