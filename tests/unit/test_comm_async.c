/*
 * test_comm_async.c — reads whose copies are still running when start_read_tensors returns, as
 * a device copy or a remote engine leaves them. The consumer's transport is wrapped so every
 * read returns a completion the test finishes by hand; everything else is the real file
 * transport. Covers: no ACK and no delivery before the copy landed (T-5, I-4),
 * has_inflight_reads and the drain, soft cleanup with a read in flight (T-2, T-3), force
 * cleanup refused while reads run, a failed read reported once and not poisoning later polls
 * (T-11), the RX time of a read running from submit to landing, and the completion handle API;
 * and for a read into the caller's buffer (mstar_comm_start_read_into), that neither a cleanup
 * while it copies nor its failure frees that buffer.
 */
#include "comm_harness.h"

#include "tensors/comm_internal.h"
#include "tensors/completion.h"

#include <poll.h>
#include <pthread.h>
#include <time.h>

/* ---- a transport whose reads finish when the test says ---------------------------------- */

typedef struct delayed {
    mstar__transport base;
    mstar__transport_ops ops;
    mstar__transport *inner;
    mstar_completion *held[16];
    int n;
} delayed;

static mstar__transport *inner_of(mstar__transport *t)
{
    return ((delayed *)t)->inner;
}

static mstar_status d_stage(mstar__transport *t, mstar__stage_item *items, size_t n)
{
    return inner_of(t)->ops->stage(inner_of(t), items, n);
}

static void d_release(mstar__transport *t, mstar_tensor_id uuid, const mstar_tensor *tensor)
{
    inner_of(t)->ops->release(inner_of(t), uuid, tensor);
}

static mstar_status d_check(mstar__transport *t, const mstar_tensor_info *info)
{
    return inner_of(t)->ops->check(inner_of(t), info);
}

static mstar_status d_read(mstar__transport *t, mstar__read_item *items, size_t n,
                           mstar_completion **done)
{
    delayed *d = (delayed *)t;
    mstar_completion *inner_done = NULL;
    mstar_status st = d->inner->ops->read(d->inner, items, n, &inner_done);
    assert_null(inner_done);
    if (st != MSTAR_OK)
        return st;
    assert_mstar_ok(mstar__completion_create(d->base.env->notice, done));
    d->held[d->n++] = mstar__completion_retain(*done);
    return MSTAR_OK;
}

static void d_destroy(mstar__transport *t)
{
    delayed *d = (delayed *)t;
    d->inner->ops->destroy(d->inner);
    for (int i = 0; i < d->n; i++)
        mstar_completion_release(d->held[i]);
    free(d);
}

static delayed *wrap(mstar_comm *c)
{
    delayed *d = calloc(1, sizeof(*d));
    d->inner = c->transport;
    d->ops = *c->transport->ops;
    d->ops.stage = d_stage;
    d->ops.release = d_release;
    d->ops.check = d_check;
    d->ops.read = d_read;
    d->ops.destroy = d_destroy;
    d->ops.maintain = NULL;
    d->base.ops = &d->ops;
    d->base.env = c->transport->env;
    c->transport = &d->base;
    return d;
}

/* ---- fixtures --------------------------------------------------------------------------- */

typedef struct world {
    comm_pair cp;
    delayed *d;
    mstar_tensor t;
    mstar_tensor_info info;
    mstar_edge e;
    mstar_rid rid;
} world;

static int setup(void **state)
{
    world *w = calloc(1, sizeof(*w));
    comm_pair_init(&w->cp, "async");
    comm_pair_make(&w->cp, MSTAR_TRANSPORT_FILES);
    w->d = wrap(w->cp.c);
    w->rid = mstar_rid_from_int(42);
    w->t = make_vector(MSTAR_DTYPE_FLOAT32, 100, 3);
    mstar_output o = output_of("x", w->t);
    assert_mstar_ok(
        mstar_comm_store_and_return_tensor_info(w->cp.p, &w->rid, &o, 1, NULL, &w->info));
    assert_mstar_ok(mstar_comm_increment_ref(w->cp.p, w->info.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->cp.p, &w->rid, &w->info, 1));
    w->e = edge_of("x", "node", &w->info, 1);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    comm_pair_fini(&w->cp);
    mstar_edge_clear(&w->e);
    free(w->t.data);
    free(w);
    return 0;
}

