/*
 * fuzz_mesh_ring.c — libFuzzer target for the receiving side of a mesh ring (src/mesh/ring.h):
 * the bytes a co-located sender controls, read the way the mesh reads them.
 *
 * Input: u64 how far the sender's tail claims to be ahead of the reader, u16 where in the data
 * area the reader stands, then the data area's bytes from there on (wrapping at its end). The
 * reader then takes frames until the ring is empty or refused, decoding each as a message. It
 * must never read past what the tail published, never return a frame longer than a message may
 * be, and never crash or loop; leaks and bad accesses are the sanitizer's to find.
 *
 * Seed corpus: tests/fuzz/corpus/fuzz_mesh_ring/ (empty, valid frames, a frame across the end,
 * a blob frame, lengths that disagree).
 */
#include "mesh/ring.h"
#include "mstar/mstar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mstar__ring tx, rx;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_mesh_ring: %s\n", what);
    abort();
}

/* One ring for the whole run (making one costs a memfd and a mapping); each input resets it. */
static void open_once(void)
{
    if (tx.map != NULL)
        return;
    if (mstar__ring_create("sender", "receiver", MSTAR__RING_MIN_CAP, &tx) != MSTAR_OK ||
        mstar__ring_attach(dup(tx.fd), "sender", "receiver", &rx) != MSTAR_OK)
        die(mstar_last_error());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 10)
        return 0;
    open_once();
    uint64_t ahead;
    uint16_t start;
    memcpy(&ahead, data, 8);
    memcpy(&start, data + 8, 2);
    data += 10;
    size -= 10;
    uint64_t cap = rx.cap;
    uint64_t pos = (start & (cap - 1)) & ~UINT64_C(7);
    memset(rx.data, 0, cap);
    for (size_t i = 0; i < size && i < cap; i++)
        rx.data[(pos + i) & (cap - 1)] = data[i];
    rx.pos = pos;
    atomic_store(&rx.hdr->tail, pos + ahead);

    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    for (int frames = 0;; frames++) {
        if (frames > (int)(cap / MSTAR__RING_FRAME))
            die("more frames than the ring can hold");
        size_t len;
        bool blob;
        mstar_status st = mstar__ring_read(&rx, &buf, &buf_cap, &len, &blob);
        if (st != MSTAR_OK)
            break;
        if (rx.pos - pos > ahead || len > MSTAR_WIRE_MAX_MESSAGE || (blob && len != 16))
            die("a frame past the published tail, or longer than a message");
        mstar_msg msg;
        if (!blob && mstar_msg_decode(buf, len, &msg) == MSTAR_OK)
            mstar_msg_clear(&msg);
    }
    free(buf);
    return 0;
}
