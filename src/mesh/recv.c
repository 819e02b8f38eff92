/*
 * recv.c — taking messages out of the inbox.
 *
 * Every frame is decoded by the strict codec; a frame that does not decode is logged with the
 * decoder's reason, counted and skipped, and the next frame is tried, so a peer sending garbage
 * costs the receiver only the time to reject it. PUSH/PULL carries no sender identity, so the
 * log line can only say what was wrong, not who sent it.
 *
 * Waiting polls the inbox together with the wake-up eventfd: a wake from another thread ends the
 * wait early (MSTAR_EAGAIN) and stays pending for the loop to drain. With rings (inrings.c) the
 * wait is one epoll_wait on the mesh's epoll set (mesh.c: the inbox, the bell, the wake-up
 * eventfd and every ring's eventfd), and every ring is armed before it so that a sender wakes
 * it. The rings' eventfds are never read: a wake-up costs the sender one write and the receiver
 * nothing beyond its wait. A receive that polls harvests the set instead (epoll_wait, timeout
 * 0), which also clears what woke a loop sleeping in its own poll() on the set.
 * Before that, a receive that may wait (and mstar_mesh_spin, for a loop that sleeps in its own
 * poll()) spins on the rings for MSTAR_RING_SPIN_US with the rings disarmed, so that a message
 * from a peer that is running costs neither side a system call (inrings.c says when it stops).
 * A receive that finds nothing says so with a text made when the mesh was (core/error.h): a
 * loop's empty poll comes once a handoff, on the way to the ACK.
 */
#include "mesh_internal.h"

#include "core/error.h"
#include "core/vec.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <string.h>
#include <zmq.h>

static void drop_frame(mstar_mesh *mesh, size_t len, const char *reason)
{
    if (mstar__inbox_drop(&mesh->inbox))
        mstar_log(MSTAR_LOG_WARN, "mesh %s: dropped a frame of %zu bytes (%llu so far): %s",
                  mesh->entity, len, (unsigned long long)mesh->inbox.dropped, reason);
}

/* Receive frames without waiting until one decodes: MSTAR_OK with *out filled, MSTAR_EAGAIN
 * when the inbox is empty, MSTAR_EIO when ZeroMQ fails. */
static mstar_status take_zmq(mstar_mesh *mesh, mstar_msg *out)
{
    mstar__inbox *in = &mesh->inbox;
    for (;;) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, in->sock, ZMQ_DONTWAIT) < 0) {
            int err = zmq_errno();
            zmq_msg_close(&frame);
            if (err == EINTR)
                continue;
            if (err == EAGAIN)
                return mstar__error_set_text(MSTAR_EAGAIN, mesh->no_message);
            return mstar_error_set(MSTAR_EIO, "mesh %s: receive: %s", mesh->entity,
                                   zmq_strerror(err));
        }
        size_t len = zmq_msg_size(&frame);
        bool part_of_multi = in->in_multipart || zmq_msg_more(&frame);
        in->in_multipart = zmq_msg_more(&frame) != 0;
        if (part_of_multi) {
            drop_frame(mesh, len, "part of a multi-frame message (one frame is one message)");
            zmq_msg_close(&frame);
            continue;
        }
        mstar_msg msg;
        mstar_status st = mstar_msg_decode(zmq_msg_data(&frame), len, &msg);
        zmq_msg_close(&frame);
        if (st == MSTAR_OK) {
            *out = msg;
            return MSTAR_OK;
        }
        drop_frame(mesh, len, mstar_last_error());
    }
}

/* One message from the rings or the ZeroMQ inbox, taking turns at which is asked first. The
 * inbox is skipped while it is known to be empty (mesh->zmq_ready false): asking costs ZeroMQ
 * a few system calls even then. */
