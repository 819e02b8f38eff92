/*
 * test_comm_read_into.c — mstar_comm_start_read_into: reads landing in buffers the caller owns.
 * Over files and the arena (each landing test runs for both): the bytes land at the caller's
 * pointer, which the node's tensor then shows, untargeted descriptors of the same call land as
 * before, and the manager never frees the caller's memory; every bad target is refused with
 * nothing started and the request still usable; a stream named with no backend; and, on the
 * host backend's asynchronous streams, the copy ordered after the caller's earlier work on its
 * stream and the caller's later work ordered after the copy. Reads still copying when a request
 * is cleaned up or fails are in test_comm_async.c.
 */
#include "comm_harness.h"

#include "device/backend.h"

#include <pthread.h>

static const mstar_transport_kind KINDS[] = { MSTAR_TRANSPORT_FILES, MSTAR_TRANSPORT_ARENA };

typedef struct world {
    comm_pair cp;
    mstar_rid rid;
    mstar_tensor t[2];
    mstar_tensor_info info[2];
    mstar_edge e; /* both tensors, to node "node" */
} world;

/* Producer and consumer over the state's transport; two float32 vectors produced for the
 * consumer, in one edge. */
static int setup(void **state)
{
    mstar_transport_kind kind = *(const mstar_transport_kind *)*state;
    world *w = calloc(1, sizeof(*w));
    comm_pair_init(&w->cp, "readinto");
    comm_pair_make(&w->cp, kind);
    w->rid = mstar_rid_from_int(7);
    w->t[0] = make_vector(MSTAR_DTYPE_FLOAT32, 1000, 11);
    w->t[1] = make_vector(MSTAR_DTYPE_FLOAT32, 300, 12);
    produce(w->cp.p, &w->rid, w->t, 2, 1, w->info);
    w->e = edge_of("sig", "node", w->info, 2);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    comm_pair_fini(&w->cp);
    mstar_edge_clear(&w->e);
    free(w->t[0].data);
    free(w->t[1].data);
    free(w);
    return 0;
}

/* The consumer hands every delivered tensor back and the producer takes the ACKs: both empty. */
static void release_all(world *w)
{
    for (int i = 0; i < 2; i++)
        assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info[i].uuid, 1));
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
}

/* A target's release: counts its calls and checks the pointer it is given. */
static int released;
static void *released_data;

static void count_release(void *ctx, void *data)
{
    assert_ptr_equal(ctx, &released);
    released_data = data;
    released++;
}

/* A target's bytes land at the caller's pointer and nowhere past nbytes; the node's tensor is
 * that pointer; the other descriptor lands as before; both are ACKed; the caller's memory
 * survives the tensor's release (a stack buffer: freeing it would abort), which calls the
 * target's release once. */
static void test_lands_in_target(void **state)
{
    world *w = *state;
    _Alignas(64) uint8_t buf[4000 + 64];
    memset(buf, 0xA5, sizeof(buf));
    released = 0;
    mstar_read_target tg = { .uuid = w->info[0].uuid,
                             .data = buf,
                             .capacity = sizeof(buf),
                             .stream = NULL,
                             .release = count_release,
                             .release_ctx = &released };
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &w->e, 1, &tg, 1, NULL));
    collect_ready(w->cp.c, 1);
    assert_int_equal(released, 0);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->cp.c, w->info[0].uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), buf);
    assert_memory_equal(buf, w->t[0].data, 4000);
    for (size_t i = 4000; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0xA5);
    check_bytes(w->cp.c, w->info[0].uuid, &w->t[0]);
    check_bytes(w->cp.c, w->info[1].uuid, &w->t[1]);
    assert_mstar_ok(mstar_comm_get_tensor(w->cp.c, w->info[1].uuid, &got));
    assert_ptr_not_equal(mstar_tensor_ptr(&got), buf);
    for (int i = 0; i < 2; i++)
        assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", w->info[i].uuid), 1);
    release_all(w);
    assert_int_equal(released, 1);
    assert_ptr_equal(released_data, buf);
    assert_memory_equal(buf, w->t[0].data, 4000); /* still the caller's, untouched */
}

/* A descriptor that comes twice in one call is read once, into the target. */
static void test_twice_in_one_call(void **state)
{
    world *w = *state;
    mstar_tensor_info three[3] = { w->info[0], w->info[1], w->info[0] };
    mstar_edge e = edge_of("sig", "node", three, 3);
    void *buf = malloc(4000);
    mstar_read_target tg = {
        .uuid = w->info[0].uuid, .data = buf, .capacity = 4000, .stream = NULL
    };
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &e, 1, &tg, 1, NULL));
    collect_ready(w->cp.c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->cp.c, w->info[0].uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), buf);
    assert_memory_equal(buf, w->t[0].data, 4000);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info[0].uuid, 1));
    release_all(w);
    mstar_edge_clear(&e);
    free(buf);
}

