/*
 * test_hostile_mesh.c — a live producer and consumer on real ZeroMQ meshes, and a third entity
 * ("intruder") that sends them raw frames and forged control messages: ACKs from entities that
 * were never sent the tensor, replayed ACKs, counts of INT64_MAX and below zero, garbage and
 * oversized frames, floods. Each test asserts the counted drop or the clear error, that the
 * legitimate transfer beside it still completes with every byte verified, and that nothing is
 * left behind (no tensor held, no file in the shm directory). The defences are described in
 * docs/security.md.
 */
#include "comm_harness.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define PRODUCER  "worker_0"
#define CONSUMER  "worker_1"
#define CONSUMER2 "worker_2"
#define INTRUDER  "intruder"

/* The consumer's ACK sender can be made to fail, to show a failed ACK is kept and resent. */
typedef struct flaky {
    mstar_mesh *mesh;
    int fail; /* sends still to fail */
} flaky;

typedef struct world {
    const char *dir; /* shm directory */
    mstar_mesh_options mo;
    mstar_mesh *pm, *cm, *c2m, *im;
    mstar_comm *p, *c, *c2;
    flaky cf;
} world;

static mstar_status flaky_send(void *ctx, const char *peer, mstar_msg *msg)
{
    flaky *f = ctx;
    if (f->fail > 0) {
        f->fail--;
        return mstar_error_set(MSTAR_EIO, "test: the link to '%s' is down", peer);
    }
    return mstar_comm_send_via_mesh(f->mesh, peer, msg);
}

static mstar_comm *open_comm(world *w, const char *entity, mstar_comm_send_fn send, void *ctx)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = MSTAR_TRANSPORT_FILES;
    o.shm_dir = w->dir;
    o.send = send;
    o.send_ctx = ctx;
    mstar_comm *c = NULL;
    assert_mstar_ok(mstar_comm_create(&o, &c));
    return c;
}

static mstar_mesh *open_mesh(world *w, const char *entity)
{
    mstar_mesh *m = NULL;
    assert_mstar_ok(mstar_mesh_create(entity, &w->mo, &m));
    return m;
}

static void world_open(world *w)
{
    memset(w, 0, sizeof(*w));
    w->dir = mstar_test_tmpdir("hostile-mesh");
    w->mo = (mstar_mesh_options){ .transport = MSTAR_MESH_IPC, .ipc_dir = w->dir };
    w->pm = open_mesh(w, PRODUCER);
    w->cm = open_mesh(w, CONSUMER);
    w->c2m = open_mesh(w, CONSUMER2);
    w->im = open_mesh(w, INTRUDER);
    w->cf.mesh = w->cm;
    w->p = open_comm(w, PRODUCER, mstar_comm_send_via_mesh, w->pm);
    w->c = open_comm(w, CONSUMER, flaky_send, &w->cf);
    w->c2 = open_comm(w, CONSUMER2, mstar_comm_send_via_mesh, w->c2m);
}

