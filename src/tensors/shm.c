/*
 * shm.c — see shm.h.
 */
#include "tensors/shm.h"

#include "core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

mstar_status mstar__shm_dir_open(const char *path, const char *ns, mstar__shm_dir *out)
{
    struct stat sb;
    size_t nslen = ns != NULL ? strlen(ns) : 0;
    if (nslen > MSTAR__SHM_NS_MAX)
        return mstar_error_set(MSTAR_EINVAL, "shm_namespace is %zu bytes, at most %d", nslen,
                               MSTAR__SHM_NS_MAX);
    for (size_t i = 0; i < nslen; i++) {
        char c = ns[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return mstar_error_set(MSTAR_EINVAL,
                                   "shm_namespace '%s' has '%c' at %zu (letters "
                                   "and digits only)",
                                   ns, c, i);
    }
    if (path == NULL || path[0] == '\0')
        path = mstar_env_get_string("MSTAR_SHM_DIR", "");
    if (path[0] == '\0')
        path = (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode)) ? "/dev/shm" : "/tmp/mstar_shm";
    if (strlen(path) >= sizeof(out->path))
        return mstar_error_set(MSTAR_EINVAL, "shm_dir is longer than %zu bytes",
                               sizeof(out->path) - 1);
    mstar_status st = mstar__mkdir_p("shm_dir", path, 0700);
    if (st != MSTAR_OK)
        return st;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "shm_dir: open %s: %s", path, strerror(errno));
    /* Judged on the opened directory, so a rename after the check changes nothing. */
    if (fstat(fd, &sb) != 0)
        st = mstar_error_set(MSTAR_EIO, "shm_dir: stat %s: %s", path, strerror(errno));
    else
        st = mstar__dir_check_owner("shm_dir", path, &sb);
    if (st != MSTAR_OK) {
        close(fd);
        return st;
    }
    out->fd = fd;
    snprintf(out->path, sizeof(out->path), "%s", path);
    snprintf(out->ns, sizeof(out->ns), "%s", nslen > 0 ? ns : "");
    return MSTAR_OK;
}

void mstar__shm_dir_close(mstar__shm_dir *dir)
{
    if (dir->fd >= 0)
        close(dir->fd);
    dir->fd = -1;
}

mstar_status mstar__shm_open_read(const mstar__shm_dir *dir, const char *name, const char *what,
                                  int *fd_out, struct stat *sb)
{
    /* O_NONBLOCK: opening a FIFO planted under this name returns at once instead of waiting for
     * a writer; O_NOFOLLOW: a symlink is refused, never followed out of the directory. */
    int fd = openat(dir->fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return mstar_error_set(MSTAR_ENOENT, "%s %s/%s does not exist", what, dir->path, name);
        if (errno == ELOOP || errno == ENXIO || errno == ENODEV)
            return mstar_error_set(MSTAR_EPROTO, "%s %s/%s is not a regular file (%s): refused",
                                   what, dir->path, name,
                                   errno == ELOOP ? "a symbolic link" : "a device or socket");
        return mstar_error_set(MSTAR_EIO, "open %s %s/%s: %s", what, dir->path, name,
                               strerror(errno));
    }
    mstar_status st = MSTAR_OK;
    if (fstat(fd, sb) != 0)
        st =
            mstar_error_set(MSTAR_EIO, "stat %s %s/%s: %s", what, dir->path, name, strerror(errno));
    else if (!S_ISREG(sb->st_mode))
        st = mstar_error_set(MSTAR_EPROTO,
                             "%s %s/%s is not a regular file (%s, mode %04o): refused", what,
                             dir->path, name, S_ISFIFO(sb->st_mode) ? "a FIFO" : "a special file",
                             (unsigned)(sb->st_mode & 07777));
    else
        st = mstar__file_check_owner(what, dir->path, name, sb);
    if (st != MSTAR_OK) {
        close(fd);
        return st;
    }
    *fd_out = fd;
    return MSTAR_OK;
}

/* "mstar_" or "mstar-<ns>_": namespaced names start with "mstar-" so the two never parse as
 * each other (a namespace has no '_'). */
static int file_prefix(const mstar__shm_dir *dir, char *buf, size_t size)
{
    if (dir->ns[0] == '\0')
        return snprintf(buf, size, MSTAR__SHM_FILE_PREFIX);
    return snprintf(buf, size, "mstar-%s_", dir->ns);
}

