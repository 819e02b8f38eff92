/*
 * bench_report.c — the report of `mstar bench all` (bench_report.h): report.md (machine,
 * targets, one section per suite with its table and ratios to the suite's baseline), the SVG
 * plots it links (transport_cuda*.svg only when transport-cuda ran), and report.json with the raw
 * numbers of every suite (each suite's own JSON).
 */
#include "bench_report.h"

#include "core/json.h"
#include "svg_plot.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (UINT64_C(1) << 20)

static const char *const suite_names[MSTAR_BENCH_NSUITES] = {
    "wire", "bookkeeper", "transport", "transport-ucx", "ucx", "transport-cuda", "graphs",
};

const char *mstar_bench_suite_name(mstar_bench_suite_id id)
{
    return id < MSTAR_BENCH_NSUITES ? suite_names[id] : "?";
}

static bool suite_ok(const mstar_bench_run *run, mstar_bench_suite_id id)
{
    return run->outcome[id].ran && run->outcome[id].ok;
}

size_t mstar_bench_run_targets(const mstar_bench_run *run, mstar_bench_target *out,
                               const char **suite, size_t cap)
{
    size_t n = 0;
    for (int id = 0; id < MSTAR_BENCH_NSUITES; id++) {
        mstar_bench_target t[MSTAR_BENCH_MAX_TARGETS];
        size_t k = 0;
        if (!suite_ok(run, (mstar_bench_suite_id)id))
            continue;
        if (id == MSTAR_BENCH_SUITE_BOOKKEEPER)
            k = mstar_bench_bookkeeper_targets(&run->bookkeeper, t);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT)
            k = mstar_bench_transport_targets(&run->transport, t);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT_UCX)
            k = mstar_bench_transport_targets(&run->transport_ucx, t);
        else if (id == MSTAR_BENCH_SUITE_UCX)
            k = mstar_bench_ucx_targets(&run->ucx, t);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT_CUDA)
            k = mstar_bench_transport_targets(&run->transport_cuda, t);
        else if (id == MSTAR_BENCH_SUITE_GRAPHS)
            k = mstar_bench_graphs_targets(&run->graphs, t);
        for (size_t i = 0; i < k && n < cap; i++) {
            suite[n] = suite_names[id];
            out[n++] = t[i];
        }
    }
    return n;
}

/* ---- plots ---------------------------------------------------------------------------------- */

#define PLOT_POINTS 16

/* The numbers behind one plot: each series' x and y, alive while the plot is written. */
typedef struct plot_data {
    mstar__plot plot;
    double x[MSTAR__PLOT_MAX_SERIES][PLOT_POINTS], y[MSTAR__PLOT_MAX_SERIES][PLOT_POINTS];
} plot_data;

/* Add the next series from its points; a full plot drops it (never the case for ours). */
static void add_series(plot_data *d, const char *name, size_t n, bool dashed)
{
    size_t s = d->plot.nseries;
    if (s < MSTAR__PLOT_MAX_SERIES)
        mstar__plot_add(&d->plot, name, d->x[s], d->y[s], n, dashed);
}

/* A horizontal baseline across [x0, x1]. */
static void add_level(plot_data *d, const char *name, double x0, double x1, double y)
{
    size_t s = d->plot.nseries;
    if (s >= MSTAR__PLOT_MAX_SERIES)
        return;
    d->x[s][0] = x0;
    d->x[s][1] = x1;
    d->y[s][0] = d->y[s][1] = y;
    add_series(d, name, 2, true);
}

/* A transport's rows (one kind, or the loans and views), as µs of the round trip (latency) or
 * GB/s. */
static void add_rows(plot_data *d, const mstar_bench_transport_row *rows, int nsizes,
                     const char *name, bool latency)
{
    size_t s = d->plot.nseries;
    if (s >= MSTAR__PLOT_MAX_SERIES)
        return;
    for (int i = 0; i < nsizes; i++) {
        d->x[s][i] = (double)rows[i].bytes;
        d->y[s][i] = latency ? rows[i].rt_p50_us : rows[i].gbps;
    }
    add_series(d, name, (size_t)nsizes, false);
}

/* The transport's rows of one kind. */
static void add_transport(plot_data *d, const mstar_bench_transport_result *t,
                          mstar_transport_kind kind, const char *name, bool latency)
{
    for (int k = 0; k < t->nkinds; k++)
        if (t->kinds[k] == kind)
            add_rows(d, t->rows[k], t->nsizes, name, latency);
}

/* One in-process baseline of a device run, GB/s per size (dashed). */
static void add_device_base(plot_data *d, const mstar_bench_transport_result *t, const double *gbps,
                            const char *name)
{
    size_t s = d->plot.nseries;
    if (s >= MSTAR__PLOT_MAX_SERIES)
        return;
    for (int i = 0; i < t->nsizes; i++) {
        d->x[s][i] = (double)t->rows[0][i].bytes;
        d->y[s][i] = gbps[i];
    }
    add_series(d, name, (size_t)t->nsizes, true);
}

