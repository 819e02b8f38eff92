/*
 * bench_all.c — `mstar bench all [--out DIR] [--quick] [--device host|cuda]`: every suite of
 * bench.h in one process, each measuring its own baseline in the same run, with progress on
 * stderr; then the report (bench_report.c) in DIR, and the targets on stdout.
 *
 * Order: the suites that fork their peers (transport, ucx) run before the ones that start CUDA
 * in this process — transport-cuda (--device cuda only: it forks first, then measures its
 * in-process baselines) and graphs — as a process should not fork once a device runtime is up. A
 * suite that fails is recorded in the report with its error and the others still run; the exit code
 * is then 1.
 */
#include "bench_report.h"

#include "core/fs.h"
#include "core/vec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_OUT "bench-report"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mstar bench all [--out DIR] [--quick] [--device host|cuda]\n"
            "  runs every suite (wire, bookkeeper, transport over files and the arena, then over\n"
            "  ucx-tcp, ucx, transport-cuda, graphs) in one process and\n"
            "  writes DIR/report.md, DIR/report.json and SVG plots (DIR: %s, created if\n"
            "  missing). --quick: small counts, for tests (about half a minute); --device: where\n"
            "  the graphs suite runs (host); cuda also runs transport-cuda (device tensors\n"
            "  between processes, over CUDA IPC and staged).\n",
            DEFAULT_OUT);
}

/* The command line as typed, for the report: `mstar bench all ...`, arguments with spaces or
 * quotes in single quotes. */
static void command_line(int argc, char **argv, char *buf, size_t cap)
{
    size_t at = (size_t)snprintf(buf, cap, "mstar bench");
    for (int i = 0; i < argc && at < cap; i++) {
        bool plain = argv[i][0] != '\0' && strpbrk(argv[i], " \t'\"\\$`") == NULL;
        at += (size_t)snprintf(buf + at, cap - at, plain ? " %s" : " '%s'", argv[i]);
    }
}

static mstar_status run_suite(mstar_bench_run *run, mstar_bench_suite_id id)
{
    switch (id) {
    case MSTAR_BENCH_SUITE_WIRE:
        return mstar_bench_wire_run(run->quick, &run->wire);
    case MSTAR_BENCH_SUITE_BOOKKEEPER:
        return mstar_bench_bookkeeper_run(run->quick, &run->bookkeeper);
    case MSTAR_BENCH_SUITE_TRANSPORT: {
        mstar_transport_kind kinds[2] = { MSTAR_TRANSPORT_FILES, MSTAR_TRANSPORT_ARENA };
        return mstar_bench_transport_run(kinds, 2, run->quick, &run->transport);
    }
    case MSTAR_BENCH_SUITE_TRANSPORT_UCX: {
        mstar_transport_kind kind = MSTAR_TRANSPORT_UCX_TCP;
        return mstar_bench_transport_run(&kind, 1, run->quick, &run->transport_ucx);
    }
    case MSTAR_BENCH_SUITE_UCX: {
        mstar_bench_ucx_options o;
        mstar_bench_ucx_options_init(&o, run->quick);
        return mstar_bench_ucx_run(&o, &run->ucx);
    }
    case MSTAR_BENCH_SUITE_TRANSPORT_CUDA:
        return mstar_bench_transport_cuda_run(run->quick, &run->transport_cuda);
    case MSTAR_BENCH_SUITE_GRAPHS: {
        mstar_bench_graphs_options o = { .cuda = run->cuda, .quick = run->quick };
        return mstar_bench_graphs_run(&o, &run->graphs);
    }
    default:
        return mstar_error_set(MSTAR_EINVAL, "suite %d", (int)id);
    }
}

int mstar_bench_all(int argc, char **argv)
{
    const char *out_dir = DEFAULT_OUT;
    bool quick = false, cuda = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc && argv[i + 1][0] != '\0') {
            out_dir = argv[++i];
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "host") == 0 || strcmp(argv[i + 1], "cuda") == 0)) {
            cuda = strcmp(argv[++i], "cuda") == 0;
        } else {
            fprintf(stderr, "mstar bench all: bad option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (cuda && !mstar_built_with_cuda()) {
        fprintf(stderr, "mstar bench all: --device cuda, but this build has no CUDA backend\n");
        return 2;
    }
    /* Before measuring anything: an unwritable DIR fails now, not after the run. */
    if (mstar__mkdir_p("--out", out_dir, 0755) != MSTAR_OK) {
        fprintf(stderr, "mstar bench all: %s\n", mstar_last_error());
        return 1;
    }
    mstar_bench_run *run = calloc(1, sizeof(*run));
    if (run == NULL) {
        fprintf(stderr, "mstar bench all: out of memory\n");
        return 1;
    }
    run->quick = quick;
    run->cuda = cuda;
    command_line(argc, argv, run->command, sizeof(run->command));
    mstar_bench_machine_read(&run->machine);
    mstar_bench_progress_enable(true);
    int rc = 0;
    /* The Python suite first: it forks, and must run before a suite here starts CUDA. In --quick
     * runs (tests) only when MSTAR_BENCH_PYTHON names an interpreter: its start-up would
     * dominate a quick run otherwise. */
    bool want_python = !quick || getenv("MSTAR_BENCH_PYTHON") != NULL;
    bool python = want_python && mstar_bench_python_available();
    if (want_python && !python)
        mstar_bench_progress("python", "skipped: %s", mstar_last_error());
    if (python) {
        mstar_bench_progress("python", "start");
        if (mstar_bench_python_run(out_dir, quick) != MSTAR_OK) {
            fprintf(stderr, "mstar bench all: python failed: %s\n", mstar_last_error());
            python = false;
            rc = 1;
        }
    }
    for (int id = 0; id < MSTAR_BENCH_NSUITES; id++) {
        mstar_bench_outcome *o = &run->outcome[id];
        if (id == MSTAR_BENCH_SUITE_TRANSPORT_CUDA && !cuda)
            continue; /* not run: device tensors need --device cuda */
        const char *name = mstar_bench_suite_name((mstar_bench_suite_id)id);
        mstar_bench_progress(name, "start");
        uint64_t t0 = mstar__now_ns();
        mstar_status st = run_suite(run, (mstar_bench_suite_id)id);
        o->ran = true;
        o->ok = st == MSTAR_OK;
        o->seconds = (double)(mstar__now_ns() - t0) * 1e-9;
        if (!o->ok) {
            snprintf(o->error, sizeof(o->error), "%s", mstar_last_error());
            fprintf(stderr, "mstar bench all: %s failed: %s\n", name, o->error);
            rc = 1;
        }
        mstar_bench_progress(name, "%s in %.1f s", o->ok ? "done" : "FAILED", o->seconds);
    }
    mstar_bench_progress("report", "writing %s", out_dir);
    if (mstar_bench_report_write(run, out_dir) != MSTAR_OK) {
        fprintf(stderr, "mstar bench all: %s\n", mstar_last_error());
        free(run);
        return 1;
    }
    mstar_bench_target t[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    const char *suite[MSTAR_BENCH_NSUITES * MSTAR_BENCH_MAX_TARGETS];
    size_t n = mstar_bench_run_targets(run, t, suite, sizeof(t) / sizeof(t[0]));
    printf("mstar bench all%s: report in %s/report.md\n", quick ? " (quick)" : "", out_dir);
    mstar_bench_targets_print(t, n, stdout);
    if (python)
        mstar_bench_python_report(out_dir, stdout);
    free(run);
    return rc;
}
