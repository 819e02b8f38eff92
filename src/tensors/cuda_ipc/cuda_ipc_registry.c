/*
 * cuda_ipc_registry.c — see cuda_ipc_registry.h.
 */
#include "tensors/cuda_ipc/cuda_ipc_registry.h"

#include "core/guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

/* The entries start a page in, after the header. */
#define ENTRIES_AT 4096
_Static_assert(sizeof(mstar__ipc_reg_header) <= ENTRIES_AT, "the header fits its page");

static const uint64_t file_len = ENTRIES_AT + MSTAR__IPC_REG_SLOTS * sizeof(mstar__ipc_reg_entry);

static mstar_status reg_name(const char *entity, int32_t pid, char name[MSTAR_NAME_MAX + 1])
{
    int n = snprintf(name, MSTAR_NAME_MAX + 1, MSTAR__IPC_REG_PREFIX "%s_%d", entity, (int)pid);
    if (n < 0 || n > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL, "the CUDA IPC registry name for '%s' is too long",
                               entity);
    return MSTAR_OK;
}

static const mstar__ipc_reg_entry *entry_at(const uint8_t *map, uint32_t slot)
{
    return (const mstar__ipc_reg_entry *)(map + ENTRIES_AT) + slot;
}

/* ---- the producer's side -------------------------------------------------------------------- */

struct mstar__ipc_registry {
    const mstar__shm_dir *dir;
    char name[MSTAR_NAME_MAX + 1];
    int fd; /* holds the exclusive lock: how readers tell a live registry from a stale one */
    pid_t creator;
    uint8_t *map;
};

static mstar__ipc_reg_entry *entry_mut(mstar__ipc_registry *r, uint32_t slot)
{
    return (mstar__ipc_reg_entry *)(r->map + ENTRIES_AT) + slot;
}

/* Whether no process holds the registry `name` (its producer died without removing it). */
static bool stale(const mstar__shm_dir *dir, const char *name)
{
    int fd = openat(dir->fd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT; /* gone already */
    bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return free;
}

/* Remove the registries earlier processes of `entity` left behind (killed before their
 * teardown): "mstar_cudaipc_<entity>_<pid>" owned by this user whose pid is gone and that no
 * process holds (the pid check keeps one being created right now, not yet locked). */
static void sweep_stale(const mstar__shm_dir *dir, const char *entity)
{
    char prefix[MSTAR_NAME_MAX + 2];
    snprintf(prefix, sizeof(prefix), MSTAR__IPC_REG_PREFIX "%s_", entity);
    size_t plen = strlen(prefix);
    int fd = openat(dir->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        const char *rest = de->d_name + plen;
        struct stat sb;
        if (strncmp(de->d_name, prefix, plen) != 0 || *rest == '\0' ||
            strspn(rest, "0123456789") != strlen(rest) || strlen(rest) > 9 ||
            kill((pid_t)strtol(rest, NULL, 10), 0) == 0 || errno != ESRCH ||
            fstatat(dir->fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode) ||
            sb.st_uid != geteuid() || !stale(dir, de->d_name))
            continue;
        unlinkat(dir->fd, de->d_name, 0);
    }
    closedir(d);
}

/* Create the file exclusively and lock it; a stale file of a dead process with our pid (nobody
 * holds its lock) is removed and made again. */
static mstar_status create_locked(mstar__ipc_registry *r)
{
    for (int tries = 0; tries < 2; tries++) {
        int fd =
            openat(r->dir->fd, r->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) {
            if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
                close(fd);
                unlinkat(r->dir->fd, r->name, 0);
                return mstar_error_set(MSTAR_EIO, "lock CUDA IPC registry %s/%s: %s", r->dir->path,
                                       r->name, strerror(errno));
            }
            r->fd = fd;
            return MSTAR_OK;
        }
        if (errno != EEXIST)
            return mstar_error_set(errno == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO,
                                   "create CUDA IPC registry %s/%s: %s", r->dir->path, r->name,
                                   strerror(errno));
        if (!stale(r->dir, r->name))
            return mstar_error_set(MSTAR_EEXIST,
                                   "CUDA IPC registry %s/%s is held by another manager of this "
                                   "entity in this process",
                                   r->dir->path, r->name);
        unlinkat(r->dir->fd, r->name, 0);
    }
    return mstar_error_set(MSTAR_EEXIST, "CUDA IPC registry %s/%s keeps coming back", r->dir->path,
                           r->name);
}