mstar_status mstar__shm_file_name(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, char name[MSTAR__SHM_NAME_BUF])
{
    mstar_status st =
        mstar_name_validate(entity, strnlen(entity, MSTAR_NAME_MAX + 1), "source_entity");
    if (st != MSTAR_OK)
        return st;
    char prefix[MSTAR__SHM_NS_MAX + 8];
    file_prefix(dir, prefix, sizeof(prefix));
    int n = snprintf(name, MSTAR__SHM_NAME_BUF, "%s%s_0x%016llx", prefix, entity,
                     (unsigned long long)uuid);
    if (n < 0 || n > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL, "source_entity '%s' is too long for a shm file name",
                               entity);
    return MSTAR_OK;
}

static mstar_status write_all(int fd, const void *data, uint64_t n, const char *name)
{
    const char *p = data;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) /* a full filesystem is capacity, like a full arena */
            return mstar_error_set(w < 0 && (errno == ENOSPC || errno == EDQUOT) ? MSTAR_ENOSPC
                                                                                 : MSTAR_EIO,
                                   "write %s: %s", name, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (uint64_t)w;
    }
    return MSTAR_OK;
}

mstar_status mstar__shm_file_write(const mstar__shm_dir *dir, const char *entity,
                                   mstar_tensor_id uuid, const void *data, uint64_t n)
{
    char name[MSTAR__SHM_NAME_BUF];
    mstar_status st = mstar__shm_file_name(dir, entity, uuid, name);
    if (st != MSTAR_OK)
        return st;
    int fd = openat(dir->fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        if (errno == EEXIST)
            return mstar_error_set(MSTAR_EEXIST, "shm file %s/%s already exists", dir->path, name);
        return mstar_error_set(errno == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO, "create %s/%s: %s",
                               dir->path, name, strerror(errno));
    }
    st = write_all(fd, data, n, name);
    if (close(fd) != 0 && st == MSTAR_OK)
        st = mstar_error_set(MSTAR_EIO, "close %s/%s: %s", dir->path, name, strerror(errno));
    if (st != MSTAR_OK)
        unlinkat(dir->fd, name, 0);
    return st;
}

mstar_status mstar__shm_file_open(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, uint64_t offset, uint64_t n, int *fd_out)
{
    char name[MSTAR__SHM_NAME_BUF];
    mstar_status st = mstar__shm_file_name(dir, entity, uuid, name);
    if (st != MSTAR_OK)
        return st;
    int fd;
    struct stat sb;
    st = mstar__shm_open_read(dir, name, "shm file", &fd, &sb);
    if (st == MSTAR_ENOENT)
        return mstar_error_set(MSTAR_ENOENT,
                               "shm file %s/%s does not exist (freed by its "
                               "producer, or a producer on another transport)",
                               dir->path, name);
    if (st != MSTAR_OK)
        return st;
    uint64_t end;
    if (__builtin_add_overflow(offset, n, &end) || end > (uint64_t)sb.st_size) {
        close(fd);
        return mstar_error_set(MSTAR_EPROTO,
                               "descriptor reads bytes [%llu, +%llu) of shm file %s "
                               "which has %lld bytes",
                               (unsigned long long)offset, (unsigned long long)n, name,
                               (long long)sb.st_size);
    }
    *fd_out = fd;
    return MSTAR_OK;
}

