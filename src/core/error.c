/*
 * error.c — status codes and the thread-local last error.
 *
 * Every fallible call returns an mstar_status and, on failure, leaves a message here that names
 * what was wrong. The message buffer is per thread so that the async reader's threads and the
 * worker loop never see each other's errors.
 */
#include "core/error.h"

#include <stdio.h>
#include <string.h>

#define ERROR_MSG_MAX 1024

static _Thread_local char last_msg[ERROR_MSG_MAX];
static _Thread_local mstar_status last_status = MSTAR_OK;

struct status_entry {
    mstar_status status;
    const char *name;
    const char *text;
};

static const struct status_entry status_table[] = {
    { MSTAR_OK, "MSTAR_OK", "success" },
    { MSTAR_EINVAL, "MSTAR_EINVAL", "invalid argument" },
    { MSTAR_ENOMEM, "MSTAR_ENOMEM", "out of memory" },
    { MSTAR_EPROTO, "MSTAR_EPROTO", "malformed input from another process" },
    { MSTAR_ENOENT, "MSTAR_ENOENT", "no such object" },
    { MSTAR_EEXIST, "MSTAR_EEXIST", "already exists" },
    { MSTAR_EIO, "MSTAR_EIO", "operating-system call failed" },
    { MSTAR_EAGAIN, "MSTAR_EAGAIN", "not ready; try again" },
    { MSTAR_ETIMEDOUT, "MSTAR_ETIMEDOUT", "timed out" },
    { MSTAR_ENOSPC, "MSTAR_ENOSPC", "out of capacity" },
    { MSTAR_ENOTSUP, "MSTAR_ENOTSUP", "not supported in this build or on this machine" },
    { MSTAR_ESTATE, "MSTAR_ESTATE", "invalid in the current state" },
    { MSTAR_EDEVICE, "MSTAR_EDEVICE", "device runtime error" },
    { MSTAR_ECLOSED, "MSTAR_ECLOSED", "closed" },
    { MSTAR_ERANGE, "MSTAR_ERANGE", "value out of range" },
    { MSTAR_ECANCELED, "MSTAR_ECANCELED", "cancelled" },
    { MSTAR_EREMOTE, "MSTAR_EREMOTE", "remote operation failed" },
};

static const struct status_entry *status_lookup(mstar_status status)
{
    for (size_t i = 0; i < sizeof(status_table) / sizeof(status_table[0]); i++) {
        if (status_table[i].status == status)
            return &status_table[i];
    }
    return NULL;
}

const char *mstar_status_name(mstar_status status)
{
    const struct status_entry *e = status_lookup(status);
    return e ? e->name : "MSTAR_E?";
}

const char *mstar_strerror(mstar_status status)
{
    const struct status_entry *e = status_lookup(status);
    return e ? e->text : "unknown status";
}

const char *mstar_last_error(void)
{
    return last_msg;
}

mstar_status mstar_last_status(void)
{
    return last_status;
}

mstar_status mstar_error_set(mstar_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    va_end(ap);
    last_status = status;
    return status;
}

mstar_status mstar__error_set_text(mstar_status status, const char *text)
{
    size_t n = strnlen(text, sizeof(last_msg) - 1);
    memcpy(last_msg, text, n);
    last_msg[n] = '\0';
    last_status = status;
    return status;
}

mstar_status mstar_error_wrap(const char *fmt, ...)
{
    char old[ERROR_MSG_MAX];
    memcpy(old, last_msg, sizeof(old));
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_msg, sizeof(last_msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    size_t used = (size_t)n < sizeof(last_msg) ? (size_t)n : sizeof(last_msg) - 1;
    size_t room = sizeof(last_msg) - used;
    if (room > 3) {
        memcpy(last_msg + used, ": ", 2);
        size_t take = strnlen(old, room - 3);
        memcpy(last_msg + used + 2, old, take);
        last_msg[used + 2 + take] = '\0';
    }
    return last_status;
}

void mstar_error_clear(void)
{
    last_msg[0] = '\0';
    last_status = MSTAR_OK;
}