static bool fd_readable(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, 0) == 1;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_ack_only_after_copy_landed(void **state)
{
    world *w = *state;
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, &list));
    assert_int_equal(list.n, 1);
    assert_int_equal(mstar_completion_poll(list.items[0]), MSTAR_EAGAIN);
    assert_true(mstar_comm_has_inflight_reads(w->cp.c, &w->rid));
    mstar_ready_set set;
    collect_ready(w->cp.c, 0);
    assert_int_equal(bus_count(&w->cp.b, "worker_0"), 0); /* the producer may not reuse it yet */
    assert_false(fd_readable(mstar_comm_event_fd(w->cp.c)));
    mstar__completion_finish(w->d->held[0], MSTAR_OK, NULL);
    assert_true(fd_readable(mstar_comm_event_fd(w->cp.c)));
    mstar_comm_event_drain(w->cp.c);
    assert_false(fd_readable(mstar_comm_event_fd(w->cp.c)));
    assert_mstar_ok(mstar_completion_poll(list.items[0]));
    assert_mstar_ok(mstar_completion_wait(list.items[0], -1));
    assert_false(mstar_comm_has_inflight_reads(w->cp.c, &w->rid));
    expect_ready(w->cp.c, &set, 1);
    assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", w->info.uuid), 1);
    mstar_ready_set_clear(&set);
    mstar_completion_list_clear(&list);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
}

/* T-2 / T-3: cleanup while a read is copying neither ACKs it (the producer would free the
 * source mid-copy) nor frees its buffer; force cleanup is refused until it lands. When it
 * lands it is ACKed and dropped, never delivered. */
static void test_cleanup_with_read_in_flight(void **state)
{
    world *w = *state;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, NULL));
    assert_mstar_ok(mstar_comm_cleanup_request(w->cp.c, &w->rid));
    assert_int_equal(bus_count(&w->cp.b, "worker_0"), 0);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 1); /* the buffer the copy writes into */
    assert_true(mstar_comm_has_inflight_reads(w->cp.c, &w->rid));
    assert_mstar_status(mstar_comm_force_cleanup_request(w->cp.c, &w->rid), MSTAR_ESTATE);
    mstar__completion_finish(w->d->held[0], MSTAR_OK, NULL);
    collect_ready(w->cp.c, 0);
    assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", w->info.uuid), 1);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_false(mstar_comm_has_inflight_reads(w->cp.c, &w->rid));
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->cp.c, &w->rid));
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
}

/* T-11: a failed read is reported once, its references released and its delivery ended at the
 * producer (failed_tensor_ids); the next poll is clean. */
static void test_failed_read_does_not_poison(void **state)
{
    world *w = *state;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, NULL));
    mstar__completion_finish(w->d->held[0], MSTAR_EREMOTE, "the NIC went away");
    mstar_ready_set set;
    expect_ready(w->cp.c, &set, 0);
    assert_int_equal(set.nfailed, 1);
    assert_int_equal(set.failed[0].status, MSTAR_EREMOTE);
    assert_string_equal(set.failed[0].edge_name, "x");
    assert_non_null(strstr(set.failed[0].message, "NIC"));
    mstar_ready_set_clear(&set);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_int_equal(bus_count(&w->cp.b, "worker_0"), 1);
    assert_int_equal(w->cp.b.q[0].msg.nuuids, 1); /* failed_tensor_ids */
    assert_int_equal(w->cp.b.q[0].msg.ncounts, 0);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
    expect_ready(w->cp.c, &set, 0);
    assert_int_equal(set.nfailed, 0);
    mstar_ready_set_clear(&set);
}

/* An asynchronous read's RX time runs from its submit to its landing (a device copy or a remote
 * read is still running when start_read returns): the span the test keeps the copy running is
 * inside it, and it is no longer than everything the test saw from before the submit. Both bounds
 * come from the one monotonic clock, so neither depends on how fast the machine is. */
