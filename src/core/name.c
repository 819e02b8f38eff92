/*
 * name.c — validation of every name that can come over the wire.
 *
 * Entity, segment, signal, node and walk names end up in file paths and log lines, so they are
 * restricted to a safe alphabet before anything uses them: no '/', no "..", no control bytes.
 */
#include "mstar/core.h"

/* The allowed bytes as a bitmap over 0..127, one bit each, so that a name of the hot path (a
 * handoff validates a dozen) costs a load and a test per byte: '-' (45), '.' (46), '0'-'9'
 * (48-57) and ':' (58) in the first word; 'A'-'Z' (65-90), '_' (95) and 'a'-'z' (97-122) in the
 * second. test_name checks it against the alphabet byte by byte. */
static const uint64_t name_chars[2] = {
    UINT64_C(0x07ff600000000000),
    UINT64_C(0x07fffffe87fffffe),
};

static bool name_char_ok(unsigned char c)
{
    return c < 128 && ((name_chars[c >> 6] >> (c & 63)) & 1) != 0;
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
