/*
 * bench_phases.c — `mstar bench transport --size N --profile`: the library calls of one handoff,
 * timed where they run, producer and consumer (bench.h, mstar_bench_phase).
 *
 * The round trip of a small handoff is two wake-ups (or none, spinning) plus the work of each
 * side; this says how the work splits into the calls a serving loop makes, as the two processes
 * measure them. The samples live in one shared anonymous mapping made before the consumer is
 * forked: each process writes only the phases it runs, so the two never write one slot. A phase
 * keeps its first MSTAR_BENCH_PHASE_SAMPLES samples; the producer arms the page for the round
 * trips it times and disarms it before the throughput rounds.
 */
#include "bench.h"

#include "core/vec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MSTAR_BENCH_PHASE_SAMPLES 4096

struct mstar_bench_phases {
    _Atomic uint32_t armed;
    uint32_t count[MSTAR_BENCH_PHASES];
    uint32_t ns[MSTAR_BENCH_PHASES][MSTAR_BENCH_PHASE_SAMPLES];
};

static const char *const phase_names[MSTAR_BENCH_PHASES] = {
    [MSTAR_BENCH_PHASE_STORE] = "store",     [MSTAR_BENCH_PHASE_STAGE] = "stage",
    [MSTAR_BENCH_PHASE_BUILD] = "build",     [MSTAR_BENCH_PHASE_SEND] = "send",
    [MSTAR_BENCH_PHASE_ACK] = "ack",         [MSTAR_BENCH_PHASE_RECEIVE] = "receive",
    [MSTAR_BENCH_PHASE_READ] = "read",       [MSTAR_BENCH_PHASE_COLLECT] = "collect",
    [MSTAR_BENCH_PHASE_RELEASE] = "release",
};

const char *mstar_bench_phase_name(mstar_bench_phase phase)
{
    return phase >= 0 && phase < MSTAR_BENCH_PHASES ? phase_names[phase] : "?";
}

bool mstar_bench_phase_on_producer(mstar_bench_phase phase)
{
    return phase <= MSTAR_BENCH_PHASE_ACK;
}

mstar_bench_phases *mstar_bench_phases_create(void)
{
    void *p = mmap(NULL, sizeof(mstar_bench_phases), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p; /* zero-filled: disarmed, no samples */
}

void mstar_bench_phases_destroy(mstar_bench_phases *ph)
{
    if (ph != NULL)
        munmap(ph, sizeof(*ph));
}

void mstar_bench_phases_arm(mstar_bench_phases *ph, bool on)
{
    if (ph == NULL)
        return;
    if (on) /* the consumer is idle between handoffs: no phase of its is being written */
        memset(ph->count, 0, sizeof(ph->count));
    atomic_store_explicit(&ph->armed, on, memory_order_seq_cst);
}

uint64_t mstar_bench_phase_begin(const mstar_bench_phases *ph)
{
    /* Acquire: a side that sees the page armed sees the counts the arm cleared. */
    if (ph == NULL || atomic_load_explicit(&ph->armed, memory_order_acquire) == 0)
        return 0;
    return mstar__now_ns();
}

void mstar_bench_phase_end(mstar_bench_phases *ph, mstar_bench_phase phase, uint64_t begin)
{
    if (begin != 0)
        mstar_bench_phases_add(ph, phase, mstar__now_ns() - begin);
}

void mstar_bench_phases_add(mstar_bench_phases *ph, mstar_bench_phase phase, uint64_t ns)
{
    if (ph == NULL || phase < 0 || phase >= MSTAR_BENCH_PHASES ||
        ph->count[phase] >= MSTAR_BENCH_PHASE_SAMPLES)
        return;
    ph->ns[phase][ph->count[phase]++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void mstar_bench_phases_summarize(const mstar_bench_phases *ph, mstar_bench_phase_row *out)
{
    memset(out, 0, sizeof(*out));
    if (ph == NULL)
        return;
    uint32_t sorted[MSTAR_BENCH_PHASE_SAMPLES];
    for (int k = 0; k < MSTAR_BENCH_PHASES; k++) {
        uint32_t n = ph->count[k];
        out->calls[k] = n;
        if (n == 0)
            continue;
        memcpy(sorted, ph->ns[k], n * sizeof(sorted[0]));
        qsort(sorted, n, sizeof(sorted[0]), cmp_u32);
        out->p50_us[k] = sorted[n / 2] * 1e-3;
        out->p99_us[k] = sorted[(size_t)((n - 1) * 0.99)] * 1e-3;
    }
    /* What timing a call adds to it: two clock reads, the cheaper of a few tries. */
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 1000; i++) {
        uint64_t t0 = mstar__now_ns(), t1 = mstar__now_ns();
        best = t1 - t0 < best ? t1 - t0 : best;
    }
    out->clock_us = (double)best * 1e-3;
}