static void test_rx_time_runs_to_landing(void **state)
{
    world *w = *state;
    uint64_t before = mstar__now_ns();
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, NULL));
    uint64_t submitted = mstar__now_ns();
    struct timespec copying = { 0, 30 * 1000 * 1000 };
    nanosleep(&copying, NULL);
    uint64_t landing = mstar__now_ns();
    mstar__completion_finish(w->d->held[0], MSTAR_OK, NULL);
    uint64_t landed = mstar__now_ns();
    collect_ready(w->cp.c, 1);
    mstar_rx_info *rx;
    uint32_t nrx;
    assert_mstar_ok(mstar_comm_get_rx_info(w->cp.c, &w->rid, &rx, &nrx));
    assert_int_equal(nrx, 1);
    assert_int_equal(rx[0].count, 1);
    assert_int_equal(rx[0].num_bytes, (int64_t)w->info.nbytes);
    double time_s = rx[0].time_s;
    free(rx);
    if (time_s < (double)(landing - submitted) * 1e-9 || time_s > (double)(landed - before) * 1e-9)
        fail_msg("RX time %.6f s is not within [%.6f, %.6f] s (submit to landing)", time_s,
                 (double)(landing - submitted) * 1e-9, (double)(landed - before) * 1e-9);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
}

static void test_completion_api(void **state)
{
    world *w = *state;
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, &list));
    mstar_completion *c = list.items[0];
    assert_mstar_status(mstar_completion_wait(c, 0), MSTAR_ETIMEDOUT);
    assert_mstar_status(mstar_completion_wait(c, 20), MSTAR_ETIMEDOUT);
    mstar__completion_finish(c, MSTAR_OK, NULL);
    mstar__completion_finish(c, MSTAR_EIO, "ignored: only the first finish counts");
    assert_mstar_ok(mstar_completion_wait(c, 0));
    assert_mstar_status(mstar_completion_poll(NULL), MSTAR_EINVAL);
    mstar_completion_release(NULL);
    mstar_completion_list_clear(&list);
    assert_int_equal(list.n, 0);
    collect_ready(w->cp.c, 1);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
}

static void *finish_later(void *arg)
{
    struct timespec ts = { 0, 20 * 1000000L };
    nanosleep(&ts, NULL);
    mstar__completion_finish(arg, MSTAR_OK, NULL);
    return NULL;
}

/* A copy landing on another thread (a stream callback, an engine's progress thread): the loop
 * blocked in poll on the event fd wakes up, and a waiter on the handle is released. */
static void test_completion_from_another_thread(void **state)
{
    world *w = *state;
    mstar_completion_list list;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, &w->e, 1, &list));
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, finish_later, w->d->held[0]), 0);
    struct pollfd pfd = { mstar_comm_event_fd(w->cp.c), POLLIN, 0 };
    assert_int_equal(poll(&pfd, 1, 10000), 1);
    assert_mstar_ok(mstar_completion_wait(list.items[0], -1));
    pthread_join(th, NULL);
    mstar_comm_event_drain(w->cp.c);
    mstar_completion_list_clear(&list);
    collect_ready(w->cp.c, 1);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c) + mstar_comm_num_tensors(w->cp.p), 0);
}

/* The consumer's sender, which lands a read (`finish`, once) as it sends: as a copy finishing
 * on another thread can while get_ready_tensors is between its passes over the reads. */
typedef struct landing_sender {
    sender inner;
    mstar_completion *finish;
} landing_sender;

static mstar_status send_then_land(void *ctx, const char *peer, mstar_msg *msg)
{
    landing_sender *s = ctx;
    if (s->finish != NULL) {
        mstar__completion_finish(s->finish, MSTAR_OK, NULL);
        s->finish = NULL;
    }
    return bus_send(&s->inner, peer, msg);
}

/* Two reads of one request; the first lands, and the second lands while the poll that collects
 * the first sends its ACK. The collection works from what had landed when it looked: it neither
 * overruns what it sized nor hands over the second edge unACKed — the poll collects that one
 * on its own, ACK included, before it returns. */
static void test_read_landing_during_a_poll(void **state)
{
    world *w = *state;
    mstar_tensor t2 = make_vector(MSTAR_DTYPE_INT32, 50, 8);
    mstar_tensor_info info2;
    mstar_output o = output_of("y", t2);
    assert_mstar_ok(mstar_comm_store_and_return_tensor_info(w->cp.p, &w->rid, &o, 1, NULL, &info2));
    assert_mstar_ok(mstar_comm_increment_ref(w->cp.p, info2.uuid, 1));
    assert_mstar_ok(mstar_comm_register_for_send(w->cp.p, &w->rid, &info2, 1));
    mstar_edge edges[2] = { w->e, edge_of("y", "node", &info2, 1) };
    landing_sender ls = { w->cp.sc, NULL };
    w->cp.c->send = send_then_land;
    w->cp.c->send_ctx = &ls;
    assert_mstar_ok(mstar_comm_start_read_tensors(w->cp.c, &w->rid, edges, 2, NULL));
    assert_int_equal(w->d->n, 2);
    mstar__completion_finish(w->d->held[0], MSTAR_OK, NULL);
    ls.finish = w->d->held[1];
    mstar_ready_set set;
    expect_ready(w->cp.c, &set, 2);
    assert_null(ls.finish); /* the second read landed during this poll */
    assert_string_equal(set.edges[0].name, "x");
    assert_string_equal(set.edges[1].name, "y");
    assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", w->info.uuid), 1);
    assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", info2.uuid), 1);
    mstar_ready_set_clear(&set);
    collect_ready(w->cp.c, 0);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, info2.uuid, 1));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c) + mstar_comm_num_tensors(w->cp.p), 0);
    mstar_edge_clear(&edges[1]);
    free(t2.data);
}

