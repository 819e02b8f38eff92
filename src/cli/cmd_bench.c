/*
 * cmd_bench.c — `mstar bench <suite>`. Suites register here as they land.
 */
#include "commands.h"

#include <stdio.h>

int mstar_cmd_bench(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "mstar bench: no benchmark suite is built yet\n");
    return 2;
}
