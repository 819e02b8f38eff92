/*
 * error.h — setting the last error from a ready-made text.
 *
 * mstar_error_set formats its message, a few hundred instructions each time. A status that a hot
 * path returns as a matter of course (a receive that finds no message, once per handoff on the
 * loop that waits for it) takes its text made once, when its object was created.
 */
#ifndef MSTAR_CORE_ERROR_H
#define MSTAR_CORE_ERROR_H

#include "mstar/core.h"

/* mstar_error_set(status, "%s", text), without the formatter. Returns `status`. */
mstar_status mstar__error_set_text(mstar_status status, const char *text);

#endif
