/*
 * inbox.c — an entity's one bound PULL socket.
 *
 * Every peer's PUSH connects here; ZeroMQ keeps FIFO order per connection only, which is all the
 * protocol relies on. The receive size is capped at the largest message the codec accepts, so a
 * peer cannot make this process allocate more than that for one frame (ZeroMQ drops such a
 * peer's connection; it reconnects).
 */
#include "mesh_internal.h"

#include "core/vec.h"

#include <errno.h>
#include <string.h>
#include <zmq.h>

bool mstar__inbox_drop(mstar__inbox *in)
{
    in->dropped++;
    uint64_t now = mstar__now_ns();
    if (now - in->log_since >= UINT64_C(1000000000)) {
        in->log_since = now;
        in->log_lines = 0;
    }
    return in->log_lines++ < MSTAR__MESH_DROP_LOGS;
}

void mstar__inbox_init(mstar__inbox *in)
{
    memset(in, 0, sizeof(*in));
    in->fd = -1;
}

static mstar_status zmq_fail(const char *entity, const char *endpoint, const char *what)
{
    int err = zmq_errno();
    return mstar_error_set(err == EADDRINUSE ? MSTAR_EEXIST : MSTAR_EIO, "mesh %s: %s %s: %s",
                           entity, what, endpoint, zmq_strerror(err));
}

mstar_status mstar__inbox_bind(mstar__inbox *in, void *ctx, const mstar__mesh_config *cfg,
                               const char *entity, const char *endpoint)
{
    const char *ipc_path = endpoint + strlen("ipc://");
    mstar_status st;
    if (cfg->transport == MSTAR_MESH_IPC) {
        st = mstar__ipc_dir_ensure(cfg->ipc_dir, endpoint);
        if (st == MSTAR_OK)
            st = mstar__ipc_check_unbound(ipc_path, endpoint);
        if (st != MSTAR_OK)
            return st;
    }

    in->sock = zmq_socket(ctx, ZMQ_PULL);
    if (in->sock == NULL)
        return zmq_fail(entity, endpoint, "cannot create the inbox socket for");
    int linger = 0;
    int64_t max_size = MSTAR_WIRE_MAX_MESSAGE;
    int ipv6 = mstar__mesh_ipv6(cfg);
    if (zmq_setsockopt(in->sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(in->sock, ZMQ_MAXMSGSIZE, &max_size, sizeof(max_size)) != 0 ||
        zmq_setsockopt(in->sock, ZMQ_IPV6, &ipv6, sizeof(ipv6)) != 0)
        return zmq_fail(entity, endpoint, "cannot set the inbox options of");
    if (zmq_bind(in->sock, endpoint) != 0)
        return zmq_fail(entity, endpoint, "cannot bind");
    if (cfg->transport == MSTAR_MESH_IPC) {
        st = mstar__ipc_file_record(&in->file, ipc_path, endpoint);
        if (st != MSTAR_OK)
            return st;
    }
    size_t fd_size = sizeof(in->fd);
    if (zmq_getsockopt(in->sock, ZMQ_FD, &in->fd, &fd_size) != 0) {
        in->fd = -1;
        return zmq_fail(entity, endpoint, "cannot get the pollable fd of");
    }
    return MSTAR_OK;
}

void mstar__inbox_close(mstar__inbox *in)
{
    if (in->sock != NULL)
        zmq_close(in->sock);
    in->sock = NULL;
    in->fd = -1; /* owned by the socket */
}