/* One column of the UCX rows: `field` is the offsetof a double in mstar_bench_ucx_row. */
static void add_ucx(plot_data *d, const mstar_bench_ucx_result *u, size_t field, const char *name,
                    bool dashed)
{
    size_t s = d->plot.nseries;
    if (s >= MSTAR__PLOT_MAX_SERIES)
        return;
    size_t n = u->nrows < PLOT_POINTS ? u->nrows : PLOT_POINTS;
    for (size_t i = 0; i < n; i++) {
        d->x[s][i] = (double)u->rows[i].bytes;
        memcpy(&d->y[s][i], (const char *)&u->rows[i] + field, sizeof(double));
    }
    add_series(d, name, n, dashed);
}

/* The smallest and largest size the transport suites measured. */
static void size_span(const mstar_bench_run *run, double *lo, double *hi)
{
    *lo = INFINITY;
    *hi = 0;
    const mstar_bench_transport_result *t[2] = { &run->transport, &run->transport_ucx };
    for (int i = 0; i < 2; i++) {
        if (!suite_ok(run, i == 0 ? MSTAR_BENCH_SUITE_TRANSPORT : MSTAR_BENCH_SUITE_TRANSPORT_UCX))
            continue;
        *lo = fmin(*lo, (double)t[i]->rows[0][0].bytes);
        *hi = fmax(*hi, (double)t[i]->rows[0][t[i]->nsizes - 1].bytes);
    }
    if (suite_ok(run, MSTAR_BENCH_SUITE_UCX) && run->ucx.nrows > 0) {
        *lo = fmin(*lo, (double)run->ucx.rows[0].bytes);
        *hi = fmax(*hi, (double)run->ucx.rows[run->ucx.nrows - 1].bytes);
    }
}

static mstar_status transport_plot(const mstar_bench_run *run, bool latency, const char *path)
{
    plot_data *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "plot %s", path);
    mstar__plot_init(&d->plot,
                     latency ? "Latency by tensor size (round trips: p50; single reads: median)"
                             : "Throughput by tensor size");
    d->plot.x = (mstar__plot_axis){ "tensor size", 2, MSTAR__TICK_BYTES, 0, 0 };
    d->plot.y = latency ? (mstar__plot_axis){ "microseconds", 10, MSTAR__TICK_NUMBER, 0, 0 }
                        : (mstar__plot_axis){ "GB/s", 0, MSTAR__TICK_NUMBER, 0, 0 };
    const mstar_bench_transport_result *t = &run->transport;
    const mstar_bench_ucx_result *u = &run->ucx;
    if (suite_ok(run, MSTAR_BENCH_SUITE_TRANSPORT)) {
        add_transport(d, t, MSTAR_TRANSPORT_FILES, latency ? "files round trip" : "files", latency);
        add_transport(d, t, MSTAR_TRANSPORT_ARENA, latency ? "arena round trip" : "arena", latency);
        if (t->has_views)
            add_rows(d, t->views, t->nsizes,
                     latency ? "loans+views round trip" : "arena loans+views", latency);
    }
    if (suite_ok(run, MSTAR_BENCH_SUITE_TRANSPORT_UCX))
        add_transport(d, &run->transport_ucx, MSTAR_TRANSPORT_UCX_TCP,
                      latency ? "ucx-tcp round trip" : "ucx-tcp", latency);
    if (suite_ok(run, MSTAR_BENCH_SUITE_UCX)) {
        add_ucx(d, u,
                latency ? offsetof(mstar_bench_ucx_row, get_us)
                        : offsetof(mstar_bench_ucx_row, get_gbps),
                latency ? "UCX get, one read" : "UCX get", false);
        add_ucx(d, u,
                latency ? offsetof(mstar_bench_ucx_row, am_us)
                        : offsetof(mstar_bench_ucx_row, am_gbps),
                latency ? "UCX AM, one read" : "UCX AM", false);
        add_ucx(d, u,
                latency ? offsetof(mstar_bench_ucx_row, tcp_us)
                        : offsetof(mstar_bench_ucx_row, tcp_gbps),
                latency ? "TCP request (base)" : "TCP stream (base)", true);
    }
    double lo, hi;
    size_span(run, &lo, &hi);
    if (suite_ok(run, MSTAR_BENCH_SUITE_TRANSPORT)) {
        if (latency) {
            add_level(d, "ZeroMQ 64 B (base)", lo, hi, t->zmq_p50_us);
            if (t->ring_p50_us > 0) { /* a UCX-only run does not measure them */
                add_level(d, "mesh ring 4 KiB msg", lo, hi, t->ring_p50_us);
                add_level(d, "mesh ZeroMQ 4 KiB msg", lo, hi, t->mesh_zmq_p50_us);
            }
            if (t->has_arena_zmq)
                add_level(d, "arena 4 KiB via ZeroMQ", lo, hi, t->arena_zmq.rt_p50_us);
            if (t->futex.p50_us > 0)
                add_level(d, "futex ping-pong 4 B (floor)", lo, hi, t->futex.p50_us);
        } else
            add_level(d, "memcpy (base)", lo, hi, t->memcpy_gbps);
    }
    mstar__plot_fit(&d->plot);
    mstar_status st = mstar__plot_save(&d->plot, path);
    free(d);
    return st;
}

