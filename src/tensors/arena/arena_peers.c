/*
 * arena_peers.c — see arena_peers.h.
 */
#include "tensors/arena/arena_peers.h"

#include "core/assert.h"
#include "core/guard.h"
#include "core/vec.h"
#include "tensors/arena/arena.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void mstar__arena_peers_init(mstar__arena_peers *p, const mstar__shm_dir *dir,
                             const mstar__arena_peer_hooks *hooks)
{
    memset(p, 0, sizeof(*p));
    p->dir = dir;
    if (hooks != NULL)
        p->hooks = *hooks;
    mstar__strmap_init(&p->index);
    mstar__vec_init(&p->slots, sizeof(mstar__arena_peer));
}

static mstar__arena_peer *slot(const mstar__arena_peers *p, size_t i)
{
    return (mstar__arena_peer *)mstar__vec_at(&p->slots, i);
}

static void unmap(mstar__arena_peers *p, mstar__arena_peer *peer)
{
    /* Unpin before unmapping: the pinned range must still be mapped when it is released. */
    if (peer->pinned && p->hooks.unpin != NULL)
        p->hooks.unpin(p->hooks.ctx, peer->base, peer->size);
    if (peer->map_len > 0)
        munmap((void *)peer->base, (size_t)peer->map_len);
    memset(peer, 0, sizeof(*peer));
}

void mstar__arena_peers_free(mstar__arena_peers *p)
{
    for (size_t i = 0; i < p->slots.len; i++)
        if (slot(p, i)->name[0] != '\0')
            unmap(p, slot(p, i));
    mstar__strmap_free(&p->index);
    mstar__vec_free(&p->slots);
}

/* Whether a file of `len` bytes is laid out as the trailer's usable size says: the usable bytes
 * (whole slots), their stamps, the trailer. */
static bool layout_matches(const mstar__arena_trailer *t, uint64_t len)
{
    uint64_t with_stamps, total;
    return t->size > 0 && t->size % MSTAR__ARENA_ALIGN == 0 &&
           mstar__add_u64(t->size, mstar__arena_stamps_bytes(t->size), &with_stamps) &&
           mstar__add_u64(with_stamps, sizeof(*t), &total) && total == len;
}

/* What an arena that created `name` leaves in its file (arena.h): a trailer that matches the
 * name and the file's layout, and every byte allocated. A planted file fails one of these; a
 * sparse one would fault (SIGBUS) once its tmpfs could not back a hole. Returns the usable size. */
static mstar_status check_segment(const mstar__arena_peers *p, const char *name, int fd,
                                  const struct stat *sb, uint64_t *usable)
{
    const char *dir = p->dir->path;
    mstar__shm_segment_name parsed;
    mstar__arena_trailer t;
    uint64_t len = (uint64_t)sb->st_size;
    if (sb->st_size <= (off_t)sizeof(t))
        return mstar_error_set(MSTAR_EPROTO,
                               "arena segment %s/%s has %lld bytes, too few for a segment", dir,
                               name, (long long)sb->st_size);
    if ((uint64_t)sb->st_blocks * 512 < len)
        return mstar_error_set(MSTAR_EPROTO,
                               "arena segment %s/%s is sparse (%llu of %llu bytes allocated): "
                               "not a segment an arena created, refused",
                               dir, name, (unsigned long long)sb->st_blocks * 512,
                               (unsigned long long)len);
    if (pread(fd, &t, sizeof(t), (off_t)(len - sizeof(t))) != (ssize_t)sizeof(t))
        return mstar_error_set(MSTAR_EIO, "read the trailer of arena segment %s/%s: %s", dir, name,
                               strerror(errno));
    mstar_status st = mstar__shm_segment_parse(name, &parsed);
    if (st != MSTAR_OK)
        return st;
    if (memcmp(t.magic, MSTAR__ARENA_TRAILER_MAGIC, sizeof(t.magic)) != 0 ||
        !layout_matches(&t, len) || t.pid != parsed.pid || t.token != parsed.token ||
        t.index != parsed.index)
        return mstar_error_set(
            MSTAR_EPROTO,
            "arena segment %s/%s lacks the trailer its arena writes (or it names "
            "another segment, size or layout): refused",
            dir, name);
    *usable = t.size;
    return MSTAR_OK;
}