/* Nothing left: no tensor held anywhere, no file in the shm directory. */
static void world_close(world *w)
{
    assert_int_equal(mstar_comm_num_tensors(w->p), 0);
    assert_int_equal(mstar_comm_num_tensors(w->c), 0);
    assert_int_equal(mstar_comm_num_tensors(w->c2), 0);
    mstar_comm_destroy(w->c2);
    mstar_comm_destroy(w->c);
    mstar_comm_destroy(w->p);
    mstar_mesh_destroy(w->im);
    mstar_mesh_destroy(w->c2m);
    mstar_mesh_destroy(w->cm);
    mstar_mesh_destroy(w->pm);
    assert_int_equal(mstar_test_count_dir(w->dir), 0);
    mstar_test_rmtree(w->dir);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Hand every message waiting in the producer's inbox to its manager (up to `ms` of quiet). */
static int pump_producer(world *w, int ms)
{
    int n = 0;
    mstar_msg m;
    while (mstar_mesh_recv(w->pm, ms, &m) == MSTAR_OK) {
        assert_mstar_ok(mstar_comm_handle_message(w->p, &m));
        mstar_msg_clear(&m);
        n++;
    }
    return n;
}

/* Pump until the producer holds `want` tensors (10 s at most). */
static void producer_settles(world *w, size_t want)
{
    for (int i = 0; i < 1000 && mstar_comm_num_tensors(w->p) != want; i++)
        pump_producer(w, 10);
    assert_int_equal(mstar_comm_num_tensors(w->p), want);
}

/* The producer stores `t`, routes it to each of `to` (one delivery each) and sends each an
 * INPUT_SIGNALS with its descriptor. */
static mstar_tensor_info produce_to(world *w, const mstar_rid *rid, const mstar_tensor *t,
                                    const char *const *to, int nto)
{
    mstar_tensor_info info;
    produce(w->p, rid, t, 1, nto, &info);
    for (int k = 0; k < nto; k++) {
        mstar_msg m;
        mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
        m.request_id = *rid;
        mstar_edge e = edge_of("sig", "node", &info, 1);
        assert_mstar_ok(mstar_msg_add_edge(&m, &e));
        mstar_edge_clear(&e);
        assert_mstar_ok(mstar_mesh_send(w->pm, to[k], &m));
        mstar_msg_clear(&m);
    }
    return info;
}

/* The consumer receives its INPUT_SIGNALS, reads it, checks every byte against `want`, and
 * releases it; `ack_st` is what get_ready_tensors returns (the ACK's fate). */
/* consume() without the request's cleanup, which would settle its queued ACKs: its rid. */
static mstar_rid consume_open(mstar_mesh *mesh, mstar_comm *c, const mstar_tensor *want,
                              mstar_status ack_st)
{
    mstar_msg m;
    for (;;) { /* skip what the intruder sent this inbox */
        assert_mstar_ok(mstar_mesh_recv(mesh, 10000, &m));
        if (m.type == MSTAR_MSG_INPUT_SIGNALS)
            break;
        mstar_msg_clear(&m);
    }
    assert_mstar_ok(mstar_comm_start_read_tensors(c, &m.request_id, m.edges, m.nedges, NULL));
    mstar_ready_set set;
    memset(&set, 0, sizeof(set));
    for (int i = 0; i < 1000 && set.nedges == 0; i++) {
        mstar_ready_set_clear(&set);
        mstar_status st = mstar_comm_get_ready_tensors(c, &set);
        if (set.nedges == 0) {
            assert_mstar_ok(st);
            sleep_ms(10);
        } else if (ack_st == MSTAR_OK) {
            assert_mstar_ok(st); /* a success sets no error text to check */
        } else {
            assert_mstar_status(st, ack_st);
        }
    }
    assert_int_equal(set.nedges, 1);
    assert_int_equal(set.nfailed, 0);
    mstar_tensor_id uuid = set.edges[0].tensor_info[0].uuid;
    check_bytes(c, uuid, want);
    mstar_ready_set_clear(&set);
    assert_mstar_ok(mstar_comm_dereference(c, uuid, 1));
    mstar_rid rid = m.request_id;
    mstar_msg_clear(&m);
    return rid;
}

static void consume(mstar_mesh *mesh, mstar_comm *c, const mstar_tensor *want, mstar_status ack_st)
{
    mstar_rid rid = consume_open(mesh, c, want, ack_st);
    assert_mstar_ok(mstar_comm_cleanup_request(c, &rid));
}

/* msgpack's shortest form of an unsigned integer, as the encoder writes it; returns its size. */
static size_t mp_uint(uint64_t v, uint8_t *out)
{
    int width = v < 128 ? 0 : v <= UINT8_MAX ? 1 : v <= UINT16_MAX ? 2 : v <= UINT32_MAX ? 4 : 8;
    static const uint8_t tag[9] = { 0, 0xcc, 0xcd, 0, 0xce, 0, 0, 0, 0xcf };
    if (width == 0) {
        out[0] = (uint8_t)v;
        return 1;
    }
    out[0] = tag[width];
    for (int i = 0; i < width; i++)
        out[1 + i] = (uint8_t)(v >> (8 * (width - 1 - i)));
    return (size_t)width + 1;
}

/* A TENSOR_RECEIVED or UNPERSIST_TENSORS built by hand, claiming to come from `from`, sent as a
 * raw frame from the intruder's mesh (a raw frame can claim any sender). A count from -32 to -1,
 * which the encoder refuses, is written over a placeholder in the encoded map. */
static void forge(world *w, mstar_msg_type type, const char *from, mstar_tensor_id uuid,
                  int64_t count)
{
    mstar_msg m;
    mstar_msg_init(&m, type);
    m.request_id = mstar_rid_from_int(7);
    snprintf(m.from, sizeof(m.from), "%s", from);
    assert_mstar_ok(mstar_msg_add_count(&m, uuid, count < 0 ? 126 : count));
    void *data;
    size_t len;
    assert_mstar_ok(mstar_msg_encode(&m, &data, &len));
    if (count < 0) {
        assert_true(count >= -32);
        uint8_t key[10];
        size_t klen = mp_uint(uuid, key);
        key[klen++] = 126;
        uint8_t *hit = memmem(data, len, key, klen);
        assert_non_null(hit);
        hit[klen - 1] = (uint8_t)(int8_t)count; /* negative fixint */
    }
    assert_mstar_ok(mstar_mesh_send_raw(w->im, PRODUCER, data, len));
    free(data);
    mstar_msg_clear(&m);
}

static mstar_comm_security_stats stats_of(mstar_comm *c)
{
    mstar_comm_security_stats s;
    assert_mstar_ok(mstar_comm_get_security_stats(c, &s));
    return s;
}

/* Fault 2: an ACK from an entity the producer never sent the tensor to is dropped and counted;
 * the consumer's read then completes with every byte, and its own ACK frees the tensor. */
static void test_ack_from_stranger_dropped(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(1);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 1000, 3);
    const char *to[1] = { CONSUMER };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 1);
    assert_true(stats_of(w.p).ack_ledger);

    forge(&w, MSTAR_MSG_TENSOR_RECEIVED, INTRUDER, info.uuid, 1);
    forge(&w, MSTAR_MSG_TENSOR_RECEIVED, CONSUMER2, info.uuid, 1);
    assert_int_equal(pump_producer(&w, 500), 2);
    assert_int_equal(stats_of(w.p).acks_dropped, 2);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1); /* still held for its reader */

    consume(w.cm, w.c, &t, MSTAR_OK);
    producer_settles(&w, 0);
    assert_int_equal(stats_of(w.p).acks_dropped, 2);
    free(t.data);
    world_close(&w);
}

