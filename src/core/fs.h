/*
 * fs.h — small file-system helpers the library and the command share, and the ownership rules
 * for the directories and files that other processes share with us (docs/security.md).
 */
#ifndef MSTAR_CORE_FS_H
#define MSTAR_CORE_FS_H

#include "mstar/core.h"

#include <sys/stat.h>
#include <sys/types.h>

/* mkdir -p: create `path` and every missing parent with `mode` (less the umask); existing
 * directories are left as they are. On failure MSTAR_EIO with a message starting "<what>: "
 * that names the directory that could not be made; MSTAR_EINVAL for an empty path or one of
 * 4096 bytes or more. */
mstar_status mstar__mkdir_p(const char *what, const char *path, mode_t mode);

/* A directory other local users cannot tamper with: owned by the effective uid and not writable
 * by group or others; or owned by root and either not writable by them or sticky (/dev/shm,
 * /tmp: there nobody else can remove or rename what we create, and what they plant is refused
 * by mstar__file_check_owner). `sb` is the directory's stat. MSTAR_EINVAL (choose another
 * directory) naming the path, its owner and its mode otherwise. */
mstar_status mstar__dir_check_owner(const char *what, const char *path, const struct stat *sb);

/* mstar__mkdir_p with mode 0700, then a stricter rule than mstar__dir_check_owner, for directories
 * of sockets (the ipc directory): owned by the effective uid and not writable by group or
 * others, with no exception for root-owned sticky ones. MSTAR_EINVAL naming the path, its owner
 * and its mode otherwise. */
mstar_status mstar__mkdir_private(const char *what, const char *path);

/* A file another process handed us by name must be owned by the effective uid: MSTAR_EPROTO
 * naming the path, its owner and its mode otherwise. */
mstar_status mstar__file_check_owner(const char *what, const char *dir, const char *name,
                                     const struct stat *sb);

#endif
