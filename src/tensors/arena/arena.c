/*
 * arena.c — see arena.h.
 */
#include "tensors/arena/arena.h"

#include "core/assert.h"
#include "core/owner.h"
#include "tensors/arena/arena_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef struct segment {
    char name[MSTAR_NAME_MAX + 1];
    uint8_t *base;
    uint64_t size;
    _Atomic uint64_t *stamps; /* base + size: one word per granule (arena.h) */
    mstar__arena_alloc alloc;
} segment;

struct mstar__arena {
    pthread_mutex_t lock;
    const mstar__shm_dir *dir;
    char base_name[MSTAR_NAME_MAX + 1];
    uint64_t segment_size;
    uint32_t max_segments;
    uint32_t nsegs;
    pid_t pid; /* the name's pid and token */
    uint32_t token;
    mstar__owner owner; /* only the creator unlinks the segments (a forked child unmaps them) */
    segment *segs;      /* max_segments entries, allocated once so they never move */
};

/* ---- exit-time unlinker ------------------------------------------------------------------- */

typedef struct exit_entry {
    char *path;
    pid_t owner;
} exit_entry;

static pthread_mutex_t exit_lock = PTHREAD_MUTEX_INITIALIZER;
static exit_entry *exit_entries;
static size_t exit_len, exit_cap;
static bool exit_registered;

static void unlink_at_exit(void)
{
    pthread_mutex_lock(&exit_lock);
    pid_t me = getpid();
    for (size_t i = 0; i < exit_len; i++) {
        if (exit_entries[i].owner == me)
            unlink(exit_entries[i].path);
        free(exit_entries[i].path);
    }
    free(exit_entries);
    exit_entries = NULL;
    exit_len = exit_cap = 0;
    pthread_mutex_unlock(&exit_lock);
}

static void exit_track(const char *dir, const char *name)
{
    char path[MSTAR__SHM_PATH_MAX + MSTAR_NAME_MAX + 2];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    pthread_mutex_lock(&exit_lock);
    if (!exit_registered)
        exit_registered = atexit(unlink_at_exit) == 0;
    if (exit_len == exit_cap) {
        size_t ncap = exit_cap ? exit_cap * 2 : 16;
        exit_entry *n = realloc(exit_entries, ncap * sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&exit_lock);
            return; /* the segment is still unlinked by destroy; only the exit path loses it */
        }
        exit_entries = n;
        exit_cap = ncap;
    }
    char *copy = strdup(path);
    if (copy != NULL)
        exit_entries[exit_len++] = (exit_entry){ copy, getpid() };
    pthread_mutex_unlock(&exit_lock);
}

static void exit_untrack(const char *dir, const char *name)
{
    char path[MSTAR__SHM_PATH_MAX + MSTAR_NAME_MAX + 2];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    pthread_mutex_lock(&exit_lock);
    for (size_t i = 0; i < exit_len; i++) {
        if (strcmp(exit_entries[i].path, path) == 0) {
            free(exit_entries[i].path);
            exit_entries[i] = exit_entries[--exit_len];
            break;
        }
    }
    pthread_mutex_unlock(&exit_lock);
}

/* ---- segments ----------------------------------------------------------------------------- */

/* Usable bytes, stamps and trailer. */
static uint64_t file_len(uint64_t size)
{
    return size + mstar__arena_stamps_bytes(size) + sizeof(mstar__arena_trailer);
}

/* The trailer after the stamps; the name's pid and token are in base_name. */
static void write_trailer(const mstar__arena *a, uint8_t *base, uint64_t size, uint32_t index)
{
    mstar__arena_trailer t;
    memset(&t, 0, sizeof(t));
    memcpy(t.magic, MSTAR__ARENA_TRAILER_MAGIC, sizeof(t.magic));
    t.size = size;
    t.pid = a->pid;
    t.token = a->token;
    t.index = index;
    memcpy(base + size + mstar__arena_stamps_bytes(size), &t, sizeof(t));
}