/* Fault 2: a replayed ACK (claiming to be a consumer that already acknowledged) is beyond what
 * that consumer owes: dropped, and the tensor stays for the second consumer. */
static void test_replayed_ack_dropped(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(2);
    mstar_tensor t = make_vector(MSTAR_DTYPE_INT32, 4096, 9);
    const char *to[2] = { CONSUMER, CONSUMER2 };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 2);

    consume(w.cm, w.c, &t, MSTAR_OK);
    assert_int_equal(pump_producer(&w, 2000), 1); /* worker_1's ACK; worker_2 still owes one */
    assert_int_equal(stats_of(w.p).acks_dropped, 0);
    for (int i = 0; i < 3; i++)
        forge(&w, MSTAR_MSG_TENSOR_RECEIVED, CONSUMER, info.uuid, 1);
    assert_int_equal(pump_producer(&w, 500), 3);
    assert_int_equal(stats_of(w.p).acks_dropped, 3);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1);

    consume(w.c2m, w.c2, &t, MSTAR_OK);
    producer_settles(&w, 0);
    free(t.data);
    world_close(&w);
}

/* A persisted tensor goes to worker_2 (in the conductor's place), which hands its descriptor on
 * to worker_1 and then sends UNPERSIST K = 1. worker_1's ACK lands after the marker cleared, from
 * a peer the producer never sent the tensor to: K granted it, so it frees the tensor. */
static void test_forwarded_persisted_ack_after_unpersist(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 500, 11);
    mstar_output o = output_of("sig", t);
    mstar_tensor_info info;
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w.p, &rid, &o, 1, NULL, &info));
    assert_mstar_ok(mstar_comm_set_persist(w.p, info.uuid, true));
    assert_mstar_ok(mstar_comm_register_for_send(w.p, &rid, &info, 1));
    mstar_msg m;
    mstar_msg_init(&m, MSTAR_MSG_INPUT_SIGNALS);
    m.request_id = rid;
    mstar_edge e = edge_of("sig", "node", &info, 1);
    assert_mstar_ok(mstar_msg_add_edge(&m, &e));
    mstar_edge_clear(&e);
    assert_mstar_ok(mstar_mesh_send(w.pm, CONSUMER2, &m));
    mstar_msg_clear(&m);

    assert_mstar_ok(mstar_mesh_recv(w.c2m, 10000, &m));
    assert_mstar_ok(mstar_mesh_send(w.c2m, CONSUMER, &m)); /* handed on, unread */
    mstar_msg_clear(&m);
    mstar_msg_init(&m, MSTAR_MSG_UNPERSIST_TENSORS);
    m.request_id = rid;
    assert_mstar_ok(mstar_msg_add_count(&m, info.uuid, 1));
    assert_mstar_ok(mstar_mesh_send(w.c2m, PRODUCER, &m));
    mstar_msg_clear(&m);
    assert_int_equal(pump_producer(&w, 2000), 1); /* the UNPERSIST, before worker_1's ACK */
    assert_int_equal(mstar_comm_num_tensors(w.p), 1);

    consume(w.cm, w.c, &t, MSTAR_OK);
    producer_settles(&w, 0);
    assert_int_equal(stats_of(w.p).acks_dropped, 0);
    free(t.data);
    world_close(&w);
}

