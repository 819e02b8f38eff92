/*
 * comm_harness.c — the in-memory message bus and the manager and tensor helpers of the
 * communication-manager tests (comm_harness.h says what each does).
 */
#include "comm_harness.h"

#include <unistd.h>

mstar_status bus_send(void *ctx, const char *peer, mstar_msg *msg)
{
    sender *s = ctx;
    bus *b = s->b;
    if (b->n == BUS_MAX)
        return mstar_error_set(MSTAR_EAGAIN, "test bus full");
    bus_msg *m = &b->q[b->n];
    snprintf(m->peer, sizeof(m->peer), "%s", peer);
    snprintf(m->from, sizeof(m->from), "%s", s->entity);
    mstar_msg_init(&m->msg, msg->type);
    m->msg.request_id = msg->request_id;
    snprintf(m->msg.from, sizeof(m->msg.from), "%s", s->entity);
    mstar_status st = MSTAR_OK;
    for (uint32_t i = 0; i < msg->ncounts && st == MSTAR_OK; i++)
        st = mstar_msg_add_count(&m->msg, msg->counts[i].uuid, msg->counts[i].count);
    for (uint32_t i = 0; i < msg->nuuids && st == MSTAR_OK; i++)
        st = mstar_msg_add_uuid(&m->msg, msg->uuids[i]);
    if (st != MSTAR_OK) { /* out of memory: a send that failed (test_comm_nomem) */
        mstar_msg_clear(&m->msg);
        return st;
    }
    b->n++;
    b->sent++;
    return MSTAR_OK;
}

int bus_count(const bus *b, const char *peer)
{
    int n = 0;
    for (int i = 0; i < b->n; i++)
        n += strcmp(b->q[i].peer, peer) == 0;
    return n;
}

int bus_deliver(bus *b, const char *peer, mstar_comm *c)
{
    int delivered = 0, w = 0;
    for (int i = 0; i < b->n; i++) {
        if (strcmp(b->q[i].peer, peer) != 0) {
            b->q[w++] = b->q[i];
            continue;
        }
        assert_mstar_ok(mstar_comm_handle_message(c, &b->q[i].msg));
        mstar_msg_clear(&b->q[i].msg);
        delivered++;
    }
    b->n = w;
    return delivered;
}

void bus_drop(bus *b, const char *peer)
{
    int w = 0;
    for (int i = 0; i < b->n; i++) {
        if (strcmp(b->q[i].peer, peer) == 0)
            mstar_msg_clear(&b->q[i].msg);
        else
            b->q[w++] = b->q[i];
    }
    b->n = w;
}

void bus_clear(bus *b)
{
    for (int i = 0; i < b->n; i++)
        mstar_msg_clear(&b->q[i].msg);
    b->n = 0;
}

int64_t bus_ack_count(const bus *b, const char *peer, mstar_tensor_id uuid)
{
    int64_t n = 0;
    for (int i = 0; i < b->n; i++) {
        if (strcmp(b->q[i].peer, peer) != 0)
            continue;
        for (uint32_t k = 0; k < b->q[i].msg.ncounts; k++)
            if (b->q[i].msg.counts[k].uuid == uuid)
                n += b->q[i].msg.counts[k].count;
    }
    return n;
}

mstar_comm *make_comm_with(const char *entity, mstar_transport_kind kind, const char *dir,
                           sender *s, mstar_backend *backend)
{
    mstar_comm_options o;
    mstar_comm_options_init(&o);
    o.entity = entity;
    o.transport = kind;
    o.shm_dir = dir;
    o.send = bus_send;
    o.send_ctx = s;
    o.backend = backend;
    o.enable_prof = true;
    mstar_comm *c = NULL;
    assert_mstar_ok(mstar_comm_create(&o, &c));
    return c;
}

mstar_comm *make_comm(const char *entity, mstar_transport_kind kind, const char *dir, sender *s)
{
    return make_comm_with(entity, kind, dir, s, NULL);
}

void comm_pair_init(comm_pair *w, const char *tag)
{
    comm_pair_init_in(w, mstar_test_tmpdir(tag));
}

void comm_pair_init_in(comm_pair *w, const char *dir)
{
    memset(w, 0, sizeof(*w));
    w->dir = dir;
    w->sp = (sender){ &w->b, "worker_0" };
    w->sc = (sender){ &w->b, "worker_1" };
}

void comm_pair_make(comm_pair *w, mstar_transport_kind kind)
{
    w->p = make_comm("worker_0", kind, w->dir, &w->sp);
    w->c = make_comm("worker_1", kind, w->dir, &w->sc);
}

void comm_pair_fini(comm_pair *w)
{
    mstar_comm_destroy(w->c);
    mstar_comm_destroy(w->p);
    w->c = w->p = NULL;
    bus_clear(&w->b);
    assert_int_equal(mstar_test_count_dir(w->dir), 0);
}

