/*
 * bell.c — an entity's doorbell for its rings: a Unix datagram socket <ipc dir>/<entity>.bell.
 *
 * A sender on the same host connects to the receiver's bell and sends one datagram carrying the
 * sealed memfd of a new ring, the ring's wake-up eventfd and the sender's name (a hello); wake-ups
 * then go through that eventfd (ring.h), and an empty datagram here only when the sender checks
 * that the receiver still lives (peers.c) or its ring is full. A message too large for the ring
 * travels as a blob: a memfd sent here with its sequence number, which a small frame in the ring
 * then names, so that it still takes its place in the ring's order. A datagram socket is what lets
 * another process wake the receiver's event loop: it is an fd the loop can poll (the mesh puts it
 * beside the ZeroMQ inbox, mesh.c), it passes fds (SCM_RIGHTS) so that no ring ever has a name in a
 * directory, and a send to a receiver that died fails with ECONNREFUSED, which is how a sender
 * notices.
 *
 * The bell lives in the ipc directory, which is ours and 0700 (ipc.c); a sender still checks
 * that the name is a socket owned by this user before connecting, so a planted file or link is
 * not a route anywhere. Everything a datagram carries is checked on arrival and fds that come
 * with anything but a well-formed hello are closed.
 */
#include "mesh_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BELL_HELLO     "mstar-ring-hello 2 " /* + the sender's name; the memfd, the eventfd */
#define BELL_BLOB      "mstar-ring-blob 1 "  /* + 16 hex digits of the sequence number + ' ' */
#define BELL_SEQ_LEN   17
#define BELL_MAX_FDS   4
#define BELL_DATA_SIZE (sizeof(BELL_BLOB) + BELL_SEQ_LEN + MSTAR_NAME_MAX + 1)

static mstar_status bell_addr(const mstar__mesh_config *cfg, const char *entity,
                              struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "%s/%s.bell", cfg->ipc_dir, entity);
    if (n < 0 || (size_t)n >= sizeof(addr->sun_path))
        return mstar_error_set(MSTAR_EINVAL, "mesh %s: the bell path in '%s' is too long", entity,
                               cfg->ipc_dir);
    return MSTAR_OK;
}

static int dgram_socket(void)
{
    return socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

/* What sits at `entity`'s bell path: 0 nothing, 1 a socket of ours, -1 anything else. */
static int bell_kind(const mstar__mesh_config *cfg, const char *entity)
{
    char name[MSTAR_NAME_MAX + sizeof(".bell")];
    snprintf(name, sizeof(name), "%s.bell", entity);
    mstar_status st = mstar__ipc_socket_check(cfg->ipc_dir, name, "ring bell");
    mstar_error_clear();
    return st == MSTAR_OK ? 1 : st == MSTAR_ENOENT ? 0 : -1;
}

static int connect_to(int fd, const struct sockaddr_un *addr)
{
    int rc;
    do {
        rc = connect(fd, (const struct sockaddr *)addr, sizeof(*addr));
    } while (rc != 0 && errno == EINTR);
    return rc;
}

mstar_status mstar__bell_bind(const mstar__mesh_config *cfg, const char *entity, int *out,
                              mstar__ipc_file *file)
{
    struct sockaddr_un addr;
    mstar_status st = bell_addr(cfg, entity, &addr);
    if (st != MSTAR_OK)
        return st;
    int kind = bell_kind(cfg, entity);
    if (kind < 0)
        return mstar_error_set(MSTAR_EEXIST,
                               "mesh %s: %s is not a socket of this user; remove it to use rings",
                               entity, addr.sun_path);
    int fd = dgram_socket();
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "mesh %s: bell socket: %s", entity, strerror(errno));
    if (kind == 1) {
        /* The inbox bind already refused a live entity of this name: this is a dead one's. */
        unlink(addr.sun_path);
    }
    if (bind(fd, (const struct sockaddr *)&addr, sizeof(addr)) != 0) {
        int err = errno;
        close(fd);
        return mstar_error_set(MSTAR_EIO, "mesh %s: bind %s: %s", entity, addr.sun_path,
                               strerror(err));
    }
    st = mstar__ipc_file_record(file, addr.sun_path, addr.sun_path);
    if (st != MSTAR_OK) {
        close(fd);
        return st;
    }
    *out = fd;
    return MSTAR_OK;
}