/* Fault 3: counts of INT64_MAX and below zero, in ACKs and in UNPERSIST, are refused without
 * touching the count; the tensor is still read and freed normally. */
static void test_extreme_counts_refused(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(3);
    mstar_tensor t = make_vector(MSTAR_DTYPE_UINT8, 777, 5);
    const char *to[1] = { CONSUMER };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 1);
    assert_mstar_ok(mstar_comm_set_persist(w.p, info.uuid, true));

    forge(&w, MSTAR_MSG_TENSOR_RECEIVED, CONSUMER, info.uuid, INT64_MAX);
    forge(&w, MSTAR_MSG_TENSOR_RECEIVED, CONSUMER, info.uuid, -5);
    forge(&w, MSTAR_MSG_UNPERSIST_TENSORS, "conductor", info.uuid, INT64_MAX);
    forge(&w, MSTAR_MSG_UNPERSIST_TENSORS, "conductor", info.uuid, -1);
    /* The decoder refuses the negative ones (counted as undecodable frames); the INT64_MAX
     * ones reach the manager, which refuses them. */
    assert_int_equal(pump_producer(&w, 500), 2);
    assert_int_equal(mstar_mesh_dropped(w.pm), 2);
    mstar_comm_security_stats s = stats_of(w.p);
    assert_int_equal(s.acks_dropped, 1);
    assert_int_equal(s.counts_refused, 1);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1); /* persisted and referenced */

    consume(w.cm, w.c, &t, MSTAR_OK); /* its ACK takes the count to 0 */
    forge(&w, MSTAR_MSG_UNPERSIST_TENSORS, "conductor", info.uuid, 0);
    producer_settles(&w, 0);
    free(t.data);
    world_close(&w);
}

/* Fault 11: an ACK that cannot be sent is an error from get_ready_tensors, the edge is still
 * delivered, and the ACK is kept and resent by the next call. */
static void test_failed_ack_kept_and_resent(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(4);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 64, 11);
    const char *to[1] = { CONSUMER };
    produce_to(&w, &rid, &t, to, 1);

    w.cf.fail = 1;
    rid = consume_open(w.cm, w.c, &t, MSTAR_EIO);
    assert_int_equal(stats_of(w.c).acks_queued, 1);
    assert_int_equal(pump_producer(&w, 200), 0);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1); /* no ACK yet */

    mstar_ready_set set;
    assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &set)); /* resends */
    assert_int_equal(set.nedges, 0);
    mstar_ready_set_clear(&set);
    assert_int_equal(stats_of(w.c).acks_queued, 0);
    producer_settles(&w, 0);
    assert_mstar_ok(mstar_comm_cleanup_request(w.c, &rid));

    /* A request's cleanup tries its queued ACK once more, and gives it up if that fails too:
     * a producer that is gone does not fail every later call. */
    rid = mstar_rid_from_int(5);
    produce_to(&w, &rid, &t, to, 1);
    w.cf.fail = 2;
    rid = consume_open(w.cm, w.c, &t, MSTAR_EIO);
    assert_mstar_ok(mstar_comm_cleanup_request(w.c, &rid));
    mstar_comm_security_stats s = stats_of(w.c);
    assert_int_equal(s.acks_queued, 0);
    assert_int_equal(s.acks_lost, 1);
    assert_mstar_ok(mstar_comm_get_ready_tensors(w.c, &set));
    mstar_ready_set_clear(&set);
    assert_int_equal(pump_producer(&w, 200), 0);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1); /* held until its own cleanup */
    assert_mstar_ok(mstar_comm_force_cleanup_request(w.p, &rid));
    free(t.data);
    world_close(&w);
}

/* Fault 10: a tensor's identity is (source entity, uuid). A second producer minting under
 * worker_0's entity index gives its first tensor worker_0's first uuid; a descriptor of it is
 * refused where a tensor of that uuid from another entity is held (worker_0's own, or one
 * worker_1 read), instead of serving the held tensor's bytes for it. */