/* `targets` are refused with MSTAR_EINVAL whose message says `why`, and nothing started: the
 * consumer holds nothing, no ACK went, the caller's buffer is untouched. */
static void expect_refused(world *w, const mstar_edge *e, const mstar_read_target *targets,
                           uint32_t n, const char *why)
{
    assert_mstar_status(mstar_comm_start_read_into(w->cp.c, &w->rid, e, 1, targets, n, NULL),
                        MSTAR_EINVAL);
    if (strstr(mstar_last_error(), why) == NULL)
        fail_msg("error '%s' does not say '%s'", mstar_last_error(), why);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_false(mstar_comm_has_inflight_reads(w->cp.c, &w->rid));
    assert_int_equal(bus_count(&w->cp.b, "worker_0"), 0);
}

/* More than a few descriptors and targets in one call (start_read indexes them in hash maps past
 * FEW, comm_read.c; the tests above take its linear scans): ten tensors, each read into a target
 * of its own, every descriptor twice in one edge; eleven targets with the last naming the first
 * again are refused. */
static void test_many_targets(void **state)
{
    world *w = *state;
    enum { N = 10 };
    mstar_tensor t[N];
    mstar_tensor_info info[2 * N];
    for (uint32_t i = 0; i < N; i++)
        t[i] = make_vector(MSTAR_DTYPE_FLOAT32, 100 + i, 20 + i);
    produce(w->cp.p, &w->rid, t, N / 2, 1, info); /* at most 8 at a time */
    produce(w->cp.p, &w->rid, t + N / 2, N / 2, 1, info + N / 2);
    memcpy(&info[N], info, N * sizeof(*info));
    mstar_edge e = edge_of("many", "node", info, 2 * N);
    _Alignas(64) float bufs[N][128];
    mstar_read_target tg[N + 1];
    for (uint32_t i = 0; i <= N; i++)
        tg[i] = (mstar_read_target){ .uuid = info[i % N].uuid,
                                     .data = bufs[i % N],
                                     .capacity = sizeof(bufs[0]) };
    expect_refused(w, &e, tg, N + 1, "a second time");
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &e, 1, tg, N, NULL));
    collect_ready(w->cp.c, 1);
    for (uint32_t i = 0; i < N; i++) {
        mstar_tensor got;
        assert_mstar_ok(mstar_comm_get_tensor(w->cp.c, info[i].uuid, &got));
        assert_ptr_equal(mstar_tensor_ptr(&got), bufs[i]);
        assert_memory_equal(bufs[i], t[i].data, (100 + i) * sizeof(float));
        assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", info[i].uuid), 2);
        assert_mstar_ok(mstar_comm_dereference(w->cp.c, info[i].uuid, 2));
    }
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    mstar_edge_clear(&e);
    for (uint32_t i = 0; i < N; i++)
        free(t[i].data);
}

/* Two descriptors of one uuid from two entities in one call are refused, whether the call is
 * small enough for start_read's linear scan (2 descriptors) or takes its hash map (20). */
static void test_twin_in_one_call(void **state)
{
    world *w = *state;
    mstar_tensor_info info[20];
    for (uint32_t i = 0; i < 20; i++)
        info[i] = w->info[i % 2];
    for (uint32_t n = 2; n <= 20; n += 18) {
        info[n - 2] = w->info[0];
        snprintf(info[n - 1].source_entity, sizeof(info[n - 1].source_entity), "twin");
        info[n - 1].uuid = w->info[0].uuid;
        mstar_edge e = edge_of("sig", "node", info, n);
        assert_mstar_status(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &e, 1, NULL),
                            MSTAR_EEXIST);
        if (strstr(mstar_last_error(), "from 'worker_0' and 'twin'") == NULL)
            fail_msg("%u descriptors: error '%s'", n, mstar_last_error());
        assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
        mstar_edge_clear(&e);
    }
}

