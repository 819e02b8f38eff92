/* A program that uses the installed library, as a user would (tests/install/run.sh). */
#include <mstar/mstar.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    int64_t shape[2] = { 3, 4 };
    mstar_tensor t;
    float data[12];
    if (mstar_tensor_init(&t, data, mstar_device_cpu(), MSTAR_DTYPE_FLOAT32, 2, shape) != MSTAR_OK)
        return 1;
    if (mstar_tensor_nbytes(&t) != sizeof(data) || !mstar_tensor_is_contiguous(&t))
        return 1;
    mstar_dtype d;
    if (mstar_dtype_from_name("bfloat16", 8, &d) != MSTAR_OK || mstar_dtype_size(d) != 2)
        return 1;
    if (mstar_dtype_from_name("float99", 7, &d) != MSTAR_EINVAL || strlen(mstar_last_error()) == 0)
        return 1;
    printf("consumer: libmstar %s works\n", mstar_version_string());
    return 0;
}
