/*
 * ring.c — the shared-memory ring of one (sender, receiver) pair: creating it sealed, attaching
 * to one a peer handed over (and checking everything about it), writing and reading frames.
 * The layout and the wake-up protocol are described in ring.h.
 */
#include "ring.h"

#include "core/assert.h"
#include "core/guard.h"
#include "core/spare_cpu.h"
#include "core/vec.h"
#include "mstar/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(mstar__ring_hdr) <= MSTAR__RING_HEADER, "the ring header fits its page");

/* The seals a ring must carry: without them the sender could shrink the memory under the
 * receiver's mapping and make its next read fault. */
#define RING_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

void mstar__ring_init(mstar__ring *r)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    r->wake_fd = -1;
}

static uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~UINT64_C(7);
}

mstar_status mstar__ring_capacity(uint64_t *out)
{
    int64_t bytes;
    mstar_status st =
        mstar_env_get_int("MSTAR_RING_BYTES", INT64_C(4) << 20, (int64_t)MSTAR__RING_MIN_CAP,
                          (int64_t)MSTAR__RING_MAX_CAP, &bytes);
    if (st != MSTAR_OK)
        return st;
    if ((bytes & (bytes - 1)) != 0)
        return mstar_error_set(MSTAR_EINVAL, "MSTAR_RING_BYTES=%lld is not a power of two",
                               (long long)bytes);
    *out = (uint64_t)bytes;
    return MSTAR_OK;
}

/* Map a ring. `populate`: map every page now. Frames move through the whole data area before
 * they wrap, so unpopulated, the first pass faults a page in every few frames on both sides
 * (tens of microseconds each in a virtual machine: a 4 KiB message's round trip grew several
 * times over); the pages are all touched in time anyway. */
static mstar_status map_ring(mstar__ring *r, int fd, uint64_t cap, bool populate, const char *who)
{
    size_t len = (size_t)(MSTAR__RING_HEADER + cap);
    void *map =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    if (map == MAP_FAILED)
        return mstar_error_set(MSTAR_EIO, "ring %s: mmap of %zu bytes: %s", who, len,
                               strerror(errno));
    r->fd = fd;
    r->map = map;
    r->map_len = len;
    r->hdr = map;
    r->data = (uint8_t *)map + MSTAR__RING_HEADER;
    r->cap = cap;
    r->pos = 0;
    return MSTAR_OK;
}

/* A memfd of `size` bytes with every page allocated (a hole would fault once memory ran out)
 * and sealed at that size. */
static mstar_status sealed_memfd(const char *receiver, size_t size, int *out)
{
    int fd = memfd_create("mstar-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "ring to '%s': memfd_create: %s", receiver,
                               strerror(errno));
    const char *step = NULL;
    int err;
    if (ftruncate(fd, (off_t)size) != 0)
        step = "ftruncate";
    else if ((err = posix_fallocate(fd, 0, (off_t)size)) != 0)
        errno = err, step = "fallocate";
    else if (fcntl(fd, F_ADD_SEALS, RING_SEALS) != 0)
        step = "sealing";
    if (step != NULL) {
        err = errno;
        close(fd);
        return mstar_error_set(err == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO,
                               "ring to '%s': %s %zu bytes: %s", receiver, step, size,
                               strerror(err));
    }
    *out = fd;
    return MSTAR_OK;
}

mstar_status mstar__ring_create(const char *sender, const char *receiver, uint64_t cap,
                                mstar__ring *out)
{
    mstar__ring_init(out);
    int fd = -1;
    mstar_status st = sealed_memfd(receiver, (size_t)(MSTAR__RING_HEADER + cap), &fd);
    if (st != MSTAR_OK)
        return st;
    st = map_ring(out, fd, cap, true, receiver);
    if (st != MSTAR_OK) {
        close(fd);
        return st;
    }
    out->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (out->wake_fd < 0) {
        st = mstar_error_set(MSTAR_EIO, "ring to '%s': eventfd: %s", receiver, strerror(errno));
        mstar__ring_forget(out);
        return st;
    }
    mstar__ring_hdr *h = out->hdr;
    h->magic = MSTAR__RING_MAGIC;
    h->version = MSTAR__RING_VERSION;
    h->sender_pid = (int32_t)getpid();
    h->capacity = cap;
    strncpy(h->sender, sender, sizeof(h->sender) - 1);
    strncpy(h->receiver, receiver, sizeof(h->receiver) - 1);
    strncpy(out->peer, receiver, sizeof(out->peer) - 1);
    return MSTAR_OK;
}

