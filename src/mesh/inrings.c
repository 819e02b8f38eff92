/*
 * inrings.c — the receiving side of rings: the rings senders on this host handed to our bell,
 * read in turn, and armed before the entity's loop sleeps.
 *
 * A ring is held until it is empty and finished: its sender closed it, or made a newer one for
 * us (after a restart or after closing its peer), or died (checked only when the table is full,
 * with the pid the ring names: a wrong pid only keeps a ring longer). While an older ring of the
 * same sender still holds messages the newer one is not read, so one sender's messages arrive in
 * the order they were sent. A ring whose header or frames cannot be right is dropped, counted,
 * and logged; the receiver goes on with the others.
 *
 * Each ring's wake-up eventfd sits in the mesh's epoll set (mesh.c), edge-triggered and never
 * read: a sender's write makes the set readable once, and whoever harvests the set next (recv.c)
 * clears that. It leaves the set before it is closed: the sender holds the same eventfd, so
 * closing ours alone would leave it there, waking us for a ring we no longer have.
 */
#include "mesh_internal.h"
#include "spin_break.h"

#include "core/spare_cpu.h"
#include "core/vec.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static void drop_ring(mstar_mesh *mesh, size_t i, const char *why)
{
    mstar__inrings *in = &mesh->inrings;
    if (why != NULL && mstar__inbox_drop(&mesh->inbox)) {
        mstar_log(MSTAR_LOG_WARN, "mesh %s: dropped the ring from '%s' (%llu drops so far): %s",
                  mesh->entity, in->rings[i].ring.peer, (unsigned long long)mesh->inbox.dropped,
                  why);
    }
    mstar__ring *r = &in->rings[i].ring;
    if (r->wake_fd >= 0)
        epoll_ctl(mesh->poll_fd, EPOLL_CTL_DEL, r->wake_fd, NULL);
    mstar__ring_close(r, true);
    memmove(&in->rings[i], &in->rings[i + 1], (in->n - i - 1) * sizeof(in->rings[0]));
    in->n--;
    if (in->next > i)
        in->next--;
    if (in->next >= in->n)
        in->next = 0;
}

static bool sender_gone(const mstar__ring *r)
{
    int32_t pid = r->hdr->sender_pid;
    return atomic_load_explicit(&r->hdr->tx_closed, memory_order_acquire) != 0 ||
           (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH);
}

/* Free the rings that are empty and whose senders are done with them. */
static void sweep(mstar_mesh *mesh)
{
    mstar__inrings *in = &mesh->inrings;
    for (size_t i = in->n; i-- > 0;) {
        mstar__ring *r = &in->rings[i].ring;
        if (!mstar__ring_pending(r) && sender_gone(r))
            drop_ring(mesh, i, NULL);
    }
}

/* Keep a blob until its ring frame names it; the oldest goes when the table is full (its frame
 * will then be dropped as naming nothing). */
static void keep_blob(mstar_mesh *mesh, const char *sender, uint64_t seq, int fd)
{
    mstar__inrings *in = &mesh->inrings;
    if (in->nblobs == MSTAR__MESH_MAX_BLOBS) {
        if (mstar__inbox_drop(&mesh->inbox))
            mstar_log(MSTAR_LOG_WARN,
                      "mesh %s: dropped a blob from '%s' that no frame named (%llu drops so "
                      "far)",
                      mesh->entity, in->blobs[0].sender, (unsigned long long)mesh->inbox.dropped);
        close(in->blobs[0].fd);
        memmove(&in->blobs[0], &in->blobs[1], (in->nblobs - 1) * sizeof(in->blobs[0]));
        in->nblobs--;
    }
    mstar__blob *b = &in->blobs[in->nblobs++];
    snprintf(b->sender, sizeof(b->sender), "%s", sender);
    b->seq = seq;
    b->fd = fd;
}

