/*
 * peers.c — the peer table: one PUSH socket per peer entity, connected on first send.
 *
 * Connecting lazily means a peer need not exist yet: ZeroMQ queues up to the high-water mark and
 * delivers once the peer's inbox is bound. Sends never block: a full queue is MSTAR_EAGAIN and
 * the caller decides (the loop keeps receiving, which is what lets a full peer drain). Typed
 * sends encode with the wire codec and hand the buffer to ZeroMQ without a copy.
 */
#include "mesh_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

static mstar_status connect_fail(mstar_mesh *mesh, void *sock, const char *endpoint,
                                 const char *what)
{
    int err = zmq_errno();
    if (sock != NULL)
        zmq_close(sock);
    return mstar_error_set(MSTAR_EIO, "mesh %s: %s %s: %s", mesh->entity, what, endpoint,
                           zmq_strerror(err));
}

/* Close the least recently used peer to make room for another. */
static void evict_lru(mstar_mesh *mesh)
{
    uint32_t it = 0;
    const char *key;
    size_t len;
    uint64_t val;
    char victim[MSTAR_NAME_MAX + 1] = "";
    size_t vlen = 0;
    uint64_t oldest = UINT64_MAX;
    while (mstar__strmap_next(&mesh->peers, &it, &key, &len, &val)) {
        const mstar__peer *p = (const mstar__peer *)(uintptr_t)val;
        if (p->used < oldest && len < sizeof(victim)) {
            oldest = p->used;
            memcpy(victim, key, len);
            vlen = len;
        }
    }
    if (oldest == UINT64_MAX || !mstar__strmap_remove(&mesh->peers, victim, vlen, &val))
        return;
    mstar__peer *p = (mstar__peer *)(uintptr_t)val;
    zmq_close(p->sock);
    free(p);
    mstar_log(MSTAR_LOG_DEBUG, "mesh %s: peer '%.*s' closed (%d peers open, least recently used)",
              mesh->entity, (int)vlen, victim, MSTAR__MESH_MAX_PEERS);
}

static mstar_status open_socket(mstar_mesh *mesh, const char *endpoint, void **out)
{
    void *sock = zmq_socket(mesh->ctx, ZMQ_PUSH);
    if (sock == NULL)
        return connect_fail(mesh, NULL, endpoint, "cannot create a socket for");
    int linger = 0;
    int hwm = MSTAR__MESH_SNDHWM;
    int ipv6 = mstar__mesh_ipv6(&mesh->cfg);
    if (zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_setsockopt(sock, ZMQ_IPV6, &ipv6, sizeof(ipv6)) != 0)
        return connect_fail(mesh, sock, endpoint, "cannot set the socket options for");
    if (zmq_connect(sock, endpoint) != 0)
        return connect_fail(mesh, sock, endpoint, "cannot connect to");
    *out = sock;
    return MSTAR_OK;
}

/* The connected PUSH socket for `peer`, creating it on first use. */
static mstar_status peer_socket(mstar_mesh *mesh, const char *peer, void **out)
{
    size_t len = strlen(peer);
    uint64_t *found = mstar__strmap_find(&mesh->peers, peer, len);
    if (found != NULL) {
        mstar__peer *p = (mstar__peer *)(uintptr_t)*found;
        p->used = ++mesh->peer_clock;
        *out = p->sock;
        return MSTAR_OK;
    }
    char endpoint[MSTAR__MESH_ENDPOINT_MAX];
    mstar_status st = mstar__mesh_endpoint_format(&mesh->cfg, peer, endpoint, sizeof(endpoint));
    if (st != MSTAR_OK)
        return mstar_error_wrap("mesh %s: peer", mesh->entity);
    if (mstar__strmap_len(&mesh->peers) >= MSTAR__MESH_MAX_PEERS)
        evict_lru(mesh);
    mstar__peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "mesh %s: peer '%s'", mesh->entity, peer);
    st = open_socket(mesh, endpoint, &p->sock);
    if (st == MSTAR_OK)
        st = mstar__strmap_put(&mesh->peers, peer, len, (uint64_t)(uintptr_t)p);
    if (st != MSTAR_OK) {
        if (p->sock != NULL)
            zmq_close(p->sock);
        free(p);
        return st;
    }
    p->used = ++mesh->peer_clock;
    *out = p->sock;
    return MSTAR_OK;
}

