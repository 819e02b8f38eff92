/*
 * str.h — a bounded string copy for hot paths.
 *
 * The library copies a name into a fixed buffer with snprintf(dst, cap, "%s", src) where speed
 * does not matter. A descriptor built for every handoff copies four names; through the formatter
 * that was most of the producer's store call, so those copies go through mstar__str_copy.
 */
#ifndef MSTAR_CORE_STR_H
#define MSTAR_CORE_STR_H

#include <stddef.h>
#include <string.h>

/* Copy the NUL-terminated `src` into `dst` of `cap` (> 0) bytes, cut to fit and terminated, as
 * snprintf(dst, cap, "%s", src) does. */
static inline void mstar__str_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

#endif