/* Wake a refused sender that may be asleep in its own receive (with rings, it has a bell). */
static void tell_refused(mstar_mesh *mesh, const char *sender)
{
    int fd;
    if (mstar__bell_connect(&mesh->cfg, mesh->entity, sender, &fd) == MSTAR_OK) {
        mstar__bell_ring(fd, sender);
        close(fd);
    }
    mstar_error_clear();
}

/* Watch a ring's eventfd in the mesh's epoll set, edge-triggered (MSTAR__MESH_EV_RING). */
static mstar_status watch(mstar_mesh *mesh, const mstar__ring *r)
{
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = MSTAR__MESH_EV_RING };
    if (epoll_ctl(mesh->poll_fd, EPOLL_CTL_ADD, r->wake_fd, &ev) != 0)
        return mstar_error_set(MSTAR_EIO, "ring from '%s': epoll of its eventfd: %s", r->peer,
                               strerror(errno));
    return MSTAR_OK;
}

static void on_hello(void *ctx, const char *sender, const uint64_t *blob_seq, int fd, int wake_fd)
{
    mstar_mesh *mesh = ctx;
    mstar__inrings *in = &mesh->inrings;
    if (blob_seq != NULL) {
        keep_blob(mesh, sender, *blob_seq, fd);
        return;
    }
    if (in->n == MSTAR__MESH_MAX_RINGS)
        sweep(mesh);
    mstar__ring ring;
    mstar_status st = mstar__ring_attach(fd, sender, mesh->entity, &ring);
    if (st == MSTAR_OK)
        st = mstar__ring_attach_wake(&ring, wake_fd);
    else
        close(wake_fd);
    bool full = in->n == MSTAR__MESH_MAX_RINGS;
    if (st == MSTAR_OK && !full && (st = watch(mesh, &ring)) != MSTAR_OK)
        full = true; /* refused below: its sender goes another way */
    if (ring.map != NULL && (st != MSTAR_OK || full)) {
        /* Say so in the ring, so that its sender sends what it wrote there another way. */
        mstar__ring_refuse(&ring);
        tell_refused(mesh, sender);
        if (st == MSTAR_OK)
            st = mstar_error_set(MSTAR_ENOSPC, "%d rings are held already", MSTAR__MESH_MAX_RINGS);
    } else if (st == MSTAR_OK && !mstar__ring_accept(&ring)) {
        /* Withdrawn: its sender took another way meanwhile. */
        epoll_ctl(mesh->poll_fd, EPOLL_CTL_DEL, ring.wake_fd, NULL);
        mstar__ring_close(&ring, true);
        return;
    }
    if (st != MSTAR_OK) {
        if (mstar__inbox_drop(&mesh->inbox))
            mstar_log(MSTAR_LOG_WARN, "mesh %s: refused a ring from '%s': %s", mesh->entity, sender,
                      mstar_last_error());
        return;
    }
    mstar__inring *new = &in->rings[in->n++];
    new->ring = ring;
    new->behind = false;
    for (size_t i = 0; i + 1 < in->n; i++)
        if (strcmp(in->rings[i].ring.peer, sender) == 0)
            new->behind = true;
    mstar_log(MSTAR_LOG_DEBUG, "mesh %s: ring from '%s' attached (%llu bytes)", mesh->entity,
              sender, (unsigned long long)new->ring.cap);
}

/* Whether ring i may be read now: no older ring of its sender holds anything. An older one that
 * is empty is finished (its sender moved to ring i) and goes. */
static bool readable(mstar_mesh *mesh, size_t *i)
{
    mstar__inrings *in = &mesh->inrings;
    if (!in->rings[*i].behind)
        return true;
    for (size_t j = 0; j < *i; j++) {
        if (strcmp(in->rings[j].ring.peer, in->rings[*i].ring.peer) != 0)
            continue;
        if (mstar__ring_pending(&in->rings[j].ring))
            return false;
        drop_ring(mesh, j, NULL);
        (*i)--;
        j--;
    }
    in->rings[*i].behind = false;
    return true;
}

