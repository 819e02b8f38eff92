/*
 * fuzz_wire_decode.c — libFuzzer target for the wire decoders, with a round-trip oracle.
 *
 * Each input goes through the message, descriptor and edge decoders. A decoder must either fail
 * with MSTAR_EPROTO and leave its output cleared, or succeed; what it accepted must then encode
 * (the encoder applies the same rules, so a refusal means the two disagree), decode again, and
 * encode to the same bytes. The encoder is a deterministic function of every field a message
 * carries, so equal bytes mean the second decode saw the same message as the first. Leaks are
 * found by the sanitizer build this runs in.
 *
 * Seed corpus: tests/fuzz/corpus/fuzz_wire_decode/, valid encodings of every message type
 * (written by tests/unit/test_wire_codec.c with MSTAR_WIRE_CORPUS_DIR set).
 */
#include "mstar/mstar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz_wire_decode: %s (%s)\n", what, mstar_last_error());
    abort();
}

/* encode(value) must succeed, and encode(decode(encode(value))) must give the same bytes. */
typedef mstar_status (*encode_fn)(const void *value, void **data, size_t *len);
typedef mstar_status (*decode_fn)(const void *data, size_t len, void *out);
typedef void (*clear_fn)(void *value);

static void round_trip(const void *value, void *scratch, encode_fn encode, decode_fn decode,
                       clear_fn clear)
{
    void *first, *second;
    size_t first_len, second_len;
    if (encode(value, &first, &first_len) != MSTAR_OK)
        die("the encoder refused what the decoder accepted");
    if (decode(first, first_len, scratch) != MSTAR_OK)
        die("the decoder refused what the encoder wrote");
    if (encode(scratch, &second, &second_len) != MSTAR_OK)
        die("the encoder refused a re-decoded value");
    if (first_len != second_len || memcmp(first, second, first_len) != 0)
        die("a second round trip changed the encoding");
    free(first);
    free(second);
    if (clear != NULL)
        clear(scratch);
}

static mstar_status msg_encode(const void *v, void **d, size_t *l)
{
    return mstar_msg_encode(v, d, l);
}
static mstar_status msg_decode(const void *d, size_t l, void *o)
{
    return mstar_msg_decode(d, l, o);
}
static void msg_clear(void *v)
{
    mstar_msg_clear(v);
}
static mstar_status info_encode(const void *v, void **d, size_t *l)
{
    return mstar_tensor_info_encode(v, d, l);
}
static mstar_status info_decode(const void *d, size_t l, void *o)
{
    return mstar_tensor_info_decode(d, l, o);
}
static mstar_status edge_encode(const void *v, void **d, size_t *l)
{
    return mstar_edge_encode(v, d, l);
}
static mstar_status edge_decode(const void *d, size_t l, void *o)
{
    return mstar_edge_decode(d, l, o);
}
static void edge_clear(void *v)
{
    mstar_edge_clear(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mstar_msg msg, msg2;
    static mstar_tensor_info info, info2;
    static mstar_edge edge, edge2;

    mstar_status st = mstar_msg_decode(data, size, &msg);
    if (st == MSTAR_OK) {
        round_trip(&msg, &msg2, msg_encode, msg_decode, msg_clear);
        mstar_msg_clear(&msg);
    } else if (st != MSTAR_EPROTO || msg.type != MSTAR_MSG_INVALID || msg.edges != NULL ||
               msg.nedges != 0 || msg.counts != NULL || msg.kv != NULL) {
        die("a failed message decode did not leave its output cleared");
    }

    st = mstar_tensor_info_decode(data, size, &info);
    if (st == MSTAR_OK)
        round_trip(&info, &info2, info_encode, info_decode, NULL);
    else if (st != MSTAR_EPROTO)
        die("the descriptor decoder failed with a status other than MSTAR_EPROTO");

    st = mstar_edge_decode(data, size, &edge);
    if (st == MSTAR_OK) {
        round_trip(&edge, &edge2, edge_encode, edge_decode, edge_clear);
        mstar_edge_clear(&edge);
    } else if (st != MSTAR_EPROTO || edge.tensor_info != NULL || edge.ntensors != 0) {
        die("a failed edge decode did not leave its output cleared");
    }
    return 0;
}
