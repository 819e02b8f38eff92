/*
 * ring.h — a single-producer, single-consumer ring of encoded mesh messages in shared memory,
 * one per (sender, receiver) pair of entities on one host (docs/architecture.md, "The ring").
 *
 * The sender creates the ring as a sealed memfd (it cannot shrink or grow, so the receiver's
 * mapping never faults on a truncation) and hands the fd to the receiver over its bell socket
 * (bell.c). The memory holds a header page and a power-of-two data area of frames:
 *
 *   u32 length, u32 ~length, length payload bytes, zero padding to a multiple of 8
 *
 * or, for a message too large to go inline (more than a quarter of the ring), a blob frame:
 * u32 16, u32 ~16 ^ MSTAR__RING_BLOB, u64 sequence number, u64 length, naming a memfd the sender
 * handed to the receiver's bell beforehand (bell.c).
 *
 * A frame may wrap around the end of the data area. The positions `tail` (written by the sender)
 * and `head` (written by the receiver) only grow; position mod capacity is the byte offset. The
 * receiver treats everything in the mapping as hostile input: it keeps its own copies of the
 * capacity and of `head`, reads `tail` once per frame, and refuses the whole ring (MSTAR_EPROTO)
 * when a position or frame length cannot be right. Frames are copied out before decoding, so the
 * sender changing them afterwards changes nothing.
 *
 * Hand-over: the receiver may refuse a ring (its table is full), or never get it (the fd was
 * lost on the way). So the sender counts a ring as taken only once the receiver has answered in
 * the header's `answer` word: ACCEPTED before it reads anything, or REFUSED. A sender that has no
 * answer after a while WITHDRAWS the ring instead; both sides move the word with a compare-and-
 * swap from OFFERED, so exactly one of them decides. The frames of a ring that was refused or
 * withdrawn were never read, and the sender sends them again another way (peers.c).
 *
 * Waking: before sleeping the receiver sets `rx_waiting`; the sender, after publishing a frame,
 * swaps it back to 0 and, when it was set, writes 1 to the ring's eventfd: the sender makes it and
 * hands it over with the memfd, and the receiver watches it, edge-triggered, in its epoll set and
 * never reads it (its counter cannot fill at one per wake-up). Both sides use sequentially
 * consistent operations, so either the receiver sees the frame or the sender sees the flag.
 * A receiver that polls and may spin next arms with MSTAR__RING_ARMED_SPIN instead: a sender that
 * finds that waits up to MSTAR__RING_DISARM_WAIT_NS for the receiver to disarm as its spin starts
 * (then no system call on either side) before it wakes it.
 */
#ifndef MSTAR_MESH_RING_H
#define MSTAR_MESH_RING_H

#include "mstar/core.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define MSTAR__RING_MAGIC   UINT64_C(0x31474e4952535453) /* "STSRING1" little-endian */
#define MSTAR__RING_VERSION 3u
#define MSTAR__RING_HEADER  4096u /* bytes before the data area */
#define MSTAR__RING_MIN_CAP (UINT64_C(1) << 12)
#define MSTAR__RING_MAX_CAP (UINT64_C(1) << 30)
#define MSTAR__RING_FRAME   8u          /* the length words before each payload */
#define MSTAR__RING_BLOB    0x424f4c42u /* "BLOB": the check word's mark of a blob frame */
/* How long a sender that finds a ring armed by a receiver about to spin waits for the spin to
 * start before it wakes the receiver: the receiver's loop passes from its last empty receive to
 * mstar_mesh_spin in a microsecond or two; a sleep and a wake-up cost both sides ten times that. */
#define MSTAR__RING_DISARM_WAIT_NS UINT64_C(5000)

/* The shared header. Positions sit on cache lines of their own so that the two sides do not
 * fight over one line on every frame. */
typedef struct mstar__ring_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t sender_pid;
    uint64_t capacity;
    char sender[MSTAR_NAME_MAX + 1];
    char receiver[MSTAR_NAME_MAX + 1];
    _Alignas(64) _Atomic uint64_t tail;
    _Atomic uint32_t tx_closed; /* the sender let go of the ring */
    _Alignas(64) _Atomic uint64_t head;
    _Atomic uint32_t rx_waiting; /* MSTAR__RING_AWAKE, _ARMED or _ARMED_SPIN */
    _Atomic uint32_t rx_closed;  /* the receiver let go of the ring */
    _Atomic uint32_t answer;     /* MSTAR__RING_OFFERED, _ACCEPTED, _REFUSED or _WITHDRAWN */
} mstar__ring_hdr;

/* rx_waiting: the receiver is awake (spinning or working); it sleeps until woken; it polled,
 * found nothing, and is about to spin (it may sleep instead, so it must be woken all the same). */
enum { MSTAR__RING_AWAKE = 0, MSTAR__RING_ARMED = 1, MSTAR__RING_ARMED_SPIN = 2 };

enum {
    MSTAR__RING_OFFERED = 0,
    MSTAR__RING_ACCEPTED = 1,
    MSTAR__RING_REFUSED = 2,
    MSTAR__RING_WITHDRAWN = 3,
};