/* The fd's seals and size, before anything is mapped: *cap gets the data capacity it implies. */
static mstar_status check_fd(int fd, const char *sender, uint64_t *cap)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return mstar_error_set(MSTAR_EPROTO, "ring from '%s': the fd is not a regular file",
                               sender);
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & RING_SEALS) != RING_SEALS)
        return mstar_error_set(MSTAR_EPROTO,
                               "ring from '%s': the memory is not sealed against resizing "
                               "(seals 0x%x)",
                               sender, seals < 0 ? 0 : seals);
    uint64_t size = (uint64_t)sb.st_size;
    if (sb.st_size < 0 || size < MSTAR__RING_HEADER + MSTAR__RING_MIN_CAP ||
        size > MSTAR__RING_HEADER + MSTAR__RING_MAX_CAP)
        return mstar_error_set(MSTAR_EPROTO, "ring from '%s': size %lld is out of range", sender,
                               (long long)sb.st_size);
    /* Pages the sender left unallocated could fault once memory ran out: the frames are copied
     * under the SIGBUS guard for that (shmem reports allocated-but-unwritten pages as holes, so
     * SEEK_HOLE cannot tell them apart). */
    *cap = size - MSTAR__RING_HEADER;
    return MSTAR_OK;
}

/* A name field of the header: terminated within its array and equal to `want`. */
static bool name_is(const char *field, size_t size, const char *want)
{
    return memchr(field, '\0', size) != NULL && strcmp(field, want) == 0;
}

/* The fixed part of the header, copied once (the sender can change it later; nobody re-reads). */
static mstar_status check_header(const mstar__ring *r, const char *sender, const char *receiver)
{
    mstar__ring_hdr h;
    mstar_status st =
        mstar__guarded_copy(&h, r->hdr, offsetof(mstar__ring_hdr, tail), "a ring's header");
    if (st != MSTAR_OK)
        return st;
    const char *bad = NULL;
    if (h.magic != MSTAR__RING_MAGIC || h.version != MSTAR__RING_VERSION)
        bad = "not a ring of this version (magic or version)";
    else if (h.capacity != r->cap)
        bad = "its capacity does not match its size";
    else if (!name_is(h.sender, sizeof(h.sender), sender))
        bad = "it names another sender";
    else if (!name_is(h.receiver, sizeof(h.receiver), receiver))
        bad = "it names another receiver";
    if (bad != NULL)
        return mstar_error_set(MSTAR_EPROTO, "ring from '%s': %s", sender, bad);
    return MSTAR_OK;
}

mstar_status mstar__ring_attach(int fd, const char *sender, const char *receiver, mstar__ring *out)
{
    mstar__ring_init(out);
    uint64_t cap = 0;
    mstar_status st = check_fd(fd, sender, &cap);
    if (st == MSTAR_OK && (cap & (cap - 1)) != 0)
        st = mstar_error_set(MSTAR_EPROTO, "ring from '%s': capacity %llu is not a power of two",
                             sender, (unsigned long long)cap);
    /* A ring larger than the one this entity would make itself is mapped lazily: populating
     * could allocate what a sender left unallocated, at the receiver's cost. */
    uint64_t own = 0;
    bool populate = mstar__ring_capacity(&own) == MSTAR_OK && cap <= own;
    if (st == MSTAR_OK)
        st = map_ring(out, fd, cap, populate, sender);
    if (st != MSTAR_OK) {
        close(fd);
        return st;
    }
    snprintf(out->peer, sizeof(out->peer), "%s", sender);
    st = check_header(out, sender, receiver);
    if (st != MSTAR_OK) {
        mstar__ring_close(out, false);
        return st;
    }
    /* Our head starts at 0 whatever the shared word says: only what we store there counts. */
    atomic_store_explicit(&out->hdr->head, 0, memory_order_release);
    return MSTAR_OK;
}