/* The blob `sender` numbered `seq`, taken out of the table (the caller closes the fd); -1 when
 * it has not arrived. */
static int take_blob(mstar__inrings *in, const char *sender, uint64_t seq)
{
    for (size_t i = 0; i < in->nblobs; i++) {
        if (in->blobs[i].seq != seq || strcmp(in->blobs[i].sender, sender) != 0)
            continue;
        int fd = in->blobs[i].fd;
        memmove(&in->blobs[i], &in->blobs[i + 1], (in->nblobs - i - 1) * sizeof(in->blobs[0]));
        in->nblobs--;
        return fd;
    }
    return -1;
}

/* Replace a blob frame in in->buf by the blob's bytes. The sender hands the blob to the bell
 * before it writes the frame, so a blob not in the table yet is in the bell's queue. */
static mstar_status fetch_blob(mstar_mesh *mesh, const char *sender, size_t *len)
{
    mstar__inrings *in = &mesh->inrings;
    uint64_t ref[2];
    memcpy(ref, in->buf, sizeof(ref));
    int fd = take_blob(in, sender, ref[0]);
    if (fd < 0) {
        mstar__bell_drain(mesh->bell_fd, mesh->entity, on_hello, mesh, &mesh->inbox);
        fd = take_blob(in, sender, ref[0]);
    }
    if (fd < 0)
        return mstar_error_set(MSTAR_EPROTO, "a frame names blob %llu, which never came",
                               (unsigned long long)ref[0]);
    mstar_status st = mstar__blob_read(fd, ref[1], &in->buf, &in->buf_cap);
    close(fd);
    if (st == MSTAR_OK)
        *len = (size_t)ref[1];
    return st;
}

/* Spinning pays while the peers answer within the bound: the two sides are running and a
 * frame comes before a sleep and a wake-up would have been over. When they do not (the peer is
 * idle, or waits for a core on a busy machine, where a spinning receiver takes the core its
 * peer needs), a spin is CPU time lost and a later wake-up: after SPIN_GIVE_UP spins in a row
 * that found nothing, only one wait in SPIN_PROBE spins, until one finds a frame again. On the
 * 2-core VM, 8 and 4 kept a spinning 4 KiB handoff at 10-12 µs p50 where 2 and 16 had given
 * up on it for good after the misses of a burst (docs/architecture.md). */
#define SPIN_GIVE_UP 8
#define SPIN_PROBE   4

/* A spin that ends just before its frame comes costs the spin and a wake-up too. Both sides of
 * a handoff sleep then, and each one's answer, a wake-up late, comes after the other's spin
 * ended: a Python pair on the 2-core VM, spinning 50 µs, took 40-60 µs a round trip that way
 * where spinning 1000 µs took 10-12 (docs/architecture.md). So a miss is settled when the next
 * frame is taken: one that came within SPIN_GROWTH bounds of the spin's end was a near miss (the
 * peer is answering, later than the bound): it doubles the bound, up to SPIN_GROWTH times
 * MSTAR_RING_SPIN_US, and does not count toward giving up. One that came later, or never, halves
 * the bound back toward MSTAR_RING_SPIN_US and counts. */
#define SPIN_GROWTH  16
#define SPIN_MOST_NS UINT64_C(1000000000) /* the most any bound grows to: MSTAR_RING_SPIN_US's */

static uint64_t spin_base_ns(const mstar_mesh *mesh)
{
    return (uint64_t)mesh->cfg.spin_us * 1000;
}

static uint64_t spin_most_ns(const mstar_mesh *mesh)
{
    uint64_t base = spin_base_ns(mesh), most = base * SPIN_GROWTH;
    return most > SPIN_MOST_NS ? (base > SPIN_MOST_NS ? base : SPIN_MOST_NS) : most;
}