/* A target's release: counts its calls in *ctx. */
static void count_release(void *ctx, void *data)
{
    (void)data;
    (*(int *)ctx)++;
}

/* Start reading the world's tensor into the caller's `buf`, counting releases in *released. */
static void read_into(world *w, uint8_t *buf, size_t n, int *released)
{
    mstar_read_target tg = { .uuid = w->info.uuid,
                             .data = buf,
                             .capacity = n,
                             .release = count_release,
                             .release_ctx = released };
    assert_mstar_ok(mstar_comm_start_read_into(w->cp.c, &w->rid, &w->e, 1, &tg, 1, NULL));
}

/* A read into the caller's buffer (on the stack: a manager freeing it would abort) while it
 * copies: the request's cleanup (forced: refused until it lands) drops the tensor and leaves the
 * buffer, which the copy finished writing, to the caller. */
static void test_read_into_cleanup_in_flight(void **state)
{
    world *w = *state;
    _Alignas(64) uint8_t buf[400];
    int released = 0;
    read_into(w, buf, sizeof(buf), &released);
    assert_mstar_ok(mstar_comm_cleanup_request(w->cp.c, &w->rid));
    assert_int_equal(released, 0); /* the copy still writes there */
    assert_mstar_status(mstar_comm_force_cleanup_request(w->cp.c, &w->rid), MSTAR_ESTATE);
    mstar__completion_finish(w->d->held[0], MSTAR_OK, NULL);
    collect_ready(w->cp.c, 0);
    assert_mstar_ok(mstar_comm_force_cleanup_request(w->cp.c, &w->rid));
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_int_equal(released, 1);
    assert_memory_equal(buf, w->t.data, sizeof(buf));
    assert_int_equal(bus_ack_count(&w->cp.b, "worker_0", w->info.uuid), 1);
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
}

/* A failed read into the caller's buffer is reported and dropped; the buffer stays the
 * caller's, and the request reads into it again. */
static void test_read_into_failed(void **state)
{
    world *w = *state;
    _Alignas(64) uint8_t buf[400];
    int released = 0;
    read_into(w, buf, sizeof(buf), &released);
    mstar__completion_finish(w->d->held[0], MSTAR_EREMOTE, "the NIC went away");
    mstar_ready_set set;
    expect_ready(w->cp.c, &set, 0);
    assert_int_equal(set.nfailed, 1);
    mstar_ready_set_clear(&set);
    assert_int_equal(mstar_comm_num_tensors(w->cp.c), 0);
    assert_int_equal(released, 1);  /* the manager is done with it */
    bus_drop(&w->cp.b, "worker_0"); /* the failure's ACK: the producer keeps the tensor */
    memset(buf, 0, sizeof(buf));
    read_into(w, buf, sizeof(buf), &released);
    mstar__completion_finish(w->d->held[1], MSTAR_OK, NULL);
    collect_ready(w->cp.c, 1);
    mstar_tensor got;
    assert_mstar_ok(mstar_comm_get_tensor(w->cp.c, w->info.uuid, &got));
    assert_ptr_equal(mstar_tensor_ptr(&got), buf);
    assert_memory_equal(buf, w->t.data, sizeof(buf));
    assert_mstar_ok(mstar_comm_dereference(w->cp.c, w->info.uuid, 1));
    bus_deliver(&w->cp.b, "worker_0", w->cp.p);
    assert_int_equal(mstar_comm_num_tensors(w->cp.p), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ack_only_after_copy_landed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cleanup_with_read_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_read_does_not_poison, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rx_time_runs_to_landing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completion_api, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completion_from_another_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_landing_during_a_poll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_into_cleanup_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_into_failed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