static mstar_status segment_create(mstar__arena *a, uint32_t index, uint64_t size)
{
    segment *s = &a->segs[index];
    int n = snprintf(s->name, sizeof(s->name), "%s.seg%u", a->base_name, index);
    if (n < 0 || n > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL, "arena segment name for '%s' is too long",
                               a->base_name);
    int fd = openat(a->dir->fd, s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return mstar_error_set(errno == EEXIST ? MSTAR_EEXIST : MSTAR_EIO,
                               "create arena segment %s/%s: %s", a->dir->path, s->name,
                               strerror(errno));
    /* A shared lock the mapping keeps until it is unmapped or the process dies: how the orphan
     * sweep tells a live segment from a dead one when the pid cannot say (T-14). Best effort:
     * without it the sweep has only the pid to go by. */
    (void)flock(fd, LOCK_SH | LOCK_NB);
    mstar_status st = MSTAR_OK;
    uint64_t len = file_len(size);
    /* Committed pages read as zeros: every stamp starts clear. */
    int rc = posix_fallocate(fd, 0, (off_t)len);
    if (rc != 0) {
        st = mstar_error_set(rc == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO,
                             "arena segment %s/%s: cannot commit %llu bytes: %s", a->dir->path,
                             s->name, (unsigned long long)size, strerror(rc));
    } else {
        /* MAP_POPULATE: the committed pages are mapped now, not faulted in by the first copies. */
        void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) {
            st = mstar_error_set(MSTAR_EIO, "mmap arena segment %s: %s", s->name, strerror(errno));
        } else {
            s->base = p;
            s->stamps = (_Atomic uint64_t *)(s->base + size);
            write_trailer(a, s->base, size, index);
        }
    }
    close(fd);
    if (st == MSTAR_OK) {
        st = mstar__arena_alloc_init(&s->alloc, size);
        if (st != MSTAR_OK)
            munmap(s->base, (size_t)len);
    }
    if (st != MSTAR_OK) {
        unlinkat(a->dir->fd, s->name, 0);
        memset(s, 0, sizeof(*s));
        return st;
    }
    s->size = size;
    exit_track(a->dir->path, s->name);
    a->nsegs = index + 1;
    return MSTAR_OK;
}

static void check_capacity(const mstar__arena *a, bool *fits)
{
    struct statvfs vfs;
    *fits = true;
    if (fstatvfs(a->dir->fd, &vfs) != 0)
        return;
    long double want = (long double)file_len(a->segment_size) * a->max_segments;
    long double total = (long double)vfs.f_blocks * vfs.f_frsize;
    long double avail = (long double)vfs.f_bavail * vfs.f_frsize;
    if (want > total) {
        *fits = false;
        return;
    }
    if (want > avail)
        mstar_log(MSTAR_LOG_WARN,
                  "shm arena: %u segments of %llu MiB may need more than the "
                  "%.0Lf MiB free in %s",
                  a->max_segments, (unsigned long long)(a->segment_size >> 20), avail / (1 << 20),
                  a->dir->path);
}

