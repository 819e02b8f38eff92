/*
 * bench_util.c — what the suites of bench.h share: progress lines on stderr, size names, JSON
 * fields, percentiles and means of samples, the options of the simplest suites, and the printing
 * of targets.
 */
#include "bench.h"

#include "core/json.h"
#include "core/vec.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static bool progress_on;
static uint64_t progress_t0;

void mstar_bench_progress_enable(bool on)
{
    progress_on = on;
    if (on && progress_t0 == 0)
        progress_t0 = mstar__now_ns();
}

void mstar_bench_progress(const char *suite, const char *fmt, ...)
{
    if (!progress_on)
        return;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%7.1f s] %s: %s\n", (double)(mstar__now_ns() - progress_t0) * 1e-9, suite,
            what);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double mstar_bench_percentile(double *v, size_t n, double q)
{
    qsort(v, n, sizeof(double), cmp_double);
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

double mstar_bench_mean(const double *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return n > 0 ? sum / (double)n : 0;
}

void mstar_bench_size_name(uint64_t bytes, char *buf, size_t cap)
{
    if (bytes >= (UINT64_C(1) << 20) && bytes % (UINT64_C(1) << 20) == 0)
        snprintf(buf, cap, "%llu MiB", (unsigned long long)(bytes >> 20));
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, cap, "%llu KiB", (unsigned long long)(bytes >> 10));
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
}

void mstar_bench_json_field(FILE *out, const char *key, double v, int digits)
{
    fprintf(out, ",\"%s\":", key);
    mstar__json_number(out, v, digits);
}

bool mstar_bench_parse_flags(int argc, char **argv, const char *usage, bool *json, bool *quick)
{
    *json = *quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            *json = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            *quick = true;
        } else {
            fprintf(stderr, "%s\n", usage);
            return false;
        }
    }
    return true;
}

const char *mstar_bench_verdict_name(mstar_bench_verdict v)
{
    return v == MSTAR_BENCH_MET ? "met" : v == MSTAR_BENCH_NOT_MET ? "NOT met" : "n/a";
}

void mstar_bench_targets_print(const mstar_bench_target *t, size_t n, FILE *out)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-7s  %s %s: %s\n", mstar_bench_verdict_name(t[i].verdict), t[i].name,
                t[i].bar, t[i].shown);
}
