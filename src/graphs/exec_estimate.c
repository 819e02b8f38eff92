/*
 * exec_estimate.c — ExecutableMemory's arithmetic (design.md "Executable memory"): executable bytes
 * per graph node from device free-memory readings taken around instantiated copies of a graph.
 *
 * The driver maps executable memory in 2 MiB pieces and hands a new executable the rest of a
 * piece mapped earlier before it maps another, so one copy's drop in free memory says little;
 * a run of copies after the first one that maps fresh memory says a lot. Free memory is the
 * device's, shared with every other process, so each count is checked for the two signs of
 * someone else at work (free memory rising, or one copy taking far more than the rest) before
 * it is believed. Kept apart from the device so that all of this runs in CI on simulated series.
 */
#include "mstar/planner.h"

#include <stdint.h>
#include <string.h>

typedef struct count_result {
    bool counted; /* at least one copy after the first that took memory */
    bool kept;    /* counted, free memory never rose, no outlier copy */
    double rate;  /* bytes per node, >= 0 */
} count_result;

static count_result measure_count(const uint64_t *r, size_t copies, uint64_t nodes)
{
    count_result res = { false, false, 0.0 };
    bool rose = false;
    size_t first = 0; /* the first copy (1-based) that took free memory; 0 = none yet */
    for (size_t i = 1; i <= copies; i++) {
        if (r[i] > r[i - 1])
            rose = true;
        else if (r[i] < r[i - 1] && first == 0)
            first = i;
    }
    if (first == 0 || first == copies)
        return res;
    size_t counted = copies - first;
    /* Signed: with a rise inside the count, free memory may end above where counting began. */
    double bytes = (double)r[first] - (double)r[copies];
    double mean = bytes / (double)counted;
    bool outlier = false;
    for (size_t i = first + 1; i <= copies; i++) {
        double took = (double)r[i - 1] - (double)r[i];
        if (took > mean + 2.0 * (double)MSTAR_EXEC_PIECE_BYTES)
            outlier = true;
    }
    double rate = (bytes + (double)MSTAR_EXEC_PIECE_BYTES) / ((double)counted * (double)nodes);
    res.counted = true;
    res.kept = !rose && !outlier;
    res.rate = rate > 0.0 ? rate : 0.0;
    return res;
}

mstar_status mstar_exec_memory_estimate(const uint64_t *readings, size_t ncounts, size_t copies,
                                        uint64_t nodes, mstar_exec_estimate *out)
{
    if (readings == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "%s is NULL", readings == NULL ? "readings" : "out");
    if (ncounts == 0 || copies == 0 || nodes == 0)
        return mstar_error_set(MSTAR_EINVAL,
                               "executable memory: ncounts %zu, copies %zu and nodes %llu must all "
                               "be at least 1",
                               ncounts, copies, (unsigned long long)nodes);
    if (copies >= SIZE_MAX / 2 || ncounts > SIZE_MAX / (copies + 1))
        return mstar_error_set(MSTAR_ERANGE,
                               "executable memory: %zu counts of %zu copies is too many", ncounts,
                               copies);
    mstar_exec_estimate est;
    memset(&est, 0, sizeof(est));
    double best_kept = -1.0, best_any = -1.0;
    uint64_t dropped = 0;
    for (size_t c = 0; c < ncounts; c++) {
        const uint64_t *r = readings + c * (copies + 1);
        count_result res = measure_count(r, copies, nodes);
        if (r[0] > r[copies])
            dropped += r[0] - r[copies];
        if (!res.counted)
            continue;
        if (res.rate > best_any)
            best_any = res.rate;
        if (res.kept) {
            est.kept_counts++;
            if (res.rate > best_kept)
                best_kept = res.rate;
        }
    }
    if (best_any >= 0.0) {
        est.has_per_node = true;
        est.per_node = best_kept >= 0.0 ? best_kept : best_any;
        double cap = est.per_node * (double)nodes * (double)(ncounts * copies);
        est.held = (double)dropped < cap ? dropped : (uint64_t)cap;
    }
    *out = est;
    return MSTAR_OK;
}