/* What /proc says an fd is: "anon_inode:[eventfd]" for an eventfd. Nothing else tells an eventfd
 * from the other anonymous files (signalfd, timerfd, epoll) that fstat shows alike. */
static bool is_eventfd(int fd)
{
    char path[64], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return false;
    target[n] = '\0';
    return strcmp(target, "anon_inode:[eventfd]") == 0;
}

mstar_status mstar__ring_attach_wake(mstar__ring *r, int fd)
{
    /* Only ever written by its sender, and watched by us: the receiver never reads or writes
     * it, so an eventfd in any mode will do; anything else could be readable for ever or wake
     * us on someone else's behalf. */
    if (!is_eventfd(fd)) {
        close(fd);
        return mstar_error_set(MSTAR_EPROTO, "ring from '%s': its wake-up fd is not an eventfd",
                               r->peer);
    }
    r->wake_fd = fd;
    return MSTAR_OK;
}

void mstar__ring_wake(const mstar__ring *r)
{
    uint64_t one = 1;
    /* EAGAIN: the counter is full (never at one a wake-up), so the receiver is readable. */
    while (write(r->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        continue;
}

void mstar__ring_close(mstar__ring *r, bool receiver)
{
    if (r->map != NULL)
        atomic_store_explicit(receiver ? &r->hdr->rx_closed : &r->hdr->tx_closed, 1,
                              memory_order_release);
    mstar__ring_forget(r);
}

void mstar__ring_forget(mstar__ring *r)
{
    if (r->map != NULL)
        munmap(r->map, r->map_len);
    if (r->fd >= 0)
        close(r->fd);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    mstar__ring_init(r);
}

/* Move the answer word from OFFERED to `to`; false when the other side moved it first. */
static bool answer(mstar__ring *r, uint32_t to)
{
    uint32_t offered = MSTAR__RING_OFFERED;
    return atomic_compare_exchange_strong_explicit(&r->hdr->answer, &offered, to,
                                                   memory_order_acq_rel, memory_order_acquire);
}

bool mstar__ring_accept(mstar__ring *r)
{
    return answer(r, MSTAR__RING_ACCEPTED);
}

void mstar__ring_refuse(mstar__ring *r)
{
    answer(r, MSTAR__RING_REFUSED);
    mstar__ring_close(r, true);
}

uint32_t mstar__ring_answer(const mstar__ring *r)
{
    return atomic_load_explicit(&r->hdr->answer, memory_order_acquire);
}

bool mstar__ring_withdraw(mstar__ring *r)
{
    return answer(r, MSTAR__RING_WITHDRAWN);
}

/* Copy n bytes into the data area at position `pos`, wrapping at the end. */
static void put_bytes(mstar__ring *r, uint64_t pos, const void *src, size_t n)
{
    if (n == 0)
        return; /* an empty message: src may be NULL */
    size_t off = (size_t)(pos & (r->cap - 1));
    size_t first = n < r->cap - off ? n : (size_t)(r->cap - off);
    memcpy(r->data + off, src, first);
    memcpy(r->data, (const uint8_t *)src + first, n - first);
}

bool mstar__ring_inline(const mstar__ring *r, size_t len)
{
    return MSTAR__RING_FRAME + pad8(len) <= r->cap / 4;
}

/* Bytes the receiver has not consumed yet; MSTAR_EPROTO when its position is impossible. */
static mstar_status used_bytes(const mstar__ring *r, uint64_t *used)
{
    uint64_t head = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
    *used = r->pos - head;
    if (*used > r->cap)
        return mstar_error_set(MSTAR_EPROTO,
                               "ring to '%s': the receiver's position %llu is impossible "
                               "(ours %llu)",
                               r->peer, (unsigned long long)head, (unsigned long long)r->pos);
    return MSTAR_OK;
}

bool mstar__ring_has_room(const mstar__ring *r, size_t len)
{
    uint64_t used;
    return used_bytes(r, &used) == MSTAR_OK && r->cap - used >= MSTAR__RING_FRAME + pad8(len);
}

static mstar_status write_frame(mstar__ring *r, const void *data, size_t len, uint32_t mark,
                                bool *wake)
{
    *wake = false;
    uint64_t need = MSTAR__RING_FRAME + pad8(len);
    if (len > MSTAR_WIRE_MAX_MESSAGE || need > r->cap)
        return mstar_error_set(MSTAR_ERANGE,
                               "ring to '%s': a %zu-byte message is larger than any message "
                               "(%u bytes)",
                               r->peer, len, (unsigned)MSTAR_WIRE_MAX_MESSAGE);
    uint64_t used;
    mstar_status st = used_bytes(r, &used);
    if (st != MSTAR_OK)
        return st;
    if (r->cap - used < need)
        return mstar_error_set(MSTAR_EAGAIN,
                               "mesh: the ring to '%s' is full (%llu of %llu bytes); receive and "
                               "retry",
                               r->peer, (unsigned long long)used, (unsigned long long)r->cap);
    MSTAR__ASSERT(used + need <= r->cap); /* a frame never overwrites one not read yet */
    uint32_t words[2] = { (uint32_t)len, ~(uint32_t)len ^ mark };
    put_bytes(r, r->pos, words, sizeof(words));
    put_bytes(r, r->pos + MSTAR__RING_FRAME, data, len);
    r->pos += need;
    atomic_store_explicit(&r->hdr->tail, r->pos, memory_order_seq_cst);
    uint32_t waiting = atomic_load_explicit(&r->hdr->rx_waiting, memory_order_seq_cst);
    if (waiting == MSTAR__RING_ARMED_SPIN) {
        /* The receiver is about to spin: once it disarms, it sees this frame without a wake. */
        uint64_t until = mstar__now_ns() + MSTAR__RING_DISARM_WAIT_NS;
        do {
            mstar__cpu_relax();
            waiting = atomic_load_explicit(&r->hdr->rx_waiting, memory_order_seq_cst);
        } while (waiting == MSTAR__RING_ARMED_SPIN && mstar__now_ns() < until);
    }
    if (waiting != MSTAR__RING_AWAKE)
        *wake = atomic_exchange_explicit(&r->hdr->rx_waiting, MSTAR__RING_AWAKE,
                                         memory_order_seq_cst) != MSTAR__RING_AWAKE;
    return MSTAR_OK;
}

mstar_status mstar__ring_write(mstar__ring *r, const void *data, size_t len, bool *wake)
{
    return write_frame(r, data, len, 0, wake);
}

mstar_status mstar__ring_write_blob(mstar__ring *r, uint64_t seq, uint64_t len, bool *wake)
{
    uint64_t ref[2] = { seq, len };
    return write_frame(r, ref, sizeof(ref), MSTAR__RING_BLOB, wake);
}

mstar_status mstar__blob_create(const void *data, size_t len, int *out)
{
    int fd = memfd_create("mstar-blob", MFD_CLOEXEC);
    if (fd < 0)
        return mstar_error_set(MSTAR_EIO, "ring blob: memfd_create: %s", strerror(errno));
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, (const uint8_t *)data + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EIO;
            close(fd);
            return mstar_error_set(err == ENOSPC ? MSTAR_ENOSPC : MSTAR_EIO,
                                   "ring blob: writing %zu bytes: %s", len, strerror(err));
        }
        done += (size_t)n;
    }
    *out = fd;
    return MSTAR_OK;
}