mstar_status mstar__bell_connect(const mstar__mesh_config *cfg, const char *self, const char *peer,
                                 int *out)
{
    struct sockaddr_un addr;
    mstar_status st = bell_addr(cfg, peer, &addr);
    if (st != MSTAR_OK)
        return st;
    if (bell_kind(cfg, peer) != 1)
        return mstar_error_set(MSTAR_ENOENT,
                               "mesh %s: no ring bell of '%s' at %s (not running, not on this "
                               "host's ipc directory, or not ring-capable)",
                               self, peer, addr.sun_path);
    int fd = dgram_socket();
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "mesh %s: bell socket: %s", self, strerror(errno));
    if (connect_to(fd, &addr) != 0) {
        int err = errno;
        close(fd);
        return mstar_error_set(MSTAR_ENOENT, "mesh %s: the ring bell of '%s' (%s): %s", self, peer,
                               addr.sun_path, strerror(err));
    }
    *out = fd;
    return MSTAR_OK;
}

/* Send one datagram, with the `nfds` (at most 2) fds attached. */
static mstar_status bell_send(int fd, const char *peer, const void *data, size_t len,
                              const int *fds, size_t nfds)
{
    struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    if (nfds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    for (;;) {
        if (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
            return MSTAR_OK;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return mstar_error_set(MSTAR_EAGAIN, "mesh: the ring bell of '%s' is full", peer);
        if (errno == ECONNREFUSED || errno == ENOTCONN || errno == EPIPE || errno == ENOENT)
            return mstar_error_set(MSTAR_ECLOSED, "mesh: the receiver '%s' is gone (%s)", peer,
                                   strerror(errno));
        return mstar_error_set(MSTAR_EIO, "mesh: ringing '%s': %s", peer, strerror(errno));
    }
}

mstar_status mstar__bell_ring(int fd, const char *peer)
{
    mstar_status st = bell_send(fd, peer, "", 0, NULL, 0);
    if (st == MSTAR_EAGAIN)
        mstar_error_clear(); /* wakes are pending already: that is enough */
    return st == MSTAR_EAGAIN ? MSTAR_OK : st;
}

void mstar__bell_ring_self(int fd, const char *path)
{
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    size_t len = strlen(path);
    if (len >= sizeof(addr.sun_path))
        return;
    memcpy(addr.sun_path, path, len + 1);
    /* A full bell is readable already; nothing else can fail that matters here. */
    while (sendto(fd, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)&addr,
                  sizeof(addr)) != 0 &&
           errno == EINTR)
        continue;
}

mstar_status mstar__bell_hello(int fd, const char *self, const char *peer, const mstar__ring *ring)
{
    char data[BELL_DATA_SIZE];
    int n = snprintf(data, sizeof(data), BELL_HELLO "%s", self);
    int fds[2] = { ring->fd, ring->wake_fd };
    return bell_send(fd, peer, data, (size_t)n, fds, 2);
}

mstar_status mstar__bell_blob(int fd, const char *self, const char *peer, uint64_t seq, int blob_fd)
{
    char data[BELL_DATA_SIZE];
    int n = snprintf(data, sizeof(data), BELL_BLOB "%016llx %s", (unsigned long long)seq, self);
    return bell_send(fd, peer, data, (size_t)n, &blob_fd, 1);
}

/* The fds a datagram carried, into fds[] (at most BELL_MAX_FDS); returns how many. */
static size_t take_fds(struct msghdr *mh, int *fds)
{
    size_t n = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count && n < BELL_MAX_FDS; i++)
            memcpy(&fds[n++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
    return n;
}

/* "<16 hex digits> " at the start of `data`, into *seq. */
static bool parse_seq(const char *data, size_t len, uint64_t *seq)
{
    if (len < BELL_SEQ_LEN || data[BELL_SEQ_LEN - 1] != ' ')
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i + 1 < BELL_SEQ_LEN; i++) {
        char c = data[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *seq = v;
    return true;
}

/* A hello or blob datagram: the sender's name into name[], and for a blob its sequence number
 * (*is_blob set). NULL when well formed, else why not. */
static const char *parse(const char *data, size_t len, char *name, bool *is_blob, uint64_t *seq)
{
    size_t hello = strlen(BELL_HELLO), blob = strlen(BELL_BLOB);
    size_t at;
    *is_blob = len > blob && memcmp(data, BELL_BLOB, blob) == 0;
    if (*is_blob) {
        if (!parse_seq(data + blob, len - blob, seq))
            return "a blob without a sequence number";
        at = blob + BELL_SEQ_LEN;
    } else if (len > hello && memcmp(data, BELL_HELLO, hello) == 0) {
        at = hello;
    } else {
        return "neither a ring hello nor a blob";
    }
    if (len - at > MSTAR_NAME_MAX || len == at)
        return "the sender's name is too long or empty";
    if (mstar_name_validate(data + at, len - at, "ring sender") != MSTAR_OK)
        return mstar_last_error();
    memcpy(name, data + at, len - at);
    name[len - at] = '\0';
    return NULL;
}

/* One datagram: a wake (empty, no fd), a hello with its two fds or a blob with its one (handed
 * to fn), or garbage (its fds closed, counted). */
static void handle(const char *self, const char *data, size_t len, int *fds, size_t nfds,
                   mstar__bell_hello_fn fn, void *ctx, mstar__inbox *in)
{
    if (len == 0 && nfds == 0)
        return;
    char name[MSTAR_NAME_MAX + 1];
    bool is_blob = false;
    uint64_t seq = 0;
    const char *why = parse(data, len, name, &is_blob, &seq);
    if (why == NULL && nfds != (is_blob ? 1u : 2u))
        why = is_blob ? "a blob without exactly one fd" : "a hello without exactly two fds";
    if (why == NULL) {
        fn(ctx, name, is_blob ? &seq : NULL, fds[0], is_blob ? -1 : fds[1]); /* takes the fds */
        return;
    }
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    if (mstar__inbox_drop(in))
        mstar_log(MSTAR_LOG_WARN,
                  "mesh %s: dropped a bell datagram of %zu bytes with %zu fds (%llu drops so "
                  "far): %s",
                  self, len, nfds, (unsigned long long)in->dropped, why);
}

/* Datagrams taken per system call: a sleeping receiver is woken by one per ring at most, so one
 * call nearly always empties the bell (a second one, to see EAGAIN, cost a system call on every
 * wake-up). */
#define BELL_BATCH 8

bool mstar__bell_drain(int fd, const char *self, mstar__bell_hello_fn fn, void *ctx,
                       mstar__inbox *in)
{
    bool any = false;
    for (;;) {
        char data[BELL_BATCH][BELL_DATA_SIZE];
        struct iovec iov[BELL_BATCH];
        union {
            char buf[CMSG_SPACE(BELL_MAX_FDS * sizeof(int))];
            struct cmsghdr align;
        } ctl[BELL_BATCH];
        struct mmsghdr mm[BELL_BATCH];
        memset(mm, 0, sizeof(mm));
        for (int i = 0; i < BELL_BATCH; i++) {
            iov[i] = (struct iovec){ .iov_base = data[i], .iov_len = sizeof(data[i]) };
            mm[i].msg_hdr = (struct msghdr){ .msg_iov = &iov[i],
                                             .msg_iovlen = 1,
                                             .msg_control = ctl[i].buf,
                                             .msg_controllen = sizeof(ctl[i].buf) };
        }
        int got = recvmmsg(fd, mm, BELL_BATCH, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return any; /* EAGAIN: drained */
        }
        any = any || got > 0;
        for (int i = 0; i < got; i++) {
            struct msghdr *mh = &mm[i].msg_hdr;
            int fds[BELL_MAX_FDS];
            size_t nfds = take_fds(mh, fds);
            size_t n = mm[i].msg_len;
            if (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC))
                n = sizeof(data[i]) + 1; /* too long to be a hello: refused below */
            handle(self, data[i], n, fds, nfds, fn, ctx, in);
        }
        if (got < BELL_BATCH) /* it stopped where it would have waited: drained */
            return any;
    }
}
