/*
 * main.c — `mstar <command> [options]`: dispatch to the subcommands of commands.h.
 */
#include "commands.h"

#include "mstar/mstar.h"

#include <stdio.h>
#include <string.h>

static const mstar_cli_command commands[] = {
    { "demo", "serve a composite model across worker processes and check the results",
      mstar_cmd_demo },
    { "bench", "run benchmarks (transport, graphs, bookkeeper, all)", mstar_cmd_bench },
    { "version", "print the library version and build options", mstar_cmd_version },
};

static void usage(FILE *out)
{
    fprintf(out, "usage: mstar <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'mstar <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "mstar: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
