/*
 * version.c — what this build is.
 */
#include "mstar/core.h"

const char *mstar_version_string(void)
{
    return MSTAR_VERSION_STRING;
}

bool mstar_built_with_cuda(void)
{
#ifdef MSTAR_HAVE_CUDA
    return true;
#else
    return false;
#endif
}