static void test_same_index_is_refused(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    uint16_t index;
    assert_mstar_ok(mstar_entity_index(PRODUCER, &index));
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = "twin";
    o.entity_index = index;
    o.transport = MSTAR_TRANSPORT_FILES;
    o.shm_dir = w.dir;
    mstar_comm *twin = NULL;
    assert_mstar_ok(mstar_comm_create(&o, &twin));

    mstar_rid rid = mstar_rid_from_int(6);
    mstar_tensor t = make_vector(MSTAR_DTYPE_INT32, 100, 21);
    mstar_tensor u = make_vector(MSTAR_DTYPE_INT32, 100, 22);
    const char *to[1] = { CONSUMER };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 1);
    mstar_tensor_info tinfo;
    produce(twin, &rid, &u, 1, 1, &tinfo);
    assert_true(tinfo.uuid == info.uuid);
    mstar_edge e = edge_of("sig", "node", &tinfo, 1);

    /* The producer itself is handed the twin's descriptor. */
    assert_mstar_status(mstar_comm_start_read_tensors(w.p, &rid, &e, 1, NULL), MSTAR_EEXIST);
    assert_non_null(strstr(mstar_last_error(), "from 'twin'"));

    /* A consumer holding worker_0's tensor is handed the twin's. */
    mstar_msg m;
    assert_mstar_ok(mstar_mesh_recv(w.cm, 10000, &m));
    assert_mstar_ok(mstar_comm_start_read_tensors(w.c, &m.request_id, m.edges, m.nedges, NULL));
    mstar_msg_clear(&m);
    assert_mstar_status(mstar_comm_start_read_tensors(w.c, &rid, &e, 1, NULL), MSTAR_EEXIST);
    mstar_edge_clear(&e);
    collect_ready(w.c, 1);
    check_bytes(w.c, info.uuid, &t); /* worker_0's bytes, untouched */
    assert_mstar_ok(mstar_comm_dereference(w.c, info.uuid, 1));
    assert_mstar_ok(mstar_comm_cleanup_request(w.c, &rid));
    producer_settles(&w, 0);

    assert_mstar_ok(mstar_comm_force_cleanup_request(twin, &rid));
    mstar_comm_destroy(twin);
    free(t.data);
    free(u.data);
    world_close(&w);
}

/* Fault 10, where entities bind: "ab" and "ba" have one byte sum, so one entity index. While
 * "ab" is live, "ba" is refused; once it is gone, "ba" binds. */
static void test_same_index_refused_at_bind(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_mesh *ab = open_mesh(&w, "ab"), *ba = NULL;
    assert_mstar_status(mstar_mesh_create("ba", &w.mo, &ba), MSTAR_EEXIST);
    assert_null(ba);
    assert_non_null(strstr(mstar_last_error(), "live entity 'ab'"));
    mstar_mesh_destroy(ab);
    ba = open_mesh(&w, "ba");
    assert_int_equal(mstar_mesh_entity_index(ba), 1000 + ('a' + 'b') % 1000);
    mstar_mesh_destroy(ba);
    world_close(&w);
}

/* Fault 4: a consumer told which entities to expect refuses a descriptor naming any other
 * source before it opens or connects anything for it; the expected producer's read completes. */
static void test_unknown_source_refused(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    const char *expected[2] = { PRODUCER, "conductor" };
    assert_mstar_ok(mstar_comm_expect_entities(w.c, expected, 2));
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_tensor t = make_vector(MSTAR_DTYPE_FLOAT32, 50, 23);
    const char *to[1] = { CONSUMER };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 1);

    mstar_tensor_info bogus = info;
    snprintf(bogus.source_entity, sizeof(bogus.source_entity), "stranger_%d", 7);
    bogus.uuid += 1000;
    mstar_edge e = edge_of("sig", "node", &bogus, 1);
    assert_mstar_status(mstar_comm_start_read_tensors(w.c, &rid, &e, 1, NULL), MSTAR_EPROTO);
    assert_non_null(strstr(mstar_last_error(), "'stranger_7'"));
    mstar_edge_clear(&e);
    assert_int_equal(mstar_mesh_num_peers(w.cm), 0); /* no ACK socket for it */

    consume(w.cm, w.c, &t, MSTAR_OK);
    producer_settles(&w, 0);
    free(t.data);
    world_close(&w);
}

/* Fault 4: the peer table is bounded. Sends to more distinct peers than the bound close the
 * least recently used; a peer in use keeps working. */
