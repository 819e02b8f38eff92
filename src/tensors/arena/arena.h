/*
 * arena.h — the producer's shared-memory arena: named segments in the shm directory, each with a
 * first-fit allocator (design.md "Transports").
 *
 * Segment names are instance-unique, "mstar_arena_<entity>_<pid>_<8 hex>.seg<N>", so a second
 * server on the same host can never truncate or reuse a live one's segments (T-14). Segment 0
 * is created eagerly; a reserve that fits nowhere creates the next segment, up to max_segments;
 * a request larger than the segment size gets a dedicated segment of its own size, which later
 * requests may reuse. Segments never move, shrink or disappear before the arena is destroyed,
 * so a (segment, offset) pair stays valid for the life of the arena. Space is committed with
 * posix_fallocate when a segment is created, so a full tmpfs is an error at creation and never
 * a SIGBUS while copying.
 *
 * A segment file is the usable bytes, then the slot stamps, then a trailer the creator writes
 * before anyone can learn the name (mstar__arena_trailer): the usable size and the name's pid,
 * token and index. A consumer checks the trailer, and that the file is fully allocated, before
 * it maps a file found under a segment name, so a planted file (a sparse one that would fault
 * while copied) is refused.
 *
 * The stamps say which slots are live, for readers in other processes: one 64-bit word per
 * 256-byte granule of the usable bytes, the word of a slot's first granule holding the uuid of
 * the tensor in it, 0 otherwise (every other word stays 0). The producer publishes the uuid once
 * the slot's bytes are in place and clears it when the slot is released, before the slot can be
 * reserved again; a reader compares the word with its descriptor's uuid before and after its
 * copy (arena_peers.h), so a read of a freed slot, or of one freed while it was being copied,
 * fails instead of returning whatever took its place. Uuids are never 0 (their counter starts at
 * 1) and a producer stages a uuid at most once, so a word that matches before and after the
 * copy proves the slot held that tensor throughout.
 *
 * Every segment path is also registered with an exit-time unlinker, so a process that exits
 * without destroying its arena (a worker leaving through exit()) still removes its segments;
 * a forked child never unlinks its parent's segments.
 *
 * Thread-safe: reserve, release, stats and lookups take the arena's lock.
 */
#ifndef MSTAR_TENSORS_ARENA_H
#define MSTAR_TENSORS_ARENA_H

#include "tensors/arena/arena_alloc.h"
#include "tensors/shm.h"

typedef struct mstar__arena mstar__arena;

/* SG2: the stamps between the usable bytes and the trailer. */
#define MSTAR__ARENA_TRAILER_MAGIC "mstarSG2"

/* The bytes of the stamps of a segment of `size` usable bytes (a multiple of MSTAR__ARENA_ALIGN),
 * which follow them in its file. */
static inline uint64_t mstar__arena_stamps_bytes(uint64_t size)
{
    return size / MSTAR__ARENA_ALIGN * sizeof(uint64_t);
}

/* The last bytes of a segment file, after the `size` usable ones and their stamps. */
typedef struct mstar__arena_trailer {
    char magic[8]; /* MSTAR__ARENA_TRAILER_MAGIC, no NUL */
    uint64_t size; /* usable bytes, before the trailer */
    int64_t pid;   /* the name's fields */
    uint32_t token;
    uint32_t index;
    uint64_t reserved[4]; /* zero */
} mstar__arena_trailer;

typedef struct mstar__arena_stats {
    uint32_t segments;
    uint64_t total_bytes;
    uint64_t free_bytes;
    uint64_t largest_free_block;
    uint64_t live_slots;
} mstar__arena_stats;

/* Check the tmpfs can hold segment_size × max_segments (error if its total size cannot, warning
 * if its free space cannot), then create segment 0. */
mstar_status mstar__arena_create(const mstar__shm_dir *dir, const char *entity,
                                 uint64_t segment_size, uint32_t max_segments, mstar__arena **out);
/* Unmap every segment, and unlink them in the process that created the arena only: in a forked
 * child they are still the parent's (core/owner.h). */
void mstar__arena_destroy(mstar__arena *arena);

/* Reserve n bytes (a zero-byte request takes one 256-byte slot). MSTAR_ENOSPC with a message
 * giving the need, the free and the total bytes when it fits nowhere and no segment can be
 * added. The slot's stamp is clear, and its clearing is ordered before whatever the caller
 * writes into the slot. */
mstar_status mstar__arena_reserve(mstar__arena *arena, uint64_t n, uint32_t *seg, uint64_t *off);
/* Stamp the reserved slot (seg, off) with `uuid` (never 0): call once its bytes are in place,
 * before anyone can learn the placement. */
void mstar__arena_publish(mstar__arena *arena, uint32_t seg, uint64_t off, uint64_t uuid);
/* Clear the slot's stamp and keep the slot reserved: its tensor is no longer readable by peers,
 * but its bytes still belong to whoever reserved it (a producer's loan). */
void mstar__arena_unpublish(mstar__arena *arena, uint32_t seg, uint64_t off);
/* Clear the slot's stamp and free it. False if (seg, off) is not a live slot. */
bool mstar__arena_release(mstar__arena *arena, uint32_t seg, uint64_t off);

/* The mapping of a live slot. */
void *mstar__arena_ptr(mstar__arena *arena, uint32_t seg, uint64_t off);
/* Copy segment `seg`'s name into `name`. */
void mstar__arena_segment_name(mstar__arena *arena, uint32_t seg, char name[MSTAR_NAME_MAX + 1]);
uint32_t mstar__arena_num_segments(mstar__arena *arena);
/* The whole mapping of segment `seg` (the pinning hook). */
void mstar__arena_segment_span(mstar__arena *arena, uint32_t seg, void **base, uint64_t *len);
/* "mstar_arena_<entity>_<pid>_<8 hex>" (segment names append ".seg<N>"). */
const char *mstar__arena_base_name(const mstar__arena *arena);

void mstar__arena_stats_get(mstar__arena *arena, mstar__arena_stats *out);

#endif
