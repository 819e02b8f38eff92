/*
 * bench_wire.c — `mstar bench wire`: encoding and decoding the small control messages of the
 * 4 KiB round-trip hot path (a one-uuid TENSOR_RECEIVED, a one-descriptor INPUT_SIGNALS) and a
 * larger WORKER_GRAPHS_DONE, against two baselines measured in the same run over the same encoded
 * bytes: memcpy, and msgpuck's mp_check (a bare validating scan, no field checks, no output).
 * `mstar bench wire [--json] [--quick]`.
 */
#include "bench.h"

#include "core/json.h"
#include "core/vec.h"
#include "mstar/mstar.h"

#include <msgpuck.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Many short rounds, keeping the fastest: on a shared machine a short round is likely to run
 * without being preempted. */
#define ROUNDS 40

typedef struct bench_case {
    const char *name;
    mstar_msg msg;
    void *bytes;
    size_t len;
} bench_case;

static volatile size_t sink;

/* One operation on a case; false if it failed (the error is left in mstar_last_error). */
typedef bool (*op_fn)(const bench_case *c, char *scratch, long i);

static bool op_memcpy(const bench_case *c, char *scratch, long i)
{
    memcpy(scratch, c->bytes, c->len);
    sink += (unsigned char)scratch[i % (long)c->len];
    return true;
}

static bool op_mp_check(const bench_case *c, char *scratch, long i)
{
    const char *p = c->bytes;
    sink += (size_t)mp_check(&p, (const char *)c->bytes + c->len);
    return true;
}

static bool op_encode(const bench_case *c, char *scratch, long i)
{
    void *buf;
    size_t len;
    if (mstar_msg_encode(&c->msg, &buf, &len) != MSTAR_OK)
        return false;
    sink += len;
    free(buf);
    return true;
}

static bool op_decode(const bench_case *c, char *scratch, long i)
{
    mstar_msg m;
    if (mstar_msg_decode(c->bytes, c->len, &m) != MSTAR_OK)
        return false;
    sink += m.nedges;
    mstar_msg_clear(&m);
    return true;
}

/* ns per operation: the fastest of ROUNDS rounds of `iters`; -1 if an operation failed. */
static double time_op(op_fn op, const bench_case *c, long iters)
{
    char *scratch = malloc(c->len);
    double best = 1e30;
    for (int r = 0; scratch != NULL && r < ROUNDS; r++) {
        uint64_t t0 = mstar__now_ns();
        for (long i = 0; i < iters; i++) {
            if (!op(c, scratch, i)) {
                free(scratch);
                return -1;
            }
        }
        double ns = (double)(mstar__now_ns() - t0) / (double)iters;
        best = ns < best ? ns : best;
    }
    free(scratch);
    return best;
}

static void make_info(mstar_tensor_info *info, uint64_t counter)
{
    mstar_tensor_info_init(info);
    info->uuid = mstar_id_make(101, counter);
    info->dtype = MSTAR_DTYPE_BFLOAT16;
    info->ndim = 2;
    info->dims[0] = 1;
    info->dims[1] = 2048;
    mstar_shape_contiguous_strides(2, info->dims, info->stride);
    info->nbytes = 4096;
    strcpy(info->source_entity, "worker_1");
    strcpy(info->source_session_id, "node-0");
    strcpy(info->shm_segment, "mstar_arena_4242_0");
    info->shm_offset = 1 << 20;
    strcpy(info->source_node_name, "decoder");
    strcpy(info->source_graph_walk, "main");
}

static mstar_status build(bench_case *c, mstar_msg_type type, const char *name)
{
    mstar_status st = MSTAR_OK;
    mstar_msg_init(&c->msg, type);
    c->name = name;
    strcpy(c->msg.from, "worker_1");
    c->msg.request_id = mstar_rid_from_int(12345);
    mstar_edge e;
    mstar_edge_init(&e);
    mstar_tensor_info info;
    if (type == MSTAR_MSG_TENSOR_RECEIVED) {
        st = mstar_msg_add_count(&c->msg, mstar_id_make(101, 77), 1);
    } else if (type == MSTAR_MSG_INPUT_SIGNALS) {
        strcpy(e.next_node, "lm_head");
        strcpy(e.name, "hidden_states");
        make_info(&info, 77);
        st = mstar_edge_add_tensor(&e, &info);
        if (st == MSTAR_OK)
            st = mstar_msg_add_edge(&c->msg, &e);
    } else {
        for (int s = 0; st == MSTAR_OK && s < 8; s++) {
            snprintf(e.name, sizeof(e.name), "kv_layer_%d", s);
            make_info(&info, 100 + (uint64_t)s);
            st = mstar_edge_add_tensor(&e, &info);
            if (st == MSTAR_OK)
                st = mstar_msg_add_edge(&c->msg, &e);
            mstar_edge_clear(&e);
        }
    }
    mstar_edge_clear(&e);
    if (st == MSTAR_OK)
        st = mstar_msg_encode(&c->msg, &c->bytes, &c->len);
    return st;
}

