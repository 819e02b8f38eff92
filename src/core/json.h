/*
 * json.h — JSON values written to a stdio stream: what the command's --json outputs and the
 * benchmark report share, so that every one of them stays valid JSON.
 */
#ifndef MSTAR_CORE_JSON_H
#define MSTAR_CORE_JSON_H

#include <stdio.h>

/* `s` as a JSON string: quotes, backslashes and control characters escaped; NULL as "". */
void mstar__json_string(FILE *out, const char *s);
/* `v` with `digits` significant digits, or null when it is not finite (JSON has no inf or nan). */
void mstar__json_number(FILE *out, double v, int digits);

#endif
