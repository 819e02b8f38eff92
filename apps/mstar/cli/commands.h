/*
 * commands.h — the subcommands of the `mstar` command. Each lives in its own cmd_<name>.c and
 * has the shape of a main(): it gets the arguments after its name and returns an exit code.
 */
#ifndef MSTAR_CLI_COMMANDS_H
#define MSTAR_CLI_COMMANDS_H

typedef int (*mstar_cli_fn)(int argc, char **argv);

typedef struct mstar_cli_command {
    const char *name;
    const char *summary;
    mstar_cli_fn run;
} mstar_cli_command;

int mstar_cmd_demo(int argc, char **argv);
int mstar_cmd_bench(int argc, char **argv);
int mstar_cmd_version(int argc, char **argv);

#endif