comm_trio *comm_trio_new(mstar_transport_kind kind, const char *dir)
{
    comm_trio *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    w->kind = kind;
    w->dir = dir;
    w->sp = (sender){ &w->b, "worker_0" };
    w->sc = (sender){ &w->b, "worker_1" };
    w->sd = (sender){ &w->b, "worker_2" };
    w->p = make_comm("worker_0", kind, dir, &w->sp);
    w->c = make_comm("worker_1", kind, dir, &w->sc);
    w->d = make_comm("worker_2", kind, dir, &w->sd);
    return w;
}

int comm_trio_teardown(void **state)
{
    comm_trio *w = *state;
    mstar_comm_destroy(w->p);
    mstar_comm_destroy(w->c);
    mstar_comm_destroy(w->d);
    bus_clear(&w->b);
    if (w->dir != NULL)
        assert_int_equal(mstar_test_count_dir(w->dir), 0);
    free(w);
    return 0;
}

void producer_child_open(producer_child *pc, const char *dir)
{
    memset(pc, 0, sizeof(*pc));
    if (mstar_backend_create((mstar_device){ MSTAR_DEVICE_CUDA, 0 }, &pc->b) != MSTAR_OK)
        _exit(77);
    pc->sp = (sender){ &pc->bb, "worker_0" };
    pc->p = make_comm_with("worker_0", MSTAR_TRANSPORT_ARENA, dir, &pc->sp, pc->b);
}

void *producer_child_publish(producer_child *pc, const mstar_rid *rid, mstar_output *o, uint32_t n,
                             int64_t refs, size_t *len)
{
    mstar_tensor_info *infos = calloc(n > 0 ? n : 1, sizeof(*infos));
    mstar_tensor_id *held = calloc(n > 0 ? n : 1, sizeof(*held));
    if (infos == NULL || held == NULL ||
        mstar_comm_store_and_return_tensor_info(pc->p, rid, o, n, NULL, infos) != MSTAR_OK)
        _exit(6);
    for (uint32_t i = 0; i < n; i++)
        held[i] = infos[i].uuid;
    mstar_comm_increment_ref_batch_uniform(pc->p, held, n, refs);
    if (mstar_comm_register_for_send(pc->p, rid, infos, n) != MSTAR_OK)
        _exit(7);
    mstar_edge e = edge_of("sig", "node", infos, n);
    mstar_comm_refresh_shm_placement(pc->p, &e, 1);
    void *buf;
    if (mstar_edge_encode(&e, &buf, len) != MSTAR_OK)
        _exit(8);
    mstar_edge_clear(&e);
    free(held);
    free(infos);
    return buf;
}

void producer_child_exit(producer_child *pc)
{
    mstar_comm_destroy(pc->p);
    bus_clear(&pc->bb);
    mstar_backend_destroy(pc->b);
    _exit(0);
}

mstar_arena_stats arena_stats_of(mstar_comm *c)
{
    mstar_arena_stats s;
    assert_mstar_ok(mstar_comm_arena_stats(c, &s));
    return s;
}

void arena_knobs_clear(void)
{
    const char *knobs[] = { "MSTAR_SHM_ARENA_SEGMENT_MB", "MSTAR_SHM_ARENA_MAX_SEGMENTS",
                            "MSTAR_SHM_ARENA_SPILL",      "MSTAR_SHM_ARENA_FULL_TIMEOUT_S",
                            "MSTAR_SHM_ARENA_SLOT_TTL_S", "MSTAR_SHM_ARENA_PEER_SWEEP_S",
                            "MSTAR_SHM_ARENA_PIN_MAX_MB", "MSTAR_SHM_ARENA_SPILL_AFTER_S" };
    for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
        unsetenv(knobs[i]);
}

comm_pair *arena_pair_new(const char *tag, bool managers)
{
    comm_pair *w = calloc(1, sizeof(*w));
    assert_non_null(w);
    comm_pair_init(w, tag);
    setenv("MSTAR_SHM_ARENA_SEGMENT_MB", "1", 1);
    if (managers)
        comm_pair_make(w, MSTAR_TRANSPORT_ARENA);
    return w;
}

int arena_pair_teardown(void **state)
{
    comm_pair_fini(*state);
    arena_knobs_clear();
    free(*state);
    return 0;
}

mstar_rid rid_str(const char *s)
{
    mstar_rid r;
    assert_mstar_ok(mstar_rid_from_str(s, &r));
    return r;
}

