/*
 * fuzz_mesh_senders.c — stateful libFuzzer target for a mesh receiver ("worker_0") that several
 * senders on its host reach at once: three raw rings handed to its bell (as a co-located peer
 * makes them, so the input controls every frame) and a ZeroMQ sender ("conductor"). Each input
 * is a program of steps, one byte each (op in the low 3 bits, ring sender in the next 2), some
 * followed by a length byte and that many bytes:
 *
 *   0  a numbered message on ring k          4  a numbered message over ZeroMQ
 *   1  raw bytes as a frame on ring k        5  raw bytes over ZeroMQ
 *   2  a blob frame naming any blob on ring k 6  the receiver polls once (timeout 0)
 *   3  ring k's tail moved by a signed byte  7  ring k replaced by a fresh one (a restart)
 *
 * Raw bytes that happen to decode as a message are not sent (only numbered messages decode),
 * so frames that are no message are dropped and counted; a ring whose positions are impossible
 * is dropped whole. Checked on every message taken: it comes from a sender that sent it, the
 * numbers of each sender (across its rings) and of ZeroMQ only grow, and none arrives twice.
 * A sender that moved its tail may have its stale frames read again: its messages are then
 * only checked to be of this input. At the end the receiver drains everything: every
 * numbered message of a sender that never moved its tail has arrived, and every ZeroMQ one.
 * Each input starts with fresh rings; the meshes live for the whole run.
 *
 * Seed corpus: tests/fuzz/corpus/fuzz_mesh_senders/.
 */
#include "core/vec.h"
#include "mesh/mesh_internal.h"
#include "mstar/mstar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define NRING 3

typedef struct ring_sender {
    char name[16];
    mstar__ring ring;
    int64_t sent;     /* numbered messages written in this input */
    int64_t received; /* how many of them arrived */
    int64_t last;     /* the last number taken, -1 before the first */
    bool garbled;     /* a moved tail: messages may be lost or read twice */
} ring_sender;

static mstar_mesh *rx, *zsender;
static mstar__mesh_config cfg;
static ring_sender senders[NRING];
static int64_t z_sent, z_received, z_last;
static uint64_t epoch; /* numbers carry the input's epoch, so a stale message shows */

static void die(const char *what)
{
    fprintf(stderr, "fuzz_mesh_senders: %s (%s)\n", what, mstar_last_error());
    abort();
}

static void poll_once(int timeout_ms);

/* A fresh ring for sender s, handed to the receiver's bell (the old one is closed: finished);
 * `reset` at the start of an input. */
static void new_ring(ring_sender *s, bool reset)
{
    mstar__ring_close(&s->ring, false);
    if (mstar__ring_create(s->name, "worker_0", MSTAR__RING_MIN_CAP, &s->ring) != MSTAR_OK)
        die("ring create");
    int bell;
    if (mstar__bell_connect(&cfg, s->name, "worker_0", &bell) != MSTAR_OK)
        die("bell");
    mstar_status st;
    for (int i = 0;
         (st = mstar__bell_hello(bell, s->name, "worker_0", &s->ring)) == MSTAR_EAGAIN && i < 1000;
         i++)
        poll_once(0); /* the bell is full of hellos: the receiver reads them */
    if (st != MSTAR_OK)
        die("hello");
    close(bell);
    if (reset) {
        s->sent = s->received = 0;
        s->last = -1;
        s->garbled = false;
    }
}

static char dir[] = "/tmp/mstar-fuzz-senders-XXXXXX";

/* At exit: the meshes, the rings and the directory go. */
static void close_all(void)
{
    for (int k = 0; k < NRING; k++)
        mstar__ring_close(&senders[k].ring, false);
    mstar_mesh_destroy(zsender);
    mstar_mesh_destroy(rx);
    rmdir(dir);
}

static void open_once(void)
{
    if (rx != NULL)
        return;
    mstar_log_set_level(MSTAR_LOG_ERROR);
    if (mkdtemp(dir) == NULL)
        die("mkdtemp");
    atexit(close_all);
    mstar_mesh_options opts = { .transport = MSTAR_MESH_IPC, .ipc_dir = dir };
    setenv("MSTAR_MESH_RING", "AUTO", 1);
    if (mstar_mesh_create("worker_0", &opts, &rx) != MSTAR_OK)
        die("receiver");
    setenv("MSTAR_MESH_RING", "0", 1);
    if (mstar_mesh_create("conductor", &opts, &zsender) != MSTAR_OK)
        die("zeromq sender");
    if (mstar__mesh_config_resolve(&opts, &cfg) != MSTAR_OK)
        die("config");
    for (int k = 0; k < NRING; k++) {
        snprintf(senders[k].name, sizeof(senders[k].name), "ring_%d", k);
        mstar__ring_init(&senders[k].ring);
    }
}

static int64_t number(int64_t n)
{
    return (int64_t)(epoch << 32) + n;
}

/* A numbered message from `from`, encoded. */
static void encode(const char *from, int64_t n, void **data, size_t *len)
{
    mstar_msg msg;
    mstar_msg_init(&msg, MSTAR_MSG_TENSOR_RECEIVED);
    snprintf(msg.from, sizeof(msg.from), "%s", from);
    msg.request_id = mstar_rid_from_int(number(n));
    if (mstar_msg_encode(&msg, data, len) != MSTAR_OK)
        die("encode");
    mstar_msg_clear(&msg);
}

