/*
 * cmd_demo.c — `mstar demo`. The end-to-end demo arrives with the main-job issue; until then this
 * runs the parts of the system that exist and says what is coming.
 */
#include "commands.h"

#include "mstar/mstar.h"

#include <stdio.h>

int mstar_cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("mstar demo (preview): the end-to-end walk across worker processes is not built yet.\n");
    printf("What exists now: the core library (status, logging, knobs, dtypes, tensor views, ids).\n");
    int64_t shape[2] = { 4, 8 };
    float data[32];
    mstar_tensor t;
    if (mstar_tensor_init(&t, data, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape) != MSTAR_OK) {
        fprintf(stderr, "demo: %s\n", mstar_last_error());
        return 1;
    }
    printf("  a float32 [4, 8] tensor view: %llu bytes, contiguous: %s\n",
           (unsigned long long)mstar_tensor_nbytes(&t), mstar_tensor_is_contiguous(&t) ? "yes" : "no");
    printf("Coming: wire format and control mesh, one-host transport, graph runner, the demo.\n");
    return 0;
}
