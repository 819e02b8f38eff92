/*
 * arena_peers.c — see arena_peers.h.
 */
#include "tensors/arena_peers.h"

#include "tensors/arena.h"

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

/* What an arena that created `name` leaves in its file (arena.h): a trailer that matches the
 * name and the file's size, and every byte allocated. A planted file fails one of these; a
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
        t.size != len - sizeof(t) || t.pid != parsed.pid || t.token != parsed.token ||
        t.index != parsed.index)
        return mstar_error_set(MSTAR_EPROTO,
                               "arena segment %s/%s lacks the trailer its arena writes (or it "
                               "names another segment or size): refused",
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
            out->map_len = (uint64_t)sb.st_size;
            out->dev = sb.st_dev;
            out->ino = sb.st_ino;
        }
    }
    close(fd);
    return st;
}

mstar_status mstar__arena_peers_get(mstar__arena_peers *p, const char *name,
                                    const mstar__arena_peer **out)
{
    size_t len = strlen(name);
    uint64_t *hit = mstar__strmap_find(&p->index, name, len);
    if (hit != NULL) {
        *out = slot(p, (size_t)*hit);
        return MSTAR_OK;
    }
    mstar__arena_peer fresh;
    mstar_status st = map_segment(p, name, &fresh);
    if (st != MSTAR_OK)
        return st;
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