mstar_status mstar_bench_wire_run(bool quick, mstar_bench_wire_result *out)
{
    static const struct {
        mstar_msg_type type;
        const char *name;
    } kinds[MSTAR_BENCH_WIRE_CASES] = {
        { MSTAR_MSG_TENSOR_RECEIVED, "TENSOR_RECEIVED, 1 uuid" },
        { MSTAR_MSG_INPUT_SIGNALS, "INPUT_SIGNALS, 1 descriptor" },
        { MSTAR_MSG_WORKER_GRAPHS_DONE, "WORKER_GRAPHS_DONE, 8 signals" },
    };
    memset(out, 0, sizeof(*out));
    out->rounds = ROUNDS;
    out->iters = quick ? 200 : 5000;
    for (size_t k = 0; k < MSTAR_BENCH_WIRE_CASES; k++) {
        mstar_bench_progress("wire", "%s", kinds[k].name);
        bench_case c;
        mstar_status st = build(&c, kinds[k].type, kinds[k].name);
        if (st != MSTAR_OK) {
            mstar_msg_clear(&c.msg);
            return st;
        }
        long n = k == 2 ? out->iters / 8 : out->iters;
        mstar_bench_wire_row *r = &out->rows[k];
        r->message = c.name;
        r->bytes = c.len;
        r->memcpy_ns = time_op(op_memcpy, &c, n);
        r->check_ns = time_op(op_mp_check, &c, n);
        r->encode_ns = time_op(op_encode, &c, n);
        r->decode_ns = r->encode_ns < 0 ? -1 : time_op(op_decode, &c, n);
        free(c.bytes);
        mstar_msg_clear(&c.msg);
        if (r->encode_ns < 0 || r->decode_ns < 0)
            return MSTAR_EPROTO; /* the codec's error is in mstar_last_error */
    }
    return MSTAR_OK;
}

void mstar_bench_wire_json(const mstar_bench_wire_result *r, FILE *out)
{
    fprintf(out, "{\"suite\":\"wire\",\"rounds\":%d,\"iterations\":%ld,\"results\":[", r->rounds,
            r->iters);
    for (size_t k = 0; k < MSTAR_BENCH_WIRE_CASES; k++) {
        const mstar_bench_wire_row *w = &r->rows[k];
        fprintf(out, "%s{\"message\":", k ? "," : "");
        mstar__json_string(out, w->message);
        fprintf(out, ",\"bytes\":%zu", w->bytes);
        mstar_bench_json_field(out, "memcpy_ns", w->memcpy_ns, 4);
        mstar_bench_json_field(out, "mp_check_ns", w->check_ns, 4);
        mstar_bench_json_field(out, "encode_ns", w->encode_ns, 4);
        mstar_bench_json_field(out, "decode_ns", w->decode_ns, 4);
        mstar_bench_json_field(out, "encode_over_check", w->encode_ns / w->check_ns, 4);
        mstar_bench_json_field(out, "decode_over_check", w->decode_ns / w->check_ns, 4);
        fprintf(out, "}");
    }
    fprintf(out, "]}\n");
}

static void print_table(const mstar_bench_wire_result *r)
{
    printf("wire: ns per message (fastest of %d rounds of %ld); ratios to memcpy and mp_check of "
           "the same bytes\n",
           r->rounds, r->iters);
    printf("%-32s %6s %9s %9s %9s %9s %10s %10s\n", "message", "bytes", "memcpy", "mp_check",
           "encode", "decode", "enc/check", "dec/check");
    for (size_t k = 0; k < MSTAR_BENCH_WIRE_CASES; k++) {
        const mstar_bench_wire_row *w = &r->rows[k];
        printf("%-32s %6zu %9.1f %9.1f %9.1f %9.1f %9.1fx %9.1fx\n", w->message, w->bytes,
               w->memcpy_ns, w->check_ns, w->encode_ns, w->decode_ns, w->encode_ns / w->check_ns,
               w->decode_ns / w->check_ns);
    }
}

int mstar_bench_wire(int argc, char **argv)
{
    bool json, quick;
    if (!mstar_bench_parse_flags(argc, argv, "usage: mstar bench wire [--json] [--quick]", &json,
                                 &quick))
        return 2;
    mstar_bench_progress_enable(!json);
    mstar_bench_wire_result r;
    if (mstar_bench_wire_run(quick, &r) != MSTAR_OK) {
        fprintf(stderr, "mstar bench wire: %s\n", mstar_last_error());
        return 1;
    }
    if (json)
        mstar_bench_wire_json(&r, stdout);
    else
        print_table(&r);
    return 0;
}