/* The frame just taken settles the last miss (see SPIN_GROWTH). */
static void spin_settle(mstar_mesh *mesh)
{
    mstar__inrings *in = &mesh->inrings;
    uint64_t gap = mstar__now_ns() - in->missed_at, most = spin_most_ns(mesh);
    in->missed_at = 0;
    if (gap < most) {
        in->spin_ns = in->spin_ns > most / 2 ? most : in->spin_ns * 2;
        in->spin_misses -= in->spin_misses > 0;
    } else {
        uint64_t base = spin_base_ns(mesh);
        in->spin_ns = in->spin_ns / 2 < base ? base : in->spin_ns / 2;
    }
}

/* One frame from ring i: MSTAR_OK with *out, MSTAR_EAGAIN when it has none that decodes (a
 * broken ring is dropped: *i then names the next one). */
static mstar_status take_from(mstar_mesh *mesh, size_t *i, mstar_msg *out)
{
    mstar__inrings *in = &mesh->inrings;
    for (;;) {
        size_t len;
        bool blob;
        mstar__ring *r = &in->rings[*i].ring;
        mstar_status st = mstar__ring_read(r, &in->buf, &in->buf_cap, &len, &blob);
        if (st == MSTAR_EAGAIN)
            return st;
        if (st != MSTAR_OK) {
            drop_ring(mesh, *i, mstar_last_error());
            return MSTAR_ENOENT;
        }
        if (blob)
            st = fetch_blob(mesh, r->peer, &len);
        if (st == MSTAR_OK)
            st = mstar_msg_decode(in->buf, len, out);
        if (st == MSTAR_OK)
            return MSTAR_OK;
        if (mstar__inbox_drop(&mesh->inbox))
            mstar_log(MSTAR_LOG_WARN,
                      "mesh %s: dropped a frame of %zu bytes from the ring of '%s' (%llu so "
                      "far): %s",
                      mesh->entity, len, in->rings[*i].ring.peer,
                      (unsigned long long)mesh->inbox.dropped, mstar_last_error());
        if (--in->drops_left == 0) {
            in->busy = true;
            return MSTAR_EAGAIN;
        }
    }
}

mstar_status mstar__inrings_take(mstar_mesh *mesh, mstar_msg *out)
{
    mstar__inrings *in = &mesh->inrings;
    in->drops_left = MSTAR__MESH_DROP_BUDGET;
    in->busy = false;
    for (size_t tried = 0; tried < in->n && !in->busy;) {
        size_t i = in->next < in->n ? in->next : 0;
        if (!readable(mesh, &i)) {
            in->next = i + 1;
            tried++;
            continue;
        }
        mstar_status st = take_from(mesh, &i, out);
        if (st == MSTAR_OK) {
            in->next = i + 1;
            if (in->missed_at != 0)
                spin_settle(mesh);
            return MSTAR_OK;
        }
        if (st == MSTAR_EAGAIN) {
            in->next = i + 1;
            tried++;
        } else {
            in->next = i; /* dropped: the ring at i is another one now */
        }
    }
    return MSTAR_EAGAIN;
}

void mstar__inrings_drain(mstar_mesh *mesh)
{
    if (mesh->bell_fd >= 0)
        mstar__bell_drain(mesh->bell_fd, mesh->entity, on_hello, mesh, &mesh->inbox);
}

bool mstar__inrings_arm(mstar_mesh *mesh, bool may_spin)
{
    /* A spin may come next only from a loop that spins (mstar_mesh_spin; any other would cost
     * each of its senders their wait for a spin that never starts), while spinning has not
     * given up and a CPU is spare (mstar__inrings_spin). */
    const mstar__inrings *in = &mesh->inrings;
    uint32_t how = may_spin && in->loop_spins && mesh->cfg.spin_us > 0 &&
                           in->spin_misses < SPIN_GIVE_UP && mstar__cpu_spare(mstar__now_ns())
                       ? MSTAR__RING_ARMED_SPIN
                       : MSTAR__RING_ARMED;
    bool pending = false;
    mesh->inrings.armed = true;
    for (size_t i = 0; i < mesh->inrings.n; i++) {
        mstar__ring *r = &mesh->inrings.rings[i].ring;
        mstar__ring_arm(r, how);
        pending = pending || mstar__ring_pending(r);
    }
    return pending;
}