/* Check one message taken from the receiver against what was sent. */
static void check(const mstar_msg *got)
{
    int64_t num = got->request_id.num;
    if ((uint64_t)num >> 32 != epoch)
        die("a message of an earlier input");
    int64_t n = num & 0xffffffff;
    if (strcmp(got->from, "conductor") == 0) {
        if (n <= z_last || n >= z_sent)
            die("a ZeroMQ message out of order, twice, or never sent");
        z_last = n;
        z_received++;
        return;
    }
    for (int k = 0; k < NRING; k++) {
        ring_sender *s = &senders[k];
        if (strcmp(got->from, s->name) != 0)
            continue;
        if (s->garbled)
            return;
        if (n <= s->last || n >= s->sent)
            die("a ring message out of order, twice, or never sent");
        s->last = n;
        s->received++;
        return;
    }
    die("a message from nobody who sent one");
}

static void poll_once(int timeout_ms)
{
    mstar_msg got;
    mstar_status st = mstar_mesh_recv(rx, timeout_ms, &got);
    if (st == MSTAR_OK) {
        check(&got);
        mstar_msg_clear(&got);
    } else if (st != MSTAR_EAGAIN) {
        die("receive");
    }
}

static void ring_step(ring_sender *s, int op, const uint8_t *bytes, size_t n)
{
    bool wake;
    mstar_status st = MSTAR_OK;
    if (op == 0) {
        void *data;
        size_t len;
        encode(s->name, s->sent, &data, &len);
        st = mstar__ring_write(&s->ring, data, len, &wake);
        free(data);
        s->sent += st == MSTAR_OK;
    } else if (op == 1) {
        st = mstar__ring_write(&s->ring, bytes, n, &wake);
    } else if (op == 2) {
        uint64_t ref[2] = { 0, 0 };
        memcpy(ref, bytes, n < sizeof(ref) ? n : sizeof(ref));
        st = mstar__ring_write_blob(&s->ring, ref[0], ref[1], &wake);
    } else if (op == 3) {
        int8_t d = n > 0 ? (int8_t)bytes[0] : 8;
        atomic_store(&s->ring.hdr->tail, s->ring.pos + (uint64_t)(int64_t)d);
        s->garbled = true;
    } else {
        new_ring(s, false);
    }
    if (st != MSTAR_OK)
        mstar_error_clear(); /* a full ring: the step did nothing */
}

static void zmq_step(int op, const uint8_t *bytes, size_t n)
{
    mstar_status st;
    if (op == 4) {
        void *data;
        size_t len;
        encode("conductor", z_sent, &data, &len);
        st = mstar_mesh_send_raw(zsender, "worker_0", data, len);
        free(data);
        z_sent += st == MSTAR_OK;
    } else {
        st = mstar_mesh_send_raw(zsender, "worker_0", bytes, n);
    }
    if (st != MSTAR_OK)
        mstar_error_clear(); /* a full queue */
}

/* Whether a ring holds frames, once every ring handed over is attached. */
static bool rings_pending(void)
{
    mstar__inrings_drain(rx);
    for (size_t i = 0; i < rx->inrings.n; i++)
        if (mstar__ring_pending(&rx->inrings.rings[i].ring))
            return true;
    return false;
}

/* Take everything: the rings are read in place, ZeroMQ's messages may still be on their way. */
static void drain(void)
{
    uint64_t end = mstar__now_ns() + UINT64_C(5000000000);
    for (;;) {
        bool rings_done = true;
        for (int k = 0; k < NRING; k++)
            rings_done =
                rings_done && (senders[k].garbled || senders[k].received == senders[k].sent);
        if (rings_done && z_received == z_sent) {
            /* What the rings still hold (junk, what a moved tail left) must not spill into the
             * next input. */
            for (int i = 0; i < 10000 && rings_pending(); i++)
                poll_once(0);
            if (rings_pending())
                die("a ring is never emptied");
            return;
        }
        if (mstar__now_ns() > end)
            die("a message was lost");
        poll_once(10);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    open_once();
    epoch++;
    z_sent = z_received = 0;
    z_last = -1;
    for (int k = 0; k < NRING; k++)
        new_ring(&senders[k], true);
    for (size_t i = 0; i < size && i < 512;) {
        uint8_t b = data[i++];
        int op = b & 7;
        ring_sender *s = &senders[((b >> 3) & 3) % NRING];
        size_t n = 0;
        const uint8_t *bytes = NULL;
        if (op == 1 || op == 2 || op == 3 || op == 5) {
            n = i < size ? data[i++] : 0;
            n = n < size - i ? n : size - i;
            bytes = data + i;
            i += n;
        }
        mstar_msg msg;
        if ((op == 1 || op == 5) && mstar_msg_decode(bytes, n, &msg) == MSTAR_OK) {
            mstar_msg_clear(&msg);
            continue; /* a message after all: not garbage, and not numbered */
        }
        mstar_error_clear();
        if (op <= 3 || op == 7)
            ring_step(s, op, bytes, n);
        else if (op == 4 || op == 5)
            zmq_step(op, bytes, n);
        else
            poll_once(0);
    }
    drain();
    return 0;
}