/* Device tensors between processes: both routes, with the in-process copies (throughput) or the
 * host arena's 4 KiB round trip (latency) as baselines. */
static mstar_status transport_cuda_plot(const mstar_bench_run *run, bool latency, const char *path)
{
    plot_data *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "plot %s", path);
    mstar__plot_init(&d->plot, latency ? "Device tensors between processes: round trip p50"
                                       : "Device tensors between processes: throughput");
    d->plot.x = (mstar__plot_axis){ "tensor size", 2, MSTAR__TICK_BYTES, 0, 0 };
    d->plot.y = latency ? (mstar__plot_axis){ "microseconds", 10, MSTAR__TICK_NUMBER, 0, 0 }
                        : (mstar__plot_axis){ "GB/s", 10, MSTAR__TICK_NUMBER, 0, 0 };
    const mstar_bench_transport_result *t = &run->transport_cuda;
    if (suite_ok(run, MSTAR_BENCH_SUITE_TRANSPORT_CUDA)) {
        for (int k = 0; k < t->nkinds; k++)
            add_rows(d, t->rows[k], t->nsizes, t->cuda_ipc[k] ? "CUDA IPC route" : "staged route",
                     latency);
        if (t->has_views)
            add_rows(d, t->views, t->nsizes, "CUDA IPC route, views", latency);
        double lo = (double)t->rows[0][0].bytes, hi = (double)t->rows[0][t->nsizes - 1].bytes;
        if (latency) {
            add_level(d, "host arena 4 KiB (base)", lo, hi, t->host_rt_p50_us);
        } else {
            add_device_base(d, t, t->d2d_gbps, "D2D copy, one process (base)");
            add_device_base(d, t, t->d2d_spread_gbps, "D2D copy, buffers in turn (ceiling)");
            add_device_base(d, t, t->staged_gbps, "pinned D2H + H2D, one process (base)");
        }
    }
    mstar__plot_fit(&d->plot);
    mstar_status st = mstar__plot_save(&d->plot, path);
    free(d);
    return st;
}

static mstar_status graphs_plot(const mstar_bench_run *run, const char *path)
{
    plot_data *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "plot %s", path);
    char title[96];
    snprintf(title, sizeof(title), "Decode step time by batch size (%s)",
             run->graphs.device[0] ? run->graphs.device : "not run");
    mstar__plot_init(&d->plot, title);
    d->plot.x = (mstar__plot_axis){ "batch size", 2, MSTAR__TICK_NUMBER, 0, 0 };
    d->plot.y = (mstar__plot_axis){ "microseconds per step", 10, MSTAR__TICK_NUMBER, 0, 0 };
    if (suite_ok(run, MSTAR_BENCH_SUITE_GRAPHS)) {
        static const struct {
            const char *name;
            size_t field;
            bool dashed;
        } series[] = {
            { "eager step", offsetof(mstar_bench_graphs_row, eager_step_us), false },
            { "replayed step", offsetof(mstar_bench_graphs_row, replay_step_us), false },
            { "runner replay", offsetof(mstar_bench_graphs_row, runner_us), false },
            { "raw replay (base)", offsetof(mstar_bench_graphs_row, raw_us), true },
        };
        for (size_t s = 0; s < sizeof(series) / sizeof(series[0]); s++) {
            for (size_t i = 0; i < MSTAR_BENCH_GRAPHS_SIZES; i++) {
                const mstar_bench_graphs_row *w = &run->graphs.rows[i];
                d->x[s][i] = (double)w->bs;
                memcpy(&d->y[s][i], (const char *)w + series[s].field, sizeof(double));
            }
            add_series(d, series[s].name, MSTAR_BENCH_GRAPHS_SIZES, series[s].dashed);
        }
    }
    mstar__plot_fit(&d->plot);
    mstar_status st = mstar__plot_save(&d->plot, path);
    free(d);
    return st;
}

/* ---- report.md ------------------------------------------------------------------------------ */

/* A suite's section heading; for a suite that failed, its error in place of the section's body.
 * Whether the suite has results to show. */