void mstar__peers_close(mstar__strmap *peers)
{
    uint32_t it = 0;
    const char *key;
    size_t len;
    uint64_t val;
    while (mstar__strmap_next(peers, &it, &key, &len, &val)) {
        mstar__peer *p = (mstar__peer *)(uintptr_t)val;
        zmq_close(p->sock);
        free(p);
    }
    mstar__strmap_free(peers);
}

static mstar_status send_fail(mstar_mesh *mesh, const char *peer)
{
    int err = zmq_errno();
    if (err == EAGAIN)
        return mstar_error_set(MSTAR_EAGAIN,
                               "mesh %s: the queue to '%s' is full (%d messages); receive and "
                               "retry",
                               mesh->entity, peer, MSTAR__MESH_SNDHWM);
    return mstar_error_set(MSTAR_EIO, "mesh %s: send to '%s': %s", mesh->entity, peer,
                           zmq_strerror(err));
}

/* Send `frame` to `peer` without blocking; the frame is consumed either way. */
static mstar_status send_frame(mstar_mesh *mesh, const char *peer, zmq_msg_t *frame)
{
    void *sock;
    mstar_status st = peer_socket(mesh, peer, &sock);
    if (st == MSTAR_OK) {
        for (;;) {
            if (zmq_msg_send(frame, sock, ZMQ_DONTWAIT) >= 0)
                return MSTAR_OK; /* ZeroMQ owns the frame now */
            if (zmq_errno() != EINTR)
                break;
        }
        st = send_fail(mesh, peer);
    }
    zmq_msg_close(frame);
    return st;
}

static mstar_status check_args(const char *fn, const mstar_mesh *mesh, const char *peer,
                               bool payload_ok)
{
    if (mesh != NULL && peer != NULL && payload_ok)
        return MSTAR_OK;
    return mstar_error_set(MSTAR_EINVAL, "%s: %s is NULL", fn,
                           mesh == NULL   ? "mesh"
                           : peer == NULL ? "peer"
                                          : "the payload");
}

mstar_status mstar_mesh_send_raw(mstar_mesh *mesh, const char *peer, const void *data, size_t len)
{
    mstar_status st = check_args("mstar_mesh_send_raw", mesh, peer, data != NULL || len == 0);
    if (st != MSTAR_OK)
        return st;
    zmq_msg_t frame;
    if (zmq_msg_init_size(&frame, len) != 0)
        return mstar_error_set(MSTAR_ENOMEM, "mesh %s: a %zu-byte frame to '%s': out of memory",
                               mesh->entity, len, peer);
    if (len > 0)
        memcpy(zmq_msg_data(&frame), data, len);
    return send_frame(mesh, peer, &frame);
}

/* ZeroMQ's deallocator for a frame that owns the encoder's buffer. */
static void free_encoded(void *data, void *hint)
{
    (void)hint;
    free(data);
}

mstar_status mstar_mesh_send(mstar_mesh *mesh, const char *peer, mstar_msg *msg)
{
    mstar_status st = check_args("mstar_mesh_send", mesh, peer, msg != NULL);
    if (st != MSTAR_OK)
        return st;
    memcpy(msg->from, mesh->entity, sizeof(msg->from));
    void *data;
    size_t len;
    st = mstar_msg_encode(msg, &data, &len);
    if (st != MSTAR_OK)
        return mstar_error_wrap("mesh %s: message to '%s'", mesh->entity, peer);
    /* The frame takes the buffer without a copy; ZeroMQ frees it once sent (or on close). */
    zmq_msg_t frame;
    if (zmq_msg_init_data(&frame, data, len, free_encoded, NULL) != 0) {
        free(data);
        return mstar_error_set(MSTAR_ENOMEM, "mesh %s: message to '%s': out of memory",
                               mesh->entity, peer);
    }
    st = send_frame(mesh, peer, &frame);
    if (st == MSTAR_OK && mesh->sent_hook != NULL)
        mesh->sent_hook(mesh->sent_ctx, peer, msg);
    return st;
}

size_t mstar_mesh_num_peers(const mstar_mesh *mesh)
{
    return mesh ? mstar__strmap_len(&mesh->peers) : 0;
}

mstar_status mstar_mesh_set_sent_hook(mstar_mesh *mesh, mstar_mesh_sent_fn fn, void *ctx)
{
    if (mesh == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mesh_set_sent_hook: mesh is NULL");
    if (fn != NULL && mesh->sent_hook != NULL)
        return mstar_error_set(MSTAR_EEXIST, "mesh %s: a sent hook is already set", mesh->entity);
    mesh->sent_hook = fn;
    mesh->sent_ctx = ctx;
    return MSTAR_OK;
}