/* One side's view of a ring. Everything but `hdr` and `data` is private to this process. */
typedef struct mstar__ring {
    int fd;      /* the memfd; -1 when closed */
    int wake_fd; /* the eventfd that wakes the receiver (ring.h "Waking"); -1 when closed */
    void *map;
    size_t map_len;
    mstar__ring_hdr *hdr;
    uint8_t *data;
    uint64_t cap; /* our copy, checked once */
    uint64_t pos; /* the sender's tail, or the receiver's head */
    char peer[MSTAR_NAME_MAX + 1];
} mstar__ring;

void mstar__ring_init(mstar__ring *r);

/* The data capacity from MSTAR_RING_BYTES (a power of two, 4 KiB .. 1 GiB; default 4 MiB). */
mstar_status mstar__ring_capacity(uint64_t *out);

/* The sender's side: a new sealed ring from `sender` to `receiver` of `cap` data bytes, and its
 * wake-up eventfd. */
mstar_status mstar__ring_create(const char *sender, const char *receiver, uint64_t cap,
                                mstar__ring *out);

/* The receiver's side: map the ring `fd` (taken over: closed on failure too) that `sender` says
 * it made for `receiver`. MSTAR_EPROTO naming what is wrong when the fd is not a sealed memfd of
 * the right size, or its header does not match. */
mstar_status mstar__ring_attach(int fd, const char *sender, const char *receiver, mstar__ring *out);
/* The receiver's side: take over `fd` (closed on failure too) as the ring's wake-up eventfd.
 * MSTAR_EPROTO when it is not an eventfd. */
mstar_status mstar__ring_attach_wake(mstar__ring *r, int fd);
/* Sender: wake the receiver through the ring's eventfd (one write, which cannot block). */
void mstar__ring_wake(const mstar__ring *r);

/* Receiver: take the ring before reading it; false when its sender withdrew it (drop it
 * unread). */
bool mstar__ring_accept(mstar__ring *r);
/* Receiver: refuse the ring (its sender sends what it wrote another way), then close it. */
void mstar__ring_refuse(mstar__ring *r);
/* Sender: the receiver's answer so far (anything but OFFERED or ACCEPTED counts as refused). */
uint32_t mstar__ring_answer(const mstar__ring *r);
/* Sender: withdraw a ring the receiver has not answered; false when it answered meanwhile. */
bool mstar__ring_withdraw(mstar__ring *r);

/* Unmap and close; marks the ring closed for the other side first (`receiver`: which side we
 * are). Safe on an initialised or closed ring. */
void mstar__ring_close(mstar__ring *r, bool receiver);
/* Unmap and close without marking anything: a forked child's copy of a ring its parent still
 * uses (core/owner.h). Safe on an initialised or closed ring. */
void mstar__ring_forget(mstar__ring *r);

/* Sender: append one frame. MSTAR_EAGAIN when it does not fit now, MSTAR_ERANGE when it never
 * can (larger than the ring), MSTAR_EPROTO when the receiver's position is impossible. On
 * success *wake says whether the receiver asked to be rung. */
mstar_status mstar__ring_write(mstar__ring *r, const void *data, size_t len, bool *wake);

/* Sender: whether a message of `len` bytes goes inline (else as a blob). */
bool mstar__ring_inline(const mstar__ring *r, size_t len);
/* Sender: whether a frame of `len` payload bytes fits now. */
bool mstar__ring_has_room(const mstar__ring *r, size_t len);
/* Sender: a blob frame naming blob `seq` of `len` bytes; errors as mstar__ring_write. */
mstar_status mstar__ring_write_blob(mstar__ring *r, uint64_t seq, uint64_t len, bool *wake);
/* Sender: a memfd holding the `len` bytes of a message, for mstar__bell_blob. */
mstar_status mstar__blob_create(const void *data, size_t len, int *fd);
/* Receiver: read a blob of exactly `len` bytes (at most MSTAR_WIRE_MAX_MESSAGE) into *buf;
 * MSTAR_EPROTO when its size differs. */
mstar_status mstar__blob_read(int fd, uint64_t len, uint8_t **buf, size_t *cap);

/* Receiver: copy the next frame into *buf (grown with realloc, *cap its size), its length in
 * *len; *blob tells a blob frame (its payload then holds the sequence number and the length).
 * MSTAR_EAGAIN when empty; MSTAR_EPROTO (the ring is then unusable) when the sender's position
 * or the frame is impossible. */
mstar_status mstar__ring_read(mstar__ring *r, uint8_t **buf, size_t *cap, size_t *len, bool *blob);

/* Receiver: true when a frame (or garbage) waits. */
bool mstar__ring_pending(const mstar__ring *r);
/* Receiver: ask to be woken for the next frame (`how`: MSTAR__RING_ARMED, or _ARMED_SPIN when a
 * spin may come first); check mstar__ring_pending afterwards. */
void mstar__ring_arm(mstar__ring *r, uint32_t how);
/* Receiver: no need to wake it, it is awake (spinning). Returns what the flag held: AWAKE after
 * an arm means a sender took the flag and woke the receiver (an edge of the eventfd waits). */
uint32_t mstar__ring_disarm(mstar__ring *r);
#endif