static bool md_section(FILE *f, const mstar_bench_run *run, mstar_bench_suite_id id,
                       const char *title)
{
    fprintf(f, "## %s\n\n", title);
    if (suite_ok(run, id))
        return true;
    fprintf(f, "**Failed** after %.1f s: %s\n\n", run->outcome[id].seconds, run->outcome[id].error);
    return false;
}

static void md_machine(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_machine *m = &run->machine;
    fprintf(f, "## Machine\n\n| | |\n|---|---|\n");
    fprintf(f, "| CPU | %s, %d cores online |\n", m->cpu, m->cores);
    fprintf(f, "| memory | %.1f GiB |\n", (double)m->memory_bytes / (1024.0 * MIB));
    fprintf(f, "| kernel | %s |\n", m->kernel[0] ? m->kernel : "unknown");
    fprintf(f, "| date | %s |\n", m->date);
    fprintf(f, "| commit | %s |\n", m->commit[0] ? m->commit : "unknown");
    fprintf(f, "| build | %s |\n", m->build);
    fprintf(f, "| device | the graphs suite on the %s backend; %s |\n\n",
            run->cuda ? "cuda" : "host",
            run->cuda ? "transport-cuda moves device tensors, the other transports host memory"
                      : "the transports move host memory");
}

static void md_targets(FILE *f, const mstar_bench_run *run)
{
    mstar_bench_target t[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    const char *suite[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    size_t n = mstar_bench_run_targets(run, t, suite, sizeof(t) / sizeof(t[0]));
    fprintf(f, "## Targets\n\nAs measured in this run; no test asserts them. n/a: the bar is set "
               "for a GPU and this run used the host backend.\n\n");
    fprintf(f, "| suite | target | bar | measured | |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "| %s | %s | %s | %s | %s |\n", suite[i], t[i].name, t[i].bar, t[i].shown,
                mstar_bench_verdict_name(t[i].verdict));
    fprintf(f, "\n");
}

/* One table: round trip and throughput as ratios to the suite's baselines, and for UCX to the
 * TCP stream measured next to each size. */
static void md_transport_table(FILE *f, const mstar_bench_transport_result *t, const char *name,
                               const mstar_bench_transport_row *rows, bool ucx)
{
    fprintf(f,
            "**%s**\n\n| size | round trip p50 µs | p99 µs | p50 / ZeroMQ | GB/s | / memcpy |%s\n"
            "|---|--:|--:|--:|--:|--:|%s\n",
            name, ucx ? " TCP stream GB/s | / TCP |" : "", ucx ? "--:|--:|" : "");
    for (int i = 0; i < t->nsizes; i++) {
        const mstar_bench_transport_row *w = &rows[i];
        char h[32];
        mstar_bench_size_name(w->bytes, h, sizeof(h));
        fprintf(f, "| %s | %.1f | %.1f | %.2fx | %.2f | %.2fx |", h, w->rt_p50_us, w->rt_p99_us,
                w->rt_p50_us / t->zmq_p50_us, w->gbps, w->gbps / t->memcpy_gbps);
        if (ucx)
            fprintf(f, " %.2f | %.2fx |", w->tcp_gbps, w->gbps / w->tcp_gbps);
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

/* One table per transport kind, then the arena's loans and views when they ran. */
static void md_transport_tables(FILE *f, const mstar_bench_transport_result *t)
{
    for (int k = 0; k < t->nkinds; k++)
        md_transport_table(f, t, mstar_transport_kind_name(t->kinds[k]), t->rows[k],
                           t->kinds[k] == MSTAR_TRANSPORT_UCX_TCP ||
                               t->kinds[k] == MSTAR_TRANSPORT_UCX_RDMA);
    if (t->has_views)
        md_transport_table(f, t, "arena, loans and views (no byte copied)", t->views, false);
}

/* The floor, and the arena's 4 KiB handoff per spin setting against it, with what it costs. */
static void md_floor(FILE *f, const mstar_bench_transport_result *t)
{
    const mstar_bench_floor *fx = &t->futex, *b = &t->busy;
    fprintf(f,
            "The floor under a handoff, in the same run: two processes ping-pong 4 bytes through "
            "shared memory. Woken by a futex: p50 **%.1f µs** (p99 %.1f µs), CPU time %.1f + %.1f "
            "µs and %.2f + %.2f context switches per round trip (one side + the other). Both "
            "sides busy-polling: p50 **%.2f µs** (p99 %.2f µs).\n\n",
            fx->p50_us, fx->p99_us, fx->cost.self.cpu_us, fx->cost.peer.cpu_us,
            fx->cost.self.vol_csw + fx->cost.self.invol_csw,
            fx->cost.peer.vol_csw + fx->cost.peer.invol_csw, b->p50_us, b->p99_us);
    if (t->has_calls) {
        char each[256];
        mstar_bench_calls_format(&t->calls, "µs", true, each, sizeof(each));
        fprintf(f,
                "The arena's 4 KiB handoff with both ends in one process, its calls alone (no "
                "cache line moving between cores, no side waiting), on each CPU in turn: %s a "
                "handoff. The spinning round trip below runs on two CPUs and moves with the "
                "slower, and with the busy-polling floor.\n\n",
                each);
    }
    if (t->nspins == 0)
        return;
    fprintf(f, "The arena's 4 KiB handoff with each side spinning on its rings before it sleeps "
               "(`MSTAR_RING_SPIN_US`), against the floor; CPU time and context switches per "
               "handoff, producer + consumer (means, as the mean round trip beside them: a side "
               "that spins uses about that):\n\n| spin µs | p50 µs | p99 µs | mean µs | "
               "p50 / futex | CPU µs | switches |\n|--:|--:|--:|--:|--:|--:|--:|\n");
    for (int i = 0; i < t->nspins; i++) {
        const mstar_bench_transport_row *w = &t->spins[i];
        fprintf(f, "| %d%s | %.1f | %.1f | %.1f | %.2fx | %.1f + %.1f | %.2f + %.2f |\n",
                t->spin_us[i], i == 0 ? " (the default)" : "", w->rt_p50_us, w->rt_p99_us,
                w->rt_mean_us, w->rt_p50_us / fx->p50_us, w->cost.self.cpu_us, w->cost.peer.cpu_us,
                w->cost.self.vol_csw + w->cost.self.invol_csw,
                w->cost.peer.vol_csw + w->cost.peer.invol_csw);
    }
    fprintf(f, "\n");
}

static void md_transport(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_transport_result *t = &run->transport;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_TRANSPORT,
                    "Transport: shared-memory files and arena"))
        return;
    fprintf(f,
            "`mstar bench transport`: a producer and a consumer process over the ipc control "
            "mesh. Round trip: store, stage, INPUT_SIGNALS, the consumer's read and release, "
            "TENSOR_RECEIVED, the producer's free. Throughput: %d handoffs in flight, best of "
            "3 to 12 rounds. Loans and views: the producer computes into an arena slot it "
            "loaned and the consumer reads it in place, so no byte is copied. Baselines in the "
            "same run: memcpy **%.2f GB/s** (one thread, 64 MiB); a "
            "raw ZeroMQ ipc ping-pong of 64 B, p50 **%.1f µs** (p99 %.1f µs).\n\n",
            t->in_flight, t->memcpy_gbps, t->zmq_p50_us, t->zmq_p99_us);
    fprintf(f,
            "The control mesh's own round trip of a 4 KiB message between two processes: over "
            "its shared-memory rings p50 **%.1f µs** (p99 %.1f µs, %.2fx the ZeroMQ ping-pong); "
            "over ZeroMQ p50 %.1f µs (p99 %.1f µs).\n\n",
            t->ring_p50_us, t->ring_p99_us, t->ring_p50_us / t->zmq_p50_us, t->mesh_zmq_p50_us,
            t->mesh_zmq_p99_us);
    if (t->has_arena_zmq)
        fprintf(f,
                "Every handoff below sends its control messages over the rings. The arena's "
                "4 KiB handoff with them over ZeroMQ instead (`MSTAR_MESH_RING=0`): p50 "
                "%.1f µs (p99 %.1f µs, %.2fx the ZeroMQ ping-pong).\n\n",
                t->arena_zmq.rt_p50_us, t->arena_zmq.rt_p99_us,
                t->arena_zmq.rt_p50_us / t->zmq_p50_us);
    md_floor(f, t);
    md_transport_tables(f, t);
    fprintf(f, "The plots carry the transport over UCX and the bare UCX reads of the next "
               "sections too, with their TCP baseline.\n\n![latency by size](transport_latency.svg)"
               "\n\n![throughput by size](transport_throughput.svg)\n\n");
}

static void md_transport_ucx(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_transport_result *t = &run->transport_ucx;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_TRANSPORT_UCX, "Transport over UCX on TCP"))
        return;
    fprintf(f,
            "`mstar bench transport --transport ucx-tcp`: the same handoffs, the consumer reading "
            "the producer's memory over UCX on loopback. Baselines in the same run: memcpy %.2f "
            "GB/s; ZeroMQ ping-pong p50 %.1f µs; and a raw loopback TCP stream of each size, "
            "one round of it before each round of the transport.\n\n",
            t->memcpy_gbps, t->zmq_p50_us);
    md_transport_tables(f, t);
}