mstar_status mstar__ipc_registry_create(const mstar__shm_dir *dir, const char *entity,
                                        mstar__ipc_registry **out)
{
    mstar__ipc_registry *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "CUDA IPC registry: out of memory");
    r->dir = dir;
    r->creator = getpid();
    mstar_status st = reg_name(entity, (int32_t)r->creator, r->name);
    if (st == MSTAR_OK) {
        sweep_stale(dir, entity);
        st = create_locked(r);
    }
    if (st != MSTAR_OK) {
        free(r);
        return st;
    }
    /* Committed pages read as zeros: every entry starts free. */
    int rc = posix_fallocate(r->fd, 0, (off_t)file_len);
    if (rc != 0) {
        st = mstar_error_set(rc == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO,
                             "CUDA IPC registry %s/%s: cannot commit %llu bytes: %s", dir->path,
                             r->name, (unsigned long long)file_len, strerror(rc));
    } else {
        void *p = mmap(NULL, (size_t)file_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
        if (p == MAP_FAILED)
            st = mstar_error_set(MSTAR_EIO, "mmap CUDA IPC registry %s: %s", r->name,
                                 strerror(errno));
        else
            r->map = p;
    }
    if (st != MSTAR_OK) {
        unlinkat(dir->fd, r->name, 0);
        close(r->fd);
        free(r);
        return st;
    }
    mstar__ipc_reg_header *h = (mstar__ipc_reg_header *)r->map;
    memcpy(h->magic, MSTAR__IPC_REG_MAGIC, sizeof(h->magic));
    h->pid = r->creator;
    h->slots = MSTAR__IPC_REG_SLOTS;
    h->events = MSTAR__IPC_REG_EVENTS;
    snprintf(h->entity, sizeof(h->entity), "%s", entity);
    *out = r;
    return MSTAR_OK;
}

void mstar__ipc_registry_destroy(mstar__ipc_registry *r)
{
    if (r == NULL)
        return;
    munmap(r->map, (size_t)file_len);
    /* A forked child leaves its parent's registry alone. */
    if (getpid() == r->creator)
        unlinkat(r->dir->fd, r->name, 0);
    close(r->fd);
    free(r);
}

void mstar__ipc_registry_set_event(mstar__ipc_registry *r, uint32_t k, const uint8_t *handle)
{
    mstar__ipc_reg_header *h = (mstar__ipc_reg_header *)r->map;
    memcpy(h->event_handles[k], handle, MSTAR_IPC_HANDLE_BYTES);
}

mstar_status mstar__ipc_registry_publish(mstar__ipc_registry *r, uint64_t uuid,
                                         const mstar_cuda_ipc_ref *ref, uint32_t event)
{
    mstar__ipc_registry_withdraw(r, uuid); /* staged again: one entry per uuid */
    for (uint32_t i = 0; i < MSTAR__IPC_REG_PROBES; i++) {
        mstar__ipc_reg_entry *e = entry_mut(r, (uint32_t)((uuid + i) % MSTAR__IPC_REG_SLOTS));
        if (atomic_load_explicit(&e->uuid, memory_order_relaxed) != 0)
            continue;
        e->segment_size = ref->segment_size;
        e->segment_offset = ref->segment_offset;
        e->event = event;
        memcpy(e->mem_handle, ref->mem_handle, sizeof(e->mem_handle));
        /* Release: a reader that sees the uuid sees the fields. */
        atomic_store_explicit(&e->uuid, uuid, memory_order_release);
        return MSTAR_OK;
    }
    return mstar_error_set(MSTAR_ENOSPC,
                           "tensor %llu: no free entry in CUDA IPC registry %s near its slot",
                           (unsigned long long)uuid, r->name);
}

void mstar__ipc_registry_withdraw(mstar__ipc_registry *r, uint64_t uuid)
{
    for (uint32_t i = 0; i < MSTAR__IPC_REG_PROBES; i++) {
        mstar__ipc_reg_entry *e = entry_mut(r, (uint32_t)((uuid + i) % MSTAR__IPC_REG_SLOTS));
        if (atomic_load_explicit(&e->uuid, memory_order_relaxed) != uuid)
            continue;
        atomic_store_explicit(&e->uuid, 0, memory_order_relaxed);
        /* The clear comes before whatever is written into the block next (its next occupant's
         * bytes): a reader whose copy saw those bytes sees the stamp cleared. */
        atomic_thread_fence(memory_order_seq_cst);
        return;
    }
}

/* ---- the reader's side ---------------------------------------------------------------------- */