mstar_status mstar__shm_file_pread(int fd, uint64_t offset, uint64_t n, void *dst)
{
    char *p = dst;
    uint64_t at = offset, left = n;
    while (left > 0) {
        size_t chunk = left > (1u << 30) ? (1u << 30) : (size_t)left;
        ssize_t r = pread(fd, p, chunk, (off_t)at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return mstar_error_set(MSTAR_EIO, "read shm file: %s",
                                   r < 0 ? strerror(errno) : "file shrank while reading");
        p += r;
        at += (uint64_t)r;
        left -= (uint64_t)r;
    }
    return MSTAR_OK;
}

mstar_status mstar__shm_file_read(const mstar__shm_dir *dir, const char *entity,
                                  mstar_tensor_id uuid, uint64_t offset, uint64_t n, void *dst)
{
    int fd;
    mstar_status st = mstar__shm_file_open(dir, entity, uuid, offset, n, &fd);
    if (st != MSTAR_OK)
        return st;
    st = mstar__shm_file_pread(fd, offset, n, dst);
    close(fd);
    return st;
}

void mstar__shm_file_unlink(const mstar__shm_dir *dir, const char *entity, mstar_tensor_id uuid)
{
    char name[MSTAR__SHM_NAME_BUF];
    if (mstar__shm_file_name(dir, entity, uuid, name) != MSTAR_OK)
        return;
    if (unlinkat(dir->fd, name, 0) != 0 && errno != ENOENT)
        mstar_log(MSTAR_LOG_WARN, "unlink %s/%s: %s", dir->path, name, strerror(errno));
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

static bool is_digits(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* A dirfd-relative directory walk that calls `fn` on each entry name; `fn` returns true when it
 * removed the entry. */
static int sweep(const mstar__shm_dir *dir,
                 bool (*fn)(const mstar__shm_dir *, const char *, const void *), const void *arg)
{
    int fd = openat(dir->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        removed += fn(dir, e->d_name, arg);
    closedir(d);
    return removed;
}

static bool remove_entity_file(const mstar__shm_dir *dir, const char *name, const void *arg)
{
    const char *entity = arg;
    char prefix[MSTAR__SHM_NS_MAX + 8];
    file_prefix(dir, prefix, sizeof(prefix));
    size_t plen = strlen(prefix), elen = strlen(entity);
    if (strncmp(name, prefix, plen) != 0 || strncmp(name + plen, entity, elen) != 0)
        return false;
    const char *rest = name + plen + elen;
    if (strlen(rest) != 19 || strncmp(rest, "_0x", 3) != 0 || !is_hex(rest + 3, 16))
        return false;
    /* Only our own: in a shared directory another user's file of this shape is theirs. */
    struct stat sb;
    if (fstatat(dir->fd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || sb.st_uid != geteuid())
        return false;
    if (unlinkat(dir->fd, name, 0) != 0)
        return false;
    mstar_log(MSTAR_LOG_INFO, "removed stale shm file %s/%s", dir->path, name);
    return true;
}

/* The liveness lock of an entity's per-uuid files: a shared open-file-description lock on one
 * byte of the directory, at an offset derived from the file prefix and the entity name. Every
 * manager holds it on its own directory fd for as long as it lives (the kernel drops it when the
 * process dies, whatever pid namespace it is in), so a process starting under the same name can
 * tell whether the files of that name may still be read. A hash collision between two entities
 * only makes a sweep keep files it could have removed. */
static off_t entity_lock_offset(const mstar__shm_dir *dir, const char *entity)
{
    char prefix[MSTAR__SHM_NS_MAX + 8];
    file_prefix(dir, prefix, sizeof(prefix));
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */
    for (const char *parts[2] = { prefix, entity }, **p = parts; p < parts + 2; p++)
        for (const char *c = *p; *c != '\0'; c++)
            h = (h ^ (uint8_t)*c) * UINT64_C(1099511628211);
    return (off_t)(h >> 2); /* non-negative */
}

static struct flock entity_lock_range(const mstar__shm_dir *dir, const char *entity, short type)
{
    struct flock l;
    memset(&l, 0, sizeof(l));
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = entity_lock_offset(dir, entity);
    l.l_len = 1;
    return l;
}

/* True when another open of the directory holds `entity`'s lock (a live process of that name). */
static bool entity_alive(const mstar__shm_dir *dir, const char *entity)
{
    struct flock l = entity_lock_range(dir, entity, F_WRLCK);
    if (fcntl(dir->fd, F_OFD_GETLK, &l) != 0)
        return false; /* no locks here (some network filesystems): the name is all we have */
    return l.l_type != F_UNLCK;
}

int mstar__shm_sweep_entity_files(const mstar__shm_dir *dir, const char *entity)
{
    int removed = 0;
    if (entity_alive(dir, entity))
        mstar_log(MSTAR_LOG_WARN,
                  "shm sweep: another live process of entity '%s' uses %s; its files are kept",
                  entity, dir->path);
    else
        removed = sweep(dir, remove_entity_file, entity);
    /* Held until the directory fd is closed (mstar__shm_dir_close) or the process dies. */
    struct flock l = entity_lock_range(dir, entity, F_RDLCK);
    if (fcntl(dir->fd, F_OFD_SETLK, &l) != 0)
        mstar_log(MSTAR_LOG_WARN,
                  "shm sweep: cannot hold the liveness lock of '%s' in %s (%s): a later "
                  "process of this name may remove this one's files",
                  entity, dir->path, strerror(errno));
    return removed;
}

mstar_status mstar__shm_segment_parse(const char *name, mstar__shm_segment_name *out)
{
    size_t len = strnlen(name, MSTAR_NAME_MAX + 1);
    if (mstar_name_validate(name, len, "shm_segment") != MSTAR_OK) {
        char why[512];
        snprintf(why, sizeof(why), "%s", mstar_last_error());
        return mstar_error_set(MSTAR_EPROTO, "%s", why);
    }
    size_t plen = strlen(MSTAR__SHM_ARENA_PREFIX);
    if (strncmp(name, MSTAR__SHM_ARENA_PREFIX, plen) != 0)
        return mstar_error_set(MSTAR_EPROTO, "shm_segment '%s' lacks the prefix '%s'", name,
                               MSTAR__SHM_ARENA_PREFIX);
    /* From the end: ".seg<N>", then "_<8 hex>", then "_<pid>"; what remains is the entity. */
    const char *seg = NULL;
    for (const char *p = name + plen; (p = strstr(p, ".seg")) != NULL; p++)
        seg = p;
    if (seg == NULL || !is_digits(seg + 4, strlen(seg + 4)) || strlen(seg + 4) > 9)
        return mstar_error_set(MSTAR_EPROTO, "shm_segment '%s' does not end in .seg<N>", name);
    const char *tok = seg - 9;
    if (tok < name + plen + 3 || tok[0] != '_' || !is_hex(tok + 1, 8))
        return mstar_error_set(MSTAR_EPROTO, "shm_segment '%s' lacks the _<8 hex> token", name);
    const char *pid_end = tok;
    const char *pid = pid_end;
    while (pid > name + plen && pid[-1] >= '0' && pid[-1] <= '9')
        pid--;
    size_t pid_len = (size_t)(pid_end - pid);
    if (pid_len == 0 || pid_len > 9 || pid == name + plen || pid[-1] != '_')
        return mstar_error_set(MSTAR_EPROTO, "shm_segment '%s' lacks the _<pid> field", name);
    size_t elen = (size_t)(pid - 1 - (name + plen));
    if (elen == 0)
        return mstar_error_set(MSTAR_EPROTO, "shm_segment '%s' names no entity", name);
    memcpy(out->entity, name + plen, elen);
    out->entity[elen] = '\0';
    out->pid = (pid_t)strtol(pid, NULL, 10);
    out->token = (uint32_t)strtoul(tok + 1, NULL, 16);
    out->index = (uint32_t)strtoul(seg + 4, NULL, 10);
    return MSTAR_OK;
}

mstar_status mstar__shm_segment_check(const char *name, const char *source_entity)
{
    mstar__shm_segment_name parsed;
    mstar_status st = mstar__shm_segment_parse(name, &parsed);
    return st != MSTAR_OK ? st : mstar__shm_segment_owned(name, parsed.entity, source_entity);
}

mstar_status mstar__shm_segment_owned(const char *name, const char *owner,
                                      const char *source_entity)
{
    if (strcmp(owner, source_entity) != 0)
        return mstar_error_set(MSTAR_EPROTO,
                               "shm_segment '%s' belongs to '%s', not to the "
                               "descriptor's source_entity '%s'",
                               name, owner, source_entity);
    return MSTAR_OK;
}

/* True when some process holds the segment's lock, or it cannot be opened (gone already, or not
 * ours to judge): either way it is not removed. */
/* True when some process holds the segment's lock, or it cannot be opened as a regular file of
 * ours (gone already, planted by someone else, a FIFO): either way it is not removed. */
static bool segment_locked(const mstar__shm_dir *dir, const char *name)
{
    int fd;
    struct stat sb;
    if (mstar__shm_open_read(dir, name, "arena segment", &fd, &sb) != MSTAR_OK) {
        mstar_error_clear();
        return true;
    }
    bool locked = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd); /* releases the probe's own lock */
    return locked;
}

static bool remove_dead_segment(const mstar__shm_dir *dir, const char *name, const void *arg)
{
    (void)arg;
    if (strncmp(name, MSTAR__SHM_ARENA_PREFIX, strlen(MSTAR__SHM_ARENA_PREFIX)) != 0)
        return false;
    mstar__shm_segment_name parsed;
    if (mstar__shm_segment_parse(name, &parsed) != MSTAR_OK) {
        mstar_error_clear();
        return false;
    }
    /* kill(pid, 0) fails with ESRCH only when no such process exists; EPERM means it lives. */
    if (parsed.pid <= 0 || parsed.pid == getpid() || kill(parsed.pid, 0) == 0 || errno != ESRCH)
        return false;
    /* The pid may be of another pid namespace sharing the directory: a segment still mapped by
     * its creator holds that process's shared lock (arena.c), so it is alive whatever the pid. */
    if (segment_locked(dir, name))
        return false;
    if (unlinkat(dir->fd, name, 0) != 0) {
        mstar_log(MSTAR_LOG_WARN, "orphan sweep: unlink %s/%s: %s", dir->path, name,
                  strerror(errno));
        return false;
    }
    mstar_log(MSTAR_LOG_INFO, "orphan sweep: removed %s/%s (pid %d is gone)", dir->path, name,
              (int)parsed.pid);
    return true;
}

int mstar__shm_sweep_dead_segments(const mstar__shm_dir *dir)
{
    return sweep(dir, remove_dead_segment, NULL);
}