static mstar_status take_one(mstar_mesh *mesh, mstar_msg *out)
{
    if (mesh->inrings.n == 0)
        return take_zmq(mesh, out);
    mesh->rings_first = !mesh->rings_first;
    if (mesh->rings_first && mstar__inrings_take(mesh, out) == MSTAR_OK)
        return MSTAR_OK;
    mstar_status st = MSTAR_EAGAIN;
    if (mesh->zmq_ready) {
        st = take_zmq(mesh, out);
        mesh->zmq_ready = st != MSTAR_EAGAIN;
        if (st != MSTAR_EAGAIN)
            return st;
    }
    if (!mesh->rings_first && mstar__inrings_take(mesh, out) == MSTAR_OK)
        return MSTAR_OK;
    return mstar__error_set_text(MSTAR_EAGAIN, mesh->no_message);
}

/* Events taken per epoll_wait: the inbox, the bell, the wake-up eventfd and a few rings. */
#define HARVEST_MAX 16

/* How often a look that does not wait asks ZeroMQ itself (confirm_inbox). */
#define CONFIRM_EVERY_NS UINT64_C(1000000)

/* ZMQ_FD is a hint, not a promise: a message can wait in the inbox while the fd stays quiet.
 * fuzz_mesh_senders found a ZeroMQ sender's messages stranded for seconds beside busy rings:
 * the inbox had said EAGAIN, the fd was not readable, and ZMQ_EVENTS said a message waited.
 * ZMQ_EVENTS has ZeroMQ process what is pending and says whether a message waits. A receive
 * asks it before it sleeps (asking once after each EAGAIN was not enough: the fuzzer still lost
 * a message in four runs of five). A look that does not wait asks it at most once a
 * millisecond, for a caller that sleeps in its own poll() on the set, which a stranded message
 * would not wake: asking at every such look made the Python package's spinning 4 KiB round
 * trip 0.5 µs slower. Returns whether it found a message the fd did not show. */
static bool confirm_inbox(mstar_mesh *mesh)
{
    if (mesh->zmq_ready)
        return false; /* it is asked at the next take anyway */
    int events = 0;
    size_t len = sizeof(events);
    if (zmq_getsockopt(mesh->inbox.sock, ZMQ_EVENTS, &events, &len) == 0 &&
        (events & ZMQ_POLLIN) == 0)
        return false;
    mesh->zmq_ready = true; /* a failure asks the inbox itself, as harvest's does */
    return true;
}

/* confirm_inbox for a look that does not wait: at most once every CONFIRM_EVERY_NS. */
static void confirm_inbox_now_and_then(mstar_mesh *mesh)
{
    if (mesh->zmq_ready)
        return; /* no clock read: it is asked at the next take anyway */
    uint64_t now = mstar__now_ns();
    if (now - mesh->zmq_asked_ns < CONFIRM_EVERY_NS)
        return;
    mesh->zmq_asked_ns = now;
    (void)confirm_inbox(mesh);
}

/* Take what the epoll set holds, waiting up to wait_ms (0: not at all, -1: for ever): note the
 * inbox readable (zmq_ready), a wake (*woken, and wake_edge until it is seen drained), and clear
 * the edges of the rings' eventfds. Returns whether the bell is readable. A look that does not
 * wait leaves `awake` as it was: the caller has not slept, and the edges a sender may have left
 * are cleared now, so its next empty receive need not look again (a system call of 0.3-1 µs,
 * which half the handoffs between two spinning loops paid when it was cleared here). */
static bool harvest(mstar_mesh *mesh, long wait_ms, bool *woken)
{
    mesh->inrings.unpolled = 0;
    if (wait_ms != 0)
        mesh->inrings.awake = false;
    bool bell = false;
    int timeout = wait_ms > INT_MAX ? INT_MAX : (int)wait_ms;
    for (;;) {
        struct epoll_event ev[HARVEST_MAX];
        int n = epoll_wait(mesh->poll_fd, ev, HARVEST_MAX, timeout);
        if (n < 0 && errno != EINTR) {
            mesh->zmq_ready = true; /* ask both, as without the set */
            return true;
        }
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == MSTAR__MESH_EV_INBOX)
                mesh->zmq_ready = true;
            else if (ev[i].data.u64 == MSTAR__MESH_EV_BELL)
                bell = true;
            else if (ev[i].data.u64 == MSTAR__MESH_EV_WAKE)
                mesh->wake_edge = *woken = true;
        }
        if (n < HARVEST_MAX) {
            if (wait_ms == 0) /* a wait asked before it slept */
                confirm_inbox_now_and_then(mesh);
            return bell;
        }
        timeout = 0; /* more are ready: take them too, so that none is left to wake a poll */
    }
}

