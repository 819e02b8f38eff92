/*
 * cuda_ipc_world.c — the CUDA IPC route's two-manager test world (cuda_ipc_world.h).
 */
#include "cuda_ipc_world.h"

#include "device/backend.h"
#include "tensors/comm_internal.h"
#include "tensors/cuda_ipc/cuda_ipc_test_hooks.h"
#include "tensors/transport.h"

#include <errno.h>
#include <unistd.h>

cuda_ipc_world *cuda_ipc_world_new(const char *name, bool async, const char *spin_us,
                                   const char *timeout_s)
{
    cuda_ipc_world *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    setenv("MSTAR_CUDA_IPC", "1", 1);
    setenv("MSTAR_CUDA_IPC_SPIN_US", spin_us, 1);
    if (timeout_s != NULL)
        setenv("MSTAR_CUDA_IPC_TIMEOUT_S", timeout_s, 1);
    w->dir = mstar_test_tmpdir(name);
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &w->bp));
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &w->bc));
    mstar__host_backend_set_async(w->bp, async);
    mstar__host_backend_set_async(w->bc, async);
    w->sp = (sender){ &w->b, "worker_0" };
    w->sc = (sender){ &w->b, "worker_1" };
    w->p = make_comm_with("worker_0", MSTAR_TRANSPORT_ARENA, w->dir, &w->sp, w->bp);
    w->c = make_comm_with("worker_1", MSTAR_TRANSPORT_ARENA, w->dir, &w->sc, w->bc);
    unsetenv("MSTAR_CUDA_IPC");
    unsetenv("MSTAR_CUDA_IPC_SPIN_US");
    unsetenv("MSTAR_CUDA_IPC_TIMEOUT_S");
    return w;
}

void cuda_ipc_world_free(cuda_ipc_world *w)
{
    mstar_comm_destroy(w->p);
    mstar_comm_destroy(w->c);
    bus_clear(&w->b);
    assert_int_equal(mstar_test_count_dir(w->dir), 0);
    mstar_backend_destroy(w->bp);
    mstar_backend_destroy(w->bc);
    free(w);
}

uint64_t cuda_ipc_opens(mstar_comm *c)
{
    uint64_t opens, mapped;
    mstar__transport_cuda_ipc_counts(c->transport, &opens, &mapped);
    return opens;
}

uint64_t cuda_ipc_mapped(mstar_comm *c)
{
    uint64_t opens, mapped;
    mstar__transport_cuda_ipc_counts(c->transport, &opens, &mapped);
    return mapped;
}

pid_t cuda_ipc_spawn_sleeper(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pause();
        _exit(0);
    }
    return pid;
}

void cuda_ipc_hold_stream(void *args)
{
    int fd;
    memcpy(&fd, args, sizeof(fd));
    char c;
    while (read(fd, &c, 1) < 0 && errno == EINTR) {
    }
}