mstar_tensor make_tensor(mstar_dtype dtype, int32_t ndim, const int64_t *shape, uint32_t seed)
{
    mstar_tensor t;
    assert_mstar_ok(mstar_tensor_init(&t, NULL, mstar_device_cpu(), dtype, ndim, shape));
    size_t n = (size_t)mstar_tensor_nbytes(&t);
    uint8_t *p = malloc(n + 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
    t.data = p;
    return t;
}

mstar_tensor make_vector(mstar_dtype dtype, int64_t n, uint32_t seed)
{
    return make_tensor(dtype, 1, &n, seed);
}

mstar_output output_of(const char *signal, mstar_tensor t)
{
    mstar_output o;
    memset(&o, 0, sizeof(o));
    o.signal = signal;
    o.tensor = t;
    return o;
}

mstar_edge edge_of(const char *name, const char *next, const mstar_tensor_info *infos, uint32_t n)
{
    mstar_edge e;
    mstar_edge_init(&e);
    snprintf(e.name, sizeof(e.name), "%s", name);
    snprintf(e.next_node, sizeof(e.next_node), "%s", next);
    for (uint32_t i = 0; i < n; i++)
        assert_mstar_ok(mstar_edge_add_tensor(&e, &infos[i]));
    return e;
}

void produce(mstar_comm *p, const mstar_rid *rid, const mstar_tensor *ts, uint32_t n, int fanout,
             mstar_tensor_info *infos)
{
    assert_true(n <= 8 && fanout >= 0 && fanout <= 4);
    mstar_output o[8];
    memset(o, 0, sizeof(o)); /* compiled apart from its callers, n is not known to be > 0 */
    for (uint32_t i = 0; i < n; i++)
        o[i] = output_of("sig", ts[i]);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, o, n, NULL, infos));
    mstar_tensor_id held[8];
    for (uint32_t i = 0; i < n; i++)
        held[i] = infos[i].uuid;
    assert_mstar_ok(mstar_comm_increment_ref_batch_uniform(p, held, n, 1));
    mstar_edge routed[4];
    for (int k = 0; k < fanout; k++)
        routed[k] = edge_of("sig", "node", infos, n);
    assert_mstar_ok(mstar_comm_set_output_ref_counts(p, held, n, routed, (uint32_t)fanout));
    for (int k = 0; k < fanout; k++)
        mstar_edge_clear(&routed[k]);
    assert_mstar_ok(mstar_comm_register_for_send(p, rid, infos, n));
}

mstar_edge produce_two_vectors(mstar_comm *p, const mstar_rid *rid, mstar_dtype d0, int64_t n0,
                               mstar_dtype d1, int64_t n1, uint32_t seed, mstar_tensor ts[2],
                               mstar_tensor_info infos[2])
{
    ts[0] = make_vector(d0, n0, seed);
    ts[1] = make_vector(d1, n1, seed + 1);
    produce(p, rid, ts, 2, 1, infos);
    return edge_of("sig", "node", infos, 2);
}

void check_bytes(mstar_comm *c, mstar_tensor_id uuid, const mstar_tensor *want)
{
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(c, uuid, &got));
    assert_int_equal(got.dtype, want->dtype);
    assert_int_equal(got.ndim, want->ndim);
    for (int32_t d = 0; d < want->ndim; d++)
        assert_int_equal(got.shape[d], want->shape[d]);
    uint64_t n = mstar_tensor_nbytes(want);
    if (n > 0)
        assert_memory_equal(mstar_tensor_ptr(&got), want->data, n);
}

void store_sharded_fanout(mstar_comm *p, const mstar_rid *rid, mstar_tensor *t,
                          mstar_tensor_info *info, mstar_edge *e, mstar_fanout *fo)
{
    const char *sigs[1] = { "h" };
    int32_t dims[1] = { 0 };
    mstar_sharding_config cfg = { 1, sigs, dims };
    assert_mstar_ok(mstar_comm_register_request(p, rid, &cfg));
    int64_t shape[2] = { 8, 4 };
    *t = make_tensor(MSTAR_DTYPE_INT32, 2, shape, 13);
    mstar_output o = output_of("h", *t);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(p, rid, &o, 1, NULL, info));
    *e = edge_of("h", "mlp", info, 1);
    const char *dst_workers[2] = { "worker_1", "worker_2" };
    mstar_shard_group dst = { 2, dst_workers };
    assert_mstar_ok(mstar_edge_fanout(e, 0, NULL, 0, &dst, fo));
    assert_int_equal(fo->n, 2);
}

void expect_ready(mstar_comm *c, mstar_ready_set *set, uint32_t want)
{
    assert_mstar_ok(mstar_comm_get_ready_tensors(c, set));
    if (set->nedges != want)
        fail_msg("expected %u ready edges, got %u (%u failed: %s)", want, set->nedges, set->nfailed,
                 set->nfailed ? set->failed[0].message : "");
}

void collect_ready(mstar_comm *c, uint32_t want)
{
    mstar_ready_set set;
    expect_ready(c, &set, want);
    mstar_ready_set_clear(&set);
}