static mstar_status grow(uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap && *buf != NULL)
        return MSTAR_OK;
    uint8_t *p = realloc(*buf, n > 0 ? n : 1);
    if (p == NULL)
        return mstar_error_set(MSTAR_ENOMEM, "ring: a %zu-byte frame: out of memory", n);
    *buf = p;
    *cap = n > 0 ? n : 1;
    return MSTAR_OK;
}

mstar_status mstar__blob_read(int fd, uint64_t len, uint8_t **buf, size_t *cap)
{
    struct stat sb;
    if (len > MSTAR_WIRE_MAX_MESSAGE || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        (uint64_t)sb.st_size != len)
        return mstar_error_set(MSTAR_EPROTO,
                               "ring blob: not a file of the %llu bytes its frame names",
                               (unsigned long long)len);
    mstar_status st = grow(buf, cap, (size_t)len);
    /* pread, not a mapping: a file that shrinks meanwhile is a short read, never a fault. */
    for (size_t done = 0; st == MSTAR_OK && done < len;) {
        ssize_t n = pread(fd, *buf + done, (size_t)len - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            st = mstar_error_set(MSTAR_EPROTO, "ring blob: shorter than its %llu bytes",
                                 (unsigned long long)len);
        else
            done += (size_t)n;
    }
    return st;
}

/* Copy n bytes out of the data area at position `pos`, wrapping, under the SIGBUS guard. */
static mstar_status get_bytes(const mstar__ring *r, uint64_t pos, void *dst, size_t n)
{
    size_t off = (size_t)(pos & (r->cap - 1));
    size_t first = n < r->cap - off ? n : (size_t)(r->cap - off);
    mstar_status st = mstar__guarded_copy(dst, r->data + off, first, "a mesh ring");
    if (st == MSTAR_OK && n > first)
        st = mstar__guarded_copy((uint8_t *)dst + first, r->data, n - first, "a mesh ring");
    return st;
}

static mstar_status broken(const mstar__ring *r, const char *what, unsigned long long value)
{
    return mstar_error_set(MSTAR_EPROTO, "ring from '%s': %s (%llu at position %llu)", r->peer,
                           what, value, (unsigned long long)r->pos);
}

mstar_status mstar__ring_read(mstar__ring *r, uint8_t **buf, size_t *cap, size_t *len, bool *blob)
{
    uint64_t tail = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
    uint64_t avail = tail - r->pos;
    if (avail == 0)
        return MSTAR_EAGAIN;
    if (avail > r->cap || avail < MSTAR__RING_FRAME)
        return broken(r, "the sender's position is impossible", (unsigned long long)tail);
    uint32_t words[2];
    mstar_status st = get_bytes(r, r->pos, words, sizeof(words));
    if (st != MSTAR_OK)
        return st;
    *blob = words[1] == (~words[0] ^ MSTAR__RING_BLOB) && words[0] == 2 * sizeof(uint64_t);
    if (words[1] != ~words[0] && !*blob)
        return broken(r, "a frame's length words disagree", words[0]);
    uint64_t need = MSTAR__RING_FRAME + pad8(words[0]);
    if (words[0] > MSTAR_WIRE_MAX_MESSAGE || need > avail)
        return broken(r, "a frame is longer than what the sender published", words[0]);
    st = grow(buf, cap, words[0]);
    if (st == MSTAR_OK)
        st = get_bytes(r, r->pos + MSTAR__RING_FRAME, *buf, words[0]);
    if (st != MSTAR_OK)
        return st;
    *len = words[0];
    r->pos += need;
    atomic_store_explicit(&r->hdr->head, r->pos, memory_order_release);
    return MSTAR_OK;
}

bool mstar__ring_pending(const mstar__ring *r)
{
    return atomic_load_explicit(&r->hdr->tail, memory_order_seq_cst) != r->pos;
}

void mstar__ring_arm(mstar__ring *r, uint32_t how)
{
    atomic_store_explicit(&r->hdr->rx_waiting, how, memory_order_seq_cst);
}

uint32_t mstar__ring_disarm(mstar__ring *r)
{
    return atomic_exchange_explicit(&r->hdr->rx_waiting, MSTAR__RING_AWAKE, memory_order_seq_cst);
}