static void md_ucx(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_ucx_result *u = &run->ucx;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_UCX, "UCX over TCP: remote reads"))
        return;
    fprintf(f,
            "`mstar bench ucx`: reads of a producer process's registered buffer over UCX on "
            "loopback (UCX_TLS=%s), by get and by active messages (the default: %s), against a "
            "raw TCP stream from a third process measured in the same run. Throughput: many "
            "reads outstanding, %llu MiB per point, best of 3; latency: one read at a time, "
            "median.\n\n",
            u->tls, u->protocol, (unsigned long long)(u->opts.volume / MIB));
    fprintf(f, "| size | TCP GB/s | get GB/s | get / TCP | AM GB/s | AM / TCP | TCP µs | get µs "
               "| AM µs |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (size_t i = 0; i < u->nrows; i++) {
        const mstar_bench_ucx_row *w = &u->rows[i];
        char h[32];
        mstar_bench_size_name(w->bytes, h, sizeof(h));
        fprintf(f, "| %s | %.2f | %.2f | %.2fx | %.2f | %.2fx | %.1f | %.1f | %.1f |\n", h,
                w->tcp_gbps, w->get_gbps, w->get_gbps / w->tcp_gbps, w->am_gbps,
                w->am_gbps / w->tcp_gbps, w->tcp_us, w->get_us, w->am_us);
    }
    fprintf(f, "\n");
}