mstar_status mstar__arena_create(const mstar__shm_dir *dir, const char *entity,
                                 uint64_t segment_size, uint32_t max_segments, mstar__arena **out)
{
    uint64_t aligned;
    if (segment_size == 0 || max_segments == 0 || !mstar__arena_aligned(segment_size, &aligned) ||
        aligned != segment_size)
        return mstar_error_set(MSTAR_EINVAL,
                               "arena: segment_size %llu must be a positive "
                               "multiple of %d and max_segments (%u) positive",
                               (unsigned long long)segment_size, MSTAR__ARENA_ALIGN, max_segments);
    mstar_status st = mstar_name_validate(entity, strlen(entity), "entity");
    if (st != MSTAR_OK)
        return st;
    mstar__arena *a = calloc(1, sizeof(*a));
    segment *segs = calloc(max_segments, sizeof(*segs));
    if (a == NULL || segs == NULL) {
        free(a);
        free(segs);
        return mstar_error_set(MSTAR_ENOMEM, "arena of %u segments", max_segments);
    }
    a->dir = dir;
    a->segs = segs;
    a->segment_size = segment_size;
    a->max_segments = max_segments;
    mstar__owner_init(&a->owner);
    pthread_mutex_init(&a->lock, NULL);
    bool fits;
    check_capacity(a, &fits);
    if (!fits) {
        st = mstar_error_set(MSTAR_ENOSPC,
                             "shm arena: %u segments of %llu MiB exceed the size "
                             "of %s (lower MSTAR_SHM_ARENA_SEGMENT_MB or ..._MAX_SEGMENTS)",
                             max_segments, (unsigned long long)(segment_size >> 20), dir->path);
        goto fail;
    }
    /* A random token makes the name instance-unique; on the unlikely collision draw again. */
    for (int attempt = 0; attempt < 8; attempt++) {
        uint32_t token;
        if (getrandom(&token, sizeof(token), 0) != sizeof(token))
            token = (uint32_t)mstar__now_ns() ^ ((uint32_t)getpid() << 16);
        a->pid = getpid();
        a->token = token;
        int n = snprintf(a->base_name, sizeof(a->base_name), MSTAR__SHM_ARENA_PREFIX "%s_%d_%08x",
                         entity, (int)a->pid, token);
        if (n < 0 || n + 14 > MSTAR_NAME_MAX) { /* room for ".seg<N>" */
            st = mstar_error_set(MSTAR_EINVAL, "entity '%s' is too long for arena segment names",
                                 entity);
            goto fail;
        }
        st = segment_create(a, 0, segment_size);
        if (st != MSTAR_EEXIST)
            break;
    }
    if (st != MSTAR_OK)
        goto fail;
    *out = a;
    return MSTAR_OK;
fail:
    pthread_mutex_destroy(&a->lock);
    free(a->segs);
    free(a);
    return st;
}

void mstar__arena_destroy(mstar__arena *a)
{
    if (a == NULL)
        return;
    bool creator = mstar__owner_here(&a->owner);
    for (uint32_t i = 0; i < a->nsegs; i++) {
        segment *s = &a->segs[i];
        munmap(s->base, (size_t)file_len(s->size));
        if (creator && unlinkat(a->dir->fd, s->name, 0) != 0 && errno != ENOENT)
            mstar_log(MSTAR_LOG_WARN, "unlink arena segment %s: %s", s->name, strerror(errno));
        exit_untrack(a->dir->path, s->name);
        mstar__arena_alloc_free(&s->alloc);
    }
    pthread_mutex_destroy(&a->lock);
    free(a->segs);
    free(a);
}

mstar_status mstar__arena_reserve(mstar__arena *a, uint64_t n, uint32_t *seg, uint64_t *off)
{
    uint64_t need;
    if (!mstar__arena_aligned(n, &need))
        return mstar_error_set(MSTAR_ERANGE, "arena: %llu bytes", (unsigned long long)n);
    pthread_mutex_lock(&a->lock);
    mstar_status st = MSTAR_ENOSPC;
    for (uint32_t i = 0; i < a->nsegs && st == MSTAR_ENOSPC; i++) {
        st = mstar__arena_alloc_reserve(&a->segs[i].alloc, n, off);
        if (st == MSTAR_OK)
            *seg = i;
    }
    bool at_cap = a->nsegs >= a->max_segments;
    if (st == MSTAR_ENOSPC && !at_cap) {
        /* A failure to create the segment (a full tmpfs) keeps its own message. */
        uint32_t i = a->nsegs;
        st = segment_create(a, i, need > a->segment_size ? need : a->segment_size);
        if (st == MSTAR_OK)
            st = mstar__arena_alloc_reserve(&a->segs[i].alloc, n, off);
        if (st == MSTAR_OK)
            *seg = i;
    }
    /* The slot's last occupant cleared its stamp in release (under this lock); the fence orders
     * that clearing before the caller's writes into the slot, so a reader whose copy sees any of
     * them then sees the stamp changed (the writer's half of the check in arena_peers.c). */
    if (st == MSTAR_OK)
        atomic_thread_fence(memory_order_release);
    if (st == MSTAR_ENOSPC && at_cap) {
        uint64_t free_b = 0, total = 0;
        for (uint32_t i = 0; i < a->nsegs; i++) {
            free_b += a->segs[i].alloc.bytes_free;
            total += a->segs[i].size;
        }
        st = mstar_error_set(MSTAR_ENOSPC,
                             "shm arena full: need %llu bytes, %llu free of %llu "
                             "in %u segments (the cap)",
                             (unsigned long long)need, (unsigned long long)free_b,
                             (unsigned long long)total, a->nsegs);
    }
    pthread_mutex_unlock(&a->lock);
    return st;
}

