/*
 * fs.c — see fs.h.
 */
#include "core/fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

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
