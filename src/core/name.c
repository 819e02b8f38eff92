/*
 * name.c — validation of every name that can come over the wire.
 *
 * Entity, segment, signal, node and walk names end up in file paths and log lines, so they are
 * restricted to a safe alphabet before anything uses them: no '/', no "..", no control bytes.
 */
#include "mstar/core.h"

static bool name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
}

mstar_status mstar_name_validate(const char *name, size_t len, const char *what)
{
    if (len == 0)
        return mstar_error_set(MSTAR_EINVAL, "%s is empty", what);
    if (len > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL, "%s is %zu bytes, at most %d", what, len,
                               MSTAR_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!name_char_ok(c))
            return mstar_error_set(MSTAR_EINVAL,
                                   "%s has byte 0x%02x at %zu (allowed: A-Z a-z 0-9 _ . : -)", what,
                                   c, i);
        if (c == '.' && i + 1 < len && name[i + 1] == '.')
            return mstar_error_set(MSTAR_EINVAL, "%s contains '..'", what);
    }
    if (len == 1 && name[0] == '.')
        return mstar_error_set(MSTAR_EINVAL, "%s is '.'", what);
    return MSTAR_OK;
}
