/*
 * bench.h — the benchmark suites behind `mstar bench <suite>` (src/cli/cmd_bench.c). Each prints
 * its figures as ratios to a baseline measured in the same run and returns an exit code.
 */
#ifndef MSTAR_BENCH_H
#define MSTAR_BENCH_H

int mstar_bench_wire(int argc, char **argv);
int mstar_bench_bookkeeper(int argc, char **argv);
int mstar_bench_transport(int argc, char **argv);
int mstar_bench_graphs(int argc, char **argv);
/* bench_ucx.c: UCX get and AM reads against a raw loopback TCP stream. */
int mstar_bench_ucx(int argc, char **argv);

#endif