static void test_peer_table_bounded(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_msg m;
    for (int i = 0; i < 400; i++) {
        char name[32];
        snprintf(name, sizeof(name), "ghost_%d", i);
        assert_mstar_ok(mstar_mesh_send_raw(w.im, name, "x", 1));
        assert_true(mstar_mesh_num_peers(w.im) <= 256);
        if (i % 50 == 0) { /* a real peer, used all along */
            mstar_msg_init(&m, MSTAR_MSG_HELLO);
            assert_mstar_ok(mstar_msg_add_kv(&m, "seq", i));
            assert_mstar_ok(mstar_mesh_send(w.im, CONSUMER, &m));
            mstar_msg_clear(&m);
        }
    }
    assert_int_equal(mstar_mesh_num_peers(w.im), 256);
    for (int i = 0; i < 400; i += 50) {
        assert_mstar_ok(mstar_mesh_recv(w.cm, 10000, &m));
        assert_int_equal(mstar_msg_get_kv(&m, "seq", -1), i);
        mstar_msg_clear(&m);
    }
    world_close(&w);
}

/* Attack classes that held before: garbage, truncated and oversized frames and a flood of
 * forged ACKs at both ends; the transfer beside them completes. */
static void test_garbage_and_floods(void **state)
{
    (void)state;
    world w;
    world_open(&w);
    mstar_rid rid = mstar_rid_from_int(5);
    mstar_tensor t = make_vector(MSTAR_DTYPE_INT64, 300, 17);
    const char *to[1] = { CONSUMER };
    mstar_tensor_info info = produce_to(&w, &rid, &t, to, 1);

    size_t big = (size_t)MSTAR_WIRE_MAX_MESSAGE + 1;
    uint8_t *junk = malloc(big);
    assert_non_null(junk);
    uint64_t seed = 42;
    for (size_t i = 0; i < 4096; i++)
        junk[i] = (uint8_t)mstar_test_rand(&seed);
    memset(junk + 4096, 0xc1, big - 4096);
    const char *victims[2] = { PRODUCER, CONSUMER };
    for (int v = 0; v < 2; v++) {
        assert_mstar_ok(mstar_mesh_send_raw(w.im, victims[v], junk, 1));
        assert_mstar_ok(mstar_mesh_send_raw(w.im, victims[v], junk, 4096));
        /* ZeroMQ takes it (the inbox's limit refuses it); a ring's sender refuses it. */
        mstar_status st = mstar_mesh_send_raw(w.im, victims[v], junk, big);
        assert_true(st == MSTAR_OK || st == MSTAR_ERANGE);
        assert_mstar_ok(mstar_mesh_send_raw(w.im, victims[v], junk, 0));
    }
    free(junk);
    for (int i = 0; i < 200; i++)
        forge(&w, MSTAR_MSG_TENSOR_RECEIVED, INTRUDER, info.uuid, 1 + i % 3);
    assert_int_equal(pump_producer(&w, 500), 200);
    /* The oversized frame never arrives: the inbox's size limit closes that connection. */
    assert_int_equal(mstar_mesh_dropped(w.pm), 3);
    assert_int_equal(stats_of(w.p).acks_dropped, 200);
    assert_int_equal(mstar_comm_num_tensors(w.p), 1);

    consume(w.cm, w.c, &t, MSTAR_OK);
    mstar_msg m; /* the garbage queued behind the INPUT_SIGNALS */
    assert_mstar_status(mstar_mesh_recv(w.cm, 500, &m), MSTAR_EAGAIN);
    assert_int_equal(mstar_mesh_dropped(w.cm), 3);
    producer_settles(&w, 0);
    free(t.data);
    world_close(&w);
}

int main(void)
{
    unsetenv("MSTAR_ZMQ_TRANSPORT");
    unsetenv("MSTAR_IPC_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack_from_stranger_dropped),
        cmocka_unit_test(test_replayed_ack_dropped),
        cmocka_unit_test(test_forwarded_persisted_ack_after_unpersist),
        cmocka_unit_test(test_extreme_counts_refused),
        cmocka_unit_test(test_failed_ack_kept_and_resent),
        cmocka_unit_test(test_same_index_is_refused),
        cmocka_unit_test(test_same_index_refused_at_bind),
        cmocka_unit_test(test_unknown_source_refused),
        cmocka_unit_test(test_peer_table_bounded),
        cmocka_unit_test(test_garbage_and_floods),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
