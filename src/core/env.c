/*
 * env.c — typed environment knobs.
 *
 * The reference system reads its knobs with int()/float() and dies on a typo; here a bad value is
 * an MSTAR_EINVAL whose message names the variable, the value and what would have been accepted,
 * so the caller can refuse to start with a sentence a person can act on.
 */
#include "mstar/core.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return (v == NULL || v[0] == '\0') ? NULL : v;
}

mstar_status mstar_env_get_int(const char *name, int64_t def, int64_t min, int64_t max,
                               int64_t *out)
{
    const char *v = env_value(name);
    if (v == NULL) {
        *out = def;
        return MSTAR_OK;
    }
    char *end = NULL;
    errno = 0;
    long long parsed = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0')
        return mstar_error_set(MSTAR_EINVAL, "%s=%s is not an integer (expected %lld..%lld)", name,
                               v, (long long)min, (long long)max);
    if (parsed < min || parsed > max)
        return mstar_error_set(MSTAR_EINVAL, "%s=%s is out of range (expected %lld..%lld)", name, v,
                               (long long)min, (long long)max);
    *out = parsed;
    return MSTAR_OK;
}

mstar_status mstar_env_get_double(const char *name, double def, double min, double max, double *out)
{
    const char *v = env_value(name);
    if (v == NULL) {
        *out = def;
        return MSTAR_OK;
    }
    char *end = NULL;
    errno = 0;
    double parsed = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(parsed))
        return mstar_error_set(MSTAR_EINVAL, "%s=%s is not a number (expected %g..%g)", name, v,
                               min, max);
    if (parsed < min || parsed > max)
        return mstar_error_set(MSTAR_EINVAL, "%s=%s is out of range (expected %g..%g)", name, v,
                               min, max);
    *out = parsed;
    return MSTAR_OK;
}

mstar_status mstar_env_get_bool(const char *name, bool def, bool *out)
{
    static const char *const truthy[] = { "1", "true", "yes", "on" };
    static const char *const falsy[] = { "0", "false", "no", "off" };
    const char *v = env_value(name);
    if (v == NULL) {
        *out = def;
        return MSTAR_OK;
    }
    for (size_t i = 0; i < sizeof(truthy) / sizeof(truthy[0]); i++) {
        if (strcasecmp(v, truthy[i]) == 0) {
            *out = true;
            return MSTAR_OK;
        }
        if (strcasecmp(v, falsy[i]) == 0) {
            *out = false;
            return MSTAR_OK;
        }
    }
    return mstar_error_set(MSTAR_EINVAL,
                           "%s=%s is not a boolean (expected 1/0, true/false, "
                           "yes/no, on/off)",
                           name, v);
}

mstar_status mstar_env_get_choice(const char *name, const char *const *choices, size_t nchoices,
                                  size_t def_index, size_t *out)
{
    const char *v = env_value(name);
    if (v == NULL) {
        *out = def_index;
        return MSTAR_OK;
    }
    for (size_t i = 0; i < nchoices; i++) {
        if (strcasecmp(v, choices[i]) == 0) {
            *out = i;
            return MSTAR_OK;
        }
    }
    /* The accepted values, as many whole ones as fit. */
    char accepted[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < nchoices; i++) {
        int n =
            snprintf(accepted + used, sizeof(accepted) - used, "%s%s", i ? ", " : "", choices[i]);
        if (n < 0 || (size_t)n >= sizeof(accepted) - used) {
            accepted[used] = '\0';
            break;
        }
        used += (size_t)n;
    }
    return mstar_error_set(MSTAR_EINVAL, "%s=%s is not one of: %s", name, v, accepted);
}

const char *mstar_env_get_string(const char *name, const char *def)
{
    const char *v = env_value(name);
    return v ? v : def;
}