static void md_transport_cuda(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_transport_result *t = &run->transport_cuda;
    if (!run->outcome[MSTAR_BENCH_SUITE_TRANSPORT_CUDA].ran ||
        !md_section(f, run, MSTAR_BENCH_SUITE_TRANSPORT_CUDA,
                    "Transport of device tensors: CUDA IPC and staged"))
        return;
    fprintf(f,
            "`mstar bench transport --device cuda`: the same handoffs with device tensors on "
            "cuda:0 in both processes, over the arena with MSTAR_CUDA_IPC=1 (device to device) "
            "and =0 (staged through pinned shared memory). Baselines in the same run, per size: "
            "a device-to-device copy between two buffers and pinned D2H then H2D in one "
            "process; and the arena's 4 KiB round trip of host tensors, p50 **%.1f µs** (p99 "
            "%.1f µs). Beside them, the route's ceiling: the same device-to-device copy into %d "
            "buffers in turn, as the route's reads land (D2D spread; up to 16 MiB the two-buffer "
            "copy runs from the GPU's L2, and these cannot).\n\n",
            t->host_rt_p50_us, t->host_rt_p99_us, t->in_flight + 1);
    for (int k = 0; k < t->nkinds; k++) {
        fprintf(f,
                "**%s**\n\n| size | round trip p50 µs | p99 µs | GB/s | D2D GB/s | D2D spread "
                "GB/s | D2H + H2D GB/s | / its baseline |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
                t->cuda_ipc[k] ? "CUDA IPC route" : "staged route");
        for (int i = 0; i < t->nsizes; i++) {
            const mstar_bench_transport_row *w = &t->rows[k][i];
            char h[32];
            mstar_bench_size_name(w->bytes, h, sizeof(h));
            double base = t->cuda_ipc[k] ? t->d2d_gbps[i] : t->staged_gbps[i];
            fprintf(f, "| %s | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %.2fx |\n", h,
                    w->rt_p50_us, w->rt_p99_us, w->gbps, t->d2d_gbps[i], t->d2d_spread_gbps[i],
                    t->staged_gbps[i], w->gbps / base);
        }
        fprintf(f, "\n");
    }
    if (t->has_views) {
        fprintf(f, "**CUDA IPC route, read as views** (`mstar_comm_start_read_views`: the consumer "
                   "uses the producer's memory in place; nothing is copied)\n\n| size | round "
                   "trip p50 µs | p99 µs | GB/s | / D2D |\n|---|--:|--:|--:|--:|\n");
        for (int i = 0; i < t->nsizes; i++) {
            const mstar_bench_transport_row *w = &t->views[i];
            char h[32];
            mstar_bench_size_name(w->bytes, h, sizeof(h));
            fprintf(f, "| %s | %.1f | %.1f | %.2f | %.2fx |\n", h, w->rt_p50_us, w->rt_p99_us,
                    w->gbps, w->gbps / t->d2d_gbps[i]);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "![device round trip by size](transport_cuda_latency.svg)\n\n"
               "![device throughput by size](transport_cuda_throughput.svg)\n\n");
}

static void md_graphs(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_graphs_result *g = &run->graphs;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_GRAPHS, "Graph runner: eager versus replay"))
        return;
    fprintf(f,
            "`mstar bench graphs --device %s`: the reference decode model (%s), prefilled, "
            "frozen decode steps, %d iterations each, back to back with one wait at the end. "
            "A step: declare, admit, plan, preprocess, forward or replay, release. "
            "Runner replay: a prepared step replayed through the runner (select + stage + "
            "launch); raw replay, the baseline: the same graph launched bare. Host overhead: "
            "the runner's host time per replay, against one bare launch call.%s\n\n",
            g->cuda ? "cuda" : "host", g->model, g->iters,
            g->cuda ? ""
                    : " On the host backend a replay runs the same C kernels over the bucket's "
                      "padded rows, so replay is not faster than eager here; graphs pay off on a "
                      "GPU.");
    fprintf(f, "| bs | eager step µs | replayed step µs | eager / replayed | runner replay µs | "
               "raw replay µs | runner / raw | host overhead µs | raw launch µs | overhead / "
               "launch |\n|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for (size_t i = 0; i < MSTAR_BENCH_GRAPHS_SIZES; i++) {
        const mstar_bench_graphs_row *w = &g->rows[i];
        fprintf(f, "| %lld | %.1f | %.1f | %.2fx | %.1f | %.1f | %.3fx | %.2f | %.2f | %.2fx |\n",
                (long long)w->bs, w->eager_step_us, w->replay_step_us,
                w->eager_step_us / w->replay_step_us, w->runner_us, w->raw_us,
                w->runner_us / w->raw_us, w->overhead_us, w->launch_us,
                w->overhead_us / w->launch_us);
    }
    fprintf(f, "\n![step time by batch size](graphs_steps.svg)\n\n");
}

