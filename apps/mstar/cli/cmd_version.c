/*
 * cmd_version.c — `mstar version`.
 */
#include "commands.h"

#include "mstar/mstar.h"

#include <stdio.h>

int mstar_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("mstar %s (CUDA backend: %s)\n", mstar_version_string(),
           mstar_built_with_cuda() ? "built" : "not built");
    return 0;
}
