/*
 * ipc.c — the file-system side of ipc:// inboxes.
 *
 * ZeroMQ unlinks whatever sits at an ipc path before binding it, so a second process binding the
 * same entity would silently steal the first one's inbox. We therefore probe the path first: a
 * socket that accepts a connection belongs to a live inbox and the bind is refused; a file that
 * refuses (a dead process's leftover) may be replaced. The directory is created 0700 so that
 * other users cannot reach the inboxes, and an existing one is used only if it is ours and not
 * writable by group or others: a directory another local user created first would let them
 * replace our sockets with theirs (docs/security.md).
 */
#include "mesh_internal.h"

#include "core/fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

mstar_status mstar__ipc_dir_ensure(const char *dir, const char *endpoint)
{
    if (dir[0] == '\0')
        return MSTAR_OK; /* the root directory */
    char what[MSTAR__MESH_ENDPOINT_MAX + 16];
    snprintf(what, sizeof(what), "mesh endpoint %s", endpoint);
    return mstar__mkdir_private(what, dir);
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

mstar_status mstar__ipc_socket_check(const char *dir, const char *name, const char *what)
{
    char path[MSTAR__IPC_PATH_MAX + 2];
    int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof(path))
        return mstar_error_set(MSTAR_EINVAL, "%s: the socket path %s/%s is too long", what, dir,
                               name);
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return mstar_error_set(MSTAR_ENOENT, "%s: nothing at %s", what, path);
    if (!S_ISSOCK(sb.st_mode))
        return mstar_error_set(MSTAR_EPROTO, "%s %s is not a socket (mode %06o): planted, refused",
                               what, path, (unsigned)sb.st_mode);
    return mstar__file_check_owner(what, dir, name, &sb);
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
