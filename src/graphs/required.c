/*
 * required.c — fail_if_graphs_required (design.md "Startup"): a deployment that would rather
 * not come up than serve eager at 10–20× the latency sets MSTAR_REQUIRE_CUDA_GRAPHS=1, and then
 * any bucket dropped at startup (planned out, failed to capture, blocked) fails startup, named.
 */
#include "mstar/planner.h"

#include <stdio.h>
#include <string.h>

/* Append "a, b, c" to buf, ending in "... (N more)" when it does not fit. */
static void list_names(char *buf, size_t size, const char *const *names, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *name = names[i] ? names[i] : "?";
        size_t len = strlen(name);
        /* Room for this name, its separator, and a trailing "... (N more)". */
        if (used + len + 2 + 32 >= size) {
            snprintf(buf + used, size - used, "%s... (%zu more)", i ? ", " : "", n - i);
            return;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", name);
    }
}

mstar_status mstar_fail_if_graphs_required(const char *const *missing, size_t n)
{
    if (n > 0 && missing == NULL)
        return mstar_error_set(MSTAR_EINVAL, "missing is NULL with n %zu", n);
    bool required = false;
    mstar_status st = mstar_env_get_bool("MSTAR_REQUIRE_CUDA_GRAPHS", false, &required);
    if (st != MSTAR_OK)
        return st;
    if (n == 0)
        return MSTAR_OK;
    char list[768];
    list_names(list, sizeof(list), missing, n);
    if (required)
        return mstar_error_set(MSTAR_ESTATE,
                               "MSTAR_REQUIRE_CUDA_GRAPHS=1 and %zu bucket%s not captured: %s", n,
                               n == 1 ? " was" : "s were", list);
    mstar_log(MSTAR_LOG_WARN, "%zu bucket%s not captured and run%s eager: %s", n,
              n == 1 ? " was" : "s were", n == 1 ? "s" : "", list);
    return MSTAR_OK;
}
