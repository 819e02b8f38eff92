/*
 * ipc.c — the file-system side of ipc:// inboxes.
 *
 * ZeroMQ unlinks whatever sits at an ipc path before binding it, so a second process binding the
 * same entity would silently steal the first one's inbox. We therefore probe the path first: a
 * socket that accepts a connection belongs to a live inbox and the bind is refused; a file that
 * refuses (a dead process's leftover) may be replaced. The directory is created 0700 so that
 * other users cannot reach the inboxes.
 */
#include "mesh_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static mstar_status dir_error(const char *dir, const char *endpoint, const char *why)
{
    return mstar_error_set(MSTAR_EIO, "mesh endpoint %s: directory %s: %s", endpoint, dir, why);
}

/* mkdir with mode 0700; an existing entry is checked by the caller's final stat. */
static bool make_dir(const char *path)
{
    return mkdir(path, 0700) == 0 || errno == EEXIST;
}

mstar_status mstar__ipc_dir_ensure(const char *dir, const char *endpoint)
{
    char path[MSTAR__IPC_PATH_MAX + 1];
    size_t len = strlen(dir);
    if (len == 0)
        return MSTAR_OK; /* the root directory */
    if (len >= sizeof(path))
        return dir_error(dir, endpoint, "path too long");
    memcpy(path, dir, len + 1);
    /* mkdir -p: every parent (each prefix that ends before a '/'), then the directory. */
    for (size_t i = 1; i < len; i++) {
        if (path[i] != '/')
            continue;
        path[i] = '\0';
        bool ok = make_dir(path);
        path[i] = '/';
        if (!ok)
            return dir_error(dir, endpoint, strerror(errno));
    }
    if (!make_dir(path))
        return dir_error(dir, endpoint, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return dir_error(dir, endpoint, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return dir_error(dir, endpoint, "exists and is not a directory");
    return MSTAR_OK;
}

mstar_status mstar__ipc_check_unbound(const char *path, const char *endpoint)
{
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(addr.sun_path))
        return mstar_error_set(MSTAR_EINVAL, "mesh endpoint %s: socket path too long", endpoint);
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "mesh endpoint %s: socket: %s", endpoint,
                               strerror(errno));
    int rc;
    do {
        rc = connect(fd, (const struct sockaddr *)&addr, sizeof(addr));
    } while (rc != 0 && errno == EINTR);
    close(fd);
    if (rc == 0)
        return mstar_error_set(MSTAR_EEXIST,
                               "mesh endpoint %s is already bound by a live inbox (another "
                               "process or mesh has this entity)",
                               endpoint);
    /* ENOENT: nothing there; ECONNREFUSED: a stale file. Anything else (EACCES, ...) is left to
     * the bind, whose error names the endpoint too. */
    return MSTAR_OK;
}

mstar_status mstar__ipc_file_record(mstar__ipc_file *file, const char *path, const char *endpoint)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mstar_error_set(MSTAR_EIO, "mesh endpoint %s: bound, but stat(%s): %s", endpoint,
                               path, strerror(errno));
    snprintf(file->path, sizeof(file->path), "%s", path);
    file->dev = sb.st_dev;
    file->ino = sb.st_ino;
    file->bound = true;
    return MSTAR_OK;
}

void mstar__ipc_file_remove(mstar__ipc_file *file)
{
    if (!file->bound)
        return;
    struct stat sb;
    if (stat(file->path, &sb) == 0 && sb.st_dev == file->dev && sb.st_ino == file->ino)
        unlink(file->path);
    file->bound = false;
}