static void md_bookkeeper(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_bookkeeper_result *b = &run->bookkeeper;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_BOOKKEEPER, "Bookkeeper"))
        return;
    fprintf(f,
            "`mstar bench bookkeeper`: store + dereference pairs per second on one core, %d "
            "tensors live, best of 5 runs of %ld pairs; the baseline is the bare hash map the "
            "bookkeeper indexes with.\n\n| | pairs/s | / hash map |\n|---|--:|--:|\n",
            b->window, b->pairs);
    for (size_t i = 0; i < MSTAR_BENCH_BOOKKEEPER_ROWS; i++)
        fprintf(f, "| %s | %.0f | %.2fx |\n", b->rows[i].name, b->rows[i].pairs_per_s,
                b->rows[i].pairs_per_s / b->rows[0].pairs_per_s);
    fprintf(f, "\n");
}

static void md_wire(FILE *f, const mstar_bench_run *run)
{
    const mstar_bench_wire_result *w = &run->wire;
    if (!md_section(f, run, MSTAR_BENCH_SUITE_WIRE, "Wire codec"))
        return;
    fprintf(f,
            "`mstar bench wire`: ns per message, fastest of %d rounds of %ld; baselines over the "
            "same bytes: memcpy and msgpuck's mp_check (a bare validating scan).\n\n"
            "| message | bytes | memcpy ns | mp_check ns | encode ns | decode ns | encode / "
            "mp_check | decode / mp_check |\n|---|--:|--:|--:|--:|--:|--:|--:|\n",
            w->rounds, w->iters);
    for (size_t i = 0; i < MSTAR_BENCH_WIRE_CASES; i++) {
        const mstar_bench_wire_row *r = &w->rows[i];
        fprintf(f, "| %s | %zu | %.1f | %.1f | %.1f | %.1f | %.1fx | %.1fx |\n", r->message,
                r->bytes, r->memcpy_ns, r->check_ns, r->encode_ns, r->decode_ns,
                r->encode_ns / r->check_ns, r->decode_ns / r->check_ns);
    }
    fprintf(f, "\n");
}

static void write_md(FILE *f, const mstar_bench_run *run)
{
    fprintf(f,
            "# Benchmark report\n\nMade by `%s`%s. Every figure sits next to the baseline "
            "its suite measured in the same run (memcpy, a raw ZeroMQ ping-pong, a raw TCP "
            "stream, the bare hash map, mp_check, a bare graph launch): the ratios are what "
            "compares across machines.\n\n",
            run->command, run->quick ? " (--quick: small counts, for tests; noisy)" : "");
    md_machine(f, run);
    md_targets(f, run);
    md_transport(f, run);
    md_transport_ucx(f, run);
    md_ucx(f, run);
    md_transport_cuda(f, run);
    md_graphs(f, run);
    md_bookkeeper(f, run);
    md_wire(f, run);
    fprintf(f, "## Run\n\n| suite | seconds | |\n|---|--:|---|\n");
    for (int id = 0; id < MSTAR_BENCH_NSUITES; id++)
        fprintf(f, "| %s | %.1f | %s |\n", suite_names[id], run->outcome[id].seconds,
                !run->outcome[id].ran ? "not run"
                : run->outcome[id].ok ? "ok"
                                      : "FAILED");
}

/* ---- report.json ---------------------------------------------------------------------------- */

