/*
 * wake.c — the eventfd that lets other threads wake an entity's loop.
 *
 * The reference system's read futures write 1 to an eventfd when they complete; the loop polls
 * it together with the inbox and drains it (architecture.md "Control mesh"). The counter makes
 * wakes cumulative, so none is lost between two drains.
 */
#include "mesh_internal.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

mstar_status mstar__wake_open(const char *entity, int *fd)
{
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
        return mstar_error_set(MSTAR_EIO, "mesh %s: eventfd: %s", entity, strerror(errno));
    *fd = efd;
    return MSTAR_OK;
}

bool mstar__wake_pending(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

mstar_status mstar_mesh_wake(mstar_mesh *mesh)
{
    if (mesh == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mesh_wake: mesh is NULL");
    uint64_t one = 1;
    for (;;) {
        if (write(mesh->wake_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
            return MSTAR_OK;
        /* EAGAIN: the counter is at its maximum, so a wake is pending already. */
        if (errno == EAGAIN)
            return MSTAR_OK;
        if (errno != EINTR)
            return mstar_error_set(MSTAR_EIO, "mesh %s: writing the wake eventfd: %s", mesh->entity,
                                   strerror(errno));
    }
}

uint64_t mstar_mesh_wake_drain(mstar_mesh *mesh)
{
    if (mesh == NULL)
        return 0;
    uint64_t count;
    for (;;) {
        if (read(mesh->wake_fd, &count, sizeof(count)) == (ssize_t)sizeof(count))
            return count;
        if (errno != EINTR)
            return 0; /* EAGAIN: nothing pending */
    }
}
