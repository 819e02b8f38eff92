/*
 * cmd_bench.c — `mstar bench <suite>`. Suites register here as they land
 * (apps/mstar/bench/bench.h); `mstar bench all` runs them all and writes the report
 * (apps/mstar/bench/bench_all.c).
 */
#include "commands.h"

#include "bench.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *summary;
    mstar_cli_fn run;
} suites[] = {
    { "wire", "encode and decode of control messages, against memcpy and mp_check",
      mstar_bench_wire },
    { "bookkeeper", "store + dereference pairs per second, against the bare hash map",
      mstar_bench_bookkeeper },
    { "transport",
      "tensor handoffs between two processes: round trip and throughput, against "
      "memcpy and a raw ZeroMQ ping-pong",
      mstar_bench_transport },
    { "graphs", "reference decode model: eager, replayed and raw-replay steps at bs 1, 8, 32, 64",
      mstar_bench_graphs },
    { "ucx", "remote reads over UCX/TCP (get, AM) against a raw loopback TCP stream",
      mstar_bench_ucx },
};

#define NSUITES (sizeof(suites) / sizeof(suites[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: mstar bench <suite> [options]\n\nsuites:\n");
    for (size_t i = 0; i < NSUITES; i++)
        fprintf(out, "  %-10s %s\n", suites[i].name, suites[i].summary);
    fprintf(out,
            "  %-10s every suite in one run, then a Markdown report with SVG plots\n"
            "             [--out DIR] [--quick] [--device host|cuda]\n",
            "all");
}

int mstar_cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "all") == 0)
        return mstar_bench_all(argc - 1, argv + 1);
    for (size_t i = 0; i < NSUITES; i++)
        if (strcmp(argv[1], suites[i].name) == 0)
            return suites[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mstar bench: unknown suite '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