static void json_machine(FILE *f, const mstar_bench_machine *m)
{
    const struct {
        const char *key, *value;
    } s[] = { { "cpu", m->cpu },
              { "kernel", m->kernel },
              { "date", m->date },
              { "commit", m->commit },
              { "build", m->build } };
    fprintf(f, "{\"cores\":%d,\"memory_bytes\":%llu", m->cores,
            (unsigned long long)m->memory_bytes);
    for (size_t i = 0; i < sizeof(s) / sizeof(s[0]); i++) {
        fprintf(f, ",\"%s\":", s[i].key);
        mstar__json_string(f, s[i].value);
    }
    fprintf(f, "}");
}

static void write_json(FILE *f, const mstar_bench_run *run)
{
    fprintf(f, "{\"command\":");
    mstar__json_string(f, run->command);
    fprintf(f, ",\"quick\":%s,\"device\":\"%s\",\"machine\":", run->quick ? "true" : "false",
            run->cuda ? "cuda" : "host");
    json_machine(f, &run->machine);
    mstar_bench_target t[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    const char *suite[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    size_t n = mstar_bench_run_targets(run, t, suite, sizeof(t) / sizeof(t[0]));
    fprintf(f, ",\n\"targets\":[");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s{\"suite\":\"%s\",\"name\":", i ? "," : "", suite[i]);
        mstar__json_string(f, t[i].name);
        fprintf(f, ",\"bar\":");
        mstar__json_string(f, t[i].bar);
        mstar_bench_json_field(f, "measured", t[i].measured, 4);
        fprintf(f, ",\"verdict\":\"%s\"}", mstar_bench_verdict_name(t[i].verdict));
    }
    fprintf(f, "],\n\"suites\":{");
    for (int id = 0; id < MSTAR_BENCH_NSUITES; id++) {
        const mstar_bench_outcome *o = &run->outcome[id];
        fprintf(f, "%s\n\"%s\":{\"ok\":%s,\"seconds\":", id ? "," : "", suite_names[id],
                o->ok ? "true" : "false");
        mstar__json_number(f, o->seconds, 4);
        fprintf(f, ",\"error\":");
        if (o->ok)
            fprintf(f, "null");
        else
            mstar__json_string(f, o->ran ? o->error : "not run");
        fprintf(f, ",\"result\":");
        if (!o->ok)
            fprintf(f, "null\n");
        else if (id == MSTAR_BENCH_SUITE_WIRE)
            mstar_bench_wire_json(&run->wire, f);
        else if (id == MSTAR_BENCH_SUITE_BOOKKEEPER)
            mstar_bench_bookkeeper_json(&run->bookkeeper, f);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT)
            mstar_bench_transport_json(&run->transport, f);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT_UCX)
            mstar_bench_transport_json(&run->transport_ucx, f);
        else if (id == MSTAR_BENCH_SUITE_UCX)
            mstar_bench_ucx_json(&run->ucx, f);
        else if (id == MSTAR_BENCH_SUITE_TRANSPORT_CUDA)
            mstar_bench_transport_cuda_json(&run->transport_cuda, f);
        else
            mstar_bench_graphs_json(&run->graphs, f);
        fprintf(f, "}");
    }
    fprintf(f, "}}\n");
}

/* ---- files ---------------------------------------------------------------------------------- */

typedef void (*write_fn)(FILE *f, const mstar_bench_run *run);

static mstar_status write_file(const char *dir, const char *name, write_fn fn,
                               const mstar_bench_run *run)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return mstar_error_set(MSTAR_EIO, "%s: %s", path, strerror(errno));
    fn(f, run);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed)
        return mstar_error_set(MSTAR_EIO, "%s: write failed", path);
    return MSTAR_OK;
}

static mstar_status transport_cuda_plots(const mstar_bench_run *run, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/transport_cuda_latency.svg", dir);
    mstar_status st = transport_cuda_plot(run, true, path);
    snprintf(path, sizeof(path), "%s/transport_cuda_throughput.svg", dir);
    return st == MSTAR_OK ? transport_cuda_plot(run, false, path) : st;
}

mstar_status mstar_bench_report_write(const mstar_bench_run *run, const char *dir)
{
    char path[3][4096];
    snprintf(path[0], sizeof(path[0]), "%s/transport_latency.svg", dir);
    snprintf(path[1], sizeof(path[1]), "%s/transport_throughput.svg", dir);
    snprintf(path[2], sizeof(path[2]), "%s/graphs_steps.svg", dir);
    mstar_status st = transport_plot(run, true, path[0]);
    if (st == MSTAR_OK)
        st = transport_plot(run, false, path[1]);
    if (st == MSTAR_OK)
        st = graphs_plot(run, path[2]);
    if (st == MSTAR_OK && run->outcome[MSTAR_BENCH_SUITE_TRANSPORT_CUDA].ran)
        st = transport_cuda_plots(run, dir);
    if (st == MSTAR_OK)
        st = write_file(dir, "report.md", write_md, run);
    if (st == MSTAR_OK)
        st = write_file(dir, "report.json", write_json, run);
    return st;
}
