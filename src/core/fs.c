/*
 * fs.c — see fs.h.
 */
#include "core/fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

mstar_status mstar__mkdir_p(const char *what, const char *path, mode_t mode)
{
    char tmp[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof(tmp))
        return mstar_error_set(MSTAR_EINVAL, "%s '%s' is empty or too long", what, path);
    memcpy(tmp, path, len + 1);
    /* Each prefix that ends before a '/', then the whole path. */
    for (size_t i = 1; i <= len; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char saved = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, mode) != 0 && errno != EEXIST)
            return mstar_error_set(MSTAR_EIO, "%s: mkdir %s: %s", what, tmp, strerror(errno));
        tmp[i] = saved;
    }
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return mstar_error_set(MSTAR_EIO, "%s: %s is not a directory", what, path);
    return MSTAR_OK;
}

mstar_status mstar__dir_check_owner(const char *what, const char *path, const struct stat *sb)
{
    uid_t me = geteuid();
    bool others_write = (sb->st_mode & S_IWOTH) != 0;
    bool group_write = (sb->st_mode & S_IWGRP) != 0;
    bool ours = sb->st_uid == me && !others_write && !group_write;
    /* A root-owned system directory: writable by group or others only with the sticky bit,
     * which keeps them from removing or renaming our entries. */
    bool system =
        sb->st_uid == 0 && (!(others_write || group_write) || (sb->st_mode & S_ISVTX) != 0);
    if (ours || system)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EINVAL,
                           "%s: directory %s is owned by uid %u with mode %04o: it must be owned "
                           "by uid %u and not writable by group or others (or be a root-owned "
                           "system directory such as /dev/shm); another local user could read, "
                           "plant or replace what lives there",
                           what, path, (unsigned)sb->st_uid, (unsigned)(sb->st_mode & 07777),
                           (unsigned)me);
}

mstar_status mstar__mkdir_private(const char *what, const char *path)
{
    mstar_status st = mstar__mkdir_p(what, path, 0700);
    if (st != MSTAR_OK)
        return st;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return mstar_error_set(MSTAR_EIO, "%s: stat %s: %s", what, path, strerror(errno));
    if (sb.st_uid == geteuid() && (sb.st_mode & (S_IWGRP | S_IWOTH)) == 0)
        return MSTAR_OK;
    /* No system-directory exception here: in a sticky one anyone may bind a socket under a
     * name of ours before we do. */
    return mstar_error_set(MSTAR_EINVAL,
                           "%s: directory %s is owned by uid %u with mode %04o: it must be owned "
                           "by uid %u and not writable by group or others; another local user "
                           "could bind or replace sockets there",
                           what, path, (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777),
                           (unsigned)geteuid());
}

mstar_status mstar__file_check_owner(const char *what, const char *dir, const char *name,
                                     const struct stat *sb)
{
    if (sb->st_uid == geteuid())
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EPROTO,
                           "%s %s/%s is owned by uid %u with mode %04o, not by this user (uid "
                           "%u): planted by another local user, refused",
                           what, dir, name, (unsigned)sb->st_uid, (unsigned)(sb->st_mode & 07777),
                           (unsigned)geteuid());
}
