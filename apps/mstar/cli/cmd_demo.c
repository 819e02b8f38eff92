/*
 * cmd_demo.c — `mstar demo`: a composite model served across worker processes, end to end. The
 * demo lives in apps/mstar/demo/ (demo.h describes it); this is its entry in the command table.
 */
#include "commands.h"

#include "demo/demo.h"

int mstar_cmd_demo(int argc, char **argv)
{
    return demo_main(argc, argv);
}