static void test_bad_targets(void **state)
{
    world *w = *state;
    uint8_t buf[4000], other[1200];
    memset(buf, 0x5A, sizeof(buf));
    mstar_tensor_id a = w->info[0].uuid, b = w->info[1].uuid;
    released = 0;
    mstar_read_target small = { .uuid = a,
                                .data = buf,
                                .capacity = 3999,
                                .stream = NULL,
                                .release = count_release,
                                .release_ctx = &released };
    expect_refused(w, &w->e, &small, 1, "more bytes than the capacity");
    mstar_read_target unknown[2] = {
        { .uuid = a,
          .data = buf,
          .capacity = 4000,
          .release = count_release,
          .release_ctx = &released },
        { .uuid = a + 1000, .data = other, .capacity = 1200 },
    };
    expect_refused(w, &w->e, unknown, 2, "which no edge of the call carries");
    assert_int_equal(released, 0); /* a refused call leaves the buffers to the caller */
    mstar_read_target twice[2] = { { .uuid = a, .data = buf, .capacity = 4000, .stream = NULL },
                                   { .uuid = a, .data = other, .capacity = 1200, .stream = NULL } };
    expect_refused(w, &w->e, twice, 2, "a second time");
    mstar_read_target null_data[2] = {
        { .uuid = a, .data = buf, .capacity = 4000, .stream = NULL },
        { .uuid = b, .data = NULL, .capacity = 1200, .stream = NULL }
    };
    expect_refused(w, &w->e, null_data, 2, "data is NULL");
    expect_refused(w, &w->e, NULL, 1, "no array");
    for (size_t i = 0; i < sizeof(buf); i++)
        assert_int_equal(buf[i], 0x5A);
    /* A stream of another backend than the manager's (which has none: any stream passes). */
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_comm *dev = make_comm_with("worker_2", MSTAR_TRANSPORT_FILES, w->cp.dir, &w->cp.sc, be);
    mstar_backend *be2;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be2));
    mstar_stream *s2;
    assert_mstar_ok(mstar_stream_create(be2, MSTAR_STREAM_NON_BLOCKING, &s2));
    mstar_read_target foreign = { .uuid = a, .data = buf, .capacity = 4000, .stream = s2 };
    assert_mstar_status(mstar_comm_start_read_into(dev, &w->rid, &w->e, 1, &foreign, 1, NULL),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "another backend"));
    assert_int_equal(mstar_comm_num_tensors(dev), 0);
    mstar_stream_destroy(s2);
    mstar_backend_destroy(be2);
    mstar_comm_destroy(dev);
    mstar_backend_destroy(be);
    /* The request is still usable: the same read with a good target goes through. */
    mstar_read_target good[2] = { { .uuid = a, .data = buf, .capacity = 4000, .stream = NULL },
                                  { .uuid = b, .data = other, .capacity = 1200, .stream = NULL } };
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &w->e, 1, good, 2, NULL));
    collect_ready(w->cp.c, 1);
    assert_memory_equal(buf, w->t[0].data, 4000);
    assert_memory_equal(other, w->t[1].data, 1200);
    release_all(w);
}

/* Descriptors not read into anything cannot have a target: a tensor already held, one of this
 * entity's own (self-delivery, the only read the local transport serves), a fan-in shard. */
static void test_unreadable_targets(void **state)
{
    world *w = *state;
    uint8_t buf[4000];
    mstar_read_target tg = {
        .uuid = w->info[0].uuid, .data = buf, .capacity = sizeof(buf), .stream = NULL
    };
    /* Held: read plainly first, then named again. */
    mstar_edge one = edge_of("sig", "node", w->info, 1);
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &one, 1, NULL));
    collect_ready(w->cp.c, 1);
    assert_mstar_status(mstar_comm_start_read_into(w->cp.c, &w->rid, &one, 1, &tg, 1, NULL),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "already held"));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 1);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info[0].uuid, 1));
    mstar_edge_clear(&one);
    /* Self-delivery, on the local transport. */
    mstar_comm *local = make_comm("worker_5", MSTAR_TRANSPORT_LOCAL, NULL, &w->cp.sp);
    mstar_rid rid = mstar_rid_from_int(8);
    mstar_tensor_info own;
    produce(local, &rid, &w->t[0], 1, 1, &own);
    mstar_edge e = edge_of("sig", "node", &own, 1);
    tg.uuid = own.uuid;
    assert_mstar_status(mstar_comm_start_read_into(local, &rid, &e, 1, &tg, 1, NULL), MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "this entity's own"));
    assert_mstar_ok(mstar_comm_start_read_into(local, &rid, &e, 1, NULL, 0, NULL));
    collect_ready(local, 1);
    assert_mstar_ok(mstar_comm_dereference(local, own.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(local), 0);
    mstar_edge_clear(&e);
    mstar_comm_destroy(local);
    /* A shard of a sharded input: the fan-in gathers it elsewhere. */
    mstar_edge sharded = edge_of("sig", "node", &w->info[1], 1);
    sharded.total_fanin = 2;
    tg.uuid = w->info[1].uuid;
    assert_mstar_status(mstar_comm_start_read_into(w->cp.c, &w->rid, &sharded, 1, &tg, 1, NULL),
                        MSTAR_EINVAL);
    assert_non_null(strstr(mstar_last_error(), "shard"));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    mstar_edge_clear(&sharded);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
}