/* A registry as its producer leaves it: laid out as this build's, not sparse, its header naming
 * what its name does. */
static mstar_status check_file(const mstar__shm_dir *dir, const char *name, const char *entity,
                               int32_t pid, int fd, const struct stat *sb)
{
    if ((uint64_t)sb->st_size != file_len || (uint64_t)sb->st_blocks * 512 < file_len)
        return mstar_error_set(MSTAR_EPROTO,
                               "CUDA IPC registry %s/%s has %lld bytes (%llu allocated), not the "
                               "%llu a producer writes: refused",
                               dir->path, name, (long long)sb->st_size,
                               (unsigned long long)sb->st_blocks * 512,
                               (unsigned long long)file_len);
    mstar__ipc_reg_header h;
    if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
        return mstar_error_set(MSTAR_EIO, "read the header of CUDA IPC registry %s/%s: %s",
                               dir->path, name, strerror(errno));
    h.entity[MSTAR_NAME_MAX] = '\0';
    if (memcmp(h.magic, MSTAR__IPC_REG_MAGIC, sizeof(h.magic)) != 0 || h.pid != pid ||
        h.slots != MSTAR__IPC_REG_SLOTS || h.events != MSTAR__IPC_REG_EVENTS ||
        strcmp(h.entity, entity) != 0)
        return mstar_error_set(MSTAR_EPROTO,
                               "CUDA IPC registry %s/%s lacks the header its producer writes (or "
                               "it names another entity or pid): refused",
                               dir->path, name);
    /* Its producer holds an exclusive lock for as long as it lives. */
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        return mstar_error_set(MSTAR_ECLOSED,
                               "CUDA IPC registry %s/%s is held by no process: its producer is "
                               "gone",
                               dir->path, name);
    }
    return MSTAR_OK;
}

mstar_status mstar__ipc_peer_reg_open(const mstar__shm_dir *dir, const char *entity, int32_t pid,
                                      mstar__ipc_peer_reg **out)
{
    char name[MSTAR_NAME_MAX + 1];
    mstar_status st = reg_name(entity, pid, name);
    if (st != MSTAR_OK)
        return st;
    int fd;
    struct stat sb;
    st = mstar__shm_open_read(dir, name, "CUDA IPC registry", &fd, &sb);
    if (st == MSTAR_ENOENT)
        return mstar_error_set(MSTAR_ENOENT,
                               "'%s' exported nothing over CUDA IPC as pid %d (no registry %s/%s)",
                               entity, (int)pid, dir->path, name);
    if (st != MSTAR_OK)
        return st;
    st = check_file(dir, name, entity, pid, fd, &sb);
    mstar__ipc_peer_reg *p = NULL;
    if (st == MSTAR_OK && (p = calloc(1, sizeof(*p))) == NULL)
        st = mstar_error_set(MSTAR_ENOMEM, "CUDA IPC registry: out of memory");
    if (st == MSTAR_OK) {
        void *m = mmap(NULL, (size_t)file_len, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            st = mstar_error_set(MSTAR_EIO, "mmap CUDA IPC registry %s: %s", name, strerror(errno));
            free(p);
        } else {
            atomic_init(&p->refs, 1);
            p->pid = pid;
            snprintf(p->entity, sizeof(p->entity), "%s", entity);
            p->map = m;
            p->map_len = (size_t)file_len;
            p->dev = sb.st_dev;
            p->ino = sb.st_ino;
            *out = p;
        }
    }
    close(fd);
    return st;
}