bool mstar__inrings_woken(const mstar_mesh *mesh)
{
    if (!mesh->inrings.armed)
        return false;
    for (size_t i = 0; i < mesh->inrings.n; i++) {
        const mstar__ring_hdr *h = mesh->inrings.rings[i].ring.hdr;
        if (atomic_load_explicit(&h->rx_waiting, memory_order_seq_cst) == MSTAR__RING_AWAKE)
            return true; /* or a ring attached since, which costs a harvest too */
    }
    return false;
}

bool mstar__inrings_pending(const mstar_mesh *mesh)
{
    for (size_t i = 0; i < mesh->inrings.n; i++)
        if (mstar__ring_pending(&mesh->inrings.rings[i].ring))
            return true;
    return false;
}

void mstar__mesh_spin_break(mstar_mesh *mesh)
{
    atomic_fetch_add_explicit(&mesh->spin_breaks, 1, memory_order_release);
}

/* Whether another thread broke the spin since the last spin saw it (spin_break.h). A break from
 * before this spin started counts too: the loop may have looked at its work before it came. */
static bool spin_broken(mstar_mesh *mesh)
{
    uint64_t breaks = atomic_load_explicit(&mesh->spin_breaks, memory_order_acquire);
    if (breaks == mesh->spin_breaks_seen)
        return false;
    mesh->spin_breaks_seen = breaks;
    return true;
}

bool mstar__inrings_spin(mstar_mesh *mesh, uint64_t deadline_ns)
{
    mstar__inrings *in = &mesh->inrings;
    if (mesh->cfg.spin_us <= 0 || in->n == 0)
        return false;
    if (in->spin_misses >= SPIN_GIVE_UP && ++in->spin_skips % SPIN_PROBE != 0)
        return false;
    /* Another task waits for a CPU: a spin would hold one it needs (spare_cpu.c). */
    uint64_t now = mstar__now_ns();
    if (!mstar__cpu_spare(now))
        return false;
    /* Awake while it spins: a sender need not wake it (a system call on each side). A sender
     * that took the flag since it was armed has woken it already: the edge it left in the epoll
     * set is for the next receive to clear, or a loop's poll would return at once. */
    bool woken = false;
    in->armed = false;
    for (size_t i = 0; i < in->n; i++)
        woken |= mstar__ring_disarm(&in->rings[i].ring) == MSTAR__RING_AWAKE;
    uint64_t end = now + in->spin_ns;
    bool whole = true; /* the spin may run its whole bound: only then can a miss settle it */
    if (deadline_ns != 0 && deadline_ns < end) {
        end = deadline_ns;
        whole = false;
    }
    bool spare = true;
    do {
        if (mstar__inrings_pending(mesh)) {
            in->spin_misses = in->spin_skips = 0;
            in->awake = !woken;
            return true;
        }
        /* Says nothing of the peers, so neither a hit nor a miss. */
        if (spin_broken(mesh)) {
            in->awake = !woken;
            return true;
        }
        mstar__cpu_relax();
        now = mstar__now_ns();
    } while (now < end && (spare = mstar__cpu_spare(now)));
    /* A spin cut short for a busy CPU says nothing of whether spinning pays. */
    in->spin_misses += spare && in->spin_misses < SPIN_GIVE_UP;
    in->missed_at = spare && whole ? now : 0;
    return false;
}

void mstar__inrings_close(mstar__inrings *in)
{
    for (size_t i = 0; i < in->n; i++)
        mstar__ring_close(&in->rings[i].ring, true);
    for (size_t i = 0; i < in->nblobs; i++)
        close(in->blobs[i].fd);
    free(in->rings);
    free(in->blobs);
    free(in->buf);
    memset(in, 0, sizeof(*in));
}
