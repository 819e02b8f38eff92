/*
 * peers.c — the peer table: one PUSH socket per peer entity, connected on first send.
 *
 * Connecting lazily means a peer need not exist yet: ZeroMQ queues up to the high-water mark and
 * delivers once the peer's inbox is bound. Sends never block: a full queue is MSTAR_EAGAIN and
 * the caller decides (the loop keeps receiving, which is what lets a full peer drain). Typed
 * sends encode with the wire codec and hand the buffer to ZeroMQ without a copy.
 *
 * A peer that is a ring-capable entity of this host (its bell exists, bell.c) gets a ring
 * instead of a socket, unless MSTAR_MESH_RING=0; a full ring is MSTAR_EAGAIN like a full queue.
 */
#include "mesh_internal.h"

#include "core/vec.h"
#include "wire/wire_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* Close whatever carries messages to a peer and free it. */
static void peer_free(mstar__peer *p)
{
    if (p->sock != NULL)
        zmq_close(p->sock);
    mstar__ring_close(&p->ring, false);
    if (p->bell_fd >= 0)
        close(p->bell_fd);
    for (size_t i = 0; i < p->nkept; i++)
        if (p->kept[i] >= 0)
            close(p->kept[i]);
    free(p);
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
    peer_free((mstar__peer *)(uintptr_t)val);
    mstar_log(MSTAR_LOG_DEBUG, "mesh %s: peer '%.*s' closed (%d peers open, least recently used)",
              mesh->entity, (int)vlen, victim, MSTAR__MESH_MAX_PEERS);
}

