/*
 * arena_peers.h — a consumer's mappings of other processes' arena segments (design.md
 * "Transports", read side).
 *
 * A segment is mapped read-only the first time a descriptor names it and kept, so a steady
 * stream of reads costs no syscalls. A producer's segments disappear when it exits (or is
 * swept), and a restarted producer uses new names, so mappings of segments whose file is gone
 * (or was replaced) are evicted — only when no copy from them can be pending, which the caller
 * guarantees. Pinning is delegated to hooks so the budget shared with the producer side stays
 * in one place. Not thread-safe.
 */
#ifndef MSTAR_TENSORS_ARENA_PEERS_H
#define MSTAR_TENSORS_ARENA_PEERS_H

#include "core/strmap.h"
#include "core/vec.h"
#include "tensors/shm.h"

#include <sys/types.h>

typedef struct mstar__arena_peer {
    char name[MSTAR_NAME_MAX + 1]; /* "" marks a free slot */
    const uint8_t *base;
    uint64_t size;    /* usable bytes (the trailer excluded) */
    uint64_t map_len; /* the whole file */
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
/* Unmap segments whose file is gone or was replaced. Returns how many were evicted. */
int mstar__arena_peers_evict_dead(mstar__arena_peers *p);
size_t mstar__arena_peers_count(const mstar__arena_peers *p);

#endif