bool mstar__ipc_peer_reg_current(const mstar__shm_dir *dir, const mstar__ipc_peer_reg *p)
{
    char name[MSTAR_NAME_MAX + 1];
    struct stat sb;
    return reg_name(p->entity, p->pid, name) == MSTAR_OK &&
           fstatat(dir->fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && sb.st_dev == p->dev &&
           sb.st_ino == p->ino;
}

mstar__ipc_peer_reg *mstar__ipc_peer_reg_retain(mstar__ipc_peer_reg *p)
{
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

void mstar__ipc_peer_reg_release(mstar__ipc_peer_reg *p)
{
    if (p == NULL || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
        return;
    munmap((void *)p->map, p->map_len);
    free(p);
}

/* The reader's look at the entries, run under the guard (no locks, no allocation). */
typedef struct lookup {
    const uint8_t *map;
    uint64_t uuid;
    uint32_t slot; /* in: the entry to check (check only); out: the entry found */
    bool check_only;
    bool found;
    mstar__ipc_reg_entry copy; /* the entry's fields, as they were while it held uuid */
    uint8_t event_handle[MSTAR_IPC_HANDLE_BYTES];
} lookup;

static void look(void *ctx)
{
    lookup *l = ctx;
    if (l->check_only) {
        l->found =
            atomic_load_explicit(&entry_at(l->map, l->slot)->uuid, memory_order_acquire) == l->uuid;
        return;
    }
    for (uint32_t i = 0; i < MSTAR__IPC_REG_PROBES && !l->found; i++) {
        uint32_t slot = (uint32_t)((l->uuid + i) % MSTAR__IPC_REG_SLOTS);
        const mstar__ipc_reg_entry *e = entry_at(l->map, slot);
        /* Acquire: the fields published with the uuid are visible. */
        if (atomic_load_explicit(&e->uuid, memory_order_acquire) != l->uuid)
            continue;
        l->copy.segment_size = e->segment_size;
        l->copy.segment_offset = e->segment_offset;
        l->copy.event = e->event;
        memcpy(l->copy.mem_handle, e->mem_handle, sizeof(l->copy.mem_handle));
        if (l->copy.event < MSTAR__IPC_REG_EVENTS) {
            const mstar__ipc_reg_header *h = (const mstar__ipc_reg_header *)l->map;
            memcpy(l->event_handle, h->event_handles[l->copy.event], sizeof(l->event_handle));
        }
        /* Still the same tensor after the fields were copied: they are its fields. */
        atomic_thread_fence(memory_order_acquire);
        l->found = atomic_load_explicit(&e->uuid, memory_order_relaxed) == l->uuid;
        l->slot = slot;
    }
}

static mstar_status run_lookup(const mstar__ipc_peer_reg *p, lookup *l)
{
    char what[MSTAR_NAME_MAX + 48];
    snprintf(what, sizeof(what), "the CUDA IPC registry of '%s'", p->entity);
    return mstar__guarded_run(p->map, p->map_len, look, l, what);
}

mstar_status mstar__ipc_peer_reg_find(const mstar__ipc_peer_reg *p, const mstar_tensor_info *info,
                                      uint32_t *slot)
{
    static const uint8_t none[MSTAR_IPC_HANDLE_BYTES];
    const mstar_cuda_ipc_ref *ref = &info->cuda_ipc;
    lookup l = { .map = p->map, .uuid = info->uuid };
    mstar_status st = info->uuid == 0 ? MSTAR_OK : run_lookup(p, &l);
    if (st != MSTAR_OK)
        return st;
    if (!l.found)
        return mstar_error_set(MSTAR_ENOENT,
                               "tensor %llu from '%s' is not exported over CUDA IPC: its producer "
                               "released it (its block may hold another tensor now) or never "
                               "exported it",
                               (unsigned long long)info->uuid, p->entity);
    bool no_event = l.copy.event == MSTAR__IPC_REG_NO_EVENT;
    const uint8_t *event = no_event ? none : l.event_handle;
    if ((!no_event && l.copy.event >= MSTAR__IPC_REG_EVENTS) ||
        memcmp(l.copy.mem_handle, ref->mem_handle, sizeof(ref->mem_handle)) != 0 ||
        l.copy.segment_size != ref->segment_size || l.copy.segment_offset != ref->segment_offset ||
        memcmp(event, ref->event_handle, sizeof(ref->event_handle)) != 0)
        return mstar_error_set(
            MSTAR_EPROTO,
            "tensor %llu from '%s': the descriptor's CUDA IPC route (segment handle, size or "
            "offset, or event%s) is not what its producer exported",
            (unsigned long long)info->uuid, p->entity,
            memcmp(ref->event_handle, none, sizeof(none)) == 0 && !no_event
                ? ": no event, where the producer recorded one"
                : "");
    *slot = l.slot;
    return MSTAR_OK;
}

mstar_status mstar__ipc_peer_reg_check(const mstar__ipc_peer_reg *p, uint32_t slot, uint64_t uuid)
{
    lookup l = { .map = p->map, .uuid = uuid, .slot = slot, .check_only = true };
    mstar_status st = run_lookup(p, &l);
    if (st != MSTAR_OK)
        return st;
    if (l.found)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_ENOENT,
                           "tensor %llu from '%s' was released by its producer while it was "
                           "copied (its block may hold another tensor now): the bytes may be "
                           "torn, the read is refused",
                           (unsigned long long)uuid, p->entity);
}