/* No backend: a named stream is synchronised before the read, which lands as a host copy. */
static void test_stream_without_backend(void **state)
{
    world *w = *state;
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(be, MSTAR_STREAM_NON_BLOCKING, &s));
    uint8_t buf[4000];
    mstar_read_target tg = {
        .uuid = w->info[0].uuid, .data = buf, .capacity = sizeof(buf), .stream = s
    };
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &w->e, 1, &tg, 1, NULL));
    collect_ready(w->cp.c, 1);
    assert_memory_equal(buf, w->t[0].data, 4000);
    release_all(w);
    mstar_stream_destroy(s);
    mstar_backend_destroy(be);
}

/* ---- ordering on the host backend's asynchronous streams --------------------------------- */

/* A gate the caller's stream is held at until the test opens it. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };

static void gate_wait(void *args)
{
    (void)args;
    pthread_mutex_lock(&gate.mu);
    while (!gate.open)
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
}

static void gate_open(void)
{
    pthread_mutex_lock(&gate.mu);
    gate.open = true;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

/* The caller's later work on its stream: what the target holds when it runs. */
typedef struct snapshot_args {
    const uint8_t *from;
    uint8_t *to;
    size_t n;
} snapshot_args;

static void snapshot(void *args)
{
    snapshot_args a;
    memcpy(&a, args, sizeof(a));
    memcpy(a.to, a.from, a.n);
}

/* The copy into the target waits for the caller's earlier work on its stream (held at a gate:
 * the target keeps its old bytes), and the caller's work queued after the call sees the new
 * bytes — with no synchronisation by the manager, whose read is queued behind the gate. */
static void test_host_backend_stream_order(void **state)
{
    world *w = *state;
    mstar_backend *be;
    assert_mstar_ok(mstar_backend_create(mstar_device_cpu(), &be));
    mstar__host_backend_set_async(be, true);
    mstar_comm *c = make_comm_with("worker_2", MSTAR_TRANSPORT_ARENA, w->cp.dir, &w->cp.sc, be);
    mstar_stream *s;
    assert_mstar_ok(mstar_stream_create(be, MSTAR_STREAM_NON_BLOCKING, &s));
    gate.open = false;
    assert_mstar_ok(mstar_launch(s, gate_wait, NULL, 0));
    uint8_t *buf = malloc(4000), *seen = calloc(1, 4000);
    memset(buf, 0x77, 4000);
    mstar_read_target tg = { .uuid = w->info[0].uuid, .data = buf, .capacity = 4000, .stream = s };
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_into(c, &w->rid, &w->e, 1, &tg, 1, &list));
    snapshot_args a = { buf, seen, 4000 };
    assert_mstar_ok(mstar_launch(s, snapshot, &a, sizeof(a)));
    assert_int_equal(list.n, 1);
    /* Held behind the gate, so the copy has not run (it is queued, not raced). */
    assert_int_equal(mstar_completion_poll(list.items[0]), MSTAR_EAGAIN);
    for (size_t i = 0; i < 4000; i++)
        assert_int_equal(buf[i], 0x77);
    gate_open();
    assert_mstar_ok(mstar_stream_synchronize(s));
    assert_memory_equal(seen, w->t[0].data, 4000);
    assert_mstar_ok(mstar_completion_wait(list.items[0], -1));
    mstar_completion_list_clear(&list);
    collect_ready(c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(c, w->info[0].uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), buf);
    /* The untargeted one landed in the backend's memory as before. */
    uint8_t back[1200];
    assert_mstar_ok(mstar_comm_get_tensor_copy(c, w->info[1].uuid, back, sizeof(back), &got));
    assert_memory_equal(back, w->t[1].data, 1200);
    for (int i = 0; i < 2; i++)
        assert_mstar_ok(mstar_comm_dereference(c, w->info[i].uuid, 1));
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
    /* The stream goes first: its queued waits read the manager's events. */
    mstar_stream_destroy(s);
    mstar_comm_destroy(c);
    mstar_backend_destroy(be);
    free(buf);
    free(seen);
}

#define BOTH(fn)                                                                      \
    cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, (void *)&KINDS[0]), \
        cmocka_unit_test_prestate_setup_teardown(fn, setup, teardown, (void *)&KINDS[1])

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_lands_in_target),
        BOTH(test_twice_in_one_call),
        BOTH(test_many_targets),
        BOTH(test_twin_in_one_call),
        BOTH(test_bad_targets),
        BOTH(test_unreadable_targets),
        BOTH(test_stream_without_backend),
        cmocka_unit_test_prestate_setup_teardown(test_host_backend_stream_order, setup, teardown,
                                                 (void *)&KINDS[1]),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
