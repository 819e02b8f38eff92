/*
 * fs.h — small file-system helpers the library and the command share.
 */
#ifndef MSTAR_CORE_FS_H
#define MSTAR_CORE_FS_H

#include "mstar/core.h"

#include <sys/types.h>

/* mkdir -p: create `path` and every missing parent with `mode` (less the umask); existing
 * directories are left as they are. On failure MSTAR_EIO with a message starting "<what>: "
 * that names the directory that could not be made; MSTAR_EINVAL for an empty path or one of
 * 4096 bytes or more. */
mstar_status mstar__mkdir_p(const char *what, const char *path, mode_t mode);

#endif