static mstar_status map_segment(mstar__arena_peers *p, const char *name, mstar__arena_peer *out)
{
    int fd;
    struct stat sb;
    mstar_status st = mstar__shm_open_read(p->dir, name, "arena segment", &fd, &sb);
    if (st == MSTAR_ENOENT)
        return mstar_error_set(MSTAR_ENOENT,
                               "arena segment %s/%s does not exist (its "
                               "producer is gone)",
                               p->dir->path, name);
    if (st != MSTAR_OK)
        return st;
    uint64_t usable = 0;
    st = check_segment(p, name, fd, &sb, &usable);
    if (st == MSTAR_OK) {
        /* MAP_POPULATE: mapped once, read many times; no first-read page faults. */
        void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (base == MAP_FAILED) {
            st = mstar_error_set(MSTAR_EIO, "mmap arena segment %s: %s", name, strerror(errno));
        } else {
            memset(out, 0, sizeof(*out));
            snprintf(out->name, sizeof(out->name), "%s", name);
            out->base = base;
            out->size = usable;
            out->stamps = (const _Atomic uint64_t *)(out->base + usable);
            out->map_len = (uint64_t)sb.st_size;
            out->dev = sb.st_dev;
            out->ino = sb.st_ino;
        }
    }
    close(fd);
    return st;
}

const mstar__arena_peer *mstar__arena_peers_find(const mstar__arena_peers *p, const char *name)
{
    uint64_t *hit = mstar__strmap_find(&p->index, name, strlen(name));
    return hit != NULL ? slot(p, (size_t)*hit) : NULL;
}

mstar_status mstar__arena_peers_get(mstar__arena_peers *p, const char *name,
                                    const mstar__arena_peer **out)
{
    *out = mstar__arena_peers_find(p, name);
    if (*out != NULL)
        return MSTAR_OK;
    size_t len = strlen(name);
    mstar__shm_segment_name parsed;
    mstar_status st = mstar__shm_segment_parse(name, &parsed);
    if (st != MSTAR_OK)
        return st;
    mstar__arena_peer fresh;
    if ((st = map_segment(p, name, &fresh)) != MSTAR_OK)
        return st;
    snprintf(fresh.owner, sizeof(fresh.owner), "%s", parsed.entity);
    size_t at = p->slots.len;
    for (size_t i = 0; i < p->slots.len; i++) {
        if (slot(p, i)->name[0] == '\0') {
            at = i;
            break;
        }
    }
    if (at == p->slots.len && (st = mstar__vec_grow(&p->slots, 1, NULL)) != MSTAR_OK) {
        munmap((void *)fresh.base, (size_t)fresh.map_len);
        return st;
    }
    if ((st = mstar__strmap_put(&p->index, name, len, at)) != MSTAR_OK) {
        munmap((void *)fresh.base, (size_t)fresh.map_len);
        return st;
    }
    if (p->hooks.pin != NULL)
        fresh.pinned = p->hooks.pin(p->hooks.ctx, fresh.base, fresh.size, true);
    *slot(p, at) = fresh;
    *out = slot(p, at);
    return MSTAR_OK;
}

/* ---- slot stamps ---------------------------------------------------------------------------- */

enum { SLOT_STEADY, SLOT_GONE_BEFORE, SLOT_GONE_DURING };

/* The reader's half of the stamp check, run under the guard (so no locks, no allocation). */
typedef struct live_read {
    const _Atomic uint64_t *stamp;
    uint64_t uuid;
    const uint8_t *src; /* NULL: check only, no copy */
    void *dst;
    size_t n;
    bool landed; /* a check only, after a copy made elsewhere */
    int outcome;
} live_read;

static void read_if_live(void *ctx)
{
    live_read *r = ctx;
    if (r->landed) {
        /* The copy was made by another engine and has landed; one load says whether the slot
         * held the tensor throughout (arena.h: a uuid is staged once). */
        uint64_t now = atomic_load_explicit(r->stamp, memory_order_acquire);
        r->outcome = now == r->uuid ? SLOT_STEADY : SLOT_GONE_DURING;
        return;
    }
    /* Acquire: the bytes published with the uuid are visible to the copy. */
    if (atomic_load_explicit(r->stamp, memory_order_acquire) != r->uuid) {
        r->outcome = SLOT_GONE_BEFORE;
        return;
    }
    if (r->src == NULL) {
        r->outcome = SLOT_STEADY;
        return;
    }
    memcpy(r->dst, r->src, r->n);
    /* The fence keeps the copy's loads before the second load of the stamp; paired with the
     * producer's fence after a slot is reserved (arena.c), a copy that saw any byte of the next
     * occupant sees the stamp cleared. */
    atomic_thread_fence(memory_order_acquire);
    uint64_t after = atomic_load_explicit(r->stamp, memory_order_relaxed);
    r->outcome = after == r->uuid ? SLOT_STEADY : SLOT_GONE_DURING;
}