/* Sleep until the inbox, the wake-up eventfd or the bell is readable, or a ring's sender wakes
 * us, or wait_ms passes; *woken tells a wake-up. Without rings, zmq_poll. With them, epoll_wait
 * on the mesh's set: take_zmq has received until EAGAIN (or knows the inbox is empty), which
 * leaves ZMQ_FD to signal what comes next, and zmq_poll's own checks would cost more than the
 * ring's whole round trip. */
static mstar_status wait_inputs(mstar_mesh *mesh, long wait_ms, bool *woken)
{
    if (mesh->bell_fd < 0) {
        *woken = mstar__wake_pending(mesh->wake_fd);
        if (*woken)
            return MSTAR_OK;
        zmq_pollitem_t items[2] = {
            { .socket = mesh->inbox.sock, .events = ZMQ_POLLIN },
            { .fd = mesh->wake_fd, .events = ZMQ_POLLIN },
        };
        if (zmq_poll(items, 2, wait_ms) < 0 && zmq_errno() != EINTR)
            return mstar_error_set(MSTAR_EIO, "mesh %s: poll: %s", mesh->entity,
                                   zmq_strerror(zmq_errno()));
        *woken = items[1].revents != 0;
        return MSTAR_OK;
    }
    /* The wake eventfd's edge went to an earlier harvest: a wake may still be pending. */
    if (mesh->wake_edge) {
        *woken = mstar__wake_pending(mesh->wake_fd);
        if (*woken)
            return MSTAR_OK;
        mesh->wake_edge = false;
    }
    if (confirm_inbox(mesh)) /* a message the fd does not show would wait out the sleep */
        return MSTAR_OK;
    if (harvest(mesh, wait_ms, woken))
        mstar__inrings_drain(mesh);
    return MSTAR_OK;
}

/* For a caller that does not wait: which of ZeroMQ's inbox and the bell may have something, in
 * one epoll_wait (one system call) instead of a ZeroMQ receive that finds the inbox empty (two
 * or three) and a receive on the bell; it also clears the edges that woke a caller polling the
 * set. Once the inbox has said EAGAIN, anything arriving makes ZMQ_FD readable until ZeroMQ
 * processes it, so a quiet fd means a quiet inbox; the bell is a datagram socket, readable while
 * it holds one. Returns whether the bell is to be drained. */
static bool note_ready_sources(mstar_mesh *mesh)
{
    if (mesh->bell_fd < 0)
        return true;
    /* A frame already in a ring needs no system call to find, and neither does a caller whose
     * rings are empty but whose last spin found a frame (it has not slept since, so nothing
     * woke it that needs clearing). The inbox and the bell are asked at least every
     * MSTAR__MESH_UNPOLLED_MAX calls, so that a busy ring keeps neither waiting long, and at
     * once after a spin that found nothing (mstar_mesh_spin), after which the caller may have
     * slept. A system call costs 1-2 µs on the 2-core VM the bench runs on, where a whole
     * handoff between two spinning sides takes a few. */
    mstar__inrings *in = &mesh->inrings;
    if (in->awake && mstar__inrings_woken(mesh))
        in->awake = false; /* a sender woke it after all: its edge waits to be cleared */
    if (in->unpolled < MSTAR__MESH_UNPOLLED_MAX && (in->awake || mstar__inrings_pending(mesh))) {
        in->unpolled++;
        return false;
    }
    bool woken = false;
    return harvest(mesh, 0, &woken);
}

/* Whether a receive must give up now, after its first pass: a poll (timeout 0) at once, a wait
 * once its deadline has passed. This bounds a receive that keeps finding frames to take and
 * only garbage among them (a ring flooded by a hostile peer). */
static bool expired(int timeout_ms, uint64_t deadline)
{
    return timeout_ms == 0 || (timeout_ms > 0 && mstar__now_ns() >= deadline);
}

/* Give up for now. When frames are still waiting in a ring, ring our own bell: a caller that
 * polls the mesh's fd next is woken to come back for them. */