void mstar__arena_publish(mstar__arena *a, uint32_t seg, uint64_t off, uint64_t uuid)
{
    MSTAR__ASSERT(uuid != 0 && off % MSTAR__ARENA_ALIGN == 0); /* I-26: a stamp is never 0 */
    pthread_mutex_lock(&a->lock);
    /* Release: a reader that sees the uuid sees the bytes written before it. */
    atomic_store_explicit(&a->segs[seg].stamps[off / MSTAR__ARENA_ALIGN], uuid,
                          memory_order_release);
    pthread_mutex_unlock(&a->lock);
}

void mstar__arena_unpublish(mstar__arena *a, uint32_t seg, uint64_t off)
{
    pthread_mutex_lock(&a->lock);
    atomic_store_explicit(&a->segs[seg].stamps[off / MSTAR__ARENA_ALIGN], 0, memory_order_relaxed);
    pthread_mutex_unlock(&a->lock);
}

bool mstar__arena_release(mstar__arena *a, uint32_t seg, uint64_t off)
{
    pthread_mutex_lock(&a->lock);
    bool ok = seg < a->nsegs && mstar__arena_alloc_release(&a->segs[seg].alloc, off);
    /* Cleared before the slot can be reserved again (this lock); reserve orders it before the
     * next occupant's bytes. */
    if (ok)
        atomic_store_explicit(&a->segs[seg].stamps[off / MSTAR__ARENA_ALIGN], 0,
                              memory_order_relaxed);
    pthread_mutex_unlock(&a->lock);
    return ok;
}

void *mstar__arena_ptr(mstar__arena *a, uint32_t seg, uint64_t off)
{
    pthread_mutex_lock(&a->lock);
    void *p = a->segs[seg].base + off;
    pthread_mutex_unlock(&a->lock);
    return p;
}

void mstar__arena_segment_name(mstar__arena *a, uint32_t seg, char name[MSTAR_NAME_MAX + 1])
{
    pthread_mutex_lock(&a->lock);
    memcpy(name, a->segs[seg].name, MSTAR_NAME_MAX + 1);
    pthread_mutex_unlock(&a->lock);
}

uint32_t mstar__arena_num_segments(mstar__arena *a)
{
    pthread_mutex_lock(&a->lock);
    uint32_t n = a->nsegs;
    pthread_mutex_unlock(&a->lock);
    return n;
}

void mstar__arena_segment_span(mstar__arena *a, uint32_t seg, void **base, uint64_t *len)
{
    pthread_mutex_lock(&a->lock);
    *base = a->segs[seg].base;
    *len = a->segs[seg].size;
    pthread_mutex_unlock(&a->lock);
}

const char *mstar__arena_base_name(const mstar__arena *a)
{
    return a->base_name;
}

void mstar__arena_stats_get(mstar__arena *a, mstar__arena_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&a->lock);
    out->segments = a->nsegs;
    for (uint32_t i = 0; i < a->nsegs; i++) {
        const segment *s = &a->segs[i];
        out->total_bytes += s->size;
        out->free_bytes += s->alloc.bytes_free;
        uint64_t largest = mstar__arena_alloc_largest_free(&s->alloc);
        if (largest > out->largest_free_block)
            out->largest_free_block = largest;
        out->live_slots += mstar__arena_alloc_live(&s->alloc);
    }
    pthread_mutex_unlock(&a->lock);
}
