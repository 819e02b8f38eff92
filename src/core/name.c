/*
 * name.c — validation of every name that can come over the wire.
 *
 * Entity, segment, signal, node and walk names end up in file paths and log lines, so they are
 * restricted to a safe alphabet before anything uses them: no '/', no "..", no control bytes.
 */
#include "mstar/core.h"

/* The class of each byte, so that a name of the hot path (a handoff validates a dozen) costs a
 * load and two bit operations per byte: NO, OK, or DOT for '.', which is allowed but neither
 * twice in a row nor alone (DOT has OK's bit too). Rows of 16 from 0x20; control bytes and bytes
 * >= 0x80 are NO. test_names (test_core.c) checks the table against the alphabet byte by byte. */
enum { NO = 0, OK = 1, DOT = 3 };

static const uint8_t name_class[256] = {
    [0x20] = NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, NO, OK, DOT, NO, /* ' ' .. '/' */
    OK,          OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, NO, NO, NO, NO,  NO, /* '0' .. '?' */
    NO,          OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK,  OK, /* '@' .. 'O' */
    OK,          OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, NO, NO, NO, NO,  OK, /* 'P' .. '_' */
    NO,          OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, OK,  OK, /* '`' .. 'o' */
    OK,          OK, OK, OK, OK, OK, OK, OK, OK, OK, OK, NO, NO, NO, NO,  NO, /* 'p' .. DEL */
};

/* Byte by byte, reporting the first thing wrong in the order of the bytes. */
static mstar_status check_each_byte(const char *name, size_t len, const char *what)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (name_class[c] == NO)
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

/* Neither ".." in the name nor "." alone. */
static bool dots_ok(const char *name, size_t len)
{
    if (len == 1)
        return name[0] != '.';
    for (size_t i = 0; i + 1 < len; i++) {
        if (name[i] == '.' && name[i + 1] == '.')
            return false;
    }
    return true;
}

mstar_status mstar_name_validate(const char *name, size_t len, const char *what)
{
    if (len == 0)
        return mstar_error_set(MSTAR_EINVAL, "%s is empty", what);
    if (len > MSTAR_NAME_MAX)
        return mstar_error_set(MSTAR_EINVAL, "%s is %zu bytes, at most %d", what, len,
                               MSTAR_NAME_MAX);
    /* The hot path, a valid name: one pass that only accumulates the classes (no branch per byte
     * that could end it early), then the dots only if there is one. Anything wrong is looked for
     * again byte by byte, which reports the first problem as the error has always read. */
    unsigned every = OK, some = NO;
    for (size_t i = 0; i < len; i++) {
        unsigned c = name_class[(unsigned char)name[i]];
        every &= c;
        some |= c;
    }
    if (every == OK && (some == OK || dots_ok(name, len)))
        return MSTAR_OK;
    return check_each_byte(name, len, what);
}
