/*
 * wire_path.c — field paths, the error messages that name them, and the checks of one field that
 * encoder and decoder share (names, text, the descriptor budget; see wire_internal.h, codec.h).
 *
 * Paths are formatted only on the error path; the happy path just links frames on the stack.
 */
#include "codec.h"

#include <stdio.h>
#include <string.h>

/* Append the frames from the root down to `path`; returns the new length. */
static size_t format_up(const mstar__wpath *path, char *buf, size_t len)
{
    if (path == NULL)
        return len;
    len = format_up(path->up, buf, len);
    if (len >= MSTAR__WPATH_MAX - 1)
        return len;
    size_t room = MSTAR__WPATH_MAX - len;
    int n;
    if (path->key == NULL)
        n = snprintf(buf + len, room, "[%lld]", (long long)path->index);
    else if (path->up == NULL)
        n = snprintf(buf + len, room, "%s", path->key);
    else
        n = snprintf(buf + len, room, ".%s", path->key);
    if (n < 0)
        return len;
    return (size_t)n < room ? len + (size_t)n : MSTAR__WPATH_MAX - 1;
}

const char *mstar__wpath_format(const mstar__wpath *path, char buf[MSTAR__WPATH_MAX])
{
    buf[0] = '\0';
    format_up(path, buf, 0);
    return buf;
}

mstar_status mstar__wire_fail(mstar_status code, const mstar__wpath *path, const char *fmt, ...)
{
    char where[MSTAR__WPATH_MAX];
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return mstar_error_set(code, "%s: %s", mstar__wpath_format(path, where), what);
}

mstar_status mstar__wire_check_name(mstar_status code, const mstar__wpath *path, const char *name,
                                    size_t len)
{
    if (mstar_name_validate(name, len, "name") == MSTAR_OK)
        return MSTAR_OK;
    /* Cold path: run the check again with the field's path as the subject of the message. */
    char where[MSTAR__WPATH_MAX];
    char msg[1024];
    mstar_name_validate(name, len, mstar__wpath_format(path, where));
    snprintf(msg, sizeof(msg), "%s", mstar_last_error());
    return mstar_error_set(code, "%s", msg);
}

mstar_status mstar__wire_check_cname(mstar_status code, const mstar__wpath *path, const char *name,
                                     size_t cap, bool may_be_empty)
{
    size_t len = strnlen(name, cap);
    if (len == cap)
        return mstar__wire_fail(code, path, "not NUL-terminated within %zu bytes", cap);
    if (len == 0 && may_be_empty)
        return MSTAR_OK;
    return mstar__wire_check_name(code, path, name, len);
}

mstar_status mstar__wire_copy_name(char *dst, const char *src, const char *what)
{
    if (src == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", what);
    size_t len = strnlen(src, MSTAR_NAME_MAX + 1);
    mstar_status st = mstar_name_validate(src, len, what);
    if (st != MSTAR_OK)
        return st;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return MSTAR_OK;
}

mstar_status mstar__wire_check_text(mstar_status code, const mstar__wpath *path, const char *text,
                                    size_t len)
{
    if (len > MSTAR_NAME_MAX)
        return mstar__wire_fail(code, path, "%zu bytes, at most %d", len, MSTAR_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c > 0x7e)
            return mstar__wire_fail(code, path, "byte 0x%02x at %zu (printable ASCII only)", c, i);
    }
    return MSTAR_OK;
}

mstar_status mstar__wire_take_tensors(mstar_status code, const mstar__wpath *path,
                                      uint32_t *tensors_left, uint32_t n)
{
    if (n > *tensors_left)
        return mstar__wire_fail(code, path, "%u descriptors, past the message's limit of %d in all",
                                n, MSTAR_WIRE_MAX_TENSORS);
    *tensors_left -= n;
    return MSTAR_OK;
}