/* Drop a peer whose receiver went away, so that the next send chooses its route afresh. */
static void forget_peer(mstar_mesh *mesh, const char *peer)
{
    uint64_t val;
    if (mstar__strmap_remove(&mesh->peers, peer, strlen(peer), &val))
        peer_free((mstar__peer *)(uintptr_t)val);
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

/* A ring to `peer` on this host: connect its bell, make the ring, hand it over. */
static mstar_status open_ring(mstar_mesh *mesh, const char *peer, mstar__peer *p)
{
    mstar_status st = mstar__bell_connect(&mesh->cfg, mesh->entity, peer, &p->bell_fd);
    if (st == MSTAR_OK)
        st = mstar__ring_create(mesh->entity, peer, mesh->cfg.ring_cap, &p->ring);
    if (st == MSTAR_OK)
        st = mstar__bell_hello(p->bell_fd, mesh->entity, peer, &p->ring);
    if (st != MSTAR_OK) {
        mstar__ring_close(&p->ring, false);
        if (p->bell_fd >= 0)
            close(p->bell_fd);
        p->bell_fd = -1;
        return st;
    }
    p->offered_at = p->checked_at = mstar__now_ns();
    mesh->offers++;
    return MSTAR_OK;
}

/* Over ipc, what sits at the peer's inbox name before ZeroMQ connects to it: nothing yet is fine
 * (ZeroMQ connects once the peer binds, and only we can create names in our directory);
 * something that is not our socket is no route. */
static mstar_status check_inbox(mstar_mesh *mesh, const char *peer)
{
    if (mesh->cfg.transport != MSTAR_MESH_IPC)
        return MSTAR_OK;
    char name[MSTAR_NAME_MAX + sizeof(".ipc")];
    snprintf(name, sizeof(name), "%s.ipc", peer);
    mstar_status st = mstar__ipc_socket_check(mesh->cfg.ipc_dir, name, "mesh inbox");
    if (st == MSTAR_ENOENT) {
        mstar_error_clear();
        return MSTAR_OK;
    }
    return st == MSTAR_OK ? st : mstar_error_wrap("mesh %s: send to '%s'", mesh->entity, peer);
}

/* The route to a new peer: a ring when this mesh may use one and the peer is a ring-capable
 * entity of this host (it has a bell), else ZeroMQ, which also reaches a peer not bound yet. */
static mstar_status open_route(mstar_mesh *mesh, const char *peer, const char *endpoint,
                               mstar__peer *p)
{
    if (mesh->cfg.transport == MSTAR_MESH_IPC && mesh->cfg.ring != MSTAR__RING_OFF) {
        mstar_status st = open_ring(mesh, peer, p);
        if (st == MSTAR_OK)
            return MSTAR_OK;
        bool absent = st == MSTAR_ENOENT || st == MSTAR_ECLOSED;
        if (mesh->cfg.ring == MSTAR__RING_ON && absent)
            return mstar_error_set(MSTAR_EAGAIN, "%s (MSTAR_MESH_RING=1: retry once it runs)",
                                   mstar_last_error());
        if (!absent)
            return st;
        mstar_error_clear();
    }
    mstar_status st = check_inbox(mesh, peer);
    return st == MSTAR_OK ? open_socket(mesh, endpoint, &p->sock) : st;
}

/* The peer entry for `peer`, opening its route on first use. */
static mstar_status peer_get(mstar_mesh *mesh, const char *peer, mstar__peer **out)
{
    size_t len = strlen(peer);
    uint64_t *found = mstar__strmap_find(&mesh->peers, peer, len);
    if (found != NULL) {
        mstar__peer *p = (mstar__peer *)(uintptr_t)*found;
        p->used = ++mesh->peer_clock;
        *out = p;
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
    mstar__ring_init(&p->ring);
    p->bell_fd = -1;
    st = open_route(mesh, peer, endpoint, p);
    if (st == MSTAR_OK)
        st = mstar__strmap_put(&mesh->peers, peer, len, (uint64_t)(uintptr_t)p);
    if (st != MSTAR_OK) {
        peer_free(p);
        return st;
    }
    p->used = ++mesh->peer_clock;
    *out = p;
    return MSTAR_OK;
}

void mstar__peers_close(mstar__strmap *peers)
{
    uint32_t it = 0;
    const char *key;
    size_t len;
    uint64_t val;
    while (mstar__strmap_next(peers, &it, &key, &len, &val))
        peer_free((mstar__peer *)(uintptr_t)val);
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

/* Send `frame` on a peer's socket without blocking; the frame is consumed either way. */
static mstar_status send_frame(mstar_mesh *mesh, const char *peer, void *sock, zmq_msg_t *frame)
{
    for (;;) {
        if (zmq_msg_send(frame, sock, ZMQ_DONTWAIT) >= 0)
            return MSTAR_OK; /* ZeroMQ owns the frame now */
        if (zmq_errno() != EINTR)
            break;
    }
    mstar_status st = send_fail(mesh, peer);
    zmq_msg_close(frame);
    return st;
}

/* ZeroMQ's deallocator for a frame that owns the encoder's buffer. */
static void free_encoded(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* A frame of `len` bytes: *owned (NULL, or malloc'd and holding the bytes), when there is one,
 * is taken without a copy and set to NULL; otherwise the bytes are copied. */
static mstar_status make_frame(mstar_mesh *mesh, const char *peer, const void *data, size_t len,
                               void **owned, zmq_msg_t *frame)
{
    if (owned != NULL && *owned != NULL) {
        if (zmq_msg_init_data(frame, *owned, len, free_encoded, NULL) != 0)
            return mstar_error_set(MSTAR_ENOMEM, "mesh %s: a %zu-byte frame to '%s': out of memory",
                                   mesh->entity, len, peer);
        *owned = NULL;
        return MSTAR_OK;
    }
    if (zmq_msg_init_size(frame, len) == 0) {
        if (len > 0)
            memcpy(zmq_msg_data(frame), data, len);
        return MSTAR_OK;
    }
    return mstar_error_set(MSTAR_ENOMEM, "mesh %s: a %zu-byte frame to '%s': out of memory",
                           mesh->entity, len, peer);
}

/* A message too large to go inline: its bytes to the bell as a blob, then the frame naming it
 * (room for which is checked first, so that a blob is never sent without its frame). */
static mstar_status put_blob(mstar_mesh *mesh, const char *peer, mstar__peer *p, const void *data,
                             size_t len, bool *wake)
{
    *wake = false;
    if (len > MSTAR_WIRE_MAX_MESSAGE)
        return mstar_error_set(MSTAR_ERANGE,
                               "mesh %s: a %zu-byte message to '%s' is larger than any message "
                               "(%u bytes)",
                               mesh->entity, len, peer, (unsigned)MSTAR_WIRE_MAX_MESSAGE);
    if (!mstar__ring_has_room(&p->ring, 2 * sizeof(uint64_t)))
        return mstar__ring_write_blob(&p->ring, 0, 0, wake); /* says why: full, or broken */
    if (!p->accepted && p->blob_seq >= MSTAR__MESH_MAX_BLOBS)
        return mstar_error_set(MSTAR_EAGAIN,
                               "mesh %s: '%s' has not taken its ring yet (%d large messages "
                               "wait); receive and retry",
                               mesh->entity, peer, MSTAR__MESH_MAX_BLOBS);
    int fd;
    mstar_status st = mstar__blob_create(data, len, &fd);
    if (st != MSTAR_OK)
        return st;
    uint64_t seq = p->blob_seq++;
    st = mstar__bell_blob(p->bell_fd, mesh->entity, peer, seq, fd);
    if (st == MSTAR_OK)
        st = mstar__ring_write_blob(&p->ring, seq, len, wake);
    if (p->accepted) {
        close(fd);
        return st;
    }
    /* Until the receiver answers, keep the blob: if it refuses the ring, it goes again. */
    p->kept[seq] = st == MSTAR_OK ? fd : -1;
    p->nkept = (size_t)seq + 1;
    if (st != MSTAR_OK)
        close(fd);
    return st;
}

static mstar_status ring_put(mstar_mesh *mesh, const char *peer, mstar__peer *p, const void *data,
                             size_t len, bool *wake)
{
    if (mstar__ring_inline(&p->ring, len))
        return mstar__ring_write(&p->ring, data, len, wake);
    return put_blob(mesh, peer, p, data, len, wake);
}

/* Wake a peer's receiver, or see whether it still lives: the ring's eventfd wakes it with one
 * cheap write, but a write there succeeds whether or not anybody still watches it. A datagram to
 * the bell does both: it fails when the receiver is gone. So a wake goes to the bell instead when
 * the last one went there MSTAR__RING_LIVENESS_NS ago or more, and so does a send that finds the
 * receiver has read nothing since it was last woken that long ago (a receiver that died after
 * it was woken never asks again). MSTAR_ECLOSED when it is gone. */
static mstar_status wake_peer(mstar_mesh *mesh, const char *peer, mstar__peer *p, bool wake)
{
    uint64_t head = 0, now = 0;
    if (!wake) {
        if (!p->woken)
            return MSTAR_OK;
        head = atomic_load_explicit(&p->ring.hdr->head, memory_order_acquire);
        if (head != p->woken_head) {
            p->woken = false; /* it read since: alive */
            return MSTAR_OK;
        }
        now = mstar__now_ns();
        if (now - p->woken_at < MSTAR__RING_LIVENESS_NS)
            return MSTAR_OK;
    } else {
        now = mstar__now_ns();
        head = atomic_load_explicit(&p->ring.hdr->head, memory_order_acquire);
        p->woken = true;
        p->woken_head = head;
        p->woken_at = now;
        if (now - p->checked_at < MSTAR__RING_LIVENESS_NS) {
            mstar__ring_wake(&p->ring);
            return MSTAR_OK;
        }
    }
    p->checked_at = p->woken_at = now;
    return mstar__bell_ring(p->bell_fd, peer);
}

/* Write to a peer's ring. *gone is set when its receiver has let go of it or died. */
static mstar_status ring_send(mstar_mesh *mesh, const char *peer, mstar__peer *p, const void *data,
                              size_t len, bool *gone)
{
    *gone = atomic_load_explicit(&p->ring.hdr->rx_closed, memory_order_acquire) != 0;
    if (*gone)
        return mstar_error_set(MSTAR_ECLOSED, "mesh %s: '%s' closed its ring", mesh->entity, peer);
    bool wake;
    mstar_status st = ring_put(mesh, peer, p, data, len, &wake);
    if (st == MSTAR_OK) {
        mstar_status rung = wake_peer(mesh, peer, p, wake);
        *gone = rung == MSTAR_ECLOSED;
        if (rung != MSTAR_OK && !*gone)
            mstar_log(MSTAR_LOG_WARN, "mesh %s: %s", mesh->entity, mstar_last_error());
        mstar_error_clear();
        return MSTAR_OK;
    }
    /* The receiver's side of the ring is impossible, or it closed its bell. */
    *gone = st == MSTAR_EPROTO || st == MSTAR_ECLOSED;
    /* Ringing a full ring's receiver both wakes it and tells whether it still lives. */
    if (st == MSTAR_EAGAIN) {
        mstar_status rung = mstar__bell_ring(p->bell_fd, peer);
        *gone = rung == MSTAR_ECLOSED;
        if (rung != MSTAR_OK && !*gone)
            mstar_log(MSTAR_LOG_WARN, "mesh %s: %s", mesh->entity, mstar_last_error());
        if (!*gone)
            return mstar_error_set(MSTAR_EAGAIN,
                                   "mesh %s: the ring to '%s' is full (%llu bytes); receive and "
                                   "retry",
                                   mesh->entity, peer, (unsigned long long)p->ring.cap);
    }
    return st;
}

/* Close the blobs kept for a ring that has an answer now. */
static void drop_kept(mstar__peer *p)
{
    for (size_t i = 0; i < p->nkept; i++)
        if (p->kept[i] >= 0)
            close(p->kept[i]);
    p->nkept = 0;
}

/* Look for the receiver's answer to a peer's ring, and withdraw the ring once it has waited too
 * long for one (the hello, or its fd, was lost on the way). Accepted: the ring carries the peer
 * for good. Refused or withdrawn: the peer moves to ZeroMQ, the ring staying open until
 * flush_refused has sent what it holds. */
static mstar_status settle(mstar_mesh *mesh, const char *peer, mstar__peer *p)
{
    uint32_t a = mstar__ring_answer(&p->ring);
    if (a == MSTAR__RING_OFFERED) {
        if (mstar__now_ns() - p->offered_at < MSTAR__RING_ANSWER_NS)
            return MSTAR_OK;
        a = mstar__ring_withdraw(&p->ring) ? MSTAR__RING_WITHDRAWN : mstar__ring_answer(&p->ring);
    }
    p->accepted = a == MSTAR__RING_ACCEPTED;
    if (p->accepted) {
        drop_kept(p);
        return MSTAR_OK;
    }
    char endpoint[MSTAR__MESH_ENDPOINT_MAX];
    mstar_status st = mstar__mesh_endpoint_format(&mesh->cfg, peer, endpoint, sizeof(endpoint));
    if (st == MSTAR_OK)
        st = check_inbox(mesh, peer);
    if (st == MSTAR_OK)
        st = open_socket(mesh, endpoint, &p->sock);
    if (st != MSTAR_OK) {
        p->accepted = false; /* looked at again on the next send */
        return st;
    }
    mstar_log(MSTAR_LOG_WARN,
              "mesh %s: '%s' %s the ring; its messages go over ZeroMQ, those written to the "
              "ring first",
              mesh->entity, peer,
              a == MSTAR__RING_WITHDRAWN ? "did not answer for a second about" : "refused");
    return MSTAR_OK;
}

/* A refused ring's frames (never read by the receiver) go over ZeroMQ in order, then the ring
 * goes. MSTAR_EAGAIN when ZeroMQ's queue fills first: the rest goes on the next send. */
static mstar_status flush_refused(mstar_mesh *mesh, const char *peer, mstar__peer *p)
{
    mstar__ring view = p->ring; /* read as its receiver would have, from `reclaim` */
    view.pos = p->reclaim;
    uint8_t *buf = NULL;
    size_t cap = 0;
    mstar_status st;
    for (;;) {
        size_t len;
        bool blob;
        st = mstar__ring_read(&view, &buf, &cap, &len, &blob);
        if (st == MSTAR_OK && blob) {
            uint64_t ref[2];
            memcpy(ref, buf, sizeof(ref));
            int fd = ref[0] < p->nkept ? p->kept[ref[0]] : -1;
            st = fd >= 0 ? mstar__blob_read(fd, ref[1], &buf, &cap)
                         : mstar_error_set(MSTAR_EPROTO, "blob %llu was not kept",
                                           (unsigned long long)ref[0]);
            len = (size_t)ref[1];
        }
        zmq_msg_t frame;
        if (st == MSTAR_OK)
            st = make_frame(mesh, peer, buf, len, NULL, &frame);
        if (st == MSTAR_OK)
            st = send_frame(mesh, peer, p->sock, &frame);
        if (st != MSTAR_OK)
            break;
        p->reclaim = view.pos;
    }
    free(buf);
    if (st == MSTAR_EAGAIN && view.pos == p->reclaim && !mstar__ring_pending(&view))
        st = MSTAR_OK; /* all sent */
    else if (st != MSTAR_EAGAIN)
        mstar_log(MSTAR_LOG_ERROR, "mesh %s: the rest of the ring refused by '%s' is lost: %s",
                  mesh->entity, peer, mstar_last_error());
    if (st == MSTAR_EAGAIN)
        return st;
    mstar_error_clear();
    mstar__ring_close(&p->ring, false);
    if (p->bell_fd >= 0)
        close(p->bell_fd);
    p->bell_fd = -1;
    drop_kept(p);
    return MSTAR_OK;
}

void mstar__peers_settle(mstar_mesh *mesh)
{
    uint32_t it = 0;
    const char *key;
    size_t len;
    uint64_t val;
    size_t offers = 0;
    while (mstar__strmap_next(&mesh->peers, &it, &key, &len, &val)) {
        mstar__peer *p = (mstar__peer *)(uintptr_t)val;
        char peer[MSTAR_NAME_MAX + 1];
        if (p->ring.fd < 0 || len >= sizeof(peer))
            continue;
        memcpy(peer, key, len);
        peer[len] = '\0';
        mstar_status st = MSTAR_OK;
        if (p->sock == NULL && !p->accepted)
            st = settle(mesh, peer, p);
        if (st == MSTAR_OK && p->sock != NULL)
            st = flush_refused(mesh, peer, p);
        if (st != MSTAR_OK)
            mstar_error_clear(); /* the next send to the peer says it */
        offers += p->ring.fd >= 0 && (!p->accepted || p->sock != NULL);
    }
    mesh->offers = offers;
}

/* Send `len` bytes to `peer` on its route. `owned` (NULL, or where the malloc'd buffer holding
 * data is kept) lets a ZeroMQ frame take that buffer instead of a copy, setting *owned to NULL;
 * a ring copies the bytes, and the buffer stays the caller's. A receiver that went away since its
 * ring was made costs the ring, and the message is sent again on a fresh route (which reaches its
 * next incarnation, if any). */
static mstar_status deliver(mstar_mesh *mesh, const char *peer, const void *data, size_t len,
                            void **owned)
{
    mstar__peer *p;
    mstar_status st = peer_get(mesh, peer, &p);
    for (int attempt = 0; st == MSTAR_OK && p->sock == NULL; attempt++) {
        if (!p->accepted && (st = settle(mesh, peer, p)) != MSTAR_OK)
            break;
        if (p->sock != NULL)
            break; /* the ring was refused */
        bool gone;
        st = ring_send(mesh, peer, p, data, len, &gone);
        if (!gone)
            return st;
        if (!p->accepted && st != MSTAR_OK) {
            /* Closed before we saw an answer: if it was refused meanwhile, ZeroMQ takes over. */
            mstar_status settled = settle(mesh, peer, p);
            if (settled != MSTAR_OK || p->sock != NULL) {
                st = settled;
                break;
            }
        }
        mstar_log(MSTAR_LOG_WARN, "mesh %s: the receiver '%s' is gone; its ring is dropped",
                  mesh->entity, peer);
        forget_peer(mesh, peer);
        if (st == MSTAR_OK || attempt > 0)
            return st; /* written before it went, or gone twice in a row: lost, as over ZeroMQ */
        st = peer_get(mesh, peer, &p);
    }
    if (st == MSTAR_OK && p->ring.fd >= 0)
        st = flush_refused(mesh, peer, p); /* what the refused ring holds goes first */
    zmq_msg_t frame;
    if (st == MSTAR_OK)
        st = make_frame(mesh, peer, data, len, owned, &frame);
    return st == MSTAR_OK ? send_frame(mesh, peer, p->sock, &frame) : st;
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
    return deliver(mesh, peer, data, len, NULL);
}

mstar_status mstar_mesh_send(mstar_mesh *mesh, const char *peer, mstar_msg *msg)
{
    mstar_status st = check_args("mstar_mesh_send", mesh, peer, msg != NULL);
    if (st != MSTAR_OK)
        return st;
    memcpy(msg->from, mesh->entity, sizeof(msg->from));
    /* Encoded into the buffer the mesh keeps: a ring copies it in, so a message on a ring (a
     * handoff's route on one host) costs no allocation of its own; a ZeroMQ frame takes the
     * buffer, and the next message encodes into a new one. */
    size_t len;
    st = mstar__msg_encode_into(msg, &mesh->encoded, &mesh->encoded_cap, &len);
    if (st == MSTAR_OK)
        st = deliver(mesh, peer, mesh->encoded, len, &mesh->encoded);
    else
        st = mstar_error_wrap("mesh %s: message to '%s'", mesh->entity, peer);
    if (mesh->encoded == NULL || mesh->encoded_cap > MSTAR__MESH_KEEP_ENCODED) {
        free(mesh->encoded);
        mesh->encoded = NULL;
        mesh->encoded_cap = 0;
    }
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