static mstar_status give_up(mstar_mesh *mesh, int timeout_ms)
{
    if (mesh->bell_fd >= 0 && (mesh->inrings.busy || mstar__inrings_arm(mesh, false)))
        mstar__bell_ring_self(mesh->bell_fd, mesh->bell_file.path);
    return mstar_error_set(MSTAR_EAGAIN, "mesh %s: no message within %d ms", mesh->entity,
                           timeout_ms);
}

mstar_status mstar_mesh_recv(mstar_mesh *mesh, int timeout_ms, mstar_msg *out)
{
    if (mesh == NULL || out == NULL)
        return mstar_error_set(MSTAR_EINVAL, "mstar_mesh_recv: %s is NULL",
                               mesh == NULL ? "mesh" : "out");
    if (mesh->offers > 0)
        mstar__peers_settle(mesh); /* a refused ring's messages must not wait for our next send */
    uint64_t deadline = 0;
    if (timeout_ms > 0)
        deadline = mstar__now_ns() + (uint64_t)timeout_ms * UINT64_C(1000000);
    /* A caller that polls the inbox fd itself may have seen ZeroMQ's part readable; one that waits
     * here sees it in wait_inputs (the flag only goes false once the inbox said EAGAIN, and
     * anything arriving after that makes ZMQ_FD readable). */
    bool bell = timeout_ms != 0 || note_ready_sources(mesh);
    bool woken = false;
    for (int pass = 0;; pass++) {
        mstar_status st = take_one(mesh, out);
        if (st != MSTAR_EAGAIN)
            return st;
        if (woken)
            return mstar_error_set(MSTAR_EAGAIN, "mesh %s: woken before a message arrived",
                                   mesh->entity);
        if (pass > 0 && expired(timeout_ms, deadline))
            return give_up(mesh, timeout_ms);
        if (mesh->inrings.busy)
            continue; /* more garbage waits: taken in bounded steps, the deadline checked */
        if (timeout_ms != 0 && mstar__inrings_spin(mesh, deadline))
            continue;
        /* A caller polling the inbox fd sleeps on the bell too: leave it drained. (A datagram
         * that came after the poll above wakes that caller, whose next call drains it.) */
        if (timeout_ms == 0 && bell)
            mstar__inrings_drain(mesh);
        /* Tell every ring to wake us; one may have filled meanwhile. A poll's caller may spin
         * next (mstar_mesh_spin): its senders give it a moment to start. */
        if (mstar__inrings_arm(mesh, timeout_ms == 0))
            continue;
        if (timeout_ms == 0)
            return mstar__error_set_text(MSTAR_EAGAIN, mesh->no_message);
        long wait_ms = -1;
        if (timeout_ms > 0) {
            uint64_t now = mstar__now_ns();
            if (now >= deadline)
                return mstar_error_set(MSTAR_EAGAIN, "mesh %s: no message within %d ms",
                                       mesh->entity, timeout_ms);
            wait_ms = (long)((deadline - now + 999999) / 1000000);
        }
        /* A receiver that lost a ring's hello cannot say so: look again when it is overdue. */
        long answer_ms = (long)(MSTAR__RING_ANSWER_NS / 1000000);
        if (mesh->offers > 0 && (wait_ms < 0 || wait_ms > answer_ms))
            wait_ms = answer_ms;
        st = wait_inputs(mesh, wait_ms, &woken);
        if (st != MSTAR_OK)
            return st;
        if (mesh->offers > 0)
            mstar__peers_settle(mesh); /* a refused receiver rang our bell */
        /* Loop: what arrived is taken, a wake or the deadline is reported above. */
    }
}

bool mstar_mesh_spin(mstar_mesh *mesh)
{
    if (mesh == NULL)
        return false;
    mesh->inrings.loop_spins = true; /* also for the rings to come */
    if (mesh->inrings.n == 0)
        return false;
    if (mstar__inrings_spin(mesh, 0))
        return true;
    /* The caller sleeps next: its next receive harvests the epoll set, which woke it. */
    mesh->inrings.awake = false;
    /* Ask to be woken before the caller sleeps; a frame may have come before the flag was up. */
    return mstar__inrings_arm(mesh, false);
}