static mstar_status run_live_read(const uint8_t *map, uint64_t map_len, const char *name,
                                  uint64_t slot, live_read *r)
{
    if (r->uuid == 0) /* never staged: a stamp of 0 marks a slot that is not live */
        r->outcome = SLOT_GONE_BEFORE;
    else {
        /* Named "arena segment" only on a fault: formatting the name every read cost the
         * consumer's 4 KiB handoff a few hundred instructions. */
        mstar_status st = mstar__guarded_run(map, (size_t)map_len, read_if_live, r, name);
        if (st != MSTAR_OK)
            return mstar_error_wrap("arena segment");
    }
    if (r->outcome == SLOT_GONE_BEFORE)
        return mstar_error_set(MSTAR_ENOENT,
                               "tensor 0x%016llx is no longer at offset %llu of arena segment %s: "
                               "its producer released the slot (it may hold another tensor now)",
                               (unsigned long long)r->uuid, (unsigned long long)slot, name);
    if (r->outcome == SLOT_GONE_DURING)
        return mstar_error_set(MSTAR_ENOENT,
                               "tensor 0x%016llx left offset %llu of arena segment %s while it was "
                               "being copied (its producer released the slot): the bytes may be "
                               "torn, the read is refused",
                               (unsigned long long)r->uuid, (unsigned long long)slot, name);
    return MSTAR_OK;
}

static const _Atomic uint64_t *stamp_of(const mstar__arena_peer *peer, uint64_t slot)
{
    MSTAR__ASSERT(slot % MSTAR__ARENA_ALIGN == 0 && slot < peer->size);
    return &peer->stamps[slot / MSTAR__ARENA_ALIGN];
}

mstar_status mstar__arena_peer_copy(const mstar__arena_peer *peer, uint64_t slot, uint64_t skip,
                                    uint64_t n, uint64_t uuid, void *dst)
{
    live_read r = { stamp_of(peer, slot), uuid, peer->base + slot + skip, dst, (size_t)n, false,
                    SLOT_STEADY };
    return run_live_read(peer->base, peer->map_len, peer->name, slot, &r);
}

void mstar__arena_peer_slot(const mstar__arena_peer *peer, uint64_t slot, uint64_t uuid,
                            mstar__arena_slot_ref *out)
{
    out->map = peer->base;
    out->map_len = peer->map_len;
    out->stamp = stamp_of(peer, slot);
    out->slot = slot;
    out->uuid = uuid;
    memcpy(out->name, peer->name, sizeof(out->name));
}

mstar_status mstar__arena_slot_check(const mstar__arena_slot_ref *ref, bool landed)
{
    live_read r = { ref->stamp, ref->uuid, NULL, NULL, 0, landed, SLOT_STEADY };
    return run_live_read(ref->map, ref->map_len, ref->name, ref->slot, &r);
}

int mstar__arena_peers_evict_dead(mstar__arena_peers *p)
{
    int evicted = 0;
    for (size_t i = 0; i < p->slots.len; i++) {
        mstar__arena_peer *peer = slot(p, i);
        if (peer->name[0] == '\0')
            continue;
        struct stat sb;
        bool alive = fstatat(p->dir->fd, peer->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                     sb.st_dev == peer->dev && sb.st_ino == peer->ino;
        if (alive)
            continue;
        mstar__strmap_remove(&p->index, peer->name, strlen(peer->name), NULL);
        mstar_log(MSTAR_LOG_DEBUG, "evicted the mapping of arena segment %s", peer->name);
        unmap(p, peer);
        evicted++;
    }
    return evicted;
}

size_t mstar__arena_peers_count(const mstar__arena_peers *p)
{
    return mstar__strmap_len(&p->index);
}
