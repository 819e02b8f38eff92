/*
 * bench_report.h — what `mstar bench all` (bench_all.c) collects in one run, and the report it
 * writes from it (bench_report.c): report.md with the machine, the targets, a section per suite
 * and SVG plots (svg_plot.h), and report.json with the raw numbers.
 */
#ifndef MSTAR_BENCH_REPORT_H
#define MSTAR_BENCH_REPORT_H

#include "bench.h"

typedef enum mstar_bench_suite_id {
    MSTAR_BENCH_SUITE_WIRE,
    MSTAR_BENCH_SUITE_BOOKKEEPER,
    MSTAR_BENCH_SUITE_TRANSPORT,     /* files and the arena */
    MSTAR_BENCH_SUITE_TRANSPORT_UCX, /* the transport over UCX on TCP, with its TCP stream */
    MSTAR_BENCH_SUITE_UCX,
    MSTAR_BENCH_SUITE_TRANSPORT_CUDA, /* device tensors between processes (--device cuda only) */
    MSTAR_BENCH_SUITE_GRAPHS,
    MSTAR_BENCH_NSUITES,
} mstar_bench_suite_id;

/* "wire", "bookkeeper", "transport", "transport-ucx", "ucx", "transport-cuda", "graphs". */
const char *mstar_bench_suite_name(mstar_bench_suite_id id);

typedef struct mstar_bench_machine {
    int cores;
    char cpu[128];
    uint64_t memory_bytes;
    char kernel[200];
    char date[40];   /* UTC */
    char commit[80]; /* of the source tree the binary was built from; "" if unknown */
    char build[96];  /* build type, sanitizers, CUDA backend built or not */
} mstar_bench_machine;

/* Read the summary; called when the run starts, so its date is the run's. */
void mstar_bench_machine_read(mstar_bench_machine *m);

typedef struct mstar_bench_outcome {
    bool ran, ok;
    double seconds;
    char error[256];
} mstar_bench_outcome;

typedef struct mstar_bench_run {
    char command[512];
    bool quick, cuda;
    mstar_bench_machine machine;
    mstar_bench_outcome outcome[MSTAR_BENCH_NSUITES];
    mstar_bench_wire_result wire;
    mstar_bench_bookkeeper_result bookkeeper;
    mstar_bench_transport_result transport;
    mstar_bench_transport_result transport_ucx;
    mstar_bench_ucx_result ucx;
    mstar_bench_transport_result transport_cuda;
    mstar_bench_graphs_result graphs;
} mstar_bench_run;

/* The targets of every suite that ran; returns their count (at most `cap`). */
size_t mstar_bench_run_targets(const mstar_bench_run *run, mstar_bench_target *out,
                               const char **suite, size_t cap);

/* Write report.md, report.json and the plots into `dir` (which must exist). */
mstar_status mstar_bench_report_write(const mstar_bench_run *run, const char *dir);

#endif
