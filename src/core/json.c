/*
 * json.c — see json.h.
 */
#include "core/json.h"

#include <math.h>

void mstar__json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s != NULL && *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

void mstar__json_number(FILE *out, double v, int digits)
{
    if (isfinite(v))
        fprintf(out, "%.*g", digits, v);
    else
        fputs("null", out);
}
